#!/usr/bin/python3
"""tests/pg_faults.py: SPEC.md's invariant under real faults (issue 5, items 2-4).

Every check is made on a log of accepted writes in commit order, never on
"nothing crashed". Scenarios, each on clusters this script starts itself
(throwaway directories under /tmp, private socket directories, fence
DESTDIR-installed and read through extension_destdir; never the caller's
PGHOST):

  a) kill -9 of a backend in the middle of a fenced transaction, of another
     backend while an advance waits, and of a backend while a fenced
     transaction is PREPAREd: after the postmaster's crash restart every
     committed advance is there, no uncommitted one is, and the prepared one
     still fences until COMMIT PREPARED.
  b) `pg_ctl stop -m immediate` (and kill -9 of a random worker's backend)
     under a load of fenced writes: every acknowledged commit survives,
     nothing rejected or never committed appears, tokens never decrease in
     commit order (the order of commit records read back by logical
     decoding, and commit timestamps as a second witness), and
     fence_current equals the highest committed log token.
  c) failover: a streaming hot standby replays the advances (fence_current
     works there), the primary is stopped -m immediate mid-advance, the
     standby is promoted, and the new primary has the same fence_tokens and
     rejects stale writes.
  d) pg_dump -Fc / pg_restore keeps fence_tokens and the guards of the
     protected tables (extension in public, and in its own schema).
  e) SQLite: kill -9 of a writer mid-transaction (WAL and rollback journal,
     with pages spilled before the kill) and after COMMIT; and several
     writer processes killed under load.

Usage: /usr/bin/python3 tests/pg_faults.py [--stress] [--seed N]
Fast form by default (make check); --stress runs >= 50 immediate-stop cycles
and 50 SQLite kill cycles (make stress) and prints the counts.
Output: "ok - faults ..." / "not ok - faults ..." per assertion, "# " lines
for details. Exit status 0 when every assertion holds.
"""
import argparse
import atexit
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IS_ROOT = os.geteuid() == 0
PYTHON = "/usr/bin/python3"
STARTUP_TIMEOUT = 90      # seconds a server may take to come up (a wait, not an assertion)

STALE = "23T01"
MISSING = "23T02"


# ---------------------------------------------------------------------------
# reporting

class Report:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, cond, what, details=()):
        cond = bool(cond)
        print("%s - faults %s" % ("ok" if cond else "not ok", what), flush=True)
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            if isinstance(details, str):
                details = [details]
            for d in list(details)[:20]:
                for line in str(d).splitlines():
                    print("#   " + line, flush=True)
        return cond

    @staticmethod
    def note(msg):
        for line in str(msg).splitlines():
            print("# " + line, flush=True)


R = Report()


def sqlstate_of(fn):
    """Run fn(); return the SQLSTATE it raised, or None when it did not raise."""
    try:
        fn()
    except psycopg.Error as e:
        return e.sqlstate or "(no sqlstate: %s)" % str(e).strip().splitlines()[0]
    return None


def sqlstate_in_transaction(connect, sql, args=(), setup=None):
    """Run sql in its own transaction: commit it if it passes, roll it back
    if not; return the SQLSTATE it raised, or None."""
    with connect() as t:
        if setup:
            t.execute(setup)
        state = sqlstate_of(lambda: t.execute(sql, args))
        if state is None:
            t.commit()
        else:
            t.rollback()
        return state


# ---------------------------------------------------------------------------
# processes and temporary directories: everything started is stopped

WORK = None
CLUSTERS = []
CHILDREN = []
KEEP_LOGS = []


def as_postgres(cmd):
    return (["runuser", "-u", "postgres", "--"] if IS_ROOT else []) + cmd


def chown_postgres(path):
    if IS_ROOT:
        subprocess.run(["chown", "-R", "postgres", path], check=True)


def run(cmd, **kw):
    # A command run as postgres starts in a directory postgres can enter: the
    # checkout may be one it cannot (root's clone in /root or a mktemp -d),
    # and pg_dump, pg_restore and friends then warn "could not change
    # directory to ...: Permission denied" on every run.
    if cmd[:1] == ["runuser"]:
        kw.setdefault("cwd", WORK if WORK and os.path.isdir(WORK) else "/")
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, **kw)


def pg_bindir():
    return subprocess.check_output(["pg_config", "--bindir"], universal_newlines=True).strip()


BINDIR = pg_bindir()


def cleanup():
    for p in CHILDREN:
        if p.poll() is None:
            try:
                p.kill()
                p.wait(10)
            except Exception:
                pass
    for c in list(CLUSTERS):
        c.stop_quietly()
    if WORK and os.path.isdir(WORK):
        if KEEP_LOGS:
            dest = os.path.join(ROOT, "tests", "results", "pg_faults")
            try:
                os.makedirs(dest, exist_ok=True)
                for name, path in KEEP_LOGS:
                    if os.path.exists(path):
                        shutil.copy(path, os.path.join(dest, name))
            except OSError:
                pass
        shutil.rmtree(WORK, ignore_errors=True)


def on_signal(signum, frame):
    raise SystemExit(128 + signum)


class Cluster:
    """One PostgreSQL server in WORK/<name>, socket directory of its own."""

    def __init__(self, name, extra_opts=""):
        self.name = name
        self.dir = os.path.join(WORK, name)
        self.data = os.path.join(self.dir, "data")
        self.sock = self.dir
        self.log = os.path.join(self.dir, "server.log")
        self.port = random.randint(20000, 59999)
        self.extra_opts = extra_opts
        self.running = False
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        chown_postgres(self.dir)
        CLUSTERS.append(self)
        KEEP_LOGS.append(("%s.log" % name, self.log))

    def opts(self):
        return ("-k %s -p %d -c listen_addresses='' -c fsync=off -c extension_destdir=%s "
                "-c track_commit_timestamp=on -c max_prepared_transactions=4 %s"
                % (self.sock, self.port, INSTALL, self.extra_opts))

    def initdb(self):
        r = run(as_postgres([BINDIR + "/initdb", "-D", self.data, "-A", "trust", "-U", "postgres",
                             "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"]))
        if r.returncode != 0:
            raise RuntimeError("initdb failed:\n" + r.stdout)

    def start(self):
        self.running = True     # stop it even if start only half worked
        r = run(as_postgres([BINDIR + "/pg_ctl", "-D", self.data, "-l", self.log, "-w",
                             "-t", str(STARTUP_TIMEOUT), "-o", self.opts(), "start"]))
        if r.returncode != 0:
            raise RuntimeError("pg_ctl start (%s) failed:\n%s\n%s"
                               % (self.name, r.stdout, tail(self.log)))

    def stop(self, mode="fast"):
        r = run(as_postgres([BINDIR + "/pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60",
                             "stop"]))
        if r.returncode == 0:
            self.running = False
        return r

    def stop_quietly(self):
        if not self.running or not os.path.isdir(self.data):
            return
        if self.stop("fast").returncode != 0:
            if self.stop("immediate").returncode != 0:
                pid = self.postmaster_pid()
                if pid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        self.running = False

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def connect(self, dbname="postgres", autocommit=True, **kw):
        return psycopg.connect(host=self.sock, port=self.port, user="postgres", dbname=dbname,
                               autocommit=autocommit, connect_timeout=10,
                               application_name="pg_faults", **kw)

    def wait_accepting(self, dbname="postgres", want_primary=True):
        """Wait (bounded) until the server accepts connections (after recovery)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        last = None
        while time.monotonic() < deadline:
            try:
                with self.connect(dbname) as c:
                    rec = c.execute("SELECT pg_is_in_recovery()").fetchone()[0]
                    if not want_primary or not rec:
                        return
            except psycopg.Error as e:
                last = e
            time.sleep(0.05)
        raise RuntimeError("%s did not accept connections in %ds: %s"
                           % (self.name, STARTUP_TIMEOUT, last))


def tail(path, n=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no %s)" % path


def crash_backend(cluster, pid, sentinel):
    """SIGKILL one backend; wait until the postmaster has ended every other
    backend (the sentinel connection dies) and accepts connections again."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            sentinel.execute("SELECT 1")
        except psycopg.Error:
            break
        time.sleep(0.02)
    else:
        raise RuntimeError("the postmaster did not restart the backends after kill -9")
    try:
        sentinel.close()
    except Exception:
        pass
    cluster.wait_accepting()


