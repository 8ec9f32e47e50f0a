#!/usr/bin/python3
"""tests/pg_terminate.py: a stale holder paused inside a statement keeps its
fence; fence_terminate(resource, token) is the next holder's way out
(issue 26, item 6).

A holder paused in the middle of COPY FROM STDIN (psycopg's copy() with no
more data sent) sits in ClientRead inside a statement: neither
statement_timeout nor idle_in_transaction_session_timeout ends it, and its
fence at 10 keeps the new holder's advance to 20 waiting. Checked here:

  a) the paused COPY blocks the advance (lock_timeout), even with both
     timeouts set in the paused session;
  b) a role that may not signal the paused session's role gets 42501 from
     fence_terminate, and the session lives on;
  c) a session of the paused session's own role ends it with
     fence_terminate('r', 20) (returns 1); the advance then commits, and
     nothing of the COPY committed;
  d) a token below the highest is refused (23T01) and ends nothing; the
     highest itself ends no holder fenced at it; an uncommitted advance to
     the caller's token or above is spared, one below it is ended;
  e) an escalated transaction (fenced on more than half of
     max_locks_per_transaction resources) keeps every advance out; it is
     ended too;
  f) a prepared transaction holding the fence is reported (WARNING with its
     transaction id) and left to ROLLBACK PREPARED.

Runs against PGHOST/PGPORT (tests/run_pg.sh). Output: "ok - pg terminate
..." lines.
"""
import sys
import time
import traceback

import psycopg

from tap import Report

DB = "fence_terminate_test"
APP = "fence_term_app"
OTHER = "fence_term_other"

REPORT = Report("pg terminate")
ok = REPORT.ok


def state_of(conn, sql, args=()):
    try:
        conn.execute(sql, args)
        return None
    except psycopg.Error as e:
        return e.sqlstate


def alive(admin, pid):
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                         (pid,)).fetchone()[0] == 1


def wait_gone(admin, pid, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(admin, pid):
            return True
        time.sleep(0.05)
    return False


def connect(user="postgres", autocommit=True):
    return psycopg.connect(dbname=DB, user=user, autocommit=autocommit)


def paused_copy(resource, token, table):
    """A session of APP, fenced at token, paused inside COPY FROM STDIN."""
    z = connect(APP, autocommit=False)
    z.execute("SET statement_timeout = '1s'")
    z.execute("SET idle_in_transaction_session_timeout = '1s'")
    pid = z.execute("SELECT pg_backend_pid()").fetchone()[0]
    z.execute("SELECT fence_check(%s, %s)", (resource, token))
    cur = z.cursor()
    cm = cur.copy("COPY %s (id, tok) FROM STDIN" % table)
    copy = cm.__enter__()
    copy.write_row((100, token))
    # no more data, no end of the COPY: the backend waits in ClientRead
    return z, pid, (cm, copy)


def scenario_copy(admin):
    z, zpid, _keep = paused_copy("term:r", 10, "jobs")
    time.sleep(1.5)         # past both timeouts of the paused session
    ok(alive(admin, zpid), "a) the session paused inside COPY outlives statement_timeout and "
       "idle_in_transaction_session_timeout")
    wait = admin.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                         (zpid,)).fetchone()[0]
    new = connect(APP)
    new.execute("SET lock_timeout = '1s'")
    got = state_of(new, "SELECT fence_check('term:r', 20)")
    ok(got == "55P03", "a) the new holder's advance to 20 waits for the paused COPY (%s)" % wait,
       "got %r" % got)

    other = connect(OTHER)
    got = state_of(other, "SELECT fence_terminate('term:r', 20)")
    ok(got == "42501" and alive(admin, zpid),
       "b) a role that may not signal the paused session gets 42501, and it lives on",
       "got %r" % got)
    other.close()

    n = new.execute("SELECT fence_terminate('term:r', 20)").fetchone()[0]
    ok(n == 1, "c) fence_terminate('term:r', 20) by the same role ends the paused session",
       "returned %r" % n)
    ok(wait_gone(admin, zpid), "c) the paused session is gone")
    new.execute("SET lock_timeout = '10s'")
    got = state_of(new, "SELECT fence_check('term:r', 20)")
    ok(got is None, "c) the advance to 20 then commits", "got %r" % got)
    cur = admin.execute("SELECT fence_current('term:r')").fetchone()[0]
    rows = admin.execute("SELECT count(*) FROM jobs WHERE id = 100").fetchone()[0]
    ok(cur == 20 and rows == 0, "c) fence_current is 20 and nothing of the paused COPY committed",
       "fence_current %r, COPY rows %r" % (cur, rows))
    try:
        z.close()
    except Exception:
        pass
    new.close()


