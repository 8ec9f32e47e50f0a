#!/usr/bin/python3
"""tests/ha/harness.py: fence on a Patroni-managed PostgreSQL cluster, through
failovers (issue 15, items 1-3).

What it starts (free ports, one temporary directory; everything stopped at
the end, also on failure: try/finally, atexit, SIGTERM/SIGINT/SIGHUP
handlers). Run as root, the whole run happens inside two network namespaces
it makes and deletes itself: "a" holds n1 alone, "b" everything else
(loopback inside b), joined by one veth pair with link-local addresses
169.254.77.1-2; no traffic leaves them. Without root there is no partition
and everything is on 127.0.0.1.
  - etcd (Debian etcd-server) as Patroni's DCS and as the writers' lock
    service (the tests/lockservice etcd, 1 s leases);
  - three Patroni (Debian patroni, etcd3 DCS) nodes n1..n3, each with its
    own data directory, PostgreSQL port, socket directory and REST API
    port, fence installed through extension_destdir, pg_rewind enabled;
  - 4 writer processes (this file with --writer). Each loops: take the etcd
    lock of a random resource (the key's mod_revision is the token), then
        BEGIN; SELECT fence_check('ha-R', token);
        SELECT n FROM counter WHERE id = R;                       -- n_before
        UPDATE counter SET n = n_before + 1, tok = token WHERE id = R;
        INSERT INTO ha_log (id, rid, worker, token, n_before);   -- the commit-order log
        COMMIT;
    and reports every outcome (acknowledged, refused stale, failed before
    COMMIT, in doubt: the connection broke during COMMIT). A fifth of the
    released tokens are kept and written again later as a zombie, once
    fence_current shows a newer token. Writers find the primary the way
    libpq clients do: a multi-host connection string with
    target_session_attrs=read-write. A transaction gets 5 s; a writer whose
    server stopped answering gives up on that connection (the socket is
    shut down under it) and connects again.

Faults, each while the writers run:
  synchronous_mode: true   a network partition of the primary n1 from etcd,
                           the replicas and the writers (its veth down past
                           the TTL, then up: it must have stopped being a
                           primary, and rejoins); switchover (Patroni REST API); kill -9 of the
                           primary's postmaster (Patroni restarts it); kill -9
                           of the whole primary node (Patroni and every
                           PostgreSQL process: a failover after the TTL);
                           SIGSTOP of the whole primary node past the TTL,
                           then SIGCONT (a failover; the old primary wakes
                           up demoted)
  asynchronous             kill -9 of the whole primary node under load (what
                           is lost is measured, not asserted), then a run
                           where the primary's WAL senders are stopped so
                           that acknowledged advances are lost for certain,
                           and the floor-raising procedure of
                           docs/replication.md is run and checked; then a
                           pg_dump taken before those advances is restored
                           and the same procedure checked on it
After each failover the old node's Patroni is started again; it rejoins as a
replica (pg_rewind when its timeline diverged), and once it has replayed
everything its ha_log and fence_tokens must equal the leader's.

Checked on the committed history of the surviving timeline (ha_log, in
commit order: per resource, n_before must run 0..N-1 without gap or
duplicate, and pg_xact_commit_timestamp gives the same order):
  - per resource, tokens never decrease in commit order (no stale token
    accepted); counter.n = number of log rows; fence_current = the highest
    logged token;
  - no zombie write was accepted after fence_current had shown a newer token;
  - no write reported refused is in the log;
  - synchronous_mode: every acknowledged write is in the log;
  - every rejoined old primary agrees with the leader.
Asynchronous: the acknowledged writes and advances a failover lost are
counted and printed; after the floor is raised, a zombie holding a token
that the lost history had refused is refused again.

Usage: /usr/bin/python3 tests/ha/harness.py [--stress] [--failovers N] [--keep]
        [--plan partition,switchover,postmaster,node,sigstop] [--only sync,async,floor]
        [--dcs etcd|etcd3] [--no-netns]
  default   make check: in synchronous mode the partition, a switchover, the
            postmaster kill, a node kill and a SIGSTOP (4 failovers), 1
            asynchronous failover, the floor procedure (about 3 minutes)
  --dcs etcd3  Patroni's etcd3 DCS instead of the v2 one: on Debian 12's
            Patroni 3.0.2 the SIGSTOP run then loses acknowledged writes
            (docs/replication.md)
  --stress  make stress: at least 50 failovers (switchovers, node kills,
            SIGSTOPs) in synchronous mode, then the asynchronous runs
Output: "# " lines with every count, "ok - ha ..." / "not ok - ha ..." per
assertion. Exit status 0 iff every assertion holds.
"""
import argparse
import atexit
import collections
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "lockservice"))
import harness as ls    # noqa: E402  (etcd, the etcd lock, process handling)

PYTHON = "/usr/bin/python3"
IS_ROOT = os.geteuid() == 0
STALE = "23T01"
BINDIR = "/usr/lib/postgresql/15/bin"
DB = "fenceha"
RESOURCES = 6
# Patroni timing: the leader key lives TTL seconds; a replica takes over
# about TTL s after the primary's Patroni stopped renewing it.
TTL, LOOP_WAIT, RETRY_TIMEOUT = 8, 1, 3
TXN_DEADLINE = 5.0      # seconds a writer's transaction may take before it gives up


# Set in a run inside network namespaces (run_in_namespaces): n1 alone in
# namespace "a", everything else in "b", one veth pair between them.
NET = {}


def resource(rid):
    return "ha-%d" % rid


# ===========================================================================
# the writer process

