#!/usr/bin/python3
"""tests/sqlite_attacks_blind.py: authorizers that blind a guard's reads, and old guard shapes.

What issue 11 left open, each asserted on what committed (the protected
table and fence_tokens read back by a fresh connection without fence):

  * an authorizer answering SQLITE_IGNORE to the reads of a UNIQUE column
    (or of the rowid) turns them into NULL, so the guard's look-up of the
    rows a REPLACE deletes finds none: the victims of another resource
    were deleted unchecked. The guard must refuse instead;
  * an authorizer answering SQLITE_IGNORE to reads of sqlite_schema.sql
    hides a planted caller of a guard function, and a trigger that may
    RAISE(IGNORE), from fence's schema checks. Refused;
  * a guard trigger of an older shape (a body of SELECTs, which such an
    authorizer skips) is refused until fence_protect runs again; so is
    one of the previous 1.4 shape (its calls pass the resource), sealed
    at load or, when the file was locked then, refused when it runs;
  * an authorizer that makes SQLite skip CREATE TRIGGER (no error) must
    not leave fence_protect or the seal at load reporting a guard that is
    not there.

Usage: /usr/bin/python3 tests/sqlite_attacks_blind.py
Prints "ok - ..." / "not ok - ..." per assertion; exits 1 on a failure.
"""
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

import attacklib as lib
from attacklib import attempt, connect, script

check = lib.Checks("sqlite attacks blind")
ok = check.ok
work = tempfile.mkdtemp(prefix="fence_blind_")
counter = [0]


def committed(path, table):
    c = connect(path, load=False)
    rows = c.execute("SELECT * FROM %s ORDER BY 1" % table).fetchall()
    tokens = c.execute("SELECT resource, token FROM fence_tokens ORDER BY 1").fetchall()
    c.close()
    return rows, tokens


def fresh_db(without_rowid=False):
    """acct keyed on k, unique u and (p, q): acct:a at 9, acct:b at 5."""
    counter[0] += 1
    path = os.path.join(work, "app%d.db" % counter[0])
    c = connect(path)
    c.executescript("""
        CREATE TABLE acct(k TEXT PRIMARY KEY, u TEXT UNIQUE, p TEXT, q TEXT, v INTEGER,
                          tok INTEGER, UNIQUE (p, q))%s;
        SELECT fence_protect('acct', 'tok', 'acct:', 'k');
        INSERT INTO acct VALUES ('a', 'ua', 'pa', 'qa', 1, 5), ('b', 'ub', 'pb', 'qb', 1, 5);
        SELECT fence_check('acct:a', 9);
    """ % (" WITHOUT ROWID" if without_rowid else ""))
    c.close()
    return path


def blinding(columns, only_in_fence=False):
    """An authorizer that answers SQLITE_IGNORE to reads of (table, column)."""
    def auth(action, a1, a2, db, trigger):
        if action == sqlite3.SQLITE_READ and (a1, (a2 or "").lower()) in columns:
            if not only_in_fence or (trigger or "").startswith("fence:"):
                return sqlite3.SQLITE_IGNORE
        return sqlite3.SQLITE_OK
    return auth


def unchanged(path, table, before, what, err):
    after = committed(path, table)
    ok(err is not None and after == before, what,
       "error: %r\nbefore: %r\nafter:  %r" % (err, before, after))


# ---------------------------------------------------------------------
# 1. the REPLACE-victim look-up blinded by an authorizer
# ---------------------------------------------------------------------
def victim_lookup():
    cases = [
        # (columns blinded, statements, what)
        ({("acct", "u")}, ["INSERT OR REPLACE INTO acct VALUES ('c', 'ua', 'pc', 'qc', 1, 0)"],
         "INSERT OR REPLACE through UNIQUE(u), reads of u blinded"),
        ({("acct", "u")}, ["REPLACE INTO acct VALUES ('c', 'ua', 'pc', 'qc', 1, 0)"],
         "REPLACE through UNIQUE(u), reads of u blinded"),
        ({("acct", "q")}, ["INSERT OR REPLACE INTO acct VALUES ('c', 'uc', 'pa', 'qa', 1, 0)"],
         "INSERT OR REPLACE through UNIQUE(p, q), reads of q alone blinded"),
        ({("acct", "u")}, ["BEGIN", "SELECT fence_check('acct:b', 5)",
                           "UPDATE OR REPLACE acct SET u = 'ua' WHERE k = 'b'", "COMMIT"],
         "UPDATE OR REPLACE through UNIQUE(u) under acct:b's fence, reads of u blinded"),
        ({("acct", "u")}, ["UPDATE OR REPLACE acct SET u = 'ua', tok = 5 WHERE k = 'b'"],
         "UPDATE OR REPLACE setting the token, reads of u blinded"),
        ({("acct", "rowid")}, ["INSERT OR REPLACE INTO acct(rowid, k, u, p, q, v, tok) "
                               "VALUES (1, 'c', 'uc', 'pc', 'qc', 1, 0)"],
         "INSERT OR REPLACE through the rowid, reads of the rowid blinded"),
    ]
    for only in (False, True):
        scope = "in fence's triggers only" if only else "everywhere"
        for cols, sqls, what in cases:
            path = fresh_db()
            before = committed(path, "acct")
            c = connect(path)
            c.set_authorizer(blinding(cols, only))
            err = lib.script(c, sqls, rollback=True)
            c.set_authorizer(None)
            c.close()
            unchanged(path, "acct", before, "%s (%s): refused, nothing committed" % (what, scope), err)
    # a WITHOUT ROWID table: its primary key reads in "this row is not OLD"
    path = fresh_db(without_rowid=True)
    before = committed(path, "acct")
    c = connect(path)
    c.set_authorizer(blinding({("acct", "u")}))
    err = lib.script(c, ["BEGIN", "SELECT fence_check('acct:b', 5)",
                         "UPDATE OR REPLACE acct SET u = 'ua' WHERE k = 'b'", "COMMIT"],
                     rollback=True)
    c.close()
    unchanged(path, "acct", before, "WITHOUT ROWID: UPDATE OR REPLACE with u blinded refused", err)

    # the same writes without an authorizer, or with one that blinds
    # columns the guard does not read, still work as before
    path = fresh_db()
    c = connect(path)
    c.set_authorizer(blinding({("acct", "v")}))
    err = attempt(c, "INSERT OR REPLACE INTO acct VALUES ('c', 'ua', 'pc', 'qc', 1, 10)")
    rows, tokens = committed(path, "acct")
    ok(err is None and [r[0] for r in rows] == ["b", "c"] and ("acct:a", 10) in tokens,
       "an authorizer blinding another column leaves a fresh REPLACE working (the victim checked)",
       "%r %r %r" % (err, rows, tokens))
    err = attempt(c, "INSERT OR REPLACE INTO acct VALUES ('d', 'ub', 'pd', 'qd', 1, 4)")
    rows2, _ = committed(path, "acct")
    ok(err is not None and "stale" in err and rows2 == rows,
       "... and a stale one refused", "%r %r" % (err, rows2))
    c.set_authorizer(None)
    err = attempt(c, "INSERT INTO acct VALUES ('e', NULL, NULL, NULL, 1, 3)")
    ok(err is None, "a NULL in a UNIQUE column is no blinding: a plain INSERT passes", err)
    c.close()


