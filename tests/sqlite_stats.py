#!/usr/bin/python3
"""tests/sqlite_stats.py: fence_stats on SQLite, this connection's counts since it opened.

Each count is checked against the calls that made it:

- accepted: every fence_check/fence_try that accepts (equal tokens too),
  and every token a guard accepts for a row (one per row written with a
  token; an UPDATE that changes a per-row key is checked under the old and
  the new resource); a write under a fence that carries no token is no
  accept;
- rejected: fence_check's stale error, fence_try's 0, a guard's stale
  error, each with last_rejected_token and last_rejected_at (UTC,
  'YYYY-MM-DD HH:MM:SS.SSS', the connection's clock at the rejection);
- nowhere: "fencing token required", invalid input, lease calls;
- attempts, not commits: what a rolled-back transaction accepted stays
  counted;
- per connection: another connection's counts are its own, a new one
  starts empty; the table is read-only, and a scan that takes fences
  ends.

Usage: /usr/bin/python3 tests/sqlite_stats.py
Prints "ok - ..." / "not ok - ..." per assertion.
"""
import datetime
import os
import sqlite3
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.path.join(ROOT, "sqlite_ext", "fence")
failures = 0


def ok(cond, what, detail=""):
    global failures
    print(("ok - " if cond else "not ok - ") + "sqlite fence_stats: " + what)
    if not cond:
        failures += 1
        if detail:
            print("#   " + str(detail))


def connect(path):
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    conn.enable_load_extension(True)
    conn.load_extension(EXTENSION)
    return conn


def stats(conn):
    return {r[0]: r[1:] for r in conn.execute("SELECT * FROM fence_stats")}


