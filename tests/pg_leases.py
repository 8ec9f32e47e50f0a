#!/usr/bin/python3
"""tests/pg_leases.py: PostgreSQL leases (fence_acquire, fence_renew,
fence_release) under crashes, failover, pg_dump, and paused workers.

On clusters this script starts itself (the machinery of tests/pg_faults.py):

  a) crash: `pg_ctl stop -m immediate` right after grants, renewals and a
     release, one of them inside a transaction that is rolled back and one
     inside a transaction still open at the crash: every call that returned
     is there after recovery, and the next grant is above every earlier one.
  b) failover: grants made on the primary are on a streaming standby
     (readable there; fence_acquire refused there) and on it after
     promotion, where the next grant is above them.
  c) pg_dump -Fc / pg_restore into a new database keeps fence_leases, and
     leases keep working there (in place, on restored rows).
  d) workers: N worker processes (no outside lock service) take leases on a
     few resources with fence_acquire, call fence_check right after, and do
     fenced read-modify-writes, each logged in the same transaction; the
     test stops workers with SIGSTOP past their TTL and resumes them. On the
     committed log: per resource, tokens never decrease in commit order,
     nothing stale committed, every acknowledged write is there, and the
     stale refusals the workers saw equal what fence_stats counted (when
     fence_stats exists).

Usage: /usr/bin/python3 tests/pg_leases.py [--pauses N] [--workers N]
(make check: 20 pauses; make stress: 1000).
"""
import argparse
import atexit
import multiprocessing
import os
import random
import signal
import sys
import tempfile
import threading
import time
import traceback

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_faults as faults  # noqa: E402  (its Cluster and build, not its scenarios)
from tap import Report  # noqa: E402

R = Report("pg leases")
STALE = "23T01"


def grants(conn):
    return {r: (h, t) for r, h, t in
            conn.execute("SELECT resource, holder::text, token FROM fence_leases").fetchall()}


# ---------------------------------------------------------------------------
# a) crash

def scenario_crash(cl):
    c = cl.connect()
    c.execute("CREATE EXTENSION fence")
    t1 = c.execute("SELECT fence_acquire('crash:a', 'w1', 600000)").fetchone()[0]
    t2 = c.execute("SELECT fence_acquire('crash:b', 'w1', 600000)").fetchone()[0]
    released = c.execute("SELECT fence_release('crash:b', 'w1', %s)", (t2,)).fetchone()[0]
    t3 = c.execute("SELECT fence_acquire('crash:b', 'w2', 600000)").fetchone()[0]
    renewed = c.execute("SELECT fence_renew('crash:a', 'w1', %s, 900000)", (t1,)).fetchone()[0]
    expiry = c.execute("SELECT expires_at FROM fence_leases WHERE resource = 'crash:a'").fetchone()[0]
    # a grant in a transaction that rolls back, and one in a transaction
    # still open when the server dies: both were seen by their callers
    with cl.connect(autocommit=False) as t:
        t4 = t.execute("SELECT fence_acquire('crash:c', 'w1', 600000)").fetchone()[0]
        t.rollback()
    open_tx = cl.connect(autocommit=False)
    t5 = open_tx.execute("SELECT fence_acquire('crash:d', 'w1', 600000)").fetchone()[0]
    before = grants(c)
    c.close()
    r = cl.stop("immediate")
    R.ok(r.returncode == 0, "crash: the server is stopped -m immediate", r.stdout)
    cl.start()
    cl.wait_accepting()
    c = cl.connect()
    after = grants(c)
    R.ok(after == before, "crash: every lease call that returned is there after recovery "
         "(grants, a release and regrant, a renewal, a grant rolled back, a grant in a "
         "transaction open at the crash)", "before %r after %r" % (before, after))
    R.ok(released and renewed and t3 > t2 and after.get("crash:c") == ("w1", t4)
         and after.get("crash:d") == ("w1", t5),
         "crash: the release and regrant, and the grants outside any committed transaction, "
         "survived", "%r" % (after,))
    exp_after = c.execute("SELECT expires_at FROM fence_leases WHERE resource = 'crash:a'").fetchone()[0]
    R.ok(exp_after == expiry, "crash: the renewed expiry survived", "%s vs %s" % (exp_after, expiry))
    nxt = c.execute("SELECT fence_acquire('crash:b', 'w2', 1000)").fetchone()[0]
    R.ok(nxt == t3, "crash: the live lease of w2 is still w2's after recovery", "%r" % nxt)
    other = c.execute("SELECT fence_acquire('crash:b', 'w3', 1000)").fetchone()[0]
    R.ok(other is None, "crash: another holder is still refused after recovery", "%r" % other)
    c.close()