# ---------------------------------------------------------------------
# 2. sqlite_schema.sql blinded: the schema checks must not pass blind
# ---------------------------------------------------------------------
def schema_blind():
    # main's sqlite_schema.sql is read by fence's check of its own tables'
    # definitions, which refuses a NULL; TEMP's is read only by the checks
    # for planted callers and RAISE(IGNORE) triggers
    auth = blinding({("sqlite_temp_master", "sql")})
    path = fresh_db()
    c = connect(path)
    gid = c.execute("SELECT id FROM fence_guards").fetchone()[0]
    c.execute("CREATE TEMP VIEW planted AS SELECT fence_guard_write(%d, 'acct:', 'a', "
              "9223372036854775807) AS x" % gid)
    before = committed(path, "acct")
    c.set_authorizer(auth)
    err = attempt(c, "SELECT * FROM planted")
    c.set_authorizer(None)
    c.close()
    unchanged(path, "acct", before,
              "a planted TEMP view calling a guard function, temp sqlite_schema.sql blinded: "
              "refused", err)

    path = os.path.join(work, "ign.db")
    c = connect(path)
    c.executescript("""
        CREATE TABLE job (id INTEGER PRIMARY KEY, bal INTEGER, tok INTEGER);
        SELECT fence_protect('job', 'tok', 'job:', 'id');
        INSERT INTO job VALUES (1, 100, 10);
        SELECT fence_check('job:2', 50);
        CREATE TEMP TRIGGER ign AFTER INSERT ON main.job BEGIN SELECT RAISE(IGNORE); END;
    """)
    before = committed(path, "job")
    c.set_authorizer(auth)
    err = attempt(c, "INSERT INTO job(bal, tok) VALUES (-1, 5)")
    c.set_authorizer(None)
    unchanged(path, "job", before,
              "a TEMP RAISE(IGNORE) trigger hidden by blinding temp sqlite_schema.sql: refused", err)
    c.execute("DROP TRIGGER ign")
    err = attempt(c, "INSERT INTO job(bal, tok) VALUES (7, 50)")
    rows, _ = committed(path, "job")
    ok(err is None and rows == [(1, 100, 10), (2, 7, 50)],
       "with the trigger dropped and no authorizer, a current token writes", "%r %r" % (err, rows))
    c.close()


# ---------------------------------------------------------------------
# 3. a guard of an older shape (a body of SELECTs) is refused
# ---------------------------------------------------------------------
def old_shape():
    path = os.path.join(work, "old.db")
    c = connect(path)
    c.executescript("""
        CREATE TABLE single(id INTEGER PRIMARY KEY, v INTEGER, tok INTEGER);
        SELECT fence_protect('single', 'tok', 'single');
        INSERT INTO single VALUES (1, 1, 7);
    """)
    gid = c.execute("SELECT id FROM fence_guards").fetchone()[0]
    # the triggers as fence 1.3 wrote them: the guard calls in the body
    c.executescript("""
        DROP TRIGGER "fence:{g}:update_token";
        DROP TRIGGER "fence:{g}:update";
        CREATE TRIGGER "fence:{g}:update" BEFORE UPDATE ON single
          BEGIN SELECT fence_guard_fenced({g}, 'single'); END;
        CREATE TRIGGER "fence:{g}:update_token" BEFORE UPDATE OF tok ON single
          BEGIN SELECT fence_guard_write({g}, 'single', NEW.tok); END;
    """.format(g=gid))
    c.close()
    before = committed(path, "single")

    def blind_functions(action, a1, a2, db, trigger):
        if action == sqlite3.SQLITE_FUNCTION and (a2 or "").startswith("fence_guard_"):
            return sqlite3.SQLITE_IGNORE
        return sqlite3.SQLITE_OK

    c = connect(path)
    c.set_authorizer(blind_functions)
    err = attempt(c, "UPDATE single SET v = 99, tok = 1")
    c.set_authorizer(None)
    unchanged(path, "single", before,
              "a guard of the older shape, its calls blinded: the stale UPDATE is refused", err)
    err = attempt(c, "UPDATE single SET v = 2, tok = 7")
    ok(err is not None and "fence_protect" in err and committed(path, "single") == before,
       "a guard of the older shape is refused even without an authorizer, saying what to do", err)
    c.execute("SELECT fence_protect('single', 'tok', 'single')")
    err = attempt(c, "UPDATE single SET v = 2, tok = 7")
    rows, _ = committed(path, "single")
    ok(err is None and rows == [(1, 2, 7)], "after fence_protect again the table is writable",
       "%r %r" % (err, rows))
    c.close()


