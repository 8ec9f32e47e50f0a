#!/usr/bin/python3
"""tests/lockservice/harness.py: fence behind real lock services (issue 5, item 1).

The harness starts a lock service (etcd, ZooKeeper or Redis; bound to
127.0.0.1 on free ports, data in a temporary directory) and a database
(a throwaway PostgreSQL 15 cluster with fence installed through
extension_destdir, or a SQLite file with sqlite_ext/fence.so loaded), then
starts worker processes that loop:

    take the lock of a random resource from the lock service
        etcd       a lease (TTL) and a put of the lock key with that lease,
                   if the key is absent (a transaction on create_revision = 0);
                   the token is the key's mod_revision
        zookeeper  an ephemeral sequential znode under the resource's lock
                   node, held while it is the lowest; the token is its
                   sequence number; the session timeout is the TTL
        redis      SET lock NX PX ttl and INCR of the resource's token
                   counter, in one Lua script (one atomic step); a single
                   Redis is the token source
    wait a short window (where the harness's pauses land), then a fenced
    read-modify-write:
        BEGIN IMMEDIATE; fence_check(resource, token); SELECT n FROM counter;
        UPDATE counter SET n = n_before + 1, tok = token;
        INSERT INTO accepted_log(rid, worker, token, n_before); COMMIT
    (counter and accepted_log are also guarded by fence_protect, one fence
    per row), report the outcome to the harness, release the lock.

In PostgreSQL a quarter of the iterations put the window inside the open
transaction, after fence_check, so that pauses also land there; the server
runs with idle_in_transaction_session_timeout so that such a zombie does not
stall the next holder forever.

Meanwhile the harness SIGSTOPs random workers that hold a lock and resumes
each one (SIGCONT) only once its lease has expired (past the TTL) and another
holder's write with a newer token has been accepted. Counted: pauses past the
TTL, rejections, accepted writes. Checked on the database's log of accepted
writes in commit order (PostgreSQL: pg_xact_commit_timestamp, with
track_commit_timestamp = on, and n_before; SQLite: the log's AUTOINCREMENT
id, assigned under the single write lock):

    stale writes accepted = 0   no logged token is below an earlier-committed one
    accepted writes lost = 0    every write a worker saw committed is logged,
                                counter = number of log rows, n_before runs
                                0..N-1 without gap or duplicate (no lost update)
    every resumed zombie was refused (stale token, or its session ended)
    no refused write is in the log; fence_current = highest logged token

Then the paused-inside-a-transaction scenarios (see README.md here): in
PostgreSQL without and with idle_in_transaction_session_timeout, in SQLite
with the busy timeout.

Every server is started by the harness and stopped by it: try/finally,
atexit, SIGTERM/SIGINT/SIGHUP handlers, and a parent-death signal on every
child (setpriv --pdeathsig), so even a SIGKILL of the harness stops them.

Usage:
  /usr/bin/python3 tests/lockservice/harness.py [--service etcd[,zookeeper,redis]]
        [--engine pg[,sqlite]] [--pauses N] [--workers W] [--resources R] [--all]
        [--stress] [--seed S] [--keep]
  --all: every service and engine (make stress uses --all --stress).
Output: "# " lines with the counts, "ok - lockservice <service> <engine> <what>"
or "not ok - ..." per assertion. Exit status 0 iff every assertion holds.
"""
import argparse
import atexit
import collections
import json
import os
import queue
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
IS_ROOT = os.geteuid() == 0
STALE = "23T01"             # stale fencing token
IDLE_TIMEOUT = "25P03"      # idle_in_transaction_session_timeout ended the session
QUERY_CANCELED = "57014"    # statement_timeout
STARTUP_TIMEOUT = 90        # seconds a server may take to come up (a wait, not an assertion)

# Lock service settings. etcd clamps a lease TTL to at least
# ceil(1.5 * election-timeout) seconds: with its default 1000 ms election
# timeout a 1 s TTL is granted as 2 s, so the harness runs etcd with
# --heartbeat-interval 20 --election-timeout 200 and gets 1 s (the smallest
# TTL etcd has: it counts in whole seconds; an expired lease is revoked by a
# check that runs every 500 ms, so a lock frees 1 to 1.5 s after the grant).
ETCD_TTL_S = 1
ZK_TICK_MS = 100            # ZooKeeper sessions may then be 200 ms .. 10 s
ZK_SESSION_S = 1.0
REDIS_TTL_MS = 400
PG_SERVER_IDLE_TIMEOUT = "1s"   # idle_in_transaction_session_timeout, main loop
SCENARIO_IDLE_TIMEOUT_S = 3     # the same, set per session in the scenario


def ttl_seconds(service):
    return {"etcd": ETCD_TTL_S, "zookeeper": ZK_SESSION_S, "redis": REDIS_TTL_MS / 1000.0}[service]


def resource_name(rid):
    return "ls-%d" % rid


# ===========================================================================
# lock service clients (workers, and the next holder of the scenarios)

class EtcdLock:
    def __init__(self, cfg):
        import etcd3
        self.c = etcd3.client(host="127.0.0.1", port=cfg["port"], timeout=10)
        self.holder = cfg["holder"]
        self.lease = None

    def acquire(self, rid, stop):
        t = self.c.transactions
        key = "/fence-ls/lock/%d" % rid
        while not stop():
            try:
                value, _ = self.c.get(key)
                if value is None:
                    lease = self.c.lease(ETCD_TTL_S)
                    ok, resp = self.c.transaction(
                        compare=[t.create(key) == 0],
                        success=[t.put(key, self.holder, lease=lease), t.get(key)],
                        failure=[])
                    if ok:
                        meta = resp[1][0][1]
                        assert meta.lease_id == lease.id, "lock key without our lease"
                        self.lease = lease
                        return meta.mod_revision
                    self._revoke(lease)
            except Exception:   # grpc or etcd errors, e.g. right after a SIGCONT
                time.sleep(0.1)
            time.sleep(random.uniform(0.01, 0.03))
        return None

    @staticmethod
    def _revoke(lease):
        try:
            lease.revoke()
        except Exception:   # already expired: "requested lease not found"
            pass

    def release(self, rid, token):
        if self.lease is not None:
            self._revoke(self.lease)
            self.lease = None

    def close(self):
        self.c.close()


