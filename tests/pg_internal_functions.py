#!/usr/bin/python3
"""tests/pg_internal_functions.py: fence's internal functions cannot be
turned against the fence by an application role (issue 26, item 7).

fence_tokens_changed() is the trigger that announces a change of
fence_tokens that bypassed fence's C code: for a row change it takes
fence_tokens' own ExclusiveLock, which keeps every fence out until the
transaction ends. Before 1.5 it was executable by PUBLIC, so any role that
could create a table could attach it to a table of its own; one INSERT in
an open transaction then stopped every fence_check in the database.

Here an unprivileged role that owns a table tries to attach each internal
trigger function to it; then, whether or not it managed to, it inserts a
row in an open transaction, and another session's fence_check (an advance
and a same-token accept) must go through without waiting.

Runs against PGHOST/PGPORT (tests/run_pg.sh). Output: "ok - pg internal
functions ..." lines.
"""
import sys

import psycopg

from tap import Report

DB = "fence_internal_functions"
ROLE = "fence_intruder"

REPORT = Report("pg internal functions")
ok = REPORT.ok


def attach(conn, function):
    """CREATE TRIGGER ... EXECUTE FUNCTION function() on the role's table:
    None when it was created, else the SQLSTATE."""
    try:
        with conn.transaction():
            conn.execute("CREATE TRIGGER t_%s AFTER INSERT ON mine FOR EACH ROW "
                         "EXECUTE FUNCTION %s()" % (function, function))
            conn.execute("CREATE TRIGGER s_%s AFTER INSERT ON mine FOR EACH STATEMENT "
                         "EXECUTE FUNCTION %s()" % (function, function))
        return None
    except psycopg.Error as e:
        return e.sqlstate


def main():
    admin = psycopg.connect(dbname="postgres", autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS %s" % DB)
    admin.execute("DROP ROLE IF EXISTS %s" % ROLE)
    admin.execute("CREATE DATABASE %s" % DB)
    admin.execute("CREATE ROLE %s LOGIN" % ROLE)
    try:
        setup = psycopg.connect(dbname=DB, autocommit=True)
        setup.execute("CREATE EXTENSION fence")
        # "any role that can create a table": PostgreSQL 15 no longer lets
        # PUBLIC create in schema public, so give the role that right
        setup.execute("GRANT CREATE ON SCHEMA public TO %s" % ROLE)
        setup.execute("SELECT fence_check('int:a', 5)")

        intruder = psycopg.connect(dbname=DB, user=ROLE, autocommit=True)
        intruder.execute("CREATE TABLE mine (x int)")
        got = attach(intruder, "fence_tokens_changed")
        ok(got == "42501",
           "a role that owns a table cannot attach fence_tokens_changed() to it (42501)",
           "CREATE TRIGGER gave %r" % got)
        # the event trigger's function cannot be a row trigger, and only a
        # superuser creates event triggers; EXECUTE is revoked all the same
        execs = dict(setup.execute(
            "SELECT p.proname, has_function_privilege(%s, p.oid, 'EXECUTE') "
            "FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass "
            "AND d.objid = p.oid AND d.deptype = 'e' "
            "JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'fence' "
            "WHERE p.proname IN ('fence_tokens_changed', 'fence_guard_hierarchy')",
            (ROLE,)).fetchall())
        ok(execs == {"fence_tokens_changed": False, "fence_guard_hierarchy": False},
           "an application role has no EXECUTE on fence's internal trigger functions",
           "%r" % execs)

        # whatever the role could attach, an open transaction of its own
        # must not keep anyone else's fence out
        intruder.execute("BEGIN")
        intruder.execute("INSERT INTO mine VALUES (1)")
        other = psycopg.connect(dbname=DB, autocommit=True)
        other.execute("SET lock_timeout = '3s'")
        results = {}
        for what, sql in (("a same-token accept", "SELECT fence_check('int:a', 5)"),
                          ("an advance", "SELECT fence_check('int:a', 6)"),
                          ("a new resource", "SELECT fence_check('int:b', 1)")):
            try:
                other.execute(sql)
                results[what] = "accepted"
            except psycopg.Error as e:
                results[what] = e.sqlstate
        ok(all(v == "accepted" for v in results.values()),
           "another session's fence_check is not blocked by the role's open transaction",
           "%r (55P03: it waited for the role's lock)" % results)
        intruder.execute("ROLLBACK")
        highest = other.execute("SELECT fence_current('int:a')").fetchone()[0]
        ok(highest == 6, "the advance committed (fence_current 6)", "%r" % highest)

        # the trigger on fence_tokens itself still works after the REVOKE:
        # a superuser's UPDATE of fence_tokens is seen by every backend
        other.execute("SELECT fence_check('int:c', 3)")
        setup.execute("UPDATE fence_tokens SET token = 4 WHERE resource = 'int:c'")
        try:
            other.execute("SELECT fence_check('int:c', 3)")
            stale = None
        except psycopg.Error as e:
            stale = e.sqlstate
        ok(stale == "23T01",
           "fence_tokens_changed still fires on fence_tokens: a superuser's UPDATE is seen (23T01)",
           "got %r" % stale)
        # called on any other table (a 1.4 install has no REVOKE), it refuses
        setup.execute("CREATE TABLE admins (x int)")
        setup.execute("CREATE TRIGGER t AFTER INSERT ON admins FOR EACH ROW "
                      "EXECUTE FUNCTION fence_tokens_changed()")
        try:
            setup.execute("INSERT INTO admins VALUES (1)")
            misuse = None
        except psycopg.Error as e:
            misuse = e.sqlstate
        ok(misuse == "39P01",
           "fence_tokens_changed() on a table other than fence_tokens is a trigger protocol error",
           "got %r" % misuse)
        intruder.close()
        other.close()
        setup.close()
    except Exception as e:
        ok(False, "ran to the end", repr(e))
    finally:
        admin.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % DB)
        admin.execute("DROP ROLE IF EXISTS %s" % ROLE)
    return REPORT.finish("pg_internal_functions")


if __name__ == "__main__":
    sys.exit(main())
