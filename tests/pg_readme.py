#!/usr/bin/python3
"""tests/pg_readme.py: README.md's PostgreSQL code, run as a reader would
run it, against the cluster tests/run_pg.sh started (PGHOST, PGPORT,
PGUSER in the environment): the quick start in psql (the table it shows,
the errors it quotes, word for word, and its clean-up), the psycopg pattern on an
autocommit connection and its error handling (which branch runs), and the
production checklist's claims: a holder paused inside its transaction is
ended by idle_in_transaction_session_timeout and sees OperationalError,
its retry with the old token after a newer commit is 23T01, and
lock_timeout bounds the next holder's wait with 55P03. Asserts on what
committed.

One "ok - " or "not ok - " line per check.
"""
import os
import subprocess
import sys
import threading
import time

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from readme_blocks import block, instrument  # noqa: E402

DB = "readme"
failed = 0


def report(ok, name, detail=""):
    global failed
    print("%s - readme pg: %s" % ("ok" if ok else "not ok", name))
    if not ok:
        failed += 1
        for line in str(detail).splitlines():
            print("#   " + line)


def connect(**kw):
    return psycopg.connect(dbname=DB, **kw)


def quick_start():
    sql = block("### PostgreSQL (30 seconds)", "sql")
    r = subprocess.run(["psql", "-X", "-q", "-At", "-d", DB], input=sql, capture_output=True, text=True,
                       cwd="/")
    report("1|1|34" in r.stdout.splitlines(),
           "quick start: the table ends as the README says (1 | 1 | 34)", r.stdout + r.stderr)
    with connect(autocommit=True) as c:
        left = (c.execute("SELECT to_regclass('counter') IS NULL").fetchone()[0],
                c.execute("SELECT count(*) FROM fence_tokens WHERE resource = 'counter-lock'").fetchone()[0],
                c.execute("SELECT fence_try('counter-lock', 1)").fetchone()[0])
    report(left == (True, 0, True),
           "quick start: its clean-up drops the table and forgets the token: a fresh lock service's token 1 "
           "is accepted", left)
    quoted = [line[3:] for line in sql.splitlines() if line.startswith("-- ERROR") or
              line.startswith("-- DETAIL") or line.startswith("-- HINT")]
    actual = [line.split(":", 1)[1].lstrip() if line.startswith("psql:") else line
              for line in r.stderr.splitlines()]
    missing = [q for q in quoted if q not in actual]
    report(not missing, "quick start: every ERROR, DETAIL and HINT quoted is what psql prints",
           "quoted but not printed: %s\nprinted:\n%s" % (missing, r.stderr))


def python_pattern():
    code = block("### Python and PostgreSQL (psycopg 3)", "python", 0)
    catch = block("### Python and PostgreSQL (psycopg 3)", "python", 1)
    env = {}
    exec(code.replace('"dbname=app"', repr("dbname=" + DB)), env)
    conn = env["conn"]
    report(conn.autocommit, "Python pattern: the README's connection is autocommit, as pools set it")
    conn.execute("CREATE TABLE invoices (id int PRIMARY KEY, status text)")
    conn.execute("INSERT INTO invoices VALUES (7, 'open')")
    env["mark_paid"](conn, 7, 5)
    report(conn.execute("SELECT status FROM invoices WHERE id = 7").fetchone()[0] == "paid"
           and conn.execute("SELECT fence_current('invoice-7')").fetchone()[0] == 5,
           "Python pattern: mark_paid with token 5 commits the UPDATE and fences invoice-7 at 5")
    # the UPDATE runs inside the fenced transaction: check with a probe in between
    probe = code.replace('"dbname=app"', repr("dbname=" + DB)).replace(
        "        conn.execute(\"UPDATE", "        held()\n        conn.execute(\"UPDATE")
    env2, seen = {}, []
    exec(probe, env2)
    # what the transaction holds just before the UPDATE runs, on the README's connection
    env2["held"] = lambda: seen.append(
        env2["conn"].execute("SELECT count(*) FROM fence_held()").fetchone()[0])
    env2["mark_paid"](env2["conn"], 7, 5)
    env2["conn"].close()
    report(seen == [1], "Python pattern: the UPDATE runs in the transaction fence_check fenced, autocommit or not",
           seen)
    conn.execute("UPDATE invoices SET status = 'open'")
    env.update(token=4, hits=[])
    exec(instrument(catch), env)
    report(env["hits"] == [0] and conn.execute("SELECT status FROM invoices WHERE id = 7").fetchone()[0] == "open",
           "Python pattern: a stale token takes the 23T01 branch and the UPDATE did not commit", env["hits"])
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, tok bigint)")
    conn.execute("SELECT fence_protect('t', 'tok', 't-lock')")
    env["hits"] = []
    exec(instrument(catch.replace("mark_paid(conn, 7, token)",
                                  "conn.execute('INSERT INTO t VALUES (1, NULL)')")), env)
    report(env["hits"] == [1], "Python pattern: a write without a token takes the 23T02 branch", env["hits"])
    env["hits"] = []
    try:
        exec(instrument(catch.replace("mark_paid(conn, 7, token)",
                                      "conn.execute(\"INSERT INTO invoices VALUES (7, 'x')\")")), env)
        report(False, "Python pattern: a unique violation (23505) is re-raised, not taken for a refusal")
    except psycopg.errors.UniqueViolation:
        report(env["hits"] == [], "Python pattern: a unique violation (23505) is re-raised, not taken for a refusal")
    conn.close()


