#!/usr/bin/python3
"""tests/pg_stats.py: fence_stats with fence in shared_preload_libraries.

A server of its own (throwaway directory, private socket, fence installed
into a DESTDIR and preloaded by its full path), with
fence.stats_max_resources = 3 so that the full-table policy shows. Checks,
each on the view as another session reads it:

  - the scope is the server's, and counts from two sessions are summed;
  - rejections counted by fence_check's error, fence_try's false, a guard's
    stale error (one resource per table, and per row), with the last token
    and a time between the clock before and after;
  - counts survive ROLLBACK and PREPARE (attempts, not commits), and a
    session sees its own counts of an open transaction;
  - invalid input, "fencing token required" and tokenless writes under a
    fence count nowhere;
  - beyond 3 resources, every further one is counted in the NULL row, and
    the totals stay exact;
  - a role with no privileges reads the view; another database sees only
    its own rows.

The backend-only scope (fence not preloaded) is sql/fence_stats.sql.
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IS_ROOT = os.geteuid() == 0
BINDIR = subprocess.check_output(["pg_config", "--bindir"], universal_newlines=True).strip()
PKGLIBDIR = subprocess.check_output(["pg_config", "--pkglibdir"], universal_newlines=True).strip()
R = Report("pg stats")
STALE = "23T01"


def as_postgres(cmd):
    return (["runuser", "-u", "postgres", "--"] if IS_ROOT else []) + cmd


def run(cmd, cwd="/"):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, cwd=cwd)


class Server:
    def __init__(self, work):
        self.work = work
        self.data = os.path.join(work, "data")
        self.log = os.path.join(work, "server.log")
        self.install = os.path.join(work, "install")
        self.port = random.randint(20000, 59999)
        self.running = False

    def start(self, extra):
        r = run(as_postgres([BINDIR + "/initdb", "-D", self.data, "-A", "trust", "-U", "postgres",
                             "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"]))
        if r.returncode != 0:
            raise RuntimeError("initdb failed:\n" + r.stdout)
        opts = ("-k %s -p %d -c listen_addresses='' -c fsync=off -c extension_destdir=%s "
                "-c max_prepared_transactions=4 %s" % (self.work, self.port, self.install, extra))
        self.running = True
        r = run(as_postgres([BINDIR + "/pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60",
                             "-o", opts, "start"]))
        if r.returncode != 0:
            raise RuntimeError("pg_ctl start failed:\n%s\n%s" % (r.stdout, self.tail()))

    def stop(self):
        if self.running:
            run(as_postgres([BINDIR + "/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"]))
            self.running = False

    def tail(self):
        try:
            with open(self.log) as f:
                return "".join(f.readlines()[-15:])
        except OSError:
            return ""

    def connect(self, dbname="postgres", user="postgres", autocommit=True):
        return psycopg.connect(host=self.work, port=self.port, user=user, dbname=dbname,
                               autocommit=autocommit, connect_timeout=10)


def sqlstate(conn, sql, args=()):
    try:
        conn.execute(sql, args)
        return None
    except psycopg.Error as e:
        return e.sqlstate


def stats(conn):
    """resource -> (accepted, rejected, last_rejected_token, last_rejected_at)"""
    return {r[0]: tuple(r[1:]) for r in conn.execute(
        "SELECT resource, accepted, rejected, last_rejected_token, last_rejected_at "
        "FROM fence_stats").fetchall()}


def totals(conn):
    return conn.execute("SELECT coalesce(sum(accepted), 0), coalesce(sum(rejected), 0) "
                        "FROM fence_stats").fetchone()


def scenario(srv):
    admin = srv.connect()
    admin.execute("CREATE EXTENSION fence")
    R.ok(admin.execute("SELECT fence_stats_scope()").fetchone()[0] == "server",
         "fence_stats_scope() says server when fence is preloaded")
    cols = [r[0] for r in admin.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'fence_stats'::regclass "
        "AND attnum > 0 ORDER BY attnum").fetchall()]
    R.ok(cols == ["resource", "accepted", "rejected", "last_rejected_token", "last_rejected_at"],
         "the view's columns", repr(cols))
    R.ok(stats(admin) == {}, "nothing counted before any accept")

    # two sessions at the same token, summed
    s1, s2 = srv.connect(), srv.connect()
    s1.execute("SELECT fence_check('a', 5)")
    s1.execute("SELECT fence_check('a', 5)")
    s2.execute("SELECT fence_try('a', 5)")
    st = stats(admin)
    R.ok(st.get("a") == (3, 0, None, None), "accepts of two sessions are summed, equal tokens too",
         repr(st))

    # a session sees its own counts of an open transaction; they survive ROLLBACK
    s1.execute("BEGIN")
    s1.execute("SELECT fence_check('a', 5)")
    own = stats(s1).get("a")            # reading the view publishes the reader's counts
    other = stats(admin).get("a")
    s1.execute("COMMIT")
    s1.execute("BEGIN")
    s1.execute("SELECT fence_check('a', 5)")
    s1.execute("ROLLBACK")
    R.ok(own == (4, 0, None, None) and other == (4, 0, None, None),
         "a reader sees a session's counts once it published them (its own at once)",
         "own %r other %r" % (own, other))
    R.ok(stats(admin).get("a") == (5, 0, None, None), "an accept rolled back still counts",
         repr(stats(admin).get("a")))

    # rejections: fence_check's error, fence_try's false
    t0 = admin.execute("SELECT clock_timestamp()").fetchone()[0]
    state = sqlstate(s1, "SELECT fence_check('a', 3)")
    falsy = s2.execute("SELECT fence_try('a', 4)").fetchone()[0]
    t1 = admin.execute("SELECT clock_timestamp()").fetchone()[0]
    a = stats(admin).get("a")
    R.ok(state == STALE and falsy is False and a[:3] == (5, 2, 4) and t0 <= a[3] <= t1,
         "fence_check's stale error and fence_try's false count as rejections, the last token "
         "and time kept", "%s %s %r (%s .. %s)" % (state, falsy, a, t0, t1))

    # a guard: one resource for the table, and per row
    admin.execute("CREATE TABLE g (id int PRIMARY KEY, tok bigint)")
    admin.execute("SELECT fence_protect('g', 'tok', 'g')")
    admin.execute("INSERT INTO g VALUES (1, 5), (2, 5)")
    s1.execute("UPDATE g SET tok = 5")
    state = sqlstate(s1, "INSERT INTO g VALUES (3, 4)")
    R.ok(state == STALE and stats(admin).get("g")[:3] == (4, 1, 4),
         "a guard counts each row's token and its stale error",
         "%s %r" % (state, stats(admin).get("g")))
    admin.execute("CREATE TABLE p (id int PRIMARY KEY, tok bigint)")
    admin.execute("SELECT fence_protect('p', 'tok', 'p:', 'id')")
    admin.execute("INSERT INTO p VALUES (1, 7)")
    s2.execute("UPDATE p SET tok = 7 WHERE id = 1")
    state = sqlstate(s2, "UPDATE p SET tok = 6 WHERE id = 1")
    R.ok(state == STALE and stats(admin).get("p:1")[:3] == (2, 1, 6)
         and admin.execute("SELECT tok FROM p WHERE id = 1").fetchone()[0] == 7,
         "a per-row guard counts under the row's resource, its stale error too",
         "%s %r" % (state, stats(admin).get("p:1")))

    # what counts nowhere
    before = stats(admin)
    bad = [sqlstate(s1, "SELECT fence_check(NULL, 1)"), sqlstate(s1, "SELECT fence_check('', 1)"),
           sqlstate(s1, "SELECT fence_try('a', -1)"), sqlstate(s1, "SELECT fence_check('a', NULL)"),
           sqlstate(s1, "INSERT INTO g VALUES (4, NULL)"), sqlstate(s1, "UPDATE g SET id = id")]
    with s2.transaction():
        s2.execute("SELECT fence_check('g', 5)")
        s2.execute("UPDATE g SET id = id + 10")     # tokenless, under the fence: not an accept
    after = stats(admin)
    g_before, g_after = before["g"], after["g"]
    R.ok(bad == ["22004", "22023", "22023", "22004", "23T02", "23T02"]
         and {k: v for k, v in after.items() if k != "g"} == {k: v for k, v in before.items() if k != "g"}
         and g_after[0] == g_before[0] + 1 and g_after[1:] == g_before[1:],
         "invalid input, a missing token and tokenless writes under a fence count nowhere",
         "%r %r -> %r" % (bad, before, after))

    # PREPARE publishes too
    s3 = srv.connect(autocommit=False)
    s3.execute("SELECT fence_check('a', 5)")
    s3.execute("PREPARE TRANSACTION 'st1'")
    s3.close()
    admin.execute("ROLLBACK PREPARED 'st1'")
    R.ok(stats(admin)["a"][0] == 6, "an accept in a transaction PREPAREd and rolled back counts",
         repr(stats(admin)["a"]))

    # the full table: a, g, p:1 have rows; x, y, z go to the NULL row
    acc0, rej0 = totals(admin)
    s1.execute("SELECT fence_check('x', 1), fence_check('y', 1), fence_check('y', 1)")
    s2.execute("SELECT fence_check('z', 9)")
    s2.execute("SELECT fence_try('z', 8)")
    st = stats(admin)
    acc1, rej1 = totals(admin)
    R.ok(set(st) == {"a", "g", "p:1", None} and st[None][:3] == (4, 1, 8)
         and (acc1, rej1) == (acc0 + 4, rej0 + 1),
         "beyond fence.stats_max_resources, every further resource counts in the NULL row "
         "and the totals stay exact", repr(st))
    s1.execute("SELECT fence_check('a', 5)")
    R.ok(stats(admin)["a"][0] == 7, "a resource with a row of its own still counts there")
    # one transaction counting more resources than the bound (its own
    # memory is published and emptied on the way): none lost
    null_before = stats(admin)[None][0]
    with s2.transaction():
        s2.execute("SELECT count(fence_check('bulk:' || g, 1)) FROM generate_series(1, 50) g")
        s2.execute("SELECT fence_check('a', 5)")
    st = stats(admin)
    R.ok(st[None][0] == null_before + 50 and st["a"][0] == 8 and totals(admin)[0] == acc1 + 1 + 51,
         "a transaction counting 51 resources past the bound loses none", repr(st))

    # readable by a role with no privilege; per database
    admin.execute("CREATE ROLE stats_reader LOGIN")
    rd = srv.connect(user="stats_reader")
    R.ok(stats(rd) == stats(admin), "a role with no privileges reads the view")
    rd.close()
    admin.execute("CREATE DATABASE other")
    o = srv.connect(dbname="other")
    o.execute("CREATE EXTENSION fence")
    o.execute("SELECT fence_check('a', 1)")
    R.ok(stats(o) == {None: (1, 0, None, None)} and stats(admin)["a"][0] == 8,
         "another database sees only its own rows (here its NULL row: the table is full)",
         repr(stats(o)))
    o.close()
    for c in (s1, s2, admin):
        c.close()


def scenario_backend(srv):
    """Not preloaded: this backend's counts, bounded by the setting's text."""
    c = srv.connect()
    c.execute("CREATE EXTENSION fence")
    c.execute("SELECT fence_check('a', 1), fence_check('b', 1), fence_check('c', 1), "
              "fence_check('d', 1), fence_try('d', 0)")
    st = stats(c)
    R.ok(c.execute("SELECT fence_stats_scope()").fetchone()[0] == "backend"
         and set(st) == {"a", "b", None} and st[None][:3] == (2, 1, 0),
         "not preloaded: this backend's counts, beyond fence.stats_max_resources in the NULL row",
         repr(st))
    other = srv.connect()
    R.ok(stats(other) == {}, "not preloaded: another backend sees only its own (none)")
    other.close()
    c.close()


def main():
    work = tempfile.mkdtemp(prefix="fence-stats.")
    os.chmod(work, 0o755)
    srv = Server(work)
    try:
        r = run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext"), "with_llvm=no"], cwd=ROOT)
        if r.returncode == 0:
            r = run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext"), "with_llvm=no", "install",
                     "DESTDIR=" + srv.install], cwd=ROOT)
        if r.returncode != 0:
            raise RuntimeError("building fence failed:\n" + r.stdout)
        if IS_ROOT:
            subprocess.run(["chown", "-R", "postgres", work], check=True)
        lib = srv.install + PKGLIBDIR + "/fence"
        srv.start("-c shared_preload_libraries='%s' -c fence.stats_max_resources=3" % lib)
        scenario(srv)
        srv.stop()
        shutil.rmtree(srv.data)
        srv.start("-c fence.stats_max_resources=2")
        scenario_backend(srv)
    except Exception:
        import traceback
        R.ok(False, "ran to the end", traceback.format_exc() + "\n" + srv.tail())
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)
    return R.finish("pg_stats")


if __name__ == "__main__":
    sys.exit(main())
