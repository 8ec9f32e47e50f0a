#!/usr/bin/python3
"""tests/sqlite_stacks_contention.py: the write pattern under contention, two processes.

A holder that has written at its token before (it remembers the accept)
runs a write while another process holds the write lock for a moment (an
unrelated writer):

  - BEGIN; UPDATE; COMMIT (no check, the control) waits on its busy
    timeout and commits;
  - BEGIN IMMEDIATE; SELECT fence_check(r, t); UPDATE; COMMIT, the
    documented write pattern, waits and commits the same way;
  - BEGIN; UPDATE protected SET tok = t; UPDATE; COMMIT (what a driver that
    says BEGIN itself runs: the protected write with its token first)
    waits and commits the same way;
  - BEGIN; SELECT fence_check(r, t); UPDATE; COMMIT, the pattern the README
    showed, gets SQLITE_BUSY at once on 95d2ea6: SQLite never makes a
    transaction that has read wait for the write lock, and fence_check
    reads. Asserted: it waits and commits, or fails having committed
    nothing; which one is printed.

And two transactions fenced at the same token (the highest) must not wait
for each other (the contract: they do not wait), in rollback-journal mode as
in WAL; on 95d2ea6 an equal accept on a connection that has not seen the
resource takes the write lock, and the second waits its whole busy timeout.

Each case runs in journal_mode=DELETE and WAL, with the two sides in
separate processes, and asserts on what committed.

Usage: /usr/bin/python3 tests/sqlite_stacks_contention.py
"""
import multiprocessing
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stacklib import Report, committed, connect, scratch, tokens  # noqa: E402

report = Report("stacks contention:")
HOLD = 1.0          # how long the other process holds the write lock
BUSY_MS = 3000      # every connection's busy timeout


def fresh(mode):
    path = os.path.join(scratch("contention-" + mode), "db")
    c = connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=%s" % mode)
    c.execute("CREATE TABLE jobs(id INTEGER PRIMARY KEY, state TEXT, writer TEXT)")
    c.execute("CREATE TABLE other(id INTEGER PRIMARY KEY, n INTEGER)")
    c.execute("INSERT INTO jobs VALUES (1, 'new', 'setup')")
    c.execute("INSERT INTO other VALUES (1, 0)")
    c.execute("CREATE TABLE ledger(id INTEGER PRIMARY KEY, n INTEGER, tok INTEGER)")
    c.execute("SELECT fence_protect('ledger', 'tok', 'job')")
    c.execute("INSERT INTO ledger VALUES (1, 0, 7)")
    c.execute("SELECT fence_check('job', 7)")
    c.close()
    return path


def other_writer(path, locked, done):
    """The unrelated writer: takes the write lock, holds it HOLD s, commits."""
    c = sqlite3.connect(path, isolation_level=None, timeout=BUSY_MS / 1000)
    c.execute("BEGIN IMMEDIATE")
    c.execute("UPDATE other SET n = n + 1")
    locked.set()
    time.sleep(HOLD)
    c.execute("COMMIT")
    c.close()
    done.set()


def holder(path, begin, check, result):
    """The holder at token 7, seen before on this connection; one transaction."""
    c = connect(path, isolation_level=None, timeout=BUSY_MS / 1000)
    c.execute("SELECT fence_check('job', 7)")     # an earlier write at its token
    result.put(("ready", None))
    sql = result.get_go()
    t0 = time.monotonic()
    try:
        c.execute(begin)
        if check == "fence_check":
            c.execute("SELECT fence_check('job', 7)").fetchall()
        elif check == "token column":
            c.execute("UPDATE ledger SET n = n + 1, tok = 7 WHERE id = 1")
        c.execute("UPDATE jobs SET state = 'done', writer = ? WHERE id = 1", (sql,))
        c.execute("COMMIT")
        err = None
    except sqlite3.Error as e:
        err = "%s (%s)" % (e, getattr(e, "sqlite_errorname", "?"))
        if c.in_transaction:
            c.execute("ROLLBACK")
    result.put(("end", (err, time.monotonic() - t0)))
    c.close()


class Channel:
    """Two queues: the holder reports, the test says go."""

    def __init__(self):
        self.up = multiprocessing.Queue()
        self.down = multiprocessing.Queue()

    def put(self, v):
        self.up.put(v)

    def get_go(self):
        return self.down.get(timeout=30)


