#!/usr/bin/python3
"""Python's sqlite3 in each of its transaction modes, with fence's own leases.

The story, told once per mode. Two workers write the nightly report into
one SQLite file. The lock is a lease from fence_acquire (the database's own
lock service): its token goes into the report's token column and, before
any other write, into fence_check. Worker A takes the lease and writes a
draft, then pauses past its lease (here: it simply waits). Worker B takes
the lease (a greater token) and writes the report twice. A resumes and
writes with its old token: refused, and nothing of that transaction stays.

The modes (docs/stacks-sqlite.md explains each):

  default     sqlite3.connect(path): the module BEGINs before INSERT, UPDATE
              and DELETE only. The protected table's token column carries
              the token, so each statement is checked by itself; the
              protected UPDATE comes first in each transaction.
  explicit    isolation_level=None: BEGIN IMMEDIATE, fence_check, writes,
              COMMIT, written out.
  pep249      autocommit=False (Python 3.12 and later; emulated on 3.11): the
              connection is always inside a transaction that the module
              opened with a plain BEGIN; fence_acquire is called there.

Run it: /usr/bin/python3 examples/run.py stacks_sqlite3
(or FENCE_SQLITE_EXT=./sqlite_ext/fence /usr/bin/python3 examples/stacks_sqlite3.py)

Exit status 0 when, in every mode, A's late write was refused and the file
holds B's report at B's token.
"""
import os
import sqlite3
import sys
import tempfile
import time

FENCE = os.environ.get("FENCE_SQLITE_EXT", "./sqlite_ext/fence")
TTL_MS = 500
SQLITE_CONSTRAINT_FUNCTION = 1043


def load_fence(con):
    con.enable_load_extension(True)
    con.load_extension(FENCE)
    con.enable_load_extension(False)
    con.execute("PRAGMA busy_timeout = 5000")
    return con


# --- default mode (isolation_level ''): the token in the protected table's column

def open_default(path):
    return load_fence(sqlite3.connect(path))


def acquire_default(con, me):
    token = con.execute("SELECT fence_acquire('nightly-report', ?, ?)", (me, TTL_MS)).fetchone()[0]
    if token is not None:
        con.execute("SELECT fence_check('nightly-report', ?)", (token,))
    return token


def write_default(con, token, body):
    try:
        # an upsert, so that the guard runs even when no row matches (an
        # UPDATE of no row checks nothing and fences nothing)
        con.execute("INSERT INTO report(id, body, tok) VALUES (1, ?, ?) ON CONFLICT(id) "
                    "DO UPDATE SET body = excluded.body, tok = excluded.tok", (body, token))
        con.execute("INSERT INTO history(body) VALUES (?)", (body,))
        con.commit()
    except BaseException:
        con.rollback()
        raise


# --- isolation_level=None: BEGIN IMMEDIATE, fence_check, the writes, COMMIT

def open_explicit(path):
    return load_fence(sqlite3.connect(path, isolation_level=None))


def acquire_explicit(con, me):
    token = con.execute("SELECT fence_acquire('nightly-report', ?, ?)", (me, TTL_MS)).fetchone()[0]
    if token is not None:
        con.execute("SELECT fence_check('nightly-report', ?)", (token,))
    return token


def write_explicit(con, token, body):
    con.execute("BEGIN IMMEDIATE")
    try:
        con.execute("SELECT fence_check('nightly-report', ?)", (token,))
        con.execute("UPDATE report SET body = ?, tok = ? WHERE id = 1", (body, token))
        con.execute("INSERT INTO history(body) VALUES (?)", (body,))
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


# --- autocommit=False (Python 3.12+): always inside a transaction

def open_pep249(path):
    if sys.version_info >= (3, 12):
        return load_fence(sqlite3.connect(path, autocommit=False))
    return Pep249On311(path)