# ---------------------------------------------------------------------
# 4. a guard of the previous 1.4 shape (CASE in WHEN, the resource in every
#    call) is sealed at load, or refused when the seal could not run
# ---------------------------------------------------------------------
SHAPE2 = """
    DROP TRIGGER "fence:{g}:update_token";
    DROP TRIGGER "fence:{g}:update";
    CREATE TRIGGER "fence:{g}:update" BEFORE UPDATE ON single
      WHEN /* fence guard shape 2 */ CASE WHEN fence_guard_fenced({g}, 'single') IS NOT NULL
      THEN 0 ELSE RAISE(ABORT, 'did not run') END BEGIN DELETE FROM fence_join WHERE 0; END;
    CREATE TRIGGER "fence:{g}:update_token" BEFORE UPDATE OF tok ON single
      WHEN /* fence guard shape 2 */ CASE WHEN fence_guard_write({g}, 'single', NEW.tok) IS NOT NULL
      THEN 0 ELSE RAISE(ABORT, 'did not run') END BEGIN DELETE FROM fence_join WHERE 0; END;
"""


def previous_shape_db(path, tok):
    """single protected, one row at tok, its update triggers of the previous shape; the id."""
    c = connect(path)
    c.executescript("""
        CREATE TABLE single(id INTEGER PRIMARY KEY, v INTEGER, tok INTEGER);
        SELECT fence_protect('single', 'tok', 'single');
        INSERT INTO single VALUES (1, 1, %d);
    """ % tok)
    gid = c.execute("SELECT id FROM fence_guards").fetchone()[0]
    c.executescript(SHAPE2.format(g=gid))
    c.close()
    return gid


def previous_shape():
    for sealed in (True, False):
        path = os.path.join(work, "shape2-%d.db" % sealed)
        gid = previous_shape_db(path, 7)
        before = committed(path, "single")
        holder = None
        if not sealed:
            # a writer holds the file while fence loads: the old triggers stay
            holder = connect(path, load=False)
            holder.execute("BEGIN IMMEDIATE")
        c = connect(path)
        c.execute("PRAGMA busy_timeout = 0")
        if holder:
            holder.execute("ROLLBACK")
            holder.close()
        names = [r[0] for r in c.execute(
            "SELECT sql FROM sqlite_schema WHERE name IN ('fence:%d:update', "
            "'fence:%d:update:sealed')" % (gid, gid))]
        ok(len(names) == 1 and sealed == ("older fence" in names[0]),
           "a previous-shape guard is %s at load" % ("sealed" if sealed else "left (file locked)"),
           names)
        for sql in ("UPDATE single SET v = 99, tok = 1", "UPDATE single SET v = 2, tok = 7",
                    "UPDATE single SET v = 3"):
            err = attempt(c, "BEGIN; SELECT fence_check('single', 7)" if sql.endswith("v = 3")
                          else "SELECT 1")
            err = attempt(c, sql)
            attempt(c, "COMMIT")
            ok(err is not None and "fence_protect" in err and
               committed(path, "single") == before,
               "%s guard of the previous shape refuses %r, saying what to do"
               % ("a sealed" if sealed else "an unsealed", sql), err)
        c.execute("SELECT fence_protect('single', 'tok', 'single')")
        err = attempt(c, "UPDATE single SET v = 2, tok = 7")
        rows, _ = committed(path, "single")
        ok(err is None and rows == [(1, 2, 7)],
           "after fence_protect again the table is writable", "%r %r" % (err, rows))
        c.close()


# ---------------------------------------------------------------------
# 5. an authorizer that makes SQLite skip fence's DDL: CREATE TRIGGER (or
#    the INSERT into sqlite_schema it makes) answered SQLITE_IGNORE is
#    skipped without an error. fence_protect and the seal at load must see
#    that their triggers are missing and undo, never report a guard that
#    is not there (a table with no trigger never calls fence again).
# ---------------------------------------------------------------------
def ignore_create_trigger(action, a1, a2, db, trigger):
    return sqlite3.SQLITE_IGNORE if action == sqlite3.SQLITE_CREATE_TRIGGER else sqlite3.SQLITE_OK


def ignore_one_trigger(action, a1, a2, db, trigger):
    if action == sqlite3.SQLITE_CREATE_TRIGGER and (a1 or "").endswith(":update"):
        return sqlite3.SQLITE_IGNORE
    return sqlite3.SQLITE_OK


def ignore_schema_insert(action, a1, a2, db, trigger):
    if action == sqlite3.SQLITE_INSERT and (a1 or "").lower() in ("sqlite_master", "sqlite_schema"):
        return sqlite3.SQLITE_IGNORE
    return sqlite3.SQLITE_OK


def ignore_savepoint_and_create(action, a1, a2, db, trigger):
    """Nothing can be rolled back either: SAVEPOINT, RELEASE and ROLLBACK TO skipped."""
    if action in (sqlite3.SQLITE_SAVEPOINT, sqlite3.SQLITE_CREATE_TRIGGER):
        return sqlite3.SQLITE_IGNORE
    return sqlite3.SQLITE_OK


def stale_writes_refused(path, what):
    """A zombie at token 5 (the highest is 10) and an unfenced UPDATE, with no authorizer."""
    before = committed(path, "single")
    c = connect(path)
    for sql in ("UPDATE single SET v = 666, tok = 5 WHERE id = 1",
                "INSERT INTO single VALUES (3, 666, 5)",
                "UPDATE single SET v = 667 WHERE id = 1"):
        err = attempt(c, sql)
        unchanged(path, "single", before, "%s: %r refused" % (what, sql), err)
    c.close()