# ---------------------------------------------------------------------------
# b) failover

def scenario_failover(primary):
    standby = faults.Cluster("lease_standby")
    try:
        c = primary.connect()
        c.execute("CREATE EXTENSION fence")
        r = faults.run(faults.as_postgres([
            faults.BINDIR + "/pg_basebackup", "-h", primary.sock, "-p", str(primary.port),
            "-U", "postgres", "-D", standby.data, "-R", "-X", "stream", "-c", "fast",
            "--no-sync"]))
        if r.returncode != 0:
            raise RuntimeError("pg_basebackup failed:\n" + r.stdout)
        standby.start()
        standby.wait_accepting(want_primary=False)
        s = standby.connect()
        toks = {}
        for i in range(5):
            toks["fo:%d" % i] = c.execute("SELECT fence_acquire(%s, 'old-primary', 600000)",
                                          ("fo:%d" % i,)).fetchone()[0]
        c.execute("SELECT fence_check('fo:0', %s)", (toks["fo:0"],))
        R.ok(faults.wait_replayed(c, s), "failover: the standby replays the grants")
        on_standby = grants(s)
        R.ok(all(on_standby.get(k) == ("old-primary", v) for k, v in toks.items()),
             "failover: every grant made in place on the primary is on the standby",
             "%r vs %r" % (on_standby, toks))
        try:
            s.execute("SELECT fence_acquire('fo:x', 'w', 1000)")
            refused = None
        except psycopg.Error as e:
            refused = e.sqlstate
        R.ok(refused == "25006", "failover: fence_acquire is refused on a hot standby (25006)",
             "got %r" % refused)
        s.close()
        c.close()
        primary.stop("immediate")
        r = faults.run(faults.as_postgres([faults.BINDIR + "/pg_ctl", "-D", standby.data,
                                           "-w", "promote"]))
        R.ok(r.returncode == 0, "failover: the standby is promoted", r.stdout)
        standby.wait_accepting()
        n = standby.connect()
        after = grants(n)
        R.ok(all(after.get(k) == ("old-primary", v) for k, v in toks.items()),
             "failover: the promoted standby has every lease", "%r" % after)
        R.ok(n.execute("SELECT fence_acquire('fo:1', 'new-holder', 1000)").fetchone()[0] is None,
             "failover: a live lease of the old primary's time is still live after promotion")
        n.execute("SELECT fence_release('fo:1', 'old-primary', %s)", (toks["fo:1"],))
        nxt = n.execute("SELECT fence_acquire('fo:1', 'new-holder', 1000)").fetchone()[0]
        R.ok(nxt is not None and nxt > toks["fo:1"],
             "failover: the next grant on the new primary is above the old primary's",
             "%r vs %r" % (nxt, toks["fo:1"]))
        n.close()
    finally:
        standby.stop_quietly()


# ---------------------------------------------------------------------------
# c) pg_dump / pg_restore

