#!/usr/bin/python3
"""tests/sqlite_multiprocess.py: the fence holds across processes on one SQLite file.

Several worker processes share one WAL database and a counter table guarded
by fence_protect. A lock service in this (the parent) process hands out
strictly increasing tokens and, like a real service whose leases expire,
never waits for an older holder to finish, so holders overlap. Workers do
fenced read-modify-writes of the counter through every write path (an
explicit fence_check, or a guarded UPDATE that carries the token; BEGIN
IMMEDIATE or a deferred BEGIN) and log each accepted write in the same
transaction. Several times a worker is frozen with SIGSTOP between reading
the counter and writing it; while it is frozen another worker takes a newer
lease and commits; then it is resumed and writes with its old token.

Proved, from the log of accepted writes in commit order: tokens never
decrease, no update is lost, the counter equals the number of accepted
writes, fence_current is the highest logged token, every resumed zombie's
write was refused as a stale token and none of them reached the log, and
what each worker believes it committed is exactly what the log holds.

Usage: /usr/bin/python3 tests/sqlite_multiprocess.py [--seed N]
Prints "ok - sqlite multiprocess ..." / "not ok - ..." per assertion and "# "
lines with the counts; exit status 0 when every assertion holds.
"""
import argparse
import multiprocessing
import multiprocessing.connection
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
RESOURCE = "counter-lock"
STALE = "stale fencing token"

# (name, how it writes): "check" fences the transaction with fence_check
# before reading; "update" relies on the guard alone, the token travelling in
# the UPDATE. A deferred BEGIN that reads before its first write meets
# SQLITE_BUSY_SNAPSHOT whenever someone committed in between, which is the
# engine's own lost-update protection and must be treated as a rollback.
WORKERS = [
    ("w0", "check", "IMMEDIATE"),
    ("w1", "check", "DEFERRED"),
    ("w2", "update", "IMMEDIATE"),
    ("w3", "update", "DEFERRED"),
    ("w4", "mixed", None),
]
PAUSES = 5
PAUSE_EVERY = 100         # accepted writes between the scheduling of two pauses
TARGET_WRITES = 600       # the run stops granting after this many (and the pauses)
MIN_EACH = 10             # every worker must have written this often before the stop
BUSY_TIMEOUT = 10         # seconds; a frozen worker never holds a lock, so waits are short
HANG_GUARD = 60           # seconds; only to end a hung run, never a measurement


def connect(path):
    con = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    con.enable_load_extension(True)
    con.load_extension(EXTENSION)
    return con


def is_busy(exc):
    text = str(exc)
    return "locked" in text or "busy" in text


def rollback(con):
    # A failed statement inside BEGIN leaves the transaction open; whatever
    # failed, nothing of it may commit later by accident.
    if con.in_transaction:
        con.execute("ROLLBACK")


# ---------------------------------------------------------------------------
# worker processes

def write_once(con, name, token, how, begin, n_known=None):
    """One read-modify-write transaction. Returns ("committed", (name, token,
    n_before, n_after)), the row it logged; ("stale", message); or ("busy",
    message), after which nothing of it is committed.

    With n_known the counter is not read here: the zombie computes its write
    from the value it read before it was frozen, as a real paused client does.
    """
    try:
        con.execute("BEGIN IMMEDIATE" if begin == "IMMEDIATE" else "BEGIN")
        if how == "check":
            con.execute("SELECT fence_check(?, ?)", (RESOURCE, token)).fetchall()
        if n_known is None:
            n_before = con.execute("SELECT n FROM counter WHERE id = 1").fetchall()[0][0]
        else:
            n_before = n_known
        n_after = n_before + 1
        con.execute("UPDATE counter SET n = ?, tok = ? WHERE id = 1", (n_after, token))
        con.execute("INSERT INTO accepted(worker, token, n_before, n_after) "
                    "VALUES (?, ?, ?, ?)", (name, token, n_before, n_after))
        con.execute("COMMIT")
        return "committed", (name, token, n_before, n_after)
    except sqlite3.IntegrityError as exc:
        rollback(con)
        if str(exc).startswith(STALE):
            return "stale", str(exc)
        raise
    except sqlite3.OperationalError as exc:
        rollback(con)
        if is_busy(exc):
            return "busy", str(exc)
        raise


