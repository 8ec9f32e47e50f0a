#!/usr/bin/python3
"""tests/pg_pgbouncer.py: fence behind pgbouncer in transaction pooling mode
(issue 15, item 4).

pgbouncer (Debian's package, started here on loopback with its own ini and
socket directory, stopped at the end) sits in front of the server in
PGHOST/PGPORT with pool_mode=transaction and 2 server connections for 16
clients, so consecutive transactions of one client run on different
backends and one backend serves many clients. What must hold:
  - a fence lasts for the client's transaction only: a fence_check in one
    transaction never lets a later transaction of the same client, or any
    transaction of another client on the same backend, write a protected
    table unfenced;
  - a backend's remembered highest never lets a stale token through for
    another client;
  - under a load of fenced read-modify-writes with stale holders mixed in,
    the committed log's tokens never decrease per resource and no stale
    token commits.
fence relies on no session-level state, so transaction pooling is safe;
statement pooling cannot run multi-statement transactions at all.
Output: "ok - pgbouncer ..." lines.
"""
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

import psycopg

from tap import Report

DB = "fence_pgbouncer"

REPORT = Report("pgbouncer")
ok = REPORT.ok


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    pgbouncer = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(pgbouncer):
        ok(False, "pgbouncer is installed (make check installs it)")
        return 1
    admin = psycopg.connect(dbname="postgres", autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS %s" % DB)
    admin.execute("CREATE DATABASE %s" % DB)
    with psycopg.connect(dbname=DB, autocommit=True) as c:
        c.execute("CREATE EXTENSION fence")
        c.execute("CREATE TABLE acct (id int PRIMARY KEY, bal int, tok bigint)")
        c.execute("SELECT fence_protect('acct', 'tok', 'pb:', 'id')")
        c.execute("CREATE TABLE plain (id int PRIMARY KEY, n int)")
        c.execute("SELECT fence_protect('plain', NULL, 'pb:plain')")
        c.execute("INSERT INTO acct SELECT g, 0, 1 FROM generate_series(1, 4) g")
        c.execute("SELECT fence_check('pb:plain', 1)")
        c.execute("CREATE TABLE log (seq bigserial PRIMARY KEY, resource text, token bigint)")

    work = tempfile.mkdtemp(prefix="fence-pgbouncer-")
    os.chmod(work, 0o755)
    port = free_port()
    ini = os.path.join(work, "pgbouncer.ini")
    with open(ini, "w") as f:
        f.write("[databases]\n%s = host=%s port=%s dbname=%s\n" % (
            DB, os.environ["PGHOST"], os.environ["PGPORT"], DB))
        f.write("[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = %d\n"
                "unix_socket_dir = %s\nauth_type = trust\nauth_file = %s/users.txt\n"
                "pool_mode = transaction\ndefault_pool_size = 2\nmax_client_conn = 100\n"
                "logfile = %s/pgbouncer.log\npidfile = %s/pgbouncer.pid\n" % (
                    port, work, work, work, work))
    with open(os.path.join(work, "users.txt"), "w") as f:
        f.write('"postgres" ""\n')
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
        for n in os.listdir(work):
            shutil.chown(os.path.join(work, n), "postgres")
    cmd = ([] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]) + [pgbouncer, ini]
    bouncer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        conninfo = "host=127.0.0.1 port=%d dbname=%s user=postgres" % (port, DB)
        deadline = time.time() + 15
        while True:
            try:
                psycopg.connect(conninfo, autocommit=True).close()
                break
            except psycopg.Error:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        run(conninfo)
    finally:
        bouncer.send_signal(signal.SIGTERM)
        try:
            bouncer.wait(10)
        except subprocess.TimeoutExpired:
            bouncer.kill()
        shutil.rmtree(work, ignore_errors=True)
        admin.execute("DROP DATABASE %s WITH (FORCE)" % DB)
    return REPORT.finish("pg_pgbouncer")


