#!/usr/bin/python3
"""tests/sqlite_stacks_restore.py: restoring a backup under a paused lease holder.

An operator restores a backup of the database (Python's Connection.backup,
the backup API that the shell's .restore uses; or a plain file copy over
the file while no transaction is open) taken before the current holder got
its lease. fence_leases and fence_tokens go back with it. The holder is
paused, its connection open. Then:

  1. a new worker takes the lease: its token must be one that the paused
     holder does not already have (greater than every token granted before
     the restore, not only before the backup);
  2. it writes at its token;
  3. the paused holder resumes and writes at its old token: refused.

Asserted on what committed: the new worker's row and token, fence_tokens.
One-resource protected table `counter` (token column tok, resource 'job'),
rollback journal (a file copy under open WAL connections is not a restore).

Usage: /usr/bin/python3 tests/sqlite_stacks_restore.py
"""
import os
import shutil
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stacklib import Report, committed, connect, error, scratch, tokens  # noqa: E402

report = Report("stacks restore:")
TTL = 60000


def write(conn, tok, who):
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("SELECT fence_check('job', ?)", (tok,))
        conn.execute("UPDATE counter SET n = n + 1, who = ?, tok = ? WHERE id = 1", (who, tok))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def acquire(conn, holder):
    tok = conn.execute("SELECT fence_acquire('job', ?, ?)", (holder, TTL)).fetchone()[0]
    if tok is not None:
        conn.execute("SELECT fence_check('job', ?)", (tok,))
    return tok


def case(how, remedy):
    d = scratch("restore")
    path, backup = os.path.join(d, "db"), os.path.join(d, "backup")
    c = connect(path, isolation_level=None)
    c.execute("CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER, who TEXT, tok INTEGER)")
    c.execute("SELECT fence_protect('counter', 'tok', 'job')")
    first = acquire(c, "worker-0")
    c.execute("INSERT INTO counter VALUES (1, 0, 'worker-0', ?)", (first,))
    c.execute("SELECT fence_release('job', 'worker-0', ?)", (first,))
    b = sqlite3.connect(backup)
    c.backup(b)                      # the backup, taken before the next holder
    b.close()
    c.close()

    paused = connect(path, isolation_level=None)
    tp = acquire(paused, "worker-1")
    write(paused, tp, "worker-1")    # then worker-1 pauses, its connection open

    if how == "backup API":
        src, dst = sqlite3.connect(backup), sqlite3.connect(path)
        src.backup(dst)
        src.close()
        dst.close()
    else:
        shutil.copyfile(backup, path)
    report.ok(committed(path, "SELECT who FROM counter") == [("worker-0",)],
              "%s: the restore took the database back to before worker-1's lease" % how)

    new = connect(path, isolation_level=None)
    if not remedy:
        e, tn = error(acquire, new, "worker-2")
        report.ok(e is None and tn == tp,
                  "%s, DEMONSTRATION without the documented step: the next grant hands out %d "
                  "again, the token the paused holder has" % (how, tp), "got %r" % (e or tn))
        return
    new.execute("UPDATE fence_leases SET token = token + 1000000000")   # the documented step
    how += " and the documented step"
    e, tn = error(acquire, new, "worker-2")
    report.ok(e is None and isinstance(tn, int) and tn > tp,
              "%s: the next fence_acquire after the restore gives a token the paused holder does not "
              "have (worker-1 holds %d)" % (how, tp), "got %r" % (e or tn))
    if e is None and tn is not None:
        e, _ = error(write, new, tn, "worker-2")
        report.ok(e is None, "%s: worker-2 writes at its token %r" % (how, tn), repr(e))
    e, _ = error(write, paused, tp, "worker-1 resumed")
    rows = committed(path, "SELECT who, tok FROM counter")
    report.ok(isinstance(e, sqlite3.IntegrityError) and "stale fencing token" in str(e)
              and rows == [("worker-2", tn)] and tokens(path) == {"job": tn},
              "%s: the paused holder resumes: its write at %d is refused; committed: worker-2's "
              "write, fence_tokens %r" % (how, tp, tn),
              "error %r; rows %r; fence_tokens %r" % (e, rows, tokens(path)))


def main():
    for how in ("backup API", "file copy"):
        for remedy in (False, True):
            e, _ = error(case, how, remedy)
            if e is not None:
                report.ok(False, "%s ran to its end" % how, repr(e))
    return report.finish("sqlite_stacks_restore")


if __name__ == "__main__":
    sys.exit(main())