def scenario_tokens(admin):
    # holders at the highest (20), in open transactions
    h1 = connect(APP, autocommit=False)
    h1.execute("SELECT fence_check('term:r', 20)")
    p1 = h1.execute("SELECT pg_backend_pid()").fetchone()[0]
    caller = connect(APP)
    got = state_of(caller, "SELECT fence_terminate('term:r', 15)")
    ok(got == "23T01" and alive(admin, p1),
       "d) a token below the highest is refused (23T01) and ends nothing", "got %r" % got)
    n = caller.execute("SELECT fence_terminate('term:r', 20)").fetchone()[0]
    ok(n == 0 and alive(admin, p1), "d) the highest itself ends no holder fenced at it",
       "returned %r" % n)
    h1.rollback()
    # an uncommitted advance to 25
    adv = connect(APP, autocommit=False)
    adv.execute("SELECT fence_check('term:r', 25)")
    pa = adv.execute("SELECT pg_backend_pid()").fetchone()[0]
    n25 = caller.execute("SELECT fence_terminate('term:r', 25)").fetchone()[0]
    n24 = caller.execute("SELECT fence_terminate('term:r', 24)").fetchone()[0]
    ok(n25 == 0 and n24 == 0 and alive(admin, pa),
       "d) an uncommitted advance to 25 is spared by tokens 25 and 24", "returned %r, %r" % (n25, n24))
    n30 = caller.execute("SELECT fence_terminate('term:r', 30)").fetchone()[0]
    ok(n30 == 1 and wait_gone(admin, pa), "d) ... and ended by token 30", "returned %r" % n30)
    cur = admin.execute("SELECT fence_current('term:r')").fetchone()[0]
    ok(cur == 20, "d) the ended advance did not commit (fence_current 20)", "got %r" % cur)
    try:
        adv.close()
    except Exception:
        pass
    caller.close()


def scenario_escalated(admin):
    locks = int(admin.execute("SHOW max_locks_per_transaction").fetchone()[0])
    esc = connect(APP, autocommit=False)
    pe = esc.execute("SELECT pg_backend_pid()").fetchone()[0]
    esc.execute("SELECT count(fence_check('term:esc:' || g, 1)) FROM generate_series(1, %s) g",
                (locks,))
    new = connect(APP)
    new.execute("SET lock_timeout = '1s'")
    got = state_of(new, "SELECT fence_check('term:e', 5)")
    ok(got == "55P03", "e) an escalated transaction keeps an advance of another resource out",
       "got %r" % got)
    n = new.execute("SELECT fence_terminate('term:e', 5)").fetchone()[0]
    ok(n == 1 and wait_gone(admin, pe), "e) fence_terminate ends it", "returned %r" % n)
    new.execute("SET lock_timeout = '10s'")
    got = state_of(new, "SELECT fence_check('term:e', 5)")
    ok(got is None, "e) the advance then commits", "got %r" % got)
    try:
        esc.close()
    except Exception:
        pass
    new.close()


def scenario_prepared(admin):
    p = connect(APP, autocommit=False)
    p.execute("SELECT fence_check('term:p', 10)")
    p.execute("PREPARE TRANSACTION 'term-orphan'")
    p.close()
    xid = admin.execute("SELECT transaction::text FROM pg_prepared_xacts WHERE gid = 'term-orphan'"
                        ).fetchone()[0]
    caller = connect(APP)
    notices = []
    caller.add_notice_handler(lambda d: notices.append(d.message_primary))
    n = caller.execute("SELECT fence_terminate('term:p', 20)").fetchone()[0]
    ok(n == 0 and any(("prepared transaction %s" % xid) in m for m in notices),
       "f) a prepared transaction holding the fence is reported with its transaction id",
       "returned %r, notices %r (xid %s)" % (n, notices, xid))
    caller.execute("SET lock_timeout = '1s'")
    got = state_of(caller, "SELECT fence_check('term:p', 20)")
    ok(got == "55P03", "f) it still holds the fence", "got %r" % got)
    admin.execute("ROLLBACK PREPARED 'term-orphan'")
    got = state_of(caller, "SELECT fence_check('term:p', 20)")
    ok(got is None, "f) after ROLLBACK PREPARED the advance commits", "got %r" % got)
    caller.close()


def main():
    admin = psycopg.connect(dbname="postgres", autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS %s" % DB)
    for r in (APP, OTHER):
        admin.execute("DROP ROLE IF EXISTS %s" % r)
    admin.execute("CREATE DATABASE %s" % DB)
    admin.execute("CREATE ROLE %s LOGIN" % APP)
    admin.execute("CREATE ROLE %s LOGIN" % OTHER)
    try:
        a = connect()
        a.execute("CREATE EXTENSION fence")
        a.execute("CREATE TABLE jobs (id int, tok bigint)")
        a.execute("SELECT fence_protect('jobs', 'tok', 'term:r')")
        a.execute("GRANT SELECT, INSERT ON jobs TO %s" % APP)
        a.execute("SELECT fence_check('term:r', 10)")
        for fn in (scenario_copy, scenario_tokens, scenario_escalated, scenario_prepared):
            try:
                fn(a)
            except Exception:
                ok(False, "%s ran to the end" % fn.__name__,
                   traceback.format_exc().replace("\n", "\n#   "))
        a.close()
    finally:
        # a prepared transaction left by a failed run: ended in its database
        if admin.execute("SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'term-orphan'"
                         ).fetchone()[0]:
            with connect() as c:
                c.execute("ROLLBACK PREPARED 'term-orphan'")
        admin.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % DB)
        for r in (APP, OTHER):
            admin.execute("DROP ROLE IF EXISTS %s" % r)
    return REPORT.finish("pg_terminate")


if __name__ == "__main__":
    sys.exit(main())