def play_zombie(con, pipe, name, token, how, stats):
    # Read outside any transaction and let the statement finish (fetchall):
    # a frozen process must hold neither the write lock nor an open snapshot,
    # or the others could not write (or its own write would end in
    # BUSY_SNAPSHOT instead of meeting the fence).
    n_read = con.execute("SELECT n FROM counter WHERE id = 1").fetchall()[0][0]
    assert not con.in_transaction
    pipe.send(("poised", token, n_read))
    # The parent freezes us about here, then wakes us and says go.
    msg = pipe.recv()
    assert msg == ("go",), msg
    busies = 0
    while True:
        # The label marks the row in the log, should the fence ever let it in.
        outcome, detail = write_once(con, name + " zombie", token, how, "DEFERRED",
                                     n_known=n_read)
        if outcome != "busy":
            break
        busies += 1
        stats["busy"] += 1
    if outcome == "committed":
        # The fence failed; report the write like any other so the log and the
        # reports still agree and the failure shows where it belongs.
        stats["commits"].append(detail)
        pipe.send(("committed", token))
        detail = "accepted: n %d -> %d" % detail[2:]
    pipe.send(("zombie_result", token, outcome, detail, busies))


def worker(index, path, pipe, seed):
    name, how, begin = WORKERS[index]
    rng = random.Random(seed * 100 + index)
    stats = {"name": name, "commits": [], "stale": 0, "busy": 0, "leases": 0}
    try:
        con = connect(path)
        while True:
            pipe.send(("lease",))
            msg = pipe.recv()
            if msg[0] == "stop":
                break
            token = msg[1]
            stats["leases"] += 1
            if msg[0] == "zombie":
                play_zombie(con, pipe, name, token, msg[2], stats)
                continue
            # A holder writes several times under one lease: equal tokens
            # must keep being accepted.
            writes = rng.randint(1, 3)
            while writes > 0:
                w_how = how if how != "mixed" else rng.choice(["check", "update"])
                w_begin = begin or rng.choice(["IMMEDIATE", "DEFERRED"])
                outcome, detail = write_once(con, name, token, w_how, w_begin)
                if outcome == "committed":
                    stats["commits"].append(detail)
                    pipe.send(("committed", token))
                    writes -= 1
                    # Think time: a worker that began its next transaction at
                    # once would take the write lock again before those asleep
                    # in the busy handler woke, and starve them.
                    time.sleep(rng.uniform(0, 0.002))
                elif outcome == "stale":
                    # a newer holder got in first: this lease is over
                    stats["stale"] += 1
                    break
                else:
                    stats["busy"] += 1
                    # BUSY_SNAPSHOT returns at once, without the busy
                    # handler's sleep; a client that retried at once would
                    # starve the others of the write lock.
                    time.sleep(rng.uniform(0.0005, 0.003))
        con.close()
        pipe.send(("done", stats))
    except Exception:
        pipe.send(("error", "%s: %s" % (name, traceback.format_exc())))
        sys.exit(1)


# ---------------------------------------------------------------------------
# the parent: lock service, conductor of the pauses, and judge

class Report:
    def __init__(self):
        self.failed = 0

    def ok(self, cond, what, details=()):
        cond = bool(cond)
        print("%s - sqlite multiprocess %s" % ("ok" if cond else "not ok", what), flush=True)
        if not cond:
            self.failed += 1
            for line in ([details] if isinstance(details, str) else details)[:10]:
                print("#   " + line, flush=True)

    def note(self, text):
        print("# " + text, flush=True)


