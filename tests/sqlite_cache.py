#!/usr/bin/python3
"""tests/sqlite_cache.py: what a connection remembers of fence_tokens between its transactions.

A connection that presents the token it presented in its last transaction
takes the highest from memory instead of reading fence_tokens
(sqlite_ext/fence_cache.c). That memory must give way to every change of
fence_tokens it did not make itself as fence's advance (SPEC "No way around
the fence": every way fence_tokens changes is seen by the next check in
every session). Each case below first makes a connection ("A") remember
resource r at 9 through a guarded write, then changes fence_tokens another
way, then has A write again at 9 or less, and judges what committed: the
table, fence_tokens, and whether a later writer at a lower token gets in
after A's write (which is what a stale memory would allow: A's equal accept
writes nothing, so a fence_tokens it failed to see stays lower than the
token A committed a write at).

Every case runs in journal_mode=WAL and journal_mode=DELETE.

Usage: /usr/bin/python3 tests/sqlite_cache.py
"""
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.environ.get("FENCE_EXTENSION", os.path.join(ROOT, "sqlite_ext", "fence"))
report = Report("sqlite cache:")
work = tempfile.mkdtemp(prefix="fence_cache_")


def ok(cond, what, detail=""):
    return report.ok(cond, what, repr(detail))


def connect(path, mode):
    conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    conn.enable_load_extension(True)
    conn.load_extension(EXTENSION)
    conn.execute("PRAGMA journal_mode=%s" % mode).fetchall()
    return conn


def attempt(conn, *statements):
    """Run statements in one transaction; return the error or None (rolled back on error)."""
    try:
        conn.execute("BEGIN")
        for s in statements:
            conn.execute(s).fetchall()
        conn.execute("COMMIT")
        return None
    except sqlite3.Error as e:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return str(e)


def committed(path, sql):
    c = sqlite3.connect(path)
    try:
        return c.execute(sql).fetchall()
    finally:
        c.close()


def highest(path, resource="r"):
    rows = committed(path, "SELECT token FROM fence_tokens WHERE resource = '%s'" % resource)
    return rows[0][0] if rows else None


def setup(name, mode):
    """A fresh file, t protected under r (highest 9), and A having written at 9 twice."""
    path = os.path.join(work, "%s-%s.db" % (name, mode))
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    a = connect(path, mode)
    a.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, tok INTEGER)")
    a.execute("CREATE TABLE log(who TEXT, tok INTEGER)")
    a.execute("INSERT INTO t VALUES (1, 0, NULL)")
    a.execute("SELECT fence_protect('t', 'tok', 'r')")
    a.execute("SELECT fence_check('r', 9)").fetchall()
    a.close()
    a = connect(path, mode)
    for _ in range(2):
        err = attempt(a, "UPDATE t SET n = n + 1, tok = 9 WHERE id = 1")
        assert err is None, err
    return path, a


def case_other_connection(mode):
    path, a = setup("other", mode)
    b = connect(path, mode)
    err = attempt(b, "UPDATE t SET n = n + 1, tok = 12 WHERE id = 1")
    ok(err is None, "%s: another connection advances r to 12" % mode, err)
    err = attempt(a, "UPDATE t SET n = 666, tok = 9 WHERE id = 1")
    ok(err is not None and "stale" in err and
              committed(path, "SELECT count(*) FROM t WHERE n = 666") == [(0,)],
              "%s: A at 9 after another connection's 12 is refused, nothing committed" % mode,
              err)
    a.close()
    b.close()


def case_other_process(mode):
    path, a = setup("process", mode)
    code = ("import sqlite3; c = sqlite3.connect(%r, isolation_level=None, timeout=5); "
            "c.enable_load_extension(True); c.load_extension(%r); "
            "c.execute('BEGIN'); c.execute('UPDATE t SET n = n + 1, tok = 13 WHERE id = 1'); "
            "c.execute('COMMIT')" % (path, EXTENSION))
    proc = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True)
    ok(proc.returncode == 0, "%s: another process advances r to 13" % mode, proc.stderr)
    err = attempt(a, "UPDATE t SET n = 666, tok = 9 WHERE id = 1")
    ok(err is not None and committed(path, "SELECT count(*) FROM t WHERE n = 666") == [(0,)],
              "%s: A at 9 after another process's 13 is refused, nothing committed" % mode, err)
    a.close()


def case_hand_raise(mode):
    """A transaction of A's own, not fenced, raises r to 20: its commit moves the data version."""
    path, a = setup("raise", mode)
    err = attempt(a, "UPDATE fence_tokens SET token = 20 WHERE resource = 'r'")
    ok(err is None and highest(path) == 20, "%s: A raises r to 20 in a transaction of its own" % mode,
       err)
    err = attempt(a, "UPDATE t SET n = 666, tok = 9 WHERE id = 1")
    ok(err is not None and committed(path, "SELECT count(*) FROM t WHERE n = 666") == [(0,)],
       "%s: A at 9 after that is refused" % mode, err)
    a.close()


