#!/usr/bin/python3
"""tests/pg_commit_window.py: a same-token fence answered from the token
cache while an advance that holds no resource lock is committing, made
deterministic with a debugger (attacker review of the PostgreSQL side).

Two advances hold no lock of the resource's own: an escalated
transaction's (fenced on more than half of max_locks_per_transaction
resources, it takes fence_tokens' ExclusiveLock instead) and a superuser's
UPDATE of fence_tokens (the path of logical replication apply and of a
data-only restore). Both announce themselves first, and a "light" fence
that sees the announcement takes the path that waits for them. gdb stops
the advancer at AtEOXact_Inval: its commit is visible, its invalidation
messages are not sent yet, its locks are still held. A backend that has 10
cached as the highest then writes at 10. It must wait for the advancer and
be refused (23T01), never commit a write at 10 after 11 committed.

Runs against PGHOST/PGPORT (tests/run_pg.sh), as root (gdb attaches to a
backend owned by postgres). Output: "ok - pg commit window ..." lines.
"""
import os
import shutil
import sys
import tempfile
import threading
import time

import psycopg

from gdbstop import Breakpoint
from tap import Report

DB = "fence_commit_window"

REPORT = Report("pg commit window")
ok = REPORT.ok


def run_case(mode, work):
    resource = "cw:%s" % mode
    setup = psycopg.connect(dbname=DB, autocommit=True)
    setup.execute("CREATE TABLE log_%s (tok bigint, who text)" % mode)
    setup.execute("SELECT fence_protect('log_%s', 'tok', %%s)" % mode, (resource,))
    setup.execute("SELECT fence_check(%s, 10)", (resource,))

    writer = psycopg.connect(dbname=DB, autocommit=True)
    # the writer caches 10 as the highest
    with writer.transaction():
        writer.execute("INSERT INTO log_%s VALUES (10, 'writer first')" % mode)
    advancer = psycopg.connect(dbname=DB, autocommit=True)
    advancer.execute("BEGIN")
    if mode == "escalated":
        locks = int(advancer.execute("SHOW max_locks_per_transaction").fetchone()[0])
        advancer.execute("SELECT count(fence_check(%s || g, 1)) FROM generate_series(1, %s) g",
                         (resource + ":other:", locks))
        advancer.execute("INSERT INTO log_%s VALUES (11, 'advancer')" % mode)
    else:
        advancer.execute("UPDATE fence_tokens SET token = 11 WHERE resource = %s", (resource,))
    pid = advancer.execute("SELECT pg_backend_pid()").fetchone()[0]

    stop = Breakpoint(pid, "AtEOXact_Inval", work, mode)

    result = {}

    def commit_advance():
        try:
            advancer.execute("COMMIT")
            result["advancer"] = "committed"
        except psycopg.Error as e:
            result["advancer"] = e.sqlstate

    ta = threading.Thread(target=commit_advance)
    ta.start()
    ok(stop.hit(), "%s: gdb stopped the advancer's commit at AtEOXact_Inval" % mode)

    def write_again():
        try:
            with writer.transaction():
                writer.execute("INSERT INTO log_%s VALUES (10, 'writer again')" % mode)
            result["writer"] = "committed"
        except psycopg.Error as e:
            result["writer"] = e.sqlstate
        result["writer_done"] = time.time()

    tw = threading.Thread(target=write_again)
    tw.start()
    tw.join(2.0)
    waited = tw.is_alive()
    out = stop.release()
    ta.join(30)
    tw.join(30)
    ok(not ta.is_alive() and not tw.is_alive(), "%s: both transactions ended" % mode, out[-500:])
    ok(waited, "%s: the writer at 10 waited for the committing advancer" % mode,
       "writer: %s" % result.get("writer"))
    ok(result.get("writer") == "23T01",
       "%s: the writer at 10 is refused once 11 committed" % mode,
       "writer: %s, advancer: %s" % (result.get("writer"), result.get("advancer")))
    late = setup.execute("SELECT count(*) FROM log_%s WHERE who = 'writer again'" % mode).fetchone()[0]
    highest = setup.execute("SELECT fence_current(%s)", (resource,)).fetchone()[0]
    ok(late == 0 and highest == 11,
       "%s: no write at 10 committed after 11 (fence_tokens 11)" % mode,
       "late rows %s, highest %s" % (late, highest))
    writer.close()
    advancer.close()
    setup.close()


def main():
    if shutil.which("gdb") is None or os.geteuid() != 0:
        ok(False, "gdb is installed and we are root (make check installs gdb)")
        return 1
    admin = psycopg.connect(dbname="postgres", autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS %s" % DB)
    admin.execute("CREATE DATABASE %s" % DB)
    setup = psycopg.connect(dbname=DB, autocommit=True)
    setup.execute("CREATE EXTENSION fence")
    setup.close()
    work = tempfile.mkdtemp(prefix="fence-window-")
    try:
        for mode in ("escalated", "superuser"):
            try:
                run_case(mode, work)
            except Exception as e:
                ok(False, "%s: ran to the end" % mode, repr(e))
    finally:
        admin.execute("DROP DATABASE %s WITH (FORCE)" % DB)
        shutil.rmtree(work, ignore_errors=True)
    return REPORT.finish("pg_commit_window")


if __name__ == "__main__":
    sys.exit(main())