def under_contention(mode, begin, check):
    path = fresh(mode)
    ch = Channel()
    label = begin + {None: "", "fence_check": "; SELECT fence_check",
                     "token column": "; UPDATE protected SET tok = 7 (first)"}[check]
    h = multiprocessing.Process(target=holder, args=(path, begin, check, ch))
    h.start()
    assert ch.up.get(timeout=30)[0] == "ready"
    locked, done = multiprocessing.Event(), multiprocessing.Event()
    w = multiprocessing.Process(target=other_writer, args=(path, locked, done))
    w.start()
    locked.wait(30)
    ch.down.put(label)
    kind, (err, elapsed) = ch.up.get(timeout=60)
    h.join(30)
    w.join(30)
    rows = committed(path, "SELECT state, writer FROM jobs")
    what = "%s: %s; UPDATE; COMMIT while another process holds the write lock %.1f s" % (
        mode, label, HOLD)
    waited = err is None and rows == [("done", label)] and elapsed >= HOLD * 0.5
    if begin == "BEGIN" and check == "fence_check":
        # A deferred transaction that reads first cannot wait for the write
        # lock: SQLite calls the busy handler only for a connection with no
        # read transaction (sqlite3BtreeBeginTrans). fence_check reads
        # fence_tokens, as any SELECT would, and an equal accept takes no write
        # lock (so that holders at one token do not wait for each other).
        # What must hold: nothing of it commits unless it waited its turn.
        busy = err is not None and "SQLITE_BUSY" in err and rows == [("new", "setup")]
        print("#   %s: %s after %.2f s" % (what, "waited and committed" if waited else err, elapsed))
        report.ok(waited or busy,
                  what + ": waits and commits, or fails with SQLITE_BUSY having committed nothing "
                  "(a transaction that reads first cannot wait for the write lock: use BEGIN IMMEDIATE)",
                  "error %r after %.2f s; committed %r" % (err, elapsed, rows))
        return
    report.ok(waited, what + ": waits on busy_timeout and commits",
              "error %r after %.2f s; committed %r" % (err, elapsed, rows))


def equal_peer(path, started, result):
    c = connect(path, isolation_level=None, timeout=BUSY_MS / 1000)
    started.wait(30)
    t0 = time.monotonic()
    try:
        c.execute("BEGIN")
        got = c.execute("SELECT fence_check('job', 7)").fetchall()
        c.execute("COMMIT")
        result.put((None, got, time.monotonic() - t0))
    except sqlite3.Error as e:
        result.put(("%s (%s)" % (e, getattr(e, "sqlite_errorname", "?")), None,
                    time.monotonic() - t0))
    c.close()


def same_token(mode):
    """Two transactions fenced at the highest token: neither waits for the other."""
    path = fresh(mode)
    a = connect(path, isolation_level=None, timeout=BUSY_MS / 1000)
    a.execute("BEGIN")
    first = a.execute("SELECT fence_check('job', 7)").fetchall()
    started, result = multiprocessing.Event(), multiprocessing.Queue()
    p = multiprocessing.Process(target=equal_peer, args=(path, started, result))
    p.start()
    started.set()
    try:
        err, got, elapsed = result.get(timeout=30)
    finally:
        p.join(30)
    # the first transaction still writes and commits after the peer
    a.execute("UPDATE jobs SET state = 'done', writer = 'a' WHERE id = 1")
    a.execute("COMMIT")
    a.close()
    report.ok(first == [(7,)] and err is None and got == [(7,)] and elapsed < 1.0,
              "%s: a transaction fenced at the highest token (7) does not make another "
              "process's BEGIN; SELECT fence_check at 7; COMMIT wait" % mode,
              "peer: error %r, got %r after %.2f s (busy_timeout %d ms)" % (
                  err, got, elapsed, BUSY_MS))
    report.ok(committed(path, "SELECT state, writer FROM jobs") == [("done", "a")]
              and tokens(path) == {"job": 7},
              "%s: and the first then writes and commits; fence_tokens stays 7" % mode,
              "%r %r" % (committed(path, "SELECT * FROM jobs"), tokens(path)))


def main():
    multiprocessing.set_start_method("fork")
    for mode in ("DELETE", "WAL"):
        # the control: without the check, SQLite waits and commits
        under_contention(mode, "BEGIN", check=None)
        # the README's pattern: SQLITE_BUSY at once, nothing committed
        under_contention(mode, "BEGIN", check="fence_check")
        # the documented write pattern
        under_contention(mode, "BEGIN IMMEDIATE", check="fence_check")
        # where the driver says BEGIN (autocommit=False, the default mode):
        # the protected write with its token first
        under_contention(mode, "BEGIN", check="token column")
        same_token(mode)
    return report.finish("sqlite_stacks_contention")


if __name__ == "__main__":
    sys.exit(main())
