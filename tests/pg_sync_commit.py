#!/usr/bin/python3
"""tests/pg_sync_commit.py: an acknowledged advance survives a crash even
when the session set synchronous_commit = off (issue 26, item 1).

Any role may set synchronous_commit = off. A transaction that raises a
resource's highest accepted token must nevertheless not be acknowledged
before its commit record is flushed: otherwise a crash brings the old
highest back, and the zombie holding it writes again. fence makes such a
transaction commit synchronously (ForceSyncCommit); a transaction that
only accepted the current highest again changes nothing in fence_tokens and
keeps the session's setting.

On a cluster this script starts itself, fsync on, the WAL writer slowed
(wal_writer_delay = 10s) so that nothing but the commit itself flushes:

  a) crash: the old holder committed at 10; the new holder, with
     synchronous_commit = off, advances to 20 in a transaction that also
     writes a protected table, and the COMMIT returns; `pg_ctl stop -m
     immediate` at once; after recovery fence_current is 20, the new
     holder's row is there, and the zombie's fence_check(..., 10) and its
     INSERT at 10 are refused (23T01).
  b) flushes: right after such a COMMIT the WAL is flushed up to the
     insert position (the commit record is durable); right after a
     same-token transaction (synchronous_commit = off) it is not: the
     equal accept does not force a flush.
  c) synchronous replication (synchronous_standby_names naming a standby
     that never confirms): such a COMMIT waits for the standby (SyncRep)
     however the session weakened synchronous_commit (SET, the startup
     options, ALTER ROLE on itself); a same-token one does not.

Usage: /usr/bin/python3 tests/pg_sync_commit.py (tests/run_pg.sh runs it).
"""
import atexit
import os
import signal
import sys
import tempfile
import threading
import time
import traceback

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_faults as faults  # noqa: E402  (its Cluster and build)
from tap import Report  # noqa: E402

R = Report("pg sync commit")
OPTS = "-c fsync=on -c synchronous_commit=on -c wal_writer_delay=10000 -c wal_writer_flush_after=1GB"


def sqlstate(conn, sql, args=()):
    try:
        with conn.transaction():
            conn.execute(sql, args)
        return None
    except psycopg.Error as e:
        return e.sqlstate


def scenario_crash(cl, rounds=2):
    c = cl.connect()
    c.execute("CREATE EXTENSION fence")
    c.execute("CREATE TABLE jobs (id int, tok bigint, who text)")
    c.execute("SELECT fence_protect('jobs', 'tok', 'sc:jobs')")
    for i in range(rounds):
        res = "sc:r%d" % i
        old = 10 + 100 * i
        new = old + 10
        c.execute("SELECT fence_check(%s, %s)", (res, old))
        if i == 0:
            c.execute("INSERT INTO jobs VALUES (0, 10, 'old holder')")
        c.execute("CHECKPOINT")
        holder = cl.connect(autocommit=False)
        holder.execute("SET synchronous_commit = off")
        holder.execute("SELECT fence_check(%s, %s)", (res, new))
        if i == 0:
            holder.execute("INSERT INTO jobs VALUES (1, 20, 'new holder')")
        holder.commit()          # acknowledged
        # the crash, before anything else could flush the WAL
        r = cl.stop("immediate")
        R.ok(r.returncode == 0, "round %d: the server is stopped -m immediate" % i, r.stdout)
        cl.start()
        cl.wait_accepting()
        c = cl.connect()
        cur = c.execute("SELECT fence_current(%s)", (res,)).fetchone()[0]
        R.ok(cur == new, "round %d: synchronous_commit=off: the acknowledged advance to %d "
             "survived an immediate stop (fence_current %r)" % (i, new, cur), "got %r" % cur)
        zombie = cl.connect()
        got = sqlstate(zombie, "SELECT fence_check(%s, %s)", (res, old))
        R.ok(got == "23T01", "round %d: the zombie's fence_check(..., %d) is refused after "
             "recovery" % (i, old), "got %r" % got)
        if i == 0:
            rows = c.execute("SELECT who, tok FROM jobs ORDER BY id").fetchall()
            R.ok(rows == [("old holder", 10), ("new holder", 20)],
                 "round 0: the new holder's row is there after recovery", "%r" % rows)
            got = sqlstate(zombie, "INSERT INTO jobs VALUES (2, 10, 'zombie')")
            n = c.execute("SELECT count(*) FROM jobs WHERE who = 'zombie'").fetchone()[0]
            R.ok(got == "23T01" and n == 0,
                 "round 0: the zombie's INSERT at 10 is refused and nothing of it committed",
                 "got %r, %d rows" % (got, n))
        zombie.close()


def flushed_after(conn, sql_list):
    """Run the transaction with synchronous_commit = off; then whether the
    WAL was flushed up to where inserting stands (the commit record)."""
    for sql, args in sql_list:
        conn.execute(sql, args)
    conn.commit()
    row = conn.execute("SELECT pg_current_wal_flush_lsn() >= pg_current_wal_insert_lsn()").fetchone()
    conn.commit()
    return row[0]


