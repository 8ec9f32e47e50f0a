#!/usr/bin/python3
"""bench/lease_bench.py: the database's own lease against a real etcd lease,
on loopback, in one interleaved run (issue 13, item 5).

    /usr/bin/python3 bench/lease_bench.py [--quick] [--rounds N] [--seconds S]
                                          [--raw FILE] [--no-sqlite]

Starts its own servers (data under one temporary directory on the same
disk, all stopped whatever happens): etcd (Debian's etcd-server, default
timing flags, which fsyncs its WAL before it answers a write), and two
throwaway PostgreSQL 15 clusters with fence installed, one with fsync=on
(synchronous_commit=on: a commit returns after its WAL is on disk) and one
with fsync=off. SQLite runs on WAL files with synchronous=FULL (a commit
fsyncs the WAL) and synchronous=NORMAL (it does not).

Two operations are timed, each on one connection of one client thread,
calls back to back:

  cycle   take the lock, make the first fenced write with its token, let go
      etcd    LeaseGrant (10 s TTL); a Txn that puts the lock key with the
              lease if it does not exist (create_revision == 0) and reads
              it back, the token being its mod_revision (the README's
              "Where the token comes from"); then the fenced write into the
              store; then LeaseRevoke (which deletes the key)
      fence   fence_acquire(resource, holder, 10000) and the same fenced
              write's fence_check and UPDATE in one transaction (PostgreSQL;
              SQLite: fence_acquire in autocommit, a commit of its own, then
              the fenced write's transaction); then fence_release
      The fenced write is the same in both: BEGIN; SELECT fence_check(r,
      token); UPDATE lease_bench SET n = n + 1, tok = token WHERE id = cell;
      COMMIT. Each store (PostgreSQL fsync on/off, SQLite FULL/NORMAL) has
      an etcd cell writing into it and a fence cell, so that every ratio is
      of two cycles that end in the same kind of commit.
  renew   extend a live lease
      etcd    LeaseKeepAlive: one request and its answer on one long-lived
              stream (as etcd's Go client keeps one), and, second line,
              python-etcd3's Lease.refresh(), which opens a stream per call.
              etcd answers a keepalive from the leader's memory: it writes
              nothing to its WAL and fsyncs nothing
      fence   SELECT fence_renew(resource, holder, token, ttl) in
              autocommit; PostgreSQL flushes its WAL before it returns (and
              fsyncs it with fsync=on), SQLite commits its own transaction.
              ttl alternates between 10000 and 10001 ms: two renewals in the
              same millisecond would set the same expiry, which SQLite does
              not write at all (an unchanged row), and a holder renewing
              every TTL/3 always moves its expiry

Interleaving: after one untimed warm-up batch per cell, ROUNDS rounds each
run every cell once for SECONDS (full) or a fixed count of calls (--quick),
the cell order rotating by one each round, so that the etcd and the
in-database cells alternate and the machine's drift falls on all alike.
Per cell: calls per second (calls over the time spent in them: one client,
so 1 / mean latency) and latency percentiles p50/p95/p99 (nearest rank
over every timed call); for cycles also the p50 of each step; and the
calls per second of each round, so that a ratio's spread can be given
(lowest and highest per-round ratio, paired within a round).

What committed is checked, not only what was answered (a failed check is
a "leasecheck ... FAIL" row and exit status 1): every grant's token is
above the cell's previous one, every write was accepted, the table's
counter equals the number of cycles, fence_current is the last token,
every release returned true and the lock is free at the end (etcd: the key
is gone; fence: another holder is granted a greater token at once), every
renew succeeded.

Raw rows (tab-separated) are appended to FILE (default
bench/results/lease-raw.tsv, emptied first when it is the default), in the
format of bench/run.sh's raw.tsv; the table printed at the end is
bench/report.py's lease section. bench/run.sh runs this as the "lease"
part of make bench (--quick in make bench-quick); tests/pg_lease_bench.py
runs --quick in make check and asserts on the leasecheck rows only.
Nothing asserts on a timing.
"""
import argparse
import atexit
import os
import queue
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "lockservice"))
import harness  # noqa: E402  (process start/stop with parent-death signals)

TTL_S = 10                  # the etcd lease of a cycle (revoked at its end)
TTL_MS = TTL_S * 1000       # the same for fence
HOLDER = "bench"
IS_ROOT = os.geteuid() == 0