def skipped_ddl():
    for name, auth in (("CREATE TRIGGER ignored", ignore_create_trigger),
                       ("one trigger's CREATE ignored", ignore_one_trigger),
                       ("the INSERT into sqlite_schema ignored", ignore_schema_insert),
                       ("SAVEPOINT and CREATE TRIGGER ignored", ignore_savepoint_and_create)):
        # fence_protect again (as after an upgrade) on a protected table
        path = os.path.join(work, "ddl%d.db" % counter[0])
        counter[0] += 1
        c = connect(path)
        c.executescript("""
            CREATE TABLE single(id INTEGER PRIMARY KEY, v INTEGER, tok INTEGER);
            SELECT fence_protect('single', 'tok', 'single');
            INSERT INTO single VALUES (1, 1, 10);
        """)
        c.set_authorizer(auth)
        err = attempt(c, "SELECT fence_protect('single', 'tok', 'single')")
        c.set_authorizer(None)
        ok(err is not None and "fence_protect" in err,
           "%s: fence_protect again fails, saying so" % name, err)
        c.close()
        stale_writes_refused(path, "%s, the guard before fence_protect again still" % name)

        # a first fence_protect
        path = os.path.join(work, "ddl%d.db" % counter[0])
        counter[0] += 1
        c = connect(path)
        c.executescript("""
            CREATE TABLE single(id INTEGER PRIMARY KEY, v INTEGER, tok INTEGER);
            INSERT INTO single VALUES (1, 1, 10);
            SELECT fence_check('single', 10);
        """)
        c.set_authorizer(auth)
        err = attempt(c, "SELECT fence_protect('single', 'tok', 'single')")
        c.set_authorizer(None)
        n = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'").fetchone()[0]
        ok(err is not None and n == 0,
           "%s: a first fence_protect fails and leaves no trigger behind" % name, (err, n))
        c.close()

        # the seal at load of a previous-shape guard
        path = os.path.join(work, "ddl%d.db" % counter[0])
        counter[0] += 1
        previous_shape_db(path, 10)
        c = connect(path, load=False)
        c.set_authorizer(auth)
        c.enable_load_extension(True)
        c.load_extension(lib.EXTENSION)
        c.set_authorizer(None)
        n = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'").fetchone()[0]
        ok(n == 4, "%s at load: the previous-shape triggers are sealed or left, never dropped"
           % name, n)
        c.close()
        stale_writes_refused(path, "%s at load, the guard" % name)


# ---------------------------------------------------------------------
# 6. an authorizer while fence_protect reads the table's columns and
#    indexes: what it reads must prove itself, or fence_protect fails and
#    leaves the table as it was (a guard built on a blinded read is wrong
#    for every connection after)
# ---------------------------------------------------------------------
def rule(action, arg1, arg2, answer):
    def auth(a, b, c, db, trigger):
        return answer if (a, b, c) == (action, arg1, arg2) else sqlite3.SQLITE_OK
    return auth


def protect_blind():
    cases = [
        ("count() denied", "k(id TEXT PRIMARY KEY, v, tok INTEGER)", "'kv:a'", "a",
         rule(sqlite3.SQLITE_FUNCTION, None, "count", sqlite3.SQLITE_DENY)),
        ("the key's pk flag ignored", "k(id INTEGER PRIMARY KEY, v, tok INTEGER)", "'kv:2'", 2,
         rule(sqlite3.SQLITE_READ, "pragma_table_xinfo", "pk", sqlite3.SQLITE_IGNORE)),
        ("the column types ignored", "k(id INTEGER PRIMARY KEY, v, tok INTEGER)", "'kv:2'", 2,
         rule(sqlite3.SQLITE_READ, "pragma_table_xinfo", "type", sqlite3.SQLITE_IGNORE)),
        ("the column list denied", "k(id INTEGER PRIMARY KEY, v, tok INTEGER)", "'kv:2'", 2,
         rule(sqlite3.SQLITE_READ, "pragma_table_xinfo", "name", sqlite3.SQLITE_DENY)),
        ("the UNIQUE flags ignored", "k(id TEXT PRIMARY KEY, u TEXT UNIQUE, v, tok INTEGER)",
         "'kv:a'", "a", rule(sqlite3.SQLITE_READ, "pragma_index_list", "unique",
                             sqlite3.SQLITE_IGNORE)),
        ("the index columns' key flags ignored",
         "k(id TEXT PRIMARY KEY, u TEXT UNIQUE, v, tok INTEGER)", "'kv:a'", "a",
         rule(sqlite3.SQLITE_READ, "pragma_index_xinfo", "key", sqlite3.SQLITE_IGNORE)),
    ]
    for name, table, resource, key, auth in cases:
        for again in (False, True):
            path = os.path.join(work, "pb%d.db" % counter[0])
            counter[0] += 1
            c = connect(path)
            c.execute("CREATE TABLE " + table)
            c.execute("SELECT fence_check(%s, 20)" % resource).fetchall()
            if key == 2:
                # the id SQLite will assign next: a stale INSERT that names no id
                c.execute("SELECT fence_check('kv:3', 20)").fetchall()
            if again:
                c.execute("SELECT fence_protect('k', 'tok', 'kv:', 'id')")
            c.execute("INSERT INTO k(id, v, tok) VALUES (?, 'x', 20)", (key,))
            c.set_authorizer(auth)
            err = attempt(c, "SELECT fence_protect('k', 'tok', 'kv:', 'id')")
            c.set_authorizer(None)
            n = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'").fetchone()[0]
            # four triggers; five when the key is the INTEGER PRIMARY KEY (insert_after)
            want = (5 if key == 2 else 4) if again else 0
            ok(err is not None and "fence_protect" in err and n == want,
               "%s%s: fence_protect fails, the table left as it was" %
               (name, " (protected before)" if again else ""), (err, n))
            c.close()
            if not again:
                continue
            before = committed_k(path)
            c = connect(path)
            for sql in ("INSERT INTO k(v, tok) VALUES ('new', 5)" if key == 2 else
                        "INSERT INTO k VALUES ('b', 'U2', 'new', NULL)",
                        "UPDATE k SET v = 'stale', tok = 5"):
                err = attempt(c, sql)
                ok(err is not None and committed_k(path) == before,
                   "%s (protected before): the old guard still refuses %r" % (name, sql), err)
            c.close()

    # the writing connection's authorizer blinds the UNIQUE flags: admission refuses
    path = os.path.join(work, "pb%d.db" % counter[0])
    counter[0] += 1
    c = connect(path)
    c.executescript("""
        CREATE TABLE k(id TEXT PRIMARY KEY, u TEXT UNIQUE, v, tok INTEGER);
        SELECT fence_check('kv:b', 20);
        INSERT INTO k VALUES ('b', 'U', 'b-row', 20);
        SELECT fence_protect('k', 'tok', 'kv:', 'id');
    """)
    c.close()
    before = committed_k(path)
    c = connect(path)
    c.set_authorizer(rule(sqlite3.SQLITE_READ, "pragma_index_list", "unique", sqlite3.SQLITE_IGNORE))
    err = attempt(c, "INSERT OR REPLACE INTO k VALUES ('c', 'U', 'c-row', 1)")
    c.close()
    ok(err is not None and committed_k(path) == before,
       "a writer whose authorizer blinds the UNIQUE flags: a REPLACE through u is refused", err)


