#!/usr/bin/python3
"""Python + etcd + PostgreSQL (psycopg 3): the lock key's mod_revision as the
fencing token, and a holder stopped past its lease refused by the database.

The story. Two workers update invoice 7. Worker A takes the etcd lock (a
1-second lease and a put of the lock key with that lease), reads the
invoice, and is stopped (SIGSTOP, as a long GC pause or a VM migration stops
a process) before it writes. Its lease expires and etcd deletes the lock
key; worker B takes the lock and gets a higher mod_revision, and writes.
Then A is resumed: it still believes it holds the lock and writes with its
old token. PostgreSQL refuses that write (SQLSTATE 23T01) and the invoice
keeps B's write.

The write uses the pattern that is safe in every psycopg mode, autocommit
included: `with conn.transaction():` around `fence_check` and the UPDATE.

Run it with throwaway servers (started and stopped for you):

    /usr/bin/python3 examples/run.py etcd_psycopg

or against your own (the fence extension installed in that database):

    FENCE_PG_DSN='dbname=app' ETCD_ENDPOINT=127.0.0.1:2379 /usr/bin/python3 examples/etcd_psycopg.py

Exit status 0 when A's write was refused and the invoice holds B's write.
"""
import multiprocessing
import os
import signal
import sys
import time

import etcd3
import psycopg

LOCK_KEY = "/locks/invoice-7"
RESOURCE = "invoice-7"      # the name fence keeps the highest token under
TTL = 1                     # seconds; etcd's shortest lease


def etcd_client():
    host, port = os.environ.get("ETCD_ENDPOINT", "127.0.0.1:2379").rsplit(":", 1)
    return etcd3.client(host=host, port=int(port), timeout=10)


def take_lock(client, me):
    """Take the lock; return (lease, token). The token is the lock key's
    mod_revision: etcd's revision counter only grows, so every grant gets a
    higher one. (The lease id is no token: lease ids are not ordered.)"""
    t = client.transactions
    while True:
        lease = client.lease(TTL)
        ok, resp = client.transaction(
            compare=[t.create(LOCK_KEY) == 0],                  # the key is free
            success=[t.put(LOCK_KEY, me, lease=lease), t.get(LOCK_KEY)],
            failure=[])
        if ok:
            return lease, resp[1][0][1].mod_revision
        lease.revoke()
        time.sleep(0.05)


def write_invoice(conn, token, status, who):
    """The fenced write: the check and the UPDATE in one transaction."""
    with conn.transaction():
        conn.execute("SELECT fence_check(%s, %s)", (RESOURCE, token))
        conn.execute("UPDATE example_invoice SET status = %s, written_by = %s WHERE id = 7",
                     (status, who))


def worker_a(dsn, pipe):
    """Worker A, in its own process so that it can really be stopped."""
    client = etcd_client()
    conn = psycopg.connect(dsn, autocommit=True)
    lease, token = take_lock(client, "A")
    status = conn.execute("SELECT status FROM example_invoice WHERE id = 7").fetchone()[0]
    pipe.send(("ready", token, status))
    time.sleep(3)               # "computing": the parent stops us in here
    try:
        write_invoice(conn, token, "paid (A)", "A")
        pipe.send(("accepted", None))
    except psycopg.IntegrityError as e:
        if e.sqlstate == "23T01":           # stale token: A lost the lock
            pipe.send(("refused", "SQLSTATE %s: %s. %s" % (e.sqlstate, e.diag.message_primary,
                                                          e.diag.message_detail)))
        else:
            raise


def main():
    dsn = os.environ.get("FENCE_PG_DSN", "")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS example_invoice")
        conn.execute("CREATE TABLE example_invoice (id int PRIMARY KEY, status text, written_by text)")
        conn.execute("INSERT INTO example_invoice VALUES (7, 'open', 'nobody')")
        # only so that the example can run again against a new etcd, whose
        # revisions start again from 1; an application never does this
        conn.execute("SELECT fence_reset(%s)", (RESOURCE,))
    print("invoice 7 is 'open'; workers A and B will each take the etcd lock "
          "%s and update it" % LOCK_KEY)

    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    a = ctx.Process(target=worker_a, args=(dsn, theirs), daemon=True)
    a.start()
    if not mine.poll(60):
        sys.exit("worker A did not take the lock within 60 s")
    _, token_a, seen = mine.recv()
    os.kill(a.pid, signal.SIGSTOP)
    print("A took the lock with token %d (the lock key's mod_revision) and read status %r"
          % (token_a, seen))
    print("A is stopped (SIGSTOP) before it writes, as a long GC pause would stop it")

    client = etcd_client()
    t0 = time.monotonic()
    while client.get(LOCK_KEY)[0] is not None:
        time.sleep(0.05)
    print("A's %d-second lease expired; etcd deleted the lock key after %.1f s"
          % (TTL, time.monotonic() - t0))

    lease_b, token_b = take_lock(client, "B")
    with psycopg.connect(dsn, autocommit=True) as conn:
        write_invoice(conn, token_b, "refunded (B)", "B")
    lease_b.revoke()
    print("B took the lock with token %d and wrote status 'refunded (B)': accepted" % token_b)

    os.kill(a.pid, signal.SIGCONT)
    print("A is resumed: it still believes it holds the lock and writes 'paid (A)' with token %d"
          % token_a)
    outcome, detail = mine.recv() if mine.poll(60) else ("no answer", None)
    a.join(10)
    if outcome == "refused":
        print("PostgreSQL refused A's write: %s" % detail)
    else:
        print("A's write was %s" % outcome)

    with psycopg.connect(dsn, autocommit=True) as conn:
        status, who = conn.execute("SELECT status, written_by FROM example_invoice WHERE id = 7").fetchone()
        highest = conn.execute("SELECT fence_current(%s)", (RESOURCE,)).fetchone()[0]
    print("committed: invoice 7 is %r, written by %s; fence_tokens holds %d for %r"
          % (status, who, highest, RESOURCE))
    good = outcome == "refused" and (status, who) == ("refunded (B)", "B") and highest == token_b \
        and token_b > token_a
    print("as expected: the stopped holder's write was refused and B's write stands" if good
          else "NOT AS EXPECTED")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