def scenario_flushes(cl, n=20):
    c = cl.connect()
    c.execute("CREATE EXTENSION fence")
    c.execute("CREATE TABLE log (tok bigint, i int)")
    c.execute("SELECT fence_protect('log', 'tok', 'sc:log')")
    c.execute("SELECT fence_check('sc:log', 5)")
    s = cl.connect(autocommit=False)
    s.execute("SET synchronous_commit = off")
    s.commit()
    same = sum(flushed_after(s, [("INSERT INTO log VALUES (5, %s)", (i,))]) for i in range(n))
    R.ok(same <= n // 4,
         "synchronous_commit=off: a same-token write does not force a flush "
         "(%d of %d commits found flushed)" % (same, n))
    adv = sum(flushed_after(s, [("INSERT INTO log VALUES (%s, %s)", (6 + i, i))]) for i in range(n))
    R.ok(adv == n, "synchronous_commit=off: every advance is flushed before COMMIT returns "
         "(%d of %d)" % (adv, n))
    plain = sum(flushed_after(s, [("SELECT fence_check(%s, 1)", ("sc:f%d" % i,))])
                for i in range(n))
    R.ok(plain == n, "synchronous_commit=off: a first fence_check (an advance from nothing) is "
         "flushed before COMMIT returns (%d of %d)" % (plain, n))
    s.close()


def scenario_sync_standby(cl):
    """synchronous_standby_names names a standby that never confirms: a
    commit at the server's synchronous_commit (on) waits for it. A session
    that set synchronous_commit = off must still wait when its transaction
    advanced (the advance would otherwise be lost at a failover); a
    same-token transaction keeps the session's setting."""
    c = cl.connect()
    c.execute("CREATE EXTENSION fence")
    c.execute("SELECT fence_check('sr:a', 10)")
    c.execute("CREATE ROLE app LOGIN")
    c.execute("ALTER SYSTEM SET synchronous_standby_names = 'nosuch'")
    c.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)

    def session(how):
        """A session whose synchronous_commit is weaker than the server's,
        set the ways an application role can: SET, the connection's startup
        options (PGOPTIONS too), or ALTER ROLE on itself."""
        if how == "SET":
            s = cl.connect(autocommit=False)
            s.execute("SET synchronous_commit = off")
        elif how == "startup option":
            s = cl.connect(autocommit=False, options="-c synchronous_commit=local")
        else:
            a = psycopg.connect(host=cl.sock, port=cl.port, user="app", dbname="postgres",
                                autocommit=True, connect_timeout=10)
            a.execute("SET synchronous_commit = off")    # its own commit must not wait
            a.execute("ALTER ROLE CURRENT_USER SET synchronous_commit = off")
            a.close()
            s = psycopg.connect(host=cl.sock, port=cl.port, user="app", dbname="postgres",
                                autocommit=False, connect_timeout=10)
        s.commit()
        return s

    def commit_in_thread(s, sql):
        pid = s.execute("SELECT pg_backend_pid()").fetchone()[0]
        s.commit()
        done = {}

        def run():
            try:
                s.execute(sql)
                s.commit()
                done["r"] = "committed"
            except psycopg.Error as e:
                done["r"] = e.sqlstate
        t = threading.Thread(target=run)
        t.start()
        t.join(1.5)
        waiting = t.is_alive()
        event = c.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                          (pid,)).fetchone()[0]
        if waiting:
            c.execute("SELECT pg_cancel_backend(%s)", (pid,))
            t.join(10)
        return waiting, event

    token = 10
    for how in ("SET", "startup option", "ALTER ROLE on itself"):
        s = session(how)
        waiting, event = commit_in_thread(s, "SELECT fence_check('sr:a', %d)" % token)
        R.ok(not waiting, "sync standby: a same-token transaction with synchronous_commit weakened "
             "by %s does not wait for the synchronous standby" % how, "wait_event %r" % event)
        token += 10
        waiting, event = commit_in_thread(s, "SELECT fence_check('sr:a', %d)" % token)
        R.ok(waiting and event == "SyncRep",
             "sync standby: an advance with synchronous_commit weakened by %s waits for the "
             "synchronous standby" % how, "waiting %r, wait_event %r" % (waiting, event))
        s.rollback()
        waiting, event = commit_in_thread(s, "SELECT fence_acquire('sr:lease:%s', 'w', 60000)" % how)
        R.ok(waiting and event == "SyncRep",
             "sync standby: a lease grant with synchronous_commit weakened by %s waits for the "
             "synchronous standby" % how, "waiting %r, wait_event %r" % (waiting, event))
        s.close()
    c.execute("ALTER SYSTEM RESET synchronous_standby_names")
    c.execute("SELECT pg_reload_conf()")


def main():
    started = time.monotonic()
    for sg in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sg, faults.on_signal)
    atexit.register(faults.cleanup)
    for k in list(os.environ):
        if k.startswith("PG") and not k.startswith("PG_"):
            del os.environ[k]
    faults.WORK = tempfile.mkdtemp(prefix="fence-synccommit.", dir="/tmp")
    os.chmod(faults.WORK, 0o755)
    faults.INSTALL = os.path.join(faults.WORK, "install")
    try:
        faults.build()
        faults.chown_postgres(faults.WORK)
        for name, fn in (("sync_crash", scenario_crash), ("sync_flushes", scenario_flushes),
                         ("sync_standby", scenario_sync_standby)):
            cl = faults.Cluster(name, OPTS)
            try:
                cl.initdb()
                cl.start()
                cl.wait_accepting()
                fn(cl)
            except Exception:
                R.ok(False, "%s ran to the end" % name, traceback.format_exc())
                print(faults.tail(cl.log, 15))
            finally:
                cl.stop_quietly()
    except Exception:
        R.ok(False, "setup", traceback.format_exc())
    finally:
        faults.cleanup()
    print("# pg_sync_commit: %.1f s" % (time.monotonic() - started))
    return R.finish("pg_sync_commit")


if __name__ == "__main__":
    sys.exit(main())