def setup(path):
    con = connect(path)
    con.execute("PRAGMA journal_mode=WAL").fetchall()
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER, tok INTEGER)")
    con.execute("SELECT fence_protect('counter', 'tok', ?)", (RESOURCE,)).fetchall()
    con.execute("CREATE TABLE accepted(seq INTEGER PRIMARY KEY, worker TEXT, "
                "token INTEGER, n_before INTEGER, n_after INTEGER)")
    # Token 0 is the lock service's grant to the setup itself.
    con.execute("INSERT INTO counter VALUES (1, 0, 0)")
    con.close()


def wait_stopped(pid):
    _, status = os.waitpid(pid, os.WUNTRACED)
    return os.WIFSTOPPED(status)


class Conductor:
    """Serves leases and runs the pause scenario from the workers' messages."""

    def __init__(self, path, procs, pipes, report):
        self.path = path
        self.procs = procs
        self.pipes = pipes
        self.report = report
        self.last_grant = 0
        self.writes = 0
        self.writes_by = [0] * len(procs)
        self.pauses = []        # one dict per pause, in order
        self.zombie_for = None  # worker index the next zombie lease goes to
        self.frozen = None      # the pause whose worker is stopped right now
        self.stopping = False
        self.stats = {}
        self.errors = []
        self.hung = False
        self.con = None

    def grant(self):
        self.last_grant += 1
        return self.last_grant

    def pause_in_flight(self):
        return self.pauses and "outcome" not in self.pauses[-1]

    def schedule(self):
        k = len(self.pauses)
        if (self.zombie_for is None and not self.pause_in_flight() and k < PAUSES
                and self.writes >= (k + 1) * PAUSE_EVERY):
            # each pause on a different worker, so every write mode is frozen once
            self.zombie_for = k % len(self.procs)
        if (len(self.pauses) == PAUSES and not self.pause_in_flight()
                and self.writes >= TARGET_WRITES and min(self.writes_by) >= MIN_EACH):
            self.stopping = True

    def on_lease(self, i):
        if self.stopping:
            self.pipes[i].send(("stop",))
        elif self.zombie_for == i:
            self.zombie_for = None
            k = len(self.pauses)
            token = self.grant()
            # alternate the stale write's path: guarded UPDATE, then fence_check
            how = "update" if k % 2 == 0 else "check"
            self.pauses.append({"worker": WORKERS[i][0], "index": i, "token": token,
                                "how": how})
            self.pipes[i].send(("zombie", token, how))
        else:
            self.pipes[i].send(("lease", self.grant()))

    def on_poised(self, i, token, n_read):
        pause = self.pauses[-1]
        assert pause["index"] == i and pause["token"] == token
        pause["n_read"] = n_read
        os.kill(self.procs[i].pid, signal.SIGSTOP)
        pause["stopped"] = wait_stopped(self.procs[i].pid)
        # Only a lease granted after the stop proves another holder took over
        # while this one was frozen.
        pause["grants_at_stop"] = self.last_grant
        self.frozen = pause

    def on_committed(self, i, token):
        self.writes += 1
        self.writes_by[i] += 1
        pause = self.frozen
        if pause is not None and token > pause["grants_at_stop"]:
            pause["newer_token"] = token
            pause["newer_worker"] = WORKERS[i][0]
            row = self.con.execute("SELECT fence_current(?), (SELECT n FROM counter) ",
                                   (RESOURCE,)).fetchall()[0]
            pause["current_at_resume"], pause["n_at_resume"] = row
            self.resume()

    def resume(self):
        pause, self.frozen = self.frozen, None
        os.kill(self.procs[pause["index"]].pid, signal.SIGCONT)
        self.pipes[pause["index"]].send(("go",))

    def fail(self, text):
        self.errors.append(text)
        self.stopping = True
        # Once stopping, no newer lease comes to wake a frozen worker.
        if self.frozen is not None and self.procs[self.frozen["index"]].is_alive():
            self.resume()

    def on_zombie_result(self, i, token, outcome, detail, busies):
        pause = self.pauses[-1]
        assert pause["index"] == i and pause["token"] == token
        pause.update(outcome=outcome, detail=detail, busies=busies)

    def run(self):
        self.con = connect(self.path)
        live = dict(enumerate(self.pipes))
        deadline = time.monotonic() + HANG_GUARD
        while live:
            remaining = deadline - time.monotonic()
            ready = multiprocessing.connection.wait(list(live.values()),
                                                    timeout=max(remaining, 0))
            if not ready:
                self.hung = True
                self.errors.append("hang guard: no progress, still waiting for %s"
                                   % ", ".join(WORKERS[i][0] for i in live))
                return
            for pipe in ready:
                i = self.pipes.index(pipe)
                try:
                    msg = pipe.recv()
                except EOFError:
                    del live[i]
                    self.fail("%s died without reporting" % WORKERS[i][0])
                    continue
                kind = msg[0]
                if kind == "lease":
                    self.on_lease(i)
                elif kind == "poised":
                    self.on_poised(i, *msg[1:])
                elif kind == "committed":
                    self.on_committed(i, *msg[1:])
                elif kind == "zombie_result":
                    self.on_zombie_result(i, *msg[1:])
                elif kind == "done":
                    self.stats[i] = msg[1]
                    del live[i]
                elif kind == "error":
                    del live[i]
                    self.fail(msg[1])
                self.schedule()
        self.con.close()


