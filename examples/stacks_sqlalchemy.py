#!/usr/bin/python3
"""SQLAlchemy 1.4 (Core and ORM) on pysqlite, with fence's own leases.

SQLAlchemy leaves transactions to Python's sqlite3 module, which sends no
BEGIN before a SELECT: inside `engine.begin()` or `Session.begin()` a
`SELECT fence_check(...)` would commit on its own, and the writes after it
would run unfenced. The recipe (SQLAlchemy's own for pysqlite, plus loading
fence) makes every SQLAlchemy transaction a real one, opened with
BEGIN IMMEDIATE:

    @event.listens_for(engine, "connect")
    def _connect(dbapi_con, record): ...     # load fence; isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

and each transaction starts with fence_check. The table is protected, so a
write that forgot the check is refused, and the ORM's habit of leaving an
unchanged token column out of an UPDATE does no harm: the transaction is
fenced by its check.

The story. Worker A takes the lease and writes through the ORM, then pauses
past its lease. Worker B takes the lease and writes twice through the ORM
(the second time the token does not change) and once through Core. A
resumes and writes with its old token: refused, nothing of it stays.

Run it: /usr/bin/python3 examples/run.py stacks_sqlalchemy

Exit status 0 when A's late writes (ORM and Core) were refused and the file
holds B's last write at B's token.
"""
import os
import sys
import tempfile
import time

from sqlalchemy import Column, Integer, String, create_engine, event, exc, text
from sqlalchemy.orm import Session, declarative_base

FENCE = os.environ.get("FENCE_SQLITE_EXT", "./sqlite_ext/fence")
TTL_MS = 500

Base = declarative_base()


class Report(Base):
    __tablename__ = "report"
    id = Column(Integer, primary_key=True)
    body = Column(String)
    tok = Column(Integer)


def fenced_engine(url):
    engine = create_engine(url, connect_args={"timeout": 5})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_con, record):
        dbapi_con.isolation_level = None          # pysqlite sends no BEGIN of its own
        dbapi_con.enable_load_extension(True)
        dbapi_con.load_extension(FENCE)
        dbapi_con.enable_load_extension(False)
        dbapi_con.execute("PRAGMA recursive_triggers = ON")   # per-row tables

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")    # every transaction a real one

    return engine


def acquire(engine, me):
    with engine.connect() as conn:                 # no transaction: the grant commits at once
        token = conn.execute(text("SELECT fence_acquire('nightly-report', :me, :ttl)"),
                             {"me": me, "ttl": TTL_MS}).scalar()
    if token is not None:
        with engine.begin() as conn:
            conn.execute(text("SELECT fence_check('nightly-report', :t)"), {"t": token})
    return token


def write_orm(engine, token, body):
    with Session(engine) as session, session.begin():
        session.execute(text("SELECT fence_check('nightly-report', :t)"), {"t": token})
        report = session.get(Report, 1)
        report.body = body
        report.tok = token


def write_core(engine, token, body):
    with engine.begin() as conn:
        conn.execute(text("SELECT fence_check('nightly-report', :t)"), {"t": token})
        conn.execute(text("UPDATE report SET body = :b, tok = :t WHERE id = 1"), {"b": body, "t": token})


def main():
    d = os.environ.get("FENCE_EXAMPLE_DIR") or tempfile.mkdtemp()
    path = os.path.join(d, "report.db")
    engine = fenced_engine("sqlite:///" + path)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE report(id INTEGER PRIMARY KEY, body TEXT, tok INTEGER)")
        conn.exec_driver_sql("SELECT fence_protect('report', 'tok', 'nightly-report')")
        conn.exec_driver_sql("INSERT INTO report VALUES (1, '(none yet)', 0)")
    a, b = fenced_engine("sqlite:///" + path), fenced_engine("sqlite:///" + path)

    ta = acquire(a, "worker-a")
    write_orm(a, ta, "A's draft")
    print("A took the lease with token %d and wrote a draft through the ORM; A pauses" % ta)
    time.sleep(TTL_MS / 1000 * 1.5)
    tb = acquire(b, "worker-b")
    write_orm(b, tb, "B's report")
    write_orm(b, tb, "B's report, revised")        # tok unchanged: the ORM leaves it out
    write_core(b, tb, "B's report, final")
    print("A's lease expired; B took it with token %d and wrote three times (ORM, ORM, Core)" % tb)
    refused = 0
    for how, write in (("ORM", write_orm), ("Core", write_core)):
        try:
            write(a, ta, "A's late report")
            print("A resumed; its %s write with token %d was ACCEPTED" % (how, ta))
        except exc.IntegrityError as e:
            if not str(e.orig).startswith("stale fencing token"):
                raise
            refused += 1
            print("A resumed; its %s write with token %d was refused: %s" % (how, ta, e.orig))
    with engine.connect() as conn:
        row = tuple(conn.execute(text("SELECT body, tok FROM report")).one())
    good = refused == 2 and row == ("B's report, final", tb)
    print("the file holds %r: %s" % (row, "as it should" if good else "WRONG"))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
