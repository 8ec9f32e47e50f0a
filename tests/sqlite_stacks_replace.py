#!/usr/bin/python3
"""tests/sqlite_stacks_replace.py: REPLACE and upserts on a per-row table, sent
the way Python's sqlite3 (each transaction mode) and SQLAlchemy 1.4 (Core and
ORM, pysqlite) send them, with recursive_triggers on and off.

tests/sqlite_replace.py types every REPLACE form at the engine; this file
sends the ones applications send, through the stacks they use:

  - SQLAlchemy: insert(t).prefix_with("OR REPLACE") (Core: a Table; ORM:
    session.execute of the mapped class), and the sqlite dialect's
    insert(...).on_conflict_do_update (an upsert), with recursive_triggers
    set where a user sets a pragma, in the engine's "connect" event (the
    cursor recipe SQLAlchemy's docs give for PRAGMA foreign_keys);
  - Python's sqlite3: the default mode, isolation_level=None, and Python
    3.12's autocommit=False and autocommit=True (real on 3.12, else
    skipped, saying why; autocommit=False also emulated as stacklib does).

The table, per-row protected on a TEXT key with another UNIQUE column:

    accounts(name TEXT PRIMARY KEY, email TEXT NOT NULL UNIQUE, balance, tok)
    fence_protect('accounts', 'tok', 'acct:', 'name')
    alice a@x 100 5, bob b@x 100 5; acct:alice = acct:bob = 5

A REPLACE of key carol with email a@x deletes alice's row: a DELETE of it
(SPEC.md "Precise points"), which needs a fence on acct:alice, and the
new row's token (7, carol's) is never taken for it. The cases, each on a
fresh file, asserted on what committed (rows and fence_tokens, read back by
a connection without fence):

  (a) recursive_triggers on:
      a1  the holder of carol alone (7, above alice's 5): refused, nothing
          changes (alice's row stays, acct:alice stays 5, not 7)
      a2  a stale holder of bob (4 < 5) replacing bob with alice's email:
          refused, nothing changes
      a3  a holder of alice (6) and carol (7): commits, alice's row gone,
          acct:alice 6 (not the new row's 7), acct:carol 7
  (b) recursive_triggers off (SQLite's default): a3's and a1's writes,
      and c3's upsert, refused with the message docs/sqlite-guarantees.md
      gives; nothing changes (acct:alice stays 5: the fence taken in the
      same transaction rolls back with it)
  (c) upserts, on: an ON CONFLICT DO UPDATE is checked as an UPDATE of the
      existing row
      c1  the holder of carol alone, ON CONFLICT(email) DO UPDATE SET
          balance (alice's row, its token left as it is): refused, nothing
          changes
      c2  a stale holder of alice (4), ON CONFLICT(name) DO UPDATE SET
          balance, tok: refused, nothing changes
      c3  a holder of alice (6) and carol (7), c1's upsert: commits,
          alice's balance 50, acct:alice 6

In the modes where a SELECT opens no transaction (the default mode, and
SQLAlchemy without the pysqlite recipe), a transaction is fenced on alice
by a write that carries alice's token (UPDATE accounts SET tok = 6 WHERE
name = 'alice') instead of fence_check, as docs/stacks-sqlite.md says.

Usage: /usr/bin/python3 tests/sqlite_stacks_replace.py
"""
import os
import sqlite3
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stacklib  # noqa: E402
from stacklib import EXTENSION, Report, committed, error, load, scratch  # noqa: E402

import sqlalchemy  # noqa: E402
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, event, insert, text  # noqa: E402
from sqlalchemy.dialects.sqlite import insert as sqlite_insert  # noqa: E402
from sqlalchemy.orm import Session, declarative_base  # noqa: E402

warnings.simplefilter("ignore")
report = Report("stacks replace:")
# docs/sqlite-guarantees.md, "REPLACE in every form"
OFF_MESSAGE = ("fence guard refused: a REPLACE on this table can delete another key's row; "
               "run PRAGMA recursive_triggers=ON on the connection")

metadata = MetaData()
accounts = Table("accounts", metadata,
                 Column("name", String, primary_key=True), Column("email", String, unique=True),
                 Column("balance", Integer), Column("tok", Integer))
