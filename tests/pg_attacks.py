#!/usr/bin/python3
"""tests/pg_attacks.py: the PostgreSQL fence attacked as an adversary would.

Each case tries one way around "a stale write never commits" (issue 10 and
SPEC "No way around the fence") with no special privilege unless it says
so, and asserts on what *committed* (the protected table and
fence_tokens), not only on the error raised. Runs against the server in
PGHOST/PGPORT (tests/run_pg.sh starts one), in a database of its own that
it drops at the end.

Output: "ok - pg attacks ..." / "not ok - pg attacks ..." per assertion.
"""
import os
import sys
import threading
import time
import traceback

import psycopg

from tap import Report

DB = "fence_attacks"
STALE, MISSING = "23T01", "23T02"

REPORT = Report("pg attacks")
ok = REPORT.ok


def connect(db=DB, autocommit=True, **kw):
    return psycopg.connect(dbname=db, autocommit=autocommit, **kw)


def sqlstate(conn, sql, args=None):
    """Run sql; return None on success or the SQLSTATE of its error (rolled back)."""
    try:
        with conn.transaction():
            conn.execute(sql, args)
        return None
    except psycopg.Error as e:
        return e.sqlstate


def one(conn, sql, args=None):
    row = conn.execute(sql, args).fetchone()
    return row[0] if row else None


def fresh(conn, *tables):
    for t in tables:
        conn.execute("DROP TABLE IF EXISTS %s CASCADE" % t)
    conn.execute("DELETE FROM fence_tokens")


# ---------------------------------------------------------------------------
# item 9: a long resource with multibyte characters, seen by a LATIN1 client

def attack_message_encoding(conn):
    fresh(conn)
    res = "a" * 199 + "é" * 30        # the 200-byte cut falls inside an é
    conn.execute("SELECT fence_check(%s, 10)", (res,))
    latin = connect(client_encoding="LATIN1")
    state = sqlstate(latin, "SELECT fence_check(%s, 3)", (res,))
    ok(state == STALE, "a LATIN1 client gets 23T01 for a long multibyte resource (not 22021)",
       "got %s" % state)
    # a character LATIN1 lacks (issue 26, item 8): 23T01, not 22P05; what
    # LATIN1 has is shown as itself, the rest as \uXXXX
    res = "caf\u00e9:\u4e2d"
    conn.execute("SELECT fence_check(%s, 10)", (res,))
    try:
        # (a LATIN1 client cannot send the name: the server spells it)
        latin.execute("SELECT fence_check('caf' || chr(233) || ':' || chr(20013), 3)")
        state, msg = None, ""
    except psycopg.Error as e:
        state, msg = e.sqlstate, str(e)
    ok(state == STALE and 'resource "caf\u00e9:\\u4E2D"' in msg,
       "a LATIN1 client gets 23T01 for a CJK resource (not 22P05), the character it lacks escaped",
       "got %s: %r" % (state, msg))
    latin.close()


# ---------------------------------------------------------------------------
# item 2: MERGE gives a BEFORE UPDATE trigger the union of every UPDATE
# action's SET columns

