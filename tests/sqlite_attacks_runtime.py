#!/usr/bin/python3
"""tests/sqlite_attacks_runtime.py: runtime attacks on the SQLite fence.

Each case attacks fence at run time rather than through its guard design
(tests/sqlite_runtime.c covers what needs a C host: allocation failures,
loading twice, sqlite3_close_v2), and then checks the invariant on what
committed, read back through a fresh connection without the extension:

  * name shadowing: TEMP and attached tables named fence_txn, fence_held and
    fence_tokens, and a main table named fence_held, must not displace
    fence's own objects (a fence_check that "accepts" while holding nothing,
    a connection that cannot close);
  * recursion: a trigger on fence_tokens that writes a protected table must
    fail with a clear error, not recurse until the stack runs out;
  * fence_current on a connection opened before fence_tokens existed, and
    under another connection's EXCLUSIVE lock (a real SQLITE_BUSY, never
    NULL, never "not an error");
  * a failed single-row INSERT that called fence_check twice keeps nothing;
  * two connections and two processes racing stale and fresh tokens; shared
    cache mode; sqlite3_deserialize; VACUUM INTO.

Usage: /usr/bin/python3 tests/sqlite_attacks_runtime.py [EXTENSION]
Prints "ok - ..." / "not ok - ..." per assertion; exits 1 if any failed.
"""
import os
import subprocess
import sqlite3
import sys
import tempfile

import attacklib as lib

if len(sys.argv) > 1:
    lib.EXTENSION = sys.argv[1]
EXTENSION = lib.EXTENSION
check = lib.Checks("sqlite runtime attack")
ok = check.ok


def connect(path, load=True, **kw):
    return lib.connect(path, load, timeout=kw.pop("timeout", 0), **kw)


def error_of(conn, sql, params=()):
    """The exception sql raises, or None."""
    try:
        conn.execute(sql, params).fetchall()
    except sqlite3.Error as e:
        return e
    return None