Base = declarative_base()


class Account(Base):
    __tablename__ = "accounts"
    name = Column(String, primary_key=True)
    email = Column(String, unique=True, nullable=False)
    balance = Column(Integer)
    tok = Column(Integer)


def fresh():
    path = os.path.join(scratch("replace"), "db")
    c = load(sqlite3.connect(path, isolation_level=None))
    c.executescript("""
        CREATE TABLE accounts(name TEXT PRIMARY KEY, email TEXT NOT NULL UNIQUE,
                              balance INTEGER, tok INTEGER);
        SELECT fence_protect('accounts', 'tok', 'acct:', 'name');
        BEGIN IMMEDIATE;
        SELECT fence_check('acct:alice', 5), fence_check('acct:bob', 5);
        INSERT INTO accounts VALUES ('alice', 'a@x', 100, 5), ('bob', 'b@x', 100, 5);
        COMMIT;
    """)
    c.close()
    return path


def state(path):
    return (committed(path, "SELECT name, email, balance, tok FROM accounts ORDER BY name"),
            dict(committed(path, "SELECT resource, token FROM fence_tokens")))


def recursive_setting(dbapi_conn, on):
    """What a user writes in the connect hook (on), or nothing (off). A
    build whose default is on is turned off for the off case."""
    cur = dbapi_conn.cursor()
    if on:
        cur.execute("PRAGMA recursive_triggers=ON")
    elif cur.execute("PRAGMA recursive_triggers").fetchone()[0]:
        cur.execute("PRAGMA recursive_triggers=OFF")
    cur.close()


# ---- the statements, one form per stack family ----------------------------

REPLACE_SQL = "INSERT OR REPLACE INTO accounts(name, email, balance, tok) VALUES (?, ?, ?, ?)"
UPSERT_SQL = ("INSERT INTO accounts(name, email, balance, tok) VALUES (?, ?, ?, ?) "
              "ON CONFLICT(%s) DO UPDATE SET balance = excluded.balance%s")


def upsert_sql(target, set_tok):
    return UPSERT_SQL % (target, ", tok = excluded.tok" if set_tok else "")


class PythonMode:
    """Python's sqlite3: ops are SQL strings with ? parameters."""
    fence_by_write = False

    def __init__(self, name, opener, fence_by_write=False):
        self.name, self.opener, self.fence_by_write = name, opener, fence_by_write

    def run(self, path, on, ops):
        conn, begin, commit, rollback = self.opener(path)
        recursive_setting(conn if hasattr(conn, "cursor") else conn.conn, on)
        try:
            begin()
            for op in ops:
                kind, args = op[0], op[1:]
                if kind == "fence":
                    res, tok = args
                    if self.fence_by_write:
                        conn.execute("UPDATE accounts SET tok = ? WHERE name = ?",
                                     (tok, res[len("acct:"):]))
                    else:
                        conn.execute("SELECT fence_check(?, ?)", (res, tok)).fetchall()
                elif kind == "replace":
                    conn.execute(REPLACE_SQL, args[0])
                else:
                    row, target, set_tok = args
                    conn.execute(upsert_sql(target, set_tok), row)
            commit()
            return None
        except sqlite3.Error as e:
            rollback()
            return e
        finally:
            conn.close()


def open_default(path):
    c = sqlite3.connect(path, timeout=5.0)
    load_only(c)
    return c, lambda: None, c.commit, c.rollback


def open_none(path):
    c = sqlite3.connect(path, timeout=5.0, isolation_level=None)
    load_only(c)

    def end(sql):
        return lambda: c.in_transaction and c.execute(sql)
    return c, lambda: c.execute("BEGIN IMMEDIATE"), end("COMMIT"), end("ROLLBACK")


def open_autocommit(flag):
    def opener(path):
        c = sqlite3.connect(path, timeout=5.0, autocommit=flag)
        load_only(c)
        begin = (lambda: c.execute("BEGIN IMMEDIATE")) if flag else (lambda: None)
        commit = (lambda: c.execute("COMMIT")) if flag else c.commit
        rollback = (lambda: c.in_transaction and c.execute("ROLLBACK")) if flag else c.rollback
        return c, begin, commit, rollback
    return opener


