#!/usr/bin/python3
"""examples/run.py: run the examples against throwaway servers.

    /usr/bin/python3 examples/run.py                 every example
    /usr/bin/python3 examples/run.py etcd_psycopg    one (or several) by name

For each example this starts what it needs (a PostgreSQL 15 cluster with
fence installed, etcd, ZooKeeper, Redis: loopback only, data in a temporary
directory), builds the C examples, runs the example with the addresses in
its environment, shows what it printed, and stops every server whatever
happens. The servers are started by tests/lockservice/harness.py's helpers
(parent-death signals included, so not even a kill -9 of this script leaves
one running). Servers come from Debian packages: `make check` installs them
(tests/install_deps.sh).

Prints "ok - example NAME" or "not ok - example NAME" per example (make
check counts these); exit status 0 iff every example did what it says.
"""
import atexit
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "lockservice"))
import harness  # noqa: E402  (the start/stop helpers of the lock-service tests)

PYTHON = "/usr/bin/python3"

# name: (what it needs, how it is run)
EXAMPLES = {
    "etcd_psycopg": ({"pg", "etcd"}, [PYTHON, "etcd_psycopg.py"]),
    "etcd_sqlite": ({"etcd"}, [PYTHON, "etcd_sqlite.py"]),
    "zookeeper_psycopg": ({"pg", "zookeeper"}, [PYTHON, "zookeeper_psycopg.py"]),
    "redis_sqlite": ({"redis"}, [PYTHON, "redis_sqlite.py"]),
    "libpq_c": ({"pg", "cc-libpq"}, ["{work}/libpq_fence"]),
    "sqlite3_c": ({"cc-sqlite"}, ["{work}/sqlite3_fence"]),
    "stacks_sqlite3": (set(), [PYTHON, "stacks_sqlite3.py"]),
    "stacks_sqlalchemy": (set(), [PYTHON, "stacks_sqlalchemy.py"]),
    "stacks_better_sqlite3": ({"node"}, ["node", "stacks_better_sqlite3.js"]),
    "stacks_sqlite3_shell": (set(), ["bash", "stacks_sqlite3_shell.sh"]),
}


class Servers:
    """Each server started on first need and kept for the next example."""

    def __init__(self, work):
        self.work = work
        self.pg = self.etcd = self.zk = self.redis = None
        self.dbs = 0

    def env(self, needs):
        env = dict(os.environ)
        for k in list(env):        # nothing of the caller's libpq environment applies
            if k.startswith("PG"):
                del env[k]
        env["FENCE_SQLITE_EXT"] = os.path.join(ROOT, "sqlite_ext", "fence")
        env["FENCE_EXAMPLE_DIR"] = tempfile.mkdtemp(dir=self.work)
        if "pg" in needs:
            if self.pg is None:
                self.pg = harness.PgCluster(self.work)
            self.dbs += 1
            db = "example%d" % self.dbs
            with self.pg.connect("postgres") as c:
                c.execute("CREATE DATABASE %s" % db)
            with self.pg.connect(db) as c:
                c.execute("CREATE EXTENSION fence")
            env["FENCE_PG_DSN"] = "host=%s port=%d user=postgres dbname=%s" % (
                self.pg.dir, self.pg.port, db)
        if "etcd" in needs:
            if self.etcd is None:
                self.etcd = harness.Etcd(self.work)
            env["ETCD_ENDPOINT"] = "127.0.0.1:%d" % self.etcd.port
        if "zookeeper" in needs:
            if self.zk is None:
                self.zk = harness.ZooKeeper(self.work)
            env["ZK_HOSTS"] = "127.0.0.1:%d" % self.zk.port
        if "node" in needs:
            # better-sqlite3, installed into build/node once (tests/stacks/run_node.sh)
            r = subprocess.run(["bash", os.path.join(ROOT, "tests", "stacks", "run_node.sh"), "install"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode:
                raise RuntimeError("could not install better-sqlite3:\n" + r.stdout)
            env["NODE_PATH"] = os.path.join(ROOT, "build", "node", "node_modules")
        if "redis" in needs:
            if self.redis is None:
                self.redis = harness.Redis(self.work)
            env["REDIS_PORT"] = str(self.redis.port)
        return env


def build_c(work, needs):
    """Build a C example as a user would, with cc and the library's flags."""
    if "cc-libpq" in needs:
        inc = subprocess.check_output(["pg_config", "--includedir"], text=True).strip()
        cmd = ["cc", "-Wall", "-Wextra", "-O2", "-o", os.path.join(work, "libpq_fence"),
               os.path.join(HERE, "libpq_fence.c"), "-I" + inc, "-lpq"]
    elif "cc-sqlite" in needs:
        cmd = ["cc", "-Wall", "-Wextra", "-O2", "-o", os.path.join(work, "sqlite3_fence"),
               os.path.join(HERE, "sqlite3_fence.c"), "-lsqlite3"]
    else:
        return None
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return None if r.returncode == 0 else r.stdout


def main(names):
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, harness._on_signal)
    atexit.register(harness.cleanup)
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        sys.exit("unknown example(s): %s; known: %s" % (", ".join(unknown), ", ".join(EXAMPLES)))
    if subprocess.run(["make", "-s", "-C", ROOT, "sqlite"], stdout=subprocess.DEVNULL).returncode:
        sys.exit("could not build sqlite_ext/fence.so")
    work = tempfile.mkdtemp(prefix="fence-examples.", dir="/tmp")
    os.chmod(work, 0o755)
    harness.TEMP_DIRS.append(work)
    servers = Servers(work)
    failed = 0
    try:
        for name in names or list(EXAMPLES):
            needs, argv = EXAMPLES[name]
            print("# example %s" % name, flush=True)
            try:
                err = build_c(work, needs)
                if err:
                    raise RuntimeError("build failed:\n" + err)
                env = servers.env(needs)
                r = subprocess.run([a.format(work=work) for a in argv], cwd=HERE, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   timeout=180)
                out, status = r.stdout, r.returncode
            except Exception as e:      # a server that would not start, a build, a timeout
                out, status = "%s: %s\n" % (type(e).__name__, e), 1
            for line in out.splitlines():
                print("#   " + line)
            print("%s - example %s" % ("ok" if status == 0 else "not ok", name), flush=True)
            failed += status != 0
    finally:
        harness.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