def writer_main(cfg):
    import psycopg
    stopping = [False]
    signal.signal(signal.SIGTERM, lambda *_: stopping.__setitem__(0, True))
    wid = cfg["worker"]
    rng = random.Random(cfg["seed"])
    lock = ls.EtcdLock({"port": cfg["etcd_port"], "holder": "writer-%d" % wid})
    conn = [None]

    def emit(**ev):
        ev["w"] = wid
        ev["t"] = time.time()
        sys.stdout.write(json.dumps(ev) + "\n")
        sys.stdout.flush()

    def connection():
        # libpq's multi-host string with target_session_attrs=read-write, but
        # one host at a time: psycopg 3.1 drives the connection itself and
        # applies connect_timeout to the whole attempt, so a stopped host
        # first in the list would use it all up and the others never be tried
        if conn[0] is None or conn[0].closed:
            last = None
            for host in cfg["hosts"]:
                try:
                    conn[0] = psycopg.connect(cfg["conninfo"] + " " + host, autocommit=True,
                                              connect_timeout=2)
                    return conn[0]
                except psycopg.Error as e:
                    last = e
            raise last
        return conn[0]

    def drop():
        try:
            conn[0].close()
        except Exception:
            pass
        conn[0] = None

    def write(rid, tok, zombie=False):
        """One fenced read-modify-write; emits its outcome."""
        wid_ = uuid.uuid4().hex
        phase = "connect"
        timer = None
        try:
            c = connection()
            fd = c.pgconn.socket

            def give_up():      # a server that stopped answering: shut the socket down
                try:
                    s = socket.socket(fileno=os.dup(fd))
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            timer = threading.Timer(TXN_DEADLINE, give_up)
            timer.start()
            phase = "body"
            c.execute("BEGIN")
            seen = None
            if zombie:
                seen = c.execute("SELECT fence_current(%s)", (resource(rid),)).fetchone()[0]
            c.execute("SELECT fence_check(%s, %s)", (resource(rid), tok))
            n = c.execute("SELECT n FROM counter WHERE id = %s", (rid,)).fetchone()[0]
            c.execute("UPDATE counter SET n = %s, tok = %s WHERE id = %s", (n + 1, tok, rid))
            c.execute("INSERT INTO ha_log (id, rid, worker, token, n_before, zombie) "
                      "VALUES (%s, %s, %s, %s, %s, %s)", (wid_, rid, wid, tok, n, zombie))
            phase = "commit"
            c.execute("COMMIT")
            emit(e="ack", id=wid_, r=rid, tok=tok, n=n, zombie=zombie, seen=seen)
        except psycopg.Error as e:
            state = getattr(e, "sqlstate", None)
            if state == STALE:
                emit(e="stale", id=wid_, r=rid, tok=tok, zombie=zombie)
                try:
                    conn[0].execute("ROLLBACK")
                except Exception:
                    drop()
            else:
                emit(e="doubt" if phase == "commit" else "fail", id=wid_, r=rid, tok=tok,
                     zombie=zombie, phase=phase, state=state, msg=str(e).strip()[:160])
                drop()
                time.sleep(0.2)
        finally:
            if timer is not None:
                timer.cancel()

    zombies = []
    while not stopping[0]:
        rid = rng.randrange(RESOURCES)
        tok = lock.acquire(rid, lambda: stopping[0])
        if tok is None:
            break
        write(rid, tok)
        lock.release(rid, tok)
        if rng.random() < 0.2:
            zombies.append((rid, tok))
        # a zombie writes once a newer token is visible: it must be refused
        for z in list(zombies):
            if stopping[0]:
                break
            try:
                cur = connection().execute("SELECT fence_current(%s)", (resource(z[0]),)).fetchone()[0]
            except psycopg.Error:
                drop()
                break
            if cur is not None and cur > z[1]:
                zombies.remove(z)
                write(z[0], z[1], zombie=True)
        del zombies[:-8]
        time.sleep(rng.uniform(0, 0.02))
    lock.close()
    return 0


# ===========================================================================
# the cluster

def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def pg_ids():
    import pwd
    pw = pwd.getpwnam("postgres")
    return pw.pw_uid, pw.pw_gid


def chown_postgres(path):
    if IS_ROOT:
        run(["chown", "-R", "postgres:postgres", path])


