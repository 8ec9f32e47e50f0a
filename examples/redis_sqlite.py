#!/usr/bin/python3
"""Python + Redis + SQLite (sqlite3): a lock on one Redis instance whose
token is an INCR of a per-lock counter, and fence_check before the write.

The story. Two workers rewrite one report in a SQLite file. The lock is a
Redis key set with NX and an expiry; in the same Lua script (so that no
pause can fall in between) the worker INCRs the lock's counter: that number
is the token. Worker A takes the lock and is stopped (SIGSTOP) before it
writes. The key expires; worker B takes the lock (the counter gives it a
higher number) and writes. A is resumed and writes with its old token:
fence_check refuses it with SQLITE_CONSTRAINT_FUNCTION, its transaction is
rolled back, and the report keeps B's text.

Here the table is not protected: the transaction presents the token once
with `SELECT fence_check(...)` and then writes. That is safe only if the
check and the write are one transaction, so the connection is opened with
isolation_level=None and BEGIN ... COMMIT is written out (Python's default
mode would run the SELECT and the UPDATE in two transactions).

Redlock (a majority of several Redis instances) gives no such counter, so
it cannot fence: use one instance's INCR, as here, or another lock service.

Run it with a throwaway Redis (started and stopped for you):

    /usr/bin/python3 examples/run.py redis_sqlite

or against your own: REDIS_PORT=6379 /usr/bin/python3 examples/redis_sqlite.py

Exit status 0 when A's write was refused and the report holds B's text.
"""
import multiprocessing
import os
import signal
import sqlite3
import sys
import tempfile
import time
import uuid

import redis

LOCK_KEY = "locks:report-9"
COUNTER_KEY = "locks:report-9:token"
RESOURCE = "report-9"
TTL_MS = 1000
SQLITE_CONSTRAINT_FUNCTION = 1043

# SET the lock if it is free; if so, INCR the counter and return it (the token)
ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false
"""
# DEL the lock only if it is still ours (it may have expired and passed on)
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def redis_client():
    return redis.Redis(host="127.0.0.1", port=int(os.environ.get("REDIS_PORT", "6379")))


def take_lock(r, me):
    """Take the lock; return (value, token)."""
    acquire = r.register_script(ACQUIRE)
    while True:
        value = "%s:%s" % (me, uuid.uuid4().hex)
        token = acquire(keys=[LOCK_KEY, COUNTER_KEY], args=[value, TTL_MS])
        if token is not None:
            return value, int(token)
        time.sleep(0.05)


def connect(path):
    con = sqlite3.connect(path, isolation_level=None)
    con.enable_load_extension(True)
    con.load_extension(os.environ.get("FENCE_SQLITE_EXT", "./sqlite_ext/fence"))
    con.enable_load_extension(False)
    con.execute("PRAGMA busy_timeout = 5000")
    return con


def write_report(con, token, text):
    """The fenced write: fence_check and the UPDATE in one explicit transaction,
    which takes the write lock first (an equal accept takes none)."""
    con.execute("BEGIN IMMEDIATE")
    try:
        con.execute("SELECT fence_check(?, ?)", (RESOURCE, token))
        con.execute("UPDATE report SET body = ? WHERE id = 9", (text,))
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


def worker_a(path, pipe):
    r = redis_client()
    con = connect(path)
    _, token = take_lock(r, "A")
    pipe.send(("ready", token))
    time.sleep(3)               # "computing": the parent stops us in here
    try:
        write_report(con, token, "A's report")
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
    con.execute("CREATE TABLE report (id integer PRIMARY KEY, body text)")
    con.execute("INSERT INTO report VALUES (9, 'empty')")
    r = redis_client()
    r.delete(LOCK_KEY)
    print("report 9 is 'empty' in %s; workers A and B will each take the Redis lock %s"
          % (path, LOCK_KEY))

    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    a = ctx.Process(target=worker_a, args=(path, theirs), daemon=True)
    a.start()
    if not mine.poll(60):
        sys.exit("worker A did not take the lock within 60 s")
    _, token_a = mine.recv()
    os.kill(a.pid, signal.SIGSTOP)
    print("A took the lock with token %d (INCR of %s)" % (token_a, COUNTER_KEY))
    print("A is stopped (SIGSTOP) before it writes, as a long GC pause would stop it")

    t0 = time.monotonic()
    while r.exists(LOCK_KEY):
        time.sleep(0.05)
    print("A's lock key expired after %.1f s" % (time.monotonic() - t0))
    value_b, token_b = take_lock(r, "B")
    write_report(con, token_b, "B's report")
    r.register_script(RELEASE)(keys=[LOCK_KEY], args=[value_b])
    print("B took the lock with token %d and wrote \"B's report\": accepted" % token_b)

    os.kill(a.pid, signal.SIGCONT)
    print("A is resumed: it still believes it holds the lock and writes \"A's report\" with token %d"
          % token_a)
    outcome, detail = mine.recv() if mine.poll(60) else ("no answer", None)
    a.join(10)
    print("SQLite refused A's write: %s" % detail if outcome == "refused"
          else "A's write was %s" % outcome)

    body = con.execute("SELECT body FROM report WHERE id = 9").fetchone()[0]
    highest = con.execute("SELECT fence_current(?)", (RESOURCE,)).fetchone()[0]
    print("committed: report 9 reads %r; fence_tokens holds %d for %r" % (body, highest, RESOURCE))
    good = outcome == "refused" and body == "B's report" and highest == token_b > token_a
    print("as expected: the stopped holder's write was refused and B's stands" if good
          else "NOT AS EXPECTED")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
