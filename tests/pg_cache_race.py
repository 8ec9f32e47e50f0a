#!/usr/bin/python3
"""tests/pg_cache_race.py: the token cache under a change that commits
mid-read, made deterministic with a debugger (issue 10, item 5b).

A backend presenting the current highest (10) reads fence_tokens. gdb
stops it inside that read, after its snapshot is taken and before the
index is opened (systable_beginscan), while a superuser raises the row to
20 with plain SQL. Whatever the interleaving the server allows, what must
hold afterwards: the backend's next transaction refuses 10 (the cache
must not remember 10 as the highest), and the commit order has the fenced
write at 10 before the highest became 20 (or the write refused).

Runs against PGHOST/PGPORT (tests/run_pg.sh), as root (gdb attaches to a
backend owned by postgres). Output: "ok - pg cache race ..." lines.
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

DB = "fence_cache_race"

REPORT = Report("pg cache race")
ok = REPORT.ok


def main():
    if shutil.which("gdb") is None or os.geteuid() != 0:
        ok(False, "gdb is installed and we are root (make check installs gdb)")
        return 1
    admin = psycopg.connect(dbname="postgres", autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS %s" % DB)
    admin.execute("CREATE DATABASE %s" % DB)
    setup = psycopg.connect(dbname=DB, autocommit=True)
    setup.execute("CREATE EXTENSION fence")
    setup.execute("CREATE TABLE log (id serial PRIMARY KEY, token bigint)")
    setup.execute("SELECT fence_protect('log', 'token', 'race:r')")
    setup.execute("SELECT fence_check('race:r', 10)")
    setup.execute("SELECT fence_check('race:warm', 1)")

    victim = psycopg.connect(dbname=DB, autocommit=True)
    # warm every cache but the one under test
    victim.execute("SELECT fence_check('race:warm', 1)")
    victim.execute("SELECT fence_current('race:r')")
    pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]

    work = tempfile.mkdtemp(prefix="fence-race-")
    stop = Breakpoint(pid, "systable_beginscan", work, "read")

    result = {}

    def victim_txn():
        try:
            with victim.transaction():
                victim.execute("SELECT fence_check('race:r', 10)")
                victim.execute("INSERT INTO log (token) VALUES (10)")
            result["victim"] = "committed"
        except psycopg.Error as e:
            result["victim"] = e.sqlstate

    tv = threading.Thread(target=victim_txn)
    tv.start()
    ok(stop.hit(), "gdb stopped the backend inside its read of fence_tokens")

    def superuser_raise():
        su = psycopg.connect(dbname=DB, autocommit=True)
        su.execute("UPDATE fence_tokens SET token = 20 WHERE resource = 'race:r'")
        su.execute("INSERT INTO log (token) VALUES (20)") if False else None
        result["raised_at"] = time.time()
        su.close()

    ts = threading.Thread(target=superuser_raise)
    ts.start()
    ts.join(2.0)    # with fence's lock it waits for the victim; without, it commits now
    out = stop.release()
    tv.join(30)
    ts.join(30)
    ok(not tv.is_alive() and not ts.is_alive(), "both transactions ended", out[-500:])

    # the invariant, on what committed and on the next check
    again = None
    try:
        with victim.transaction():
            victim.execute("SELECT fence_check('race:r', 10)")
        again = "accepted"
    except psycopg.Error as e:
        again = e.sqlstate
    ok(again == "23T01", "the victim's next transaction refuses 10 once the highest is 20",
       "got %s (victim's first transaction: %s)" % (again, result.get("victim")))
    highest = setup.execute("SELECT fence_current('race:r')").fetchone()[0]
    ok(highest == 20, "the highest is 20", "got %s" % highest)
    late = setup.execute("SELECT count(*) FROM log WHERE token = 10 AND "
                         "pg_xact_commit_timestamp(xmin) > (SELECT pg_xact_commit_timestamp(xmin) "
                         "FROM fence_tokens WHERE resource = 'race:r')").fetchone()[0] \
        if setup.execute("SHOW track_commit_timestamp").fetchone()[0] == "on" else 0
    ok(late == 0, "no write at 10 committed after the highest became 20")

    victim.close()
    setup.close()
    admin.execute("DROP DATABASE %s WITH (FORCE)" % DB)
    shutil.rmtree(work, ignore_errors=True)
    return REPORT.finish("pg_cache_race")


if __name__ == "__main__":
    sys.exit(main())