def fails(conn, sql, args=()):
    try:
        conn.execute(sql, args).fetchall()
    except sqlite3.Error as e:
        return str(e)
    return None


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "stats.db")
        c = connect(path)
        cols = [x[1] for x in c.execute("PRAGMA table_info(fence_stats)")]
        ok(cols == ["resource", "accepted", "rejected", "last_rejected_token", "last_rejected_at"],
           "columns exactly resource, accepted, rejected, last_rejected_token, last_rejected_at", cols)
        ok(stats(c) == {}, "a new connection has no rows")

        c.execute("SELECT fence_check('a', 5)")
        c.execute("SELECT fence_check('a', 5)")
        c.execute("SELECT fence_try('a', 6)")
        ok(stats(c) == {"a": (3, 0, None, None)},
           "every accept counts, equal tokens too; no rejection: NULL last_rejected_*", stats(c))

        before = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
        ok(fails(c, "SELECT fence_check('a', 4)") is not None, "a stale fence_check raises")
        c.execute("SELECT fence_try('a', 3)")
        after = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
        s = stats(c)["a"]
        at = datetime.datetime.strptime(s[3], "%Y-%m-%d %H:%M:%S.%f") if s[3] else None
        ok(s[:3] == (3, 2, 3) and len(s[3]) == 23 and
           before - datetime.timedelta(seconds=1) <= at <= after + datetime.timedelta(seconds=1),
           "fence_check's error and fence_try's 0 count as rejections; the last token and "
           "its UTC time 'YYYY-MM-DD HH:MM:SS.SSS'", (s, before, after))

        # nowhere: invalid input, fencing token required, lease calls
        c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, tok INTEGER, v TEXT)")
        c.execute("SELECT fence_protect('t', 'tok', 'g')")
        c.execute("CREATE TABLE t2(id INTEGER PRIMARY KEY, tok INTEGER)")
        c.execute("SELECT fence_protect('t2', 'tok', 'g2')")
        c.execute("INSERT INTO t2 VALUES (1, 1)")
        snap = stats(c)
        errs = [fails(c, q) for q in ("SELECT fence_check('x', -1)", "SELECT fence_check(NULL, 1)",
                                      "SELECT fence_try('x', '1')",
                                      "INSERT INTO t(tok, v) VALUES (NULL, 'n')",
                                      "DELETE FROM t2", "UPDATE t2 SET id = 2")]
        c.execute("SELECT fence_acquire('lease', 'h', 60000)")
        c.execute("SELECT fence_renew('lease', 'h', 1, 60000)")
        c.execute("SELECT fence_release('lease', 'h', 1)")
        ok(all(errs) and stats(c) == snap,
           "invalid input, \"fencing token required\" and lease calls count nowhere", (errs, stats(c)))

        # guards: one accept per row written with a token
        c.execute("BEGIN")
        c.execute("INSERT INTO t(tok, v) VALUES (7, 'x'), (7, 'y'), (7, 'z')")
        c.execute("UPDATE t SET tok = 7, v = 'w' WHERE id <= 2")
        c.execute("UPDATE t SET v = 'tokenless' WHERE id = 3")
        c.execute("DELETE FROM t WHERE id = 3")
        c.execute("COMMIT")
        ok(stats(c).get("g") == (5, 0, None, None),
           "a guard counts one accept per row written with a token (3 inserted, 2 updated); "
           "writes under the fence without a token count nothing", stats(c).get("g"))
        ok(fails(c, "UPDATE t SET tok = 6 WHERE id = 1") is not None and
           stats(c)["g"][:3] == (5, 1, 6),
           "a guard's stale error counts one rejection", stats(c).get("g"))

        # many rows of one resource: each counted, read during the transaction
        # and after, with two guards' rows alternating and a statement of many rows
        c.execute("CREATE TABLE m1(id INTEGER PRIMARY KEY, tok INTEGER)")
        c.execute("CREATE TABLE m2(id INTEGER PRIMARY KEY, tok INTEGER)")
        c.execute("SELECT fence_protect('m1', 'tok', 'ma')")
        c.execute("SELECT fence_protect('m2', 'tok', 'mb')")
        c.execute("BEGIN")
        c.execute("SELECT fence_check('ma', 1), fence_check('mb', 1)")
        for _ in range(200):
            c.execute("INSERT INTO m1(tok) VALUES (1)")
        mid = stats(c).get("ma")
        for _ in range(25):
            c.execute("INSERT INTO m1(tok) VALUES (1)")
            c.execute("INSERT INTO m2(tok) VALUES (1)")
        for table in ("m1", "m2", "m1"):
            c.executemany("INSERT INTO %s(tok) VALUES (1)" % table, [()] * (25 if table == "m2" else 13))
        c.execute("UPDATE m1 SET tok = 1")
        in_txn = (stats(c).get("ma"), stats(c).get("mb"))
        c.execute("COMMIT")
        ok(mid == (201, 0, None, None) and in_txn == ((503, 0, None, None), (51, 0, None, None)) and
           (stats(c).get("ma"), stats(c).get("mb")) == in_txn,
           "every row a guard accepts is counted: 200 rows one statement each, read during the "
           "transaction; two tables alternating, row by row and in runs; one UPDATE of 251 rows",
           (mid, in_txn))

        # per-row resources: an UPDATE changing the key is checked under both
        c.execute("CREATE TABLE k(id TEXT PRIMARY KEY, tok INTEGER)")
        c.execute("SELECT fence_protect('k', 'tok', 'k:', 'id')")
        c.execute("PRAGMA recursive_triggers = ON")    # a TEXT key in a rowid table
        c.execute("INSERT INTO k VALUES ('1', 3)")
        c.execute("UPDATE k SET id = '2', tok = 3")
        s = stats(c)
        ok(s.get("k:1") == (2, 0, None, None) and s.get("k:2") == (1, 0, None, None),
           "a key change is an accept under the old and the new resource", s)

        # attempts, not commits
        c.execute("BEGIN")
        c.execute("SELECT fence_check('rb', 1)")
        c.execute("SELECT fence_try('rb', 1)")
        c.execute("ROLLBACK")
        ok(stats(c).get("rb") == (2, 0, None, None) and
           c.execute("SELECT fence_current('rb')").fetchone()[0] is None,
           "what a rolled-back transaction accepted stays counted")

        # per connection
        c2 = connect(path)
        c2.execute("SELECT fence_try('a', 1)")
        ok(stats(c2) == {"a": (0, 1, 1, stats(c2)["a"][3])} and stats(c)["a"][:3] == (3, 2, 3),
           "another connection's counts are its own", stats(c2))
        c2.close()
        ok(stats(connect(path)) == {}, "a new connection starts empty")

        err = fails(c, "INSERT INTO fence_stats VALUES ('a', 0, 0, NULL, NULL)")
        err2 = fails(c, "DELETE FROM fence_stats")
        ok(err and err2 and stats(c)["a"][:3] == (3, 2, 3), "fence_stats is read-only", (err, err2))
        n = len(stats(c))
        rows = c.execute("SELECT fence_check(resource || '-more', 1) FROM fence_stats").fetchall()
        ok(len(rows) == n and len(stats(c)) == 2 * n,
           "a scan of fence_stats that takes fences ends where it began", (n, len(rows)))

        # many resources (the table grows)
        for i in range(3000):
            c.execute("SELECT fence_try(?, 1)", ("many-%d" % i,))
        s = stats(c)
        ok(all(s.get("many-%d" % i) == (1, 0, None, None) for i in range(3000)),
           "3000 resources, each counted once")
        c.close()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
