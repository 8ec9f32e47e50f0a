#!/usr/bin/python3
"""tests/pg_stacks_sqlalchemy.py: fence through SQLAlchemy 1.4 (Debian's
python3-sqlalchemy, over psycopg2), Core and ORM (issue 26, item 5).

Core: an UPDATE that sets the token column carries the token, so a
protected table with a token column works as written; so does
fence_check at the start of `engine.begin()`. An engine in
isolation_level="AUTOCOMMIT" makes no transaction of `engine.begin()`:
asserted as the documented refusal (23T02 on a table protected without a
token column).

ORM, naive: a protected table with a token column, the application sets
`job.tok = token` and commits. The unit of work leaves an attribute whose
value did not change out of the UPDATE, so the holder writing a row again
at its own token sends `UPDATE job SET status=...` without the token and
gets 23T02 (item 5): the pattern fails closed (a zombie is refused too),
asserted as that documented refusal. FENCE_STACKS_STRICT=1 asserts
instead that the holder is accepted (the reproduction: it fails).

ORM, recommended (docs/stacks-postgresql.md): protect the table without a
token column (one fence per row: fence_protect(job, NULL, 'job:', 'id')) and
begin every transaction with fence_check(resource, token), explicitly or
from a Session "after_begin" event. Asserted: the holder's writes commit
whatever the unit of work leaves out, the zombie's are refused 23T01 and
leave nothing, a code path that forgets the check is refused 23T02.

Output: "ok - stacks sqlalchemy ..." lines.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stacks"))
import sqlalchemy  # noqa: E402
from sqlalchemy import (BigInteger, Column, Integer, MetaData, Table, Text, create_engine,  # noqa: E402
                        event, func, select, text, update)
from sqlalchemy.orm import Session, declarative_base  # noqa: E402
from sqlalchemy.orm.attributes import flag_modified  # noqa: E402
from stacks import Database, Report, sqlstate  # noqa: E402

REPORT = Report("stacks sqlalchemy")
ok = REPORT.ok
DB = "fence_stacks_sqlalchemy"
STRICT = os.environ.get("FENCE_STACKS_STRICT") == "1"

Base = declarative_base()


class Job(Base):            # protected with its token column (the naive pattern)
    __tablename__ = "job"
    id = Column(Integer, primary_key=True)
    status = Column(Text)
    tok = Column(BigInteger)


class Task(Base):           # protected without a token column (the recipe)
    __tablename__ = "task"
    id = Column(Integer, primary_key=True)
    status = Column(Text)


def fence_every_transaction(session_class):
    """The recipe's event: every transaction a session of session_class
    begins runs fence_check for each (resource, token) in session.info
    ["fences"] first, on the connection the ORM will write with."""
    @event.listens_for(session_class, "after_begin")
    def _fence(session, transaction, connection):
        for resource, token in session.info.get("fences", ()):
            connection.execute(select(func.fence_check(resource, token)))


class FencedSession(Session):
    pass


fence_every_transaction(FencedSession)


def main():
    db = Database(DB)
    try:
        run(db)
    finally:
        db.close()
    return REPORT.finish("pg_stacks_sqlalchemy")


def run(db):
    print("# SQLAlchemy %s" % sqlalchemy.__version__)
    url = "postgresql+psycopg2://%s@/%s?host=%s&port=%s" % (
        os.environ.get("PGUSER", "postgres"), db.name, os.environ["PGHOST"], os.environ["PGPORT"])
    engine = create_engine(url)
    db.sql("CREATE TABLE job (id int PRIMARY KEY, status text, tok bigint)")
    db.sql("SELECT fence_protect('job', 'tok', 'job:', 'id')")
    db.sql("CREATE TABLE task (id int PRIMARY KEY, status text)")
    db.sql("SELECT fence_protect('task', NULL, 'task:', 'id')")
    db.sql("CREATE TABLE ledger (seq serial PRIMARY KEY, who text)")
    job = Table("job", MetaData(), autoload_with=engine)
    ledger = Table("ledger", MetaData(), autoload_with=engine)

    # --- Core: the token in the statement
    def core_row(tok, who):
        with engine.begin() as conn:
            conn.execute(update(job).where(job.c.id == 1).values(status=who, tok=tok))
    db.sql("INSERT INTO job VALUES (1, 'new', 10)")
    states = [sqlstate(lambda t=t, w=w: core_row(t, w))
              for t, w in ((10, "zombie"), (20, "holder"), (10, "zombie-again"), (20, "holder-again"))]
    rows = db.sql("SELECT status, tok FROM job WHERE id = 1")
    ok(states == [None, None, "23T01", None] and rows == [("holder-again", 20)]
       and db.highest("job:1") == 20,
       "Core, UPDATE setting the token column: the zombie at 10 is refused 23T01 after the "
       "holder's 20; the holder's writes commit", "states %r, row %r" % (states, rows))

    # --- Core: fence_check at the start of engine.begin()
    def core_check(tok, who):
        with engine.begin() as conn:
            conn.execute(select(func.fence_check("ledger", tok)))
            conn.execute(ledger.insert().values(who=who))
    states = [sqlstate(lambda t=t, w=w: core_check(t, w))
              for t, w in ((10, "zombie"), (20, "holder"), (10, "zombie-again"), (20, "holder-again"))]
    rows = [w for (w,) in db.sql("SELECT who FROM ledger ORDER BY seq")]
    ok(states == [None, None, "23T01", None] and rows == ["zombie", "holder", "holder-again"],
       "Core, fence_check first in engine.begin(): the zombie's transaction at 10 is refused "
       "23T01, nothing of it commits", "states %r, rows %r" % (states, rows))

    # an engine in isolation_level="AUTOCOMMIT" sends no BEGIN: engine.begin()
    # makes no transaction there, the check and the write are two. A table
    # protected without a token column refuses the write (23T02).
    auto = create_engine(url, isolation_level="AUTOCOMMIT")
    db.sql("CREATE TABLE plain (seq serial PRIMARY KEY, who text)")
    db.sql("SELECT fence_protect('plain', NULL, 'plain')")
    db.sql("SELECT fence_check('plain', 20)")

    def auto_check():
        with auto.begin() as conn:
            conn.execute(select(func.fence_check("plain", 20)))
            conn.execute(text("INSERT INTO plain (who) VALUES ('holder')"))
    state = sqlstate(auto_check)
    rows = db.sql("SELECT who FROM plain")
    ok(state == "23T02" and rows == [],
       "Core, isolation_level='AUTOCOMMIT': engine.begin() opens no transaction, the write after "
       "fence_check is refused 23T02 on a table protected without a token column (the "
       "documented refusal), nothing commits", "state %r, rows %r" % (state, rows))
    auto.dispose()

    # --- ORM, naive: the token column set by the application (item 5)
    db.sql("INSERT INTO job VALUES (2, 'new', 20)")     # the holder wrote it at 20
    db.sql("SELECT fence_check('job:2', 20)")

    def orm_naive(tok, status):
        with Session(engine) as s, s.begin():
            j = s.get(Job, 2)
            j.tok = tok           # the holder's code sets the token every time
            j.status = status
    state = sqlstate(lambda: orm_naive(20, "holder-again"))
    rows = db.sql("SELECT status, tok FROM job WHERE id = 2")
    if STRICT:
        ok(state is None and rows == [("holder-again", 20)],
           "STRICT: ORM with a token column, the holder setting tok to its own token 20 again "
           "is accepted", "state %r, row %r" % (state, rows))
    else:
        ok(state == "23T02" and rows == [("new", 20)],
           "NAIVE (documented refusal, fails closed): ORM with a token column, the holder "
           "setting tok to its unchanged token 20: the unit of work leaves tok out of the "
           "UPDATE, 23T02, nothing commits", "state %r, row %r" % (state, rows))
    state = sqlstate(lambda: orm_naive(10, "zombie"))
    rows = db.sql("SELECT status, tok FROM job WHERE id = 2")
    ok(state == "23T01" and rows[0][0] != "zombie",
       "ORM with a token column: the zombie setting tok = 10 is refused 23T01",
       "state %r, row %r" % (state, rows))

    # flag_modified() forces the unchanged token into the UPDATE: accepted,
    # but only on the code paths that remember to call it
    def orm_flagged(tok, status):
        with Session(engine) as s, s.begin():
            j = s.get(Job, 2)
            j.tok = tok
            flag_modified(j, "tok")
            j.status = status
    states = [sqlstate(lambda: orm_flagged(20, "holder-flagged")),
              sqlstate(lambda: orm_flagged(10, "zombie-flagged"))]
    rows = db.sql("SELECT status, tok FROM job WHERE id = 2")
    ok(states == [None, "23T01"] and rows == [("holder-flagged", 20)],
       "ORM with a token column and flag_modified(obj, 'tok'): the holder at its unchanged "
       "token commits, the zombie is refused 23T01", "states %r, row %r" % (states, rows))

    # --- ORM, recommended: no token column, fence_check first in every transaction
    db.fenced("task:1", 10, "INSERT INTO task VALUES (1, 'new')")

    def orm_explicit(tok, status):
        with Session(engine) as s, s.begin():
            s.execute(select(func.fence_check("task:1", tok)))
            t = s.get(Task, 1)
            t.status = status

    def orm_event(tok, status):
        with FencedSession(engine, info={"fences": [("task:1", tok)]}) as s, s.begin():
            t = s.get(Task, 1)
            t.status = status
    for name, fn in (("an explicit fence_check", orm_explicit),
                     ("fence_check from an after_begin event", orm_event)):
        before = db.highest("task:1")
        z, h = before, before + 10
        states = [sqlstate(lambda t=t, w=w: fn(t, w))
                  for t, w in ((z, "zombie"), (h, "holder"), (z, "zombie-again"),
                               (h, "holder-again"), (h, "holder-again"))]
        rows = db.sql("SELECT status FROM task WHERE id = 1")
        ok(states == [None, None, "23T01", None, None] and rows == [("holder-again",)]
           and db.highest("task:1") == h,
           "ORM, table protected without a token column, %s: the holder's writes commit (the "
           "same row written again too), the zombie's at %d after %d is refused 23T01 and "
           "leaves nothing" % (name, z, h), "states %r, row %r" % (states, rows))

    def orm_forgot():
        with Session(engine) as s, s.begin():
            t = s.get(Task, 1)
            t.status = "forgot"
    state = sqlstate(orm_forgot)
    rows = db.sql("SELECT status FROM task WHERE id = 1")
    ok(state == "23T02" and rows == [("holder-again",)],
       "ORM, recipe: a code path that forgets the check is refused 23T02, nothing commits",
       "state %r, row %r" % (state, rows))

    # the event covers a session's later transactions and its inserts and deletes
    h = db.highest("task:1")
    with FencedSession(engine, info={"fences": [("task:1", h), ("task:2", h)]}) as s:
        with s.begin():
            s.add(Task(id=2, status="added"))
        with s.begin():
            s.delete(s.get(Task, 2))
            s.get(Task, 1).status = "second-transaction"
    rows = db.sql("SELECT id, status FROM task ORDER BY id")
    ok(rows == [(1, "second-transaction")],
       "ORM, recipe: the event fences each transaction of the session (insert, delete, update)",
       repr(rows))
    engine.dispose()


if __name__ == "__main__":
    sys.exit(main())
