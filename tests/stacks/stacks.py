"""tests/stacks/stacks.py: what the tests of fence through real client
stacks share (tests/pg_stacks_*.py): a database of their own on the cluster
tests/run_pg.sh started (PGHOST, PGPORT in the environment), a pgbouncer in
front of it, and reading back what committed.

Not named tests/pg_*.py: tests/run_pg.sh runs every file that is.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
sys.path.insert(0, TESTS)
from tap import Report  # noqa: E402,F401  (re-exported for the tests)


def server_dsn(db):
    return "host=%s port=%s user=%s dbname=%s" % (
        os.environ["PGHOST"], os.environ["PGPORT"], os.environ.get("PGUSER", "postgres"), db)


class Database:
    """A fresh database with fence created in it, dropped at close()."""

    def __init__(self, name):
        self.name = name
        self.admin = psycopg.connect(server_dsn("postgres"), autocommit=True)
        self.admin.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
        self.admin.execute("CREATE DATABASE %s" % name)
        self.dsn = server_dsn(name)
        self.sql("CREATE EXTENSION fence")

    def sql(self, query, params=None):
        """Run one statement in its own committed transaction; rows if any."""
        with psycopg.connect(self.dsn, autocommit=True) as c:
            cur = c.execute(query, params)
            return cur.fetchall() if cur.description else None

    def fenced(self, resource, token, query, params=None):
        """fence_check(resource, token) and one statement in one transaction."""
        with psycopg.connect(self.dsn) as c:
            c.execute("SELECT fence_check(%s, %s)", (resource, token))
            c.execute(query, params)

    def highest(self, resource):
        return self.sql("SELECT fence_current(%s)", (resource,))[0][0]

    def close(self):
        self.admin.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % self.name)
        self.admin.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class PgBouncer:
    """Debian's pgbouncer on loopback in front of one database, in
    transaction pooling with `pool_size` server connections; stopped by
    its pid at stop()."""

    def __init__(self, db, pool_size=2, extra=""):
        exe = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.path.exists(exe):
            raise RuntimeError("pgbouncer is not installed (make check installs it)")
        self.version = subprocess.run([exe, "--version"], capture_output=True,
                                      text=True).stdout.split("\n")[0]
        self.work = tempfile.mkdtemp(prefix="fence-stacks-pgbouncer-")
        os.chmod(self.work, 0o755)
        self.port = free_port()
        ini = os.path.join(self.work, "pgbouncer.ini")
        with open(ini, "w") as f:
            f.write("[databases]\n%s = host=%s port=%s dbname=%s\n" % (
                db, os.environ["PGHOST"], os.environ["PGPORT"], db))
            f.write("[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = %d\n"
                    "unix_socket_dir = %s\nauth_type = trust\nauth_file = %s/users.txt\n"
                    "pool_mode = transaction\ndefault_pool_size = %d\nmax_client_conn = 100\n"
                    "logfile = %s/pgbouncer.log\npidfile = %s/pgbouncer.pid\n%s" % (
                        self.port, self.work, self.work, pool_size, self.work, self.work, extra))
        with open(os.path.join(self.work, "users.txt"), "w") as f:
            f.write('"postgres" ""\n')
        if os.geteuid() == 0:
            shutil.chown(self.work, "postgres")
            for n in os.listdir(self.work):
                shutil.chown(os.path.join(self.work, n), "postgres")
        cmd = ([] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]) + [exe, ini]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.dsn = "host=127.0.0.1 port=%d dbname=%s user=postgres" % (self.port, db)
        deadline = time.time() + 15
        while True:
            try:
                psycopg.connect(self.dsn, autocommit=True).close()
                break
            except psycopg.Error:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise
                time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.work, ignore_errors=True)


def sqlstate(fn):
    """Run fn(); None if it raised nothing, else the error's SQLSTATE (or
    its class name when the error has none)."""
    try:
        fn()
        return None
    except Exception as e:  # noqa: BLE001  (the drivers' errors differ)
        code = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)
        orig = getattr(e, "orig", None)    # SQLAlchemy wraps the DBAPI error
        if code is None and orig is not None:
            code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        cause = getattr(e, "__cause__", None)    # Django wraps it too
        if code is None and cause is not None:
            code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
        return code or type(e).__name__