# ---------------------------------------------------------------------------
# commit-order checks shared by the scenarios

def order_violations(rows):
    """rows: (resource, token, commit position) in any order; the position
    orders commits, equal positions are unordered. Returns the pairs where a
    lower token committed after a higher one."""
    bad = []
    by_res = {}
    for res, tok, pos in rows:
        by_res.setdefault(res, []).append((pos, tok))
    for res, items in by_res.items():
        items.sort(key=lambda x: x[0])
        best = None     # (token, pos) the highest committed strictly earlier
        i = 0
        while i < len(items):
            j = i
            while j < len(items) and items[j][0] == items[i][0]:
                j += 1
            group = items[i:j]
            low = min(t for _, t in group)
            if best is not None and low < best[0]:
                bad.append("%s: token %d committed at %s after token %d at %s"
                           % (res, low, group[0][0], best[0], best[1]))
            high = max(t for _, t in group)
            if best is None or high > best[0]:
                best = (high, group[0][0])
            i = j
    return bad


def ts_order_rows(conn, table, rescol):
    """(resource, token, commit timestamp) of every row of a table."""
    return [(r, t, ts) for r, t, ts in conn.execute(
        "SELECT %s, tok, pg_xact_commit_timestamp(xmin) FROM %s" % (rescol, table)).fetchall()]


# ---------------------------------------------------------------------------
# a) kill -9 of backends

def scenario_kill_backend(cl):
    c = cl.connect()
    c.execute("CREATE EXTENSION fence")
    c.execute("CREATE TABLE klog(id serial PRIMARY KEY, tok bigint, note text)")
    c.execute("SELECT fence_protect('klog', 'tok', 'r')")
    with cl.connect(autocommit=False) as t:
        t.execute("SELECT fence_check('r', 5)")
        t.execute("INSERT INTO klog(tok, note) VALUES (5, 'committed 5')")
        t.commit()

    # 1. an uncommitted advance, its backend killed before COMMIT
    a = cl.connect(autocommit=False)
    pid = a.execute("SELECT pg_backend_pid()").fetchone()[0]
    a.commit()
    a.execute("SELECT fence_check('r', 10)")
    a.execute("INSERT INTO klog(tok, note) VALUES (10, 'uncommitted 10')")
    held = a.execute("SELECT resource, token FROM fence_held()").fetchall()
    R.ok(held == [("r", 10)],
         "kill -9: the victim transaction is fenced on r at 10 before the kill",
         "fence_held() = %r" % held)
    crash_backend(cl, pid, c)
    c = cl.connect()
    cur = c.execute("SELECT fence_current('r')").fetchone()[0]
    notes = [n for n, in c.execute("SELECT note FROM klog ORDER BY id")]
    R.ok(cur == 5, "kill -9 mid-transaction: fence_current is the last committed token",
         "fence_current('r') = %r, expected 5" % cur)
    R.ok(notes == ["committed 5"], "kill -9 mid-transaction: the uncommitted log row is absent, "
         "the committed one present", "klog notes = %r" % notes)

    # 2. a committed advance survives the kill of another session, killed
    #    while an advance waits behind it
    with cl.connect(autocommit=False) as t:
        t.execute("SELECT fence_check('r', 12)")
        t.execute("INSERT INTO klog(tok, note) VALUES (12, 'committed 12')")
        t.commit()
    holder = cl.connect(autocommit=False)
    hpid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
    holder.commit()
    holder.execute("SELECT fence_check('r', 12)")
    waiter = cl.connect(autocommit=False)
    wpid = waiter.execute("SELECT pg_backend_pid()").fetchone()[0]
    waiter.commit()
    outcome = {}

    def advance():
        try:
            waiter.execute("SELECT fence_check('r', 20)")
            waiter.execute("INSERT INTO klog(tok, note) VALUES (20, 'waiter 20')")
            waiter.commit()
            outcome["result"] = "committed"
        except psycopg.Error as e:
            outcome["result"] = "error %s" % (e.sqlstate,)

    th = threading.Thread(target=advance, daemon=True)
    th.start()
    deadline = time.monotonic() + 60
    waiting = False
    while time.monotonic() < deadline and not waiting and th.is_alive():
        waiting = c.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                            (wpid,)).fetchone() == (True,)
        if not waiting:
            time.sleep(0.02)
    R.ok(waiting, "kill -9: an advance to 20 waits for the open transaction fenced at 12")
    crash_backend(cl, hpid, c)
    th.join(60)
    c = cl.connect()
    cur = c.execute("SELECT fence_current('r')").fetchone()[0]
    notes = [n for n, in c.execute("SELECT note FROM klog ORDER BY id")]
    R.ok(cur == 12 and notes == ["committed 5", "committed 12"],
         "kill -9 of another session: the committed advance survives, the waiting one is gone",
         ["fence_current('r') = %r, expected 12" % cur, "klog notes = %r" % notes,
          "waiter: %s" % outcome.get("result")])

    # 3. a PREPAREd fenced transaction survives the crash and still fences
    p = cl.connect(autocommit=False)
    p.execute("SELECT fence_check('r', 30)")
    p.execute("INSERT INTO klog(tok, note) VALUES (30, 'prepared 30')")
    p.execute("PREPARE TRANSACTION 'fence_faults_2pc'")
    p.close()
    victim = cl.connect()
    vpid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]
    crash_backend(cl, vpid, c)
    c = cl.connect()
    prepared = [g for g, in c.execute("SELECT gid FROM pg_prepared_xacts")]
    cur = c.execute("SELECT fence_current('r')").fetchone()[0]
    locks = c.execute(
        "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 17989 "
        "AND pid IS NULL AND granted").fetchall()
    R.ok(prepared == ["fence_faults_2pc"] and cur == 12,
         "kill -9 with a prepared fenced transaction: it is still prepared, not yet the highest",
         ["prepared = %r" % prepared, "fence_current('r') = %r, expected 12" % cur])
    R.ok(("ExclusiveLock",) in locks,
         "kill -9 with a prepared fenced transaction: recovery gives its fence lock back to it",
         "prepared-transaction advisory locks: %r" % locks)
    results = {}
    for tok in (12, 40):
        with cl.connect(autocommit=False) as t:
            t.execute("SET lock_timeout = '1s'")
            results[tok] = sqlstate_of(lambda: t.execute("SELECT fence_check('r', %s)", (tok,)))
            t.rollback()
    R.ok(results == {12: "55P03", 40: "55P03"},
         "kill -9 with a prepared fenced transaction: tokens 12 and 40 wait for it after recovery",
         "sqlstates (55P03 = still waiting at lock_timeout): %r" % results)
    c.execute("COMMIT PREPARED 'fence_faults_2pc'")
    cur = c.execute("SELECT fence_current('r')").fetchone()[0]
    with cl.connect(autocommit=False) as t:
        stale = sqlstate_of(lambda: t.execute("SELECT fence_check('r', 12)"))
        t.rollback()
    with cl.connect(autocommit=False) as t:
        t.execute("SELECT fence_check('r', 40)")
        t.execute("INSERT INTO klog(tok, note) VALUES (40, 'after 2pc 40')")
        t.commit()
    notes = [n for n, in c.execute("SELECT note FROM klog ORDER BY id")]
    R.ok(cur == 30 and stale == STALE and notes[-2:] == ["prepared 30", "after 2pc 40"],
         "kill -9 with a prepared fenced transaction: COMMIT PREPARED makes it the highest",
         ["fence_current('r') after COMMIT PREPARED = %r, expected 30" % cur,
          "token 12 afterwards: %r, expected %s" % (stale, STALE), "klog notes = %r" % notes])
    bad = order_violations(ts_order_rows(c, "klog", "'r'"))
    R.ok(not bad, "kill -9: klog tokens never decrease in commit order", bad)
    c.close()