# ---------------------------------------------------------------------------
# servers

class Etcd:
    """etcd with its default timing flags (harness.Etcd shortens them for
    1-second TTLs; a benchmark should time the etcd users run). spawn()
    returns at once, so that the clusters' initdb runs meanwhile; ready()
    waits. Both from the main thread: the parent-death signal is the
    spawning thread's."""

    def __init__(self, work):
        self.work, self.attempt = work, 0

    def spawn(self):
        self.attempt += 1
        self.port, peer = harness.free_port(), harness.free_port()
        self.log = os.path.join(self.work, "etcd.log")
        url = lambda p: "http://127.0.0.1:%d" % p
        self.proc = harness.CHILDREN.spawn("etcd", [
            "etcd", "--name", "lease-bench", "--data-dir", os.path.join(self.work, "etcd-%d" % self.attempt),
            "--listen-client-urls", url(self.port), "--advertise-client-urls", url(self.port),
            "--listen-peer-urls", url(peer), "--initial-advertise-peer-urls", url(peer),
            "--initial-cluster", "lease-bench=" + url(peer), "--initial-cluster-state", "new"],
            log=open(self.log, "ab"))

    def ready(self):
        import etcd3
        for attempt in range(3):
            try:
                # a gRPC channel made before the port listens backs off for
                # seconds between reconnects: wait for the port first
                harness.wait_until(
                    lambda: socket.create_connection(("127.0.0.1", self.port), 1).close() is None,
                    harness.STARTUP_TIMEOUT, "etcd's client port", self.proc)
                c = etcd3.client(host="127.0.0.1", port=self.port, timeout=2)
                harness.wait_until(lambda: c.status().leader is not None, harness.STARTUP_TIMEOUT,
                                   "etcd", self.proc)
                self.version = c.status().version
                c.close()
                return
            except RuntimeError as e:       # a port taken in between: other ports
                if attempt == 2:
                    raise RuntimeError("etcd did not start: %s; log: %s" % (e, harness.tail(self.log)))
                harness.CHILDREN.stop(self.proc)
                self.spawn()


def pg_ids():
    import pwd
    pw = pwd.getpwnam("postgres")
    return pw.pw_uid, pw.pw_gid