def acquire_pep249(con, me):
    token = con.execute("SELECT fence_acquire('nightly-report', ?, ?)", (me, TTL_MS)).fetchone()[0]
    if token is not None:
        con.execute("SELECT fence_check('nightly-report', ?)", (token,))
    con.commit()
    return token


def write_pep249(con, token, body):
    try:
        # an upsert, so that the guard runs even when no row matches (an
        # UPDATE of no row checks nothing and fences nothing)
        con.execute("INSERT INTO report(id, body, tok) VALUES (1, ?, ?) ON CONFLICT(id) "
                    "DO UPDATE SET body = excluded.body, tok = excluded.tok", (body, token))
        con.execute("INSERT INTO history(body) VALUES (?)", (body,))
        con.commit()
    except BaseException:
        con.rollback()
        raise


class Pep249On311:
    """What autocommit=False does, for Python 3.11: BEGIN at once and after
    every commit() and rollback(), so that a transaction is always open."""

    def __init__(self, path):
        self.con = load_fence(sqlite3.connect(path, isolation_level=None))
        self.con.execute("BEGIN")

    def execute(self, sql, params=()):
        return self.con.execute(sql, params)

    def commit(self):
        self.con.execute("COMMIT")
        self.con.execute("BEGIN")

    def rollback(self):
        self.con.execute("ROLLBACK")
        self.con.execute("BEGIN")


MODES = [
    ("default (isolation_level '')", open_default, acquire_default, write_default),
    ("isolation_level=None, BEGIN IMMEDIATE", open_explicit, acquire_explicit, write_explicit),
    ("autocommit=False (Python 3.12)", open_pep249, acquire_pep249, write_pep249),
]


def setup(path):
    con = load_fence(sqlite3.connect(path, isolation_level=None))
    con.execute("CREATE TABLE report(id INTEGER PRIMARY KEY, body TEXT, tok INTEGER)")
    con.execute("CREATE TABLE history(id INTEGER PRIMARY KEY, body TEXT)")
    con.execute("SELECT fence_protect('report', 'tok', 'nightly-report')")
    con.execute("INSERT INTO report VALUES (1, '(none yet)', 0)")
    con.close()


def story(path, name, open_, acquire, write):
    setup(path)
    print("%s:" % name)
    a, b = open_(path), open_(path)
    ta = acquire(a, "worker-a")
    write(a, ta, "A's draft")
    print("  A took the lease with token %d and wrote a draft; A pauses" % ta)
    time.sleep(TTL_MS / 1000 * 1.5)
    tb = acquire(b, "worker-b")
    write(b, tb, "B's report")
    write(b, tb, "B's report, final")
    print("  A's lease expired; B took it with token %d and wrote twice" % tb)
    refused = False
    try:
        write(a, ta, "A's late report")
        print("  A resumed and its write with token %d was ACCEPTED" % ta)
    except sqlite3.IntegrityError as e:
        if e.sqlite_errorcode != SQLITE_CONSTRAINT_FUNCTION:
            raise
        refused = str(e).startswith("stale fencing token")
        print("  A resumed; its write with token %d was refused: %s" % (ta, e))
    check = sqlite3.connect(path)
    report = check.execute("SELECT body, tok FROM report").fetchall()
    history = [r[0] for r in check.execute("SELECT body FROM history ORDER BY id")]
    check.close()
    good = refused and report == [("B's report, final", tb)] and "A's late report" not in history
    print("  the file holds %r; history %r: %s" % (report, history, "as it should" if good else "WRONG"))
    return good


def main():
    d = os.environ.get("FENCE_EXAMPLE_DIR") or tempfile.mkdtemp()
    results = []
    for i, (name, open_, acquire, write) in enumerate(MODES):
        try:
            results.append(story(os.path.join(d, "report-%d.db" % i), name, open_, acquire, write))
        except sqlite3.Error as e:
            print("  failed: %s: %s" % (type(e).__name__, e))
            results.append(False)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