def scenario_dump(cl):
    c = cl.connect()
    c.execute("CREATE DATABASE src")
    c.execute("CREATE DATABASE dst")
    s = cl.connect("src")
    s.execute("CREATE EXTENSION fence")
    s.execute("SELECT fence_check('dump:a', 40)")
    ta = s.execute("SELECT fence_acquire('dump:a', 'holder-a', 600000)").fetchone()[0]
    tb = s.execute("SELECT fence_acquire('dump:b', 'holder-b', 1)").fetchone()[0]
    before = grants(s)
    s.close()
    dump = os.path.join(cl.dir, "src.dump")
    r = faults.run(faults.as_postgres([faults.BINDIR + "/pg_dump", "-h", cl.sock, "-p",
                                       str(cl.port), "-U", "postgres", "-Fc", "-f", dump, "src"]))
    R.ok(r.returncode == 0, "dump: pg_dump -Fc of a database with leases", r.stdout)
    r = faults.run(faults.as_postgres([faults.BINDIR + "/pg_restore", "-h", cl.sock, "-p",
                                       str(cl.port), "-U", "postgres", "-d", "dst",
                                       "--exit-on-error", dump]))
    R.ok(r.returncode == 0, "dump: pg_restore into a new database", r.stdout)
    d = cl.connect("dst")
    after = grants(d)
    R.ok(after == before, "dump: fence_leases restored as it was", "%r vs %r" % (after, before))
    R.ok(d.execute("SELECT fence_acquire('dump:a', 'intruder', 1000)").fetchone()[0] is None,
         "dump: a live lease is still live in the restored database")
    R.ok(d.execute("SELECT fence_renew('dump:a', 'holder-a', %s, 1000)", (ta,)).fetchone()[0],
         "dump: the holder renews its lease on the restored row (an in-place write)")
    time.sleep(0.02)
    nb = d.execute("SELECT fence_acquire('dump:b', 'new', 1000)").fetchone()[0]
    R.ok(nb == tb + 1, "dump: the next grant after restore is above the restored one",
         "%r vs %r" % (nb, tb))
    d.close()


# ---------------------------------------------------------------------------
# c2) synchronous replication that never confirms

def scenario_sync_cancelled(cl):
    """A lease call whose wait for synchronous standbys is cancelled
    (statement_timeout) must not hand out its token: a failover could lose
    the grant and give the same token to another holder."""
    c = cl.connect()
    c.execute("CREATE EXTENSION fence")
    c.execute("ALTER SYSTEM SET synchronous_standby_names = 'nosuch'")
    c.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)
    c.execute("SET statement_timeout = '500ms'")
    # a commit waits for the standbys too, past statement_timeout: a
    # watchdog cancels it, so that a regression fails instead of hanging
    watchdog = threading.Timer(5, c.cancel)
    watchdog.start()
    try:
        tok = c.execute("SELECT fence_acquire('sync:a', 'h1', 60000)").fetchone()[0]
        state = None
    except psycopg.Error as e:
        tok, state = None, e.sqlstate
    finally:
        watchdog.cancel()
    R.ok(tok is None and state == "57000",
         "sync: a grant whose synchronous-standby wait is cancelled is an error (57000), "
         "not a token", "token %r, sqlstate %r" % (tok, state))
    # the session cannot choose not to wait (1.5): a grant a failover loses
    # is granted again, and an application role may weaken its own setting
    c.execute("SET synchronous_commit = local")
    watchdog = threading.Timer(5, c.cancel)
    watchdog.start()
    try:
        tok = c.execute("SELECT fence_acquire('sync:b', 'h1', 60000)").fetchone()[0]
        state = None
    except psycopg.Error as e:
        tok, state = None, e.sqlstate
    finally:
        watchdog.cancel()
    R.ok(tok is None and state == "57000",
         "sync: with synchronous_commit = local a grant still waits for the standbys (its cancelled "
         "wait is 57000)", "token %r, sqlstate %r" % (tok, state))
    c.execute("ALTER SYSTEM RESET synchronous_standby_names")
    c.execute("SELECT pg_reload_conf()")
    c.close()


# ---------------------------------------------------------------------------
# d) workers paused past their TTL

TTL_MS = 300
RESOURCES = ("job:0", "job:1")


