#!/usr/bin/python3
"""Connections of one holder advancing a resource to the same new token at once.

A holder's new token n (highest n-1) is presented by three connections at
the same moment (a barrier), each writing a row of a protected table under
it, for ROUNDS rounds. Transactions fenced at the same token never wait for
each other's outcome and the first advance must not make them deadlock:
every connection commits (no 40P01, no other error), every row commits, and
fence_tokens holds the last token. The SQL edition once took the share lock
first in every connection, so that two of them each waited for the other's
share lock to take the exclusive one (about 1 round in 10 ended in 40P01).

Both editions: tests/run_pg.sh runs it for the C edition (tests/pg_*.py)
and, with FENCE_EDITION=sql, for the SQL edition (installed in template1).
"""
import os
import pathlib
import sys
import threading

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import psycopg  # noqa: E402
from tap import Report  # noqa: E402

EDITION = os.environ.get("FENCE_EDITION", "c")
LABEL = "pg same-token advance" + (" sql-edition pg%s" % os.environ.get("FENCE_PG_MAJOR", "15")
                                   if EDITION == "sql" else "")
ROUNDS = int(os.environ.get("SAME_TOKEN_ROUNDS", "100"))
CONNS = 3
report = Report(LABEL)

admin = psycopg.connect(dbname="postgres", autocommit=True)
admin.execute("DROP DATABASE IF EXISTS fence_same_token")
admin.execute("CREATE DATABASE fence_same_token")
setup = psycopg.connect(dbname="fence_same_token", autocommit=True)
if EDITION != "sql":
    setup.execute("CREATE EXTENSION IF NOT EXISTS fence")
setup.execute("CREATE TABLE st_log (round int, conn int, tok bigint)")
setup.execute("SELECT fence_protect('st_log', 'tok', 'st:fan')")
setup.execute("SELECT fence_check('st:fan', 1)")

conns = [psycopg.connect(dbname="fence_same_token") for _ in range(CONNS)]
errors = {}
for n in range(2, ROUNDS + 2):
    bar = threading.Barrier(CONNS)

    def work(i, n=n, bar=bar):
        c = conns[i]
        bar.wait()
        try:
            c.execute("SELECT fence_check('st:fan', %s)", (n,))
            c.execute("INSERT INTO st_log VALUES (%s, %s, %s)", (n, i, n))
            c.commit()
        except psycopg.Error as e:
            c.rollback()
            errors.setdefault(type(e).__name__ + " " + (e.sqlstate or ""), []).append(n)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(CONNS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

report.ok(not errors, "%d rounds of %d connections presenting one new token at once: none fails"
          % (ROUNDS, CONNS), "errors (kind: rounds): %r" % {k: v[:5] for k, v in errors.items()})
rows = setup.execute("SELECT count(*), count(DISTINCT round) FROM st_log").fetchone()
report.ok(rows == (ROUNDS * CONNS, ROUNDS), "every row committed (%d rows, %d rounds)" % rows,
          "expected %d rows in %d rounds" % (ROUNDS * CONNS, ROUNDS))
high = setup.execute("SELECT token FROM fence_tokens WHERE resource = 'st:fan'").fetchone()[0]
report.ok(high == ROUNDS + 1, "fence_tokens holds the last token (%s)" % high)
for c in conns:
    c.close()
setup.close()
admin.execute("DROP DATABASE fence_same_token")
sys.exit(report.finish("pg_same_token_advance"))
