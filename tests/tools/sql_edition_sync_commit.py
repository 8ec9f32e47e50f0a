#!/usr/bin/python3
"""An acknowledged advance survives a crash on the SQL edition, whatever the
transaction did to synchronous_commit after the advance (docs/sql-edition.md,
row 21).

The SQL edition sets synchronous_commit = on locally when a transaction
raises a highest (or changes a lease). A later SET LOCAL, SET or RESET in
the same transaction would undo that; the deferred constraint trigger
fence_sync_commit on fence_tokens and fence_leases sets it again at COMMIT.

On the cluster tests/run_pg.sh started (FENCE_EDITION=sql, any major; the
WAL writer slowed to 10 s and the background writer stopped, so that
nothing but a commit itself flushes the WAL), per variant: the new holder
advances to 20 in a transaction that also writes a protected table,
weakens synchronous_commit after the advance, and the COMMIT returns;
`pg_ctl restart -m immediate` at once (the crash); after recovery
fence_current is 20, the row is there, and the zombie's fence_check(..., 10)
is refused (23T01). A control: an unfenced transaction with SET LOCAL
synchronous_commit = off is lost by the same crash (the harness can see a
lost commit).

Run by tests/run_pg.sh with FENCE_EDITION=sql (PGHOST, PGPORT, PG_WORK and
PG_BINDIR set); it restarts that cluster.
"""
import os
import pathlib
import subprocess
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import psycopg  # noqa: E402
from tap import Report  # noqa: E402

LABEL = "pg sql-edition pg%s sync commit" % os.environ.get("FENCE_PG_MAJOR", "15")
report = Report(LABEL)
DB = "sql_sync"
DATA = os.path.join(os.environ["PG_WORK"], "data")
PG_CTL = os.path.join(os.environ["PG_BINDIR"], "pg_ctl")


def as_postgres(cmd):
    return (["runuser", "-u", "postgres", "--"] + cmd) if os.getuid() == 0 else cmd


def connect(dbname=DB, **kw):
    kw.setdefault("autocommit", True)
    return psycopg.connect(dbname=dbname, connect_timeout=10, **kw)