# ---------------------------------------------------------------------
# 7. an authorizer that blinds only admission's read of the UNIQUE indexes
#    for the look-up check: a read whose NULLs filter rows out (a WHERE on
#    a flag, a join on a name) showed no index, so nothing was required
# ---------------------------------------------------------------------
def after_read(trigger_col, blind_cols):
    """SQLITE_IGNORE to reads of blind_cols in a statement, from the moment
    it has read trigger_col (a column that statement alone reads); each
    SELECT starts afresh."""
    state = {"on": False}

    def auth(action, a1, a2, db, trigger):
        if action == sqlite3.SQLITE_SELECT:
            state["on"] = False
        if action == sqlite3.SQLITE_READ and (a1, a2) == trigger_col:
            state["on"] = True
        if action == sqlite3.SQLITE_READ and state["on"] and (a1, a2) in blind_cols:
            return sqlite3.SQLITE_IGNORE
        return sqlite3.SQLITE_OK
    return auth


def after_first(blind_col):
    """SQLITE_IGNORE to every read of blind_col but the first."""
    seen = [0]

    def auth(action, a1, a2, db, trigger):
        if action == sqlite3.SQLITE_READ and (a1, a2) == blind_col:
            seen[0] += 1
            if seen[0] > 1:
                return sqlite3.SQLITE_IGNORE
        return sqlite3.SQLITE_OK
    return auth


def cover_blind():
    """A migration that renames a UNIQUE index's column away and makes the
    index again, under its name, on the column that took the name: the
    record of the indexes matches, and only admission's look-up check sees
    that the guard looks up the old column. An authorizer blinding that
    read alone must not let a REPLACE through the new index delete the row
    of acct:victim (highest 50) under acct:atk's token."""
    seqno = ("pragma_index_xinfo", "seqno")
    cases = [
        ("the index columns' key flags, in a read of seqno",
         after_read(seqno, {("pragma_index_xinfo", "key")})),
        ("the UNIQUE flags, in a read of seqno",
         after_read(seqno, {("pragma_index_list", "unique")})),
        ("the index names, after their first read",
         after_first(("pragma_index_list", "name"))),
        ("the index column names, after their first read",
         after_first(("pragma_index_xinfo", "name"))),
    ]
    for what, auth in cases:
        path = os.path.join(work, "cover%d.db" % counter[0])
        counter[0] += 1
        c = connect(path)
        c.executescript("""
            CREATE TABLE acct(k TEXT PRIMARY KEY, email TEXT, w TEXT, tok INTEGER);
            CREATE UNIQUE INDEX u_email ON acct(email);
            SELECT fence_protect('acct', 'tok', 'acct:', 'k');
            INSERT INTO acct VALUES ('victim', 'e1', 'w1', 50);
            INSERT INTO acct VALUES ('atk', 'a0', 'w0', 5);
        """)
        c.close()
        # the migration (RENAME COLUMN parses the triggers: fence loaded)
        c = connect(path)
        c.executescript("""
            DROP INDEX u_email;
            ALTER TABLE acct RENAME COLUMN email TO email_old;
            ALTER TABLE acct RENAME COLUMN w TO email;
            CREATE UNIQUE INDEX u_email ON acct(email);
        """)
        c.close()
        before = committed(path, "acct")
        c = connect(path)
        c.set_authorizer(auth)
        err = lib.script(c, ["BEGIN", "INSERT OR REPLACE INTO acct(k, email, tok) "
                             "VALUES ('atk', 'w1', 50)", "COMMIT"], rollback=True)
        c.set_authorizer(None)
        c.close()
        rows, _ = committed(path, "acct")
        ok(err is not None and any(r[0] == "victim" for r in rows),
           "an authorizer blinding admission's look-up check (%s): a REPLACE through an "
           "index the guard does not look up is refused" % what,
           "error: %r\nbefore: %r\nafter: %r" % (err, before, rows))


def read_after(first_col, blind_col):
    """SQLITE_IGNORE to reads of blind_col in a SELECT that has read
    first_col already (each SELECT callback starts afresh)."""
    state = {"seen": False}

    def auth(action, a1, a2, db, trigger):
        if action == sqlite3.SQLITE_SELECT:
            state["seen"] = False
        if action == sqlite3.SQLITE_READ and (a1, a2) == first_col:
            state["seen"] = True
        elif action == sqlite3.SQLITE_READ and (a1, a2) == blind_col and state["seen"]:
            return sqlite3.SQLITE_IGNORE
        return sqlite3.SQLITE_OK
    return auth