def open_emulated(path):
    c = stacklib.Autocommit312(path, recursive=False)
    return c, lambda: None, c.commit, c.rollback


def load_only(conn):
    stacklib.load(conn, recursive=False)


class Alchemy:
    """SQLAlchemy 1.4 on pysqlite; ops are Core constructs (Core: a Table
    through engine.begin(); ORM: the mapped class through Session.begin())."""

    def __init__(self, name, orm, recipe):
        self.name, self.orm, self.recipe = name, orm, recipe
        self.fence_by_write = not recipe    # no BEGIN before a SELECT without it

    def engine(self, path, on):
        engine = create_engine("sqlite:///" + path, connect_args={"timeout": 5})

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn, record):
            if self.recipe:
                dbapi_conn.isolation_level = None
            dbapi_conn.enable_load_extension(True)
            dbapi_conn.load_extension(EXTENSION)
            dbapi_conn.enable_load_extension(False)
            recursive_setting(dbapi_conn, on)   # on: cursor.execute("PRAGMA recursive_triggers=ON")

        if self.recipe:
            @event.listens_for(engine, "begin")
            def _begin(conn):
                conn.exec_driver_sql("BEGIN IMMEDIATE")
        return engine

    def statement(self, op):
        target = Account if self.orm else accounts
        cols = Account.__table__.c if self.orm else accounts.c
        kind, args = op[0], op[1:]
        if kind == "fence":
            res, tok = args
            if self.fence_by_write:
                return (sqlalchemy.update(target).where(cols.name == res[len("acct:"):])
                        .values(tok=tok))
            return text("SELECT fence_check(:r, :t)").bindparams(r=res, t=tok)
        row = dict(zip(("name", "email", "balance", "tok"), args[0]))
        if kind == "replace":
            return insert(target).prefix_with("OR REPLACE").values(**row)
        _, target_col, set_tok = args
        stmt = sqlite_insert(target).values(**row)
        set_ = {"balance": stmt.excluded.balance}
        if set_tok:
            set_["tok"] = stmt.excluded.tok
        return stmt.on_conflict_do_update(index_elements=[cols[target_col]], set_=set_)

    def run(self, path, on, ops):
        engine = self.engine(path, on)
        try:
            if self.orm:
                with Session(engine) as s, s.begin():
                    for op in ops:
                        s.execute(self.statement(op))
            else:
                with engine.begin() as conn:
                    for op in ops:
                        conn.execute(self.statement(op))
            return None
        except sqlalchemy.exc.DBAPIError as e:
            return e
        finally:
            engine.dispose()


# ---- the cases --------------------------------------------------------------

ALICE = ("alice", "a@x", 100, 5)
BOB = ("bob", "b@x", 100, 5)
BEFORE = ([ALICE, BOB], {"acct:alice": 5, "acct:bob": 5})
CAROL_TAKES_A = ("carol", "a@x", 0, 7)          # REPLACE: deletes alice's row through email
CAROL_UPSERT_A = ("carol", "a@x", 50, 7)        # upsert: DO UPDATE of alice's row


def refused(kind, what):
    """A check of err for a refusal: kind 'stale', 'required' (on acct:alice) or 'off'."""
    def check(err):
        msg = str(getattr(err, "orig", err))
        if kind == "off":
            return isinstance(err, (sqlite3.OperationalError, sqlalchemy.exc.OperationalError)) \
                and OFF_MESSAGE in msg
        integrity = isinstance(err, (sqlite3.IntegrityError, sqlalchemy.exc.IntegrityError))
        if kind == "stale":
            return integrity and msg.startswith("stale fencing token")
        return integrity and msg.startswith('fencing token required for resource "acct:alice"')
    return check, "refused (%s), nothing changes" % what, lambda stack: BEFORE


