#!/usr/bin/python3
"""tests/sqlite_write_pattern.py: the documented write pattern under contention.

Issue 27 item 6. An equal accept takes no write lock, ever (SPEC: transactions
fenced at the same token do not wait for each other), whether the connection
remembers the resource or sees it for the first time; so the write pattern is

    BEGIN IMMEDIATE; SELECT fence_check(r, t); UPDATE ...; COMMIT

which waits the busy timeout for the write lock at BEGIN, like the same
transaction without the check. Asserted on what committed:

  1. rollback-journal mode: two connections that each see r for the first
     time check it at the same token inside BEGIN: neither waits for the
     other, and both commit;
  2. two processes, each many times BEGIN IMMEDIATE, check, UPDATE a counter,
     COMMIT at one token, in WAL and rollback-journal mode: every
     transaction commits (none ends in SQLITE_BUSY), and the counter is
     the sum;
  3. a deferred BEGIN whose check read main cannot wait to upgrade (SQLite
     never does): under a held write lock its UPDATE fails with SQLITE_BUSY
     and commits nothing, which is why the pattern is BEGIN IMMEDIATE.

Usage: /usr/bin/python3 tests/sqlite_write_pattern.py
"""
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.path.join(ROOT, "sqlite_ext", "fence")
failures = 0
ROUNDS = 150


def ok(cond, what, detail=""):
    global failures
    print(("ok - " if cond else "not ok - ") + "sqlite write pattern: " + what)
    if not cond:
        failures += 1
        if detail != "":
            print("#   %r" % (detail,))


def connect(path, timeout=5.0, mode=None):
    c = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(EXTENSION)
    if mode:
        c.execute("PRAGMA journal_mode=%s" % mode).fetchone()
    return c


def setup(path, mode):
    c = connect(path, mode=mode)
    c.execute("CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    c.execute("INSERT INTO counter VALUES (1, 0)")
    c.execute("SELECT fence_check('r', 5)").fetchone()
    c.close()


def first_seen_equal(d):
    path = os.path.join(d, "first.db")
    setup(path, "delete")
    a = connect(path, timeout=0.3)
    b = connect(path, timeout=0.3)
    a.execute("BEGIN")
    ta = a.execute("SELECT fence_check('r', 5)").fetchone()[0]
    t0 = time.monotonic()
    b.execute("BEGIN")
    try:
        tb = b.execute("SELECT fence_check('r', 5)").fetchone()[0]
        b.execute("COMMIT")
    except sqlite3.Error as e:
        tb = str(e)
        b.execute("ROLLBACK")
    waited = time.monotonic() - t0
    a.execute("COMMIT")
    ok(ta == 5 and tb == 5 and waited < 0.2,
       "rollback journal: two transactions at the same token, each seeing the resource "
       "for the first time, do not block each other", (ta, tb, round(waited, 3)))
    a.close()
    b.close()


WORKER = r"""
import sqlite3, sys
path, ext, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = sqlite3.connect(path, timeout=30, isolation_level=None)
c.enable_load_extension(True)
c.load_extension(ext)
busy = 0
done = 0
for i in range(rounds):
    try:
        c.execute("BEGIN IMMEDIATE")
        c.execute("SELECT fence_check('r', 5)").fetchone()
        c.execute("UPDATE counter SET n = n + 1 WHERE id = 1")
        c.execute("COMMIT")
        done += 1
    except sqlite3.OperationalError as e:
        busy += 1
        if c.in_transaction:
            c.execute("ROLLBACK")
print(done, busy)
"""


def two_processes(d, mode):
    path = os.path.join(d, "two-%s.db" % mode)
    setup(path, mode)
    c = connect(path)
    c.execute("SELECT fence_protect('counter', NULL, 'r')").fetchone()
    c.close()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, path, EXTENSION, str(ROUNDS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    res = [tuple(int(x) for x in o[0].split()) if o[0].strip() else (0, -1) for o in outs]
    c = connect(path)
    n = c.execute("SELECT n FROM counter").fetchone()[0]
    cur = c.execute("SELECT fence_current('r')").fetchone()[0]
    c.close()
    ok(all(r == (ROUNDS, 0) for r in res) and n == 2 * ROUNDS and cur == 5,
       "%s: two processes, BEGIN IMMEDIATE; check; UPDATE of a protected table; COMMIT at "
       "one token: every transaction waits its turn and commits" % mode,
       (res, n, cur, [o[1][-300:] for o in outs]))


def deferred_cannot_wait(d):
    path = os.path.join(d, "deferred.db")
    setup(path, "wal")
    a = connect(path, timeout=0.3)
    b = connect(path, timeout=0.3)
    b.execute("BEGIN IMMEDIATE")
    b.execute("UPDATE counter SET n = n + 100")
    a.execute("BEGIN")
    a.execute("SELECT fence_check('r', 5)").fetchone()
    t0 = time.monotonic()
    try:
        a.execute("UPDATE counter SET n = n + 1")
        a.execute("COMMIT")
        err = None
    except sqlite3.OperationalError as e:
        err = str(e)
        a.execute("ROLLBACK")
    waited = time.monotonic() - t0
    b.execute("COMMIT")
    n = a.execute("SELECT n FROM counter").fetchone()[0]
    ok(err is not None and "locked" in err and n == 100,
       "a deferred BEGIN whose check read main gets SQLITE_BUSY on its UPDATE while another "
       "connection writes, and commits nothing (BEGIN IMMEDIATE is the pattern)",
       (err, n, round(waited, 3)))
    a.close()
    b.close()


def main():
    with tempfile.TemporaryDirectory() as d:
        first_seen_equal(d)
        for mode in ("wal", "delete"):
            two_processes(d, mode)
        deferred_cannot_wait(d)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
