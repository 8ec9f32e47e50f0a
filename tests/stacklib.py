"""tests/stacklib.py: what the stack tests (tests/sqlite_stacks_*.py) share.

Not named sqlite_*.py: tests/run_all.sh runs every file that is.

    from stacklib import Report, connect, committed, tokens, scratch
    report = Report("stacks python")

Each test asserts on what COMMITTED (the rows, fence_tokens), read back on a
fresh connection without fence loaded.
"""
import atexit
import os
import shutil
import sqlite3
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from tap import Report  # noqa: E402,F401  (re-exported)

EXTENSION = os.environ.get("FENCE_EXTENSION", os.path.join(ROOT, "sqlite_ext", "fence"))


_base = []


def scratch(name):
    """A new empty directory for one case's database files (all removed at exit)."""
    if not _base:
        _base.append(tempfile.mkdtemp(prefix="fence_stacks_"))
        atexit.register(shutil.rmtree, _base[0], True)
    return tempfile.mkdtemp(prefix=name + ".", dir=_base[0])


def load(conn, recursive=True):
    """Load fence, and turn recursive_triggers on (unless told not to), as
    docs/sqlite-guarantees.md asks of a connection that writes a per-row
    table a REPLACE can reach across keys (a TEXT key in a rowid table, or
    another UNIQUE index)."""
    conn.enable_load_extension(True)
    conn.load_extension(EXTENSION)
    conn.enable_load_extension(False)
    if recursive:
        conn.execute("PRAGMA recursive_triggers=ON")
    return conn


def connect(path, recursive=True, **kw):
    """A connection with fence loaded; other keyword arguments go to
    sqlite3.connect."""
    kw.setdefault("timeout", 5.0)
    return load(sqlite3.connect(path, **kw), recursive)


def committed(path, sql):
    """Read what committed, on a new connection that has not loaded fence."""
    conn = sqlite3.connect(path, timeout=5.0)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def tokens(path):
    """fence_tokens as {resource: token}, committed."""
    return dict(committed(path, "SELECT resource, token FROM fence_tokens"))


def error(fn, *args):
    """Run fn(*args); return (None, result) or (the exception, None)."""
    try:
        return None, fn(*args)
    except Exception as e:      # noqa: BLE001  (the test reports what it was)
        return e, None


class Autocommit312:
    """Python 3.12's sqlite3 autocommit=False (PEP 249), emulated on 3.11.

    On 3.12, connect(..., autocommit=False) issues BEGIN at once and again
    right after every commit() and rollback(): the connection is never outside
    a transaction. On 3.11 the same is a connection with isolation_level=None
    whose commit() and rollback() do exactly that.
    """

    def __init__(self, path, **kw):
        self.conn = connect(path, isolation_level=None, **kw)
        self.conn.execute("BEGIN")

    def execute(self, sql, params=()):
        return self.conn.execute(sql, params)

    def commit(self):
        self.conn.execute("COMMIT")
        self.conn.execute("BEGIN")

    def rollback(self):
        self.conn.execute("ROLLBACK")
        self.conn.execute("BEGIN")

    @property
    def in_transaction(self):
        return self.conn.in_transaction

    def close(self):
        # 3.12: close() rolls back what is open (autocommit=False)
        self.conn.execute("ROLLBACK")
        self.conn.close()
