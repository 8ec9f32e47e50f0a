#!/usr/bin/python3
"""tests/sqlite_attacks_review.py: findings of an adversarial review (issue 11).

Each case repeats an attack found by reading only the docs, then checks what
committed through a fresh connection without the extension:

  * a fence_tokens (or fence_guards) that fence did not create, with other
    types or constraints (a CSV import makes every column TEXT), must be
    refused with a message that says how to repair it, and the repair it
    describes must work.

Usage: /usr/bin/python3 tests/sqlite_attacks_review.py [EXTENSION]
Prints "ok - ..." / "not ok - ..." per assertion; exits 1 if any failed.
"""
import os
import sqlite3
import subprocess
import sys
import tempfile

import attacklib as lib

# the child processes of the authorizer cases name it in FENCE_TEST_EXTENSION
lib.EXTENSION = os.environ.get("FENCE_TEST_EXTENSION") or (
    sys.argv[1] if len(sys.argv) > 1 else lib.EXTENSION)
EXTENSION = lib.EXTENSION
check = lib.Checks("sqlite review attack")
ok = check.ok


def connect(path, load=True):
    return lib.connect(path, load, timeout=0)


def attempt(conn, sql):
    """(rows, None) or (None, the exception)."""
    try:
        return conn.execute(sql).fetchall(), None
    except sqlite3.Error as e:
        return None, e


def committed(path, sql, params=()):
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


def counter(path):
    """counter(id, n, tok) protected at resource r, highest 20."""
    conn = connect(path)
    conn.executescript(
        "CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER, tok INTEGER);"
        "SELECT fence_protect('counter', 'tok', 'r');"
        "INSERT INTO counter VALUES (1, 0, 20);")
    conn.close()


# ---------------------------------------------------------------------------
# B. A fence_tokens or fence_guards that fence did not create
# ---------------------------------------------------------------------------

FENCE_TOKENS_DDL = (
    "CREATE TABLE fence_tokens(resource TEXT PRIMARY KEY NOT NULL, "
    "token INTEGER NOT NULL CHECK (typeof(token) = 'integer' AND token >= 0), "
    "updated_at TEXT NOT NULL) WITHOUT ROWID")

FOREIGN_TOKENS = [
    ("TEXT token (the review's case)",
     "CREATE TABLE fence_tokens(resource TEXT PRIMARY KEY, token TEXT, updated_at TEXT)"),
    ("a NOCASE resource",
     FENCE_TOKENS_DDL.replace("resource TEXT PRIMARY KEY", "resource TEXT COLLATE NOCASE PRIMARY KEY")),
    ("no CHECK on token",
     FENCE_TOKENS_DDL.replace(" CHECK (typeof(token) = 'integer' AND token >= 0)", "")),
    ("a rowid table", FENCE_TOKENS_DDL.replace(" WITHOUT ROWID", "")),
    ("an extra column", FENCE_TOKENS_DDL.replace("updated_at TEXT NOT NULL)",
                                                 "updated_at TEXT NOT NULL, note TEXT)")),
]


def foreign_tokens_case(tmp, label, ddl, n):
    # fence_protect writes no fence_tokens: the table can appear after it
    path = fresh(tmp, f"foreign{n}.db")
    conn = connect(path)
    conn.execute("CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER, tok BIGINT)")
    conn.execute("SELECT fence_protect('counter', 'tok', 'counter-lock')")
    conn.close()
    plain = sqlite3.connect(path, isolation_level=None)
    plain.execute(ddl)   # before fence's first use of fence_tokens
    plain.close()
    conn = connect(path)
    attempt(conn, "INSERT INTO counter VALUES (1, 0, 9)")
    attempt(conn, "UPDATE counter SET n = 1, tok = 10 WHERE id = 1")
    rows, e = attempt(conn, "UPDATE counter SET n = 666, tok = 9 WHERE id = 1")
    ok(committed(path, "SELECT count(*) FROM counter WHERE n = 666") == [(0,)],
       f"a fence_tokens with {label}: the stale UPDATE does not commit",
       committed(path, "SELECT * FROM counter"))
    rows, e = attempt(conn, "SELECT fence_check('counter-lock', 11)")
    ok(e is not None and "fence_tokens" in str(e) and "is not the table fence makes" in str(e),
       f"a fence_tokens with {label}: fence refuses it and says why", e)
    rows, e2 = attempt(conn, "SELECT fence_current('counter-lock')")
    ok(e2 is not None and "fence_tokens" in str(e2),
       f"a fence_tokens with {label}: fence_current refuses it too", e2)
    conn.execute("CREATE TABLE other(id INTEGER PRIMARY KEY, tok INTEGER)")
    rows, e3 = attempt(conn, "SELECT fence_protect('other', 'tok', 'x')")
    ok(e3 is not None and "is not the table fence makes" in str(e3)
       and committed(path, "SELECT count(*) FROM sqlite_master WHERE tbl_name = 'other' "
                           "AND type = 'trigger'") == [(0,)],
       f"a fence_tokens with {label}: fence_protect refuses it at once", e3)
    conn.close()
    return path, e


