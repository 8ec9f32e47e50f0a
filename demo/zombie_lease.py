#!/usr/bin/python3
"""make demo: a paused lease holder wakes up and writes (Kleppmann 2016).

What it shows. Four client processes, A to D, share a counter row in one
SQLite file (WAL mode, in a temporary directory). A lock service, run by
the parent process, hands out leases with a 1-second TTL and a strictly
increasing fencing token. Each client does what many real clients do: take
the lease, read the counter, check that its lease is still live, compute
n + 1, write it with its token, release the lease.

Client A takes the lease (token 33) and reads the counter. While it is
computing, the parent really stops it (SIGSTOP, standing in for a GC pause
or a VM migration). A's lease expires; B and C take the lease in turn
(tokens 34, 35) and each add one. Then A is resumed (SIGCONT): it believes
it still holds the lease and writes the value it computed before the pause,
with token 33. D goes last.

The scenario runs three times, with the same clients and the same SQL:

  fence off  the table is not protected: A's write lands over B's and C's,
             the counter shows fewer increments than were acknowledged
             (a lost update);
  fence on   SELECT fence_protect('counter', 'token', 'counter'): A's write
             is refused with the stale-token error and the counter is right;
  own lease  no lock service at all: each client takes the lease from the
             database itself, fence_acquire('counter', name, 1000) on the
             same SQLite file, calls fence_check with the token right after,
             and ends with fence_release. The lease expires on the
             database's clock while A is frozen, B gets a greater token, and
             A's write is refused just the same.

Exit status 0 when all three runs behave so, 1 otherwise.

How to run it:

    make demo        (builds sqlite_ext/fence.so first)
    /usr/bin/python3 demo/zombie_lease.py

Only /usr/bin/python3: its sqlite3 module can load extensions.
"""
import ctypes
import multiprocessing
import os
import signal
import sqlite3
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.path.join(ROOT, "sqlite_ext", "fence")  # load_extension adds .so
RESOURCE = "counter"
TTL = 1.0
FIRST_TOKEN = 33
# A client's "computing n + 1" step. The pause has to land inside it, so it
# is long compared with the parent's reaction time (well under a millisecond);
# were the pause ever late, the verdicts below would say so.
WORK = 0.25
# A client that waits for a busy lease retries this long after the expiry it
# was told, so that it never asks a hair too early.
RETRY_MARGIN = 0.02
# No step of the scenario takes more than a second or two; past this a client
# is stuck and the run is failed rather than left hanging.
STEP_LIMIT = 5.0

TTY = sys.stdout.isatty()


def paint(text, colour):
    codes = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}
    return f"\033[{codes[colour]}m{text}\033[0m" if TTY else text


class Timeline:
    def __init__(self):
        self.start = time.monotonic()

    def say(self, who, what, colour=None):
        line = f"  t+{time.monotonic() - self.start:.2f}s  {who:<13} {what}"
        print(paint(line, colour) if colour else line, flush=True)


class LockService:
    """Leases with a TTL on the service's own clock; tokens only ever grow.

    Like a real lease service it never tells a holder that its lease ended:
    the holder is expected to stop in time, which a paused process cannot.
    """

    def __init__(self, timeline):
        self.timeline = timeline
        self.next_token = FIRST_TOKEN
        self.holder = self.token = None
        self.expires = 0.0
        self.announced = True

    def seconds_to_expiry(self):
        """How long the parent may block before it must announce an expiry."""
        if self.holder is None or self.announced:
            return None
        return max(0.0, self.expires - time.monotonic())

    def tick(self):
        if self.holder is not None and not self.announced and time.monotonic() >= self.expires:
            self.announced = True
            self.timeline.say("lock service", f"lease of {self.holder} (token {self.token}) expired")

    def live(self):
        self.tick()
        return self.holder is not None and time.monotonic() < self.expires

    def acquire(self, who):
        if self.live() and self.holder != who:
            left = self.expires - time.monotonic()
            self.timeline.say("lock service", f"{who} asks for the lease: {self.holder} holds it "
                                              f"(token {self.token}) for {left:.2f}s more; {who} waits")
            return ("busy", left)
        self.holder, self.token = who, self.next_token
        self.next_token += 1
        self.expires = time.monotonic() + TTL
        self.announced = False
        self.timeline.say("lock service", f"grants lease to {who} (token {self.token}, ttl {TTL:.1f}s)")
        return ("granted", self.token, TTL)

    def release(self, who, token):
        if self.live() and (self.holder, self.token) == (who, token):
            self.holder = None
            self.timeline.say("lock service", f"{who} releases the lease (token {token})")
        else:
            self.timeline.say("lock service", f"release from {who} (token {token}) ignored: "
                                              f"that lease is no longer live")