# ---------------------------------------------------------------------------
# b) stop -m immediate and kill -9 under load

class LockService:
    """Strictly increasing tokens per resource, as a lock service grants."""

    def __init__(self):
        self.lock = threading.Lock()
        self.issued = {}

    def grant(self, res):
        with self.lock:
            self.issued[res] = self.issued.get(res, 0) + 1
            return self.issued[res]


CRASH_STATES = {None, "57P01", "57P02", "57P03", "08000", "08003", "08006"}


class Load:
    """Worker threads doing fenced writes until the server goes away."""

    RESOURCES = 2

    def __init__(self, cl, service, attempts, cycle, nworkers, rng):
        self.cl = cl
        self.service = service
        self.attempts = attempts      # (worker, seq) -> [k, tok, status]
        self.cycle = cycle
        self.nworkers = nworkers
        self.rng = rng
        self.cond = threading.Condition()
        self.acked = 0
        self.unexpected = []
        self.pids = []
        self.alive = []
        self.live = 0
        self.threads = []

    def start(self):
        conns = []
        for i in range(self.nworkers):
            conn = self.cl.connect(autocommit=False)
            self.pids.append(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
            conn.commit()
            conns.append(conn)
        self.alive = [True] * len(conns)
        self.live = len(conns)
        for i, conn in enumerate(conns):
            wid = self.cycle * 100 + i
            rng = random.Random(self.rng.random())
            th = threading.Thread(target=self.work, args=(i, wid, conn, rng), daemon=True)
            th.start()
            self.threads.append(th)

    def work(self, i, wid, conn, rng):
        held = {}
        seq = 0
        try:
            while True:
                k = rng.randrange(self.RESOURCES)
                res = "b:%d" % k
                if held.get(k) is None or rng.random() < 0.2:
                    held[k] = self.service.grant(k)
                tok = held[k]
                seq += 1
                att = [k, tok, "sent"]
                self.attempts[(wid, seq)] = att
                try:
                    conn.execute("SELECT fence_check(%s, %s)", (res, tok))
                    conn.execute("INSERT INTO blog(k, tok, worker, seq) VALUES (%s, %s, %s, %s)",
                                 (k, tok, wid, seq))
                except psycopg.Error as e:
                    if e.sqlstate == STALE:
                        att[2] = "rejected"
                        held[k] = None      # take the lock again
                        conn.rollback()
                        continue
                    att[2] = "aborted"      # COMMIT was never sent
                    if e.sqlstate not in CRASH_STATES:
                        self.unexpected.append("worker %d: %s %s" % (wid, e.sqlstate, e))
                    return
                att[2] = "committing"
                try:
                    conn.commit()
                except psycopg.Error as e:
                    att[2] = "unknown"      # in doubt: the commit may be durable
                    if e.sqlstate not in CRASH_STATES:
                        self.unexpected.append("worker %d commit: %s %s" % (wid, e.sqlstate, e))
                    return
                att[2] = "acked"
                with self.cond:
                    self.acked += 1
                    self.cond.notify_all()
        except Exception as e:     # a connection broken outside a statement
            if not isinstance(e, psycopg.Error) or e.sqlstate not in CRASH_STATES:
                self.unexpected.append("worker %d: %r" % (wid, e))
        finally:
            try:
                conn.close()
            except Exception:
                pass
            with self.cond:
                self.alive[i] = False
                self.live -= 1
                self.cond.notify_all()

    def wait_acked(self, n, timeout=60):
        """Wait (bounded) for n acknowledged commits; False if they did not
        come, or every worker has stopped."""
        with self.cond:
            self.cond.wait_for(lambda: self.acked >= n or self.live == 0, timeout)
            return self.acked >= n

    def live_pids(self):
        with self.cond:
            return [pid for pid, alive in zip(self.pids, self.alive) if alive]

    def join(self):
        for th in self.threads:
            th.join(60)
        return [th for th in self.threads if th.is_alive()]


DECODED_COL = re.compile(r"(\w+)\[[^\]]*\]:('(?:[^']|'')*'|\S+)")


class CommitLog:
    """The committed blog rows and fence_tokens changes in commit order, read
    from a logical replication slot (test_decoding). A crash may hand
    consumed transactions out again: they are known by xid and skipped."""

    def __init__(self):
        self.seen = set()
        self.rows = []          # (k, tok, worker, seq, commit index)
        self.tokens = []        # (resource, token, commit index)
        self.ncommits = 0

    def read(self, conn):
        changes = conn.execute(
            "SELECT xid::text::bigint, data FROM pg_logical_slot_get_changes("
            "'faults', NULL, NULL, 'skip-empty-xacts', '1', 'include-xids', '1')").fetchall()
        pending = {}
        for xid, data in changes:
            if data.startswith("BEGIN"):
                pending[xid] = []
            elif data.startswith("COMMIT"):
                if xid not in self.seen:
                    self.seen.add(xid)
                    self.ncommits += 1
                    for kind, vals in pending.get(xid, []):
                        if kind == "blog":
                            self.rows.append((int(vals["k"]), int(vals["tok"]),
                                              int(vals["worker"]), int(vals["seq"]), self.ncommits))
                        else:
                            self.tokens.append((vals["resource"].strip("'"), int(vals["token"]),
                                                self.ncommits))
                pending.pop(xid, None)
            elif data.startswith("table public.blog: INSERT:"):
                pending.setdefault(xid, []).append(("blog", dict(DECODED_COL.findall(data))))
            elif data.startswith("table public.fence_tokens:"):
                pending.setdefault(xid, []).append(("tokens", dict(DECODED_COL.findall(data))))
        return len(changes)


def scenario_load(cl, cycles_immediate, cycles_kill, rng):
    c = cl.connect()
    c.execute("CREATE EXTENSION fence")
    c.execute("CREATE TABLE blog(id bigserial PRIMARY KEY, k int NOT NULL, tok bigint NOT NULL, "
              "worker int NOT NULL, seq int NOT NULL)")
    c.execute("SELECT fence_protect('blog', 'tok', 'b:', 'k')")
    c.execute("SELECT pg_create_logical_replication_slot('faults', 'test_decoding')")
    c.close()
    service = LockService()
    attempts = {}
    log = CommitLog()
    problems = {k: [] for k in ("lost", "phantom", "order_decoded", "order_ts", "tokens_order",
                                "log_complete", "current", "progress", "unexpected", "recovery")}
    counts = {"acked": 0, "rejected": 0, "aborted": 0, "in doubt": 0, "in doubt committed": 0}
    plan = ["immediate"] * cycles_immediate + ["kill -9"] * cycles_kill
    rng.shuffle(plan)
    nworkers = 4
    for cycle, fault in enumerate(plan, 1):
        load = Load(cl, service, attempts, cycle, nworkers, rng)
        target = rng.randint(10, 150)
        sentinel = cl.connect()
        load.start()
        if not load.wait_acked(target):
            problems["progress"].append("cycle %d: %d of %d commits acknowledged in 60 s"
                                        % (cycle, load.acked, target))
        if fault == "immediate":
            r = cl.stop("immediate")
            if r.returncode != 0:
                problems["recovery"].append("cycle %d: pg_ctl stop -m immediate: %s"
                                            % (cycle, r.stdout))
            stuck = load.join()
            try:
                sentinel.close()
            except Exception:
                pass
            cl.start()
        else:
            pids = load.live_pids()
            if not pids:    # every worker has failed: kill some backend all the same
                spare = cl.connect()
                pids = [spare.execute("SELECT pg_backend_pid()").fetchone()[0]]
            crash_backend(cl, rng.choice(pids), sentinel)
            stuck = load.join()
        if stuck:
            problems["recovery"].append("cycle %d: %d workers still running after the fault"
                                        % (cycle, len(stuck)))
        problems["unexpected"] += ["cycle %d: %s" % (cycle, u) for u in load.unexpected]

        # the log of accepted writes, in commit order
        c = cl.connect()
        log.read(c)
        table = {(w, s): (k, t) for k, t, w, s in c.execute("SELECT k, tok, worker, seq FROM blog")}
        decoded = {(w, s): (k, t) for k, t, w, s, _ in log.rows}
        if decoded != table:
            problems["log_complete"].append(
                "cycle %d: table has %d rows, decoded commits %d; "
                "only in table: %r; only decoded: %r"
                % (cycle, len(table), len(decoded), sorted(set(table) - set(decoded))[:5],
                   sorted(set(decoded) - set(table))[:5]))
        for key, (k, tok, status) in list(attempts.items()):
            if key[0] // 100 != cycle:
                continue
            present = key in table
            if status == "acked":
                counts["acked"] += 1
                if not present:
                    problems["lost"].append("cycle %d: acknowledged commit %r (b:%d at %d) is gone"
                                            % (cycle, key, k, tok))
            elif status == "unknown":
                counts["in doubt"] += 1
                counts["in doubt committed"] += present
            else:
                counts["rejected" if status == "rejected" else "aborted"] += 1
                if present:
                    problems["phantom"].append("cycle %d: %s attempt %r (b:%d at %d) is in the log"
                                               % (cycle, status, key, k, tok))
        for key in table:
            if key not in attempts:
                problems["phantom"].append("cycle %d: row %r was never attempted" % (cycle, key))
        problems["order_decoded"] = order_violations(
            [("b:%d" % k, t, pos) for k, t, _, _, pos in log.rows])
        problems["tokens_order"] = order_violations(log.tokens)
        problems["order_ts"] = order_violations(ts_order_rows(c, "blog", "'b:' || k"))
        for k in range(Load.RESOURCES):
            cur = c.execute("SELECT fence_current(%s)", ("b:%d" % k,)).fetchone()[0]
            stored = c.execute("SELECT token FROM fence_tokens WHERE resource = %s",
                               ("b:%d" % k,)).fetchone()
            high = c.execute("SELECT max(tok) FROM blog WHERE k = %s", (k,)).fetchone()[0]
            if cur != high or (stored[0] if stored else None) != high:
                problems["current"].append(
                    "cycle %d: b:%d fence_current %r, fence_tokens %r, "
                    "highest committed log token %r"
                    % (cycle, k, cur, stored, high))
        c.close()

    n = len(plan)
    R.note("load: %d cycles (%d stop -m immediate, %d kill -9 of a worker's backend), "
           "%d workers, %d commits in the decoded log"
           % (n, plan.count("immediate"), plan.count("kill -9"), nworkers, log.ncommits))
    R.note("load: attempts %d acknowledged, %d rejected as stale, %d aborted by the fault, "
           "%d in doubt at the fault (%d of them committed)"
           % (counts["acked"], counts["rejected"], counts["aborted"], counts["in doubt"],
              counts["in doubt committed"]))
    what = "stop -m immediate and kill -9 under load"
    R.ok(not problems["recovery"], "%s: the server recovers every cycle" % what,
         problems["recovery"])
    R.ok(not problems["progress"], "%s: the fenced workload makes progress every cycle" % what,
         problems["progress"])
    R.ok(not problems["unexpected"], "%s: workers see only stale-token and crash errors" % what,
         problems["unexpected"])
    R.ok(counts["acked"] > 0 and not problems["lost"],
         "%s: every acknowledged commit survives" % what, problems["lost"])
    R.ok(not problems["phantom"],
         "%s: no rejected or never-committed write is in the log" % what, problems["phantom"])
    R.ok(not problems["log_complete"],
         "%s: the decoded commit log holds exactly the table's rows" % what,
         problems["log_complete"])
    R.ok(log.rows and not problems["order_decoded"],
         "%s: tokens never decrease in commit order (commit records)" % what,
         problems["order_decoded"] or ["the decoded log holds no blog rows"])
    R.ok(not problems["order_ts"],
         "%s: tokens never decrease in commit-timestamp order" % what, problems["order_ts"])
    R.ok(log.tokens and not problems["tokens_order"],
         "%s: the highest accepted token never decreases in commit order" % what,
         problems["tokens_order"] or ["the decoded log holds no fence_tokens changes"])
    R.ok(not problems["current"],
         "%s: fence_current equals the highest committed log token" % what, problems["current"])
    R.ok(counts["rejected"] > 0, "%s: stale tokens were presented and rejected" % what,
         "no attempt was rejected: the workload did not exercise the fence")


# ---------------------------------------------------------------------------
# c) failover to a promoted streaming standby

def fence_rows(conn):
    return conn.execute("SELECT resource, token, updated_at FROM fence_tokens "
                        "ORDER BY resource").fetchall()


def wait_replayed(primary_conn, standby_conn):
    lsn = primary_conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if standby_conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                (str(lsn),)).fetchone()[0]:
            return True
        time.sleep(0.02)
    return False