def shape_blind():
    """fence_guards.uniques edited by hand (plain DML) to add a UNIQUE index
    made after fence_protect: the guard's triggers still carry the old
    record, which admission's shape check compares, and they have no look-up
    for the new index, which the look-up check sees. An authorizer that
    blinds sqlite_schema.type only in a SELECT that has read sql before it
    (a WHERE type = 'trigger' after the result columns) hid the guard's
    triggers from both checks, while fence's probe for a blinded
    sqlite_schema (which reads type first) passed. A REPLACE through the
    new index must not delete the row of acct:b (highest 8) at token 5."""
    path = fresh_db()
    c = connect(path)
    c.execute("SELECT fence_check('acct:b', 8)").fetchall()
    lib.script(c, ["BEGIN", "SELECT fence_check('acct:a', 9)",
                   "UPDATE acct SET v = 2, tok = 9 WHERE k = 'a'", "COMMIT"])
    c.close()
    # the record as fence writes it for the indexes there will be
    probe = os.path.join(work, "shape_probe.db")
    p = connect(probe)
    p.executescript("""
        CREATE TABLE acct(k TEXT PRIMARY KEY, u TEXT UNIQUE, p TEXT, q TEXT, v INTEGER,
                          tok INTEGER, UNIQUE (p, q));
        CREATE UNIQUE INDEX acct_v ON acct(v);
        SELECT fence_protect('acct', 'tok', 'acct:', 'k');
    """)
    sig = p.execute("SELECT uniques FROM fence_guards").fetchone()[0]
    p.close()
    c = connect(path, load=False)
    c.execute("CREATE UNIQUE INDEX acct_v ON acct(v)")
    u = c.execute("SELECT uniques FROM fence_guards WHERE resource = 'acct:'").fetchone()[0]
    c.execute("UPDATE fence_guards SET uniques = ? WHERE resource = 'acct:'", (sig,))
    c.close()
    before = committed(path, "acct")
    c = connect(path)
    c.set_authorizer(read_after(("sqlite_master", "sql"), ("sqlite_master", "type")))
    # row b has v = 1: a new key c with v = 1 replaces it through acct_v
    err = lib.script(c, ["BEGIN", "INSERT OR REPLACE INTO acct VALUES ('c', 'uc', 'pc', 'qc', 1, 5)",
                         "COMMIT"], rollback=True)
    c.set_authorizer(None)
    c.close()
    rows, tokens = committed(path, "acct")
    ok(err is not None and any(r[0] == "b" for r in rows),
       "an authorizer blinding sqlite_schema.type after sql in a SELECT (the guard's triggers "
       "hidden from admission): a REPLACE through an index the record was edited to name is "
       "refused", "error: %r\nbefore: %r\nafter: %r\nrecord: %r -> %r" % (err, before, rows, u, sig))


def in_select_reading_first(first_col, blind_col):
    """SQLITE_IGNORE to reads of blind_col in a SELECT whose first read of
    that table is first_col (each SELECT callback starts afresh)."""
    state = {"first": None}

    def auth(action, a1, a2, db, trigger):
        if action == sqlite3.SQLITE_SELECT:
            state["first"] = None
        if action == sqlite3.SQLITE_READ and a1 == first_col[0]:
            if state["first"] is None:
                state["first"] = a2
            if (a1, a2) == blind_col and state["first"] == first_col[1]:
                return sqlite3.SQLITE_IGNORE
        return sqlite3.SQLITE_OK
    return auth


def planted_blind():
    """A view planted in main that calls fence_guard_write (with the guard's
    id, read at run time) advances acct:a to the largest token when read.
    Admission refuses any guard call while such an object exists; its
    search filtered sqlite_schema in a WHERE on sql, and an authorizer that
    blinds sql only in a SELECT that reads name first (that search) hid the
    caller, while fence's probe for a blinded sqlite_schema (which reads
    type first) passed."""
    path = fresh_db()
    before = committed(path, "acct")
    c = connect(path)
    c.execute("CREATE VIEW mplanted AS SELECT fence_guard_write((SELECT min(id) FROM "
              "fence_guards), 'acct:', 'a', 9223372036854775807) AS x")
    c.close()
    c = connect(path)
    c.set_authorizer(in_select_reading_first(("sqlite_master", "name"), ("sqlite_master", "sql")))
    err = lib.script(c, ["SELECT * FROM mplanted"], rollback=True)
    c.set_authorizer(None)
    c.close()
    after = committed(path, "acct")
    ok(err is not None and after == before,
       "an authorizer blinding sqlite_schema.sql in fence's search for planted callers alone: "
       "a view planted in main that calls fence_guard_write cannot move a fence",
       "error: %r\nbefore: %r\nafter: %r" % (err, before, after))

def attached_copy_blind():
    """A copy of the file opened as main, its fence on acct:a reset, the
    real file attached: the attached table's guard triggers carry the same
    guard id as the copy's own, and admission refuses a guard id that an
    attached schema records too. Its read of the attached fence_guards was
    a WHERE on id, which an authorizer answering SQLITE_IGNORE to id in a
    SELECT that reads id first blinded: the stale write was judged against
    the copy's tokens."""
    path = fresh_db()
    before = committed(path, "acct")
    copy = path + ".copy"
    shutil.copy(path, copy)
    c = connect(copy)
    c.execute("SELECT fence_reset('acct:a')")
    c.execute("ATTACH ? AS app", (path,))
    # a read of app.fence_guards.id right after one of main's: admission's
    # search for a copy, which follows its read of main's record
    last = [None]

    def copy_search(action, a1, a2, db, trigger):
        answer = sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ and a1 == "fence_guards":
            if (a2, db) == ("id", "app") and last[0] == ("id", "main"):
                answer = sqlite3.SQLITE_IGNORE
            last[0] = (a2, db)
        return answer
    c.set_authorizer(copy_search)
    err = attempt(c, "UPDATE app.acct SET v = 96, tok = 2 WHERE k = 'a'")
    c.set_authorizer(None)
    c.close()
    unchanged(path, "acct", before, "an authorizer blinding admission's read of an attached "
              "fence_guards: a copy as main, the real file attached, a stale write refused", err)


def skip_pragma(name):
    """SQLITE_IGNORE to SQLITE_PRAGMA name: its table function yields no rows."""
    def auth(action, a1, a2, db, trigger):
        if action == sqlite3.SQLITE_PRAGMA and (a1 or "").lower() == name:
            return sqlite3.SQLITE_IGNORE
        return sqlite3.SQLITE_OK
    return auth


