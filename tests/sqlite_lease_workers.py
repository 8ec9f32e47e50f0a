#!/usr/bin/python3
"""tests/sqlite_lease_workers.py: workers fenced by the database's own leases, no lock service.

Four worker processes share one WAL database file. Each takes a lease on
one resource with fence_acquire, calls fence_check with the granted token
right after, then does fenced read-modify-writes of a counter (a table
guarded by fence_protect, the token in the UPDATE) and logs each one in
the same transaction, renewing its lease between writes. Nothing outside
the database hands out tokens or leases.

The parent freezes workers with SIGSTOP while they hold a lease, between
reading the counter and writing it, keeps them frozen past their TTL until
another worker has taken the lease and committed a write with its newer
token, then resumes them: the zombie writes with its old token.

Proved, from the commit-order log (the log's rowid: SQLite has one writer):
tokens never decrease (0 stale accepted); every write a worker saw commit is
in the log and every log row was seen to commit by its worker (0
acknowledged writes lost); the counter equals the number of log rows and
each row's value is its position (no lost update); every resumed zombie was
refused once a newer token had committed. And fence_stats, which each worker
reads from its own connection before it exits: its rejections, summed over
the workers, equal the refusals the workers saw, and its accepts equal the
accepts they saw.

Usage: /usr/bin/python3 tests/sqlite_lease_workers.py [--pauses N] [--seed N]
(20 pauses in make check, 1000 in make stress). Prints "ok - ..." /
"not ok - ..." per assertion and "# " lines with the counts.
"""
import argparse
import multiprocessing
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.path.join(ROOT, "sqlite_ext", "fence")
RESOURCE = "counter-lease"
WORKERS = 4
TTL_MS = 150
BUSY_TIMEOUT = 10.0
HANG_GUARD = 30.0          # seconds a pause may wait for another worker's commit
failures = 0


def ok(cond, what, detail=""):
    global failures
    print(("ok - " if cond else "not ok - ") + "sqlite lease workers: " + what)
    if not cond:
        failures += 1
        if detail:
            print("#   " + str(detail)[:2000])
    sys.stdout.flush()


def connect(path):
    conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT)
    conn.enable_load_extension(True)
    conn.load_extension(EXTENSION)
    return conn


def is_stale(e):
    return isinstance(e, sqlite3.IntegrityError) and "stale fencing token" in str(e)


def worker(name, path, pipe, seed):
    """Lease, check, write until told to stop; report what was seen."""
    rng = random.Random(seed)
    seen = {"acks": [], "refused": 0, "accepted": 0, "zombies": [], "grants": 0}
    try:
        db = connect(path)
        token = None
        while True:
            if token is None:
                token = db.execute("SELECT fence_acquire(?, ?, ?)",
                                   (RESOURCE, name, TTL_MS)).fetchone()[0]
                if token is None:
                    time.sleep(rng.uniform(0.002, 0.01))
                    continue
                seen["grants"] += 1
                try:
                    db.execute("SELECT fence_check(?, ?)", (RESOURCE, token)).fetchone()
                    seen["accepted"] += 1
                except sqlite3.IntegrityError as e:
                    if not is_stale(e):
                        raise
                    seen["refused"] += 1
                    token = None
                    continue
            # read outside the write transaction, then maybe be frozen here
            n = db.execute("SELECT n FROM counter WHERE id = 1").fetchone()[0]
            pipe.send(("may-pause", token))
            reply = pipe.recv()
            if reply == "stop":
                db.execute("SELECT fence_release(?, ?, ?)", (RESOURCE, name, token))
                break
            paused = reply == "paused"
            try:
                db.execute("BEGIN IMMEDIATE")
                n = db.execute("SELECT n FROM counter WHERE id = 1").fetchone()[0]
                db.execute("UPDATE counter SET n = ?, tok = ? WHERE id = 1", (n + 1, token))
                seen["accepted"] += 1           # the guard accepted the row's token
                db.execute("INSERT INTO log(worker, token, n) VALUES (?, ?, ?)",
                           (name, token, n + 1))
                db.execute("COMMIT")
                seen["acks"].append((token, n + 1))
                if paused:
                    seen["zombies"].append((token, "committed"))
            except sqlite3.IntegrityError as e:
                if not is_stale(e):
                    raise
                db.execute("ROLLBACK")
                seen["refused"] += 1
                if paused:
                    seen["zombies"].append((token, "refused"))
                token = None
                continue
            if not db.execute("SELECT fence_renew(?, ?, ?, ?)",
                              (RESOURCE, name, token, TTL_MS)).fetchone()[0]:
                token = None
            elif rng.random() < 0.1:
                db.execute("SELECT fence_release(?, ?, ?)", (RESOURCE, name, token))
                token = None
        stats = db.execute("SELECT coalesce(sum(accepted), 0), coalesce(sum(rejected), 0) "
                           "FROM fence_stats WHERE resource = ?", (RESOURCE,)).fetchone()
        seen["stats"] = stats
        db.close()
        pipe.send(("done", seen))
    except Exception:
        pipe.send(("error", traceback.format_exc()))


