#!/usr/bin/python3
"""Python + etcd + SQLite (sqlite3): a protected table whose token column
carries the lock key's mod_revision, and a holder stopped past its lease
refused by the database file itself.

The story. Two workers append to one job's state in a SQLite file. The
table is protected (`fence_protect('job', 'tok', 'job-')`, one fence per
row), so every write must carry a token in its `tok` column. Worker A takes
the etcd lock, reads the job, and is stopped (SIGSTOP) before it writes. Its
lease expires; worker B takes the lock with a higher mod_revision and writes.
A is resumed and writes with its old token: SQLite refuses the UPDATE with
SQLITE_CONSTRAINT_FUNCTION ("stale fencing token") and the row keeps B's
write.

The connection is opened with isolation_level=None and the transaction is
written out (BEGIN ... COMMIT): Python's default mode starts no transaction
before a SELECT. With a protected table that is not needed for safety (the
check runs inside the UPDATE), but it is the habit that keeps
`SELECT fence_check(...)` and a later write in one transaction.

Run it with a throwaway etcd (started and stopped for you):

    /usr/bin/python3 examples/run.py etcd_sqlite

or against your own: ETCD_ENDPOINT=127.0.0.1:2379 /usr/bin/python3 examples/etcd_sqlite.py
(FENCE_SQLITE_EXT names the extension, default ./sqlite_ext/fence; the
database is example.db in FENCE_EXAMPLE_DIR, default a new temporary
directory).

Exit status 0 when A's write was refused and the row holds B's write.
"""
import multiprocessing
import os
import signal
import sqlite3
import sys
import tempfile
import time

import etcd3

LOCK_KEY = "/locks/job-42"
TTL = 1
SQLITE_CONSTRAINT_FUNCTION = 1043      # the extended result code of fence's refusals


def etcd_client():
    host, port = os.environ.get("ETCD_ENDPOINT", "127.0.0.1:2379").rsplit(":", 1)
    return etcd3.client(host=host, port=int(port), timeout=10)


def take_lock(client, me):
    """Take the lock; return (lease, token): the lock key's mod_revision."""
    t = client.transactions
    while True:
        lease = client.lease(TTL)
        ok, resp = client.transaction(
            compare=[t.create(LOCK_KEY) == 0],
            success=[t.put(LOCK_KEY, me, lease=lease), t.get(LOCK_KEY)],
            failure=[])
        if ok:
            return lease, resp[1][0][1].mod_revision
        lease.revoke()
        time.sleep(0.05)


def connect(path):
    con = sqlite3.connect(path, isolation_level=None)   # we write BEGIN/COMMIT ourselves
    con.enable_load_extension(True)
    con.load_extension(os.environ.get("FENCE_SQLITE_EXT", "./sqlite_ext/fence"))
    con.enable_load_extension(False)
    con.execute("PRAGMA busy_timeout = 5000")
    return con


def write_job(con, token, state, who):
    """The fenced write: the token goes into the protected table's column."""
    con.execute("BEGIN")
    try:
        con.execute("UPDATE job SET state = ?, written_by = ?, tok = ? WHERE id = 42",
                    (state, who, token))
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


def worker_a(path, pipe):
    client = etcd_client()
    con = connect(path)
    lease, token = take_lock(client, "A")
    state = con.execute("SELECT state FROM job WHERE id = 42").fetchone()[0]
    pipe.send(("ready", token, state))
    time.sleep(3)               # "computing": the parent stops us in here
    try:
        write_job(con, token, "done (A)", "A")
        pipe.send(("accepted", None))
    except sqlite3.IntegrityError as e:
        if e.sqlite_errorcode == SQLITE_CONSTRAINT_FUNCTION and str(e).startswith("stale fencing token"):
            pipe.send(("refused", "%s: %s" % (e.sqlite_errorname, e)))
        else:
            raise


def main():
    d = os.environ.get("FENCE_EXAMPLE_DIR") or tempfile.mkdtemp()
    path = os.path.join(d, "example.db")
    if os.path.exists(path):
        os.remove(path)
    con = connect(path)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("CREATE TABLE job (id integer PRIMARY KEY, state text, written_by text, tok integer)")
    con.execute("SELECT fence_protect('job', 'tok', 'job-', 'id')")   # the row's fence is "job-42"
    con.execute("INSERT INTO job VALUES (42, 'queued', 'nobody', 0)")
    print("job 42 is 'queued' in %s; the table is protected: every write carries a token" % path)

    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    a = ctx.Process(target=worker_a, args=(path, theirs), daemon=True)
    a.start()
    if not mine.poll(60):
        sys.exit("worker A did not take the lock within 60 s")
    _, token_a, seen = mine.recv()
    os.kill(a.pid, signal.SIGSTOP)
    print("A took the lock with token %d (the lock key's mod_revision) and read state %r"
          % (token_a, seen))
    print("A is stopped (SIGSTOP) before it writes, as a long GC pause would stop it")

    client = etcd_client()
    t0 = time.monotonic()
    while client.get(LOCK_KEY)[0] is not None:
        time.sleep(0.05)
    print("A's lease expired; etcd deleted the lock key after %.1f s" % (time.monotonic() - t0))

    lease_b, token_b = take_lock(client, "B")
    write_job(con, token_b, "done (B)", "B")
    lease_b.revoke()
    print("B took the lock with token %d and wrote state 'done (B)': accepted" % token_b)

    os.kill(a.pid, signal.SIGCONT)
    print("A is resumed: it still believes it holds the lock and writes 'done (A)' with token %d"
          % token_a)
    outcome, detail = mine.recv() if mine.poll(60) else ("no answer", None)
    a.join(10)
    print("SQLite refused A's write: %s" % detail if outcome == "refused"
          else "A's write was %s" % outcome)

    row = con.execute("SELECT state, written_by, tok FROM job WHERE id = 42").fetchone()
    highest = con.execute("SELECT token FROM fence_tokens WHERE resource = 'job-42'").fetchone()[0]
    print("committed: job 42 is %r, written by %s with token %d; fence_tokens holds %d for 'job-42'"
          % (row[0], row[1], row[2], highest))
    good = outcome == "refused" and row == ("done (B)", "B", token_b) and highest == token_b
    print("as expected: the stopped holder's write was refused and B's write stands" if good
          else "NOT AS EXPECTED")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
