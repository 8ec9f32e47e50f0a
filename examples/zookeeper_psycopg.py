#!/usr/bin/python3
"""Python + ZooKeeper (kazoo) + PostgreSQL (psycopg 3): the lock node's
sequence number as the fencing token, and a holder whose session expired
refused by the database.

The story. Two workers post entries to a ledger. Each takes kazoo's Lock
recipe on /locks/ledger: it creates an ephemeral sequential znode, and the
lowest one holds the lock. The znode's sequence number grows with every
grant (ZooKeeper numbers a parent's children in creation order), so it is
the token. Worker A takes the lock, reads the balance, and is stopped
(SIGSTOP). Its ZooKeeper session expires, ZooKeeper deletes its znode, and
worker B's Lock is granted with a higher sequence number; B posts its entry.
A is resumed and posts with its old token: PostgreSQL refuses it (23T01)
and the ledger holds B's entry only.

Run it with throwaway servers (started and stopped for you):

    /usr/bin/python3 examples/run.py zookeeper_psycopg

or against your own: FENCE_PG_DSN='dbname=app' ZK_HOSTS=127.0.0.1:2181 /usr/bin/python3 examples/zookeeper_psycopg.py

Exit status 0 when A's entry was refused and the ledger holds B's.
"""
import logging
import multiprocessing
import os
import signal
import sys
import time

import psycopg
from kazoo.client import KazooClient

LOCK_PATH = "/locks/ledger"
RESOURCE = "ledger"
SESSION_TIMEOUT = 1.0       # seconds: ZooKeeper ends a silent session after this


def zk_client():
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)   # A's reconnect after its pause is noisy
    zk = KazooClient(hosts=os.environ.get("ZK_HOSTS", "127.0.0.1:2181"), timeout=SESSION_TIMEOUT)
    zk.start(timeout=30)
    return zk


def take_lock(zk, me):
    """Take the lock; return (lock, token). kazoo names its znode
    <uuid>__lock__<10-digit sequence>; the sequence is the token."""
    lock = zk.Lock(LOCK_PATH, me)
    lock.acquire(timeout=60)
    return lock, int(lock.node[-10:])


def post(conn, token, amount, who):
    """The fenced write: fence_check and the INSERT in one transaction."""
    with conn.transaction():
        conn.execute("SELECT fence_check(%s, %s)", (RESOURCE, token))
        conn.execute("INSERT INTO example_ledger (amount, posted_by, token) VALUES (%s, %s, %s)",
                     (amount, who, token))


def worker_a(dsn, pipe):
    zk = zk_client()
    conn = psycopg.connect(dsn)            # psycopg's default mode: not autocommit
    lock, token = take_lock(zk, "A")
    balance = conn.execute("SELECT coalesce(sum(amount), 0) FROM example_ledger").fetchone()[0]
    conn.commit()
    pipe.send(("ready", token, balance))
    time.sleep(4)               # "computing": the parent stops us in here
    try:
        post(conn, token, 100, "A")
        pipe.send(("accepted", None))
    except psycopg.IntegrityError as e:
        if e.sqlstate == "23T01":
            pipe.send(("refused", "SQLSTATE %s: %s. %s" % (e.sqlstate, e.diag.message_primary,
                                                           e.diag.message_detail)))
        else:
            raise


def main():
    dsn = os.environ.get("FENCE_PG_DSN", "")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS example_ledger")
        conn.execute("CREATE TABLE example_ledger (id serial PRIMARY KEY, amount int, "
                     "posted_by text, token bigint)")
        # only so that the example can run again against a new ZooKeeper,
        # whose sequence numbers start again; an application never does this
        conn.execute("SELECT fence_reset(%s)", (RESOURCE,))
    print("the ledger is empty; workers A and B will each take the ZooKeeper lock %s and post"
          % LOCK_PATH)

    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    a = ctx.Process(target=worker_a, args=(dsn, theirs), daemon=True)
    a.start()
    if not mine.poll(60):
        sys.exit("worker A did not take the lock within 60 s")
    _, token_a, balance = mine.recv()
    os.kill(a.pid, signal.SIGSTOP)
    print("A took the lock with token %d (its znode's sequence number) and read balance %d"
          % (token_a, balance))
    print("A is stopped (SIGSTOP) before it posts, as a long GC pause would stop it")

    zk = zk_client()
    t0 = time.monotonic()
    lock_b, token_b = take_lock(zk, "B")     # waits until A's session expires
    print("A's session expired after about %.1f s and ZooKeeper deleted its znode; "
          "B's lock was granted with token %d" % (time.monotonic() - t0, token_b))
    with psycopg.connect(dsn) as conn:
        post(conn, token_b, 250, "B")
    lock_b.release()
    zk.stop()
    print("B posted 250 with token %d: accepted" % token_b)

    os.kill(a.pid, signal.SIGCONT)
    print("A is resumed: it still believes it holds the lock and posts 100 with token %d" % token_a)
    outcome, detail = mine.recv() if mine.poll(60) else ("no answer", None)
    a.join(10)
    print("PostgreSQL refused A's entry: %s" % detail if outcome == "refused"
          else "A's entry was %s" % outcome)

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT amount, posted_by, token FROM example_ledger ORDER BY id").fetchall()
        highest = conn.execute("SELECT fence_current(%s)", (RESOURCE,)).fetchone()[0]
    print("committed: the ledger holds %s; fence_tokens holds %d for %r" % (
        ", ".join("%d by %s (token %d)" % r for r in rows) or "nothing", highest, RESOURCE))
    good = outcome == "refused" and rows == [(250, "B", token_b)] and highest == token_b
    print("as expected: the stopped holder's entry was refused and B's stands" if good
          else "NOT AS EXPECTED")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