def http(method, url, body=None, timeout=5):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def descendants(pid):
    """pid and every process below it (from /proc)."""
    children = collections.defaultdict(list)
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children[ppid].append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class Node:
    def __init__(self, cluster, name):
        self.cluster = cluster
        self.name = name
        self.dir = os.path.join(cluster.work, name)
        self.data = os.path.join(self.dir, "data")
        self.pg_port = ls.free_port()
        self.api_port = ls.free_port()
        # n1 lives alone in namespace a when the run has namespaces; the
        # others, etcd and the writers share b
        self.netns = NET["a"] if NET and name == "n1" else None
        self.host = (NET["addr_a"] if self.netns else NET["addr_b"]) if NET else "127.0.0.1"
        self.cfg = os.path.join(self.dir, "patroni.yml")
        self.log = os.path.join(self.dir, "patroni.log")
        self.proc = None
        os.makedirs(self.dir)
        self.write_config()

    def write_config(self):
        c = self.cluster
        trust = ["local all all trust", "host all all 127.0.0.1/32 trust",
                 "host replication all 127.0.0.1/32 trust"]
        if NET:
            trust += ["host all all %s trust" % NET["net"], "host replication all %s trust" % NET["net"]]
        conf = {
            "scope": c.scope, "name": self.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": "%s:%d" % (self.host, self.api_port),
                        "connect_address": "%s:%d" % (self.host, self.api_port)},
            c.dcs: {"hosts": ["%s:%d" % (c.etcd_host, c.etcd_port)]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    "synchronous_mode": c.sync,
                    "postgresql": {
                        "use_pg_rewind": True, "use_slots": True,
                        "parameters": {"wal_log_hints": "on", "track_commit_timestamp": "on",
                                       "max_wal_senders": 10, "max_replication_slots": 10,
                                       "wal_keep_size": "256MB", "hot_standby": "on",
                                       "max_connections": 60}}},
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
                "pg_hba": trust,
            },
            "postgresql": {
                "listen": "%s:%d" % (self.host, self.pg_port),
                "connect_address": "%s:%d" % (self.host, self.pg_port),
                "data_dir": self.data, "bin_dir": BINDIR,
                "pgpass": os.path.join(self.dir, "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                    "rewind": {"username": "postgres", "password": "postgres"}},
                "pg_hba": trust,
                "parameters": {"unix_socket_directories": self.dir,
                               "extension_destdir": c.install, "fsync": "off",
                               "logging_collector": "on", "log_directory": os.path.join(self.dir, "pglog"),
                               "log_filename": "postgresql.log", "log_line_prefix": "%m [%p] %e "},
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }
        with open(self.cfg, "w") as f:
            json.dump(conf, f, indent=1)     # YAML reads JSON

    def start(self):
        chown_postgres(self.dir)
        logf = open(self.log, "ab")
        # no parent-death signal: Patroni must outlive nothing but the
        # harness, and the harness stops it (and its PostgreSQL) itself
        argv, user = ["patroni", self.cfg], "postgres"
        if self.netns and IS_ROOT:     # ip netns exec and setpriv each exec the next: one pid
            argv = ["ip", "netns", "exec", self.netns, "setpriv", "--reuid", "postgres", "--regid",
                    "postgres", "--init-groups", "--"] + argv
            user = None
        # from a directory postgres can enter: the checkout may be one it
        # cannot (a clone under /root or a mktemp -d), and Patroni's
        # multiprocessing children die at once when they cannot chdir back
        self.proc = ls.CHILDREN.spawn("patroni " + self.name, argv, log=logf,
                                      pdeathsig="TERM", user=user, graceful=signal.SIGTERM,
                                      grace=40, cwd=self.dir)

    def api(self, method="GET", path="/", body=None):
        return http(method, "http://%s:%d%s" % (self.host, self.api_port, path), body)

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def patroni_pid(self):
        """The patroni process itself (under setpriv, which execs it)."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def processes(self):
        pids = []
        if self.patroni_pid():
            pids += descendants(self.patroni_pid())
        pm = self.postmaster_pid()
        if pm and pm not in pids and os.path.exists("/proc/%d" % pm):
            pids += descendants(pm)
        return pids

    def connect(self, dbname=DB, **kw):
        import psycopg
        return psycopg.connect(host=self.host, port=self.pg_port, user="postgres", dbname=dbname,
                               autocommit=True, connect_timeout=3, **kw)

    def kill_node(self):
        """SIGKILL Patroni and every PostgreSQL process of this node."""
        pids = self.processes()
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        # orphaned backends exit once they see the postmaster gone; wait for them
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(os.path.exists("/proc/%d" % p) and
                                                  not _zombie(p) for p in pids):
            time.sleep(0.1)
        return len(pids)

    def stop_quietly(self):
        if self.proc is not None:
            ls.CHILDREN.stop(self.proc)
        pm = self.postmaster_pid()
        if pm and os.path.exists("/proc/%d" % pm):
            run((["runuser", "-u", "postgres", "--"] if IS_ROOT else []) +
                [BINDIR + "/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"], cwd="/")


def _zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class HaCluster:
    def __init__(self, work, etcd_port, sync, install, dcs):
        self.work = work
        self.dcs = dcs
        self.etcd_host = NET["addr_b"] if NET else "127.0.0.1"
        self.etcd_port = etcd_port
        self.sync = sync
        self.install = install
        self.scope = "fence-ha-%d" % os.getpid()
        self.nodes = [Node(self, "n%d" % i) for i in (1, 2, 3)]

    def conninfo(self, dbname=DB):
        return ("host=%s port=%s dbname=%s user=postgres target_session_attrs=read-write"
                % (",".join(n.host for n in self.nodes),
                   ",".join(str(n.pg_port) for n in self.nodes), dbname))

    def node(self, name):
        return [n for n in self.nodes if n.name == name][0]

    def members(self):
        """Patroni's view (GET /cluster from the first node that answers)."""
        for n in self.nodes:
            if n.patroni_pid() is None:
                continue
            try:
                status, body = n.api("GET", "/cluster")
                if status == 200:
                    return json.loads(body)["members"]
            except Exception:
                continue
        return []

    def leader(self):
        for m in self.members():
            if m["role"] == "leader" and m["state"] == "running":
                return self.node(m["name"])
        return None

    def wait_healthy(self, timeout=120, exclude=()):
        """A running leader that accepts writes, and every other node
        streaming (in synchronous mode: one of them the sync standby)."""
        def healthy():
            ms = self.members()
            want = [n.name for n in self.nodes if n.name not in exclude]
            by = {m["name"]: m for m in ms}
            if any(w not in by for w in want):
                return False
            roles = [by[w]["role"] for w in want]
            if roles.count("leader") != 1:
                return False
            if any(by[w]["state"] not in ("running", "streaming") for w in want):
                return False
            if self.sync and len(want) > 1 and "sync_standby" not in roles:
                return False
            lead = self.leader()
            if lead is None:
                return False
            with lead.connect("postgres") as c:
                if c.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                    return False
                n = c.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                              ).fetchone()[0]
            return n >= len(want) - 1
        ls.wait_until(healthy, timeout, "a healthy Patroni cluster")
        return self.leader()

    def start(self):
        self.nodes[0].start()
        ls.wait_until(lambda: self.leader() is not None, 120, "the first Patroni leader")
        for n in self.nodes[1:]:
            n.start()
        lead = self.wait_healthy()
        with lead.connect("postgres") as c:
            c.execute("CREATE DATABASE %s" % DB)
        with lead.connect() as c:
            c.execute("CREATE EXTENSION fence")
            c.execute("CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL, tok bigint)")
            c.execute("INSERT INTO counter SELECT g, 0, 0 FROM generate_series(0, %d) g" % (RESOURCES - 1))
            c.execute("CREATE TABLE ha_log (id text PRIMARY KEY, rid int NOT NULL, worker int NOT NULL, "
                      "token bigint NOT NULL, n_before bigint NOT NULL, zombie bool NOT NULL)")
            c.execute("SELECT fence_protect('counter', 'tok', 'ha-', 'id')")
            c.execute("SELECT fence_protect('ha_log', 'token', 'ha-', 'rid')")
        return lead

    def set_sync(self, sync):
        lead = self.leader()
        status, body = lead.api("PATCH", "/config", {"synchronous_mode": sync})
        if status != 200:
            raise RuntimeError("PATCH /config synchronous_mode=%s: %s %s" % (sync, status, body))
        self.sync = sync

    def stop(self):
        for n in reversed(self.nodes):
            try:
                n.stop_quietly()
            except Exception:
                pass


# ===========================================================================
# the writers, seen from the harness

class Writers:
    def __init__(self, work, cluster, etcd_port, count, tag):
        self.files = []
        self.procs = []
        for w in range(count):
            path = os.path.join(work, "writer-%s-%d.events" % (tag, w))
            cfg = {"worker": w, "seed": random.randrange(1 << 30), "etcd_port": etcd_port,
                   "conninfo": "dbname=%s user=postgres target_session_attrs=read-write" % DB,
                   "hosts": ["host=%s port=%d" % (n.host, n.pg_port) for n in cluster.nodes]}
            out = open(path, "w")
            p = ls.CHILDREN.spawn("writer %d" % w, [PYTHON, os.path.abspath(__file__), "--writer",
                                                      json.dumps(cfg)],
                                  log=open(path + ".err", "w"), stdout=out)
            self.files.append(path)
            self.procs.append(p)

    def events(self):
        evs = []
        for path in self.files:
            try:
                with open(path) as f:
                    for line in f:
                        try:
                            evs.append(json.loads(line))
                        except ValueError:
                            pass    # a line cut by the stop
            except OSError:
                pass
        return evs

    def acks_since(self, t):
        return sum(1 for e in self.events() if e["e"] == "ack" and e["t"] > t)

    def stop(self):
        for p in self.procs:
            ls.CHILDREN.stop(p)
        return self.events()


def wait_progress(writers, n, timeout, what):
    """Wait until n more writes have been acknowledged (by the new primary)."""
    t = time.time()
    ls.wait_until(lambda: writers.acks_since(t) >= n, timeout, what)