CASES = [
    ("a1: the holder of carol alone (7) REPLACEs carol with alice's email", True,
     [("replace", CAROL_TAKES_A)],
     refused("required", "fencing token required for acct:alice; acct:alice stays 5, not 7")),
    ("a2: a stale holder of bob (4) REPLACEs bob with alice's email", True,
     [("replace", ("bob", "a@x", 0, 4))],
     refused("stale", "stale fencing token; alice's and bob's rows stay")),
    ("a3: a holder of alice (6) and carol (7) REPLACEs carol with alice's email", True,
     [("fence", "acct:alice", 6), ("replace", CAROL_TAKES_A)],
     (lambda err: err is None, "commits: alice's row gone, acct:alice 6 (not 7), acct:carol 7",
      lambda stack: ([BOB, CAROL_TAKES_A], {"acct:alice": 6, "acct:bob": 5, "acct:carol": 7}))),
    ("b1: a3's write with recursive_triggers off", False,
     [("fence", "acct:alice", 6), ("replace", CAROL_TAKES_A)],
     refused("off", "with the docs' message; acct:alice stays 5")),
    ("b2: a1's write with recursive_triggers off", False,
     [("replace", CAROL_TAKES_A)],
     refused("off", "with the docs' message; alice's row stays")),
    ("b3: c3's upsert with recursive_triggers off", False,
     [("fence", "acct:alice", 6), ("upsert", CAROL_UPSERT_A, "email", False)],
     refused("off", "with the docs' message")),
    ("c1: the holder of carol alone (7) upserts ON CONFLICT(email) DO UPDATE SET balance "
     "(alice's row)", True,
     [("upsert", CAROL_UPSERT_A, "email", False)],
     refused("required", "checked as an UPDATE of alice's row: fencing token required for acct:alice")),
    ("c2: a stale holder of alice (4) upserts alice ON CONFLICT(name) DO UPDATE SET balance, tok",
     True, [("upsert", ("alice", "a@x", 50, 4), "name", True)],
     refused("stale", "stale fencing token")),
    ("c3: a holder of alice (6) and carol (7) upserts ON CONFLICT(email) DO UPDATE SET balance",
     True, [("fence", "acct:alice", 6), ("upsert", CAROL_UPSERT_A, "email", False)],
     (lambda err: err is None, "commits: alice's balance 50, acct:alice 6",
      lambda stack: ([("alice", "a@x", 50, 6 if stack.fence_by_write else 5), BOB],
                     {"acct:alice": 6, "acct:bob": 5, "acct:carol": 7}))),
]


def run_stack(stack):
    for name, on, ops, (check, outcome, expected) in CASES:
        path = fresh()
        err = stack.run(path, on, ops)
        after = state(path)
        want = expected(stack)
        report.ok(check(err) and after == want,
                  "%s, %s: %s" % (stack.name, name, outcome),
                  "error: %r\ncommitted: %r\nexpected:  %r" % (err, after, want))


def main():
    stacks = [
        Alchemy("SQLAlchemy %s Core (pysqlite recipe)" % sqlalchemy.__version__, orm=False, recipe=True),
        Alchemy("SQLAlchemy ORM (pysqlite recipe)", orm=True, recipe=True),
        Alchemy("SQLAlchemy Core (pysqlite's own transactions)", orm=False, recipe=False),
        PythonMode("sqlite3 default mode", open_default, fence_by_write=True),
        PythonMode("sqlite3 isolation_level=None", open_none),
        PythonMode("sqlite3 autocommit=False (3.12, emulated)", open_emulated),
    ]
    if sys.version_info >= (3, 12):
        stacks += [PythonMode("sqlite3 autocommit=False", open_autocommit(False)),
                   PythonMode("sqlite3 autocommit=True", open_autocommit(True))]
    else:
        print("# skip: sqlite3 autocommit=False and autocommit=True (real): %s is Python %d.%d.%d, "
              "which has no autocommit attribute (3.12 and later); autocommit=False is emulated"
              % ((sys.executable,) + tuple(sys.version_info[:3])))
    print("# SQLite %s, Python %s, SQLAlchemy %s"
          % (sqlite3.sqlite_version, sys.version.split()[0], sqlalchemy.__version__))
    for stack in stacks:
        e, _ = error(run_stack, stack)
        if e is not None:
            report.ok(False, "%s ran to its end" % stack.name, repr(e))
    return report.finish("sqlite_stacks_replace")


if __name__ == "__main__":
    sys.exit(main())
