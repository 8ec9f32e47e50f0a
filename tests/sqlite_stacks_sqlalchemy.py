#!/usr/bin/python3
"""tests/sqlite_stacks_sqlalchemy.py: SQLAlchemy 1.4 Core and ORM on pysqlite.

SQLAlchemy's pysqlite dialect leaves transactions to Python's sqlite3 module,
which (in its default mode) sends no BEGIN before a SELECT. So inside
`engine.begin()` or `Session.begin()`:

  - Core: `SELECT fence_check(...)` runs and commits on its own, and the
    UPDATE after it runs in a second, unfenced transaction: on an
    unprotected table a zombie's check-then-write commits after the newer
    holder's write;
  - ORM: the flush leaves a column whose value did not change out of the
    UPDATE, so a holder's second write at its own token carries no token,
    and on a protected table it is refused ("fencing token required").

Both are asserted first (without the recipe), so that the warning in
docs/stacks-sqlite.md stays true. Then the recipe the docs give, which is
SQLAlchemy's documented pysqlite recipe for real transactions plus fence:

    @event.listens_for(engine, "connect")      # load fence; let SQLAlchemy say BEGIN
    def _connect(dbapi_conn, record):
        dbapi_conn.isolation_level = None
        dbapi_conn.enable_load_extension(True)
        dbapi_conn.load_extension(FENCE)
        dbapi_conn.enable_load_extension(False)
        dbapi_conn.execute("PRAGMA recursive_triggers=ON")   # a per-row table's REPLACE

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

and fence_check as the transaction's first statement, on a table protected
with fence_protect (a per-row guard keyed by TEXT, the token column set by
every write). With it: the zombie's write is refused or ordered before the
holder's, never after; the holder's second write commits; what committed
is the holder's. Asserted on the rows and fence_tokens.

Usage: /usr/bin/python3 tests/sqlite_stacks_sqlalchemy.py
"""
import os
import sys
import threading
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stacklib import EXTENSION, Report, committed, connect, error, scratch, tokens  # noqa: E402

import sqlalchemy  # noqa: E402
from sqlalchemy import Column, Integer, String, create_engine, event, text  # noqa: E402
from sqlalchemy.orm import Session, declarative_base  # noqa: E402

warnings.simplefilter("ignore")
report = Report("stacks sqlalchemy %s:" % sqlalchemy.__version__)
Base = declarative_base()


class Job(Base):
    __tablename__ = "jobs"
    name = Column(String, primary_key=True)
    state = Column(String)
    tok = Column(Integer)


def fresh(protect):
    path = os.path.join(scratch("sqlalchemy"), "db")
    c = connect(path, isolation_level=None)
    c.execute("CREATE TABLE jobs(name TEXT PRIMARY KEY, state TEXT, tok INTEGER)")
    c.execute("CREATE TABLE log(seq INTEGER PRIMARY KEY, writer TEXT, tok INTEGER)")
    if protect:
        c.execute("SELECT fence_protect('jobs', 'tok', 'job:', 'name')")
    c.execute("SELECT fence_check('job:a', 1)")
    c.execute("BEGIN")
    c.execute("SELECT fence_check('job:a', 1)")
    c.execute("INSERT INTO jobs VALUES ('a', 'new', 1)")
    c.execute("COMMIT")
    c.close()
    return path


def engine_for(path, recipe, begin="BEGIN IMMEDIATE"):
    engine = create_engine("sqlite:///" + path, connect_args={"timeout": 5})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, record):
        if recipe:
            dbapi_conn.isolation_level = None
        dbapi_conn.enable_load_extension(True)
        dbapi_conn.load_extension(EXTENSION)
        dbapi_conn.enable_load_extension(False)
        dbapi_conn.execute("PRAGMA recursive_triggers=ON")

    if recipe:
        @event.listens_for(engine, "begin")
        def _begin(conn):
            conn.exec_driver_sql(begin)
    return engine


def core_write(engine, writer, tok, pause=None):
    """Check-then-write on an unprotected column, Core style: one engine.begin()."""
    with engine.begin() as conn:
        conn.execute(text("SELECT fence_check('job:a', :t)"), {"t": tok})
        if pause:
            pause()
        conn.execute(text("UPDATE jobs SET state = :w WHERE name = 'a'"), {"w": writer})
        conn.execute(text("INSERT INTO log(writer, tok) VALUES (:w, :t)"), {"w": writer, "t": tok})


