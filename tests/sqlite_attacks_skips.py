#!/usr/bin/python3
"""tests/sqlite_attacks_skips.py: attacks on what a connection skips reading.

A connection remembers each resource's highest token between its
transactions, trusting it while fence's TEMP watch triggers on
main.fence_tokens see every change the connection makes
(docs/sqlite-guarantees.md). Each attack first brings a connection to the
state where it skips the read (the same guarded statements, run in several
transactions), then changes what it skipped in a way that must be seen, and
tries to get past it: a watch trigger dropped (and perhaps made again) in the
middle of a transaction and fence_tokens raised by hand behind it. Every
attack is judged by what committed, read back by a connection without fence.

Usage: /usr/bin/python3 tests/sqlite_attacks_skips.py
Prints "ok - ..." / "not ok - ..." per assertion; exits 1 on a failure.
"""
import os
import shutil
import sqlite3
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.environ.get("FENCE_EXTENSION", os.path.join(ROOT, "sqlite_ext", "fence"))
failures = 0
work = tempfile.mkdtemp(prefix="fence_skips_")
counter = [0]


def ok(cond, what, detail=""):
    global failures
    print(("ok - " if cond else "not ok - ") + "sqlite attacks skips: " + what)
    if not cond:
        failures += 1
        if detail:
            print("#   " + str(detail).replace("\n", "\n#   "))


def connect(path, load=True):
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    if load:
        conn.enable_load_extension(True)
        conn.load_extension(EXTENSION)
    return conn


def attempt(conn, sql):
    """Run sql; the error text, or None when it succeeded."""
    try:
        conn.execute(sql).fetchall()
        return None
    except sqlite3.Error as e:
        return str(e)


KV_STEADY = ("UPDATE kv SET v = v + 1, tok = 7 WHERE k = 'a'",
             "UPDATE kv SET v = v + 1, tok = 7 WHERE k = 'b'")


def watch_dropped_and_raised_by_hand():
    """fence_tokens changed where the watch could not see it, in the transaction itself.

    The transaction first writes kv:a (so that the highest-token cache is in
    use), then drops one of the TEMP triggers that watch fence_tokens (and
    perhaps makes it again), raises kv:b to 50 by hand, and writes kv:b at
    token 7: through the guard's own prepared UPDATE, or a guard function
    called from SQL and then an UPDATE that sets no token. Its first write
    is a statement prepared before the transaction, or one prepared in it.
    Token 7 is stale each time.
    """
    for first in ("prepared", "new"):
        for remake in (False, True):
            for how in ("own", "called"):
                counter[0] += 1
                path = os.path.join(work, "watch%d.db" % counter[0])
                c = connect(path)
                c.executescript("""
                    PRAGMA journal_mode = WAL;
                    CREATE TABLE kv(k TEXT PRIMARY KEY, v INTEGER, tok INTEGER);
                    SELECT fence_protect('kv', 'tok', 'kv:', 'k');
                    INSERT INTO kv VALUES ('a', 1, 7), ('b', 1, 7);
                """)
                gid = c.execute("SELECT id FROM fence_guards").fetchone()[0]
                c.close()
                c = connect(path)  # fence makes its watch as it loads
                watch = c.execute("SELECT sql FROM temp.sqlite_master "
                                  "WHERE name = 'fence:watch:update'").fetchone()[0]
                for _ in range(3):
                    c.execute("BEGIN")
                    for sql in KV_STEADY:
                        c.execute(sql)
                    c.execute("COMMIT")
                r = connect(path, load=False)
                rows = r.execute("SELECT * FROM kv ORDER BY 1").fetchall()
                r.close()
                c.execute("BEGIN")
                c.execute(KV_STEADY[0] if first == "prepared"
                          else "UPDATE kv SET v = v + 0, tok = 7 WHERE k = 'a'")
                c.execute('DROP TRIGGER temp."fence:watch:update"')
                c.execute("UPDATE fence_tokens SET token = 50 WHERE resource = 'kv:b'")
                if remake:
                    c.execute(watch.replace("CREATE TRIGGER", "CREATE TEMP TRIGGER", 1))
                if how == "own":
                    errs = [attempt(c, "UPDATE kv SET v = 99, tok = 7 WHERE k = 'b'")]
                else:
                    errs = [attempt(c, "SELECT fence_guard_write(%d, 'kv:', 'b', 7)" % gid),
                            attempt(c, "UPDATE kv SET v = 99 WHERE k = 'b'")]
                c.execute("COMMIT")
                r = connect(path, load=False)
                after = (r.execute("SELECT * FROM kv ORDER BY 1").fetchall(),
                         r.execute("SELECT resource, token FROM fence_tokens ORDER BY 1")
                         .fetchall())
                r.close()
                want_rows = [(k, v + (1 if k == "a" and first == "prepared" else 0), t)
                             for k, v, t in rows]
                ok(all(errs) and after == (want_rows, [("kv:a", 7), ("kv:b", 50)]),
                   "watch dropped%s and kv:b raised by hand after a %s first write: token 7 "
                   "is stale to %s" % (" and made again" if remake else "", first,
                                       "the guard's UPDATE" if how == "own"
                                       else "a guard call and the UPDATE after it"),
                   "errors: %r\nafter: %r" % (errs, after))
                c.close()


def main():
    try:
        for part in (watch_dropped_and_raised_by_hand,):
            try:
                part()
            except Exception as e:  # a crash in one class must not hide the others
                ok(False, "%s ran to the end" % part.__name__, repr(e))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