def attack_merge(conn):
    fresh(conn, "acct", "src")
    conn.execute("CREATE TABLE acct (id int PRIMARY KEY, bal int, tok bigint)")
    conn.execute("CREATE TABLE src (id int, bal int, tok bigint)")
    conn.execute("SELECT fence_protect('acct', 'tok', 'm:acct')")
    conn.execute("INSERT INTO acct VALUES (1, 100, 10), (2, 100, 10)")   # highest 10
    conn.execute("INSERT INTO src VALUES (1, 0, 7), (2, 0, 7)")
    # the zombie holds 7; the action that matches does not set tok, another would
    merge = """MERGE INTO acct a USING src s ON a.id = s.id
               WHEN MATCHED AND s.id = 99 THEN UPDATE SET tok = s.tok
               WHEN MATCHED THEN UPDATE SET bal = s.bal"""
    state = sqlstate(conn, merge)
    ok(state in (STALE, MISSING), "MERGE: an UPDATE action that leaves the token column out needs a fence",
       "got %s" % state)
    ok(one(conn, "SELECT sum(bal) FROM acct") == 200, "MERGE: the zombie's balances did not commit")
    # SET tok = s.tok with the stale token: checked with the new value
    state = sqlstate(conn, """MERGE INTO acct a USING src s ON a.id = s.id
                              WHEN MATCHED THEN UPDATE SET tok = s.tok, bal = 0""")
    ok(state == STALE, "MERGE: an action that sets a stale token is refused", "got %s" % state)
    # a fenced holder at 10 may MERGE without setting tok
    with conn.transaction():
        conn.execute("SELECT fence_check('m:acct', 10)")
        conn.execute(merge)
    ok(one(conn, "SELECT sum(bal) FROM acct") == 0, "MERGE: a transaction fenced at the highest writes")
    # MERGE ... WHEN NOT MATCHED THEN INSERT with a stale token
    conn.execute("INSERT INTO src VALUES (3, 5, 7)")
    state = sqlstate(conn, """MERGE INTO acct a USING src s ON a.id = s.id
                              WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.bal, s.tok)""")
    ok(state == STALE and one(conn, "SELECT count(*) FROM acct") == 2,
       "MERGE: an INSERT action with a stale token is refused", "got %s" % state)
    # a fresh backend whose first fence call is the MERGE's own trigger
    fresh_conn = connect()
    state = sqlstate(fresh_conn, merge)
    ok(state in (STALE, MISSING), "MERGE: refused also when fence loads during the MERGE",
       "got %s" % state)
    fresh_conn.close()
    # a plain UPDATE SET tok = tok is still checked with the row's token
    conn.execute("UPDATE src SET tok = 11")
    with conn.transaction():
        conn.execute("SELECT fence_check('m:acct', 11)")
    state = sqlstate(conn, "UPDATE acct SET tok = tok")
    ok(state == STALE, "UPDATE SET tok = tok is checked with the value (10 < 11)", "got %s" % state)
    ok(one(conn, "SELECT fence_current('m:acct')") == 11, "MERGE: the highest is 11")
    # the statement during which fence loads cannot know it is not a MERGE:
    # an unchanged token counts as not set (refused unless fenced), a new one
    # is checked
    first = connect()
    state = sqlstate(first, "UPDATE acct SET tok = tok, bal = 1")
    ok(state == STALE and one(conn, "SELECT sum(bal) FROM acct") == 0,
       "the statement that loads fence: a plain UPDATE SET tok = tok (stale) is checked", "got %s" % state)
    first.close()
    conn.execute("""CREATE OR REPLACE FUNCTION merge_in_function() RETURNS void LANGUAGE plpgsql AS $$
                    BEGIN
                      MERGE INTO acct a USING src s ON a.id = s.id
                        WHEN MATCHED AND s.id = 99 THEN UPDATE SET tok = s.tok
                        WHEN MATCHED THEN UPDATE SET bal = 1;
                    END $$""")
    first = connect()
    state = sqlstate(first, "SELECT merge_in_function()")
    ok(state == MISSING and one(conn, "SELECT sum(bal) FROM acct") == 0,
       "the statement that loads fence: a MERGE inside a function is refused", "got %s" % state)
    first.close()
    first = connect()
    state = sqlstate(first, "UPDATE acct SET tok = 12, bal = 1")
    ok(state is None and one(conn, "SELECT fence_current('m:acct')") == 12,
       "the statement that loads fence: a new token is checked and accepted", "got %s" % state)
    first.close()
    # a statement that fails inside the MERGE and is caught (an EXCEPTION
    # block: a subtransaction rolled back) must not leave the MERGE looking
    # like that statement to the guard
    conn.execute("CREATE TABLE IF NOT EXISTS scratch (x int)")
    conn.execute("TRUNCATE scratch")
    conn.execute("INSERT INTO scratch VALUES (0)")
    conn.execute("""CREATE OR REPLACE FUNCTION caught_failure() RETURNS int LANGUAGE plpgsql AS $$
                    BEGIN
                      UPDATE scratch SET x = 1 / x;
                      RETURN 0;
                    EXCEPTION WHEN division_by_zero THEN
                      RETURN 0;
                    END $$""")
    conn.execute("UPDATE src SET tok = 7")    # the zombie holds 7; acct's rows hold 12
    state = sqlstate(conn, """MERGE INTO acct a
                              USING (SELECT id, bal + caught_failure() AS bal, tok FROM src) s
                              ON a.id = s.id
                              WHEN MATCHED AND s.id = 99 THEN UPDATE SET tok = s.tok
                              WHEN MATCHED THEN UPDATE SET bal = 5""")
    ok(state == MISSING and one(conn, "SELECT sum(bal) FROM acct") == 2,
       "MERGE: refused also after a statement inside it failed and was caught", "got %s" % state)
    # the same in a fresh backend, where fence loads inside the caught
    # subtransaction, during the MERGE
    conn.execute("""CREATE OR REPLACE FUNCTION caught_failure() RETURNS int LANGUAGE plpgsql AS $$
                    BEGIN
                      PERFORM fence_current('m:acct');
                      UPDATE scratch SET x = 1 / x;
                      RETURN 0;
                    EXCEPTION WHEN division_by_zero THEN
                      RETURN 0;
                    END $$""")
    first = connect()
    state = sqlstate(first, """MERGE INTO acct a
                               USING (SELECT id, bal + caught_failure() AS bal, tok FROM src) s
                               ON a.id = s.id
                               WHEN MATCHED AND s.id = 99 THEN UPDATE SET tok = s.tok
                               WHEN MATCHED THEN UPDATE SET bal = 5""")
    ok(state == MISSING and one(conn, "SELECT sum(bal) FROM acct") == 2,
       "MERGE: refused when fence loads inside a subtransaction of the MERGE that fails and is caught",
       "got %s" % state)
    first.close()
    conn.execute("DROP FUNCTION caught_failure()")
    conn.execute("DROP TABLE scratch")