def case_reset(mode):
    path, a = setup("reset", mode)
    a.execute("SELECT fence_reset('r')").fetchall()
    b = connect(path, mode)
    err = attempt(b, "UPDATE t SET n = n + 1, tok = 3 WHERE id = 1")
    err2 = attempt(a, "UPDATE t SET n = n + 1, tok = 9 WHERE id = 1")
    err3 = attempt(b, "UPDATE t SET n = 666, tok = 3 WHERE id = 1")
    ok(err is None and err2 is None and highest(path) == 9 and err3 is not None and
              committed(path, "SELECT count(*) FROM t WHERE n = 666") == [(0,)],
              "%s: after A's fence_reset and B's 3, A's 9 is recorded and B's 3 refused" % mode,
              (err, err2, err3, highest(path)))
    a.close()
    b.close()


def case_rollback(mode, how):
    """An advance that is undone must not be remembered as the highest."""
    path, a = setup("rollback-%s" % how, mode)
    if how == "rollback":
        a.execute("BEGIN")
        a.execute("UPDATE t SET n = n + 1, tok = 10 WHERE id = 1")
        a.execute("ROLLBACK")
    elif how == "savepoint":
        a.execute("BEGIN")
        a.execute("SAVEPOINT s")
        a.execute("UPDATE t SET n = n + 1, tok = 10 WHERE id = 1")
        a.execute("ROLLBACK TO s")
        a.execute("RELEASE s")
        a.execute("INSERT INTO log VALUES ('A', 0)")
        a.execute("COMMIT")
    elif how == "undo":     # fence's own undo: a one-row INSERT has no statement journal
        a.execute("BEGIN")
        try:
            a.execute("INSERT INTO log VALUES (fence_check('r', 10), fence_check('r', -1))")
        except sqlite3.Error:
            pass
        a.execute("INSERT INTO log VALUES ('A', 0)")
        a.execute("COMMIT")
    else:   # a failed statement: the advance in its first row, an error in its second
        a.execute("INSERT INTO t VALUES (2, 0, 9)")
        a.execute("BEGIN")
        try:
            a.execute("UPDATE t SET n = n + 1, tok = CASE id WHEN 1 THEN 10 ELSE -1 END")
        except sqlite3.Error:
            pass
        a.execute("INSERT INTO log VALUES ('A', 0)")
        a.execute("COMMIT")
    ok(highest(path) == 9, "%s, %s: the advance to 10 did not commit" % (mode, how),
              highest(path))
    err = attempt(a, "UPDATE t SET n = n + 1, tok = 10 WHERE id = 1")
    ok(err is None and highest(path) == 10,
              "%s, %s: A's next write at 10 records 10 in fence_tokens" % (mode, how),
              (err, highest(path)))
    b = connect(path, mode)
    err = attempt(b, "UPDATE t SET n = 666, tok = 9 WHERE id = 1")
    ok(err is not None and committed(path, "SELECT count(*) FROM t WHERE n = 666") == [(0,)],
              "%s, %s: B at 9 after A's 10 is refused" % (mode, how), err)
    a.close()
    b.close()


def case_backup(mode, into_self):
    """The file is replaced by an older copy (backup API): r is 5 there."""
    path, a = setup("backup%d" % into_self, mode)
    old = os.path.join(work, "old-%s-%d.db" % (mode, into_self))
    if os.path.exists(old):
        os.remove(old)
    src = sqlite3.connect(old)
    sqlite3.connect(path).backup(src)
    src.execute("UPDATE fence_tokens SET token = 5 WHERE resource = 'r'")
    src.commit()
    if into_self:
        src.backup(a)
    else:
        dst = sqlite3.connect(path, timeout=5)
        src.backup(dst)
        dst.close()
    src.close()
    ok(highest(path) == 5, "%s: the file now holds r at 5 (restored %s)" %
              (mode, "through A itself" if into_self else "by another connection"),
              highest(path))
    err = attempt(a, "UPDATE t SET n = n + 1, tok = 9 WHERE id = 1")
    ok(err is None and highest(path) == 9,
              "%s: A's write at 9 records 9 again (restored %s)" %
              (mode, "through A" if into_self else "by another connection"), (err, highest(path)))
    a.close()


