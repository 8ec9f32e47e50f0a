#!/usr/bin/python3
"""make demo: a paused lock holder wakes up and writes (Kleppmann 2016).

Four client processes, A to D, share a counter in one SQLite file (WAL) and
take turns through a lock service that hands out leases with a TTL and a
strictly increasing fencing token. Each client does read-modify-write: read
the counter, then write counter + 1. Client A reads, then is really stopped
(SIGSTOP, as by a GC pause or a VM migration) past its lease; B and C take
the lease with newer tokens and write; A is resumed (SIGCONT) and writes the
value it computed before its pause.

The scenario runs twice: with the fence off, A's write lands and the counter
is wrong (a lost update); with the fence on (fence_protect on the table, the
token in every write), A's write is refused with the stale-token error and
the counter is right. Exit status 0 when both runs behave so.

    make demo        (or /usr/bin/python3 demo/zombie_lease.py)
"""
import multiprocessing
import os
import pathlib
import signal
import sqlite3
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXTENSION = str(ROOT / "sqlite_ext" / "fence")
TTL = 1.0
TTY = sys.stdout.isatty()


def paint(text, colour):
    codes = {"red": "31", "green": "32", "yellow": "33", "bold": "1"}
    return f"\033[{codes[colour]}m{text}\033[0m" if TTY else text


class Timeline:
    def __init__(self):
        self.start = time.monotonic()

    def say(self, who, what):
        print(f"  t+{time.monotonic() - self.start:5.2f}s  {who:<13} {what}", flush=True)


class LockService:
    """Leases with a TTL, measured by this process's clock; tokens only grow."""

    def __init__(self, timeline, first_token=33):
        self.timeline, self.next_token = timeline, first_token
        self.holder, self.expires = None, 0.0

    def acquire(self, client):
        now = time.monotonic()
        if self.holder and now < self.expires:
            return None
        if self.holder:
            self.timeline.say("lock service", f"lease of {self.holder} expired")
        token, self.next_token = self.next_token, self.next_token + 1
        self.holder, self.expires = client, now + TTL
        self.timeline.say("lock service", f"grants the lease to {client} (token {token}, ttl {TTL:.1f}s)")
        return token

    def release(self, client):
        if self.holder == client:
            self.holder = None


def client_main(name, path, conn):
    """A client process: runs the parent's commands on its own connection."""
    db = sqlite3.connect(path, isolation_level=None, timeout=5)
    db.enable_load_extension(True)
    db.load_extension(EXTENSION)
    while True:
        command = conn.recv()
        if command[0] == "quit":
            return
        try:
            if command[0] == "read":
                conn.send(("ok", db.execute("SELECT n FROM counter WHERE id = 1").fetchone()[0]))
            elif command[0] == "write":
                _, n, token = command
                db.execute("UPDATE counter SET n = ?, tok = ? WHERE id = 1", (n, token))
                conn.send(("ok", n))
        except sqlite3.Error as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))


def run(fence_on):
    heading = "fence ON: the table is protected, every write carries its token" if fence_on \
        else "fence OFF: the table is not protected"
    print(paint(f"\n=== {heading} ===", "bold"))
    tmp = tempfile.TemporaryDirectory()
    path = os.path.join(tmp.name, "shop.db")
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("PRAGMA journal_mode = WAL")
    setup.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER, tok INTEGER)")
    setup.execute("INSERT INTO counter VALUES (1, 0, 0)")
    if fence_on:
        setup.enable_load_extension(True)
        setup.load_extension(EXTENSION)
        setup.execute("SELECT fence_protect('counter', 'tok', 'counter')")
    setup.close()

    timeline = Timeline()
    service = LockService(timeline)
    clients, pipes = {}, {}
    for name in "ABCD":
        parent_end, child_end = multiprocessing.Pipe()
        p = multiprocessing.Process(target=client_main, args=(name, path, child_end), daemon=True)
        p.start()
        clients[name], pipes[name] = p, parent_end

    def ask(name, *command):
        pipes[name].send(command)
        return pipes[name].recv()

    def turn(name):
        """One ordinary holder: lease, read, write n + 1, release."""
        token = service.acquire(name)
        n = ask(name, "read")[1]
        timeline.say(name, f"reads counter = {n}")
        status, detail = ask(name, "write", n + 1, token)
        timeline.say(name, f"writes counter = {n + 1} with token {token}: {status}")
        service.release(name)
        return status == "ok"

    accepted = 0
    zombie_refused, zombie_landed = False, False
    try:
        token_a = service.acquire("A")
        n_a = ask("A", "read")[1]
        timeline.say("A", f"reads counter = {n_a}")
        os.kill(clients["A"].pid, signal.SIGSTOP)
        timeline.say("A", paint("*** paused (SIGSTOP): a GC pause, a VM migration ***", "yellow"))
        # A stays stopped past its lease; nobody tells it
        while time.monotonic() < service.expires + 0.2:
            time.sleep(0.05)
        accepted += turn("B")
        accepted += turn("C")
        os.kill(clients["A"].pid, signal.SIGCONT)
        timeline.say("A", paint("*** resumed (SIGCONT): believes it still holds the lease ***", "yellow"))
        status, detail = ask("A", "write", n_a + 1, token_a)
        if status == "ok":
            zombie_landed = True
            timeline.say("A", paint(f"writes counter = {n_a + 1} with token {token_a}: ACCEPTED", "red"))
        else:
            zombie_refused = "stale fencing token" in detail
            timeline.say("A", paint(f"writes counter = {n_a + 1} with token {token_a}: REFUSED", "green"))
            timeline.say("", f"  {detail}")
        accepted += turn("D")
        final = sqlite3.connect(path).execute("SELECT n FROM counter").fetchone()[0]
    finally:
        for name, p in clients.items():
            if p.is_alive():
                os.kill(p.pid, signal.SIGCONT)
                pipes[name].send(("quit",))
                p.join(2)
                if p.is_alive():
                    p.kill()
        tmp.cleanup()

    expected = accepted + (1 if zombie_landed else 0)
    if fence_on:
        good = zombie_refused and final == expected
        verdict = (f"zombie write REFUSED - counter is {final}, as expected ({accepted} accepted increments)"
                   if good else f"unexpected: zombie refused={zombie_refused}, counter {final}, expected {expected}")
    else:
        good = zombie_landed and final != expected
        verdict = (f"zombie write ACCEPTED - counter is {final}, expected {expected}: lost update"
                   if good else f"unexpected: zombie landed={zombie_landed}, counter {final}")
    label = "fence on" if fence_on else "fence off"
    print(paint(f"  VERDICT ({label}): {verdict}", "green" if fence_on and good else "red" if good else "yellow"))
    return good


def main():
    if not os.path.exists(EXTENSION + ".so"):
        print("build the extension first: make", file=sys.stderr)
        return 2
    multiprocessing.set_start_method("fork")
    off = run(fence_on=False)
    on = run(fence_on=True)
    print()
    return 0 if off and on else 1


if __name__ == "__main__":
    sys.exit(main())