# ---------------------------------------------------------------------------
# item 3: per-row resource names that depend on session settings

def attack_key_settings(conn):
    fresh(conn, "ev", "money_t", "num_t", "ci_t")
    conn.execute("CREATE TABLE ev (at timestamptz PRIMARY KEY, tok bigint)")
    state = sqlstate(conn, "SELECT fence_protect('ev', 'tok', 'ev:', 'at')")
    ok(state == "42804", "a timestamptz key (its text depends on TimeZone) is refused", "got %s" % state)
    conn.execute("CREATE TABLE num_t (k numeric PRIMARY KEY, tok bigint)")
    state = sqlstate(conn, "SELECT fence_protect('num_t', 'tok', 'n:', 'k')")
    ok(state == "42804", "a numeric key (1.0 = 1.00, two texts) is refused", "got %s" % state)
    conn.execute("CREATE COLLATION IF NOT EXISTS ci (provider = icu, locale = 'und-u-ks-level2', "
                 "deterministic = false)")
    conn.execute("CREATE TABLE ci_t (k text COLLATE ci PRIMARY KEY, tok bigint)")
    state = sqlstate(conn, "SELECT fence_protect('ci_t', 'tok', 'c:', 'k')")
    ok(state == "0A000", "a key with a nondeterministic collation is refused", "got %s" % state)
    # protected with a good key, then the key's type changed behind the guard
    conn.execute("CREATE TABLE money_t (k text PRIMARY KEY, tok bigint)")
    conn.execute("SELECT fence_protect('money_t', 'tok', 'mt:', 'k')")
    conn.execute("INSERT INTO money_t VALUES ('2026-01-01 00:00:00+00', 5)")
    conn.execute("ALTER TABLE money_t ALTER COLUMN k TYPE timestamptz USING k::timestamptz")
    tz = connect(options="-c TimeZone=Asia/Tokyo")
    state = sqlstate(tz, "UPDATE money_t SET tok = 3")
    ok(state == "42804", "a key changed to timestamptz after protecting makes writes fail", "got %s" % state)
    ok(one(conn, "SELECT tok FROM money_t") == 5, "key type changed: nothing committed")
    tz.close()


# ---------------------------------------------------------------------------
# item 7: the token column's type changed after protecting

def attack_token_type(conn):
    fresh(conn, "tt")
    conn.execute("CREATE TABLE tt (id int PRIMARY KEY, tok bigint)")
    conn.execute("SELECT fence_protect('tt', 'tok', 'tt:r')")
    conn.execute("INSERT INTO tt VALUES (1, 10)")
    for typ in ("float8", "numeric", "text"):
        conn.execute("ALTER TABLE tt ALTER COLUMN tok TYPE %s" % typ)
        state = sqlstate(conn, "INSERT INTO tt VALUES (2, 11)")
        ok(state == "42804", "token column changed to %s: writes fail" % typ, "got %s" % state)
        ok(one(conn, "SELECT fence_current('tt:r')") == 10,
           "token column changed to %s: the highest stays 10" % typ)
    conn.execute("ALTER TABLE tt ALTER COLUMN tok TYPE bigint USING tok::bigint")
    state = sqlstate(conn, "INSERT INTO tt VALUES (2, 11)")
    ok(state is None and one(conn, "SELECT fence_current('tt:r')") == 11,
       "token column back to bigint: writes work again", "got %s" % state)


