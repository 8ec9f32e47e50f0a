"""fence for SQLite: the loadable extension that makes SQLite refuse writes
carrying a stale fencing token, and how to load it into a sqlite3
connection.

    import sqlite3, fence
    conn = sqlite3.connect("app.db", isolation_level=None)
    fence.load(conn)
"""
import os

__all__ = ["loadable_path", "load"]


def loadable_path():
    """The absolute path of the fence SQLite extension (fence.so) in this package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "fence.so")


def load(conn):
    """Load fence into a sqlite3 connection (loading is switched on for the
    call and off again). Every connection that writes a protected table must
    load it."""
    if not hasattr(conn, "enable_load_extension"):
        raise RuntimeError(
            "this Python's sqlite3 cannot load extensions (it was built without "
            "--enable-loadable-sqlite-extensions): use Debian's or Ubuntu's /usr/bin/python3, "
            "or a Python built with that option")
    conn.enable_load_extension(True)
    try:
        conn.load_extension(loadable_path())
    finally:
        conn.enable_load_extension(False)