def scenario_failover(primary):
    standby = Cluster("standby")
    try:
        failover(primary, standby)
    finally:
        standby.stop_quietly()


def failover(primary, standby):
    c = primary.connect()
    c.execute("CREATE EXTENSION fence")
    c.execute("CREATE TABLE ledger(id serial PRIMARY KEY, tok bigint, note text)")
    c.execute("SELECT fence_protect('ledger', 'tok', 'ledger')")
    c.execute("CREATE TABLE acct(id int PRIMARY KEY, tok bigint, bal int)")
    c.execute("SELECT fence_protect('acct', 'tok', 'acct:', 'id')")

    r = run(as_postgres([BINDIR + "/pg_basebackup", "-h", primary.sock, "-p", str(primary.port),
                         "-U", "postgres", "-D", standby.data, "-R", "-X", "stream", "-c", "fast",
                         "--no-sync"]))
    if r.returncode != 0:
        raise RuntimeError("pg_basebackup failed:\n" + r.stdout)
    standby.start()
    standby.wait_accepting(want_primary=False)
    s = standby.connect()
    in_recovery = s.execute("SELECT pg_is_in_recovery()").fetchone()[0]
    R.ok(in_recovery, "failover: the standby streams from the primary as a hot standby")

    # tokens advance on the primary, after the base backup: they stream
    def write(sql, args=()):
        with primary.connect(autocommit=False) as t:
            t.execute(sql, args)
            t.commit()
    for tok in (1, 1, 2, 5, 5):
        write("INSERT INTO ledger(tok, note) VALUES (%s, 'committed')", (tok,))
    write("INSERT INTO acct VALUES (1, 3, 100), (2, 7, 200)")
    write("UPDATE acct SET tok = 4, bal = 90 WHERE id = 1")
    write("SELECT fence_check('x', 42)")
    write("SELECT fence_check('p', 10)")
    with primary.connect(autocommit=False) as t:
        st = sqlstate_of(lambda: t.execute("INSERT INTO ledger(tok, note) VALUES (3, 'stale')"))
        t.rollback()
    R.ok(st == STALE, "failover: the primary rejects a stale write before the failover",
         "sqlstate %r" % st)
    resources = ["ledger", "acct:1", "acct:2", "x", "p", "never"]
    prim_current = {r_: c.execute("SELECT fence_current(%s)", (r_,)).fetchone()[0]
                    for r_ in resources}

    replayed = wait_replayed(c, s)
    R.ok(replayed, "failover: the standby replays the primary's WAL")
    stby_current = {r_: s.execute("SELECT fence_current(%s)", (r_,)).fetchone()[0]
                    for r_ in resources}
    R.ok(stby_current == prim_current and fence_rows(s) == fence_rows(c),
         "failover: fence_current on the hot standby equals the primary's",
         ["primary %r" % prim_current, "standby %r" % stby_current])
    with standby.connect(autocommit=False) as t:
        adv = sqlstate_of(lambda: t.execute("SELECT fence_check('ledger', 6)"))
        t.rollback()
        stale = sqlstate_of(lambda: t.execute("SELECT fence_check('ledger', 4)"))
        t.rollback()
    R.ok(adv == "25006" and stale == STALE,
         "failover: on the hot standby an advance is refused (read-only) "
         "and a stale token rejected",
         "advance: %r (expected 25006), stale: %r (expected %s)" % (adv, stale, STALE))

    # in flight at the crash: an uncommitted advance and a prepared one
    u = primary.connect(autocommit=False)
    u.execute("SELECT fence_check('ledger', 9)")
    u.execute("INSERT INTO ledger(tok, note) VALUES (9, 'uncommitted')")
    p = primary.connect(autocommit=False)
    p.execute("SELECT fence_check('p', 20)")
    p.execute("PREPARE TRANSACTION 'fence_failover_2pc'")
    p.close()
    committed = fence_rows(c)          # what the old primary has committed
    old_ledger = c.execute("SELECT id, tok, note FROM ledger ORDER BY id").fetchall()
    wait_replayed(c, s)
    c.close()
    s.close()

    r = primary.stop("immediate")
    R.ok(r.returncode == 0, "failover: the old primary stops -m immediate mid-advance", r.stdout)
    try:
        u.close()
    except Exception:
        pass
    r = run(as_postgres([BINDIR + "/pg_ctl", "-D", standby.data, "-w", "-t", "60", "promote"]))
    if r.returncode != 0:
        raise RuntimeError("pg_ctl promote failed:\n" + r.stdout + tail(standby.log))
    standby.wait_accepting()
    n = standby.connect()
    rows = fence_rows(n)
    R.ok(rows == committed, "failover: fence_tokens on the new primary equals the old primary's",
         ["old %r" % committed, "new %r" % rows])
    ledger = n.execute("SELECT id, tok, note FROM ledger ORDER BY id").fetchall()
    cur = n.execute("SELECT fence_current('ledger')").fetchone()[0]
    R.ok(ledger == old_ledger and cur == 5,
         "failover: the uncommitted advance in flight at the crash is gone",
         ["fence_current('ledger') = %r, expected 5" % cur, "ledger %r" % ledger])

    def attempt(sql, args=()):
        return sqlstate_in_transaction(lambda: standby.connect(autocommit=False), sql, args)
    got = {
        "stale ledger insert": attempt("INSERT INTO ledger(tok, note) VALUES (4, 'stale')"),
        "stale acct update": attempt("UPDATE acct SET tok = 6, bal = 0 WHERE id = 2"),
        "stale fence_check": attempt("SELECT fence_check('x', 41)"),
    }
    R.ok(all(v == STALE for v in got.values()),
         "failover: stale writes are rejected on the new primary (23T01)", repr(got))
    tokless = attempt("UPDATE acct SET bal = 0 WHERE id = 2")
    R.ok(tokless == MISSING, "failover: a token-less UPDATE is rejected on the new primary (23T02)",
         "sqlstate %r" % tokless)
    got = {
        "current-token insert": attempt("INSERT INTO ledger(tok, note) "
                                        "VALUES (5, 'after failover')"),
        "advance": attempt("INSERT INTO ledger(tok, note) VALUES (6, 'after failover')"),
        "acct at current": attempt("UPDATE acct SET tok = 7, bal = 250 WHERE id = 2"),
    }
    cur = n.execute("SELECT fence_current('ledger')").fetchone()[0]
    R.ok(all(v is None for v in got.values()) and cur == 6,
         "failover: writes with the current token and advances are accepted on the new primary",
         [repr(got), "fence_current('ledger') = %r, expected 6" % cur])

    # the prepared advance came through the promotion and still fences
    prepared = [g for g, in n.execute("SELECT gid FROM pg_prepared_xacts")]
    with standby.connect(autocommit=False) as t:
        t.execute("SET lock_timeout = '1s'")
        waits = sqlstate_of(lambda: t.execute("SELECT fence_check('p', 25)"))
        t.rollback()
    R.ok(prepared == ["fence_failover_2pc"] and waits == "55P03",
         "failover: a prepared advance survives the promotion and still holds its fence",
         ["prepared %r" % prepared, "token 25 while prepared: %r (55P03 = waits)" % waits])
    n.execute("COMMIT PREPARED 'fence_failover_2pc'")
    cur_p = n.execute("SELECT fence_current('p')").fetchone()[0]
    st = attempt("SELECT fence_check('p', 15)")
    R.ok(cur_p == 20 and st == STALE,
         "failover: COMMIT PREPARED on the new primary raises the highest",
         "fence_current('p') = %r, token 15: %r" % (cur_p, st))
    bad = order_violations(ts_order_rows(n, "ledger", "'ledger'"))
    R.ok(not bad, "failover: ledger tokens never decrease in commit order across the failover", bad)
    n.close()