# ---------------------------------------------------------------------------
# item 8: empty column names

def attack_empty_columns(conn):
    fresh(conn, "ec")
    conn.execute("CREATE TABLE ec (id int PRIMARY KEY, tok bigint)")
    state = sqlstate(conn, "SELECT fence_protect('ec', '', 'ec:r')")
    ok(state == "42703", "fence_protect with token column '' is a missing column", "got %s" % state)
    state = sqlstate(conn, "SELECT fence_protect('ec', 'tok', 'ec:', '')")
    ok(state == "42703", "fence_protect with key column '' is a missing column", "got %s" % state)
    ok(one(conn, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'ec'::regclass") == 0,
       "empty column names leave the table unguarded, not half-guarded")


# ---------------------------------------------------------------------------
# item 6: a hand-made trigger calling fence_guard with arguments of its own

def attack_guard_args(conn):
    fresh(conn)
    conn.execute("DROP ROLE IF EXISTS fence_attacker")
    conn.execute("CREATE ROLE fence_attacker LOGIN")
    conn.execute("GRANT TEMP ON DATABASE %s TO fence_attacker" % DB)
    conn.execute("SELECT fence_check('keep', 50)")
    att = connect(user="fence_attacker")
    att.execute("CREATE TEMP TABLE t (tok bigint)")
    bad = []
    for label, args in (("empty resource", "'tok', '', ''"),
                        ("over-long resource", "'tok', '%s', ''" % ("x" * 1100)),
                        ("over-long prefix", "'tok', '%s', 'tok'" % ("x" * 1100))):
        sqlstate(att, "DROP TRIGGER IF EXISTS g ON t")
        att.execute("CREATE TRIGGER g BEFORE INSERT ON t FOR EACH ROW "
                    "EXECUTE FUNCTION fence_guard(%s)" % args)
        state = sqlstate(att, "INSERT INTO t VALUES (1)")
        if state is None or state[:2] != "22":
            bad.append("%s: %s" % (label, state))
    ok(not bad, "fence_guard refuses arguments fence_protect would not produce", "; ".join(bad))
    rows = one(conn, "SELECT count(*) FROM fence_tokens WHERE octet_length(resource) NOT BETWEEN 1 AND 1024")
    ok(rows == 0, "no invalid row reached fence_tokens")
    att.close()
    conn.execute("DROP OWNED BY fence_attacker")
    conn.execute("DROP ROLE fence_attacker")


# ---------------------------------------------------------------------------
# items 10 and 11: a million per-row fences in one transaction, under the
# default max_locks_per_transaction, without starving other sessions; one
# resource advanced a million times, linearly

SCALE = int(os.environ.get("FENCE_SCALE", "1000000"))


def attack_scale(conn):
    fresh(conn, "big")
    conn.execute("CREATE TABLE big (id bigint PRIMARY KEY, bal int, tok bigint)")
    conn.execute("SELECT fence_protect('big', 'tok', 'big:', 'id')")
    t0 = time.time()
    state = sqlstate(conn, "INSERT INTO big SELECT g, 0, 5 FROM generate_series(1, %d) g" % SCALE)
    ok(state is None and one(conn, "SELECT count(*) FROM fence_tokens") == SCALE,
       "one INSERT advances %d per-row resources in one transaction" % SCALE,
       "got %s in %.1f s" % (state, time.time() - t0))
    conn.execute("CREATE TABLE big_copy (id bigint PRIMARY KEY, bal int, tok bigint)")
    conn.execute("SELECT fence_protect('big_copy', 'tok', 'bigc:', 'id')")
    t0 = time.time()
    try:
        with conn.transaction():
            with conn.cursor().copy("COPY big_copy FROM STDIN") as cp:
                for i in range(1, SCALE + 1):
                    cp.write_row((i, 0, 3))
        state = None
    except psycopg.Error as e:
        state = e.sqlstate
    ok(state is None and one(conn, "SELECT count(*) FROM fence_tokens WHERE resource LIKE 'bigc:%'") == SCALE,
       "one COPY advances %d per-row resources in one transaction" % SCALE,
       "got %s in %.1f s" % (state, time.time() - t0))
    conn.execute("DROP TABLE big_copy")
    other_ok = []

    def other_session():
        # while the big transaction holds its fences: a new connection, an
        # unrelated fenced write at the same token, a plain query
        time.sleep(1.0)
        try:
            c = connect()
            c.execute("SELECT fence_check('big:1', 5)")
            other_ok.append(one(c, "SELECT count(*) FROM pg_stat_activity") > 0)
            c.close()
        except psycopg.Error as e:
            other_ok.append(False)
            print("#   other session: %s" % e)
    th = threading.Thread(target=other_session)
    th.start()
    t0 = time.time()
    with conn.transaction():
        conn.execute("UPDATE big SET bal = bal + 1, tok = 5")
        n = one(conn, "SELECT count(*) FROM fence_held()")
        conn.execute("SELECT count(fence_check('big:' || g, 5)) FROM generate_series(1, %d) g" % SCALE)
        time.sleep(2.0)
    th.join()
    ok(n == SCALE, "one UPDATE fences %d rows under the default lock table" % SCALE,
       "fenced %s in %.1f s" % (n, time.time() - t0))
    ok(other_ok == [True], "meanwhile a new session connects and a same-token holder does not wait")
    state = sqlstate(conn, "UPDATE big SET tok = 4 WHERE id = 7")
    ok(state == STALE and one(conn, "SELECT tok FROM big WHERE id = 7") == 5,
       "after the bulk transaction a stale token is still refused")
    t0 = time.time()
    with conn.transaction():
        conn.execute("SELECT max(fence_check('big:one', g)) FROM generate_series(1, %d) g" % SCALE)
        inside = one(conn, "SELECT fence_current('big:one')")
    took = time.time() - t0
    ok(inside == SCALE and one(conn, "SELECT fence_current('big:one')") == SCALE,
       "one resource advanced %d times in one transaction, committed at the last" % SCALE)
    ok(took < 60, "advancing one resource %d times is linear (%.1f s; 267 s for 200k before)"
       % (SCALE, took))
    conn.execute("DROP TABLE big")
    conn.execute("DELETE FROM fence_tokens")


# ---------------------------------------------------------------------------
# Two resources whose 64-bit lock tags collide, found by a distinguished-point
# search over PostgreSQL's hash_bytes_extended with fence's seed (about 2^32
# hashes; the program is not part of the tests). A collision may only cost a
# wait: every decision reads the resource's own row.

COLLIDE_A, COLLIDE_B = "collide:6cff93fd25238012", "collide:cb7f9efa827f9dfa"


def attack_lock_tag_collision(conn):
    fresh(conn)
    conn.execute("SELECT fence_check(%s, 5)", (COLLIDE_A,))
    conn.execute("SELECT fence_check(%s, 1)", (COLLIDE_B,))
    s1, s2 = connect(autocommit=False), connect(autocommit=False)
    tags = []
    for c, r in ((s1, COLLIDE_A), (s2, COLLIDE_B)):
        c.execute("SELECT fence_check(%s, %s)", (r, 5 if r == COLLIDE_A else 1))
        tags.append(c.execute("SELECT classid, objid, objsubid FROM pg_locks WHERE "
                              "locktype = 'advisory' AND pid = pg_backend_pid()").fetchall())
    ok(tags[0] == tags[1] and len(tags[0]) == 1,
       "the two resources name the same lock (a real collision)", repr(tags))
    # both hold at their own highest at once: same-mode holders share
    s2.commit()
    # an advance of B now waits for the holder of A (the price of a collision)
    s2.execute("SET lock_timeout = '300ms'")
    try:
        s2.execute("SELECT fence_check(%s, 2)", (COLLIDE_B,))
        waited = False
    except psycopg.Error as e:
        waited = e.sqlstate == "55P03"
    s2.rollback()
    ok(waited, "an advance of B waits while A is held at its highest")
    s1.commit()
    s2.execute("SELECT fence_check(%s, 2)", (COLLIDE_B,))
    s2.commit()
    ok(one(conn, "SELECT fence_current(%s)", (COLLIDE_A,)) == 5 and
       one(conn, "SELECT fence_current(%s)", (COLLIDE_B,)) == 2,
       "each resource keeps its own highest (5 and 2)")
    ok(sqlstate(conn, "SELECT fence_check(%s, 4)", (COLLIDE_A,)) == STALE and
       sqlstate(conn, "SELECT fence_check(%s, 1)", (COLLIDE_B,)) == STALE and
       sqlstate(conn, "SELECT fence_check(%s, 3)", (COLLIDE_A,)) == STALE,
       "stale tokens of either are refused; one's highest never judges the other")
    s1.close()
    s2.close()


# ---------------------------------------------------------------------------
# found by an adversarial review that read only the docs (this session)

def attack_review(conn):
    fresh(conn, "pay2", "job", "acct2", "usr", "par", "s2.kid", "pt")
    conn.execute("DROP SCHEMA IF EXISTS s2 CASCADE")
    conn.execute("DROP SCHEMA IF EXISTS s3 CASCADE")
    conn.execute("DROP ROLE IF EXISTS fence_mallory")
    conn.execute("CREATE ROLE fence_mallory LOGIN")
    # A: a role granted TRIGGER replaces the guard with one that never fires
    conn.execute("CREATE TABLE pay2 (id text PRIMARY KEY, amount int, tok bigint)")
    conn.execute("INSERT INTO pay2 VALUES ('bob', 10, 50)")
    conn.execute("SELECT fence_protect('pay2', 'tok', 'pay:', 'id')")
    conn.execute("SELECT fence_check('pay:bob', 50)")
    conn.execute("GRANT SELECT, INSERT, UPDATE, TRUNCATE, TRIGGER ON pay2 TO fence_mallory")
    conn.execute("GRANT USAGE, CREATE ON SCHEMA public TO fence_mallory")
    mal = connect(user="fence_mallory")
    state = sqlstate(mal, "CREATE OR REPLACE TRIGGER fence_guard BEFORE INSERT OR UPDATE OR DELETE "
                          "ON public.pay2 FOR EACH ROW WHEN (false) "
                          "EXECUTE FUNCTION fence_guard('tok', 'pay:', 'id')")
    ok(state == "42501", "a TRIGGER grantee cannot replace the guard (CREATE OR REPLACE TRIGGER)",
       "got %s" % state)
    state = sqlstate(mal, "UPDATE public.pay2 SET amount = -1, tok = 1 WHERE id = 'bob'")
    ok(state == STALE and one(conn, "SELECT amount FROM pay2") == 10,
       "the guard still refuses the grantee's stale write", "got %s" % state)
    # D: a BEFORE trigger firing after the guard rewrites the key
    mal.execute("""CREATE FUNCTION public.to_bob() RETURNS trigger LANGUAGE plpgsql AS
                   $$ BEGIN NEW.id := 'bob'; RETURN NEW; END $$""")
    mal.execute("CREATE TRIGGER zz_rewrite BEFORE INSERT OR UPDATE ON public.pay2 "
                "FOR EACH ROW EXECUTE FUNCTION public.to_bob()")
    state = sqlstate(mal, "INSERT INTO public.pay2 VALUES ('mallory', 1, 1) "
                          "ON CONFLICT (id) DO UPDATE SET amount = -1, tok = 1")
    ok(state == "55000" and one(conn, "SELECT amount FROM pay2 WHERE id = 'bob'") == 10,
       "a BEFORE trigger that fires after the guard makes every write fail", "got %s" % state)
    conn.execute("ALTER TRIGGER zz_rewrite ON pay2 RENAME TO aa_rewrite")
    state = sqlstate(mal, "INSERT INTO public.pay2 VALUES ('mallory', 1, 1)")
    ok(state == STALE, "renamed to fire before the guard, the rewritten key is what is checked",
       "got %s" % state)
    mal.close()
    conn.execute("DROP TABLE pay2")
    conn.execute("DROP FUNCTION to_bob()")
    conn.execute("DROP OWNED BY fence_mallory")
    conn.execute("REVOKE ALL ON SCHEMA public FROM fence_mallory")
    conn.execute("DROP ROLE fence_mallory")
    # B, C: generated token and key columns
    conn.execute("CREATE TABLE job (id int PRIMARY KEY, payload jsonb, "
                 "tok bigint GENERATED ALWAYS AS ((payload->>'token')::bigint) STORED)")
    state = sqlstate(conn, "SELECT fence_protect('job', 'tok', 'job-lock')")
    ok(state == "0A000", "a generated token column is refused", "got %s" % state)
    conn.execute("CREATE TABLE acct2 (name text, k text GENERATED ALWAYS AS (lower(name)) STORED "
                 "PRIMARY KEY, bal int, tok bigint)")
    state = sqlstate(conn, "SELECT fence_protect('acct2', 'tok', 'acct:', 'k')")
    ok(state == "0A000", "a generated key column is refused", "got %s" % state)
    # E: CREATE SCHEMA ... CREATE TABLE under a protected parent
    conn.execute("CREATE TABLE par (id int PRIMARY KEY, v text, tok bigint)")
    conn.execute("SELECT fence_protect('par', 'tok', 'par-lock')")
    conn.execute("SELECT fence_check('par-lock', 100)")
    conn.execute("CREATE SCHEMA s2 CREATE TABLE kid () INHERITS (public.par)")
    state = sqlstate(conn, "INSERT INTO s2.kid VALUES (1, 'zombie', 7)")
    ok(state == STALE and one(conn, "SELECT count(*) FROM par") == 0,
       "a child created by CREATE SCHEMA ... CREATE TABLE is guarded", "got %s" % state)
    conn.execute("CREATE TABLE pt (id int, tok bigint) PARTITION BY RANGE (id)")
    conn.execute("SELECT fence_protect('pt', 'tok', 'pt-lock')")
    conn.execute("CREATE SCHEMA s3 CREATE TABLE pt1 PARTITION OF public.pt FOR VALUES FROM (0) TO (10)")
    state = sqlstate(conn, "TRUNCATE s3.pt1")
    ok(state == MISSING, "a partition created by CREATE SCHEMA refuses an unfenced TRUNCATE",
       "got %s" % state)
    conn.execute("DROP SCHEMA s2 CASCADE")
    conn.execute("DROP SCHEMA s3 CASCADE")
    conn.execute("DROP TABLE par, pt, job, acct2")
    # note 2: SET LOCAL transaction_read_only after a write
    state = None
    try:
        with conn.transaction():
            conn.execute("SELECT fence_check('ro', 10)")
            conn.execute("SET LOCAL transaction_read_only = on")
            conn.execute("SELECT fence_check('ro', 30)")
    except psycopg.Error as e:
        state = e.sqlstate
    ok(state == "25006" and one(conn, "SELECT fence_current('ro')") is None,
       "an advance after SET LOCAL transaction_read_only = on is refused", "got %s" % state)


# ---------------------------------------------------------------------------
# found by a second review, of the newest mechanisms

def attack_review2(conn):
    fresh(conn, "t2", "src2", "logt", "u2")
    # in-memory advances: a token between the written row and the pending
    # highest must be stale
    conn.execute("SELECT fence_check('mem', 1)")
    state = None
    try:
        with conn.transaction():
            conn.execute("SELECT fence_check('mem', 10)")
            conn.execute("SELECT fence_check('mem', 12)")
            state = sqlstate(conn, "SELECT fence_check('mem', 11)")
            tried = one(conn, "SELECT fence_try('mem', 11)")
    except psycopg.Error as e:
        state = e.sqlstate
        tried = None
    ok(state == STALE and tried is False and one(conn, "SELECT fence_current('mem')") == 12,
       "after advancing to 12 in memory, 11 is stale and 12 commits", "got %s, try %s" % (state, tried))
    # the same through one COPY of a protected table
    conn.execute("CREATE TABLE t2 (id int PRIMARY KEY, v int, tok bigint)")
    conn.execute("SELECT fence_protect('t2', 'tok', 'copy-lock')")
    state = None
    try:
        with conn.cursor().copy("COPY t2 FROM STDIN") as cp:
            for row in ((1, 0, 10), (2, 0, 12), (3, 0, 11)):
                cp.write_row(row)
    except psycopg.Error as e:
        state = e.sqlstate
    ok(state == STALE and one(conn, "SELECT count(*) FROM t2") == 0 and
       one(conn, "SELECT fence_current('copy-lock')") is None,
       "one COPY with tokens 10, 12, 11 is refused whole", "got %s" % state)
    # a MERGE nested in a fresh backend's first statement, which writes
    # another table
    conn.execute("DELETE FROM t2")
    conn.execute("SELECT fence_check('copy-lock', 10)")
    conn.execute("INSERT INTO t2 VALUES (1, 0, 10), (2, 0, 10)")
    conn.execute("CREATE TABLE src2 (id int, v int, tok bigint, setit bool)")
    conn.execute("INSERT INTO src2 VALUES (1, 111, NULL, false), (2, 222, 10, true)")
    conn.execute("CREATE TABLE logt (x int)")
    conn.execute("""CREATE OR REPLACE FUNCTION fm() RETURNS int LANGUAGE plpgsql AS $$
                    BEGIN
                      MERGE INTO t2 USING src2 ON t2.id = src2.id
                        WHEN MATCHED AND src2.setit THEN UPDATE SET tok = src2.tok
                        WHEN MATCHED THEN UPDATE SET v = src2.v;
                      RETURN 1;
                    END $$""")
    first = connect()
    state = sqlstate(first, "INSERT INTO logt SELECT fm()")
    ok(state == MISSING and one(conn, "SELECT v FROM t2 WHERE id = 1") == 0,
       "first statement INSERT INTO other SELECT f(), f() MERGEs without a fence: refused",
       "got %s" % state)
    first.close()
    conn.execute("CREATE TABLE u2 (v int)")
    conn.execute("INSERT INTO u2 VALUES (0)")
    conn.execute("""CREATE OR REPLACE FUNCTION u2_merge() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN PERFORM fm(); RETURN NULL; END $$""")
    conn.execute("CREATE TRIGGER u2_after AFTER UPDATE ON u2 FOR EACH ROW EXECUTE FUNCTION u2_merge()")
    first = connect()
    state = sqlstate(first, "UPDATE u2 SET v = v + 1")
    ok(state == MISSING and one(conn, "SELECT v FROM t2 WHERE id = 1") == 0,
       "first statement UPDATE other whose trigger MERGEs without a fence: refused", "got %s" % state)
    first.close()
    first = connect()
    state = sqlstate(first, "UPDATE t2 SET v = 5, tok = 10 WHERE id = 1")
    ok(state is None, "first statement UPDATE of the protected table itself, same token: accepted",
       "got %s" % state)
    first.close()
    conn.execute("DROP TABLE t2, src2, logt, u2")
    conn.execute("DROP FUNCTION fm(), u2_merge()")


def attack_missing_columns(conn):
    """Token and key columns added after the rows were stored: the stored
    rows have fewer columns and read the added ones' defaults."""
    fresh(conn, "miss")
    conn.execute("CREATE TABLE miss (id int PRIMARY KEY, v int)")
    conn.execute("INSERT INTO miss SELECT g, 0 FROM generate_series(1, 3) g")
    conn.execute("ALTER TABLE miss ADD COLUMN tok bigint DEFAULT 10, ADD COLUMN k int DEFAULT 7")
    # a token column may have no default (fence_protect refuses one); the
    # stored rows keep reading the value it had when the column was added
    conn.execute("ALTER TABLE miss ALTER COLUMN tok DROP DEFAULT")
    conn.execute("SELECT fence_protect('miss', 'tok', 'mk:', 'k')")
    conn.execute("INSERT INTO miss VALUES (4, 0, 10, 7)")              # mk:7 at 10
    state = sqlstate(conn, "UPDATE miss SET v = 1, tok = 9 WHERE id = 1")
    ok(state == STALE, "added columns: a stale token under a stored row's default key is refused",
       "got %s" % state)
    state = sqlstate(conn, "UPDATE miss SET v = 1 WHERE id = 2")
    ok(state == MISSING, "added columns: an UPDATE leaving the token out needs a fence on mk:7",
       "got %s" % state)
    state = sqlstate(conn, "DELETE FROM miss WHERE id = 3")
    ok(state == MISSING, "added columns: a DELETE of a stored row needs a fence on mk:7", "got %s" % state)
    with conn.transaction():
        conn.execute("SELECT fence_check('mk:7', 10)")
        conn.execute("DELETE FROM miss WHERE id = 3")
    ok(one(conn, "SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM miss") == "1:0,2:0,4:0" and
       one(conn, "SELECT fence_current('mk:7')") == 10,
       "added columns: only the fenced DELETE committed; mk:7 stays at 10")
    conn.execute("DROP TABLE miss")


CASES = [attack_message_encoding, attack_merge, attack_key_settings, attack_token_type,
         attack_empty_columns, attack_guard_args, attack_lock_tag_collision,
         attack_review, attack_review2, attack_missing_columns, attack_scale]


def main():
    admin = psycopg.connect(dbname="postgres", autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS %s" % DB)
    admin.execute("CREATE DATABASE %s" % DB)
    conn = connect()
    conn.execute("CREATE EXTENSION fence")
    only = sys.argv[1:]
    for case in CASES:
        if only and case.__name__ not in only:
            continue
        try:
            case(conn)
        except Exception:
            ok(False, "%s ran to the end" % case.__name__, traceback.format_exc().replace("\n", "\n#   "))
    conn.close()
    admin.execute("DROP DATABASE %s WITH (FORCE)" % DB)
    return REPORT.finish("pg_attacks")


if __name__ == "__main__":
    sys.exit(main())