def crash():
    """pg_ctl restart -m immediate: the server stops without a checkpoint
    (what is not flushed is lost) and starts again with its options."""
    r = subprocess.run(as_postgres([PG_CTL, "-D", DATA, "-l", os.path.join(os.environ["PG_WORK"], "server.log"),
                                    "-m", "immediate", "-w", "-t", "60", "restart"]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, cwd=os.environ["PG_WORK"])
    if r.returncode != 0:
        raise RuntimeError("pg_ctl restart -m immediate failed: " + r.stdout)
    for _ in range(100):
        try:
            connect("postgres").close()
            return
        except psycopg.OperationalError:
            time.sleep(0.1)
    raise RuntimeError("the server did not accept connections after the restart")


def sqlstate(conn, sql, args=()):
    try:
        with conn.transaction():
            conn.execute(sql, args)
        return None
    except psycopg.Error as e:
        return e.sqlstate


admin = connect("postgres")
admin.execute("DROP DATABASE IF EXISTS " + DB)
admin.execute("CREATE DATABASE " + DB)
for name, value in (("wal_writer_delay", "10s"), ("wal_writer_flush_after", "1GB"),
                    ("bgwriter_lru_maxpages", "0")):
    admin.execute("ALTER SYSTEM SET %s = '%s'" % (name, value))
admin.execute("SELECT pg_reload_conf()")
admin.close()
c = connect()
c.execute("CREATE TABLE jobs (res text, tok bigint, who text)")
c.execute("SELECT fence_protect('jobs', 'tok', 'sc:', 'res')")
c.execute("CREATE TABLE plain (i int)")
c.close()

# each: (name, options of the holder's connection, statements after the
# advance, run as one simple-query string with BEGIN and COMMIT, or not)
VARIANTS = [
    ("SET LOCAL synchronous_commit = off", None, ["SET LOCAL synchronous_commit = off"], False),
    ("SET synchronous_commit = off", None, ["SET synchronous_commit = off"], False),
    ("RESET synchronous_commit (the session's default is off)", "-c synchronous_commit=off",
     ["RESET synchronous_commit"], False),
    ("SET CONSTRAINTS ALL IMMEDIATE, then SET LOCAL synchronous_commit = off", None,
     ["SET CONSTRAINTS ALL IMMEDIATE", "SET LOCAL synchronous_commit = off"], False),
    ("SET CONSTRAINTS ALL IMMEDIATE and SET LOCAL synchronous_commit = off in one query "
     "string with the advance and the COMMIT", None,
     ["SET CONSTRAINTS ALL IMMEDIATE", "SET LOCAL synchronous_commit = off"], True),
    ("SET CONSTRAINTS ALL IMMEDIATE before the advance, SET LOCAL synchronous_commit = off",
     None, ["SET LOCAL synchronous_commit = off"], False, ["SET CONSTRAINTS ALL IMMEDIATE"]),
    ("SET CONSTRAINTS ALL IMMEDIATE in a savepoint rolled back, then SET LOCAL "
     "synchronous_commit = off", None,
     ["SAVEPOINT s", "SET CONSTRAINTS ALL IMMEDIATE", "ROLLBACK TO SAVEPOINT s",
      "SET LOCAL synchronous_commit = off"], False),
    ("a second advance (another resource) after SET CONSTRAINTS ALL IMMEDIATE, then SET LOCAL "
     "synchronous_commit = off", None,
     ["SET CONSTRAINTS ALL IMMEDIATE", "SELECT fence_check('sc:other', 5)",
      "SET LOCAL synchronous_commit = off"], False),
]
# Not covered (docs/sql-edition.md, row 21): fence_sync_commit fired twice
# before the COMMIT within one query string (one statement_timestamp()),
# e.g. "SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED; SET
# CONSTRAINTS ALL IMMEDIATE; SET LOCAL synchronous_commit = off; COMMIT"
# after the advance: the second firing does not queue it again.

for i, (name, options, after, one_string, *before) in enumerate(VARIANTS):
    before = before[0] if before else []
    res = "r%d" % i
    try:
        c = connect()
        c.execute("SELECT fence_check(%s, 10)", ("sc:" + res,))
        c.execute("INSERT INTO jobs VALUES (%s, 10, 'old holder')", (res,))
        c.execute("CHECKPOINT")
        c.close()
        kw = {"options": options} if options else {}
        holder = connect(**kw)
        if one_string:
            holder.execute("BEGIN; %sSELECT fence_check('sc:%s', 20); "
                           "INSERT INTO jobs VALUES ('%s', 20, 'new holder'); %s; COMMIT"
                           % ("".join(b + "; " for b in before), res, res, "; ".join(after)))
        else:
            with holder.transaction():
                for sql in before:
                    holder.execute(sql)
                holder.execute("SELECT fence_check(%s, 20)", ("sc:" + res,))
                holder.execute("INSERT INTO jobs VALUES (%s, 20, 'new holder')", (res,))
                for sql in after:
                    holder.execute(sql)
        # acknowledged; the crash, before anything else could flush the WAL
        crash()
        c = connect()
        cur = c.execute("SELECT fence_current(%s)", ("sc:" + res,)).fetchone()[0]
        rows = c.execute("SELECT who, tok FROM jobs WHERE res = %s ORDER BY tok", (res,)).fetchall()
        zombie = connect()
        got = sqlstate(zombie, "SELECT fence_check(%s, 10)", ("sc:" + res,))
        got_w = sqlstate(zombie, "INSERT INTO jobs VALUES (%s, 10, 'zombie')", (res,))
        n = c.execute("SELECT count(*) FROM jobs WHERE res = %s AND who = 'zombie'",
                      (res,)).fetchone()[0]
        report.ok(cur == 20 and rows == [("old holder", 10), ("new holder", 20)]
                  and got == "23T01" and got_w == "23T01" and n == 0,
                  "%s after the advance: the acknowledged advance and its row survive a crash, "
                  "the zombie at 10 is refused" % name,
                  "fence_current %r, rows %r, zombie fence_check %r, zombie INSERT %r (%d rows)"
                  % (cur, rows, got, got_w, n))
        zombie.close()
        c.close()
        holder.close()
    except Exception as e:
        report.ok(False, "%s: ran to the end" % name, repr(e))

# a lease grant, then SET LOCAL synchronous_commit = off
try:
    c = connect()
    c.execute("CHECKPOINT")
    c.close()
    holder = connect()
    with holder.transaction():
        tok = holder.execute("SELECT fence_acquire('sc:lease', 'w1', 600000)").fetchone()[0]
        holder.execute("SET LOCAL synchronous_commit = off")
    crash()
    c = connect()
    row = c.execute("SELECT holder, token FROM fence_leases WHERE resource = 'sc:lease'").fetchone()
    other = c.execute("SELECT fence_acquire('sc:lease', 'w2', 1000)").fetchone()[0]
    report.ok(row == ("w1", tok) and other is None,
              "SET LOCAL synchronous_commit = off after a lease grant: the grant survives a crash "
              "and another holder gets none", "lease %r (granted %r), w2 got %r" % (row, tok, other))
    c.close()
    holder.close()
except Exception as e:
    report.ok(False, "lease grant: ran to the end", repr(e))

# a standby that never confirms (synchronous_standby_names = 'nosuch'): a
# COMMIT at synchronous_commit on waits for it. An advance that then set
# synchronous_commit = local (which the crash above cannot tell from on)
# must wait; a same-token transaction that set it keeps it and does not.
def commit_waits(sql_list):
    s = connect(autocommit=False)
    pid = s.execute("SELECT pg_backend_pid()").fetchone()[0]
    s.commit()
    done = {}

    def run():
        try:
            for sql in sql_list:
                s.execute(sql)
            s.commit()
            done["r"] = "committed"
        except psycopg.Error as e:
            done["r"] = e.sqlstate
    t = threading.Thread(target=run)
    t.start()
    t.join(1.5)
    waiting = t.is_alive()
    with connect() as o:
        event = o.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                          (pid,)).fetchone()[0]
        if waiting:
            o.execute("SELECT pg_cancel_backend(%s)", (pid,))
    t.join(10)
    s.close()
    return waiting, event, done.get("r")


