"""tests/attacklib.py: what the tests/sqlite_attacks_*.py files share.

Not named tests/sqlite_*.py: tests/run_all.sh runs every file that is.

    import attacklib as lib
    check = lib.Checks("sqlite attacks guard")
    conn = lib.connect(path)                    # loads fence (lib.EXTENSION)
    check.ok(lib.attempt(conn, sql) is not None, "what holds", "detail")
    ...
    sys.exit(check.status())

Each attack is judged by what committed, read back by a connection opened
with load=False; the file's own committed() says what to read. The
extension is FENCE_EXTENSION from the environment, else this tree's build;
a file that takes it as an argument sets lib.EXTENSION.
"""
import os
import sqlite3
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.environ.get("FENCE_EXTENSION", os.path.join(ROOT, "sqlite_ext", "fence"))


class Checks:
    """The "ok - " / "not ok - " lines of one file, and its exit status."""

    def __init__(self, label):
        self.label = label
        self.failures = 0

    def ok(self, cond, what, detail=""):
        print(("ok - " if cond else "not ok - ") + self.label + ": " + what)
        if not cond:
            self.failures += 1
            if detail:
                print("#   " + str(detail).replace("\n", "\n#   "))
        sys.stdout.flush()
        return cond

    def status(self):
        return 1 if self.failures else 0


def connect(path, load=True, timeout=5, recursive=True, **kw):
    """An autocommit connection (isolation_level None), fence loaded unless
    load=False, with PRAGMA recursive_triggers=ON (which a per-row table a
    REPLACE can reach across keys requires) unless recursive=False."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=timeout, **kw)
    if load:
        conn.enable_load_extension(True)
        conn.load_extension(EXTENSION)
    if recursive:
        conn.execute("PRAGMA recursive_triggers=ON")
    return conn


def attempt(conn, sql, params=()):
    """Run sql to the end; the error text, or None when it succeeded."""
    try:
        conn.execute(sql, params).fetchall()
        return None
    except sqlite3.Error as e:
        return str(e)


def script(conn, sqls, rollback=False):
    """Run statements in order, stopping at the first error, which is returned
    (after a ROLLBACK when rollback is set); None when all succeeded."""
    for sql in sqls:
        err = attempt(conn, sql)
        if err is not None:
            if rollback:
                attempt(conn, "ROLLBACK")
            return err
    return None