def die_with_parent():
    # A parent killed outright (SIGKILL) gets no chance to resume and reap
    # its clients; without this a stopped A would linger for ever.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def db_now_ms(db):
    """The database's clock, as fence_acquire reads it (ms since the epoch)."""
    return db.execute("SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)").fetchone()[0]


def acquire_own(name, db, conn):
    """The database's own lease: (token, expires) or None when told to quit."""
    while True:
        asked = time.monotonic()
        token = db.execute("SELECT fence_acquire(?, ?, ?)",
                           (RESOURCE, name, int(TTL * 1000))).fetchone()[0]
        if token is not None:
            # the advice: fence at once, so every older holder is refused from now on
            db.execute("SELECT fence_check(?, ?)", (RESOURCE, token))
            conn.send(("note", f"fence_acquire -> token {token}; fence_check at {token} right after"))
            return token, asked + TTL
        holder, until = db.execute("SELECT holder, expires_at FROM fence_leases WHERE resource = ?",
                                   (RESOURCE,)).fetchone()
        left = max(0.0, (until - db_now_ms(db)) / 1000.0)
        conn.send(("note", f"fence_acquire -> NULL: {holder} holds the lease for {left:.2f}s "
                           f"more on the database's clock; {name} waits"))
        if conn.poll(left + RETRY_MARGIN):
            return None


def client_main(name, db_path, conn, inherited, own_lease=False):
    """One client process: on each "go", one lease-guarded increment."""
    die_with_parent()
    # Ctrl-C reaches the whole process group; the parent alone cleans up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    # Fork copied every pipe end open in the parent; holding them would keep
    # the parent (or this child) from ever seeing the other side hang up.
    for other in inherited:
        other.close()
    db = sqlite3.connect(db_path, isolation_level=None, timeout=STEP_LIMIT)
    db.enable_load_extension(True)
    db.load_extension(EXTENSION)
    conn.send(("ready",))
    try:
        while conn.recv()[0] == "go":
            # The client measures its lease from before it asked, on its own
            # clock, as lease clients must: it can only err on the safe side.
            while own_lease:
                got = acquire_own(name, db, conn)
                if got is None:
                    return
                token, expires = got
                break
            while not own_lease:
                asked = time.monotonic()
                conn.send(("acquire",))
                reply = conn.recv()
                if reply[0] == "granted":
                    _, token, ttl = reply
                    expires = asked + ttl
                    break
                # Waiting on the pipe rather than sleeping: a "quit" from the
                # parent ends the wait at once.
                if reply[0] != "busy" or conn.poll(reply[1] + RETRY_MARGIN):
                    return
            n = db.execute("SELECT n FROM counter WHERE id = 1").fetchone()[0]
            left = expires - time.monotonic()
            # The check every careful lease client makes; it passes for A too,
            # the pause comes after it.
            if left <= 0:
                conn.send(("gave up", n, token))
                conn.send(("done",))
                continue
            conn.send(("read", n, left, token))
            time.sleep(WORK)  # computing n + 1; A is frozen in here
            # Checking the lease again here would not help: a pause can fall
            # between any check and the write after it. Only the database,
            # judging the token at the write, can tell.
            try:
                db.execute("UPDATE counter SET n = ?, token = ? WHERE id = 1", (n + 1, token))
                conn.send(("wrote", n + 1, token))
            except sqlite3.IntegrityError as e:
                conn.send(("refused", n + 1, token, str(e)))
            except sqlite3.Error as e:
                conn.send(("error", n + 1, token, f"{type(e).__name__}: {e}"))
            if own_lease:
                released = db.execute("SELECT fence_release(?, ?, ?)",
                                      (RESOURCE, name, token)).fetchone()[0]
                conn.send(("note", f"fence_release -> {released}" +
                           ("" if released else ": that lease is no longer live")))
            else:
                conn.send(("release", token))
            conn.send(("done",))
    except (EOFError, OSError):
        pass  # the parent is gone
    finally:
        db.close()