def worker(dsn, name, stop, seed, outq):
    rng = random.Random(seed)
    acked = []            # (resource, position, token) whose COMMIT returned
    stale_seen = 0
    conn = psycopg.connect(autocommit=True, **dsn)
    lease = None          # (resource, token)
    while not stop.is_set():
        try:
            if lease is None:
                r = rng.choice(RESOURCES)
                tok = conn.execute("SELECT fence_acquire(%s, %s, %s)", (r, name, TTL_MS)).fetchone()[0]
                if tok is None:
                    time.sleep(0.01)
                    continue
                # the README's advice: fence right after acquiring
                conn.execute("SELECT fence_check(%s, %s)", (r, tok))
                lease = (r, tok)
            r, tok = lease
            with conn.transaction():
                conn.execute("SELECT fence_check(%s, %s)", (r, tok))
                pos = conn.execute("UPDATE lease_counter SET n = n + 1 WHERE resource = %s "
                                   "RETURNING n", (r,)).fetchone()[0]
                conn.execute("INSERT INTO lease_log VALUES (%s, %s, %s, %s)", (r, pos, tok, name))
            acked.append((r, pos, tok))
            # a holder that does not look at the clock: it renews, and keeps
            # writing with its token even when the renewal failed
            if rng.random() < 0.5:
                conn.execute("SELECT fence_renew(%s, %s, %s, %s)", (r, name, tok, TTL_MS))
            if rng.random() < 0.05:
                conn.execute("SELECT fence_release(%s, %s, %s)", (r, name, tok))
                lease = None
        except psycopg.errors.Error as e:
            if e.sqlstate == STALE:
                stale_seen += 1
                lease = None
            elif e.sqlstate in ("40001", "40P01"):
                pass
            else:
                outq.put((name, "error", "%s %s" % (e.sqlstate, e)))
                break
    stats = None
    try:
        if conn.execute("SELECT to_regclass('fence_stats') IS NOT NULL").fetchone()[0]:
            stats = conn.execute("SELECT coalesce(sum(rejected), 0) FROM fence_stats "
                                 "WHERE resource = ANY(%s)", (list(RESOURCES),)).fetchone()[0]
    except psycopg.Error:
        stats = None
    conn.close()
    outq.put((name, "done", (acked, stale_seen, stats)))