def committed(path, sql, params=()):
    """What the file holds, read without the extension."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def highest(path, resource):
    rows = committed(path, "SELECT token FROM fence_tokens WHERE resource = ?", (resource,))
    return rows[0][0] if rows else None


def fresh(tmp, name):
    path = os.path.join(tmp, name)
    for suffix in ("", "-journal", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


def protected(path, start=10):
    """t(id, tok, v) protected on resource r, at start, one row."""
    conn = connect(path)
    conn.executescript(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, tok INTEGER, v TEXT);"
        "SELECT fence_protect('t', 'tok', 'r');"
        f"INSERT INTO t(id, tok, v) VALUES (1, {start}, 'base');")
    conn.close()


# ---------------------------------------------------------------------------
# Name shadowing
# ---------------------------------------------------------------------------

def shadowing(tmp):
    path = fresh(tmp, "shadow.db")
    protected(path)

    # A TEMP table fence_txn took the enlisting statement: fence_check
    # "accepted" while the transaction held nothing.
    conn = connect(path)
    conn.execute("CREATE TEMP TABLE fence_txn(x)")
    conn.execute("BEGIN")
    conn.execute("SELECT fence_check('r', 20)")
    held = conn.execute("SELECT resource, token FROM fence_held").fetchall()
    ok(held == [("r", 20)], "a TEMP table fence_txn: fence_check still holds its fence", held)
    e = error_of(conn, "UPDATE t SET v = 'fenced at 20' WHERE id = 1")
    ok(e is None, "a TEMP table fence_txn: the fenced UPDATE passes its guard", e)
    conn.execute("COMMIT")
    ok(committed(path, "SELECT v FROM t WHERE id = 1") == [("fenced at 20",)]
       and highest(path, "r") == 20,
       "a TEMP table fence_txn: the fenced write and the token 20 committed together")
    conn.execute("BEGIN")
    conn.execute("SAVEPOINT a")
    conn.execute("SELECT fence_check('r', 30)")
    conn.execute("ROLLBACK TO a")
    e = error_of(conn, "UPDATE t SET v = 'unfenced' WHERE id = 1")
    ok(e is not None and "fencing token required" in str(e),
       "a TEMP table fence_txn: a fence undone by ROLLBACK TO is not held", e)
    conn.execute("COMMIT")
    ok(committed(path, "SELECT v FROM t WHERE id = 1") == [("fenced at 20",)],
       "a TEMP table fence_txn: no unfenced write committed")
    ok(conn.execute("SELECT count(*) FROM temp.fence_txn").fetchone() == (0,),
       "a TEMP table fence_txn is left alone")
    conn.close()

    # TEMP and attached tables named fence_tokens and fence_held are not ours.
    other = fresh(tmp, "shadow-other.db")
    setup = sqlite3.connect(other)
    setup.executescript(
        "CREATE TABLE fence_tokens(resource TEXT PRIMARY KEY, token INTEGER, updated_at TEXT);"
        "INSERT INTO fence_tokens VALUES ('r', 1000, 'x');"
        "CREATE TABLE fence_held(resource TEXT, token INTEGER);"
        "CREATE TABLE fence_txn(x);")
    setup.close()
    conn = connect(path)
    conn.execute("ATTACH ? AS aux", (other,))
    conn.execute("CREATE TEMP TABLE fence_tokens(resource TEXT, token INTEGER, updated_at TEXT)")
    conn.execute("INSERT INTO temp.fence_tokens VALUES ('r', 1, 'x')")
    conn.execute("CREATE TEMP TABLE fence_held(resource TEXT, token INTEGER)")
    ok(conn.execute("SELECT fence_current('r')").fetchone() == (20,),
       "TEMP and attached fence_tokens: fence_current reads main's")
    e = error_of(conn, "SELECT fence_check('r', 15)")
    ok(e is not None and "stale fencing token" in str(e),
       "TEMP and attached fence_tokens: a stale token is still stale", e)
    conn.execute("BEGIN")
    conn.execute("SELECT fence_check('r', 25)")
    e = error_of(conn, "UPDATE t SET v = 'fenced at 25' WHERE id = 1")
    ok(e is None, "TEMP and attached fence_held: the guard sees the fence", e)
    conn.execute("COMMIT")
    ok(highest(path, "r") == 25 and committed(other, "SELECT token FROM fence_tokens") == [(1000,)],
       "TEMP and attached fence_tokens: only main's fence_tokens moved")
    ok(conn.execute("SELECT token FROM temp.fence_tokens").fetchall() == [(1,)],
       "TEMP fence_tokens: untouched")
    conn.close()

    # A table named fence_held in main hides the virtual table; fence must
    # still work and the connection must still close (no statement left).
    conn = connect(path)
    conn.execute("CREATE TABLE fence_held(resource TEXT, token INTEGER)")
    conn.close()
    conn = connect(path)
    conn.execute("BEGIN")
    e = error_of(conn, "SELECT fence_check('r', 26)")
    if e is None:
        e = error_of(conn, "UPDATE t SET v = 'fenced at 26' WHERE id = 1")
        ok(e is None, "a main table fence_held: a fenced write passes", e)
        conn.execute("COMMIT")
        ok(highest(path, "r") == 26, "a main table fence_held: the token committed")
    else:
        conn.execute("ROLLBACK")
        ok("fence_held" in str(e), "a main table fence_held: refused with a message naming it", e)
    e = error_of(conn, "UPDATE t SET v = 'unfenced' WHERE id = 1")
    ok(e is not None, "a main table fence_held: an unfenced write is refused", e)
    try:
        conn.close()
        closed = None
    except sqlite3.Error as ex:
        closed = ex
    ok(closed is None, "a main table fence_held: the connection closes", closed)
    ok(committed(path, "SELECT count(*) FROM t WHERE v = 'unfenced'") == [(0,)],
       "name shadowing: no unfenced write committed")
    # the same check through a C-level close that reports BUSY
    code = ("import sqlite3,sys\nc=sqlite3.connect(sys.argv[1]);c.enable_load_extension(True)\n"
            "c.load_extension(sys.argv[2])\n"
            "try:\n c.execute('SELECT fence_current(\\'r\\')').fetchall()\n"
            "except sqlite3.Error as e:\n print(e)\n"
            "c.close();print('closed')")
    out = subprocess.run([sys.executable, "-c", code, path, EXTENSION],
                         capture_output=True, text=True, timeout=60)
    ok(out.returncode == 0 and "closed" in out.stdout,
       "a main table fence_held: a process that used fence closes cleanly", out.stderr[-400:])


# ---------------------------------------------------------------------------
# Recursion through a trigger on fence_tokens
# ---------------------------------------------------------------------------

def recursion(tmp):
    path = fresh(tmp, "recursion.db")
    protected(path)
    conn = connect(path)
    conn.execute("CREATE TABLE audit(resource TEXT, token INTEGER)")
    conn.execute("CREATE TRIGGER tok_up AFTER UPDATE ON fence_tokens BEGIN "
                 "INSERT INTO t(tok, v) VALUES (new.token + 1, 'from the trigger'); END")
    conn.execute("CREATE TRIGGER tok_audit AFTER UPDATE ON fence_tokens BEGIN "
                 "INSERT INTO audit VALUES (new.resource, new.token); END")
    conn.close()
    # in a child process: the old code dies of a stack overflow (SIGSEGV)
    code = ("import sqlite3,sys;c=sqlite3.connect(sys.argv[1],isolation_level=None);"
            "c.enable_load_extension(True);c.load_extension(sys.argv[2]);\n"
            "try:\n c.execute('INSERT INTO t(tok, v) VALUES (20, \\'x\\')')\n"
            " print('no error')\n"
            "except sqlite3.Error as e:\n print('error:', e)\n")
    out = subprocess.run([sys.executable, "-c", code, path, EXTENSION],
                         capture_output=True, text=True, timeout=120)
    ok(out.returncode == 0, "a trigger on fence_tokens writing a protected table: no crash",
       f"exit status {out.returncode} {out.stderr[-300:]}")
    ok("error:" in out.stdout and "fence_tokens" in out.stdout and "re-enter" in out.stdout,
       "a trigger on fence_tokens writing a protected table: a clear error", out.stdout)
    ok(highest(path, "r") == 10 and committed(path, "SELECT count(*) FROM t") == [(1,)]
       and committed(path, "SELECT count(*) FROM audit") == [(0,)],
       "a trigger on fence_tokens writing a protected table: nothing committed")
    # a trigger on fence_tokens that writes an ordinary table still works
    conn = connect(path)
    conn.execute("DROP TRIGGER tok_up")
    conn.execute("INSERT INTO t(tok, v) VALUES (20, 'at 20')")
    ok(committed(path, "SELECT resource, token FROM audit") == [("r", 20)] and highest(path, "r") == 20,
       "a trigger on fence_tokens writing an ordinary table runs")
    conn.close()


# ---------------------------------------------------------------------------
# fence_current
# ---------------------------------------------------------------------------

def current(tmp):
    path = fresh(tmp, "current.db")
    a = connect(path)
    ok(a.execute("SELECT fence_current('r')").fetchone() == (None,),
       "fence_current before fence_tokens exists is NULL")
    b = connect(path)
    b.execute("SELECT fence_check('r', 31)")
    ok(a.execute("SELECT fence_current('r')").fetchone() == (31,),
       "fence_current on a connection opened before another created fence_tokens",
       a.execute("SELECT fence_current('r')").fetchone())
    b.execute("SELECT fence_check('s', 5)")
    b.execute("BEGIN EXCLUSIVE")
    for resource in ("s", "never"):
        try:
            got = a.execute("SELECT fence_current(?)", (resource,)).fetchone()
            ok(False, f"fence_current('{resource}') under another connection's EXCLUSIVE lock "
               "raises SQLITE_BUSY", f"returned {got}")
        except sqlite3.OperationalError as e:
            ok("locked" in str(e) and "not an error" not in str(e)
               and getattr(e, "sqlite_errorcode", sqlite3.SQLITE_BUSY) & 0xff == sqlite3.SQLITE_BUSY,
               f"fence_current('{resource}') under another connection's EXCLUSIVE lock raises "
               "SQLITE_BUSY with a real message", e)
    b.execute("ROLLBACK")
    ok(a.execute("SELECT fence_current('s')").fetchone() == (5,),
       "fence_current after the lock is gone")
    # a fresh connection under the lock, whose schema is not even loaded yet
    b.execute("BEGIN EXCLUSIVE")
    try:
        c = connect(path)
        e = error_of(c, "SELECT fence_current('s')")
    except sqlite3.OperationalError as load_error:
        c, e = None, load_error	# SQLite 3.53 reads the schema at load: the load says "locked"
    ok(e is not None and "locked" in str(e),
       "fence_current on a new connection under the lock (or, on newer SQLite, its load) says locked", e)
    b.execute("ROLLBACK")
    a.close()
    b.close()
    if c is not None:
        c.close()


# ---------------------------------------------------------------------------
# A failed INSERT keeps no advance
# ---------------------------------------------------------------------------

def failed_insert(tmp):
    path = fresh(tmp, "failed-insert.db")
    conn = connect(path)
    conn.execute("CREATE TABLE log(a, b)")
    conn.execute("SELECT fence_check('r', 10)")
    conn.execute("BEGIN")
    e = error_of(conn, "INSERT INTO log VALUES (fence_check('r', 40), fence_check('r', 'x'))")
    ok(e is not None and "invalid fencing" in str(e), "the INSERT with an invalid second token fails", e)
    ok(conn.execute("SELECT fence_current('r')").fetchone() == (10,),
       "a failed single-row INSERT: the first fence_check's advance is undone",
       conn.execute("SELECT fence_current('r')").fetchone())
    ok(conn.execute("SELECT * FROM fence_held WHERE resource = 'r'").fetchall() == [],
       "a failed single-row INSERT: the transaction holds nothing of it",
       conn.execute("SELECT * FROM fence_held").fetchall())
    e = error_of(conn, "INSERT INTO log VALUES (fence_check('q', 7), fence_check('r', 5))")
    ok(e is not None and "stale" in str(e), "the INSERT with a stale second token fails", e)
    conn.execute("COMMIT")
    ok(highest(path, "r") == 10 and highest(path, "q") is None
       and committed(path, "SELECT count(*) FROM log") == [(0,)],
       "a failed single-row INSERT: nothing of it committed",
       (highest(path, "r"), highest(path, "q")))
    # a successful one keeps both, and a failed one after it keeps the first
    conn.execute("BEGIN")
    conn.execute("INSERT INTO log VALUES (fence_check('r', 40), fence_check('q', 3))")
    e = error_of(conn, "INSERT INTO log VALUES (fence_check('r', 50), fence_check('q', 1))")
    conn.execute("COMMIT")
    ok(highest(path, "r") == 40 and highest(path, "q") == 3
       and committed(path, "SELECT a, b FROM log") == [(40, 3)],
       "a good INSERT then a failed one: only the good one committed",
       (highest(path, "r"), highest(path, "q")))
    conn.close()


# ---------------------------------------------------------------------------
# Two connections, two processes
# ---------------------------------------------------------------------------

ZOMBIE = r"""
import sqlite3, sys
path, ext, token, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
c = sqlite3.connect(path, isolation_level=None, timeout=10)
c.enable_load_extension(True)
c.load_extension(ext)
if mode == "wal":
    c.execute("PRAGMA journal_mode=WAL")