def process_state(pid):
    """The state letter from /proc (T = stopped), or '?' where there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


class Run:
    """One run of the scenario on a fresh database, with the fence off or on."""

    def __init__(self, fence_on, own_lease=False):
        self.fence_on = fence_on
        self.own_lease = own_lease
        self.timeline = None
        self.tmp = tempfile.TemporaryDirectory(prefix="fence-demo-")
        self.db_path = os.path.join(self.tmp.name, "counter.db")
        self.procs, self.pipes = {}, {}

    def prepare(self):
        db = sqlite3.connect(self.db_path, isolation_level=None)
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":
            raise RuntimeError(f"could not switch {self.db_path} to WAL (got {mode})")
        db.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, token INTEGER)")
        # The row predates every lease, so it carries no token.
        db.execute("INSERT INTO counter VALUES (1, 0, NULL)")
        if self.fence_on:
            db.enable_load_extension(True)
            db.load_extension(EXTENSION)
            db.execute("SELECT fence_protect('counter', 'token', ?)", (RESOURCE,))
        db.close()

    def start_clients(self):
        ctx = multiprocessing.get_context("fork")
        ends = {name: ctx.Pipe() for name in "ABCD"}
        every_end = [end for pair in ends.values() for end in pair]
        for name, (parent_end, child_end) in ends.items():
            inherited = [end for end in every_end if end is not child_end]
            p = ctx.Process(target=client_main, name=f"client-{name}",
                            args=(name, self.db_path, child_end, inherited, self.own_lease),
                            daemon=True)
            p.start()
            self.procs[name], self.pipes[name] = p, parent_end
        for _, child_end in ends.values():
            child_end.close()
        for name in "ABCD":
            self.receive(name, None)  # ("ready",)

    def receive(self, name, service):
        """The next message from client `name`, serving the lock service meanwhile."""
        conn = self.pipes[name]
        deadline = time.monotonic() + STEP_LIMIT
        while True:
            # Wake up for a lease expiry too, so that it is announced when it happens.
            wait = deadline - time.monotonic()
            expiry = service.seconds_to_expiry() if service else None
            if expiry is not None:
                wait = min(wait, expiry)
            if conn.poll(max(0.0, wait)):
                msg = conn.recv()
            elif service is None or time.monotonic() >= deadline:
                raise RuntimeError(f"client {name} did not answer within {STEP_LIMIT:.0f}s")
            else:
                service.tick()
                continue
            if msg[0] == "note":  # a lease call the client made on the database itself
                self.timeline.say(name, msg[1])
            elif msg[0] == "acquire":
                conn.send(service.acquire(name))
            elif msg[0] == "release":
                service.release(name, msg[1])
            else:
                return msg

    def say_read(self, name, msg, timeline):
        kind, *rest = msg
        if kind != "read":
            raise RuntimeError(f"client {name} sent {msg!r} where a read was due")
        n, left, token = rest
        timeline.say(name, f"reads counter = {n} (lease live for {left:.2f}s more); computing {n} + 1")
        return n, token

    def say_outcome(self, name, msg, timeline, zombie):
        kind, *rest = msg
        if kind == "wrote":
            n, token = rest
            if zombie:
                timeline.say(name, f"writes counter = {n} with token {token}: ACCEPTED", "red")
            else:
                timeline.say(name, f"writes counter = {n} with token {token}: ok")
        elif kind == "refused":
            n, token, message = rest
            timeline.say(name, f"writes counter = {n} with token {token}: REFUSED", "green" if zombie else "red")
            timeline.say("", f"  sqlite3.IntegrityError: {message}", "dim")
        elif kind == "error":
            n, token, message = rest
            timeline.say(name, f"writes counter = {n} with token {token}: ERROR {message}", "red")
        else:
            raise RuntimeError(f"client {name} sent {msg!r} where a write was due")
        return kind, (rest[2] if kind != "wrote" else "")

    def finish(self, name, service):
        # Serves the client's release, which the next client's lease depends on.
        msg = self.receive(name, service)
        if msg[0] != "done":
            raise RuntimeError(f"client {name} sent {msg!r} where the end of its turn was due")

    def turn(self, name, service, timeline):
        """An ordinary client: lease, read, compute, write, release."""
        self.pipes[name].send(("go",))
        self.say_read(name, self.receive(name, service), timeline)
        kind, _ = self.say_outcome(name, self.receive(name, service), timeline, zombie=False)
        self.finish(name, service)
        return kind == "wrote"

    def counter(self):
        db = sqlite3.connect(self.db_path)
        try:
            return db.execute("SELECT n, token FROM counter WHERE id = 1").fetchone()
        finally:
            db.close()

    def scenario(self):
        """Returns (acknowledged increments, zombie outcome, zombie message, final counter)."""
        timeline = self.timeline = Timeline()
        service = None if self.own_lease else LockService(timeline)
        acknowledged = 0
        a = self.procs["A"].pid

        self.pipes["A"].send(("go",))
        n_a, token_a = self.say_read("A", self.receive("A", service), timeline)
        # A now sits in its computing step, lease still live: freeze it there.
        os.kill(a, signal.SIGSTOP)
        for _ in range(100):
            if process_state(a) == "T":
                break
            time.sleep(0.01)
        timeline.say("A", f"*** stopped by SIGSTOP (pid {a}, state {process_state(a)}): "
                          f"a GC pause, a VM migration ***", "yellow")

        # B asks at once, is told to wait, and gets the lease once A's expires.
        acknowledged += self.turn("B", service, timeline)
        acknowledged += self.turn("C", service, timeline)

        n, token = self.counter()
        timeline.say("database", f"counter = {n} (written with token {token}); "
                                 f"frozen A still holds n = {n_a} and token {token_a}")
        os.kill(a, signal.SIGCONT)
        timeline.say("A", "*** resumed (SIGCONT): believes it still holds the lease ***", "yellow")
        kind, zombie_message = self.say_outcome("A", self.receive("A", service), timeline, zombie=True)
        if kind == "wrote":
            acknowledged += 1
            timeline.say("", f"  (over counter = {n}: the increments of B and C are lost)", "red")
        self.finish("A", service)

        acknowledged += self.turn("D", service, timeline)
        final, _ = self.counter()
        timeline.say("database", f"final counter = {final}, after {acknowledged} acknowledged increments")
        return acknowledged, kind, zombie_message, final

    def stop_clients(self):
        for name, p in self.procs.items():
            if p.is_alive():
                try:
                    os.kill(p.pid, signal.SIGCONT)  # a stopped process cannot act on "quit"
                    self.pipes[name].send(("quit",))
                except OSError:
                    pass
        for p in self.procs.values():
            p.join(2)
            if p.is_alive():
                p.kill()
                p.join()
        for conn in self.pipes.values():
            conn.close()

    def __call__(self):
        label = "own lease" if self.own_lease else "fence on" if self.fence_on else "fence off"
        if self.own_lease:
            heading = ("fence ON, no lock service: fence_acquire on the SQLite file itself, "
                       "fence_check right after")
        elif self.fence_on:
            heading = ("fence ON: SELECT fence_protect('counter', 'token', 'counter'); "
                       "every write sets the token column")
        else:
            heading = "fence OFF: the counter table is not protected; the same writes, unchecked"
        print(paint(f"=== {heading} ===", "bold"), flush=True)
        try:
            self.prepare()
            self.start_clients()
            acknowledged, zombie, message, final = self.scenario()
        except Exception as e:  # a broken run is a failed run, not a traceback
            print(paint(f"  VERDICT ({label}): the run broke: {type(e).__name__}: {e}", "red"))
            return False
        finally:
            self.stop_clients()
            self.tmp.cleanup()

        if not self.fence_on:
            good = zombie == "wrote" and final < acknowledged
            if good:
                verdict = f"zombie write ACCEPTED - counter is {final}, expected {acknowledged}: lost update"
            else:
                verdict = (f"NOT AS EXPECTED - zombie write {zombie}, counter is {final} "
                           f"after {acknowledged} acknowledged increments")
        else:
            good = zombie == "refused" and "stale fencing token" in message and final == acknowledged == 3
            if good:
                verdict = f"zombie write REFUSED - counter is {final}, as expected"
            else:
                verdict = (f"NOT AS EXPECTED - zombie write {zombie}, counter is {final} "
                           f"after {acknowledged} acknowledged increments")
        colour = ("red" if not self.fence_on else "green") if good else "yellow"
        print(paint(f"  VERDICT ({label}): {verdict}", colour), flush=True)
        return good


def interrupted(signum, frame):
    raise KeyboardInterrupt


def main():
    if not os.path.exists(EXTENSION + ".so"):
        print(f"{EXTENSION}.so is missing: build it with make", file=sys.stderr)
        return 1
    # SIGTERM and SIGHUP clean up as Ctrl-C does: resume and reap the
    # clients, remove the temporary files. SIGHUP matters more than it seems:
    # the kernel sends it to a process group that is orphaned while one of
    # its members (A) is stopped, e.g. when the shell that started us dies.
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    began = time.monotonic()
    try:
        off = Run(fence_on=False)()
        print(flush=True)  # before the next fork, or the children repeat it
        on = Run(fence_on=True)()
        print(flush=True)
        own = Run(fence_on=True, own_lease=True)()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 1
    print(f"\nall three runs as expected ({time.monotonic() - began:.1f}s)" if off and on and own
          else "\nat least one run did not behave as expected")
    return 0 if off and on and own else 1


if __name__ == "__main__":
    sys.exit(main())
