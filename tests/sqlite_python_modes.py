#!/usr/bin/python3
"""tests/sqlite_python_modes.py: which Python sqlite3 patterns are fenced.

Python's sqlite3 module (3.11, the default isolation_level "") opens a
transaction only before INSERT, UPDATE, DELETE and REPLACE, never before a
SELECT. So the pattern

    conn.execute("SELECT fence_check(?, ?)", (resource, token))
    conn.execute("UPDATE accounts SET ...")     # an unprotected table
    conn.commit()

runs the check and the write in two transactions: the check commits on its
own, and a holder that pauses between them (GC, swap, a slow network) writes
after a newer holder with no error at all. Nothing inside the extension can
see that; the README leads with the patterns that are safe instead. This
test shows all three, asserting on what committed:

  1. default mode, unprotected table: the zombie's write lands after the
     newer holder's (the hazard, pinned so that it stays documented);
  2. isolation_level=None with an explicit BEGIN: the check holds the write
     lock until COMMIT, so the newer holder cannot commit in between, and a
     zombie that checks after it is refused;
  3. default mode, protected table (fence_protect): the write needs a fence
     in its own transaction, so the zombie's write is refused.

Usage: /usr/bin/python3 tests/sqlite_python_modes.py
"""
import os
import sqlite3
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.path.join(ROOT, "sqlite_ext", "fence")
failures = 0


def ok(cond, what, detail=""):
    global failures
    print(("ok - " if cond else "not ok - ") + "python sqlite3 modes: " + what)
    if not cond:
        failures += 1
        if detail:
            print("#   " + str(detail))


def connect(path, **kw):
    conn = sqlite3.connect(path, timeout=0, **kw)
    conn.enable_load_extension(True)
    conn.load_extension(EXTENSION)
    return conn


def setup(path, protect):
    conn = connect(path, isolation_level=None)
    conn.execute("CREATE TABLE accounts(id INTEGER PRIMARY KEY, balance INTEGER, "
                 "writer TEXT, tok INTEGER)")
    conn.execute("CREATE TABLE log(id INTEGER PRIMARY KEY, writer TEXT, tok INTEGER)")
    if protect:
        conn.execute("SELECT fence_protect('accounts', NULL, 'acct')")
    conn.execute("SELECT fence_check('acct', 1)")
    conn.execute("BEGIN")
    conn.execute("SELECT fence_check('acct', 1)")
    conn.execute("INSERT INTO accounts VALUES (1, 100, 'setup', 1)")
    conn.execute("COMMIT")
    conn.close()


def committed(path, sql):
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def newer_holder_writes(path, token):
    """The lock's next holder: fences at token and writes, in one transaction."""
    n = connect(path, isolation_level=None)
    try:
        n.execute("BEGIN")
        n.execute("SELECT fence_check('acct', ?)", (token,))
        n.execute("UPDATE accounts SET balance = 200, writer = 'new holder', tok = ? WHERE id = 1",
                  (token,))
        n.execute("INSERT INTO log(writer, tok) VALUES ('new holder', ?)", (token,))
        n.execute("COMMIT")
    finally:
        n.close()   # a failed holder gives up its locks (closing rolls back)


def default_mode_unprotected(tmp):
    path = os.path.join(tmp, "default.db")
    setup(path, protect=False)
    z = connect(path)   # isolation_level "" (the default)
    z.execute("SELECT fence_check('acct', 5)")
    ok(not z.in_transaction,
       "default mode: SELECT fence_check opens no transaction (the check has already committed)")
    newer_holder_writes(path, 6)          # while the zombie is paused
    z.execute("UPDATE accounts SET balance = 50, writer = 'zombie', tok = 5 WHERE id = 1")
    z.execute("INSERT INTO log(writer, tok) VALUES ('zombie', 5)")
    z.commit()
    z.close()
    rows = committed(path, "SELECT writer, tok FROM log ORDER BY id")
    ok(rows == [("new holder", 6), ("zombie", 5)]
       and committed(path, "SELECT writer FROM accounts") == [("zombie",)],
       "default mode, unprotected table: the zombie's write at 5 lands after the new "
       "holder's 6 (the unsafe pattern the README warns against)", rows)


def explicit_begin(tmp):
    path = os.path.join(tmp, "explicit.db")
    setup(path, protect=False)
    z = connect(path, isolation_level=None)
    z.execute("BEGIN")
    z.execute("SELECT fence_check('acct', 5)")
    ok(z.in_transaction, "explicit BEGIN: the check is part of the open transaction")
    try:
        newer_holder_writes(path, 6)
        blocked = None
    except sqlite3.OperationalError as e:
        blocked = e
    ok(blocked is not None and "locked" in str(blocked),
       "explicit BEGIN: the new holder cannot commit a higher token while the zombie's "
       "transaction holds 5", blocked)
    z.execute("UPDATE accounts SET balance = 50, writer = 'holder at 5', tok = 5 WHERE id = 1")
    z.execute("INSERT INTO log(writer, tok) VALUES ('holder at 5', 5)")
    z.execute("COMMIT")
    newer_holder_writes(path, 6)
    # the old holder, waking now, checks in its own transaction and is refused
    z.execute("BEGIN")
    try:
        z.execute("SELECT fence_check('acct', 5)")
        refused = None
    except sqlite3.IntegrityError as e:
        refused = e
    if refused is None:
        z.execute("UPDATE accounts SET balance = 50, writer = 'zombie', tok = 5 WHERE id = 1")
        z.execute("INSERT INTO log(writer, tok) VALUES ('zombie', 5)")
    z.execute("COMMIT" if refused is None else "ROLLBACK")
    z.close()
    ok(refused is not None and "stale fencing token" in str(refused),
       "explicit BEGIN: the zombie's check after the new holder's commit is refused", refused)
    rows = committed(path, "SELECT writer, tok FROM log ORDER BY id")
    toks = [r[1] for r in rows]
    ok(toks == sorted(toks) and committed(path, "SELECT writer FROM accounts") == [("new holder",)],
       "explicit BEGIN: tokens never decrease in commit order; the new holder's write stands", rows)


def default_mode_protected(tmp):
    path = os.path.join(tmp, "protected.db")
    setup(path, protect=True)
    z = connect(path)
    z.execute("SELECT fence_check('acct', 5)")
    newer_holder_writes(path, 6)
    try:
        z.execute("UPDATE accounts SET balance = 50, writer = 'zombie', tok = 5 WHERE id = 1")
        z.commit()
        refused = None
    except sqlite3.IntegrityError as e:
        refused = e
        z.rollback()
    z.close()
    ok(refused is not None and "fencing token required" in str(refused),
       "default mode, protected table: the zombie's UPDATE is refused", refused)
    ok(committed(path, "SELECT writer, tok FROM accounts") == [("new holder", 6)],
       "default mode, protected table: the new holder's write stands")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for case in (default_mode_unprotected, explicit_begin, default_mode_protected):
            try:
                case(tmp)
            except Exception as e:
                ok(False, f"{case.__name__} ran to its end", repr(e))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