# ---------------------------------------------------------------------------
# d) pg_dump / pg_restore

def scenario_dump(cl):
    admin = cl.connect()
    variants = [("public", "src_public", "dst_public", []),
                ("fencing", "src_schema", "dst_schema", ["--single-transaction"])]
    for schema, src, dst, restore_opts in variants:
        label = "dump/restore (extension in %s%s)" % (
            schema, ", pg_restore " + " ".join(restore_opts) if restore_opts else "")
        admin.execute("CREATE DATABASE %s" % src)
        admin.execute("CREATE DATABASE %s" % dst)
        with cl.connect(src) as c:
            if schema == "public":
                c.execute("CREATE EXTENSION fence")
            else:
                c.execute("CREATE SCHEMA %s" % schema)
                c.execute("CREATE EXTENSION fence SCHEMA %s" % schema)
                c.execute("ALTER DATABASE %s SET search_path = public, %s" % (src, schema))
                c.execute("SET search_path = public, %s" % schema)
            c.execute("CREATE TABLE ledger(id serial PRIMARY KEY, tok bigint, note text)")
            c.execute("SELECT fence_protect('ledger', 'tok', 'ledger')")
            c.execute("CREATE TABLE acct(id int PRIMARY KEY, tok bigint, bal int)")
            c.execute("SELECT fence_protect('acct', 'tok', 'acct:', 'id')")
            c.execute("CREATE TABLE cfg(k text PRIMARY KEY, v text)")
            c.execute("SELECT fence_protect('cfg', NULL, 'cfg')")
            c.execute("BEGIN")
            c.execute("INSERT INTO ledger(tok, note) VALUES (3, 'a'), (8, 'b')")
            c.execute("INSERT INTO acct VALUES (1, 4, 10), (2, 9, 20)")
            c.execute("UPDATE acct SET tok = 11, bal = 5 WHERE id = 1")
            c.execute("SELECT fence_check('cfg', 2)")
            c.execute("INSERT INTO cfg VALUES ('mode', 'on')")
            c.execute("SELECT fence_check('solo', 77)")
            c.execute("COMMIT")
            src_rows = fence_rows(c)
            src_trig = trigger_defs(c)
            src_data = table_data(c)
        dump = os.path.join(cl.dir, "%s.dump" % src)
        r = run(as_postgres([BINDIR + "/pg_dump", "-h", cl.sock, "-p", str(cl.port),
                             "-U", "postgres", "-Fc", "-f", dump, src]))
        R.ok(r.returncode == 0 and not r.stdout.strip(), "%s: pg_dump -Fc succeeds" % label,
             r.stdout)
        r = run(as_postgres([BINDIR + "/pg_restore", "-h", cl.sock, "-p", str(cl.port), "-U",
                             "postgres", "--exit-on-error", "-d", dst] + restore_opts + [dump]))
        R.ok(r.returncode == 0 and not r.stdout.strip(),
             "%s: pg_restore succeeds without errors or warnings" % label, r.stdout)
        with cl.connect(dst) as d:
            if schema != "public":
                d.execute("SET search_path = public, %s" % schema)
            rows = fence_rows(d)
            R.ok(rows == src_rows and len(rows) == 5, "%s: fence_tokens rows are equal" % label,
                 ["source %r" % src_rows, "restored %r" % rows])
            trig = trigger_defs(d)
            R.ok(trig == src_trig and len(trig) == 8,
                 "%s: the guard triggers exist on every restored protected table" % label,
                 ["source %r" % src_trig, "restored %r" % trig])
            R.ok(d.execute("SELECT tgenabled FROM pg_trigger WHERE tgname = 'fence_tokens_changed'")
                 .fetchall() == [("A",)],
                 "%s: fence_tokens keeps its change trigger, enabled ALWAYS" % label)
            data = table_data(d)
            R.ok(data == src_data, "%s: the protected tables' rows are equal" % label)

            def attempt(sql):
                return sqlstate_in_transaction(
                    lambda: cl.connect(dst, autocommit=False), sql,
                    setup=None if schema == "public" else "SET search_path = public, %s" % schema)
            got = {
                "stale ledger insert": attempt("INSERT INTO ledger(tok, note) VALUES (7, 'x')"),
                "stale acct update": attempt("UPDATE acct SET tok = 10 WHERE id = 1"),
                "stale fence_check": attempt("SELECT fence_check('solo', 76)"),
            }
            R.ok(all(v == STALE for v in got.values()),
                 "%s: stale writes are rejected in the restored database (23T01)" % label,
                 repr(got))
            got = {
                "token-less acct update": attempt("UPDATE acct SET bal = 0 WHERE id = 2"),
                "token-less cfg update": attempt("UPDATE cfg SET v = 'off'"),
                "unfenced acct delete": attempt("DELETE FROM acct WHERE id = 2"),
                "NULL token insert": attempt("INSERT INTO ledger(tok, note) VALUES (NULL, 'x')"),
            }
            R.ok(all(v == MISSING for v in got.values()),
                 "%s: writes without a token are rejected in the restored database (23T02)" % label,
                 repr(got))
            got = {
                "current-token insert": attempt("INSERT INTO ledger(tok, note) VALUES (8, 'c')"),
                "advance": attempt("UPDATE acct SET tok = 12 WHERE id = 1"),
                "fenced cfg update": attempt("SELECT fence_check('cfg', 2); "
                                             "UPDATE cfg SET v = 'off'"),
            }
            after = d.execute("SELECT fence_current('acct:1')").fetchone()[0]
            R.ok(all(v is None for v in got.values()) and after == 12,
                 "%s: writes with current tokens are accepted in the restored database" % label,
                 [repr(got), "fence_current('acct:1') = %r" % after])
            d.execute("CREATE ROLE fence_app_%s LOGIN" % schema)
            d.execute("GRANT ALL ON ledger, acct, cfg TO fence_app_%s" % schema)
            d.execute("GRANT USAGE ON SCHEMA %s TO fence_app_%s" % (schema, schema))
            with psycopg.connect(host=cl.sock, port=cl.port, user="fence_app_%s" % schema,
                                 dbname=dst, autocommit=True) as app:
                st = sqlstate_of(lambda: app.execute(
                    "UPDATE %s.fence_tokens SET token = 0" % schema))
                readable = sqlstate_of(lambda: app.execute(
                    "SELECT count(*) FROM %s.fence_tokens" % schema))
            R.ok(st == "42501" and readable is None,
                 "%s: application roles still may read but not write fence_tokens" % label,
                 "write: %r (expected 42501), read: %r" % (st, readable))
    admin.close()