done = 0
for i in range(60):
    try:
        c.execute("BEGIN IMMEDIATE")
        c.execute("SELECT fence_check('r', ?)", (token,))
        c.execute("INSERT INTO w(tok, who) VALUES (?, ?)", (token, token))
        c.execute("COMMIT")
        done += 1
    except sqlite3.Error:
        if c.in_transaction:
            c.execute("ROLLBACK")
    token += 2
print(done)
"""


def processes(tmp):
    for mode in ("wal", "delete"):
        path = fresh(tmp, f"procs-{mode}.db")
        conn = connect(path)
        conn.execute(f"PRAGMA journal_mode={mode}")
        conn.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, tok INTEGER, who INTEGER)")
        conn.close()
        # two writers: one with even tokens, one with odd, both rising; each
        # commit's token must be above every earlier commit's
        procs = [subprocess.Popen([sys.executable, "-c", ZOMBIE, path, EXTENSION, str(start), mode],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for start in (1, 2)]
        outs = [p.communicate(timeout=300) for p in procs]
        rows = committed(path, "SELECT tok FROM w ORDER BY id")
        toks = [r[0] for r in rows]
        ok(all(p.returncode == 0 for p in procs) and toks == sorted(toks) and len(set(toks)) == len(toks)
           and (not toks or highest(path, "r") == toks[-1]),
           f"two processes ({mode} journal): committed tokens rise in commit order "
           f"({len(toks)} commits)", [o[1][-300:] for o in outs] + [toks[:20]])


def two_connections(tmp):
    path = fresh(tmp, "two.db")
    protected(path)
    a, b = connect(path, timeout=0), connect(path, timeout=0)
    a.execute("BEGIN")
    a.execute("SELECT fence_check('r', 20)")
    e = error_of(b, "SELECT fence_check('r', 30)")
    ok(e is not None and "locked" in str(e), "while A holds r at 20, B cannot advance it", e)
    a.execute("UPDATE t SET v = 'A at 20' WHERE id = 1")
    a.execute("COMMIT")
    b.execute("BEGIN")
    b.execute("SELECT fence_check('r', 30)")
    b.execute("UPDATE t SET v = 'B at 30' WHERE id = 1")
    b.execute("COMMIT")
    e = error_of(a, "INSERT INTO t(tok, v) VALUES (20, 'A again at 20')")
    ok(e is not None and "stale fencing token" in str(e), "A's token 20 is stale after B's 30", e)
    ok(committed(path, "SELECT v FROM t ORDER BY id") == [("B at 30",)] and highest(path, "r") == 30,
       "two connections: only the newer holder's write stands")
    a.close()
    b.close()


# ---------------------------------------------------------------------------
# Shared cache, deserialize, VACUUM INTO
# ---------------------------------------------------------------------------

def shared_cache(tmp):
    uri = "file:fence_shared_cache_test?mode=memory&cache=shared"
    a = sqlite3.connect(uri, uri=True, isolation_level=None)
    b = sqlite3.connect(uri, uri=True, isolation_level=None)
    for c in (a, b):
        c.enable_load_extension(True)
        c.load_extension(EXTENSION)
    a.executescript("CREATE TABLE t(id INTEGER PRIMARY KEY, tok INTEGER, v TEXT);"
                    "SELECT fence_protect('t', 'tok', 'r');"
                    "INSERT INTO t(tok, v) VALUES (10, 'base');")
    a.execute("BEGIN")
    a.execute("SELECT fence_check('r', 20)")
    e = error_of(b, "SELECT fence_check('r', 30)")
    ok(e is not None, "shared cache: B cannot advance r while A's transaction holds it", e)
    e = error_of(b, "UPDATE t SET v = 'B unfenced'")
    ok(e is not None, "shared cache: B's unfenced write is refused (A's fence is not B's)", e)
    a.execute("COMMIT")
    e = error_of(b, "INSERT INTO t(tok, v) VALUES (15, 'B stale')")
    ok(e is not None and "stale" in str(e), "shared cache: B's stale token is refused", e)
    ok(b.execute("SELECT count(*) FROM t WHERE v IN ('B unfenced', 'B stale')").fetchone() == (0,)
       and b.execute("SELECT fence_current('r')").fetchone() == (20,),
       "shared cache: nothing of B's committed; r at 20")
    a.close()
    b.close()


def deserialize_and_vacuum(tmp):
    path = fresh(tmp, "image.db")
    protected(path)
    conn = connect(path)
    conn.execute("SELECT fence_check('r', 20)")
    if hasattr(conn, "serialize"):
        image = conn.serialize()
        mem = connect(":memory:")
        mem.deserialize(image)
        e = error_of(mem, "INSERT INTO t(tok, v) VALUES (15, 'stale into the image')")
        ok(e is not None and "stale" in str(e),
           "sqlite3_deserialize: the image's fence_tokens judges its protected table", e)
        e = error_of(mem, "UPDATE t SET v = 'unfenced in the image'")
        ok(e is not None, "sqlite3_deserialize: an unfenced write to the image is refused", e)
        ok(mem.execute("SELECT fence_current('r')").fetchone() == (20,),
           "sqlite3_deserialize: fence_current reads the image")
        mem.execute("INSERT INTO t(tok, v) VALUES (25, 'fresh into the image')")
        ok(mem.execute("SELECT fence_current('r')").fetchone() == (25,),
           "sqlite3_deserialize: a fresh token advances the image's fence")
        mem.close()
    else:
        ok(True, "sqlite3_deserialize: skipped (this Python has no Connection.deserialize)")
    copy = fresh(tmp, "vacuumed.db")
    conn.execute("VACUUM INTO ?", (copy,))
    conn.close()
    c2 = connect(copy)
    e = error_of(c2, "INSERT INTO t(tok, v) VALUES (15, 'stale into the copy')")
    ok(e is not None and "stale" in str(e), "VACUUM INTO: the copy keeps the fence and its guard", e)
    ok(c2.execute("SELECT fence_current('r')").fetchone() == (20,), "VACUUM INTO: the copy's highest is 20")
    c2.close()
    ok(committed(copy, "SELECT count(*) FROM t WHERE v LIKE 'stale%'") == [(0,)],
       "VACUUM INTO: nothing stale committed to the copy")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for case in (shadowing, recursion, current, failed_insert, two_connections, processes,
                     shared_cache, deserialize_and_vacuum):
            try:
                case(tmp)
            except Exception as e:  # a case that dies is a failure, not a crash of the file
                ok(False, f"{case.__name__} ran to its end", repr(e))
    return check.status()


if __name__ == "__main__":
    sys.exit(main())