def case_memo_reset(mode):
    """Within one statement: a fence given up on row 2 no longer lets row 2's delete through."""
    path, a = setup("memo", mode)
    a.execute("INSERT INTO t VALUES (2, 0, 9)")
    a.execute("BEGIN")
    a.execute("SELECT fence_check('r', 9)").fetchall()
    try:
        a.execute("UPDATE t SET n = n + 1 + CASE WHEN id = 2 THEN coalesce(fence_reset('r'), 0) "
                  "ELSE 0 END WHERE id IN (1, 2)")
        err = None
    except sqlite3.Error as e:
        err = str(e)
    a.execute("COMMIT")
    ok(err is not None and committed(path, "SELECT max(n) FROM t") == [(2,)],
       "%s: a tokenless UPDATE whose second row comes after fence_reset of its resource is "
       "refused, the first row's update undone with it" % mode,
       (err, committed(path, "SELECT * FROM t")))
    a.close()


def rolled_back_then_tokenless(name, mode, inside, what):
    """BEGIN; SAVEPOINT s; the statements inside; ROLLBACK TO s; then a tokenless UPDATE must be
    refused, with nothing of it committed and r still at 9."""
    path, a = setup(name, mode)
    a.execute("BEGIN")
    a.execute("SAVEPOINT s")
    for sql in inside:
        a.execute(sql)
    a.execute("ROLLBACK TO s")
    try:
        a.execute("UPDATE t SET n = 666 WHERE id = 1")
        err = None
    except sqlite3.Error as e:
        err = str(e)
    a.execute("COMMIT")
    ok(err is not None and committed(path, "SELECT count(*) FROM t WHERE n = 666") == [(0,)]
       and highest(path) == 9, "%s: %s" % (mode, what), (err, highest(path)))
    a.close()


def case_memo_savepoint(mode):
    """A fence rolled back with its savepoint no longer lets tokenless writes through."""
    rolled_back_then_tokenless(
        "memosp", mode, ["UPDATE t SET n = n + 1, tok = 10 WHERE id = 1",
                         "UPDATE t SET n = n + 1 WHERE id = 1"],  # fenced: the memo remembers it
        "after ROLLBACK TO, a tokenless UPDATE is refused and r stays at 9")


def case_memo_write_savepoint(mode):
    """A token-setting UPDATE rolled back to a savepoint: the statement after it that sets no
    token is refused, whether the token advanced r or equalled its highest."""
    for tok in (10, 9):
        rolled_back_then_tokenless(
            "memowsp%d" % tok, mode, ["UPDATE t SET n = n + 1, tok = %d WHERE id = 1" % tok],
            "an UPDATE setting token %d rolled back to its savepoint: the tokenless UPDATE "
            "after it is refused, r stays at 9" % tok)


def case_released_marks(mode):
    """A savepoint released and another opened at its depth: ROLLBACK TO the new one undoes
    exactly what was accepted after it, whether the guard or fence_check accepted it."""
    path, a = setup("relmarks", mode)
    a.execute("BEGIN")
    a.execute("SAVEPOINT a")
    a.execute("RELEASE a")
    a.execute("UPDATE t SET n = n + 1, tok = 10 WHERE id = 1")     # holds r at 10
    a.execute("SAVEPOINT b")
    a.execute("SELECT fence_check('s', 3)").fetchall()
    a.execute("SAVEPOINT c")
    a.execute("SELECT fence_check('q', 4)").fetchall()
    a.execute("RELEASE c")
    a.execute("SAVEPOINT d")
    a.execute("SELECT fence_check('p', 5)").fetchall()
    a.execute("ROLLBACK TO d")
    held = sorted(a.execute("SELECT resource, token FROM fence_held").fetchall())
    ok(held == [("q", 4), ("r", 10), ("s", 3)],
       "%s: ROLLBACK TO a savepoint opened where another was released undoes only what "
       "came after it" % mode, held)
    a.execute("ROLLBACK TO b")
    held = sorted(a.execute("SELECT resource, token FROM fence_held").fetchall())
    try:
        a.execute("UPDATE t SET n = 100 WHERE id = 1")
        err = None
    except sqlite3.Error as e:
        err = str(e)
    a.execute("COMMIT")
    ok(held == [("r", 10)] and err is None and highest(path) == 10 and
       committed(path, "SELECT n FROM t") == [(100,)],
       "%s: ... and ROLLBACK TO the outer one leaves the guard's fence on r, which a tokenless "
       "UPDATE then uses" % mode, (held, err, highest(path)))
    a.close()