# ===========================================================================
# checks on the surviving history

def read_history(node):
    with node.connect() as c:
        rows = c.execute("SELECT rid, token, n_before, id, worker, zombie, "
                         "pg_xact_commit_timestamp(xmin) FROM ha_log ORDER BY rid, n_before").fetchall()
        counters = dict(c.execute("SELECT id, n FROM counter").fetchall())
        current = dict(c.execute("SELECT id, fence_current('ha-' || id) FROM counter").fetchall())
        tokens = sorted(c.execute("SELECT resource, token FROM fence_tokens").fetchall())
    return rows, counters, current, tokens


def check_history(rep, label, node, events, sync):
    """The invariant on the surviving timeline; returns the log's ids."""
    rows, counters, current, _ = read_history(node)
    per = collections.defaultdict(list)
    for r in rows:
        per[r[0]].append(r)
    gaps, decreasing, ts_disorder, wrong_current = [], [], [], []
    for rid in range(RESOURCES):
        lst = per.get(rid, [])
        if [r[2] for r in lst] != list(range(len(lst))) or counters.get(rid) != len(lst):
            gaps.append((rid, counters.get(rid), [r[2] for r in lst][:12]))
        for a, b in zip(lst, lst[1:]):
            if b[1] < a[1]:
                decreasing.append((rid, a[1], b[1]))
            if a[6] is not None and b[6] is not None and b[6] < a[6]:
                ts_disorder.append((rid, a[2], b[2]))
        top = max((r[1] for r in lst), default=None)
        if top is not None and current.get(rid) != top:
            wrong_current.append((rid, current.get(rid), top))
    ids = {r[3] for r in rows}
    rep.ok(not gaps, "%s: per resource n_before runs 0..N-1 and the counter is N (%d log rows; "
           "no lost update)" % (label, len(rows)), gaps[:5])
    rep.ok(not ts_disorder, "%s: commit timestamps give the same commit order" % label, ts_disorder[:5])
    rep.ok(not decreasing, "%s: per resource, tokens never decrease in commit order "
           "(stale tokens accepted: %d)" % (label, len(decreasing)), decreasing[:5])
    rep.ok(not wrong_current, "%s: fence_current is each resource's highest logged token" % label,
           wrong_current[:5])
    kinds = collections.Counter(e["e"] for e in events)
    zombies = [e for e in events if e.get("zombie")]
    zombie_acc = [e for e in zombies if e["e"] == "ack"]
    rep.note("%s: writes acknowledged=%d refused-stale=%d failed-before-commit=%d in-doubt=%d; "
             "zombie writes=%d (refused %d, accepted %d)"
             % (label, kinds["ack"], kinds["stale"], kinds["fail"], kinds["doubt"], len(zombies),
                sum(1 for e in zombies if e["e"] == "stale"), len(zombie_acc)))
    bad_zombie = [e for e in zombie_acc if e.get("seen") is not None and e["seen"] > e["tok"]]
    rep.ok(not bad_zombie, "%s: no zombie accepted after fence_current showed a newer token" % label,
           bad_zombie[:3])
    refused_in_log = [e for e in events if e["e"] in ("stale", "fail") and e["id"] in ids]
    rep.ok(not refused_in_log, "%s: no write reported refused or failed is in the log" % label,
           refused_in_log[:3])
    acked = [e for e in events if e["e"] == "ack"]
    lost = [e for e in acked if e["id"] not in ids]
    doubt_in = sum(1 for e in events if e["e"] == "doubt" and e["id"] in ids)
    rep.note("%s: acknowledged writes lost=%d; in-doubt writes that committed=%d of %d"
             % (label, len(lost), doubt_in, kinds["doubt"]))
    if sync:
        rep.ok(not lost, "%s: synchronous_mode: no acknowledged write lost (%d acknowledged)"
               % (label, len(acked)), lost[:3])
    return ids, lost


def wait_caught_up(lead, node, timeout=90):
    with lead.connect("postgres") as c:
        target = c.execute("SELECT pg_current_wal_lsn()").fetchone()[0]

    def caught():
        with node.connect("postgres") as c:
            return c.execute("SELECT pg_is_in_recovery() AND pg_last_wal_replay_lsn() >= %s::pg_lsn",
                             (target,)).fetchone()[0]
    ls.wait_until(caught, timeout, "%s replaying up to %s" % (node.name, target))


def check_agrees(rep, label, lead, node):
    wait_caught_up(lead, node)
    a = read_history(lead)
    b = read_history(node)
    rep.ok(a[0] == b[0] and a[3] == b[3],
           "%s: the rejoined old primary %s has the leader's ha_log and fence_tokens (%d rows, %d tokens)"
           % (label, node.name, len(a[0]), len(a[3])),
           "leader %d rows, old primary %d rows" % (len(a[0]), len(b[0])))


# ===========================================================================
# faults