def pragma_skip():
    """An authorizer answering SQLITE_IGNORE to SQLITE_PRAGMA makes a pragma
    table function (pragma_index_list, pragma_table_xinfo) yield no rows, and
    count(*) of it agrees, with the same answer every time (attacker round
    16). A UNIQUE index made after fence_protect on a table recorded with
    none then read as "none" again, and a REPLACE through it deleted a row
    of another resource; a column renamed to rowid went unseen."""
    for key, victim, new in (("k INTEGER PRIMARY KEY", "(2, 'ub', 50)", "(1, 'ub', 5)"),
                             ("k TEXT", "('B', 'ub', 50)", "('A', 'ub', 5)")):
        path = os.path.join(work, "pragma%d.db" % counter[0])
        counter[0] += 1
        c = connect(path)
        c.execute("CREATE TABLE a(%s, u TEXT, tok INTEGER)" % key)
        c.execute("SELECT fence_protect('a', 'tok', 'a:', 'k')")
        c.execute("INSERT INTO a VALUES %s" % victim)
        c.execute("CREATE UNIQUE INDEX ui ON a(u)")
        c.close()
        before = committed(path, "a")
        c = connect(path)
        c.set_authorizer(skip_pragma("index_list"))
        err = lib.script(c, ["INSERT OR REPLACE INTO a VALUES %s" % new], rollback=True)
        c.set_authorizer(None)
        c.close()
        unchanged(path, "a", before, "an authorizer skipping PRAGMA index_list (key %s): a "
                  "REPLACE through a UNIQUE index made after fence_protect is refused" % key, err)

    path = os.path.join(work, "pragma%d.db" % counter[0])
    counter[0] += 1
    c = connect(path)
    c.executescript("""
        CREATE TABLE t(k TEXT, tok INTEGER, x INTEGER);
        SELECT fence_protect('t', 'tok', 'r:', 'k');
        INSERT INTO t(oid, k, tok, x) VALUES (1, 'victim', 100, 5);
        INSERT INTO t(oid, k, tok, x) VALUES (2, 'attacker', 1, 6);
        ALTER TABLE t RENAME COLUMN x TO rowid;
    """)
    c.close()
    before = committed(path, "t")
    c = connect(path)
    c.set_authorizer(skip_pragma("table_xinfo"))
    err = lib.script(c, ["BEGIN", "SELECT fence_check('r:attacker', 1)",
                         "UPDATE OR REPLACE t SET oid = 1, tok = 1 WHERE k = 'attacker'", "COMMIT"],
                     rollback=True)
    c.set_authorizer(None)
    c.close()
    unchanged(path, "t", before, "an authorizer skipping PRAGMA table_xinfo: a column renamed "
              "to rowid after fence_protect is still seen, UPDATE OR REPLACE through oid refused",
              err)


def stateful_protect():
    """fence_protect and fence_unprotect read the table's schema entry; an
    authorizer answering SQLITE_IGNORE to one read of sqlite_schema.type
    (the n-th, n = 1..6) crashed both (a NULL compared), attacker round 16.
    They must fail or succeed, never crash, and leave no half guard."""
    for fn in ("fence_protect", "fence_unprotect"):
        for nth in range(1, 7):
            path = os.path.join(work, "stp%d.db" % counter[0])
            counter[0] += 1
            code = (
                "import sqlite3, sys\n"
                "sys.path.insert(0, %r)\n"
                "from attacklib import connect\n"
                "c = connect(%r)\n"
                "c.execute('CREATE TABLE a(k TEXT NOT NULL, tok INT)')\n"
                "%s"
                "n = [0]\n"
                "def auth(act, a1, a2, db, trg):\n"
                "    if act == sqlite3.SQLITE_READ and (a1, a2) == ('sqlite_master', 'type'):\n"
                "        n[0] += 1\n"
                "        if n[0] == %d:\n"
                "            return sqlite3.SQLITE_IGNORE\n"
                "    return sqlite3.SQLITE_OK\n"
                "c.set_authorizer(auth)\n"
                "try:\n"
                "    c.execute(\"SELECT %s\").fetchall()\n"
                "except sqlite3.Error:\n"
                "    pass\n"
                "print('survived')\n"
            ) % (os.path.dirname(os.path.abspath(__file__)), path,
                 ("c.execute(\"SELECT fence_protect('a', 'tok', 'a:', 'k')\")\n"
                  "c.close()\nc = connect(%r)\n" % path) if fn == "fence_unprotect" else "",
                 nth, "fence_protect('a', 'tok', 'a:', 'k')" if fn == "fence_protect"
                 else "fence_unprotect('a')")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 timeout=60)
            ok(out.returncode == 0 and "survived" in out.stdout,
               "%s with the read #%d of sqlite_schema.type ignored: no crash" % (fn, nth),
               "exit %d: %s" % (out.returncode, (out.stdout + out.stderr)[-300:]))


def once_pragma(name, answer):
    """answer (SQLITE_IGNORE or SQLITE_DENY) to the first SQLITE_PRAGMA name only."""
    first = [True]

    def auth(action, a1, a2, db, trigger):
        if action == sqlite3.SQLITE_PRAGMA and (a1 or "").lower() == name and first[0]:
            first[0] = False
            return answer
        return sqlite3.SQLITE_OK
    return auth


