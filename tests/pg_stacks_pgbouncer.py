#!/usr/bin/python3
"""tests/pg_stacks_pgbouncer.py: psycopg 3 behind pgbouncer (Debian 12's
1.18) in transaction pooling, in the driver's default configuration and
with the setting psycopg documents for it (issue 26, item 2).

psycopg prepares a query on the server after it ran it prepare_threshold
(5) times, under a name counted per client connection (_pg3_0, _pg3_1...).
pgbouncer before 1.21 does not track prepared statements: a client's next
transaction may run on a server connection where another client prepared
another query under the same name, and psycopg then runs that query with
its own parameters. Arranged here on purpose (two server connections, a
third client holding one of them while the other is used), each step
checked by pg_backend_pid():

  - an operator's tool prepares `SELECT fence_try(%s, %s)` as _pg3_0 on
    server connection B; the zombie prepared `SELECT fence_check(%s, %s)`
    as _pg3_0 on A; the zombie's next transaction runs on B, so its
    fence_check(job, 10) runs as fence_try(job, 10): false, no error.
  - DEMONSTRATION (the stack is unsafe, documented): the check-only
    pattern (fence_check, then a write to a table guarded by nothing
    else) then commits the zombie's write. Asserted as what happens with
    pgbouncer 1.18 and psycopg's defaults: if this ever stops
    reproducing, the docs must change, so the line fails then.
    FENCE_STACKS_STRICT=1 asserts instead that nothing of the zombie
    commits (the reproduction of item 2: it fails).
  - the recommended pattern, safe in the driver's defaults: the write goes
    to a protected table whose row carries the token; under the same
    mix-up the zombie is refused (23T01) and nothing of it commits, the
    holder's write commits.
  - the setting: prepare_threshold=None (pgbouncer < 1.21; psycopg's
    documented setting): nothing is prepared, the zombie's check-only
    transaction is refused and commits nothing.
  - a load of clients in the driver's defaults, holders and zombies mixed,
    all writing a protected table with the token in the row: the committed
    tokens never decrease.

Output: "ok - stacks pgbouncer ..." lines.
"""
import os
import random
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stacks"))
import psycopg  # noqa: E402
from stacks import Database, PgBouncer, Report, sqlstate  # noqa: E402

REPORT = Report("stacks pgbouncer")
ok = REPORT.ok
DB = "fence_stacks_pgbouncer"
STRICT = os.environ.get("FENCE_STACKS_STRICT") == "1"
CHECK = "SELECT fence_check(%s, %s)"
TRY = "SELECT fence_try(%s, %s)"


def pid(conn):
    return conn.execute("SELECT pg_backend_pid()", prepare=False).fetchone()[0]


def deallocate_everywhere(bouncer):
    """Each of the two server connections forgets its prepared statements
    (two clients in open transactions hold both)."""
    cs = [psycopg.connect(bouncer.dsn, prepare_threshold=None) for _ in range(2)]
    for c in cs:
        c.execute("DEALLOCATE ALL")
    for c in cs:
        c.commit()
        c.close()


def mixup(bouncer, resource):
    """Arrange the zombie's _pg3_0 (fence_check) on one server connection and
    an operator's _pg3_0 (fence_try) on the other. Returns the zombie's
    connection (driver defaults, not autocommit), whose next transaction
    runs on the operator's server connection while the returned holder
    connection keeps the zombie's own one busy, or None if pgbouncer did not
    hand out the connections as arranged."""
    deallocate_everywhere(bouncer)
    zombie = psycopg.connect(bouncer.dsn)           # psycopg's defaults
    op = psycopg.connect(bouncer.dsn)
    blocker = psycopg.connect(bouncer.dsn)
    # the zombie, while it held the lock, ran its check often enough for
    # psycopg to prepare it (the 6th run) on server connection A
    for _ in range(6):
        zombie.execute(CHECK, (resource, 10))
    a = pid(zombie)
    # A stays with the zombie's open transaction while the operator's tool
    # runs: it gets B and prepares its fence_try there (with a token that
    # changes nothing: 0 is below every highest)
    for _ in range(6):
        op.execute(TRY, (resource, 0))
    b = pid(op)
    op.commit()
    zombie.commit()
    # now B is the zombie's next connection if A is busy: a client holds A
    # (pgbouncer hands out the last released connection, A; if it gave B,
    # a second client gets A and the first lets B go)
    blocker.execute("SELECT 1")
    busy = pid(blocker)
    if busy == b:
        other = psycopg.connect(bouncer.dsn)
        other.execute("SELECT 1")
        busy = pid(other)
        blocker.rollback()
        blocker.close()
        blocker = other
    if busy != a or a == b:
        for c in (blocker, zombie, op):
            c.rollback()
            c.close()
        return None, (a, b, busy)
    return (zombie, op, blocker), (a, b, busy)


