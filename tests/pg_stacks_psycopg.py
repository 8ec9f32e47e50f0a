#!/usr/bin/python3
"""tests/pg_stacks_psycopg.py: fence through psycopg 3 (Debian's
python3-psycopg) in each of its modes, as docs/stacks-postgresql.md
gives the pattern for each (issue 26).

For every mode the same story, asserted on what committed (the rows and
fence_current): a zombie that held the lock at 10 writes (accepted), the
new holder writes at 20 (accepted), the zombie writes again at 10
(refused 23T01, nothing of it stays), the holder writes again at 20
(accepted). Both patterns: the check-only pattern (fence_check, then a
write to a table guarded only by that check) and a protected table whose
row carries the token.

Modes: the default (implicit transactions, commit()), autocommit with
`conn.transaction()`, pipeline mode (autocommit and default), COPY FROM
STDIN, and server-side prepare on every statement (prepare_threshold=0,
and plan_cache_mode=force_generic_plan on top). The autocommit pitfall
the README warns about (fence_check and the write as two statements
without conn.transaction()) is asserted as the documented refusal where
the table is protected without a token column (23T02, nothing commits),
and as a labelled demonstration on an unguarded table.

Output: "ok - stacks psycopg ..." lines.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stacks"))
import psycopg  # noqa: E402
from stacks import Database, Report, sqlstate  # noqa: E402

REPORT = Report("stacks psycopg")
ok = REPORT.ok
DB = "fence_stacks_psycopg"
N = [0]


def story(db, name, write, protected):
    """Run zombie@10, holder@20, zombie@10, holder@20 through write(resource,
    token, who); assert what committed. protected: the write carries the
    token in a protected row (table rows_p), else the check-only pattern
    (table rows_c)."""
    N[0] += 1
    key = N[0]
    res = ("row:%d" % key) if protected else ("job:%d" % key)
    states = [sqlstate(lambda t=t, w=w: write(res, key, t, w))
              for t, w in ((10, "zombie"), (20, "holder"), (10, "zombie-again"), (20, "holder-again"))]
    table = "rows_p" if protected else "rows_c"
    rows = [w for (w,) in db.sql("SELECT who FROM %s WHERE k = %%s ORDER BY seq" % table, (key,))]
    want_rows = ["zombie", "holder", "holder-again"]
    ok(states == [None, None, "23T01", None] and rows == want_rows and db.highest(res) == 20,
       "%s (%s): the zombie at 10 is refused 23T01 after the holder's 20, nothing of it "
       "commits; the holder's writes commit" % (name, "protected row carries the token"
                                                if protected else "check-only"),
       "states %r, rows %r, highest %r" % (states, rows, db.highest(res)))


def main():
    db = Database(DB)
    try:
        run(db)
    finally:
        db.close()
    return REPORT.finish("pg_stacks_psycopg")


def run(db):
    print("# psycopg %s, libpq %s" % (psycopg.__version__, psycopg.pq.version()))
    # the check-only pattern writes rows_c (no guard); a protected table
    # rows_p: one fence per key k, the row carries the token
    db.sql("CREATE TABLE rows_c (seq bigserial PRIMARY KEY, k int, who text)")
    db.sql("CREATE TABLE rows_p (seq bigserial PRIMARY KEY, k int, who text, tok bigint)")
    db.sql("SELECT fence_protect('rows_p', 'tok', 'row:', 'k')")
    ins_c = "INSERT INTO rows_c (k, who) VALUES (%s, %s)"
    ins_p = "INSERT INTO rows_p (k, who, tok) VALUES (%s, %s, %s)"
    check = "SELECT fence_check(%s, %s)"

    # --- the default mode: implicit transactions, the application commits
    c = psycopg.connect(db.dsn)

    def default_check(res, k, tok, who):
        try:
            c.execute(check, (res, tok))
            c.execute(ins_c, (k, who))
            c.commit()
        except BaseException:
            c.rollback()
            raise

    def default_row(res, k, tok, who):
        try:
            c.execute(ins_p, (k, who, tok))
            c.commit()
        except BaseException:
            c.rollback()
            raise
    story(db, "default mode, commit()", default_check, False)
    story(db, "default mode, commit()", default_row, True)

    def default_tx(res, k, tok, who):
        with c.transaction():
            c.execute(check, (res, tok))
            c.execute(ins_c, (k, who))
        c.commit()
    story(db, "default mode, conn.transaction()", default_tx, False)
    c.close()

    # --- autocommit: conn.transaction() around the check and the write
    a = psycopg.connect(db.dsn, autocommit=True)

    def auto_check(res, k, tok, who):
        with a.transaction():
            a.execute(check, (res, tok))
            a.execute(ins_c, (k, who))

    def auto_row(res, k, tok, who):
        a.execute(ins_p, (k, who, tok))      # one statement: its own transaction
    story(db, "autocommit, conn.transaction()", auto_check, False)
    story(db, "autocommit, one statement", auto_row, True)

    # the pitfall: in autocommit the check and the write without
    # conn.transaction() are two transactions. A table protected without a
    # token column refuses the write (23T02), the holder's too: nothing commits.
    db.sql("CREATE TABLE plain (seq bigserial PRIMARY KEY, who text)")
    db.sql("SELECT fence_protect('plain', NULL, 'plain')")
    db.sql("SELECT fence_check('plain', 20)")
    states = []
    for tok, who in ((10, "zombie"), (20, "holder")):
        states.append(sqlstate(lambda: (a.execute(check, ("plain", tok)),
                                        a.execute("INSERT INTO plain (who) VALUES (%s)", (who,)))))
    rows = db.sql("SELECT who FROM plain")
    ok(states == ["23T01", "23T02"] and rows == [],
       "autocommit without conn.transaction(): a table protected without a token column "
       "refuses the unfenced write (23T02), nothing commits", "states %r, rows %r" % (states, rows))
    # and on a table guarded by nothing but the check, the write runs alone
    db.sql("SELECT fence_check('unguarded', 20)")
    state = sqlstate(lambda: a.execute(check, ("unguarded", 10)))
    a.execute(ins_c, (0, "zombie-unguarded"))
    rows = db.sql("SELECT who FROM rows_c WHERE who = 'zombie-unguarded'")
    ok(state == "23T01" and rows == [("zombie-unguarded",)],
       "DEMONSTRATION (documented misuse): in autocommit, a refused fence_check does not stop "
       "the application's next statement; on a table guarded only by the check it commits",
       "state %r, rows %r" % (state, rows))

    # --- pipeline mode
    def pipe_check(res, k, tok, who):
        with a.pipeline():
            with a.transaction():
                a.execute(check, (res, tok))
                a.execute(ins_c, (k, who))

    def pipe_row(res, k, tok, who):
        with a.pipeline():
            a.execute(ins_p, (k, who, tok))
            a.execute(ins_p, (k, who + "-2", tok))
    story(db, "pipeline (autocommit), conn.transaction()", pipe_check, False)
    N[0] += 1
    key = N[0]
    res = "row:%d" % key
    states = [sqlstate(lambda t=t, w=w: pipe_row(res, key, t, w))
              for t, w in ((10, "zombie"), (20, "holder"), (10, "zombie-again"))]
    rows = [w for (w,) in db.sql("SELECT who FROM rows_p WHERE k = %s ORDER BY seq", (key,))]
    ok(states == [None, None, "23T01"] and rows == ["zombie", "zombie-2", "holder", "holder-2"],
       "pipeline (autocommit), protected rows carrying the token: the zombie's batch at 10 "
       "after the holder's 20 is refused 23T01, none of its rows commits",
       "states %r, rows %r" % (states, rows))
    p = psycopg.connect(db.dsn)

    def pipe_default(res, k, tok, who):
        try:
            with p.pipeline():
                p.execute(check, (res, tok))
                p.execute(ins_c, (k, who))
            p.commit()
        except BaseException:
            p.rollback()
            raise
    story(db, "pipeline (default mode), commit()", pipe_default, False)
    p.close()

    # --- COPY FROM STDIN
    def copy_check(res, k, tok, who):
        with a.transaction():
            a.execute(check, (res, tok))
            with a.cursor().copy("COPY rows_c (k, who) FROM STDIN") as cp:
                cp.write_row((k, who))

    def copy_row(res, k, tok, who):
        with a.cursor().copy("COPY rows_p (k, who, tok) FROM STDIN") as cp:
            cp.write_row((k, who, tok))
    story(db, "COPY FROM STDIN in conn.transaction()", copy_check, False)
    story(db, "COPY FROM STDIN, rows carrying the token", copy_row, True)
    # a zombie's COPY mixing its rows with rows at the holder's token: none stays
    N[0] += 1
    key = N[0]
    db.sql("SELECT fence_check(%s, 20)", ("row:%d" % key,))

    def copy_mixed():
        with a.cursor().copy("COPY rows_p (k, who, tok) FROM STDIN") as cp:
            for i in range(500):
                cp.write_row((key, "copy-%d" % i, 20 if i != 250 else 10))
    state = sqlstate(copy_mixed)
    rows = db.sql("SELECT count(*) FROM rows_p WHERE k = %s", (key,))[0][0]
    ok(state == "23T01" and rows == 0,
       "COPY of 500 rows of which one carries the stale token: 23T01, none of the 500 stays",
       "state %r, rows %r" % (state, rows))
    a.close()

    # --- server-side prepare on every statement
    s = psycopg.connect(db.dsn, autocommit=True, prepare_threshold=0)

    def prep_check(res, k, tok, who):
        with s.transaction():
            s.execute(check, (res, tok))
            s.execute(ins_c, (k, who))

    def prep_row(res, k, tok, who):
        s.execute(ins_p, (k, who, tok))
    story(db, "prepare_threshold=0, conn.transaction()", prep_check, False)
    story(db, "prepare_threshold=0, rows carrying the token", prep_row, True)
    s.execute("SET plan_cache_mode = force_generic_plan")
    story(db, "prepare_threshold=0 and force_generic_plan", prep_check, False)
    story(db, "prepare_threshold=0 and force_generic_plan", prep_row, True)
    # the same prepared statements, run many times at 10 before the advance,
    # then again at 10 after it: no plan keeps an earlier answer
    N[0] += 1
    key = N[0]
    res = "job:%d" % key
    for _ in range(12):
        prep_check(res, key, 10, "zombie-early")
    n_prep = s.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]
    db.sql("SELECT fence_check(%s, 20)", (res,))
    state = sqlstate(lambda: prep_check(res, key, 10, "zombie-late"))
    rows = db.sql("SELECT count(*) FROM rows_c WHERE k = %s AND who = 'zombie-late'", (key,))[0][0]
    ok(state == "23T01" and rows == 0 and n_prep >= 2,
       "a statement prepared (generic plan) and run 12 times at 10 refuses 10 once 20 is "
       "accepted", "state %r, zombie-late rows %r, prepared %r" % (state, rows, n_prep))
    s.close()


if __name__ == "__main__":
    sys.exit(main())