def run(conninfo):
    # 1. a fence does not outlive its transaction on a pooled connection
    clients = [psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) for _ in range(6)]
    backends = set()
    leaked = []
    for i, c in enumerate(clients):
        with c.transaction():
            c.execute("SELECT fence_check('pb:plain', 1)")
            backends.add(c.execute("SELECT pg_backend_pid()").fetchone()[0])
            c.execute("INSERT INTO plain VALUES (%s, 0)", (i,))
        # the next transaction, of this client and of the others, holds nothing
        for d in clients:
            try:
                d.execute("INSERT INTO plain VALUES (%s, 0)", (100 + i,))
                leaked.append(i)
            except psycopg.Error as e:
                if e.sqlstate != "23T02":
                    leaked.append("%d: %s" % (i, e.sqlstate))
    ok(len(backends) <= 2, "six clients share at most two server connections", repr(backends))
    ok(not leaked, "a fence never reaches a later transaction of any client on the same backend",
       repr(leaked))
    held = [c.execute("SELECT count(*) FROM fence_held()").fetchone()[0] for c in clients]
    ok(held == [0] * 6, "no client sees a fence it did not take in its transaction", repr(held))

    # 2. a backend's remembered highest never admits another client's stale token
    a, b = clients[0], clients[1]
    with a.transaction():
        a.execute("SELECT fence_check('pb:1', 10)")
    with a.transaction():
        a.execute("SELECT fence_check('pb:1', 10)")    # now cached on that backend
    stale = []
    for c in clients:
        try:
            c.execute("UPDATE acct SET bal = bal + 1, tok = 9 WHERE id = 1")
            stale.append("accepted")
        except psycopg.Error as e:
            stale.append(e.sqlstate)
    ok(stale == ["23T01"] * 6, "every client gets 23T01 for 9 once 10 is remembered", repr(stale))
    for c in clients:
        c.close()

    # 3. a load: 16 clients, 4 resources, tokens from a shared counter, stale
    # holders mixed in; the log must be non-decreasing per resource
    counter = {"next": 20}
    lock = threading.Lock()
    rng = random.Random(1234)
    errors = []
    accepted = [0]
    refused = [0]

    def worker(n):
        c = psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)
        r = random.Random(n)
        for _ in range(40):
            rid = r.randint(1, 4)
            with lock:
                if r.random() < 0.25:
                    token = counter["next"] - r.randint(3, 10)    # a zombie's old token
                else:
                    counter["next"] += 1
                    token = counter["next"]
            try:
                with c.transaction():
                    c.execute("SELECT fence_check(%s, %s)", ("pb:%d" % rid, token))
                    c.execute("UPDATE acct SET bal = bal + 1 WHERE id = %s", (rid,))
                    c.execute("INSERT INTO log (resource, token) VALUES (%s, %s)", ("pb:%d" % rid, token))
                accepted[0] += 1
            except psycopg.Error as e:
                if e.sqlstate in ("23T01", "40001", "40P01"):
                    refused[0] += 1
                else:
                    errors.append(e.sqlstate)
        c.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    ok(not errors, "the load saw only stale refusals (and no other error)", repr(errors[:5]))
    with psycopg.connect(dbname=DB) as d:
        # commit order: by commit timestamp when track_commit_timestamp is
        # on (tests/pg_cluster.sh turns it on), else by the sequence
        ts_on = d.execute("SHOW track_commit_timestamp").fetchone()[0] == "on"
        order = "pg_xact_commit_timestamp(xmin), seq" if ts_on else "seq"
        rows = d.execute("SELECT resource, token FROM log ORDER BY %s" % order).fetchall()
        highest = dict(d.execute("SELECT resource, token FROM fence_tokens").fetchall())
    last, bad = {}, []
    for res, tok in rows:
        if tok < last.get(res, -1):
            bad.append((res, last[res], tok))
        last[res] = tok
    ok(not bad, "tokens never decrease in commit order per resource (%d accepted, %d refused)"
       % (accepted[0], refused[0]), repr(bad[:5]))
    ok(all(highest.get(r) == t for r, t in last.items()),
       "fence_tokens holds each resource's last committed token")


if __name__ == "__main__":
    sys.exit(main())
