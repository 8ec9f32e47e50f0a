#!/usr/bin/python3
"""The invariant under concurrency, on the SQL edition (any major).

Eight connections write one protected table (one resource) for a few
seconds, at random isolation levels: most present the highest they last saw
or one above it (an advance), some an older token (a stale holder), some
fence first and write without a token, some roll a savepoint back, some
pause inside their transaction. Then, in commit order (track_commit_timestamp,
which tests/pg_cluster.sh turns on), the committed rows' tokens never
decrease, and fence_tokens holds the highest committed one. Errors other
than 23T01, 40001 and 40P01 are failures.

Run by tests/run_pg.sh with FENCE_EDITION=sql (PGHOST etc. set).
"""
import os
import pathlib
import random
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import psycopg  # noqa: E402
from tap import Report  # noqa: E402

LABEL = "pg sql-edition pg%s race" % os.environ.get("FENCE_PG_MAJOR", "15")
report = Report(LABEL)
SECONDS = float(os.environ.get("RACE_SECONDS", "4"))
LEVELS = ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"]

admin = psycopg.connect(dbname="postgres", autocommit=True)
admin.execute("DROP DATABASE IF EXISTS sql_race")
admin.execute("CREATE DATABASE sql_race")
setup = psycopg.connect(dbname="sql_race", autocommit=True)
setup.execute("CREATE TABLE race_log (id bigserial PRIMARY KEY, who int, tok bigint)")
setup.execute("SELECT fence_protect('race_log', 'tok', 'race:r')")
setup.execute("SELECT fence_check('race:r', 1)")
setup.close()

unexpected = []
counts = {"commit": 0, "stale": 0, "serialization": 0, "deadlock": 0}
lock = threading.Lock()


def worker(n):
    rnd = random.Random(n * 7919 + int(time.time()))
    con = psycopg.connect(dbname="sql_race", autocommit=True)
    end = time.time() + SECONDS
    while time.time() < end:
        seen = con.execute("SELECT fence_current('race:r')").fetchone()[0]
        kind = rnd.random()
        tok = seen - rnd.randint(1, 3) if kind < 0.15 else seen + (1 if kind > 0.7 else 0)
        tok = max(tok, 0)
        try:
            with con.transaction():
                con.execute("SET TRANSACTION ISOLATION LEVEL " + rnd.choice(LEVELS))
                if rnd.random() < 0.3:
                    con.execute("SELECT fence_check('race:r', %s)", (tok,))
                    if rnd.random() < 0.3:
                        time.sleep(rnd.random() * 0.01)
                    con.execute("UPDATE race_log SET who = who WHERE id = -1")
                    con.execute("INSERT INTO race_log (who, tok) VALUES (%s, %s)", (n, tok))
                else:
                    if rnd.random() < 0.2:
                        try:
                            with con.transaction():
                                con.execute("SELECT fence_check('race:r', %s)", (tok + 5,))
                                raise RuntimeError("roll the savepoint back")
                        except RuntimeError:
                            pass
                    con.execute("INSERT INTO race_log (who, tok) VALUES (%s, %s)", (n, tok))
                    if rnd.random() < 0.2:
                        time.sleep(rnd.random() * 0.01)
            with lock:
                counts["commit"] += 1
        except psycopg.Error as e:
            state = e.sqlstate or ""
            key = {"23T01": "stale", "40001": "serialization", "40P01": "deadlock"}.get(state)
            with lock:
                if key:
                    counts[key] += 1
                else:
                    unexpected.append("%s: %s" % (state, e.diag.message_primary))
    con.close()


threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()

con = psycopg.connect(dbname="sql_race", autocommit=True)
rows = con.execute("SELECT tok, pg_xact_commit_timestamp(xmin) AS ts FROM race_log "
                   "ORDER BY ts, id").fetchall()
highest = con.execute("SELECT token FROM fence_tokens WHERE resource = 'race:r'").fetchone()[0]
con.close()
admin.execute("DROP DATABASE sql_race")
admin.close()

# In commit order: a row's token is at least every token committed strictly
# before it (rows committed at the same microsecond are not ordered).
bad = []
best_before = -1
group_ts, group_max = None, -1
for tok, ts in rows:
    if ts != group_ts:
        best_before = max(best_before, group_max)
        group_ts, group_max = ts, -1
    if tok < best_before:
        bad.append((tok, best_before, ts))
    group_max = max(group_max, tok)
report.ok(not unexpected, "no error but 23T01, 40001 and 40P01", "; ".join(unexpected[:5]))
report.ok(counts["commit"] > 20 and counts["stale"] > 0,
          "the run committed writes and refused stale ones (%s)" % ", ".join(
              "%s %d" % kv for kv in counts.items()))
report.ok(not bad, "in commit order the committed tokens never decrease (%d rows)" % len(rows),
          "first: %s" % (bad[:3],))
report.ok(highest == max(t for t, _ in rows), "fence_tokens holds the highest committed token",
          "fence_tokens %s, rows %s" % (highest, max(t for t, _ in rows)))
sys.exit(report.finish("sql_edition_race"))