def trigger_defs(conn):
    return conn.execute(
        "SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
        "JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal "
        "ORDER BY 1, 2").fetchall()   # the guards and fence_tokens' own change trigger


def table_data(conn):
    return (conn.execute("SELECT * FROM ledger ORDER BY id").fetchall(),
            conn.execute("SELECT * FROM acct ORDER BY id").fetchall(),
            conn.execute("SELECT * FROM cfg ORDER BY k").fetchall())


# ---------------------------------------------------------------------------
# e) SQLite: kill -9 of writers

SQLITE_CHILD = r"""
import os, sqlite3, sys, time
db, ext, mode = sys.argv[1], sys.argv[2], sys.argv[3]
con = sqlite3.connect(db, isolation_level=None, timeout=30)
con.enable_load_extension(True)
con.load_extension(ext)
if mode == "mid":
    con.execute("PRAGMA cache_size = 5")        # spill pages before the kill
    con.execute("BEGIN")
    con.execute("SELECT fence_check('r', 9)")
    con.execute("INSERT INTO log(tok, note) VALUES (9, 'uncommitted')")
    for i in range(300):
        con.execute("INSERT INTO log(tok, note, pad) VALUES (9, 'pad', randomblob(4000))")
elif mode == "after":
    con.execute("BEGIN")
    con.execute("SELECT fence_check('r', 11)")
    con.execute("INSERT INTO log(tok, note) VALUES (11, 'committed 11')")
    con.execute("COMMIT")
print("ready", flush=True)
time.sleep(600)
"""