def schema_check_once():
    """fence reads PRAGMA schema_version to learn that the schema changed,
    and forgets what it admitted. An authorizer that blinded (IGNORE) or
    refused (DENY) that read once failed the write, but left the connection
    marked as checked: the retry skipped admission, and a UNIQUE index made
    after fence_protect, an application BEFORE UPDATE trigger that writes,
    or a planted TEMP trigger calling fence_guard_write went unseen
    (attacker round 17). Each write is tried twice on one connection."""
    for answer, aname in ((sqlite3.SQLITE_IGNORE, "IGNORE"), (sqlite3.SQLITE_DENY, "DENY")):
        # a UNIQUE index made after fence_protect: REPLACE through it
        path = os.path.join(work, "once%d.db" % counter[0])
        counter[0] += 1
        c = connect(path)
        c.executescript("""
            CREATE TABLE t(k TEXT, q TEXT UNIQUE, r TEXT, tok INTEGER);
            SELECT fence_protect('t', 'tok', 'p:', 'k');
            INSERT INTO t VALUES ('a', 'x', 'R', 5);
            INSERT INTO t VALUES ('b', 'y', 'S', 1);
            CREATE UNIQUE INDEX u_r ON t(r);
        """)
        before = committed(path, "t")
        c.set_authorizer(once_pragma("schema_version", answer))
        errs = [attempt(c, "INSERT OR REPLACE INTO t VALUES ('b', 'y', 'R', 1)") for _ in range(2)]
        c.set_authorizer(None)
        c.close()
        unchanged(path, "t", before, "PRAGMA schema_version answered %s once: the retried "
                  "REPLACE through an index made after fence_protect is refused too" % aname,
                  errs[1])

        # a planted TEMP trigger calling fence_guard_write with the guard's id
        path = os.path.join(work, "once%d.db" % counter[0])
        counter[0] += 1
        c = connect(path)
        c.executescript("""
            CREATE TABLE t(k TEXT, q TEXT UNIQUE, tok INTEGER);
            SELECT fence_protect('t', 'tok', 'p:', 'k');
            INSERT INTO t VALUES ('a', 'x', 5);
        """)
        gid = c.execute("SELECT id FROM fence_guards").fetchone()[0]
        c.execute("CREATE TEMP TRIGGER planted BEFORE UPDATE ON t BEGIN "
                  "SELECT fence_guard_write(%d, 'p:', OLD.k, 1000); END" % gid)
        before = committed(path, "t")
        c.set_authorizer(once_pragma("schema_version", answer))
        errs = [attempt(c, "UPDATE t SET q = 'evil' WHERE k = 'a'") for _ in range(2)]
        c.set_authorizer(None)
        c.close()
        unchanged(path, "t", before, "PRAGMA schema_version answered %s once: a planted TEMP "
                  "trigger calling fence_guard_write is still refused on the retry" % aname,
                  errs[1])


def committed_k(path):
    c = connect(path, load=False)
    rows = c.execute("SELECT * FROM k ORDER BY 1").fetchall()
    tokens = c.execute("SELECT resource, token FROM fence_tokens ORDER BY 1").fetchall()
    c.close()
    return rows, tokens


def token_update_ignored():
    """An authorizer answering SQLITE_IGNORE to SQLITE_UPDATE of the token
    column, the same answer every time (a "column is read-only" policy):
    SQLite drops "tok = 1" from the UPDATE but still fires the guard's
    BEFORE UPDATE OF tok trigger, whose NEW.tok is then the stored token,
    the highest. The guard took that for the token the statement presented,
    and a zombie with token 1 and no fence committed its write (attacker
    round 18). Refused, with the authorizer set before the connection's
    first guarded write and after it, for a per-row and a one-resource
    guard; an authorizer denying the update (SQLITE_DENY) fails it as
    before, and one that ignores another column's update leaves the guard
    alone."""
    def ignore_tok(action, a1, a2, db, trigger):
        return sqlite3.SQLITE_IGNORE if action == sqlite3.SQLITE_UPDATE and a2 == "tok" \
            else sqlite3.SQLITE_OK

    def ignore_v(action, a1, a2, db, trigger):
        return sqlite3.SQLITE_IGNORE if action == sqlite3.SQLITE_UPDATE and a2 == "v" \
            else sqlite3.SQLITE_OK

    for guard in ("'a:', 'k'", "'a-lock'"):
        resource = "a:victim" if "k" in guard else "a-lock"
        for when in ("before", "after"):
            counter[0] += 1
            path = os.path.join(work, "tokign%d.db" % counter[0])
            c = connect(path)
            c.executescript("""
                CREATE TABLE a(k TEXT PRIMARY KEY, v TEXT, tok INTEGER);
                SELECT fence_protect('a', 'tok', %s);
                SELECT fence_check('%s', 100);
                INSERT INTO a VALUES ('victim', 'orig', 100);
            """ % (guard, resource))
            c.close()
            before = committed(path, "a")
            c = connect(path)
            if when == "after":
                # the connection admits the guard first: a legitimate write at 100
                c.execute("UPDATE a SET v = 'orig', tok = 100 WHERE k = 'victim'")
            c.set_authorizer(ignore_tok)
            err = attempt(c, "UPDATE a SET v = 'zombie', tok = 1 WHERE k = 'victim'")
            c.set_authorizer(None)
            c.close()
            after = committed(path, "a")
            ok(err is not None and after == before,
               "guard (%s), authorizer ignoring the update of tok set %s the first write: "
               "the stale UPDATE commits nothing" % (guard, when),
               "error: %r\nbefore: %r\nafter: %r" % (err, before, after))

    # DENY: the statement fails to prepare, as before; another column ignored: writes go on
    counter[0] += 1
    path = os.path.join(work, "tokign%d.db" % counter[0])
    c = connect(path)
    c.executescript("""
        CREATE TABLE a(k TEXT PRIMARY KEY, v TEXT, tok INTEGER);
        SELECT fence_protect('a', 'tok', 'a:', 'k');
        SELECT fence_check('a:victim', 100);
        INSERT INTO a VALUES ('victim', 'orig', 100);
    """)
    c.set_authorizer(ignore_v)
    err = script(c, ["BEGIN", "SELECT fence_check('a:victim', 101)",
                     "UPDATE a SET v = 'new', tok = 101 WHERE k = 'victim'", "COMMIT"], rollback=True)
    c.set_authorizer(None)
    c.close()
    rows, _ = committed(path, "a")
    ok(err is None and rows == [("victim", "orig", 101)],
       "an authorizer ignoring the update of another column: the token still checked and written",
       (err, rows))


def main():
    try:
        for part in (victim_lookup, schema_blind, old_shape, previous_shape, skipped_ddl,
                     protect_blind, cover_blind, shape_blind, planted_blind,
                     attached_copy_blind, pragma_skip, stateful_protect,
                     schema_check_once, token_update_ignored):
            try:
                part()
            except Exception as e:
                ok(False, "%s ran to the end" % part.__name__, repr(e))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(check.status())


if __name__ == "__main__":
    main()