def stopped(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pauses", type=int, default=20)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print("# seed %d, %d workers, %d pauses, ttl %d ms" % (args.seed, WORKERS, args.pauses, TTL_MS))

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "workers.db")
        db = connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, tok INTEGER)")
        db.execute("INSERT INTO counter VALUES (1, 0, 0)")
        db.execute("SELECT fence_protect('counter', 'tok', ?)", (RESOURCE,))
        db.execute("CREATE TABLE log(seq INTEGER PRIMARY KEY, worker TEXT, token INTEGER, n INTEGER)")

        ctx = multiprocessing.get_context("fork")
        procs, pipes = [], []
        for i in range(WORKERS):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=worker, args=("w%d" % i, path, theirs, args.seed * 10 + i))
            p.start()
            procs.append(p)
            pipes.append(mine)

        results = {}
        errors = []
        pauses_done = 0
        hung = 0
        pause_wanted = args.pauses
        # serve the workers' "may I be paused?" until enough pauses happened
        deadline_writes = 0
        while pauses_done < pause_wanted and not errors:
            ready = multiprocessing.connection.wait(pipes, timeout=HANG_GUARD)
            if not ready:
                errors.append("no worker spoke for %ds" % HANG_GUARD)
                break
            for c in ready:
                i = pipes.index(c)
                msg = c.recv()
                if msg[0] == "error":
                    errors.append(msg[1])
                    continue
                _, token = msg
                deadline_writes += 1
                if pauses_done >= pause_wanted or rng.random() < 0.6:
                    c.send("go")
                    continue
                # freeze it holding `token`, past its TTL, until a newer token committed
                pid = procs[i].pid
                os.kill(pid, signal.SIGSTOP)
                while not stopped(pid):
                    time.sleep(0.001)
                c.send("paused")
                time.sleep(TTL_MS / 1000.0 * 1.5)
                end = time.monotonic() + HANG_GUARD
                while time.monotonic() < end:
                    # other workers keep asking: let them go meanwhile
                    for o in multiprocessing.connection.wait(
                            [p for j, p in enumerate(pipes) if j != i], timeout=0.01):
                        m = o.recv()
                        if m[0] == "error":
                            errors.append(m[1])
                        else:
                            o.send("go")
                    newer = db.execute("SELECT count(*) FROM log WHERE token > ?",
                                       (token,)).fetchone()[0]
                    if newer or errors:
                        break
                else:
                    hung += 1
                os.kill(pid, signal.SIGCONT)
                pauses_done += 1
        # stop everyone (as each next asks) and collect
        for i, c in enumerate(pipes):
            while "w%d" % i not in results:
                if not c.poll(HANG_GUARD):
                    errors.append("w%d did not finish" % i)
                    break
                m = c.recv()
                if m[0] == "may-pause":
                    c.send("stop")
                elif m[0] == "done":
                    results["w%d" % i] = m[1]
                else:
                    errors.append(m[1])
                    break
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()

        ok(not errors, "every worker ran to the end without an unexpected error", errors)
        ok(pauses_done == pause_wanted and hung == 0,
           "%d workers frozen with SIGSTOP past their TTL while another took the lease and "
           "committed" % pauses_done, "hung: %d" % hung)

        log = db.execute("SELECT seq, worker, token, n FROM log ORDER BY seq").fetchall()
        counter = db.execute("SELECT n FROM counter").fetchone()[0]
        decreases = [(a, b) for a, b in zip(log, log[1:]) if b[2] < a[2]]
        ok(log and not decreases, "0 stale accepted: tokens never decrease in commit order "
           "(%d writes)" % len(log), decreases[:5])
        ok(counter == len(log) and all(r[3] == k + 1 for k, r in enumerate(log)),
           "no lost update: the counter is %d, each logged value its position" % counter)
        acked = sorted((w, t, n) for w, s in results.items() for t, n in s["acks"])
        logged = sorted((w, t, n) for _, w, t, n in log)
        ok(acked == logged, "0 acknowledged writes lost: what the workers saw commit is "
           "exactly the log (%d)" % len(acked),
           set(acked) ^ set(logged))
        zombies = [z for s in results.values() for z in s["zombies"]]
        refused = [z for z in zombies if z[1] == "refused"]
        ok(len(zombies) == pauses_done and len(refused) == len(zombies),
           "every resumed zombie's write was refused (%d of %d)" % (len(refused), len(zombies)),
           zombies)
        seen_refused = sum(s["refused"] for s in results.values())
        stats_rejected = sum(s["stats"][1] for s in results.values())
        seen_accepted = sum(s["accepted"] for s in results.values())
        stats_accepted = sum(s["stats"][0] for s in results.values())
        ok(len(results) == WORKERS and stats_rejected == seen_refused and seen_refused >= pauses_done,
           "fence_stats' rejections summed over the workers (%d) equal the refusals they saw (%d)"
           % (stats_rejected, seen_refused))
        ok(stats_accepted == seen_accepted,
           "fence_stats' accepts summed over the workers (%d) equal the accepts they saw (%d)"
           % (stats_accepted, seen_accepted))
        grants = sum(s["grants"] for s in results.values())
        print("# %d grants, %d writes committed, %d refusals, %d pauses"
              % (grants, len(log), seen_refused, pauses_done))
        db.close()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