class Pg:
    """A throwaway cluster (as tests/pg_cluster.sh makes one) with fsync on
    or off; the postmaster is a direct child so that the parent-death signal
    reaches it."""

    def __init__(self, work, name, fsync, install, bindir):
        self.name, self.fsync, self.install, self.bindir = name, fsync, install, bindir
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        if IS_ROOT:
            os.chown(self.dir, *pg_ids())
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.port = harness.free_port()     # names the socket only: no TCP

    def initdb(self):
        run_as = ["runuser", "-u", "postgres", "--"] if IS_ROOT else []
        return subprocess.Popen(run_as + [os.path.join(self.bindir, "initdb"), "-D", self.data,
                                          "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8",
                                          "--locale=C.UTF-8"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def start(self):
        logf = open(self.log, "ab")
        if IS_ROOT:
            os.chown(self.log, *pg_ids())
        self.proc = harness.CHILDREN.spawn(self.name, [
            os.path.join(self.bindir, "postgres"), "-D", self.data, "-k", self.dir,
            "-p", str(self.port), "-c", "listen_addresses=", "-c", "extension_destdir=" + self.install,
            "-c", "fsync=" + ("on" if self.fsync else "off"), "-c", "synchronous_commit=on",
            "-c", "autovacuum=off", "-c", "max_connections=20"],
            log=logf, user="postgres", pdeathsig="QUIT", graceful=signal.SIGINT, grace=30)

    def connect(self, autocommit=True):
        import psycopg
        return psycopg.connect(host=self.dir, port=self.port, user="postgres", dbname="postgres",
                               autocommit=autocommit, connect_timeout=10)

    def ready(self):
        harness.wait_until(lambda: self.connect().close() is None, harness.STARTUP_TIMEOUT,
                           "postgres (%s)" % self.name, self.proc)
        with self.connect() as c:
            c.execute("CREATE EXTENSION fence")
            c.execute("CREATE TABLE lease_bench (id text PRIMARY KEY, n bigint NOT NULL, tok bigint)")
            self.settings = ", ".join("%s=%s" % r for r in c.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('fsync', 'synchronous_commit', 'wal_sync_method', 'full_page_writes') ORDER BY name"))
            self.version = c.execute("SHOW server_version").fetchone()[0]


def start_pg(work):
    bindir = subprocess.check_output(["pg_config", "--bindir"], text=True).strip()
    install = os.path.join(work, "install")
    for args in (["with_llvm=no"], ["with_llvm=no", "install", "DESTDIR=" + install]):
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext")] + args, check=True,
                       stdout=subprocess.DEVNULL)
    on, off = Pg(work, "pg-fsync", True, install, bindir), Pg(work, "pg-nofsync", False, install, bindir)
    for pg, p in [(pg, pg.initdb()) for pg in (on, off)]:    # both initdbs at once
        out, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError("initdb (%s) failed:\n%s" % (pg.name, out[-2000:]))
    for pg in (on, off):
        pg.start()
    for pg in (on, off):
        pg.ready()
    return on, off


# ---------------------------------------------------------------------------
# the stores and their fenced write

class PgStore:
    kind = "pg"

    def __init__(self, pg):
        self.pg = pg

    def open(self, cell):
        """A connection of the cell's own, and the cell's counter row."""
        c = self.pg.connect()
        c.execute("INSERT INTO lease_bench VALUES (%s, 0, NULL)", (cell,))
        return c

    @staticmethod
    def write(c, cell, resource, token):
        with c.transaction():
            c.execute("SELECT fence_check(%s, %s)", (resource, token))
            c.execute("UPDATE lease_bench SET n = n + 1, tok = %s WHERE id = %s", (token, cell))

    @staticmethod
    def cycle(c, cell, resource, steps):
        """fence's own cycle; returns the token. steps gets the step ends."""
        with c.transaction():
            token = c.execute("SELECT fence_acquire(%s, %s, %s)", (resource, HOLDER, TTL_MS)).fetchone()[0]
            if token is None:
                raise RuntimeError("fence_acquire(%r) returned NULL: the lease is not free" % resource)
            steps.append(time.perf_counter_ns())
            c.execute("SELECT fence_check(%s, %s)", (resource, token))
            c.execute("UPDATE lease_bench SET n = n + 1, tok = %s WHERE id = %s", (token, cell))
        steps.append(time.perf_counter_ns())
        if not c.execute("SELECT fence_release(%s, %s, %s)", (resource, HOLDER, token)).fetchone()[0]:
            raise RuntimeError("fence_release(%r, %d) returned false" % (resource, token))
        return token

    @staticmethod
    def acquire(c, resource, holder):
        return c.execute("SELECT fence_acquire(%s, %s, %s)", (resource, holder, TTL_MS)).fetchone()[0]

    @staticmethod
    def renew(c, resource, token, ttl_ms):
        return c.execute("SELECT fence_renew(%s, %s, %s, %s)",
                         (resource, HOLDER, token, ttl_ms)).fetchone()[0]

    @staticmethod
    def lease(c, resource):
        """(holder, token, live?) of the resource's lease row, on the server's clock"""
        return c.execute("SELECT holder::text, token, expires_at > clock_timestamp() FROM fence_leases "
                         "WHERE resource = %s", (resource,)).fetchone()

    @staticmethod
    def committed(c, cell, resource):
        n, tok = c.execute("SELECT n, tok FROM lease_bench WHERE id = %s", (cell,)).fetchone()
        cur = c.execute("SELECT fence_current(%s)", (resource,)).fetchone()[0]
        return n, tok, cur


class SqliteStore:
    kind = "sqlite"

    def __init__(self, path, synchronous, ext):
        self.path, self.synchronous, self.ext = path, synchronous, ext
        c = self.connect()
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("CREATE TABLE IF NOT EXISTS lease_bench (id TEXT PRIMARY KEY, n INTEGER NOT NULL, tok INTEGER)")
        c.close()

    def connect(self):
        c = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        c.enable_load_extension(True)
        c.load_extension(self.ext)
        c.enable_load_extension(False)
        c.execute("PRAGMA synchronous=%s" % self.synchronous)
        return c

    def open(self, cell):
        c = self.connect()
        c.execute("INSERT INTO lease_bench VALUES (?, 0, NULL)", (cell,))
        return c

    @staticmethod
    def write(c, cell, resource, token):
        c.execute("BEGIN")
        try:
            c.execute("SELECT fence_check(?, ?)", (resource, token)).fetchall()
            c.execute("UPDATE lease_bench SET n = n + 1, tok = ? WHERE id = ?", (token, cell))
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    @staticmethod
    def cycle(c, cell, resource, steps):
        # SQLite's fence_acquire runs in autocommit only (a rolled-back grant
        # could hand its token out twice): its grant is a commit of its own
        token = c.execute("SELECT fence_acquire(?, ?, ?)", (resource, HOLDER, TTL_MS)).fetchone()[0]
        if token is None:
            raise RuntimeError("fence_acquire(%r) returned NULL: the lease is not free" % resource)
        steps.append(time.perf_counter_ns())
        c.execute("BEGIN")
        try:
            c.execute("SELECT fence_check(?, ?)", (resource, token)).fetchall()
            c.execute("UPDATE lease_bench SET n = n + 1, tok = ? WHERE id = ?", (token, cell))
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        steps.append(time.perf_counter_ns())
        if c.execute("SELECT fence_release(?, ?, ?)", (resource, HOLDER, token)).fetchone()[0] != 1:
            raise RuntimeError("fence_release(%r, %d) returned false" % (resource, token))
        return token

    @staticmethod
    def acquire(c, resource, holder):
        return c.execute("SELECT fence_acquire(?, ?, ?)", (resource, holder, TTL_MS)).fetchone()[0]

    @staticmethod
    def renew(c, resource, token, ttl_ms):
        ok = c.execute("SELECT fence_renew(?, ?, ?, ?)", (resource, HOLDER, token, ttl_ms)).fetchone()[0] == 1
        if c.in_transaction:
            raise RuntimeError("fence_renew(%r) left a transaction open: the renewal is not committed" % resource)
        return ok

    @staticmethod
    def lease(c, resource):
        """(holder, token, live?); expires_at is in ms since the epoch, as
        the extension's clock (the VFS's) gives it, which julianday('now')
        reads too"""
        h, t, live = c.execute("SELECT holder, token, expires_at > "
                               "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) "
                               "FROM fence_leases WHERE resource = ?", (resource,)).fetchone()
        return h, t, bool(live)

    @staticmethod
    def committed(c, cell, resource):
        n, tok = c.execute("SELECT n, tok FROM lease_bench WHERE id = ?", (cell,)).fetchone()
        cur = c.execute("SELECT fence_current(?)", (resource,)).fetchone()[0]
        return n, tok, cur


# ---------------------------------------------------------------------------
# the cells

class Cell:
    """One timed operation against one store. run_one() does one call and
    returns its latency in ns (and records step ends for cycles)."""

    def __init__(self, op, lock, store_name, label):
        self.op, self.lock, self.store_name, self.label = op, lock, store_name, label
        self.name = "%s/%s/%s" % (op, lock, store_name)
        self.lat = []           # ns per timed call
        self.rounds = []        # (calls, ns in them) per timed round
        self.steps = []         # (acquire, write, release) ns per timed cycle
        self.last_token = None
        self.calls = 0          # every call, warm-up included
        self.errors = []

    def key(self):
        return self.name.replace("/", "-")


class EtcdCycle(Cell):
    def __init__(self, client, store, store_name, label):
        super().__init__("cycle", "etcd", store_name, label)
        self.client, self.store = client, store
        self.lock_key = "/fence-bench/lock/" + store_name
        self.resource = "bench-etcd-" + store_name
        self.conn = store.open(self.key())

    def run_one(self):
        c, t = self.client, self.client.transactions
        t0 = time.perf_counter_ns()
        lease = c.lease(TTL_S)
        ok, resp = c.transaction(
            compare=[t.create(self.lock_key) == 0],
            success=[t.put(self.lock_key, HOLDER, lease=lease), t.get(self.lock_key)],
            failure=[])
        if not ok:
            raise RuntimeError("etcd: the lock key %s is not free" % self.lock_key)
        token = resp[1][0][1].mod_revision
        t1 = time.perf_counter_ns()
        self.store.write(self.conn, self.key(), self.resource, token)
        t2 = time.perf_counter_ns()
        lease.revoke()
        t3 = time.perf_counter_ns()
        return token, t0, (t1, t2, t3)


class FenceCycle(Cell):
    def __init__(self, store, store_name, label):
        super().__init__("cycle", "fence", store_name, label)
        self.store = store
        self.resource = "bench-fence-" + store_name
        self.conn = store.open(self.key())

    def run_one(self):
        t0 = time.perf_counter_ns()
        steps = []
        token = self.store.cycle(self.conn, self.key(), self.resource, steps)
        t3 = time.perf_counter_ns()
        return token, t0, (steps[0], steps[1], t3)


class EtcdKeepAliveStream(Cell):
    """LeaseKeepAlive on one long-lived stream: a request, then its answer."""

    def __init__(self, client):
        super().__init__("renew", "etcd-stream", "-", "etcd LeaseKeepAlive, one long-lived stream")
        from etcd3 import etcdrpc
        self.lease = client.lease(TTL_S)
        self.q = queue.Queue()

        def requests():
            while True:
                r = self.q.get()
                if r is None:
                    return
                yield r
        self.req = etcdrpc.LeaseKeepAliveRequest(ID=self.lease.id)
        self.stream = client.leasestub.LeaseKeepAlive(requests(), credentials=client.call_credentials,
                                                      metadata=client.metadata)

    def run_one(self):
        t0 = time.perf_counter_ns()
        self.q.put(self.req)
        r = next(self.stream)
        t1 = time.perf_counter_ns()
        if r.ID != self.lease.id or r.TTL <= 0:
            raise RuntimeError("etcd keepalive of lease %x answered ID %x TTL %d" % (self.lease.id, r.ID, r.TTL))
        return None, t0, (t1,)

    def close(self):
        self.q.put(None)
        self.stream.cancel()


class EtcdRefresh(Cell):
    """python-etcd3's Lease.refresh(): a LeaseKeepAlive stream per call."""

    def __init__(self, client):
        super().__init__("renew", "etcd-call", "-", "etcd python-etcd3 Lease.refresh(), a stream per call")
        self.lease = client.lease(TTL_S)

    def run_one(self):
        t0 = time.perf_counter_ns()
        r = self.lease.refresh()
        t1 = time.perf_counter_ns()
        if len(r) != 1 or r[0].TTL <= 0:
            raise RuntimeError("etcd refresh of lease %x answered %r" % (self.lease.id, r))
        return None, t0, (t1,)


class FenceRenew(Cell):
    def __init__(self, store, store_name, label):
        super().__init__("renew", "fence", store_name, label)
        self.store = store
        self.resource = "bench-renew-" + store_name
        self.conn = store.open(self.key())
        self.token = store.acquire(self.conn, self.resource, HOLDER)
        self.flip = 0
        if self.token is None:
            raise RuntimeError("fence_acquire(%r) returned NULL" % self.resource)

    def run_one(self):
        # Two renewals in the same millisecond would set the same expiry,
        # and SQLite does not write a row that did not change (no commit to
        # flush): the TTL alternates by 1 ms so that every renewal moves the
        # expiry and is written, as a holder renewing every TTL/3 always is.
        self.flip ^= 1
        t0 = time.perf_counter_ns()
        ok = self.store.renew(self.conn, self.resource, self.token, TTL_MS + self.flip)
        t1 = time.perf_counter_ns()
        if not ok:
            raise RuntimeError("fence_renew(%r, %d) returned false" % (self.resource, self.token))
        return None, t0, (t1,)


def run_batch(cell, count=None, seconds=None, timed=True):
    """count calls, or calls for seconds; latencies kept when timed."""
    deadline = time.perf_counter_ns() + int((seconds or 0) * 1e9)
    done = 0
    first = len(cell.lat)
    while (done < count) if count is not None else (time.perf_counter_ns() < deadline):
        token, t0, ends = cell.run_one()
        cell.calls += 1
        done += 1
        if token is not None:
            if cell.last_token is not None and token <= cell.last_token:
                cell.errors.append("token %d granted after %d" % (token, cell.last_token))
            cell.last_token = token
        if timed:
            cell.lat.append(ends[-1] - t0)
            if len(ends) == 3:
                cell.steps.append((ends[0] - t0, ends[1] - ends[0], ends[2] - ends[1]))
    if timed:
        cell.rounds.append((len(cell.lat) - first, sum(cell.lat[first:])))


def pct(sorted_ns, p):
    """nearest-rank percentile, in ms"""
    if not sorted_ns:
        return None
    k = max(0, min(len(sorted_ns) - 1, -(-len(sorted_ns) * p // 100) - 1))
    return sorted_ns[k] / 1e6


def verify(cells, etcd_client, stores):
    """What committed, per cell: ("ok"|"FAIL", what, detail) rows."""
    out = []

    def check(cond, what, detail=""):
        out.append(("ok" if cond else "FAIL", what, detail))

    for cell in cells:
        if cell.op == "cycle":
            check(not cell.errors, "%s: every grant above the previous one" % cell.name,
                  "; ".join(cell.errors[:3]))
            n, tok, cur = cell.store.committed(cell.conn, cell.key(), cell.resource)
            check(n == cell.calls, "%s: every cycle's write committed" % cell.name,
                  "%s rows updated, %d cycles" % (n, cell.calls))
            check(tok == cell.last_token and cur == cell.last_token,
                  "%s: the last write carries the last token, and fence_current is it" % cell.name,
                  "row token %s, fence_current %s, last granted %s" % (tok, cur, cell.last_token))
            if cell.lock == "etcd":
                check(etcd_client.get(cell.lock_key)[0] is None,
                      "%s: the lock key is gone after the last revoke" % cell.name)
            else:
                other = cell.store.acquire(cell.conn, cell.resource, "bench-verify")
                check(other is not None and other > cell.last_token,
                      "%s: released: another holder is granted a greater token at once" % cell.name,
                      "granted %s after %s" % (other, cell.last_token))
        elif cell.lock == "fence":
            lease = cell.store.lease(cell.conn, cell.resource)
            check(cell.lat and lease == (HOLDER, cell.token, True),
                  "%s: every renew succeeded; the lease is still the holder's, live" % cell.name,
                  "%d timed calls; lease row %r, granted (%r, %r)" % (len(cell.lat), lease, HOLDER, cell.token))
        else:
            left = etcd_client.get_lease_info(cell.lease.id).TTL
            check(cell.lat and left > 0, "%s: every keepalive succeeded; the lease is live" % cell.name,
                  "%d timed calls; %d s left" % (len(cell.lat), left))
    return out


def say(what):
    print("lease bench: " + what, file=sys.stderr, flush=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the smoke form: a few calls per cell")
    ap.add_argument("--rounds", type=int, help="rounds (full 8, quick 2)")
    ap.add_argument("--seconds", type=float, default=0.6, help="seconds per cell per round (full)")
    ap.add_argument("--calls", type=int, default=5, help="calls per cell per round (--quick)")
    ap.add_argument("--raw", help="append raw rows here (default bench/results/lease-raw.tsv)")
    ap.add_argument("--no-sqlite", action="store_true", help="PostgreSQL and etcd only")
    ap.add_argument("--no-report", action="store_true", help="print no table at the end")
    args = ap.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 8)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, harness._on_signal)
    atexit.register(harness.cleanup)

    raw = args.raw
    if raw is None:
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        raw = os.path.join(HERE, "results", "lease-raw.tsv")
        open(raw, "w").close()
    rows = []

    def record(*fields):
        rows.append("\t".join(str(f) for f in fields))

    work = tempfile.mkdtemp(prefix="fence-lease-bench.", dir="/tmp")
    os.chmod(work, 0o755)
    harness.TEMP_DIRS.append(work)
    started = time.monotonic()
    import etcd3
    etcd = Etcd(work)
    etcd.spawn()            # starts while the two initdbs run
    pg_on, pg_off = start_pg(work)
    etcd.ready()
    client = etcd3.client(host="127.0.0.1", port=etcd.port, timeout=10)
    say("etcd and PostgreSQL up (%.1f s)" % (time.monotonic() - started))
    stores = [("pg-fsync", PgStore(pg_on), "PostgreSQL, fsync=on"),
              ("pg-nofsync", PgStore(pg_off), "PostgreSQL, fsync=off")]
    if not args.no_sqlite:
        r = subprocess.run(["make", "-s", "-C", ROOT, "sqlite_ext/fence.so"], stdout=subprocess.DEVNULL)
        if r.returncode != 0:
            sys.exit("cannot build sqlite_ext/fence.so")
        ext = os.path.join(ROOT, "sqlite_ext", "fence")
        stores += [("sqlite-full", SqliteStore(os.path.join(work, "full.db"), "FULL", ext),
                    "SQLite WAL, synchronous=FULL"),
                   ("sqlite-normal", SqliteStore(os.path.join(work, "normal.db"), "NORMAL", ext),
                    "SQLite WAL, synchronous=NORMAL")]

    cells = []
    for name, store, label in stores:
        cells.append(EtcdCycle(client, store, name, label))
        cells.append(FenceCycle(store, name, label))
    cells.append(EtcdKeepAliveStream(client))
    cells.append(EtcdRefresh(client))
    for name, store, label in stores:
        cells.append(FenceRenew(store, name, label))

    shown, skip = [], False        # the command that reproduces the figures, without --raw
    for a in argv:
        if skip or a == "--no-report":
            skip = False
            continue
        if a == "--raw":
            skip = True
            continue
        if not a.startswith("--raw="):
            shown.append(a)
    record("info", "lease_command", " ".join(["/usr/bin/python3 bench/lease_bench.py"] + shown))
    record("info", "lease_mode", "quick" if args.quick else "full")
    record("info", "lease_rounds", rounds)
    record("info", "lease_per_round", "%d calls" % args.calls if args.quick else "%g s" % args.seconds)
    record("info", "lease_etcd", etcd.version)
    record("info", "lease_pg", "PostgreSQL %s; fsync on: %s; fsync off: %s"
           % (pg_on.version, pg_on.settings, pg_off.settings))
    record("info", "lease_sqlite", "none" if args.no_sqlite else sqlite3.sqlite_version)
    with open("/proc/loadavg") as f:
        record("info", "lease_loadavg", " ".join(f.read().split()[:3]))

    say("servers and cells ready (%.1f s)" % (time.monotonic() - started))
    failed = None
    try:
        for cell in cells:                      # warm-up: connections, first grants, plans
            run_batch(cell, count=max(3, args.calls), timed=False)
        for rnd in range(rounds):
            k = rnd % len(cells)
            for cell in cells[k:] + cells[:k]:
                if args.quick:
                    run_batch(cell, count=args.calls)
                else:
                    run_batch(cell, seconds=args.seconds)
            say("round %d of %d done (%.1f s)" % (rnd + 1, rounds, time.monotonic() - started))
    except Exception as e:
        failed = "%s: %s" % (type(e).__name__, e)
        print("lease bench: stopped: %s" % failed, file=sys.stderr)

    for cell in cells:
        lat = sorted(cell.lat)
        total = sum(lat)
        per_s = len(lat) / (total / 1e9) if total else 0
        st = [sorted(s[i] for s in cell.steps) for i in range(3)] if cell.steps else [[], [], []]
        f = lambda x: "NA" if x is None else "%.3f" % x
        record("lease", cell.op, cell.lock, cell.store_name, len(lat), "%.1f" % per_s,
               f(pct(lat, 50)), f(pct(lat, 95)), f(pct(lat, 99)),
               f(pct(st[0], 50)), f(pct(st[1], 50)), f(pct(st[2], 50)), cell.label,
               ",".join("%.1f" % (n / (ns / 1e9)) if ns else "NA" for n, ns in cell.rounds))
    checks = verify(cells, client, stores) if failed is None else [("FAIL", "the run ended", failed)]
    for status, what, detail in checks:
        record("leasecheck", status, what, detail)
    record("info", "lease_seconds", "%.0f" % (time.monotonic() - started))
    for cell in cells:
        if isinstance(cell, EtcdKeepAliveStream):
            cell.close()
    client.close()
    harness.cleanup()
    say("servers stopped (%.1f s)" % (time.monotonic() - started))

    with open(raw, "a") as out:
        out.write("\n".join(rows) + "\n")
    bad = [c for c in checks if c[0] != "ok"]
    for status, what, detail in bad:
        print("lease bench: check failed: %s%s" % (what, " (%s)" % detail if detail else ""), file=sys.stderr)
    if not args.no_report:
        sys.path.insert(0, HERE)
        import report
        sys.stdout.write(report.lease_markdown(raw))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