try:
    admin = connect("postgres")
    admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'nosuch'")
    admin.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)
    waiting, event, _ = commit_waits(["SELECT fence_check('sc:sr', 10)",
                                      "SET LOCAL synchronous_commit = local"])
    report.ok(waiting and event == "SyncRep", "sync standby: an advance, then SET LOCAL "
              "synchronous_commit = local: the COMMIT waits for the synchronous standby",
              "waiting %r, wait_event %r" % (waiting, event))
    waiting, event, r = commit_waits(["SELECT fence_check('sc:sr', 10)",
                                      "SET LOCAL synchronous_commit = local"])
    report.ok(not waiting and r == "committed", "sync standby: a same-token transaction with "
              "SET LOCAL synchronous_commit = local does not wait",
              "waiting %r, wait_event %r, %r" % (waiting, event, r))
    admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
    admin.execute("SELECT pg_reload_conf()")
    admin.close()
    time.sleep(0.3)
except Exception as e:
    report.ok(False, "sync standby: ran to the end", repr(e))

# the control: without fence, such a commit is lost by the same crash
try:
    c = connect()
    c.execute("CHECKPOINT")
    with c.transaction():
        c.execute("INSERT INTO plain VALUES (1)")
        c.execute("SET LOCAL synchronous_commit = off")
    c.close()
    crash()
    c = connect()
    n = c.execute("SELECT count(*) FROM plain").fetchone()[0]
    report.ok(n == 0, "control: an unfenced commit with synchronous_commit = off is lost by the "
              "crash (the harness sees a lost commit)", "%d rows survived" % n)
    c.close()
except Exception as e:
    report.ok(False, "control: ran to the end", repr(e))

admin = connect("postgres")
for name in ("wal_writer_delay", "wal_writer_flush_after", "bgwriter_lru_maxpages"):
    admin.execute("ALTER SYSTEM RESET " + name)
admin.execute("SELECT pg_reload_conf()")
admin.execute("DROP DATABASE " + DB)
admin.close()
sys.exit(report.finish("sql_edition_sync_commit"))