class ZkLock:
    def __init__(self, cfg):
        from kazoo.client import KazooClient
        import logging
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        self.zk = KazooClient(hosts="127.0.0.1:%d" % cfg["port"], timeout=ZK_SESSION_S)
        self.zk.start(timeout=30)
        self.mine = "w%s-" % cfg["holder"].replace("-", "")
        self.path = None

    @staticmethod
    def seq(name):
        return int(name[-10:])

    def _forget_mine(self, d, deadline):
        """Delete this client's leftover znodes under d (a ConnectionLoss can
        leave one behind in a live session; an expired session has none)."""
        from kazoo.exceptions import NoNodeError
        while time.monotonic() < deadline:
            try:
                if not self.zk.connected:
                    time.sleep(0.05)
                    continue
                for k in self.zk.get_children(d):
                    if k.startswith(self.mine):
                        try:
                            self.zk.delete(d + "/" + k)
                        except NoNodeError:
                            pass
                return
            except NoNodeError:
                return
            except Exception:
                time.sleep(0.05)

    def acquire(self, rid, stop):
        from kazoo.exceptions import NoNodeError
        d = "/fence-ls/lock-%d" % rid
        while not stop():
            path = None
            try:
                if not self.zk.connected:
                    time.sleep(0.05)
                    continue
                path = self.zk.create(d + "/" + self.mine, ephemeral=True, sequence=True,
                                      makepath=True)
                name = path.rsplit("/", 1)[1]
                while not stop():
                    kids = sorted(self.zk.get_children(d), key=self.seq)
                    if name not in kids:
                        raise RuntimeError("our znode is gone (session expired)")
                    i = kids.index(name)
                    if i == 0:
                        self.path = path
                        return self.seq(name)
                    ev = threading.Event()
                    try:
                        if self.zk.exists(d + "/" + kids[i - 1], watch=lambda e: ev.set()):
                            ev.wait(0.5)
                    except NoNodeError:
                        pass
                # stopping
                self._forget_mine(d, time.monotonic() + 5)
                return None
            except Exception:
                time.sleep(0.05)
                self._forget_mine(d, time.monotonic() + 10)
        return None

    def release(self, rid, token):
        if self.path is not None:
            self._forget_mine(self.path.rsplit("/", 1)[0], time.monotonic() + 10)
            self.path = None

    def close(self):
        self.zk.stop()
        self.zk.close()


