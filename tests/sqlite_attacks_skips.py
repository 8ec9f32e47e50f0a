#!/usr/bin/python3
"""tests/sqlite_attacks_skips.py: attacks on what a connection skips reading.

Two things a connection may skip reading. The schema: a guard call from a
statement that fires one of fence's own triggers (of the current shape)
need not read it when no statement that reads fence's tables was prepared
since it was last read (sqlite_ext/fence_guard.c, admittedByCount). And
fence_tokens: a connection remembers each resource's highest token between
its transactions, trusting it while fence's TEMP watch triggers on
main.fence_tokens see every change the connection makes
(docs/sqlite-guarantees.md). Each attack first brings a connection to the
state where it skips the read (the same guarded statements, run in several
transactions), then changes what it skipped in a way that must be seen, and
tries to get past it: a view or trigger planted in the same transaction, at
the end of the previous one, by another connection or in TEMP; the guard
function called from top-level SQL; a watch trigger dropped (and perhaps
made again) in the middle of a transaction and fence_tokens raised by hand
behind it; a guard of the previous shape (shape 3), which must still load
unsealed and still be checked the slow way. Every attack is judged by what
committed, read back by a connection without fence.

Usage: /usr/bin/python3 tests/sqlite_attacks_skips.py
Prints "ok - ..." / "not ok - ..." per assertion; exits 1 on a failure.
"""
import os
import shutil
import sys
import tempfile

import attacklib as lib
from attacklib import attempt, connect

check = lib.Checks("sqlite attacks skips")
ok = check.ok
work = tempfile.mkdtemp(prefix="fence_skips_")
counter = [0]


def committed(path):
    """single's rows and fence_tokens, as a fresh connection without fence sees them."""
    c = connect(path, load=False)
    rows = c.execute("SELECT * FROM single ORDER BY 1").fetchall()
    tokens = c.execute("SELECT resource, token FROM fence_tokens ORDER BY 1").fetchall()
    c.close()
    return rows, tokens


def fresh_db(mode="wal"):
    """single: one resource 'single' at 7, two rows; the guard's id."""
    counter[0] += 1
    path = os.path.join(work, "count%d.db" % counter[0])
    c = connect(path)
    c.executescript("""
        PRAGMA journal_mode = %s;
        CREATE TABLE single(id INTEGER PRIMARY KEY, v INTEGER, tok INTEGER);
        SELECT fence_protect('single', 'tok', 'single');
        INSERT INTO single VALUES (1, 1, 7), (2, 1, 7);
    """ % mode)
    gid = c.execute("SELECT id FROM fence_guards").fetchone()[0]
    c.close()
    return path, gid


STEADY = "UPDATE single SET v = v + 1, tok = 7 WHERE id = 2"


def steady(c, n=3):
    """Guarded transactions with one prepared statement: the state the skip is for."""
    for _ in range(n):
        c.execute("BEGIN")
        c.execute(STEADY)
        c.execute("COMMIT")


def attacked(state):
    """What an attack may not change: row 1 (no legitimate write here touches
    it) and the highest token of 'single'."""
    rows, tokens = state
    return [r for r in rows if r[0] == 1], [t for t in tokens if t[0] == "single"]


def expect_refused(path, before, what, err, after_expected=None):
    after = attacked(committed(path))
    want = attacked(before) if after_expected is None else attacked(after_expected)
    ok(err is not None and after == want, what,
       "error: %r\nbefore: %r\nafter:  %r\nwanted: %r" % (err, before, after, want))