SQLITE_WRITER = r"""
import fcntl, os, random, sqlite3, sys
db, ext, wid, tokdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rng = random.Random(os.getpid())
def grant(k):       # the lock service: a counter file per resource under flock
    with open(os.path.join(tokdir, "tok%d" % k), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        t = int(f.read() or 0) + 1
        f.seek(0); f.truncate(); f.write(str(t)); f.flush()
        return t
con = sqlite3.connect(db, isolation_level=None, timeout=30)
con.enable_load_extension(True)
con.load_extension(ext)
con.execute("PRAGMA recursive_triggers = ON")   # slog is keyed on k, not its INTEGER PRIMARY KEY
out = sys.stdout
held = {}
seq = 0
while True:
    k = rng.randrange(2)
    if held.get(k) is None or rng.random() < 0.2:
        held[k] = grant(k)
    tok = held[k]
    seq += 1
    out.write("try %d %d %d %d\n" % (wid, seq, k, tok)); out.flush()
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("SELECT fence_check('s:' || ?, ?)", (k, tok))
        con.execute("INSERT INTO slog(k, tok, worker, seq) VALUES (?, ?, ?, ?)", (k, tok, wid, seq))
        con.execute("COMMIT")
    except sqlite3.IntegrityError:
        con.execute("ROLLBACK")
        held[k] = None
        out.write("rej %d %d\n" % (wid, seq)); out.flush()
        continue
    except sqlite3.OperationalError as e:
        if con.in_transaction:
            con.execute("ROLLBACK")
        out.write("abort %d %d %s\n" % (wid, seq, str(e).replace(" ", "_"))); out.flush()
        continue
    out.write("ack %d %d\n" % (wid, seq)); out.flush()
"""


def sqlite_connect(path, ext):
    con = sqlite3.connect(path, isolation_level=None, timeout=30)
    con.enable_load_extension(True)
    con.load_extension(ext)
    return con


def sqlite_kill_one(ext, journal):
    d = tempfile.mkdtemp(dir=WORK, prefix="sqlite-")
    path = os.path.join(d, "kill.db")
    con = sqlite_connect(path, ext)
    con.execute("PRAGMA journal_mode = %s" % journal)
    con.execute("CREATE TABLE log(id INTEGER PRIMARY KEY, tok INTEGER, note TEXT, pad BLOB)")
    con.execute("SELECT fence_protect('log', 'tok', 'r')")
    con.execute("BEGIN")
    con.execute("SELECT fence_check('r', 5)")
    con.execute("INSERT INTO log(tok, note) VALUES (5, 'committed 5')")
    con.execute("COMMIT")
    con.close()
    label = "SQLite (%s journal)" % journal
    for mode in ("mid", "after"):
        p = subprocess.Popen([PYTHON, "-c", SQLITE_CHILD, path, ext, mode],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        CHILDREN.append(p)
        line = p.stdout.readline().strip()
        if line != "ready":
            p.kill()
            raise RuntimeError("SQLite child (%s) failed: %s %s" % (mode, line, p.stderr.read()))
        hot = os.path.exists(path + "-journal") or (
            os.path.exists(path + "-wal") and os.path.getsize(path + "-wal") > 0)
        p.send_signal(signal.SIGKILL)
        p.wait()
        con = sqlite_connect(path, ext)
        integrity = con.execute("PRAGMA integrity_check").fetchall()
        cur = con.execute("SELECT fence_current('r')").fetchone()[0]
        notes = [n for n, in con.execute("SELECT note FROM log ORDER BY id")]
        if mode == "mid":
            R.note("%s: journal or WAL file with content at the kill: %s" % (label, hot))
            R.ok(integrity == [("ok",)], "%s: kill -9 mid-transaction leaves an intact database"
                 % label, repr(integrity))
            R.ok(cur == 5 and notes == ["committed 5"],
                 "%s: kill -9 mid-transaction: the fence and the log are the committed ones"
                 % label,
                 ["fence_current('r') = %r, expected 5" % cur, "notes %r" % notes[:5]])
            try:
                con.execute("BEGIN")
                con.execute("INSERT INTO log(tok, note) VALUES (4, 'stale')")
                con.execute("COMMIT")
                stale = "accepted"
            except sqlite3.IntegrityError:
                con.execute("ROLLBACK")
                stale = "rejected"
            con.execute("BEGIN")
            con.execute("SELECT fence_check('r', 7)")
            con.execute("INSERT INTO log(tok, note) VALUES (7, 'committed 7')")
            con.execute("COMMIT")
            cur = con.execute("SELECT fence_current('r')").fetchone()[0]
            R.ok(stale == "rejected" and cur == 7,
                 "%s: after the kill a stale write is rejected and a new fenced write commits"
                 % label,
                 "stale write %s, fence_current %r" % (stale, cur))
        else:
            R.ok(integrity == [("ok",)] and cur == 11 and notes[-1:] == ["committed 11"],
                 "%s: kill -9 after COMMIT keeps the advance" % label,
                 ["integrity %r" % integrity, "fence_current('r') = %r, expected 11" % cur,
                  "notes %r" % notes])
        con.close()
    shutil.rmtree(d, ignore_errors=True)


def sqlite_load(ext, cycles, rng):
    problems = {k: [] for k in ("integrity", "lost", "phantom", "order", "current", "progress",
                                "unexpected")}
    counts = {"acked": 0, "rejected": 0, "busy": 0, "in doubt": 0, "in doubt committed": 0}
    d = tempfile.mkdtemp(dir=WORK, prefix="sqlite-load-")
    for cycle in range(1, cycles + 1):
        journal = "wal" if cycle % 2 else "delete"
        cdir = os.path.join(d, "c%d" % cycle)
        os.makedirs(cdir)
        path = os.path.join(cdir, "load.db")
        con = sqlite_connect(path, ext)
        con.execute("PRAGMA journal_mode = %s" % journal)
        con.execute("CREATE TABLE slog(id INTEGER PRIMARY KEY, k INTEGER, tok INTEGER, "
                    "worker INTEGER, seq INTEGER)")
        con.execute("SELECT fence_protect('slog', 'tok', 's:', 'k')")
        con.close()
        state = {}      # (wid, seq) -> [k, tok, status]
        lock = threading.Condition()
        acked = [0]

        def reader(p):
            for line in p.stdout:
                f = line.split()
                with lock:
                    if f[0] == "try":
                        state[(int(f[1]), int(f[2]))] = [int(f[3]), int(f[4]), "sent"]
                    elif f[0] in ("ack", "rej", "abort"):
                        state[(int(f[1]), int(f[2]))][2] = f[0]
                        if f[0] == "abort" and "locked" not in line and "busy" not in line:
                            problems["unexpected"].append("cycle %d: %s" % (cycle, line.strip()))
                        if f[0] == "ack":
                            acked[0] += 1
                            lock.notify_all()
        procs, readers = [], []
        for wid in range(3):
            errf = open(os.path.join(cdir, "writer%d.err" % wid), "w")
            p = subprocess.Popen([PYTHON, "-c", SQLITE_WRITER, path, ext, str(wid), cdir],
                                 stdout=subprocess.PIPE, stderr=errf, universal_newlines=True)
            errf.close()
            CHILDREN.append(p)
            procs.append(p)
            th = threading.Thread(target=reader, args=(p,), daemon=True)
            th.start()
            readers.append(th)
        target = rng.randint(10, 100)
        with lock:
            if not lock.wait_for(lambda: acked[0] >= target, 60):
                problems["progress"].append("cycle %d: %d of %d acknowledged"
                                            % (cycle, acked[0], target))
        # one writer dies mid-flight; the others must go on past its locks
        first = rng.choice(procs)
        first.send_signal(signal.SIGKILL)
        with lock:
            more = acked[0] + 10
            if not lock.wait_for(lambda: acked[0] >= more, 60):
                problems["progress"].append("cycle %d: no progress after a writer was killed"
                                            % cycle)
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
        for th in readers:
            th.join(30)
        for wid in range(3):
            err = tail(os.path.join(cdir, "writer%d.err" % wid), 8).strip()
            if err:
                problems["unexpected"].append("cycle %d writer %d stderr:\n%s" % (cycle, wid, err))
        con = sqlite_connect(path, ext)
        integ = con.execute("PRAGMA integrity_check").fetchall()
        if integ != [("ok",)]:
            problems["integrity"].append("cycle %d: %r" % (cycle, integ))
        rows = con.execute("SELECT id, k, tok, worker, seq FROM slog").fetchall()
        table = {(w, s): (k, t) for _, k, t, w, s in rows}
        for key, (k, tok, status) in state.items():
            present = key in table
            if status == "ack":
                counts["acked"] += 1
                if not present:
                    problems["lost"].append("cycle %d: acknowledged %r gone" % (cycle, key))
            elif status == "sent":
                counts["in doubt"] += 1
                counts["in doubt committed"] += present
            else:
                counts["rejected" if status == "rej" else "busy"] += 1
                if present:
                    problems["phantom"].append("cycle %d: %s attempt %r present"
                                               % (cycle, status, key))
        for key in table:
            if key not in state:
                problems["phantom"].append("cycle %d: row %r never attempted" % (cycle, key))
        # one writer at a time: rowid order is commit order
        problems["order"] += ["cycle %d: %s" % (cycle, b) for b in
                              order_violations([("s:%d" % k, t, i) for i, k, t, _, _ in rows])]
        for k in range(2):
            cur = con.execute("SELECT fence_current(?)", ("s:%d" % k,)).fetchone()[0]
            high = con.execute("SELECT max(tok) FROM slog WHERE k = ?", (k,)).fetchone()[0]
            if cur != high:
                problems["current"].append("cycle %d: s:%d fence_current %r, highest log token %r"
                                           % (cycle, k, cur, high))
        con.close()
        shutil.rmtree(cdir, ignore_errors=True)
    R.note("SQLite load: %d cycles (WAL and rollback journal alternating), 3 writer processes "
           "killed with SIGKILL each cycle" % cycles)
    R.note("SQLite load: attempts %d acknowledged, %d rejected as stale, %d busy, %d in doubt at "
           "the kill (%d of them committed)" % (counts["acked"], counts["rejected"], counts["busy"],
                                                 counts["in doubt"], counts["in doubt committed"]))
    what = "SQLite kill -9 of writers under load"
    R.ok(not problems["unexpected"], "%s: writers see only stale-token and busy errors" % what,
         problems["unexpected"])
    R.ok(not problems["progress"], "%s: the writers make progress, also after a kill" % what,
         problems["progress"])
    R.ok(not problems["integrity"], "%s: PRAGMA integrity_check is ok" % what,
         problems["integrity"])
    R.ok(counts["acked"] > 0 and not problems["lost"],
         "%s: every acknowledged commit survives" % what, problems["lost"])
    R.ok(not problems["phantom"], "%s: no rejected or never-committed write is in the log" % what,
         problems["phantom"])
    R.ok(not problems["order"], "%s: tokens never decrease in commit order" % what,
         problems["order"])
    R.ok(not problems["current"], "%s: fence_current equals the highest committed log token" % what,
         problems["current"])
    shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------

def build():
    r = run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext"), "with_llvm=no"])
    if r.returncode == 0:
        r = run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext"), "with_llvm=no", "install",
                 "DESTDIR=" + INSTALL])
    if r.returncode != 0:
        raise RuntimeError("building or installing fence failed:\n" + r.stdout)
    r = run(["make", "-s", "-C", ROOT, "sqlite_ext/fence.so"])
    if r.returncode != 0:
        raise RuntimeError("building sqlite_ext/fence.so failed:\n" + r.stdout)