def foreign_tokens(tmp):
    for n, (label, ddl) in enumerate(FOREIGN_TOKENS):
        path, e = foreign_tokens_case(tmp, label, ddl, n)

    # a CSV dump brought back with the shell's .import: every column TEXT
    path = fresh(tmp, "imported.db")
    csv = os.path.join(tmp, "tokens.csv")
    with open(csv, "w") as f:
        f.write("resource,token,updated_at\ncounter-lock,40,2026-11-23 10:00:00.000\n")
    conn = connect(path)
    conn.execute("CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER, tok INTEGER)")
    conn.execute("SELECT fence_protect('counter', 'tok', 'counter-lock')")
    conn.close()
    shell = subprocess.run(["sqlite3", path, f".import --csv {csv} fence_tokens"],
                           capture_output=True, text=True)
    ok(shell.returncode == 0, "the shell's .import makes a fence_tokens from a CSV", shell.stderr)
    conn = connect(path)
    rows, e = attempt(conn, "INSERT INTO counter VALUES (1, 666, 39)")
    ok(e is not None and committed(path, "SELECT count(*) FROM counter") == [(0,)],
       "an imported fence_tokens (all TEXT): a write under it is refused, nothing committed", e)
    msg = str(e)
    ok("fence_tokens" in msg and "rename it" in msg and len(msg) <= 200,
       "an imported fence_tokens: the message says what to do, in at most 200 bytes", msg)

    # the repair docs/sqlite-guarantees.md describes keeps the imported highest, as an integer
    conn.executescript(
        "ALTER TABLE fence_tokens RENAME TO fence_tokens_old;"
        f"{FENCE_TOKENS_DDL};"
        "INSERT INTO fence_tokens(resource, token, updated_at) "
        "SELECT resource, CAST(token AS INTEGER), updated_at FROM fence_tokens_old;"
        "DROP TABLE fence_tokens_old;")
    rows, e = attempt(conn, "INSERT INTO counter VALUES (1, 666, 39)")
    ok(e is not None and "stale fencing token" in str(e),
       "after the repair: a token below the imported highest 40 is stale", e)
    rows, e = attempt(conn, "INSERT INTO counter VALUES (1, 1, 41)")
    ok(e is None and committed(path, "SELECT n, tok FROM counter") == [(1, 41)]
       and committed(path, "SELECT token, typeof(token) FROM fence_tokens") == [(41, "integer")],
       "after the repair: a fresh token commits and the highest is an integer", e)
    conn.close()

    # a fence_tokens that fence made, dumped and restored, is fence's
    path = fresh(tmp, "own.db")
    counter(path)
    dump = list(sqlite3.connect(path).iterdump())
    copy = fresh(tmp, "restored.db")
    c = sqlite3.connect(copy)
    c.executescript("\n".join(dump))
    c.close()
    conn = connect(copy)
    rows, e = attempt(conn, "UPDATE counter SET n = 666, tok = 1 WHERE id = 1")
    ok(e is not None and "stale fencing token" in str(e),
       "a dumped and restored fence_tokens is fence's own: stale is stale", e)
    rows, e = attempt(conn, "UPDATE counter SET n = 2, tok = 21 WHERE id = 1")
    ok(e is None and committed(copy, "SELECT n, tok FROM counter") == [(2, 21)],
       "a dumped and restored fence_tokens is fence's own: a fresh token commits", e)
    conn.close()

    # fence_tokens replaced by another shape while a connection has cached statements
    path = fresh(tmp, "swapped.db")
    counter(path)
    conn = connect(path)
    ok(conn.execute("SELECT fence_current('r')").fetchone() == (20,), "before the swap: highest 20")
    other = sqlite3.connect(path, isolation_level=None)
    other.executescript(
        "DROP TABLE fence_tokens;"
        "CREATE TABLE fence_tokens(resource TEXT PRIMARY KEY, token TEXT, updated_at TEXT);"
        "INSERT INTO fence_tokens VALUES ('r', '20', 'now');")
    other.close()
    rows, e = attempt(conn, "UPDATE counter SET n = 666, tok = 3 WHERE id = 1")
    ok(e is not None and committed(path, "SELECT n FROM counter") == [(0,)],
       "fence_tokens swapped for another shape under a connection: its next write is refused", e)
    conn.close()


def foreign_guards(tmp):
    path = fresh(tmp, "guards.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE fence_guards(id TEXT PRIMARY KEY, resource TEXT, keyed TEXT, uniques TEXT)")
    conn.close()
    conn = connect(path)
    conn.execute("CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER, tok INTEGER)")
    rows, e = attempt(conn, "SELECT fence_protect('counter', 'tok', 'r')")
    ok(e is not None and "fence_guards" in str(e) and "is not the table fence makes" in str(e),
       "a fence_guards that fence did not create: fence_protect refuses it and says why", e)
    ok(committed(path, "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'") == [(0,)],
       "a fence_guards that fence did not create: no guard was half made")
    conn.close()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for case in (foreign_tokens, foreign_guards):
            try:
                case(tmp)
            except Exception as e:  # a case that dies is a failure, not a crash of the file
                ok(False, f"{case.__name__} ran to its end", repr(e))
    return check.status()


if __name__ == "__main__":
    sys.exit(main())