def judge(path, conductor, procs, report):
    con = connect(path)
    log = con.execute("SELECT seq, worker, token, n_before, n_after FROM accepted "
                      "ORDER BY seq").fetchall()
    final_n, final_tok = con.execute("SELECT n, tok FROM counter WHERE id = 1").fetchone()
    current = con.execute("SELECT fence_current(?)", (RESOURCE,)).fetchone()[0]
    con.close()

    stats = conductor.stats
    pauses = conductor.pauses
    report.note("workers: %d (%s)" % (len(WORKERS), ", ".join(
        "%s %s/%s" % (n, h, b or "mixed") for n, h, b in WORKERS)))
    report.note("leases granted: %d, accepted writes: %d (%s)" % (
        conductor.last_grant, len(log),
        ", ".join("%s %d" % (WORKERS[i][0], len(s["commits"])) for i, s in sorted(stats.items()))))
    report.note("ordinary stale rejections (overtaken leases): %d, busy rollbacks: %d" % (
        sum(s["stale"] for s in stats.values()), sum(s["busy"] for s in stats.values())))
    for k, p in enumerate(pauses):
        report.note("pause %d: %s frozen with token %s after reading n=%s; %s committed token %s; "
                    "at resume fence_current=%s n=%s; zombie %s write: %s" % (
                        k + 1, p["worker"], p["token"], p.get("n_read"), p.get("newer_worker"),
                        p.get("newer_token"), p.get("current_at_resume"), p.get("n_at_resume"),
                        p["how"], p.get("outcome")))
    for err in conductor.errors:
        for line in err.rstrip().splitlines():
            report.note("error: " + line)

    report.ok(not conductor.errors and all(p.exitcode == 0 for p in procs)
              and len(stats) == len(procs),
              "all %d workers ran to the end without errors" % len(procs),
              ["%s exit code %s" % (WORKERS[i][0], p.exitcode) for i, p in enumerate(procs)])

    tokens = [row[2] for row in log]
    drops = [(a, b) for a, b in zip(log, log[1:]) if b[2] < a[2]]
    report.ok(log and not drops, "tokens never decrease in commit order (%d writes)" % len(log),
              ["seq %d token %d then seq %d token %d" % (a[0], a[2], b[0], b[2]) for a, b in drops])

    bad_step = [r for r in log if r[4] != r[3] + 1]
    report.ok(log and not bad_step, "every accepted write adds one (n_after = n_before + 1)",
              ["seq %d: %d -> %d" % (r[0], r[3], r[4]) for r in bad_step])

    expected, lost = 0, []
    for r in log:
        if r[3] != expected:
            lost.append("seq %d (%s, token %d) read n=%d, previous write left %d"
                        % (r[0], r[1], r[2], r[3], expected))
        expected = r[4]
    report.ok(log and not lost, "no lost update (each n_before is the previous n_after)", lost)

    report.ok(final_n == len(log), "final counter equals the accepted writes (%s = %d)"
              % (final_n, len(log)))

    report.ok(log and current == max(tokens) and final_tok == tokens[-1],
              "fence_current equals the highest logged token (%s)" % current,
              "fence_current %s, highest logged %s, counter tok %s, last logged %s"
              % (current, max(tokens) if tokens else None, final_tok,
                 tokens[-1] if tokens else None))

    stopped = [p for p in pauses if p.get("stopped")]
    report.ok(len(stopped) == PAUSES, "%d of %d zombies frozen with SIGSTOP after reading n"
              % (len(stopped), PAUSES))

    overtaken = [p for p in pauses
                 if p.get("newer_token", -1) > p["token"]
                 and p.get("current_at_resume", -1) >= p.get("newer_token", 0)
                 and p.get("n_at_resume", -1) > p.get("n_read", 0)]
    report.ok(len(overtaken) == PAUSES,
              "a newer lease committed while each zombie was frozen (%d of %d)"
              % (len(overtaken), PAUSES))

    rejected = [p for p in pauses
                if p.get("outcome") == "stale" and p["detail"].startswith(STALE)]
    report.ok(len(rejected) == PAUSES == len(pauses),
              "every resumed zombie write rejected as a stale token (%d of %d)"
              % (len(rejected), PAUSES),
              ["%s token %d: %s %s" % (p["worker"], p["token"], p.get("outcome"), p.get("detail"))
               for p in pauses if p not in rejected])
    if rejected:
        report.note("zombie rejection: " + rejected[0]["detail"])

    zombie_tokens = {p["token"] for p in pauses}
    leaked = [r for r in log if r[2] in zombie_tokens or r[1].endswith(" zombie")]
    report.ok(pauses and not leaked, "no zombie write in the accepted log",
              ["seq %d %s token %d" % (r[0], r[1], r[2]) for r in leaked])

    # A worker that misread an error (a busy taken for a commit, or the
    # reverse) would disagree with the log here.
    mismatch = []
    for i, s in stats.items():
        mine = sorted(s["commits"])
        logged = sorted(tuple(r[1:]) for r in log if r[1].split()[0] == s["name"])
        if mine != logged:
            mismatch.append("%s reports %d writes, log holds %d" % (s["name"], len(mine), len(logged)))
    report.ok(log and len(stats) == len(procs) and not mismatch
              and sum(len(s["commits"]) for s in stats.values()) == len(log),
              "what each worker saw committed is exactly the log", mismatch)