def planted_in_own_transaction():
    """A view made in the transaction, after its guarded write: what the
    guard's own calls saw stays their answer until the transaction ends
    (README: an object the same connection creates inside a transaction
    after its first guarded write is seen from its next transaction on), but
    the view cannot move the fence even then."""
    for mode in ("wal", "delete"):
        path, gid = fresh_db(mode)
        c = connect(path)
        steady(c)
        # its first write a prepared statement (the schema read skipped) or
        # one prepared in the transaction (the schema read)
        for first in (STEADY, "UPDATE single SET v = v + 0, tok = 7 WHERE id = 2"):
            before = committed(path)
            c.execute("BEGIN")
            c.execute(first)
            c.execute("CREATE VIEW pv AS SELECT fence_guard_write(%d, 100) AS x" % gid)
            err = attempt(c, "SELECT * FROM pv")
            c.execute("DROP VIEW pv")
            c.execute("COMMIT")
            expect_refused(path, before, "(%s) a view planted in the transaction, after its "
                           "%s guarded write, cannot move the fence through a guard function"
                           % (mode, "prepared" if first == STEADY else "new"), err)
        before = committed(path)
        c.execute("BEGIN")
        c.execute(STEADY)
        c.execute("CREATE VIEW pv AS SELECT fence_guard_write(%d, 100) AS x" % gid)
        attempt(c, "SELECT * FROM pv")
        c.execute("COMMIT")
        before = committed(path)
        c.execute("BEGIN")
        err = attempt(c, STEADY)
        err2 = attempt(c, "UPDATE single SET v = 41, tok = 7 WHERE id = 1")
        c.execute("COMMIT")
        expect_refused(path, before, "(%s) from the next transaction on, the prepared guarded "
                       "UPDATE and a new one are refused while the view exists" % mode,
                       err and err2)
        c.execute("DROP VIEW pv")
        steady(c)
        # at the token already highest the view's call may pass (what
        # fence_check gives anyone); the next transaction's writes may not
        c.execute("BEGIN")
        c.execute(STEADY)
        c.execute("CREATE VIEW pv AS SELECT fence_guard_write(%d, 7) AS x" % gid)
        attempt(c, "SELECT * FROM pv")
        c.execute("COMMIT")
        before = committed(path)
        c.execute("BEGIN")
        err = attempt(c, "UPDATE single SET v = 42 WHERE id = 1")
        err2 = attempt(c, "UPDATE single SET v = 43, tok = 7 WHERE id = 1")
        c.execute("COMMIT")
        expect_refused(path, before, "(%s) a view planted at the highest token: the next "
                       "transaction's protected writes are refused" % mode,
                       err and err2 and err + " / " + err2)
        c.close()


def planted_at_end_of_previous():
    path, gid = fresh_db()
    c = connect(path)
    steady(c)
    c.execute("BEGIN")
    c.execute(STEADY)
    c.execute("CREATE VIEW pv AS SELECT fence_guard_write(%d, 100) AS x" % gid)
    c.execute("CREATE TABLE bait(x)")
    c.execute("CREATE TRIGGER pt AFTER INSERT ON bait BEGIN "
              "SELECT fence_guard_write(%d, 200); END" % gid)
    c.execute("COMMIT")
    before = committed(path)
    for what, sql in (("view", "SELECT * FROM pv"), ("trigger", "INSERT INTO bait VALUES (1)")):
        c.execute("BEGIN")
        c.execute("SELECT fence_check('other', 1)")
        err = attempt(c, sql)
        c.execute("COMMIT")
        expect_refused(path, before, "a %s planted after the guarded write of the previous "
                       "transaction cannot move the fence" % what, err)
    c.close()


def planted_by_another_connection():
    path, gid = fresh_db()
    c = connect(path)
    steady(c)
    other = connect(path, load=False)
    other.execute("CREATE VIEW pv AS SELECT fence_guard_write(%d, 100) AS x" % gid)
    other.close()
    before = committed(path)
    c.execute("BEGIN")
    err = attempt(c, "SELECT * FROM pv")
    c.execute("COMMIT")
    expect_refused(path, before, "a view another connection planted cannot move the fence", err)
    c.execute("BEGIN")
    err = attempt(c, STEADY)
    c.execute("COMMIT")
    expect_refused(path, before, "and the prepared guarded UPDATE fails closed", err)
    c.close()