REDIS_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false
"""
REDIS_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLock:
    def __init__(self, cfg):
        import redis
        self.r = redis.Redis(host="127.0.0.1", port=cfg["port"], socket_timeout=10)
        self.acq = self.r.register_script(REDIS_ACQUIRE)
        self.rel = self.r.register_script(REDIS_RELEASE)
        self.holder = cfg["holder"]
        self.value = None

    def acquire(self, rid, stop):
        while not stop():
            value = "%s:%s" % (self.holder, uuid.uuid4().hex[:12])
            try:
                tok = self.acq(keys=["fence-ls:lock:%d" % rid, "fence-ls:token:%d" % rid],
                               args=[value, REDIS_TTL_MS])
                if tok is not None:
                    self.value = value
                    return int(tok)
            except Exception:
                time.sleep(0.1)
            time.sleep(random.uniform(0.005, 0.02))
        return None

    def release(self, rid, token):
        if self.value is not None:
            try:
                self.rel(keys=["fence-ls:lock:%d" % rid], args=[self.value])
            except Exception:
                pass
            self.value = None

    def close(self):
        self.r.close()


def make_lock(cfg):
    return {"etcd": EtcdLock, "zookeeper": ZkLock, "redis": RedisLock}[cfg["service"]](cfg)


# ===========================================================================
# the fenced read-modify-write, per engine

class Outcome:
    def __init__(self, kind, code=None, msg=None, n=None, pid=None):
        self.kind, self.code, self.msg, self.n, self.pid = kind, code, msg, n, pid

    def event(self):
        return {"ev": self.kind, "code": self.code, "msg": self.msg, "n": self.n, "pid": self.pid}


class PgDb:
    def __init__(self, cfg, wid):
        self.cfg, self.wid, self.conn, self.pid = cfg, wid, None, None

    def connect(self):
        import psycopg
        c = self.cfg["pg"]
        self.conn = psycopg.connect(host=c["host"], port=c["port"], user=c["user"],
                                    dbname=c["dbname"], connect_timeout=30)
        self.pid = self.conn.info.backend_pid
        if self.cfg.get("session_idle_timeout") is not None:
            self.conn.execute("SET idle_in_transaction_session_timeout = %s"
                              % quote(self.cfg["session_idle_timeout"]))
            self.conn.commit()

    def txstatus(self):
        return None if self.conn is None else self.conn.info.transaction_status.name

    def write(self, rid, tok, in_txn_window=0.0, on_fenced=None, wait_go=None):
        import psycopg
        try:
            if self.conn is None or self.conn.closed:
                self.connect()
            cur = self.conn.cursor()
            cur.execute("SELECT fence_check(%s, %s)", (resource_name(rid), tok))
            if on_fenced:
                on_fenced()
            if in_txn_window:
                time.sleep(in_txn_window)
            if wait_go:
                wait_go()
            cur.execute("SELECT n FROM counter WHERE id = %s", (rid,))
            n = cur.fetchone()[0]
            cur.execute("UPDATE counter SET n = %s, tok = %s WHERE id = %s", (n + 1, tok, rid))
            cur.execute("INSERT INTO accepted_log(rid, worker, token, n_before) "
                        "VALUES (%s, %s, %s, %s)", (rid, self.wid, tok, n))
            self.conn.commit()
            return Outcome("accepted", n=n)
        except psycopg.Error as e:
            code = getattr(e, "sqlstate", None)
            msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            try:
                if self.conn is not None and not self.conn.closed:
                    self.conn.rollback()
            except psycopg.Error:
                pass
            if self.conn is not None and (self.conn.closed or self.conn.broken):
                try:
                    self.conn.close()
                except Exception:
                    pass
                self.conn = None
                if code is None:
                    code = "connection"
            if code == STALE:
                return Outcome("rejected", code, msg)
            return Outcome("failed", code, msg, pid=self.pid)


class SqliteDb:
    def __init__(self, cfg, wid, busy_timeout=30.0):
        self.cfg, self.wid = cfg, wid
        self.con = sqlite3.connect(cfg["sqlite"]["path"], timeout=busy_timeout, isolation_level=None)
        self.con.enable_load_extension(True)
        self.con.load_extension(cfg["sqlite"]["ext"])
        self.con.enable_load_extension(False)
        self.con.execute("PRAGMA recursive_triggers=ON")   # accepted_log: keyed on rid, not the rowid

    def txstatus(self):
        return self.con.in_transaction

    def write(self, rid, tok, in_txn_window=0.0, on_fenced=None, wait_go=None):
        con = self.con
        try:
            con.execute("BEGIN IMMEDIATE")	# the write lock first: an equal accept takes none
            con.execute("SELECT fence_check(?, ?)", (resource_name(rid), tok)).fetchall()
            if on_fenced:
                on_fenced()
            if in_txn_window:
                time.sleep(in_txn_window)
            if wait_go:
                wait_go()
            n = con.execute("SELECT n FROM counter WHERE id = ?", (rid,)).fetchone()[0]
            con.execute("UPDATE counter SET n = ?, tok = ? WHERE id = ?", (n + 1, tok, rid))
            con.execute("INSERT INTO accepted_log(rid, worker, token, n_before) VALUES (?, ?, ?, ?)",
                        (rid, self.wid, tok, n))
            con.execute("COMMIT")
            return Outcome("accepted", n=n)
        except sqlite3.Error as e:
            if con.in_transaction:
                try:
                    con.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            msg = str(e)[:200]
            if isinstance(e, sqlite3.IntegrityError) and "stale fencing token" in msg:
                return Outcome("rejected", "stale", msg)
            code = "busy" if "locked" in msg or "busy" in msg else type(e).__name__
            return Outcome("failed", code, msg)


def session_ended(ev, fatal_pids=()):
    """The outcome of a write whose session the server ended because it sat
    idle inside its transaction: psycopg 3.1 reports the FATAL that arrived
    while the client was stopped as an OperationalError without sqlstate,
    "consuming input failed: terminating connection due to
    idle-in-transaction timeout", or, when the FATAL came right behind a
    result the client had not read yet (stopped while its fence_check
    waited for the lock), as "server closed the connection unexpectedly";
    the server logs it as FATAL 25P03 for that backend (fatal_pids)."""
    return ev["ev"] == "failed" and (ev.get("code") == IDLE_TIMEOUT or
                                     "idle-in-transaction timeout" in (ev.get("msg") or "") or
                                     (ev.get("code") == "connection" and ev.get("pid") in fatal_pids))


def idle_fatal_pids(server_log):
    """Backends the server ended with FATAL 25P03 (log_line_prefix '%m [%p] %e ')."""
    pids = set()
    try:
        with open(server_log, errors="replace") as f:
            for line in f:
                if "] 25P03 FATAL:  terminating connection due to idle-in-transaction timeout" in line:
                    pids.add(int(line.split("[", 1)[1].split("]", 1)[0]))
    except (OSError, ValueError, IndexError):
        pass
    return pids


def make_db(cfg, wid, **kw):
    return PgDb(cfg, wid) if cfg["engine"] == "pg" else SqliteDb(cfg, wid, **kw)


def quote(s):
    return "'" + str(s).replace("'", "''") + "'"


# ===========================================================================
# worker and zombie processes

def emit(**ev):
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def worker_main(cfg):
    stopping = [False]
    signal.signal(signal.SIGTERM, lambda *_: stopping.__setitem__(0, True))
    stop = lambda: stopping[0]
    wid = cfg["wid"]
    rnd = random.Random(cfg["seed"])
    lock = make_lock(cfg)
    db = make_db(cfg, wid)
    emit(ev="ready")
    lo, hi = cfg["window"]
    while not stop():
        rid = rnd.randrange(cfg["resources"])
        tok = lock.acquire(rid, stop)
        if tok is None:
            break
        in_txn = rnd.random() < cfg["in_txn"]
        window = rnd.uniform(lo, hi)
        if in_txn:
            out = db.write(rid, tok, in_txn_window=window,
                           on_fenced=lambda: emit(ev="fenced", r=rid, tok=tok))
        else:
            emit(ev="holding", r=rid, tok=tok, txs=db.txstatus())
            time.sleep(window)
            out = db.write(rid, tok)
        ev = out.event()
        ev.update(r=rid, tok=tok)
        emit(**ev)
        lock.release(rid, tok)
    emit(ev="bye")


def zombie_main(cfg):
    """One holder for the paused-inside-a-transaction scenarios: take the
    lock, open a fenced transaction, say "fenced", wait for "go" on stdin
    (the harness SIGSTOPs it meanwhile), finish the write, and if its
    session was ended, try again on a new connection with the same token."""
    wid = cfg["wid"]
    lock = make_lock(cfg)
    db = make_db(cfg, wid, busy_timeout=30.0)
    rid = cfg["rid"]
    tok = lock.acquire(rid, lambda: False)
    out = db.write(rid, tok, on_fenced=lambda: emit(ev="fenced", r=rid, tok=tok),
                   wait_go=lambda: sys.stdin.readline())
    ev = out.event()
    ev.update(r=rid, tok=tok)
    emit(**ev)
    if out.kind == "failed" and cfg["engine"] == "pg":
        out = db.write(rid, tok)
        ev = out.event()
        ev.update(r=rid, tok=tok, retry=True)
        emit(**ev)
    emit(ev="bye")


# ===========================================================================
# processes the harness starts, and their end

class Children:
    """Every process the harness starts, stopped by stop_all() whatever
    happens (finally, atexit, signal handlers); setpriv --pdeathsig covers
    a harness killed with SIGKILL."""

    def __init__(self):
        self.items = []     # (label, Popen, graceful signal, grace seconds)
        self.lock = threading.Lock()

    def spawn(self, label, argv, log=None, pdeathsig="KILL", user=None, graceful=signal.SIGTERM,
              grace=10.0, stdin=subprocess.DEVNULL, stdout=None, cwd=None):
        pre = ["setpriv", "--pdeathsig", pdeathsig]
        if user and IS_ROOT:
            pre += ["--reuid", user, "--regid", user, "--init-groups"]
        out = stdout if stdout is not None else (log if log is not None else subprocess.DEVNULL)
        err = log if log is not None else subprocess.DEVNULL
        p = subprocess.Popen(pre + ["--"] + argv, stdin=stdin, stdout=out, stderr=err,
                             start_new_session=True, cwd=cwd)
        with self.lock:
            self.items.append((label, p, graceful, grace))
        return p

    def stop(self, p):
        with self.lock:
            entry = [e for e in self.items if e[1] is p]
        for label, proc, graceful, grace in entry:
            self._stop_one(proc, graceful, grace)
            with self.lock:
                self.items = [e for e in self.items if e[1] is not proc]

    @staticmethod
    def _stop_one(p, graceful, grace):
        if p.poll() is not None:
            return
        for sig in (signal.SIGCONT, graceful):
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                return
        try:
            p.wait(grace)
            return
        except subprocess.TimeoutExpired:
            pass
        if graceful == signal.SIGINT:       # postgres: fast shutdown, then immediate
            try:
                os.kill(p.pid, signal.SIGQUIT)
                p.wait(10)
                return
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self):
        with self.lock:
            items = list(reversed(self.items))
            self.items = []
        # workers first (they are last in), then the servers
        for label, p, graceful, grace in items:
            try:
                self._stop_one(p, graceful, grace)
            except Exception:
                pass


CHILDREN = Children()
TEMP_DIRS = []
KEEP = [False]


def cleanup():
    CHILDREN.stop_all()
    if not KEEP[0]:
        for d in TEMP_DIRS:
            shutil.rmtree(d, ignore_errors=True)
        TEMP_DIRS.clear()


def _on_signal(signum, frame):
    raise SystemExit(128 + signum)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(pred, timeout, what, proc=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("%s exited with status %s" % (what, proc.returncode))
        try:
            if pred():
                return
        except Exception as e:
            last = e
        time.sleep(0.1)
    raise RuntimeError("%s not ready after %ss (%r)" % (what, timeout, last))


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError:
        return []


# ---------------------------------------------------------------------------
# servers

class Service:
    """A lock service started on free loopback ports. A subclass gives
    launch(attempt), which spawns the server into self.proc and waits until
    it answers; a port taken by someone else in between costs a retry on
    other ports."""
    name = None
    log = None

    def __init__(self, work):
        self.work = work
        self.start()

    def start(self):
        last = None
        for attempt in range(4):
            try:
                self.launch(attempt)
                return
            except Exception as e:
                last = e
                if getattr(self, "proc", None) is not None:
                    CHILDREN.stop(self.proc)
        raise RuntimeError("%s did not start: %s" % (self.name, last))

    def client_cfg(self):
        return {"service": self.name, "port": self.port}


class Etcd(Service):
    name = "etcd"
    extra_args = ()     # tests/ha adds --enable-v2 (Patroni's etcd v2 DCS)
    extra_hosts = ()    # and a network namespace's address to listen on and advertise

    def launch(self, attempt):
        import etcd3
        self.port, peer = free_port(), free_port()
        self.log = os.path.join(self.work, "etcd.log")
        url = lambda p: "http://127.0.0.1:%d" % p
        self.proc = CHILDREN.spawn("etcd", [
            "etcd", "--name", "fence-ls", "--data-dir", os.path.join(self.work, "etcd-%d" % attempt),
            "--listen-client-urls", ",".join([url(self.port)] + ["http://%s:%d" % (h, self.port)
                                                                 for h in self.extra_hosts]),
            "--advertise-client-urls", ",".join(["http://%s:%d" % (h, self.port) for h in self.extra_hosts]
                                                or [url(self.port)]),
            "--listen-peer-urls", url(peer), "--initial-advertise-peer-urls", url(peer),
            "--initial-cluster", "fence-ls=" + url(peer), "--initial-cluster-state", "new",
            "--heartbeat-interval", "20", "--election-timeout", "200"] + list(self.extra_args),
            log=open(self.log, "ab"))
        c = etcd3.client(host="127.0.0.1", port=self.port, timeout=2)
        wait_until(lambda: c.status().leader is not None, STARTUP_TIMEOUT, "etcd", self.proc)
        granted = c.lease(ETCD_TTL_S).ttl
        c.close()
        if granted != ETCD_TTL_S:
            raise RuntimeError("etcd granted a %ss lease for %ss" % (granted, ETCD_TTL_S))


class ZooKeeper(Service):
    name = "zookeeper"

    def launch(self, attempt):
        self.port = free_port()
        conf = os.path.join(self.work, "zk-%d" % attempt)
        os.makedirs(os.path.join(conf, "data"))
        with open(os.path.join(conf, "zoo.cfg"), "w") as f:
            f.write("tickTime=%d\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"
                    "admin.enableServer=false\nminSessionTimeout=%d\nmaxSessionTimeout=10000\n"
                    "4lw.commands.whitelist=ruok\nforceSync=no\n"
                    % (ZK_TICK_MS, os.path.join(conf, "data"), self.port, 2 * ZK_TICK_MS))
        self.log = os.path.join(self.work, "zookeeper.log")
        self.proc = CHILDREN.spawn("zookeeper", [
            "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp", conf + ":/usr/share/java/zookeeper.jar",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain", os.path.join(conf, "zoo.cfg")],
            log=open(self.log, "ab"))
        wait_until(self._ruok, STARTUP_TIMEOUT, "zookeeper", self.proc)

    def _ruok(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"


class Redis(Service):
    name = "redis"

    def launch(self, attempt):
        import redis
        self.port = free_port()
        self.log = os.path.join(self.work, "redis.log")
        self.proc = CHILDREN.spawn("redis", [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--daemonize", "no", "--dir", self.work], log=open(self.log, "ab"))
        r = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)
        wait_until(r.ping, STARTUP_TIMEOUT, "redis", self.proc)
        r.close()


SERVICES = {"etcd": Etcd, "zookeeper": ZooKeeper, "redis": Redis}


class PgCluster:
    """A throwaway cluster as in tests/pg_cluster.sh, but with the postmaster
    a direct child (so that the parent-death signal reaches it)."""

    def __init__(self, work):
        import psycopg     # noqa: F401  (fail early)
        self.bindir = subprocess.check_output(["pg_config", "--bindir"], text=True).strip()
        self.dir = os.path.join(work, "pg")
        os.makedirs(self.dir)
        os.chmod(work, 0o755)
        os.chmod(self.dir, 0o755)
        install = os.path.join(self.dir, "install")
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext"), "with_llvm=no"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext"), "with_llvm=no", "install",
                        "DESTDIR=" + install], check=True, stdout=subprocess.DEVNULL)
        if IS_ROOT:
            subprocess.run(["chown", "-R", "postgres", self.dir], check=True)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        run_as = ["runuser", "-u", "postgres", "--"] if IS_ROOT else []
        r = subprocess.run(run_as + [os.path.join(self.bindir, "initdb"), "-D", self.data, "-A", "trust",
                                     "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise RuntimeError("initdb failed: " + r.stdout[-2000:])
        self.port = 20000 + random.randrange(20000)     # only names the socket: no TCP
        # the log file must be the server's own (it runs as postgres)
        logf = open(self.log, "ab")
        if IS_ROOT:
            os.chown(self.log, *self._pg_ids())
        self.proc = CHILDREN.spawn("postgres", [
            os.path.join(self.bindir, "postgres"), "-D", self.data, "-k", self.dir, "-p", str(self.port),
            "-c", "listen_addresses=", "-c", "fsync=off", "-c", "extension_destdir=" + install,
            "-c", "track_commit_timestamp=on", "-c", "max_connections=100",
            "-c", "idle_in_transaction_session_timeout=" + PG_SERVER_IDLE_TIMEOUT,
            "-c", "log_line_prefix=%m [%p] %e "],
            log=logf, user="postgres", pdeathsig="QUIT", graceful=signal.SIGINT, grace=30)
        wait_until(lambda: self.connect("postgres").close() is None, STARTUP_TIMEOUT, "postgres", self.proc)

    @staticmethod
    def _pg_ids():
        import pwd
        pw = pwd.getpwnam("postgres")
        return pw.pw_uid, pw.pw_gid

    def cfg(self, dbname):
        return {"host": self.dir, "port": self.port, "user": "postgres", "dbname": dbname}

    def connect(self, dbname, autocommit=True):
        import psycopg
        return psycopg.connect(host=self.dir, port=self.port, user="postgres", dbname=dbname,
                               autocommit=autocommit, connect_timeout=10)

    def create_db(self, dbname, resources):
        with self.connect("postgres") as c:
            c.execute("CREATE DATABASE %s" % dbname)
        with self.connect(dbname) as c:
            c.execute("CREATE EXTENSION fence")
            c.execute("CREATE TABLE counter(id int PRIMARY KEY, n bigint NOT NULL, tok bigint)")
            c.execute("INSERT INTO counter SELECT g, 0, 0 FROM generate_series(0, %s) g" % (resources - 1))
            c.execute("CREATE TABLE accepted_log(id bigserial PRIMARY KEY, rid int NOT NULL, "
                      "worker int NOT NULL, token bigint NOT NULL, n_before bigint NOT NULL)")
            c.execute("SELECT fence_protect('counter', 'tok', 'ls-', 'id')")
            c.execute("SELECT fence_protect('accepted_log', 'token', 'ls-', 'rid')")

    def log_rows(self, dbname):
        """(rid, worker, token, n_before) per resource in commit order."""
        with self.connect(dbname) as c:
            rows = c.execute("SELECT rid, worker, token, n_before, pg_xact_commit_timestamp(xmin) "
                             "FROM accepted_log ORDER BY rid, pg_xact_commit_timestamp(xmin), n_before"
                             ).fetchall()
            counters = dict(c.execute("SELECT id, n FROM counter").fetchall())
            current = dict(c.execute("SELECT id, fence_current('ls-' || id) FROM counter").fetchall())
        return [(r[0], r[1], r[2], r[3]) for r in rows], counters, current, \
            [r for r in rows if r[4] is None]


class SqliteFile:
    def __init__(self, work, name, resources, ext):
        self.path = os.path.join(work, name + ".db")
        self.ext = ext
        con = self.connect()
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, tok INTEGER)")
        con.executemany("INSERT INTO counter VALUES (?, 0, 0)", [(i,) for i in range(resources)])
        con.execute("CREATE TABLE accepted_log(id INTEGER PRIMARY KEY AUTOINCREMENT, rid INTEGER NOT NULL, "
                    "worker INTEGER NOT NULL, token INTEGER NOT NULL, n_before INTEGER NOT NULL)")
        con.execute("SELECT fence_protect('counter', 'tok', 'ls-', 'id')").fetchall()
        con.execute("SELECT fence_protect('accepted_log', 'token', 'ls-', 'rid')").fetchall()
        con.close()

    def connect(self):
        con = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        con.enable_load_extension(True)
        con.load_extension(self.ext)
        con.execute("PRAGMA recursive_triggers=ON")   # accepted_log: keyed on rid
        return con

    def cfg(self):
        return {"path": self.path, "ext": self.ext}

    def log_rows(self):
        con = self.connect()
        rows = con.execute("SELECT rid, worker, token, n_before FROM accepted_log ORDER BY rid, id").fetchall()
        counters = dict(con.execute("SELECT id, n FROM counter").fetchall())
        current = dict(con.execute("SELECT id, fence_current('ls-' || id) FROM counter").fetchall())
        con.close()
        return rows, counters, current, []


# ===========================================================================
# reporting

class Report:
    def __init__(self):
        self.passed = self.failed = 0

    def ok(self, cond, what, details=()):
        print("%s - lockservice %s" % ("ok" if cond else "not ok", what), flush=True)
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            for d in list(details)[:15]:
                print("#   " + str(d), flush=True)

    @staticmethod
    def note(text):
        print("# " + text, flush=True)


# ===========================================================================
# the main loop: workers, pauses, and the checks

def start_worker(wid, cfg, work, label, stdin=subprocess.DEVNULL, mode="--worker"):
    cfg = dict(cfg, wid=wid, holder="%s-%d-%s" % (label, wid, uuid.uuid4().hex[:6]))
    errlog = open(os.path.join(work, "%s-%s.err" % (label, wid)), "ab")
    p = CHILDREN.spawn("worker", [PYTHON, os.path.abspath(__file__), mode, json.dumps(cfg)],
                       log=errlog, stdin=stdin, stdout=subprocess.PIPE, grace=20)
    return p


def reader(wid, p, q):
    for line in p.stdout:
        try:
            q.put((wid, json.loads(line), time.monotonic()))
        except ValueError:
            q.put((wid, {"ev": "garbage", "msg": line[:200].decode(errors="replace")}, time.monotonic()))
    q.put((wid, {"ev": "eof"}, time.monotonic()))


def run_combo(service, engine, args, work, pg, ext, rep, combo_no):
    label = "%s %s" % (service.name, engine)
    tag = "%s_%s_%d" % (service.name, engine, combo_no)
    R, W = args.resources, args.workers
    ttl = ttl_seconds(service.name)
    t_begin = time.monotonic()
    if engine == "pg":
        dbname = "ls_" + tag
        pg.create_db(dbname, R)
        dbcfg = {"pg": pg.cfg(dbname)}
    else:
        sq = SqliteFile(work, tag, R, ext)
        dbcfg = {"sqlite": sq.cfg()}
    cfg = dict(service.client_cfg(), engine=engine, resources=R, window=[0.03, 0.12],
               in_txn=0.25 if engine == "pg" else 0.0, **dbcfg)
    q = queue.Queue()
    procs = {}
    rnd = random.Random(args.seed * 1000 + combo_no)
    for wid in range(W):
        procs[wid] = start_worker(wid, dict(cfg, seed=rnd.randrange(1 << 30)), work, tag)
        threading.Thread(target=reader, args=(wid, procs[wid], q), daemon=True).start()

    phase = {wid: (None, None, None) for wid in range(W)}   # (state, rid, token)
    best = collections.defaultdict(lambda: -1)              # highest accepted token seen, per rid
    acked, refused, failed, unexpected = [], [], [], []
    ready, eofs = set(), set()
    pauses = []             # dicts
    open_pause = {}         # wid -> pause being held or awaiting its outcome
    considered = set()      # (wid, rid, token) already decided on
    qualified = 0
    max_pause = max(20.0, 10 * ttl)
    deadline = time.monotonic() + args.max_seconds

    evlog = open(os.path.join(work, tag + ".events"), "a")

    def handle(wid, ev, at):
        evlog.write("%.3f %d %s\n" % (at - t_begin, wid, json.dumps(ev)))
        kind = ev.get("ev")
        if kind == "ready":
            ready.add(wid)
        elif kind == "eof" or kind == "bye":
            if kind == "eof":
                eofs.add(wid)
        elif kind in ("holding", "fenced"):
            phase[wid] = (kind, ev["r"], ev["tok"])
        elif kind in ("accepted", "rejected", "failed"):
            key = (wid, ev["r"], ev["tok"])
            phase[wid] = (None, None, None)
            if kind == "accepted":
                acked.append((wid, ev["r"], ev["tok"], ev["n"]))
                best[ev["r"]] = max(best[ev["r"]], ev["tok"])
            elif kind == "rejected":
                refused.append(key + (ev["code"],))
            else:
                failed.append(key + (ev["code"], ev["msg"], ev.get("pid")))
            p = open_pause.get(wid)
            if p is not None and p["r"] == ev["r"] and p["tok"] == ev["tok"]:
                p["outcome"] = ev
        else:
            unexpected.append((wid, ev))

    def drain(block):
        try:
            item = q.get(timeout=block) if block else q.get_nowait()
        except queue.Empty:
            return
        while True:
            handle(*item)
            try:
                item = q.get_nowait()
            except queue.Empty:
                return

    error = None
    try:
        while len(ready) < W:
            drain(0.2)
            if eofs or time.monotonic() > deadline:
                raise RuntimeError("workers did not start (%d of %d ready)" % (len(ready), W))
        while True:
            drain(0.003)
            now = time.monotonic()
            for wid, p in list(open_pause.items()):
                if p["t_cont"] is None:
                    held = now - p["t_stop"]
                    if (best[p["r"]] > p["tok"] and held >= ttl) or held >= max_pause:
                        os.kill(procs[wid].pid, signal.SIGCONT)
                        evlog.write("%.3f %d SIGCONT\n" % (now - t_begin, wid))
                        p["t_cont"] = now
                        p["successor"] = best[p["r"]] > p["tok"]
                        if p["successor"]:
                            qualified += 1
                if p["t_cont"] is not None and (p["outcome"] is not None or wid in eofs):
                    del open_pause[wid]
            in_flight = sum(1 for p in open_pause.values() if p["t_cont"] is None)
            if qualified + in_flight < args.pauses and in_flight < args.max_paused:
                for wid in rnd.sample(range(W), W):
                    state, rid, tok = phase[wid]
                    if state is None or wid in open_pause or (wid, rid, tok) in considered:
                        continue
                    if any(p["r"] == rid and p["t_cont"] is None for p in open_pause.values()):
                        continue    # its predecessor is paused: let this one write (no chains)
                    considered.add((wid, rid, tok))
                    if rnd.random() < args.pause_probability:
                        os.kill(procs[wid].pid, signal.SIGSTOP)
                        evlog.write("%.3f %d SIGSTOP\n" % (time.monotonic() - t_begin, wid))
                        p = {"wid": wid, "r": rid, "tok": tok, "state": state, "t_stop": time.monotonic(),
                             "t_cont": None, "successor": None, "outcome": None}
                        pauses.append(p)
                        open_pause[wid] = p
                        break
            if qualified >= args.pauses and not open_pause:
                break
            if now > deadline:
                raise RuntimeError("time limit of %ss reached with %d of %d pauses"
                                   % (args.max_seconds, qualified, args.pauses))
            if eofs:
                raise RuntimeError("worker(s) %s exited early" % sorted(eofs))
    except Exception as e:
        error = e
    finally:
        for wid, p in procs.items():
            try:
                os.kill(p.pid, signal.SIGCONT)
                os.kill(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + 30
        while len(eofs) < W and time.monotonic() < end:
            drain(0.2)
        for p in procs.values():
            CHILDREN.stop(p)
        drain(0)
    seconds = time.monotonic() - t_begin

    # ---- the checks, on the database's own log
    if engine == "pg":
        rows, counters, current, no_ts = pg.log_rows(dbname)
        fatal = idle_fatal_pids(pg.log)
    else:
        rows, counters, current, no_ts = sq.log_rows()
        fatal = set()
    by_rid = collections.defaultdict(list)
    for rid, wid, tok, n in rows:
        by_rid[rid].append((wid, tok, n))
    order = {}              # (rid, token) -> position in its resource's commit order
    stale, seq_bad = [], []
    for rid, lst in by_rid.items():
        high = -1
        for i, (wid, tok, n) in enumerate(lst):
            order[(rid, tok)] = i
            if tok < high:
                stale.append("ls-%d: token %d committed after %d (worker %d)" % (rid, tok, high, wid))
            high = max(high, tok)
            if n != i:
                seq_bad.append("ls-%d: commit #%d has n_before %d" % (rid, i, n))
    for rid in range(R):
        if counters.get(rid) != len(by_rid.get(rid, [])):
            seq_bad.append("ls-%d: counter %s but %d log rows" % (rid, counters.get(rid), len(by_rid.get(rid, []))))
    logged = {(rid, tok): wid for rid, lst in by_rid.items() for wid, tok, n in lst}
    lost = ["worker %d ls-%d token %d n_before %d acknowledged, not in the log" % (w, r, t, n)
            for w, r, t, n in acked if logged.get((r, t)) != w]
    refused_logged = ["worker %d ls-%d token %d (%s) refused but in the log" % (w, r, t, x[0])
                      for (w, r, t, *x) in refused + failed if (r, t) in logged]
    cur_bad = ["ls-%d: fence_current %s, highest logged %s" % (rid, current.get(rid), max(t for _, t, _ in lst))
               for rid, lst in by_rid.items() if current.get(rid) != max(t for _, t, _ in lst)]
    # the zombies: paused past the TTL, resumed after a newer token's accepted write
    zq = [p for p in pauses if p["successor"]]
    z_stale = [p for p in zq if p["outcome"] and p["outcome"]["ev"] == "rejected"]
    z_ended = [p for p in zq if p["outcome"] and session_ended(p["outcome"], fatal)]
    z_before, z_bad = [], []
    for p in zq:
        o = p["outcome"]
        if p in z_stale or p in z_ended:
            continue
        if o and o["ev"] == "accepted":
            # acceptable only if it committed before every newer token (the
            # pause came after its commit): else a stale write was accepted
            lst = by_rid.get(p["r"], [])
            pos = order.get((p["r"], p["tok"]))
            newer = [i for i, (_, t, _) in enumerate(lst) if t > p["tok"]]
            if pos is not None and newer and pos < min(newer):
                z_before.append(p)
                continue
        z_bad.append("worker %d ls-%d token %d paused while %s, outcome %s"
                     % (p["wid"], p["r"], p["tok"], p["state"], o))
    odd = ["worker %d ls-%d token %d: %s %s" % (w, r, t, c, m) for (w, r, t, c, m, pid) in failed
           if not session_ended({"ev": "failed", "code": c, "msg": m, "pid": pid}, fatal)]
    qualified_pauses = [p for p in zq if p["t_cont"] - p["t_stop"] >= ttl]
    held = [p["t_cont"] - p["t_stop"] for p in qualified_pauses]
    in_txn = sum(1 for p in qualified_pauses if p["state"] == "fenced")

    rep.note("%s: pauses=%d rejections=%d accepted=%d   (workers=%d resources=%d ttl=%ss, %.0f s)"
             % (label, len(qualified_pauses), len(refused), len(acked), W, R, ttl, seconds))
    rep.note("%s: paused past the TTL %d times (%d seen inside an open fenced transaction), held %.2f..%.2f s "
             "(mean %.2f); zombies refused with a stale token %d, zombie sessions ended by the server %d, "
             "paused after their commit %d; stale-token rejections of unpaused late holders %d; "
             "other writes that failed because the server ended an idle-in-transaction session %d; "
             "other failed writes %d"
             % (label, len(qualified_pauses), in_txn, min(held or [0]), max(held or [0]),
                sum(held) / len(held) if held else 0, len(z_stale), len(z_ended), len(z_before),
                len(refused) - len(z_stale), len(failed) - len(odd) - len(z_ended), len(odd)))
    if no_ts:
        rep.note("%s: %d log rows without a commit timestamp" % (label, len(no_ts)))
    if error is not None:
        rep.ok(False, "%s run completed" % label, [repr(error)] + tail(service.log)
               + (tail(pg.log) if engine == "pg" else []))
    rep.ok(len(qualified_pauses) >= args.pauses,
           "%s at least %d workers paused past the lease TTL, each resumed after a newer holder's write"
           % (label, args.pauses), ["%d pauses" % len(qualified_pauses)])
    rep.ok(not stale, "%s stale writes accepted = 0 (tokens never decrease in commit order)" % label, stale)
    rep.ok(not lost and not seq_bad and acked,
           "%s accepted writes lost = 0 (every acknowledged write logged, counter = log rows, "
           "n_before without gap or duplicate)" % label, lost + seq_bad + ([] if acked else ["nothing accepted"]))
    rep.ok(not z_bad and len(z_stale) + len(z_ended) > 0,
           "%s every resumed zombie's write was refused" % label, z_bad)
    rep.ok(not refused_logged, "%s no refused write is in the log" % label, refused_logged)
    rep.ok(not cur_bad, "%s fence_current = highest logged token" % label, cur_bad)
    rep.ok(not odd and not unexpected, "%s workers saw no unexpected error" % label,
           odd + ["%s" % (u,) for u in unexpected])
    return seconds


# ===========================================================================
# paused inside an open transaction

def scenario_pg_idle(service, pg, work, rep):
    """The zombie is stopped inside BEGIN; fence_check(r, t1) (not committed).
    Case off: idle_in_transaction_session_timeout = 0 in its session: the
    next holder's fence_check(r, t2) waits behind it (cut here by a
    statement_timeout); resumed, the zombie commits (no newer token had
    committed: the fence orders it first). Case on: the setting at 3 s: the
    server ends the zombie's session, the next holder's fence_check goes
    through, the resumed zombie gets 25P03 and its retry the stale error."""
    import psycopg
    label = "%s pg paused inside a transaction" % service.name
    dbname = "ls_idle_" + service.name
    pg.create_db(dbname, 2)
    nxt = make_lock(dict(service.client_cfg(), holder="next-holder"))
    mon = pg.connect(dbname)
    t_timeout = SCENARIO_IDLE_TIMEOUT_S
    for rid, setting in ((0, "0"), (1, "%ds" % t_timeout)):
        case = "idle_in_transaction_session_timeout=%s" % setting
        cfg = dict(service.client_cfg(), engine="pg", pg=pg.cfg(dbname), rid=rid,
                   session_idle_timeout=setting)
        q = queue.Queue()
        z = start_worker(9, cfg, work, "idle-%s-%d" % (service.name, rid), stdin=subprocess.PIPE,
                         mode="--zombie")
        threading.Thread(target=reader, args=(9, z, q), daemon=True).start()
        evs = []

        def next_event(timeout=60):
            _, ev, _ = q.get(timeout=timeout)
            evs.append(ev)
            return ev

        try:
            ev = next_event()
            assert ev["ev"] == "fenced", ev
            t1 = ev["tok"]
            os.kill(z.pid, signal.SIGSTOP)
            t_stop = time.monotonic()
            zpid_state = mon.execute(
                "SELECT state FROM pg_stat_activity WHERE datname = %s AND state LIKE 'idle in%%'",
                (dbname,)).fetchall()
            t2 = nxt.acquire(rid, lambda: time.monotonic() - t_stop > 60)   # the zombie's lease expires
            t_lease = time.monotonic() - t_stop
            conn = pg.connect(dbname, autocommit=False)
            conn.execute("SET statement_timeout = %s" % quote("%ds" % (2 * t_timeout if rid == 0 else 60)))
            bpid = conn.info.backend_pid
            res = {}

            def advance():
                t0 = time.monotonic()
                try:
                    conn.execute("SELECT fence_check(%s, %s)", (resource_name(rid), t2))
                    res["ok"] = True
                except psycopg.Error as e:
                    res["err"] = e.sqlstate
                    conn.rollback()
                res["wait"] = time.monotonic() - t0

            th = threading.Thread(target=advance)
            th.start()
            waited = False
            while th.is_alive():
                row = mon.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                  (bpid,)).fetchone()
                waited = waited or (row is not None and row[0] == "Lock")
                time.sleep(0.05)
            th.join()
            rep.note("%s, %s: zombie stopped holding token %d (%s); next holder got token %d after %.1f s, "
                     "its fence_check returned after %.1f s: %s"
                     % (label, case, t1, zpid_state[0][0] if zpid_state else "?", t2, t_lease, res["wait"],
                        "accepted" if res.get("ok") else "error " + str(res.get("err"))))
            if rid == 0:
                rep.ok(waited and res.get("err") == QUERY_CANCELED,
                       "%s, timeout off: the next holder waits behind the open fenced transaction "
                       "(until its own statement_timeout)" % label, [res, "waited on a lock: %s" % waited])
                os.kill(z.pid, signal.SIGCONT)
                z.stdin.write(b"go\n")
                z.stdin.flush()
                ev = next_event()
                rep.ok(ev["ev"] == "accepted",
                       "%s, timeout off: the resumed zombie commits (no newer token had committed)" % label, [ev])
                o = PgDb({"pg": pg.cfg(dbname)}, 99)
                o.conn = conn
                out = o.write(rid, t2)
                rep.ok(out.kind == "accepted", "%s, timeout off: the next holder, after it, is accepted" % label,
                       [out.event()])
            else:
                rep.ok(waited and res.get("ok"),
                       "%s, timeout on: the next holder waits, then its fence_check is accepted" % label,
                       [res, "waited on a lock: %s" % waited])
                o = PgDb({"pg": pg.cfg(dbname)}, 99)
                o.conn = conn
                cur = conn.cursor()
                n = cur.execute("SELECT n FROM counter WHERE id = %s", (rid,)).fetchone()[0]
                cur.execute("UPDATE counter SET n = %s, tok = %s WHERE id = %s", (n + 1, t2, rid))
                cur.execute("INSERT INTO accepted_log(rid, worker, token, n_before) VALUES (%s, 99, %s, %s)",
                            (rid, t2, n))
                conn.commit()
                os.kill(z.pid, signal.SIGCONT)
                z.stdin.write(b"go\n")
                z.stdin.flush()
                ev = next_event()
                rep.note("%s, %s: the resumed zombie's next statement: %s %s: %s"
                         % (label, case, ev["ev"], ev["code"], ev["msg"]))
                rep.ok(session_ended(ev),
                       "%s, timeout on: the resumed zombie finds its session ended "
                       "(idle-in-transaction timeout)" % label, [ev])
                ev2 = next_event()
                rep.ok(ev2["ev"] == "rejected" and ev2["code"] == STALE,
                       "%s, timeout on: the zombie's retry with its old token is refused (23T01)" % label, [ev2])
                with open(pg.log, errors="replace") as f:
                    logged = [ln for ln in f if "25P03 FATAL:  terminating connection due to "
                              "idle-in-transaction timeout" in ln]
                rep.ok(logged, "%s, timeout on: the server log has FATAL 25P03 idle-in-transaction timeout"
                       % label)
            conn.close()
            toks = [r[0] for r in mon.execute("SELECT token FROM accepted_log WHERE rid = %s "
                                              "ORDER BY pg_xact_commit_timestamp(xmin)", (rid,)).fetchall()]
            want = [t1, t2] if rid == 0 else [t2]
            rep.ok(toks == want, "%s, %s: the log holds %s" % (label, "timeout off" if rid == 0 else "timeout on",
                                                               "zombie then next holder" if rid == 0
                                                               else "the next holder only"),
                   ["log tokens %s, want %s" % (toks, want)])
        except Exception as e:
            rep.ok(False, "%s, %s: scenario completed" % (label, case),
                   [repr(e), traceback.format_exc().splitlines()[-3:], evs] + tail(pg.log))
        finally:
            nxt.release(rid, None)
            CHILDREN.stop(z)
    nxt.close()
    mon.close()


def scenario_sqlite_idle(service, work, ext, rep):
    """SQLite has no server to end a transaction: the zombie stopped inside
    BEGIN; fence_check holds the write lock, the next holder's fence_check
    ends in SQLITE_BUSY after its busy timeout, for as long as the zombie is
    stopped; resumed, the zombie commits, and the next holder then goes on."""
    label = "%s sqlite paused inside a transaction" % service.name
    sq = SqliteFile(work, "idle_" + service.name, 1, ext)
    nxt = make_lock(dict(service.client_cfg(), holder="next-holder"))
    cfg = dict(service.client_cfg(), engine="sqlite", sqlite=sq.cfg(), rid=0)
    q = queue.Queue()
    z = start_worker(9, cfg, work, "idle-sqlite-%s" % service.name, stdin=subprocess.PIPE, mode="--zombie")
    threading.Thread(target=reader, args=(9, z, q), daemon=True).start()
    try:
        ev = q.get(timeout=60)[1]
        assert ev["ev"] == "fenced", ev
        t1 = ev["tok"]
        os.kill(z.pid, signal.SIGSTOP)
        t_stop = time.monotonic()
        t2 = nxt.acquire(0, lambda: time.monotonic() - t_stop > 60)
        db = SqliteDb({"sqlite": sq.cfg()}, 99, busy_timeout=2.0)
        t0 = time.monotonic()
        out = db.write(0, t2)
        waited = time.monotonic() - t0
        rep.note("%s: next holder (token %d, zombie %d) after %.1f s: %s %s"
                 % (label, t2, t1, waited, out.kind, out.msg))
        rep.ok(out.kind == "failed" and out.code == "busy",
               "%s: the next holder gets SQLITE_BUSY after its busy timeout" % label, [out.event()])
        os.kill(z.pid, signal.SIGCONT)
        z.stdin.write(b"go\n")
        z.stdin.flush()
        ev = q.get(timeout=60)[1]
        rep.ok(ev["ev"] == "accepted", "%s: the resumed zombie commits (no newer token had committed)" % label, [ev])
        out = db.write(0, t2)
        rep.ok(out.kind == "accepted", "%s: the next holder, after it, is accepted" % label, [out.event()])
        rows = [r[2] for r in sq.log_rows()[0]]
        rep.ok(rows == [t1, t2], "%s: the log holds zombie then next holder" % label, [rows])
    except Exception as e:
        rep.ok(False, "%s: scenario completed" % label, [repr(e)] + traceback.format_exc().splitlines()[-3:])
    finally:
        nxt.release(0, None)
        nxt.close()
        CHILDREN.stop(z)


# ===========================================================================

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--service", default="etcd", help="etcd,zookeeper,redis (comma list)")
    ap.add_argument("--engine", default="pg,sqlite", help="pg,sqlite (comma list)")
    ap.add_argument("--all", action="store_true", help="every service and engine")
    ap.add_argument("--stress", action="store_true", help="the make stress sizes (--pauses 1000 ...)")
    ap.add_argument("--pauses", type=int, default=None)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--resources", type=int, default=None)
    ap.add_argument("--max-paused", type=int, default=None, help="pauses held at once")
    ap.add_argument("--pause-probability", type=float, default=0.8)
    ap.add_argument("--max-seconds", type=float, default=None, help="time limit per combination")
    ap.add_argument("--no-scenarios", action="store_true", help="skip the paused-in-a-transaction scenarios")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--zombie", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(json.loads(args.worker))
    if args.zombie:
        return zombie_main(json.loads(args.zombie))

    if args.all:
        args.service, args.engine = "etcd,zookeeper,redis", "pg,sqlite"
    big = args.stress
    args.pauses = args.pauses or (1000 if big else 20)
    args.workers = max(4, args.workers or (24 if big else 6))
    args.resources = args.resources or (10 if big else 3)
    # at most one paused holder per resource (no chains), and some workers free
    args.max_paused = args.max_paused or max(1, min(args.workers - args.resources, args.resources))
    args.max_seconds = args.max_seconds or (3600 if big else 150)
    args.seed = args.seed if args.seed is not None else random.randrange(1 << 20)
    services = [s.strip() for s in args.service.split(",") if s.strip()]
    engines = [e.strip() for e in args.engine.split(",") if e.strip()]
    for s in services:
        if s not in SERVICES:
            ap.error("unknown service %s" % s)
    for e in engines:
        if e not in ("pg", "sqlite"):
            ap.error("unknown engine %s" % e)
    KEEP[0] = args.keep
    random.seed(args.seed)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, _on_signal)
    atexit.register(cleanup)
    rep = Report()
    t0 = time.monotonic()
    rep.note("seed %d: %d workers, %d resources, at most %d paused at once, %d pauses per combination"
             % (args.seed, args.workers, args.resources, args.max_paused, args.pauses))
    try:
        work = tempfile.mkdtemp(prefix="fence-lockservice.")
        TEMP_DIRS.append(work)
        if KEEP[0]:
            rep.note("work directory %s" % work)
        ext = None
        if "sqlite" in engines:
            subprocess.run(["make", "-s", "-C", ROOT, "sqlite_ext/fence.so"], check=True,
                           stdout=subprocess.DEVNULL)
            ext = os.path.join(ROOT, "sqlite_ext", "fence")
        pg = None
        if "pg" in engines:
            try:
                pg = PgCluster(work)
            except Exception as e:
                rep.ok(False, "PostgreSQL cluster started", [repr(e)])
                engines = [e for e in engines if e != "pg"]
        combo = 0
        for sname in services:
            try:
                svc = SERVICES[sname](work)
            except Exception as e:
                rep.ok(False, "%s started on 127.0.0.1" % sname, [repr(e)])
                continue
            try:
                rep.note("%s on 127.0.0.1:%d" % (sname, svc.port))
                for engine in engines:
                    combo += 1
                    try:
                        run_combo(svc, engine, args, work, pg, ext, rep, combo)
                    except Exception as e:
                        rep.ok(False, "%s %s run completed" % (sname, engine),
                               [repr(e)] + traceback.format_exc().splitlines()[-4:])
                    if not args.no_scenarios:
                        if engine == "pg":
                            scenario_pg_idle(svc, pg, work, rep)
                        else:
                            scenario_sqlite_idle(svc, work, ext, rep)
            finally:
                CHILDREN.stop(svc.proc)
        if pg is not None:
            CHILDREN.stop(pg.proc)
    finally:
        cleanup()
    rep.note("%d passed, %d failed in %.0f s" % (rep.passed, rep.failed, time.monotonic() - t0))
    return 0 if rep.failed == 0 and rep.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