def scenario(name, fn, *args):
    before = R.failed
    nclusters = len(CLUSTERS)
    try:
        fn(*args)
    except Exception:
        R.ok(False, "%s ran to the end" % name, traceback.format_exc())
    if R.failed > before:
        for c in CLUSTERS[nclusters:]:
            R.note("%s server log (tail):" % c.name)
            R.note(tail(c.log, 15))


def main():
    global WORK, INSTALL
    ap = argparse.ArgumentParser()
    ap.add_argument("--stress", action="store_true", help="the long form (make stress)")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    random.seed(seed)
    R.note("pg_faults: %s form, seed %d" % ("stress" if args.stress else "fast", seed))
    started = time.monotonic()

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    atexit.register(cleanup)
    # our own servers only: nothing of the caller's libpq environment applies
    for k in list(os.environ):
        if k.startswith("PG") and not k.startswith("PG_"):
            del os.environ[k]
    WORK = tempfile.mkdtemp(prefix="fence-faults.", dir="/tmp")
    os.chmod(WORK, 0o755)
    INSTALL = os.path.join(WORK, "install")
    try:
        build()
        chown_postgres(WORK)
        ext = os.path.join(ROOT, "sqlite_ext", "fence")

        def with_cluster(name, fn, *fargs):
            opts = "-c wal_level=logical" if name == "load" else ""
            cl = Cluster(name, opts)
            try:
                cl.initdb()
                cl.start()
                fn(cl, *fargs)
            finally:
                cl.stop_quietly()

        scenario("kill -9 of backends", with_cluster, "kill", scenario_kill_backend)
        scenario("stop -m immediate under load", with_cluster, "load", scenario_load,
                 50 if args.stress else 3, 20 if args.stress else 2, rng)
        scenario("failover", with_cluster, "primary", scenario_failover)
        scenario("pg_dump/pg_restore", with_cluster, "dump", scenario_dump)
        scenario("SQLite kill -9 of a writer", lambda: [sqlite_kill_one(ext, j)
                                                         for j in ("wal", "delete")])
        scenario("SQLite kill -9 under load", sqlite_load, ext, 50 if args.stress else 4, rng)
    except Exception:
        R.ok(False, "setup", traceback.format_exc())
    finally:
        if R.failed == 0:
            KEEP_LOGS.clear()
        cleanup()
    R.note("pg_faults: %d passed, %d failed in %.1f s (seed %d)"
           % (R.passed, R.failed, time.monotonic() - started, seed))
    return 0 if R.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
