#!/usr/bin/python3
"""tests/pg_logical.py: a protected table replicated by logical replication
to a subscriber (issue 15, item 5).

A throwaway server of its own (wal_level = logical, private socket
directory, fence through extension_destdir), two databases: pub publishes
the protected table acct (one fence per row, token column tok) together with
fence_tokens; sub has fence installed and acct protected the same way, and
subscribes. What is checked, on the rows and on fence_tokens:
  - the apply worker writes acct without a fence: the guard is an ENABLE
    ORIGIN trigger, which the apply worker (session_replication_role =
    replica) does not fire; sub's acct and fence_tokens equal pub's after
    every applied transaction;
  - a stale write refused on the publisher never reaches the subscriber;
  - on the subscriber, a local writer with a token below the replicated
    highest is refused (23T01), and fence_current is the publisher's;
  - published without fence_tokens, a subscriber has no highest at all and
    accepts a zombie's token locally (why fence_tokens must be published);
  - the unsafe setup, pinned so that the documentation stays true: a local
    advance on the subscriber is later overwritten by the publisher's lower
    token, and the subscriber's highest goes down;
  - the safe setup: application roles may not write the replicated tables
    on the subscriber (42501), and the apply goes on.
Output: "ok - logical ..." lines.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Report     # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINDIR = subprocess.check_output(["pg_config", "--bindir"], text=True).strip()
IS_ROOT = os.geteuid() == 0
REPORT = Report("logical")
ok = REPORT.ok


def as_postgres(cmd):
    return (["runuser", "-u", "postgres", "--"] if IS_ROOT else []) + cmd


def run(cmd, work):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)


def sqlstate(c, sql, args=()):
    try:
        with c.transaction():
            c.execute(sql, args)
    except psycopg.Error as e:
        return e.sqlstate
    return None


def main():
    work = tempfile.mkdtemp(prefix="fence-logical-")
    os.chmod(work, 0o755)
    install = os.path.join(work, "install")
    data = os.path.join(work, "data")
    port = 20000 + os.getpid() % 20000
    started = False
    try:
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext"), "with_llvm=no"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext"), "with_llvm=no", "install",
                        "DESTDIR=" + install], check=True, stdout=subprocess.DEVNULL)
        if IS_ROOT:
            subprocess.run(["chown", "-R", "postgres", work], check=True)
        r = run(as_postgres([BINDIR + "/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync",
                             "-E", "UTF8", "--locale=C.UTF-8"]), work)
        if r.returncode != 0:
            ok(False, "initdb", r.stdout[-500:])
            return 1
        started = True
        r = run(as_postgres([BINDIR + "/pg_ctl", "-D", data, "-l", os.path.join(work, "server.log"), "-w",
                             "-o", "-k %s -p %d -c listen_addresses='' -c fsync=off -c wal_level=logical "
                             "-c extension_destdir=%s" % (work, port, install), "start"]), work)
        if r.returncode != 0:
            ok(False, "a server with wal_level = logical started", r.stdout[-500:])
            return 1
        scenario(work, port)
    finally:
        if started:
            run(as_postgres([BINDIR + "/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"]), work)
        shutil.rmtree(work, ignore_errors=True)
    return REPORT.finish("pg_logical")


def scenario(work, port):
    def connect(db, **kw):
        return psycopg.connect(host=work, port=port, user="postgres", dbname=db, autocommit=True, **kw)

    admin = connect("postgres")
    for db in ("pub", "sub", "sub2"):
        admin.execute("CREATE DATABASE %s" % db)
    admin.execute("CREATE ROLE app LOGIN")
    schema = ("CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL, tok bigint)",
              "SELECT fence_protect('acct', 'tok', 'acct:', 'id')",
              "GRANT SELECT, INSERT, UPDATE, DELETE ON acct TO app")
    pub = connect("pub")
    pub.execute("CREATE EXTENSION fence")
    for s in schema:
        pub.execute(s)
    pub.execute("INSERT INTO acct VALUES (1, 0, 10), (2, 0, 20), (3, 0, 30)")
    pub.execute("CREATE PUBLICATION with_tokens FOR TABLE acct, fence_tokens")
    pub.execute("CREATE PUBLICATION rows_only FOR TABLE acct")
    # the slots first: CREATE SUBSCRIPTION cannot make one in its own cluster
    pub.execute("SELECT pg_create_logical_replication_slot('with_tokens', 'pgoutput')")
    pub.execute("SELECT pg_create_logical_replication_slot('rows_only', 'pgoutput')")
    conninfo = "host=%s port=%d dbname=pub user=postgres" % (work, port)
    subs = {}
    for db, publ in (("sub", "with_tokens"), ("sub2", "rows_only")):
        c = connect(db)
        c.execute("CREATE EXTENSION fence")
        for s in schema:
            c.execute(s)
        c.execute("CREATE SUBSCRIPTION s_%s CONNECTION '%s' PUBLICATION %s "
                  "WITH (create_slot = false, slot_name = '%s')" % (db, conninfo, publ, publ))
        subs[db] = c
    sub, sub2 = subs["sub"], subs["sub2"]

    def state(c):
        return (c.execute("SELECT id, bal, tok FROM acct ORDER BY id").fetchall(),
                c.execute("SELECT resource, token FROM fence_tokens ORDER BY resource").fetchall())

    def caught_up(with_sub2=True, timeout=30):
        want = state(pub)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if state(sub) == want and (not with_sub2 or state(sub2)[0] == want[0]):
                return True
            time.sleep(0.1)
        return False

    ok(caught_up(), "after the initial copy the subscriber's acct and fence_tokens equal the publisher's",
       repr((state(pub), state(sub))))

    # fenced writes on the publisher, one of which no fence on the
    # subscriber would admit (an UPDATE that does not set the token)
    with pub.transaction():
        pub.execute("SELECT fence_check('acct:1', 11)")
        pub.execute("UPDATE acct SET bal = bal + 5 WHERE id = 1")
    pub.execute("UPDATE acct SET bal = 7, tok = 25 WHERE id = 2")
    pub.execute("INSERT INTO acct VALUES (4, 1, 40)")
    with pub.transaction():
        pub.execute("SELECT fence_check('acct:3', 31)")
        pub.execute("DELETE FROM acct WHERE id = 3")
    stale = sqlstate(pub, "UPDATE acct SET bal = 666, tok = 9 WHERE id = 1")
    ok(stale == "23T01", "a stale write is refused on the publisher (%s)" % stale)
    ok(caught_up(), "the apply worker writes acct without a fence (the guard is ENABLE ORIGIN): "
       "the subscriber equals the publisher, tokens included", repr((state(pub), state(sub))))
    rows = dict((r[0], r[1]) for r in state(sub)[0])
    ok(rows.get(1) == 5, "the write refused on the publisher is not on the subscriber", repr(rows))
    cur = sub.execute("SELECT fence_current('acct:1'), fence_current('acct:2')").fetchone()
    ok(cur == (11, 25), "fence_current on the subscriber is the publisher's (%s)" % (cur,))

    # a zombie writing on the subscriber itself
    app = psycopg.connect(host=work, port=port, user="app", dbname="sub", autocommit=True)
    z = sqlstate(sub, "UPDATE acct SET bal = 1, tok = 10 WHERE id = 1")
    ok(z == "23T01", "on the subscriber a local token below the replicated highest is refused (%s)" % z)
    z2 = sqlstate(sub2, "UPDATE acct SET bal = 1, tok = 10 WHERE id = 1")
    cur2 = sub2.execute("SELECT fence_current('acct:1')").fetchone()[0]
    ok(z2 is None and cur2 == 10,
       "published without fence_tokens, the subscriber has no highest and accepts the zombie's token "
       "(%s, highest now %s)" % (z2, cur2))

    # the unsafe setup: the subscriber accepts a local advance for a
    # replicated resource; the publisher's lower token then overwrites it
    sub.execute("UPDATE acct SET bal = 50, tok = 50 WHERE id = 4")
    pub.execute("UPDATE acct SET bal = 41, tok = 41 WHERE id = 4")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sub.execute(
            "SELECT tok FROM acct WHERE id = 4").fetchone()[0] != 41:
        time.sleep(0.1)
    after = sub.execute("SELECT tok, fence_current('acct:4') FROM acct WHERE id = 4").fetchone()
    ok(after == (41, 41), "unsafe: a subscriber that also accepts writes sees its highest go down "
       "(50 accepted locally, then 41 applied: %s)" % (after,))

    # the safe setup: application roles cannot write replicated tables on
    # the subscriber; the apply worker (the subscription's owner) still can
    sub.execute("REVOKE INSERT, UPDATE, DELETE ON acct FROM app")
    refused = sqlstate(app, "UPDATE acct SET bal = 0, tok = 99 WHERE id = 2")
    ok(refused == "42501", "safe: with writes revoked on the subscriber an application's write is "
       "refused there (%s)" % refused)
    with pub.transaction():
        pub.execute("SELECT fence_check('acct:2', 26)")
        pub.execute("UPDATE acct SET bal = bal + 1 WHERE id = 2")
    ok(caught_up(with_sub2=False), "safe: the apply goes on, and the subscriber equals the publisher",
       repr((state(pub), state(sub))))
    app.close()
    for db, c in subs.items():
        c.execute("ALTER SUBSCRIPTION s_%s DISABLE" % db)
        c.execute("ALTER SUBSCRIPTION s_%s SET (slot_name = NONE)" % db)
        c.execute("DROP SUBSCRIPTION s_%s" % db)
        c.close()
    pub.close()
    admin.close()


if __name__ == "__main__":
    sys.exit(main())