def case_guard_advance_then_fail(mode, explicit):
    """A guard's advance in a statement that then fails is undone with the statement."""
    path, a = setup("gfail%d" % explicit, mode)
    if explicit:
        a.execute("BEGIN")
    try:
        # the BEFORE INSERT guard advances r to 10, then the primary key refuses the row
        a.execute("INSERT INTO t(id, n, tok) VALUES (1, 0, 10)")
        err = None
    except sqlite3.Error as e:
        err = str(e)
    err2 = None
    if explicit:
        try:
            a.execute("UPDATE t SET n = 666 WHERE id = 1")
        except sqlite3.Error as e:
            err2 = str(e)
        a.execute("COMMIT")
    ok(err is not None and "UNIQUE" in err and highest(path) == 9 and
       (not explicit or err2 is not None) and
       committed(path, "SELECT count(*) FROM t WHERE n = 666") == [(0,)],
       "%s, %s: a guard's advance in a statement that fails is undone, and holds nothing" %
       (mode, "in a transaction" if explicit else "autocommit"), (err, err2, highest(path)))
    b = connect(path, mode)
    err3 = attempt(b, "UPDATE t SET n = n + 1, tok = 9 WHERE id = 1")
    ok(err3 is None, "%s, %s: 9 is still accepted after it" %
       (mode, "in a transaction" if explicit else "autocommit"), err3)
    a.close()
    b.close()


def shared_setup(name, mode):
    path, a = setup(name, mode)
    a.close()
    uri = "file:%s?cache=shared" % path

    def sconnect():
        c = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=0.2,
                            check_same_thread=False)
        c.enable_load_extension(True)
        c.load_extension(EXTENSION)
        return c
    return path, sconnect


def try_all(conn, *statements):
    """Run statements; return the first error (the transaction is left as it is)."""
    for st in statements:
        try:
            conn.execute(st).fetchall()
        except sqlite3.Error as e:
            return str(e)
    return None


def case_shared_cache(mode):
    """Shared cache: A at 10 (from memory?) must keep B from committing 20 under it."""
    path, sconnect = shared_setup("shared", mode)
    a, b = sconnect(), sconnect()
    for _ in range(3):      # the holder's usual transactions: fence_check, then its writes
        assert attempt(a, "SELECT fence_check('r', 10)",
                       "UPDATE t SET n = n + 1 WHERE id = 1") is None
    a.execute("BEGIN")
    a.execute("SELECT fence_check('r', 10)").fetchall()
    err_b = try_all(b, "BEGIN", "UPDATE t SET n = n + 1, tok = 20 WHERE id = 1", "COMMIT")
    if b.in_transaction:
        b.execute("ROLLBACK")
    err_a = try_all(a, "UPDATE t SET n = 1000 WHERE id = 1", "COMMIT")
    if a.in_transaction:
        a.execute("ROLLBACK")
    rows = committed(path, "SELECT n, tok FROM t WHERE id = 1")
    ok(not (err_a is None and err_b is None) and highest(path) in (10, 20) and
       not (rows[0][0] == 1000 and highest(path) == 20),
       "%s, shared cache: a write fenced at 10 does not commit after 20 did" % mode,
       (err_a, err_b, rows, highest(path)))
    a.close()
    b.close()


def case_read_uncommitted(mode):
    """Shared cache + read_uncommitted: a token another connection rolls back is never judged on."""
    path, sconnect = shared_setup("uncommitted", mode)
    a, b = sconnect(), sconnect()
    a.execute("PRAGMA read_uncommitted = 1")
    b.execute("BEGIN")
    b.execute("SELECT fence_check('r', 20)").fetchall()
    err = try_all(a, "BEGIN", "SELECT count(*) FROM log", "SELECT fence_check('r', 20)")
    b.execute("ROLLBACK")
    err2 = try_all(a, "UPDATE t SET n = 1000 WHERE id = 1", "COMMIT")
    if a.in_transaction:
        a.execute("ROLLBACK")
    ok(committed(path, "SELECT count(*) FROM t WHERE n = 1000") == [(0,)] and highest(path) == 9,
       "%s, shared cache, read_uncommitted: no write commits at a token another connection "
       "rolled back" % mode, (err, err2, highest(path)))
    ok(err is not None and "read_uncommitted" in err,
       "%s, shared cache, read_uncommitted: fence refuses and says why" % mode, err)
    a.close()
    b.close()


for mode in ("WAL", "DELETE"):
    case_guard_advance_then_fail(mode, True)
    case_guard_advance_then_fail(mode, False)
    case_shared_cache(mode)
    case_read_uncommitted(mode)
    case_memo_reset(mode)
    case_memo_savepoint(mode)
    case_memo_write_savepoint(mode)
    case_released_marks(mode)
    case_other_connection(mode)
    case_other_process(mode)
    case_hand_raise(mode)
    case_reset(mode)
    for how in ("rollback", "savepoint", "statement", "undo"):
        case_rollback(mode, how)
    case_backup(mode, False)
    case_backup(mode, True)

shutil.rmtree(work, ignore_errors=True)
sys.exit(report.finish("sqlite_cache"))
