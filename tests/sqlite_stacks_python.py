#!/usr/bin/python3
"""tests/sqlite_stacks_python.py: Python's sqlite3 in each of its transaction modes.

For each mode, the safe pattern that docs/stacks-sqlite.md gives for it, run
by two workers of one job, with leases from fence_acquire (the database's
own lock service) on a per-row protected table keyed by TEXT:

    jobs(name TEXT PRIMARY KEY, state TEXT, tok INTEGER)
    fence_protect('jobs', 'tok', 'job:', 'name')      -- row 'a' is resource 'job:a'

  1. the first worker takes the lease (300 ms) and writes: it commits;
  2. it pauses past its lease (the zombie);
  3. the second worker takes the lease (a greater token), checks it at once,
     and writes twice at its token (the second write changes nothing of the
     token): both commit;
  4. the zombie resumes and writes at its old token: refused.

Asserted on what committed: the row is the holder's second write at its
token, fence_tokens holds the holder's token. The modes:

  - legacy (the default, isolation_level ''): the token travels in the
    token column, so each statement is checked whatever transaction the
    module opens; commit() after each write;
  - isolation_level=None with BEGIN, and with BEGIN IMMEDIATE: fence_check at
    the start of the transaction, then an UPDATE without the token column;
  - Python 3.12's autocommit=False (emulated on 3.11: a BEGIN always open,
    re-opened after every commit and rollback): fence_acquire is called
    there, where the connection never leaves a transaction; a grant that
    the caller rolls back must not be granted again.

Usage: /usr/bin/python3 tests/sqlite_stacks_python.py
"""
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stacklib import Autocommit312, Report, committed, connect, error, scratch, tokens  # noqa: E402

report = Report("stacks python sqlite3:")
TTL = 300


def fresh():
    path = os.path.join(scratch("python"), "db")
    c = connect(path, isolation_level=None)
    c.execute("CREATE TABLE jobs(name TEXT PRIMARY KEY, state TEXT, tok INTEGER)")
    c.execute("SELECT fence_protect('jobs', 'tok', 'job:', 'name')")
    c.close()
    return path


class Legacy:
    """The default mode: the module BEGINs before INSERT/UPDATE/DELETE only."""
    name = "legacy isolation_level '' (the default)"

    def __init__(self, path):
        self.conn = connect(path)

    def acquire(self, holder):
        tok = self.conn.execute("SELECT fence_acquire('job:a', ?, ?)", (holder, TTL)).fetchone()[0]
        if tok is not None:
            self.conn.execute("SELECT fence_check('job:a', ?)", (tok,))
            self.conn.commit()
        return tok

    def write(self, tok, state):
        try:
            self.conn.execute(
                "INSERT INTO jobs VALUES ('a', ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET state = excluded.state, tok = excluded.tok",
                (state, tok))
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise


class Explicit:
    """isolation_level=None: the application writes BEGIN itself."""

    def __init__(self, path, begin):
        self.begin = begin
        self.name = "isolation_level=None, %s" % begin
        self.conn = connect(path, isolation_level=None)

    def acquire(self, holder):
        tok = self.conn.execute("SELECT fence_acquire('job:a', ?, ?)", (holder, TTL)).fetchone()[0]
        if tok is not None:
            self.conn.execute("SELECT fence_check('job:a', ?)", (tok,))
        return tok

    def write(self, tok, state):
        self.conn.execute(self.begin)
        try:
            self.conn.execute("SELECT fence_check('job:a', ?)", (tok,))
            if self.conn.execute("UPDATE jobs SET state = ?, tok = ? WHERE name = 'a'",
                                 (state, tok)).rowcount == 0:
                self.conn.execute("INSERT INTO jobs VALUES ('a', ?, ?)", (state, tok))
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise


class Pep249:
    """Python 3.12 autocommit=False: always inside a transaction."""
    name = "autocommit=False (Python 3.12, emulated)"

    def __init__(self, path):
        self.conn = Autocommit312(path)

    def acquire(self, holder):
        tok = self.conn.execute("SELECT fence_acquire('job:a', ?, ?)", (holder, TTL)).fetchone()[0]
        if tok is not None:
            self.conn.execute("SELECT fence_check('job:a', ?)", (tok,))
        self.conn.commit()
        return tok

    def write(self, tok, state):
        try:
            self.conn.execute("SELECT fence_check('job:a', ?)", (tok,))
            if self.conn.execute("UPDATE jobs SET state = ?, tok = ? WHERE name = 'a'",
                                 (state, tok)).rowcount == 0:
                self.conn.execute("INSERT INTO jobs VALUES ('a', ?, ?)", (state, tok))
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise


def scenario(make):
    path = fresh()
    zombie, holder = make(path), make(path)
    name = zombie.name
    e, tz = error(zombie.acquire, "worker-1")
    if not report.ok(e is None and isinstance(tz, int), "%s: fence_acquire gives a token" % name,
                     "%r" % (e or tz)):
        return
    e, _ = error(zombie.write, tz, "zombie-1")
    report.ok(e is None and committed(path, "SELECT state, tok FROM jobs") == [("zombie-1", tz)],
              "%s: the first holder's write at %d commits" % (name, tz), repr(e))
    time.sleep(TTL / 1000 * 1.3)            # the first holder pauses past its lease
    e, th = error(holder.acquire, "worker-2")
    if not report.ok(e is None and isinstance(th, int) and th > tz,
                     "%s: the next holder gets a greater token" % name, "%r after %r" % (e or th, tz)):
        return
    e1, _ = error(holder.write, th, "holder-1")
    e2, _ = error(holder.write, th, "holder-2")
    report.ok(e1 is None and e2 is None,
              "%s: the holder writes twice at its token %d" % (name, th), "%r %r" % (e1, e2))
    e, _ = error(zombie.write, tz, "zombie-2")
    report.ok(isinstance(e, sqlite3.IntegrityError) and "stale fencing token" in str(e),
              "%s: the zombie's write at %d is refused as stale" % (name, tz), repr(e))
    rows = committed(path, "SELECT state, tok FROM jobs")
    report.ok(rows == [("holder-2", th)] and tokens(path).get("job:a") == th,
              "%s: committed: the holder's second write at %d; fence_tokens %d" % (name, th, th),
              "rows %r, fence_tokens %r" % (rows, tokens(path)))


def rolled_back_grant():
    """autocommit=False: a grant whose transaction rolls back is not granted again."""
    path = fresh()
    a = Autocommit312(path)
    e, seen = error(lambda: a.execute("SELECT fence_acquire('job:a', 'worker-1', ?)",
                                      (TTL,)).fetchone()[0])
    a.rollback()
    if not report.ok(e is None and isinstance(seen, int),
                     "autocommit=False (Python 3.12, emulated): fence_acquire inside the open "
                     "transaction gives a token", repr(e or seen)):
        return
    time.sleep(TTL / 1000 * 1.3)
    b = connect(path, isolation_level=None)
    nxt = b.execute("SELECT fence_acquire('job:a', 'worker-2', ?)", (TTL,)).fetchone()[0]
    report.ok(isinstance(nxt, int) and nxt > seen,
              "autocommit=False (Python 3.12, emulated): after its caller rolls back, that token "
              "(%r) is never granted again (next grant %r)" % (seen, nxt))


def main():
    for make in (Legacy, lambda p: Explicit(p, "BEGIN"), lambda p: Explicit(p, "BEGIN IMMEDIATE"),
                 Pep249):
        scenario(make)
    rolled_back_grant()
    return report.finish("sqlite_stacks_python")


if __name__ == "__main__":
    sys.exit(main())
