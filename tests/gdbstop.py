"""tests/gdbstop.py: stop a PostgreSQL backend at a function with gdb, then
let it go, so that a race the server allows can be run in a chosen order
(tests/pg_cache_race.py, tests/pg_commit_window.py). Needs root (gdb
attaches to a backend owned by postgres).
"""
import os
import subprocess
import time


class Breakpoint:
    """gdb attached to backend pid, stopped at the first call of function
    once it is reached; hit() says whether it was, release() lets it run."""

    def __init__(self, pid, function, work, name):
        self.hit_file = os.path.join(work, "hit-" + name)
        self.go_file = os.path.join(work, "go-" + name)
        script = os.path.join(work, "gdb-%s.cmd" % name)
        with open(script, "w") as f:
            f.write("set pagination off\nset confirm off\n"
                    "break %s\ncontinue\n"
                    "shell touch %s\n"
                    "shell while [ ! -e %s ]; do sleep 0.05; done\n"
                    "delete\ndetach\nquit\n" % (function, self.hit_file, self.go_file))
        self.gdb = subprocess.Popen(["gdb", "-q", "-batch", "-x", script, "-p", str(pid)],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    universal_newlines=True)
        time.sleep(1.5)    # attached, breakpoint set, continuing

    def hit(self, timeout=20):
        """Wait until the backend stops at the breakpoint; False on timeout."""
        deadline = time.time() + timeout
        while not os.path.exists(self.hit_file) and time.time() < deadline:
            time.sleep(0.05)
        return os.path.exists(self.hit_file)

    def release(self, timeout=30):
        """Let the backend go on, detach; gdb's output."""
        open(self.go_file, "w").close()
        out, _ = self.gdb.communicate(timeout=timeout)
        return out