class Faults:
    def __init__(self, rep, cluster, writers_factory):
        self.rep = rep
        self.c = cluster
        self.failovers = 0
        self.counts = collections.Counter()

    def rejoin(self, node, label):
        """Start the node's Patroni again; it must come back as a replica
        (pg_rewind when its timeline diverged) and agree with the leader."""
        t0 = time.monotonic()
        node.start()
        lead = self.c.wait_healthy(timeout=180)
        rewound = "pg_rewind" in tail_text(node.log, 200)
        self.rep.note("%s: %s rejoined as a replica in %.1f s%s" % (label, node.name, time.monotonic() - t0,
                                                                   " (pg_rewind ran)" if rewound else ""))
        return lead

    def switchover(self, writers, label, candidate=None):
        lead = self.c.wait_healthy()
        ms = self.c.members()
        cands = [m["name"] for m in ms if m["role"] == ("sync_standby" if self.c.sync else "replica")]
        cand = random.choice(cands) if candidate is None else candidate
        t0 = time.monotonic()
        status, body = lead.api("POST", "/switchover", {"leader": lead.name, "candidate": cand})
        if status != 200:
            raise RuntimeError("switchover %s -> %s: %s %s" % (lead.name, cand, status, body))
        new = self.c.wait_healthy(timeout=120)
        wait_progress(writers, 5, 60, "writes on the new primary after the switchover")
        self.failovers += 1
        self.counts["switchover"] += 1
        self.rep.note("%s: switchover %s -> %s, writers going again in %.1f s"
                      % (label, lead.name, new.name, time.monotonic() - t0))
        return lead, new

    def kill_postmaster(self, writers, label):
        lead = self.c.wait_healthy()
        pm = lead.postmaster_pid()
        t0 = time.monotonic()
        os.kill(pm, signal.SIGKILL)
        time.sleep(1)
        new = self.c.wait_healthy(timeout=120)
        wait_progress(writers, 5, 90, "writes after the postmaster kill")
        self.counts["postmaster kill"] += 1
        if new.name != lead.name:
            self.failovers += 1
        self.rep.note("%s: kill -9 of %s's postmaster (pid %d); leader now %s, writers going again in %.1f s"
                      % (label, lead.name, pm, new.name, time.monotonic() - t0))
        return lead, new

    def kill_node(self, writers, label, check=None):
        lead = self.c.wait_healthy()
        t0 = time.monotonic()
        n = lead.kill_node()
        new = self.c.wait_healthy(timeout=120, exclude=(lead.name,))
        wait_progress(writers, 5, 90, "writes on the new primary after the node kill")
        took = time.monotonic() - t0
        self.failovers += 1
        self.counts["node kill"] += 1
        self.rep.note("%s: kill -9 of node %s (Patroni and %d processes); %s promoted, writers going "
                      "again in %.1f s" % (label, lead.name, n - 1, new.name, took))
        if check is not None:
            check(lead, new)
        self.rejoin(lead, label)
        return lead, new

    def sigstop_node(self, writers, label):
        lead = self.c.wait_healthy()
        pids = lead.processes()
        t0 = time.monotonic()
        for p in pids:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        try:
            new = self.c.wait_healthy(timeout=120, exclude=(lead.name,))
            wait_progress(writers, 5, 90, "writes on the new primary while the old one is stopped")
        finally:
            for p in reversed(pids):
                try:
                    os.kill(p, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        took = time.monotonic() - t0
        self.failovers += 1
        self.counts["SIGSTOP"] += 1
        self.rep.note("%s: SIGSTOP of node %s (%d processes) past the %d s TTL; %s promoted in %.1f s; SIGCONT"
                      % (label, lead.name, len(pids), TTL, new.name, took))
        # the old primary wakes up, finds the leader key gone and demotes itself
        self.c.wait_healthy(timeout=180)
        return lead, new


    def partition(self, writers, label):
        """Cut n1 (alone in namespace a) off from etcd, the replicas and
        the writers (all in namespace b): its veth goes down until a replica
        has been promoted and writes go on there; then the link comes back
        and n1 must rejoin as a replica."""
        lead = self.c.wait_healthy()
        if lead.name != "n1":       # the partition isolates n1: make it the primary first
            sync = [m["name"] for m in self.c.members() if m["role"] == "sync_standby"]
            if self.c.sync and sync != ["n1"]:
                # in synchronous_mode only the sync standby may take over
                self.rep.note("%s: no partition this time (n1 is not the primary or its sync standby)"
                              % label)
                return None, None
            self.switchover(writers, label, candidate="n1")
            lead = self.c.wait_healthy()
        t0 = time.monotonic()
        netns_link(NET["a"], NET["veth_a"], "down")
        try:
            new = self.c.wait_healthy(timeout=120, exclude=(lead.name,))
            wait_progress(writers, 5, 90, "writes on the new primary while n1 is cut off")
            took = time.monotonic() - t0
            # the old primary's Patroni cannot renew the leader key: it must
            # have stopped being a primary (seen from inside its namespace)
            # (Patroni demotes it: "shutting down", "starting up" on the way)
            deadline = time.monotonic() + 30
            role = netns_psql(lead, "SELECT pg_is_in_recovery()")
            while role not in ("t", "down", "shutting down") and time.monotonic() < deadline:
                time.sleep(0.5)
                role = netns_psql(lead, "SELECT pg_is_in_recovery()")
        finally:
            netns_link(NET["a"], NET["veth_a"], "up")
        self.failovers += 1
        self.counts["partition"] += 1
        self.rep.note("%s: n1 cut off from etcd, replicas and writers (veth down); %s promoted, writers "
                      "going again in %.1f s; n1 while cut off: %s" % (label, new.name, took, role))
        self.rep.ok(role in ("t", "down", "shutting down"), "%s: the partitioned old primary is no longer a primary "
                    "(pg_is_in_recovery: %s)" % (label, role))
        t1 = time.monotonic()
        self.c.wait_healthy(timeout=180)
        self.rep.note("%s: link up; n1 rejoined in %.1f s" % (label, time.monotonic() - t1))
        return lead, new


def netns_link(ns, dev, state):
    subprocess.run(["ip", "-n", ns, "link", "set", dev, state], check=True)


def netns_psql(node, sql):
    """Ask a node through its Unix socket (the harness cannot reach it
    across the partition); "down" when no server listens there."""
    r = run((["runuser", "-u", "postgres", "--"] if IS_ROOT else []) +
            [BINDIR + "/psql", "-h", node.dir, "-p", str(node.pg_port), "-d", "postgres", "-Atc", sql],
            cwd="/", timeout=30)
    if r.returncode == 0:
        return r.stdout.strip()
    if "No such file" in r.stdout or "Connection refused" in r.stdout:
        return "down"
    # a fast shutdown that waits for WAL senders whose replicas it cannot
    # reach (until wal_sender_timeout): sessions ended, connections refused
    return "shutting down" if "is shutting down" in r.stdout else r.stdout.strip()


def tail_text(path, n=400):
    return "\n".join(ls.tail(path, n))


# ===========================================================================
# the runs

def sync_run(rep, cluster, etcd_port, work, args):
    label = "sync"
    writers = Writers(work, cluster, etcd_port, args.writers, "sync")
    faults = Faults(rep, cluster, None)
    rejoined = []
    try:
        wait_progress(writers, 10, 60, "the first writes")
        if args.stress:
            plan = ["partition", "switchover", "node", "sigstop", "postmaster"]
            i = 0
            while faults.failovers < args.failovers:
                kind = plan[i % len(plan)] if i < len(plan) else random.choice(
                    ["switchover", "switchover", "node", "sigstop", "partition"])
                i += 1
                do(faults, kind, writers, label, rejoined)
        else:
            for kind in args.plan.split(","):
                do(faults, kind, writers, label, rejoined)
        lease_check(rep, cluster, writers, faults, label)
        time.sleep(1)
    finally:
        events = writers.stop()
    lead = cluster.wait_healthy(timeout=120)
    rep.note("%s: failovers=%d (%s)" % (label, faults.failovers,
                                         ", ".join("%s %d" % kv for kv in sorted(faults.counts.items()))))
    rep.ok(faults.failovers >= (args.failovers if args.stress else 2),
           "%s: at least %d failovers under load (%d)" % (label, args.failovers if args.stress else 2,
                                                         faults.failovers))
    check_history(rep, label, lead, events, sync=True)
    for n in cluster.nodes:
        if n is not lead:
            check_agrees(rep, label, lead, n)


def lease_check(rep, cluster, writers, faults, label):
    """fence_leases through a switchover in synchronous_mode: a lease granted
    on the old primary is still live on the new one (another holder gets
    NULL, the same holder its lease back), and the next grant is greater."""
    lead = cluster.wait_healthy()
    with lead.connect() as c:
        t1 = c.execute("SELECT fence_acquire('ha-lease', 'h1', 600000)").fetchone()[0]
    faults.switchover(writers, label + " leases")
    new = cluster.wait_healthy()
    with new.connect() as c:
        other = c.execute("SELECT fence_acquire('ha-lease', 'h2', 600000)").fetchone()[0]
        again = c.execute("SELECT fence_acquire('ha-lease', 'h1', 600000)").fetchone()[0]
        released = c.execute("SELECT fence_release('ha-lease', 'h1', %s)", (t1,)).fetchone()[0]
        t2 = c.execute("SELECT fence_acquire('ha-lease', 'h2', 600000)").fetchone()[0]
    rep.ok(t1 is not None and other is None and again == t1 and released is True and t2 is not None
           and t2 > t1,
           "%s: a lease granted on %s (token %s) survives the switchover to %s: another holder gets %s, "
           "the holder its lease back (%s), after release the next grant is %s"
           % (label, lead.name, t1, new.name, other, again, t2))


def do(faults, kind, writers, label, rejoined):
    if kind == "switchover":
        faults.switchover(writers, label)
    elif kind == "postmaster":
        faults.kill_postmaster(writers, label)
    elif kind == "node":
        faults.kill_node(writers, label)
    elif kind == "sigstop":
        faults.sigstop_node(writers, label)
    elif kind == "partition":
        if NET:
            faults.partition(writers, label)
        else:
            faults.rep.note("%s: no partition (network namespaces need root)" % label)


def async_run(rep, cluster, etcd_port, work, args):
    label = "async"
    cluster.set_sync(False)
    ls.wait_until(lambda: all(m["role"] != "sync_standby" for m in cluster.members()), 60,
                  "synchronous_mode off")
    writers = Writers(work, cluster, etcd_port, args.writers, "async")
    faults = Faults(rep, cluster, None)
    runs = args.async_failovers
    total_lost = 0
    try:
        wait_progress(writers, 10, 60, "the first asynchronous writes")
        for _ in range(runs):
            faults.kill_node(writers, label)
        time.sleep(1)
    finally:
        events = writers.stop()
    lead = cluster.wait_healthy(timeout=120)
    ids, lost = check_history(rep, label, lead, events, sync=False)
    acked = [e for e in events if e["e"] == "ack"]
    top_acked = {}
    for e in acked:
        top_acked[e["r"]] = max(top_acked.get(e["r"], -1), e["tok"])
    _, _, current, _ = read_history(lead)
    lost_adv = [r for r, t in top_acked.items() if (current.get(r) or -1) < t]
    rep.note("%s: measured over %d failover(s) under load: %d of %d acknowledged writes lost, "
             "%d resource(s) whose highest acknowledged advance was lost"
             % (label, runs, len(lost), len(acked), len(lost_adv)))
    for n in cluster.nodes:
        if n is not lead:
            check_agrees(rep, label, lead, n)


def floor_run(rep, cluster, etcd_port, work):
    """Acknowledged advances lost for certain (the primary's WAL senders
    stopped), then the floor procedure of docs/replication.md."""
    import etcd3
    label = "async floor"
    lead = cluster.wait_healthy()
    replicas = [n for n in cluster.nodes if n is not lead]
    ec = etcd3.client(host="127.0.0.1", port=etcd_port)
    lk = ls.EtcdLock({"port": etcd_port, "holder": "floor"})
    # a holder with token t_old writes; its lease ends; a newer holder's
    # advance t_new is acknowledged and the zombie t_old refused, on the old
    # primary only
    r_kept, r_new = 0, RESOURCES    # RESOURCES: a resource first fenced in the lost history
    t_old = lk.acquire(r_kept, lambda: False)
    lk.release(r_kept, t_old)
    with lead.connect() as c:
        c.execute("BEGIN")
        c.execute("SELECT fence_check(%s, %s)", (resource(r_kept), t_old))
        c.execute("COMMIT")
    wait_caught_up(lead, replicas[0])
    wait_caught_up(lead, replicas[1])
    # a backup taken now: restored later, it has forgotten t_new as well
    dump = os.path.join(work, "before.dump")
    r = run((["runuser", "-u", "postgres", "--"] if IS_ROOT else []) +
            [BINDIR + "/pg_dump", "-Fc", "-h", lead.host, "-p", str(lead.pg_port), "-U", "postgres",
             "-d", DB, "-f", dump], cwd="/")
    rep.ok(r.returncode == 0, "%s: pg_dump of the database before the lost advances" % label, r.stdout[-300:])
    # the primary's WAL senders stop sending (a replica's stopped receiver
    # would still find the WAL in its socket buffer when it resumes)
    with lead.connect("postgres") as c:
        receivers = [r[0] for r in c.execute("SELECT pid FROM pg_stat_replication").fetchall()]
    rep.note("%s: the WAL senders of %s stopped (pids %s)" % (label, lead.name, receivers))
    for p in receivers:
        os.kill(p, signal.SIGSTOP)
    try:
        t_new = lk.acquire(r_kept, lambda: False)
        lk.release(r_kept, t_new)
        t_first = lk.acquire(r_new, lambda: False)
        lk.release(r_new, t_first)
        with lead.connect() as c:
            c.execute("BEGIN")
            c.execute("SELECT fence_check(%s, %s)", (resource(r_kept), t_new))
            c.execute("SELECT fence_check(%s, %s)", (resource(r_new), t_first))
            c.execute("COMMIT")
            refused_before = c.execute("SELECT fence_try(%s, %s)", (resource(r_kept), t_old)).fetchone()[0]
            refused_new_before = c.execute("SELECT fence_try(%s, %s)", (resource(r_new), t_first - 1)
                                           ).fetchone()[0]
        rep.ok(refused_before is False and refused_new_before is False,
               "%s: on the old primary the zombie's token %d is refused (highest %d)" % (label, t_old, t_new))
        lead.kill_node()
    finally:
        for p in receivers:
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass
    new = cluster.wait_healthy(timeout=120, exclude=(lead.name,))
    with new.connect() as c:
        cur_kept = c.execute("SELECT fence_current(%s)", (resource(r_kept),)).fetchone()[0]
        cur_new = c.execute("SELECT fence_current(%s)", (resource(r_new),)).fetchone()[0]
        rep.note("%s: after the failover to %s, fence_current(%s) = %s (acknowledged %d), "
                 "fence_current(%s) = %s (acknowledged %d)"
                 % (label, new.name, resource(r_kept), cur_kept, t_new, resource(r_new), cur_new, t_first))
        rep.ok(cur_kept == t_old and cur_new is None,
               "%s: the failover lost the acknowledged advances (the harm the floor repairs)" % label)
        c.execute("BEGIN")
        readmitted = c.execute("SELECT fence_try(%s, %s)", (resource(r_kept), t_old)).fetchone()[0]
        c.execute("ROLLBACK")
        rep.ok(readmitted is True, "%s: without the floor the zombie's token %d is admitted again" % (label, t_old))
        # the procedure: the lock service's current revision is at or above
        # every token it ever granted; raise every resource to it
        floor = current_revision(ec)
        names = [resource(r) for r in range(RESOURCES + 1)]
        c.execute("BEGIN")
        raised = c.execute(FLOOR_SQL, (floor, names)).fetchall()
        c.execute("COMMIT")
        rep.note("%s: floor %d (etcd's current revision) raised on %d resources" % (label, floor, len(raised)))
        after = dict(c.execute("SELECT resource, token FROM fence_tokens").fetchall())
        rep.ok(all(after.get(n, -1) >= floor for n in names),
               "%s: after the floor every named resource's highest is >= %d" % (label, floor))
        state = None
        try:
            c.execute("BEGIN")
            c.execute("SELECT fence_check(%s, %s)", (resource(r_kept), t_old))
        except Exception as e:
            state = getattr(e, "sqlstate", None)
        c.execute("ROLLBACK")
        rep.ok(state == STALE, "%s: the zombie's token %d is refused again (%s)" % (label, t_old, state))
        state_new = None
        try:
            c.execute("BEGIN")
            c.execute("SELECT fence_check(%s, %s)", (resource(r_new), t_first))
        except Exception as e:
            state_new = getattr(e, "sqlstate", None)
        c.execute("ROLLBACK")
        rep.ok(state_new == STALE,
               "%s: a token granted before the failover for a resource first fenced in the lost "
               "history is refused (%s)" % (label, state_new))
        t_fresh = lk.acquire(r_kept, lambda: False)
        lk.release(r_kept, t_fresh)
        c.execute("BEGIN")
        ok_fresh = c.execute("SELECT fence_try(%s, %s)", (resource(r_kept), t_fresh)).fetchone()[0]
        c.execute("COMMIT")
        rep.ok(ok_fresh is True and t_fresh > floor,
               "%s: a holder that takes the lock again (token %d > floor) is accepted" % (label, t_fresh))
        restore_run(rep, label, new, dump, ec, lk, r_kept, r_new, t_old, t_new, t_first)
    lk.close()
    ec.close()
    faults = Faults(rep, cluster, None)
    lead2 = faults.rejoin(lead, label)
    check_agrees(rep, label, lead2, lead)


def restore_run(rep, label, node, dump, ec, lk, r_kept, r_new, t_old, t_new, t_first):
    """A restore from the backup taken before the advances: the same floor
    procedure, the same zombie refused."""
    label = label.replace("floor", "restore")
    with node.connect("postgres") as a:
        a.execute("DROP DATABASE IF EXISTS fenceha_restored")
        a.execute("CREATE DATABASE fenceha_restored")
    try:
        r = run((["runuser", "-u", "postgres", "--"] if IS_ROOT else []) +
                [BINDIR + "/pg_restore", "-h", node.host, "-p", str(node.pg_port), "-U", "postgres",
                 "-d", "fenceha_restored", "--single-transaction", dump], cwd="/")
        rep.ok(r.returncode == 0, "%s: pg_restore of the old backup" % label, r.stdout[-300:])
        with node.connect("fenceha_restored") as c:
            cur = c.execute("SELECT fence_current(%s), fence_current(%s)",
                            (resource(r_kept), resource(r_new))).fetchone()
            c.execute("BEGIN")
            readmitted = c.execute("SELECT fence_try(%s, %s)", (resource(r_kept), t_old)).fetchone()[0]
            c.execute("ROLLBACK")
            rep.ok(cur == (t_old, None) and readmitted is True,
                   "%s: the restored database has forgotten %d and %d and admits the zombie's %d again (%s)"
                   % (label, t_new, t_first, t_old, cur))
            floor = current_revision(ec)
            c.execute("BEGIN")
            c.execute(FLOOR_SQL, (floor, [resource(r) for r in range(RESOURCES + 1)]))
            c.execute("COMMIT")
            states = []
            for rid, tok in ((r_kept, t_old), (r_kept, t_new), (r_new, t_first)):
                try:
                    c.execute("BEGIN")
                    c.execute("SELECT fence_check(%s, %s)", (resource(rid), tok))
                    states.append(None)
                except Exception as e:
                    states.append(getattr(e, "sqlstate", None))
                c.execute("ROLLBACK")
            rep.ok(states == [STALE] * 3, "%s: after the floor (%d) the zombie's token and every token "
                   "granted before the restore are refused (%s)" % (label, floor, states))
            t_fresh = lk.acquire(r_kept, lambda: False)
            lk.release(r_kept, t_fresh)
            c.execute("BEGIN")
            fresh = c.execute("SELECT fence_try(%s, %s)", (resource(r_kept), t_fresh)).fetchone()[0]
            c.execute("COMMIT")
            rep.ok(fresh is True, "%s: a holder that takes the lock again (%d) is accepted" % (label, t_fresh))
    finally:
        with node.connect("postgres") as a:
            a.execute("DROP DATABASE IF EXISTS fenceha_restored WITH (FORCE)")


def current_revision(ec):
    """etcd's current revision: a put's own revision is above every
    mod_revision (token) etcd granted before it."""
    return ec.put("/fence-ha/floor-marker", str(time.time())).header.revision


# The floor procedure (docs/replication.md): in one transaction, every named
# resource is fenced at the floor; fence_try returns false where the highest
# is already above it. It waits for open fenced transactions like any advance.
FLOOR_SQL = ("SELECT r, fence_try(r, %s) "
             "FROM unnest(ARRAY(SELECT resource FROM fence_tokens) || %s::text[]) AS r")


# ===========================================================================
# network namespaces: the whole run inside two namespaces it makes itself

def run_in_namespaces(argv):
    """Make namespaces a (n1 alone) and b (etcd, n2, n3, the writers, the
    harness), joined by one veth pair with link-local addresses; run this
    harness again inside b; delete both namespaces (and so the veth pair)
    whatever happened. No traffic of the run leaves these namespaces."""
    rep = Report()
    tag = "%05d" % (os.getpid() % 100000)
    net = {"a": "fence-ha-%s-a" % tag, "b": "fence-ha-%s-b" % tag,
           "veth_a": "fha%sa" % tag, "veth_b": "fha%sb" % tag,
           "addr_a": "169.254.77.2", "addr_b": "169.254.77.1", "net": "169.254.77.0/30"}
    made = []
    status = 1

    def ip(*a):
        r = run(["ip"] + list(a))
        if r.returncode != 0:
            raise RuntimeError("ip %s: %s" % (" ".join(a), r.stdout.strip()))
    try:
        for ns in (net["a"], net["b"]):
            ip("netns", "add", ns)
            made.append(ns)
        ip("-n", net["a"], "link", "add", net["veth_a"], "type", "veth", "peer", "name", net["veth_b"],
           "netns", net["b"])
        ip("-n", net["a"], "addr", "add", net["addr_a"] + "/30", "dev", net["veth_a"])
        ip("-n", net["b"], "addr", "add", net["addr_b"] + "/30", "dev", net["veth_b"])
        for ns, dev in ((net["a"], net["veth_a"]), (net["b"], net["veth_b"])):
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "set", dev, "up")
        p = subprocess.Popen(["setpriv", "--pdeathsig", "TERM", "--", "ip", "netns", "exec", net["b"],
                              PYTHON, os.path.abspath(__file__)] + argv + ["--inner", json.dumps(net)])
        try:
            status = p.wait()
        except BaseException:
            p.terminate()
            p.wait(180)
            raise
    except RuntimeError as e:
        rep.ok(False, "network namespaces made", repr(e))
    finally:
        for ns in made:
            run(["ip", "netns", "del", ns])
        listed = run(["ip", "netns", "list"]).stdout
        left = [ns for ns in made if ns in listed]
        left += [d for d in (net["veth_a"], net["veth_b"]) if run(["ip", "link", "show", d]).returncode == 0]
        rep.ok(made and not left, "no network namespace or veth left behind (%s)" % ", ".join(made),
               repr(left))
    return status or (1 if rep.failed else 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--writer")
    ap.add_argument("--stress", action="store_true")
    ap.add_argument("--failovers", type=int, default=50)
    ap.add_argument("--plan", default="partition,switchover,postmaster,node,sigstop")
    ap.add_argument("--async-failovers", type=int, default=1)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--dcs", choices=("etcd", "etcd3"), default="etcd")
    ap.add_argument("--no-netns", action="store_true", help="no network namespaces (and no partition)")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    ap.add_argument("--only", default="sync,async,floor")
    args = ap.parse_args()
    if args.writer:
        return writer_main(json.loads(args.writer))
    if args.inner:
        NET.update(json.loads(args.inner))
    elif IS_ROOT and not args.no_netns and shutil.which("ip"):
        return run_in_namespaces(sys.argv[1:])
    if args.stress:
        args.async_failovers = max(args.async_failovers, 5)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, ls._on_signal)
    cluster = [None]

    def cleanup():
        if cluster[0] is not None:
            cluster[0].stop()
        ls.cleanup()
    atexit.register(cleanup)
    ls.KEEP[0] = args.keep
    rep = Report()
    t0 = time.monotonic()
    work = tempfile.mkdtemp(prefix="fence-ha-")
    ls.TEMP_DIRS.append(work)
    os.chmod(work, 0o755)
    try:
        if shutil.which("patroni") is None:
            rep.ok(False, "patroni is installed (make check installs it)")
            return 1
        install = os.path.join(work, "install")
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext"), "with_llvm=no"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext"), "with_llvm=no", "install",
                        "DESTDIR=" + install], check=True, stdout=subprocess.DEVNULL)
        chown_postgres(work)
        if args.dcs == "etcd":
            ls.Etcd.extra_args = ("--enable-v2=true",)
        if NET:
            ls.Etcd.extra_hosts = (NET["addr_b"],)
        etcd = ls.Etcd(work)
        rep.note("etcd on 127.0.0.1:%d; Patroni's DCS: %s" % (etcd.port, args.dcs))
        cluster[0] = HaCluster(work, etcd.port, sync=True, install=install, dcs=args.dcs)
        lead = cluster[0].start()
        rep.note("Patroni cluster up in %.1f s: %s" % (
            time.monotonic() - t0, ", ".join("%s pg %d api %d" % (n.name, n.pg_port, n.api_port)
                                             for n in cluster[0].nodes)))
        rep.ok(lead is not None, "a Patroni cluster of 3 nodes with fence, synchronous_mode on, leader %s"
               % lead.name)
        only = args.only.split(",")
        for name, fn in (("sync", sync_run), ("async", async_run)):
            if name in only:
                try:
                    fn(rep, cluster[0], etcd.port, work, args)
                except Exception as e:
                    rep.ok(False, "%s run completed" % name, [repr(e)] + traceback.format_exc().splitlines()[-6:])
        if "floor" in only:
            try:
                if cluster[0].sync:
                    cluster[0].set_sync(False)
                floor_run(rep, cluster[0], etcd.port, work)
            except Exception as e:
                rep.ok(False, "floor run completed", [repr(e)] + traceback.format_exc().splitlines()[-6:])
    except Exception as e:
        rep.ok(False, "cluster harness", [repr(e)] + traceback.format_exc().splitlines()[-6:])
    finally:
        if rep.failed and cluster[0] is not None:
            keep_logs(work, cluster[0])
        cleanup()
    rep.note("%d passed, %d failed in %.0f s" % (rep.passed, rep.failed, time.monotonic() - t0))
    return 0 if rep.failed == 0 and rep.passed > 0 else 1


def keep_logs(work, cluster):
    dest = os.path.join(ROOT, "tests", "results", "ha")
    try:
        os.makedirs(dest, exist_ok=True)
        for n in cluster.nodes:
            for src, name in ((n.log, "%s-patroni.log" % n.name),
                              (os.path.join(n.dir, "pglog", "postgresql.log"), "%s-postgresql.log" % n.name)):
                if os.path.exists(src):
                    shutil.copy(src, os.path.join(dest, name))
        for f in os.listdir(work):
            if f.endswith(".events") or f.endswith(".err") or f == "etcd.log":
                shutil.copy(os.path.join(work, f), os.path.join(dest, f))
    except OSError:
        pass


class Report:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, cond, what, details=()):
        cond = bool(cond)
        print("%s - ha %s" % ("ok" if cond else "not ok", what), flush=True)
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            if isinstance(details, str):
                details = [details]
            for d in list(details)[:10]:
                print("#   %s" % (d,), flush=True)
        return cond

    @staticmethod
    def note(msg):
        print("# " + msg, flush=True)


if __name__ == "__main__":
    sys.exit(main())