def planted_in_temp():
    path, gid = fresh_db()
    c = connect(path)
    steady(c)
    before = committed(path)
    c.execute("BEGIN")
    c.execute(STEADY)
    c.execute("CREATE TEMP VIEW tv AS SELECT fence_guard_write(%d, 100) AS x" % gid)
    err = attempt(c, "SELECT * FROM tv")
    c.execute("COMMIT")
    expect_refused(path, before, "a TEMP view cannot move the fence", err)
    c.close()


def top_level_call():
    """The application's own SQL, nothing planted: the guard function accepts like fence_check."""
    path, gid = fresh_db()
    c = connect(path)
    steady(c)
    c.execute("BEGIN")
    err = attempt(c, "SELECT fence_guard_write(%d, 8)" % gid)
    c.execute("COMMIT")
    rows, tokens = committed(path)
    ok(err is None and tokens == [("single", 8)],
       "a top-level call with a newer token is accepted and recorded", "%r %r" % (err, tokens))
    before = committed(path)
    c.execute("BEGIN")
    err = attempt(c, STEADY)
    c.execute("COMMIT")
    expect_refused(path, before, "after which the old token is stale", err)
    c.close()


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


def previous_shape_guard():
    """A guard of shape 3 (fence 1.4.x): not sealed at load, checked the slow way."""
    path, gid = fresh_db()
    c = connect(path, load=False)
    triggers = c.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' "
                         "AND name GLOB 'fence:*'").fetchall()
    for name, sql in triggers:
        old = sql.replace("fence guard shape 4", "fence guard shape 3").replace(
            " DELETE FROM fence_join WHERE 0;", " INSERT INTO fence_join VALUES (NULL);")
        assert old.count("shape 3") == 1 and "DELETE FROM fence_join" not in old, old
        c.execute('DROP TRIGGER "%s"' % name)
        c.execute(old)
    c.execute("CREATE TABLE kv(k TEXT PRIMARY KEY, u TEXT, v INTEGER, tok INTEGER)")
    c.close()
    c = connect(path)
    shapes = [r[0] for r in c.execute("SELECT sql LIKE '%shape 3%' FROM sqlite_schema "
                                      "WHERE type = 'trigger' AND name GLOB 'fence:*'")]
    ok(len(shapes) == len(triggers) and all(shapes), "a shape-3 guard is not sealed at load",
       shapes)
    steady(c)
    rows, tokens = committed(path)
    ok(rows[1][1] == 4 and tokens == [("single", 7)], "a shape-3 guard passes its token",
       "%r %r" % (rows, tokens))
    before = committed(path)
    c.execute("BEGIN")
    err = attempt(c, "UPDATE single SET v = 99, tok = 6 WHERE id = 1")
    c.execute("COMMIT")
    expect_refused(path, before, "a shape-3 guard refuses a stale token", err)
    # in one transaction: a shape-4 guard's call skips the schema read, then a
    # planted view appears and the shape-3 guard is written again
    c.execute("SELECT fence_protect('kv', 'tok', 'kv:', 'k')")
    c.execute("INSERT INTO kv VALUES ('a', 'x', 1, 7)")
    for _ in range(3):
        c.execute("BEGIN")
        c.execute("UPDATE kv SET v = v + 1, tok = 7 WHERE k = 'a'")
        c.execute(STEADY)
        c.execute("COMMIT")
    before = committed(path)
    c.execute("BEGIN")
    c.execute("UPDATE kv SET v = v + 1, tok = 7 WHERE k = 'a'")
    c.execute("CREATE VIEW pv AS SELECT fence_guard_write(%d, 7) AS x" % gid)
    err = attempt(c, STEADY)
    c.execute("COMMIT")
    expect_refused(path, before, "a shape-3 guard sees a view planted after another guard's "
                   "call in the same transaction", err)
    c.close()


def main():
    try:
        for part in (planted_in_own_transaction, planted_at_end_of_previous,
                     planted_by_another_connection, planted_in_temp, top_level_call,
                     watch_dropped_and_raised_by_hand, previous_shape_guard):
            try:
                part()
            except Exception as e:  # a crash in one class must not hide the others
                ok(False, "%s ran to the end" % part.__name__, repr(e))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(check.status())


if __name__ == "__main__":
    main()