def main():
    db = Database(DB)
    bouncer = PgBouncer(DB, pool_size=2)
    try:
        run(db, bouncer)
    finally:
        bouncer.stop()
        db.close()
    return REPORT.finish("pg_stacks_pgbouncer")


def arranged(bouncer, resource):
    for _ in range(5):
        conns, pids = mixup(bouncer, resource)
        if conns:
            return conns, pids
    return None, pids


def run(db, bouncer):
    print("# %s, psycopg %s" % (bouncer.version, psycopg.__version__))
    db.sql("CREATE TABLE ledger (id serial PRIMARY KEY, who text)")
    db.sql("CREATE TABLE acct (id int PRIMARY KEY, who text, tok bigint)")
    db.sql("SELECT fence_protect('acct', 'tok', 'acct:', 'id')")
    db.sql("INSERT INTO acct VALUES (1, 'first', 10)")

    # --- the stack's hazard: the zombie's fence_check runs as fence_try
    res = "job"
    db.sql("SELECT fence_check('job', 10)")     # the zombie held the lock at 10
    conns, pids = arranged(bouncer, res)
    db.sql("SELECT fence_check('job', 20)")     # then the new holder's first write
    if not ok(conns is not None, "the mix-up is arranged: the zombie's next transaction runs on "
              "the server connection where the operator prepared _pg3_0", repr(pids)):
        return
    zombie, op, blocker = conns
    ran_on = pid(zombie)
    got = zombie.execute(CHECK, (res, 10)).fetchone()[0]
    ok(ran_on == pids[1] and got is False,
       "with psycopg's defaults behind pgbouncer 1.18, the zombie's fence_check(job, 10) ran as "
       "another client's prepared fence_try and returned false without an error",
       "ran on %s, returned %r" % (ran_on, got))
    # DEMONSTRATION: the check-only pattern, naive behind this stack
    state = sqlstate(lambda: (zombie.execute("INSERT INTO ledger (who) VALUES ('zombie')"),
                              zombie.commit()))
    rows = db.sql("SELECT who FROM ledger")
    if STRICT:
        ok(rows == [], "STRICT: the check-only pattern in the driver's defaults commits "
           "nothing of the zombie", "sqlstate %s, ledger %r" % (state, rows))
    else:
        ok(state is None and rows == [("zombie",)],
           "DEMONSTRATION (unsafe, documented; fails if pgbouncer stops running another "
           "client's statement): the check-only pattern commits the zombie's write in the "
           "driver's defaults", "sqlstate %s, ledger %r" % (state, rows))
    ok(db.highest(res) == 20, "the operator's fence_try left the highest at 20")
    for c in (zombie, op, blocker):
        c.rollback()
        c.close()

    # --- recommended, in the driver's defaults: the token in the protected row
    db.sql("SELECT fence_check('acct:1', 10)")
    conns, pids = arranged(bouncer, "acct:1")
    db.sql("SELECT fence_check('acct:1', 20)")   # the holder took over acct:1
    if ok(conns is not None, "the mix-up is arranged again for the protected table", repr(pids)):
        zombie, op, blocker = conns
        got = zombie.execute(CHECK, ("acct:1", 10)).fetchone()[0]
        state = sqlstate(lambda: (
            zombie.execute("UPDATE acct SET who = %s, tok = %s WHERE id = %s", ("zombie", 10, 1)),
            zombie.commit()))
        zombie.rollback()
        rows = db.sql("SELECT who, tok FROM acct WHERE id = 1")
        ok(got is False and state == "23T01" and rows == [("first", 10)],
           "recommended (driver defaults): under the same mix-up the zombie's UPDATE of a "
           "protected row carrying its token 10 is refused 23T01 and nothing commits",
           "check %r, sqlstate %s, row %r" % (got, state, rows))
        # the holder, in the driver's defaults too, on the same mixed-up pool
        blocker.rollback()
        holder = psycopg.connect(bouncer.dsn)
        for _ in range(3):
            holder.execute("UPDATE acct SET who = %s, tok = %s WHERE id = %s", ("holder", 20, 1))
            holder.commit()
        rows = db.sql("SELECT who, tok FROM acct WHERE id = 1")
        ok(rows == [("holder", 20)] and db.highest("acct:1") == 20,
           "recommended (driver defaults): the holder's UPDATE at 20 commits", repr(rows))
        for c in (zombie, op, blocker, holder):
            c.close()

    # --- the setting: prepare_threshold=None, then the check-only pattern holds
    deallocate_everywhere(bouncer)
    db.sql("SELECT fence_check('job2', 10)")
    db.sql("SELECT fence_check('job2', 20)")
    op = psycopg.connect(bouncer.dsn, prepare_threshold=None)
    zombie = psycopg.connect(bouncer.dsn, prepare_threshold=None)
    for _ in range(8):
        op.execute(TRY, ("job2", 0))
        op.commit()
        zombie.execute(CHECK, ("job2", 20))     # as the zombie did while it held the lock
        zombie.commit()
    prepared = db.sql("SELECT count(*) FROM pg_prepared_statements")[0][0]
    state = sqlstate(lambda: (zombie.execute(CHECK, ("job2", 10)),
                              zombie.execute("INSERT INTO ledger (who) VALUES ('zombie2')"),
                              zombie.commit()))
    zombie.rollback()
    rows = db.sql("SELECT who FROM ledger WHERE who = 'zombie2'")
    ok(state == "23T01" and rows == [],
       "with prepare_threshold=None the zombie's check-only transaction is refused 23T01 and "
       "commits nothing", "sqlstate %s, ledger %r" % (state, rows))
    server_prepared = 0
    for _ in range(4):
        server_prepared += op.execute("SELECT count(*) FROM pg_prepared_statements",
                                      prepare=False).fetchone()[0]
        op.commit()
    ok(server_prepared == 0, "with prepare_threshold=None no server connection holds a "
       "prepared statement of these clients", "%d seen (%d on a direct connection)" % (
           server_prepared, prepared))
    holder = psycopg.connect(bouncer.dsn, prepare_threshold=None)
    holder.execute(CHECK, ("job2", 20))
    holder.execute("INSERT INTO ledger (who) VALUES ('holder2')")
    holder.commit()
    ok(db.sql("SELECT who FROM ledger WHERE who = 'holder2'") == [("holder2",)],
       "with prepare_threshold=None the holder's check-only transaction at 20 commits")
    for c in (op, zombie, holder):
        c.close()

    # --- a load in the driver's defaults: protected rows carry the token
    db.sql("CREATE TABLE log (seq bigserial PRIMARY KEY, id int, tok bigint)")
    db.sql("SELECT fence_protect('log', 'tok', 'acct:', 'id')")
    counter = {"next": 100}
    lock = threading.Lock()
    errors, refused, accepted = [], [0], [0]

    def worker(n):
        c = psycopg.connect(bouncer.dsn)         # driver defaults: auto-prepare on
        r = random.Random(n)
        for _ in range(30):
            rid = r.randint(1, 3)
            with lock:
                if r.random() < 0.3:
                    token = counter["next"] - r.randint(2, 8)   # a zombie
                else:
                    counter["next"] += 1
                    token = counter["next"]
            try:
                c.execute("SELECT fence_check(%s, %s)", ("acct:%d" % rid, token))
                c.execute("INSERT INTO log (id, tok) VALUES (%s, %s)", (rid, token))
                c.commit()
                accepted[0] += 1
            except psycopg.Error as e:
                c.rollback()
                if e.sqlstate in ("23T01", "40P01"):
                    refused[0] += 1
                else:
                    # another client's DEALLOCATE ALL (psycopg sends it after a
                    # rollback) removes this client's statements: 26000
                    errors.append(e.sqlstate)
        c.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    rows = db.sql("SELECT id, tok FROM log ORDER BY pg_xact_commit_timestamp(xmin), seq")
    last, bad = {}, []
    for rid, tok in rows:
        if tok < last.get(rid, -1):
            bad.append((rid, last[rid], tok))
        last[rid] = tok
    ok(not bad and accepted[0] > 0 and refused[0] > 0,
       "a load in the driver's defaults (8 clients, zombies mixed in): committed tokens never "
       "decrease per row (%d accepted, %d refused, other errors %s)" % (
           accepted[0], refused[0], sorted(set(e for e in errors if e))), repr(bad[:5]))


if __name__ == "__main__":
    sys.exit(main())