def core(recipe):
    """The zombie (token 1) checks, pauses; the holder (token 2) writes; the zombie resumes."""
    path = fresh(protect=False)
    zombie, holder = engine_for(path, recipe), engine_for(path, recipe)
    ran = {}

    def holder_writes():
        ran["holder"] = error(core_write, holder, "holder", 2)

    def pause():
        t = threading.Thread(target=holder_writes)
        t.start()
        t.join(0.5)           # with a real transaction the holder waits for the zombie
        ran["thread"] = t
    ez, _ = error(core_write, zombie, "zombie", 1, pause)
    ran["thread"].join(10)
    eh = ran["holder"][0]
    log = committed(path, "SELECT writer, tok FROM log ORDER BY seq")
    state = committed(path, "SELECT state FROM jobs")
    if not recipe:
        report.ok(log == [("holder", 2), ("zombie", 1)] and state == [("zombie",)],
                  "Core, engine.begin() without the recipe: the check commits on its own and the "
                  "zombie's write at 1 commits after the holder's at 2 (why the docs give the recipe)",
                  "log %r, jobs %r, errors %r %r" % (log, state, ez, eh))
    else:
        tokens_in_order = [t for _, t in log]
        report.ok(eh is None and tokens_in_order == sorted(tokens_in_order) and state == [("holder",)]
                  and log[-1] == ("holder", 2),
                  "Core, engine.begin() with the recipe (BEGIN IMMEDIATE): the holder waits for the "
                  "zombie's transaction; committed in token order, the holder's write last",
                  "log %r, jobs %r, errors %r %r" % (log, state, ez, eh))
        ez2, _ = error(core_write, zombie, "zombie", 1)
        report.ok(isinstance(ez2, sqlalchemy.exc.IntegrityError) and "stale fencing token" in str(ez2)
                  and committed(path, "SELECT state FROM jobs") == [("holder",)],
                  "Core with the recipe: the zombie's next transaction is refused at its check, "
                  "nothing of it commits", repr(ez2))
    zombie.dispose()
    holder.dispose()


def orm_write(engine, tok, state):
    with Session(engine) as s, s.begin():
        s.execute(text("SELECT fence_check('job:a', :t)"), {"t": tok})
        job = s.get(Job, "a")
        job.state = state
        job.tok = tok            # unchanged on a second write: the flush leaves it out


def orm(recipe, begin="BEGIN IMMEDIATE"):
    path = fresh(protect=True)
    zombie, holder = engine_for(path, recipe, begin), engine_for(path, recipe, begin)
    how = "with the recipe (%s)" % begin if recipe else "without the recipe"
    e1, _ = error(orm_write, holder, 2, "holder-1")
    e2, _ = error(orm_write, holder, 2, "holder-2")
    rows = committed(path, "SELECT state, tok FROM jobs")
    if not recipe:
        report.ok(e1 is None and isinstance(e2, sqlalchemy.exc.IntegrityError)
                  and "fencing token required" in str(e2) and rows == [("holder-1", 2)],
                  "ORM, Session.begin() %s: the holder's second write at its own token leaves the "
                  "unchanged token out of the UPDATE and is refused (why the docs give the recipe)" % how,
                  "errors %r %r, rows %r" % (e1, e2, rows))
    else:
        report.ok(e1 is None and e2 is None and rows == [("holder-2", 2)],
                  "ORM, Session.begin() %s: the holder writes twice at its token, both commit" % how,
                  "errors %r %r, rows %r" % (e1, e2, rows))
    ez, _ = error(orm_write, zombie, 1, "zombie")
    rows = committed(path, "SELECT state, tok FROM jobs")
    report.ok(isinstance(ez, sqlalchemy.exc.IntegrityError) and "stale fencing token" in str(ez)
              and rows == [("holder-2" if recipe else "holder-1", 2)]
              and tokens(path).get("job:a") == 2,
              "ORM %s: the zombie's write at 1 is refused; committed: the holder's, fence_tokens 2" % how,
              "error %r, rows %r, fence_tokens %r" % (ez, rows, tokens(path)))
    zombie.dispose()
    holder.dispose()


def main():
    for name, case in (("Core without the recipe", lambda: core(recipe=False)),
                       ("Core with the recipe", lambda: core(recipe=True)),
                       ("ORM without the recipe", lambda: orm(recipe=False)),
                       ("ORM with the recipe (BEGIN IMMEDIATE)", lambda: orm(recipe=True)),
                       ("ORM with the recipe (BEGIN)", lambda: orm(recipe=True, begin="BEGIN"))):
        e, _ = error(case)
        if e is not None:
            report.ok(False, "%s ran to its end" % name, repr(e))
    return report.finish("sqlite_stacks_sqlalchemy")


if __name__ == "__main__":
    sys.exit(main())