def kill_all(procs):
    for p in procs:
        if p.is_alive():
            # a stopped process ignores everything but SIGKILL and SIGCONT
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.join()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    report = Report()
    started = time.monotonic()
    report.note("seed %d (rerun with --seed %d)" % (seed, seed))

    # SIGTERM from make or CI must still run the cleanup below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ctx = multiprocessing.get_context("fork")
    procs = []
    with tempfile.TemporaryDirectory(prefix="fence-mp-") as tmp:
        path = os.path.join(tmp, "shared.db")
        try:
            # No connection may be open across fork: each process opens its own.
            setup(path)
            pipes = []
            for i in range(len(WORKERS)):
                parent_end, child_end = ctx.Pipe()
                p = ctx.Process(target=worker, args=(i, path, child_end, seed), daemon=True)
                p.start()
                child_end.close()
                procs.append(p)
                pipes.append(parent_end)
            conductor = Conductor(path, procs, pipes, report)
            conductor.run()
            if conductor.hung:
                # judge a still database, not one the stuck run keeps writing
                kill_all(procs)
            else:
                # every worker has reported "done" or failed: exits are imminent
                for p in procs:
                    p.join(timeout=HANG_GUARD)
            judge(path, conductor, procs, report)
        except BaseException:
            # SIGTERM (as SystemExit) and ^C too: say so before cleaning up
            report.ok(False, "run completed", traceback.format_exc().splitlines())
        finally:
            kill_all(procs)
    report.note("elapsed %.1f s" % (time.monotonic() - started))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