def checklist_idle_timeout():
    """A holder paused inside its fenced transaction; the server ends it."""
    with connect(autocommit=True) as c:
        c.execute("SELECT fence_check('job', 10)")
    zombie = connect(autocommit=True)
    zombie.execute("SET idle_in_transaction_session_timeout = '1s'")   # ALTER ROLE in production
    zombie.execute("BEGIN")
    zombie.execute("SELECT fence_check('job', 10)")
    # the next holder's advance waits for the zombie until the server ends it
    t0 = time.monotonic()
    with connect(autocommit=True) as nxt:
        with nxt.transaction():
            nxt.execute("SELECT fence_check('job', 11)")
        waited = time.monotonic() - t0
    try:
        zombie.execute("UPDATE invoices SET status = 'zombie' WHERE id = 7")
        kind = "no error"
    except psycopg.OperationalError as e:
        kind = "OperationalError"
        text = str(e)
    except psycopg.Error as e:
        kind = type(e).__name__
        text = str(e)
    report(kind == "OperationalError" and "idle-in-transaction timeout" in text and zombie.closed
           and 0.5 < waited < 30,
           "checklist: idle_in_transaction_session_timeout ends the paused holder; it sees OperationalError "
           "(the next holder waited %.1f s)" % waited, "%s %s" % (kind, locals().get("text")))
    with connect(autocommit=True) as again:
        try:
            with again.transaction():
                again.execute("SELECT fence_check('job', 10)")
            code = None
        except psycopg.Error as e:
            code = e.sqlstate
        highest = again.execute("SELECT fence_current('job')").fetchone()[0]
    report(code == "23T01" and highest == 11,
           "checklist: the zombie reconnecting with its old token gets 23T01; the highest stays 11", code)


def checklist_lock_timeout():
    holder = connect(autocommit=True)
    holder.execute("BEGIN")
    holder.execute("SELECT fence_check('batch', 1)")
    code = None
    with connect(autocommit=True) as nxt:
        nxt.execute("SET lock_timeout = '300ms'")
        t0 = time.monotonic()
        try:
            with nxt.transaction():
                nxt.execute("SELECT fence_check('batch', 2)")
        except psycopg.Error as e:
            code = e.sqlstate
        waited = time.monotonic() - t0
    holder.execute("ROLLBACK")
    holder.close()
    report(code == "55P03" and waited < 5,
           "checklist: lock_timeout bounds the next holder's wait behind an open fenced transaction (55P03)",
           code)


def main():
    with psycopg.connect(dbname="postgres", autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS %s" % DB)
        c.execute("CREATE DATABASE %s" % DB)
    with connect(autocommit=True) as c:
        c.execute("CREATE EXTENSION fence")
    quick_start()
    python_pattern()
    checklist_idle_timeout()
    checklist_lock_timeout()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