def scenario_workers(cl, nworkers, pauses, seed):
    c = cl.connect()
    c.execute("CREATE EXTENSION fence")
    c.execute("CREATE TABLE lease_counter (resource text PRIMARY KEY, n bigint NOT NULL)")
    c.execute("INSERT INTO lease_counter SELECT unnest(%s::text[]), 0", (list(RESOURCES),))
    c.execute("CREATE TABLE lease_log (resource text, pos bigint, token bigint, worker text, "
              "PRIMARY KEY (resource, pos))")
    dsn = dict(host=cl.sock, port=cl.port, user="postgres", dbname="postgres")
    rng = random.Random(seed)
    # each pause is past the TTL; the run lasts as long as the pauses need
    pause_s = TTL_MS / 1000.0 * 1.5
    ctx = multiprocessing.get_context("fork")
    outq = ctx.Queue()
    stop = ctx.Event()
    procs = [ctx.Process(target=worker, args=(dsn, "w%d" % i, stop, seed + i, outq))
             for i in range(nworkers)]
    for p in procs:
        p.start()
    done_pauses = 0
    try:
        time.sleep(0.5)
        while done_pauses < pauses:
            victim = rng.choice(procs)
            os.kill(victim.pid, signal.SIGSTOP)
            time.sleep(pause_s + rng.random() * 0.2)
            os.kill(victim.pid, signal.SIGCONT)
            done_pauses += 1
            time.sleep(rng.random() * 0.05)
        time.sleep(0.5)
    finally:
        stop.set()
        for p in procs:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
    results = {}
    errors = []
    deadline = time.monotonic() + 60
    while len(results) < nworkers and time.monotonic() < deadline:
        try:
            name, kind, payload = outq.get(timeout=5)
        except Exception:
            continue
        if kind == "error":
            errors.append("%s: %s" % (name, payload))
        else:
            results[name] = payload
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    R.ok(not errors and len(results) == nworkers,
         "workers: %d workers ran to the end without unexpected errors" % nworkers,
         "; ".join(errors[:5]) + " results from %d" % len(results))
    R.ok(done_pauses >= pauses, "workers: %d SIGSTOP pauses past the %d ms TTL (wanted %d)"
         % (done_pauses, TTL_MS, pauses))

    log = c.execute("SELECT resource, pos, token, worker FROM lease_log ORDER BY resource, pos").fetchall()
    decreases = []
    highest = {}
    for r, pos, tok, w in log:
        if tok < highest.get(r, -1):
            decreases.append((r, pos, tok, highest[r], w))
        highest[r] = max(highest.get(r, -1), tok)
    R.ok(not decreases, "workers: per resource, tokens never decrease in commit order "
         "(%d committed writes)" % len(log), "%r" % decreases[:5])
    current = dict(c.execute("SELECT resource, token FROM fence_tokens WHERE resource = ANY(%s)",
                             (list(RESOURCES),)).fetchall())
    R.ok(all(current.get(r) == highest.get(r) for r in RESOURCES if r in highest),
         "workers: fence_tokens holds the highest committed token of each resource",
         "%r vs %r" % (current, highest))
    counters = dict(c.execute("SELECT resource, n FROM lease_counter").fetchall())
    gaps = [r for r in RESOURCES
            if [p for rr, p, _, _ in log if rr == r] != list(range(1, counters[r] + 1))]
    R.ok(not gaps, "workers: the log has every committed position, no gap", "%r" % gaps)
    committed = {(r, p, t) for r, p, t, _ in log}
    acked = [a for (a_list, _, _) in results.values() for a in a_list]
    lost = [a for a in acked if tuple(a) not in committed]
    R.ok(acked and not lost, "workers: 0 acknowledged writes lost (%d acknowledged)" % len(acked),
         "%r" % lost[:5])
    stale_seen = sum(s for (_, s, _) in results.values())
    grants_made = c.execute("SELECT coalesce(sum(token), 0) FROM fence_leases "
                            "WHERE resource = ANY(%s)", (list(RESOURCES),)).fetchone()[0]
    print("# workers: %d committed writes, %d stale refusals seen by workers, highest grants %s"
          % (len(log), stale_seen, grants_made))
    counted = [s for (_, _, s) in results.values()]
    if all(s is not None for s in counted):
        R.ok(sum(counted) == stale_seen,
             "workers: fence_stats counted every stale refusal the workers saw (%d)" % stale_seen,
             "fence_stats %d, workers %d" % (sum(counted), stale_seen))
    c.close()


# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pauses", type=int, default=20)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print("# pg_leases: seed %d" % seed)
    started = time.monotonic()
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, faults.on_signal)
    atexit.register(faults.cleanup)
    for k in list(os.environ):
        if k.startswith("PG") and not k.startswith("PG_"):
            del os.environ[k]
    faults.WORK = tempfile.mkdtemp(prefix="fence-leases.", dir="/tmp")
    os.chmod(faults.WORK, 0o755)
    faults.INSTALL = os.path.join(faults.WORK, "install")
    try:
        faults.build()
        faults.chown_postgres(faults.WORK)

        def with_cluster(name, fn, *fargs):
            cl = faults.Cluster(name, "-c wal_level=replica")
            try:
                cl.initdb()
                cl.start()
                fn(cl, *fargs)
            except Exception:
                R.ok(False, "%s ran to the end" % name, traceback.format_exc())
                print(faults.tail(cl.log, 15))
            finally:
                cl.stop_quietly()

        with_cluster("lease_crash", scenario_crash)
        with_cluster("lease_primary", scenario_failover)
        with_cluster("lease_dump", scenario_dump)
        with_cluster("lease_sync", scenario_sync_cancelled)
        with_cluster("lease_workers", scenario_workers, args.workers, args.pauses, seed)
    except Exception:
        R.ok(False, "setup", traceback.format_exc())
    finally:
        faults.cleanup()
    print("# pg_leases: %.1f s" % (time.monotonic() - started))
    return R.finish("pg_leases")


if __name__ == "__main__":
    sys.exit(main())
