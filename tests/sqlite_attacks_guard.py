#!/usr/bin/python3
"""tests/sqlite_attacks_guard.py: every way around a protected table's guard we could think of.

Issue 11's bypass classes, tried as an attacker (or a careless user) would
with the extension loaded as the README says, each asserted on what
*committed*: the protected table's rows and fence_tokens are read back from
a fresh connection after the attempt, and must be exactly what they were
(or what the legitimate part of the attempt wrote). An error alone is never
enough.

Tried: ATTACH (a :memory: connection, a copy of the file, the same file
under two names), journal_mode OFF/MEMORY/WAL/DELETE/TRUNCATE/PERSIST (and
OFF switched on mid-transaction, and under locking_mode=EXCLUSIVE),
synchronous=OFF, every form of REPLACE with recursive_triggers off and on
(INSERT OR REPLACE, REPLACE, UPDATE OR REPLACE, ON CONFLICT REPLACE
columns, through the rowid, through a UNIQUE index made after
fence_protect, through a NOCASE index on a BINARY key), upserts, key
collation, ALTER TABLE RENAME (with legacy_alter_table on and off), token
column affinity (and a later writable_schema change of it), planted views
and triggers calling the guard functions (in main, TEMP and an attached
file), incremental BLOB I/O, WITHOUT ROWID tables, generated key columns,
foreign-key cascades (ON DELETE CASCADE, SET NULL), the application's own
triggers writing protected tables, and INSTEAD OF triggers on views.

Usage: /usr/bin/python3 tests/sqlite_attacks_guard.py
Prints "ok - ..." / "not ok - ..." per assertion; exits 1 on a failure.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

import attacklib as lib
from attacklib import attempt, connect, script

check = lib.Checks("sqlite attacks guard")
ok = check.ok
work = tempfile.mkdtemp(prefix="fence_attacks_")


def committed(path, table, tokens=True):
    """The table and fence_tokens (unless tokens is false: a file without
    one) as a fresh connection without fence sees them."""
    c = connect(path, load=False)
    rows = c.execute("SELECT * FROM %s ORDER BY 1" % table).fetchall()
    if tokens:
        tokens = c.execute("SELECT resource, token FROM fence_tokens ORDER BY 1").fetchall()
    c.close()
    return rows, tokens


counter = [0]


def fresh_db():
    """app.db: acct keyed on k (a unique u besides), acct:a at 9, acct:b at 5."""
    counter[0] += 1
    path = os.path.join(work, "app%d.db" % counter[0])
    c = connect(path)
    c.executescript("""
        CREATE TABLE acct(k TEXT PRIMARY KEY, u TEXT UNIQUE, v INTEGER, tok INTEGER);
        SELECT fence_protect('acct', 'tok', 'acct:', 'k');
        INSERT INTO acct VALUES ('a', 'ua', 1, 5), ('b', 'ub', 1, 5);
        SELECT fence_check('acct:a', 9);
        CREATE TABLE single(id INTEGER PRIMARY KEY, v INTEGER, tok INTEGER);
        SELECT fence_protect('single', 'tok', 'single');
        INSERT INTO single VALUES (1, 1, 7), (2, 1, 7);
    """)
    c.close()
    return path


def guard_id(path, table):
    c = connect(path, load=False)
    try:
        row = c.execute("SELECT g.id FROM fence_guards g JOIN sqlite_schema s "
                        "ON s.name = 'fence:' || g.id || ':delete' WHERE s.tbl_name = ?",
                        (table,)).fetchone()
    except sqlite3.Error:
        row = None
    c.close()
    return row[0] if row else None


def unchanged(path, table, before, what, err):
    after = committed(path, table)
    ok(err is not None and after == before, what,
       "error: %r\nbefore: %r\nafter:  %r" % (err, before, after))


# ---------------------------------------------------------------------
# 1. ATTACH: a protected table is judged in its own file, or not written
# ---------------------------------------------------------------------
def attach_attacks():
    path = fresh_db()
    before = committed(path, "acct")
    mem = connect(":memory:")
    mem.execute("ATTACH ? AS app", (path,))
    unchanged(path, "acct", before, "ATTACH from :memory:: stale UPDATE refused",
              attempt(mem, "UPDATE app.acct SET v = 99, tok = 4 WHERE k = 'a'"))
    unchanged(path, "acct", before, "ATTACH from :memory:: stale INSERT refused",
              attempt(mem, "INSERT INTO app.acct VALUES ('z', 'uz', 1, 1)") or
              attempt(mem, "UPDATE app.acct SET tok = 2 WHERE k = 'b'"))
    unchanged(path, "acct", before, "ATTACH from :memory:: unfenced UPDATE refused",
              attempt(mem, "UPDATE app.acct SET v = 98 WHERE k = 'b'"))
    # the connection's own main holds a low fence on the same name
    err = script(mem, ["BEGIN", "SELECT fence_check('acct:a', 1)",
                       "UPDATE app.acct SET v = 97 WHERE k = 'a'", "COMMIT"])
    attempt(mem, "ROLLBACK")
    unchanged(path, "acct", before,
              "ATTACH from :memory:: a fence in the connection's main does not pass", err)
    mem.close()

    # a copy of the file as main (its fence lowered), the real file attached
    copy = path + ".copy"
    shutil.copy(path, copy)
    c = connect(copy)
    c.execute("SELECT fence_reset('acct:a')")
    c.execute("ATTACH ? AS app", (path,))
    unchanged(path, "acct", before, "a copy as main, the real file attached: stale write refused",
              attempt(c, "UPDATE app.acct SET v = 96, tok = 2 WHERE k = 'a'"))
    c.close()

    # the same, after a guarded write through main on this connection (its
    # guard admitted before anything was attached: ATTACH expires no other
    # statement, so admission must still look at the attached file)
    single = ("single", "UPDATE single SET v = 2, tok = 7 WHERE id = 1",
              "UPDATE app.single SET v = 93, tok = 7 WHERE id = 1")
    for how, (table, write_main, write_app) in (
            ("", single),
            (", in one transaction", single),
            (", attached and detached before", single),
            ("", ("acct", "UPDATE acct SET v = 2, tok = 5 WHERE k = 'b'",
                  "UPDATE app.acct SET v = 93, tok = 9 WHERE k = 'a'"))):
        live = fresh_db()
        shutil.copy(live, live + ".copy")
        h = connect(live)      # the new holders: single at 8, acct:a at 20
        script(h, ["UPDATE single SET tok = 8", "UPDATE acct SET tok = 20 WHERE k = 'a'"])
        h.close()
        live_before = committed(live, table)
        c = connect(live + ".copy")
        if how == ", attached and detached before":
            script(c, ["ATTACH '%s' AS app" % live, "DETACH app"])
        err_main = script(c, (["BEGIN"] if how == ", in one transaction" else []) + [write_main])
        c.execute("ATTACH ? AS app", (live,))
        err = script(c, [write_app] + (["COMMIT"] if how == ", in one transaction" else []),
                     rollback=how == ", in one transaction")
        c.close()
        ok(err_main is None, "%s%s: a copy as main: its own guarded write passes" % (table, how),
           err_main)
        unchanged(live, table, live_before, "%s%s: a copy as main wrote through main, then attached "
                  "the real file: a stale write through the attachment is refused" % (table, how),
                  err)

    # a schema-only clone (the shell's .schema replayed into a new file): the
    # guard's triggers without its fence_guards row, attached to the file it
    # was cloned from; written through ATTACH it would be judged against
    # main's fence_tokens (and main's table's shape), not its own
    src = fresh_db()
    shard = src + ".shard"
    c = connect(src, load=False)
    ddl = dict(c.execute("SELECT type, group_concat(sql, ';' || char(10)) FROM sqlite_schema "
                         "WHERE tbl_name = 'acct' AND sql IS NOT NULL GROUP BY type"))
    c.close()
    c = connect(shard, load=False)
    c.executescript(ddl["table"] + ";\nCREATE UNIQUE INDEX acct_v ON acct(v);\n"
                    "INSERT INTO acct VALUES ('a', 'ua', 1, 5), ('b', 'ub', 2, 5);\n" +
                    ddl["trigger"] + ";")
    c.commit()
    c.close()
    shard_before = committed(shard, "acct", tokens=False)
    c = connect(src)
    err = script(c, ["ATTACH '%s' AS shard" % shard, "BEGIN", "SELECT fence_check('acct:b', 5)",
                     "UPDATE shard.acct SET v = 7, tok = 5 WHERE k = 'b'", "COMMIT"], rollback=True)
    c.close()
    ok(err is not None and committed(shard, "acct", tokens=False) == shard_before,
       "a schema-only clone of a protected table, attached: writes through it are refused",
       "error: %r\nafter: %r" % (err, committed(shard, "acct", tokens=False)))

    # the same file under a second schema name
    c = connect(path)
    c.execute("ATTACH ? AS twin", (path,))
    unchanged(path, "acct", before, "the file attached to itself: writes through it refused",
              attempt(c, "UPDATE twin.acct SET v = 95, tok = 9 WHERE k = 'a'"))
    c.execute("DETACH twin")
    ok(attempt(c, "UPDATE acct SET v = 94, tok = 9 WHERE k = 'a'") is None and
       committed(path, "acct")[0][0] == ("a", "ua", 94, 9),
       "after DETACH the table is written through main as before")
    c.close()


# ---------------------------------------------------------------------
# 2. journal modes: no mode lets a refused write stay
# ---------------------------------------------------------------------
def journal_attacks():
    for mode in ("OFF", "MEMORY", "WAL", "DELETE", "TRUNCATE", "PERSIST"):
        for sync in ("FULL", "OFF"):
            path = fresh_db()
            before = committed(path, "acct")
            c = connect(path)
            c.execute("PRAGMA journal_mode = %s" % mode)
            c.execute("PRAGMA synchronous = %s" % sync)
            # b is fenced, a is not: the multi-row UPDATE must leave both
            err = script(c, ["BEGIN", "SELECT fence_check('acct:b', 5)",
                             "UPDATE acct SET v = v + 10", "COMMIT"])
            attempt(c, "COMMIT")
            unchanged(path, "acct", before,
                      "journal_mode=%s synchronous=%s: unfenced multi-row UPDATE leaves nothing"
                      % (mode, sync), err)
            err = script(c, ["BEGIN", "SELECT fence_check('acct:b', 5)",
                             "INSERT OR REPLACE INTO acct VALUES ('b', 'ub', 50, 5), ('c', 'ua', 50, 6)",
                             "COMMIT"])
            attempt(c, "COMMIT")
            unchanged(path, "acct", before,
                      "journal_mode=%s synchronous=%s: stale INSERT OR REPLACE leaves nothing"
                      % (mode, sync), err)
            c.close()

    # OFF switched on inside a transaction that has not written a page yet
    path = fresh_db()
    before = committed(path, "acct")
    c = connect(path)
    err = script(c, ["BEGIN", "SELECT fence_check('acct:b', 5)", "PRAGMA journal_mode = OFF",
                     "UPDATE acct SET v = v + 10", "COMMIT"])
    attempt(c, "COMMIT")
    unchanged(path, "acct", before, "journal_mode=OFF set mid-transaction: refused", err)
    c.close()

    # locking_mode=EXCLUSIVE keeps a PERSIST journal file open into OFF
    path = fresh_db()
    before = committed(path, "acct")
    c = connect(path)
    c.execute("PRAGMA locking_mode = EXCLUSIVE")
    c.execute("PRAGMA journal_mode = PERSIST")
    script(c, ["BEGIN", "SELECT fence_check('single', 7)", "UPDATE single SET v = v", "COMMIT"])
    c.execute("PRAGMA journal_mode = OFF")
    err = script(c, ["BEGIN", "SELECT fence_check('acct:b', 5)", "UPDATE acct SET v = v + 10",
                     "COMMIT"])
    attempt(c, "COMMIT")
    c.close()
    unchanged(path, "acct", before, "EXCLUSIVE, PERSIST then OFF: refused", err)


# ---------------------------------------------------------------------
# 3. REPLACE in every form, recursive_triggers off and on
# ---------------------------------------------------------------------
def replace_attacks():
    for rt in ("OFF", "ON"):
        cases = [
            ("INSERT OR REPLACE through a UNIQUE column",
             ["INSERT OR REPLACE INTO acct VALUES ('c', 'ua', 0, 6)"]),
            ("REPLACE through a UNIQUE column",
             ["REPLACE INTO acct VALUES ('c', 'ua', 0, 6)"]),
            ("INSERT OR REPLACE through the rowid",
             ["INSERT OR REPLACE INTO acct(rowid, k, u, v, tok) "
              "SELECT rowid, 'd', 'ud', 0, 6 FROM acct WHERE k = 'a'"]),
            ("UPDATE OR REPLACE onto another row's UNIQUE value",
             ["BEGIN", "SELECT fence_check('acct:b', 5)",
              "UPDATE OR REPLACE acct SET u = 'ua' WHERE k = 'b'", "COMMIT"]),
            ("UPDATE OR REPLACE with a token onto another row's UNIQUE value",
             ["UPDATE OR REPLACE acct SET u = 'ua', tok = 6 WHERE k = 'b'"]),
            ("UPDATE OR REPLACE onto another row's rowid",
             ["BEGIN", "SELECT fence_check('acct:b', 5)",
              "UPDATE OR REPLACE acct SET rowid = (SELECT rowid FROM acct WHERE k = 'a') "
              "WHERE k = 'b'", "COMMIT"]),
            ("upsert: the proposed row is checked as an INSERT",
             ["INSERT INTO acct VALUES ('a', 'ua', 0, 6) ON CONFLICT(k) DO UPDATE SET v = 0"]),
            ("upsert: the existing row is checked as an UPDATE",
             ["INSERT INTO acct VALUES ('b', 'ub', 0, 5) ON CONFLICT(k) DO UPDATE SET v = 0, k = 'a'"]),
        ]
        for what, sqls in cases:
            path = fresh_db()
            before = committed(path, "acct")
            c = connect(path)
            c.execute("PRAGMA recursive_triggers = %s" % rt)
            err = script(c, sqls)
            attempt(c, "ROLLBACK")
            unchanged(path, "acct", before, "%s (recursive_triggers=%s) refused" % (what, rt), err)
            c.close()

        # a column declared ON CONFLICT REPLACE
        path = os.path.join(work, "oc%s.db" % rt)
        c = connect(path)
        c.executescript("""
            CREATE TABLE oc(k TEXT PRIMARY KEY, u TEXT UNIQUE ON CONFLICT REPLACE, tok INTEGER);
            SELECT fence_protect('oc', 'tok', 'oc:', 'k');
            INSERT INTO oc VALUES ('a', 'x', 5);
            SELECT fence_check('oc:a', 9);
        """)
        c.execute("PRAGMA recursive_triggers = %s" % rt)
        before = committed(path, "oc")
        unchanged(path, "oc", before,
                  "a column declared ON CONFLICT REPLACE: a plain INSERT's replace is checked "
                  "(recursive_triggers=%s)" % rt,
                  attempt(c, "INSERT INTO oc VALUES ('b', 'x', 6)"))
        c.close()

    # a UNIQUE index made after fence_protect: REPLACE through it meets the DELETE guard
    path = fresh_db()
    c = connect(path)
    c.execute("CREATE UNIQUE INDEX acct_v ON acct(v, u)")
    before = committed(path, "acct")
    unchanged(path, "acct", before, "a UNIQUE index added after fence_protect: REPLACE through it "
              "is checked", attempt(c, "INSERT OR REPLACE INTO acct VALUES ('e', 'ua', 1, 6)"))
    ok(attempt(c, "INSERT INTO acct VALUES ('e', 'ue', 3, 6)") is None,
       "... while an ordinary INSERT still passes")
    c.close()


# ---------------------------------------------------------------------
# 4. key collation
# ---------------------------------------------------------------------
def collation_attacks():
    path = os.path.join(work, "coll.db")
    c = connect(path)
    for coll in ("NOCASE", "RTRIM"):
        c.execute("CREATE TABLE nc_%s(k TEXT PRIMARY KEY COLLATE %s, tok INTEGER)" % (coll, coll))
        err = attempt(c, "SELECT fence_protect('nc_%s', 'tok', 'nc:', 'k')" % coll)
        n = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' "
                      "AND tbl_name = 'nc_%s'" % coll).fetchone()[0]
        ok(err is not None and coll.lower() in err.lower() and n == 0,
           "a %s key column is refused at protect time, table left unguarded" % coll, err)
    # a BINARY key with a NOCASE UNIQUE index on it: REPLACE through the index
    c.executescript("""
        CREATE TABLE ci(k TEXT PRIMARY KEY, tok INTEGER);
        CREATE UNIQUE INDEX ci_nocase ON ci(k COLLATE NOCASE);
        SELECT fence_protect('ci', 'tok', 'ci:', 'k');
        INSERT INTO ci VALUES ('Alice', 5);
        SELECT fence_check('ci:Alice', 9);
    """)
    before = committed(path, "ci")
    unchanged(path, "ci", before, "INSERT OR REPLACE of 'alice' over 'Alice' (NOCASE index) is checked",
              attempt(c, "INSERT OR REPLACE INTO ci VALUES ('alice', 6)"))
    c.close()


# ---------------------------------------------------------------------
# 5. rename
# ---------------------------------------------------------------------
def rename_attacks():
    for legacy in ("OFF", "ON"):
        path = os.path.join(work, "ren%s.db" % legacy)
        c = connect(path)
        c.execute("PRAGMA legacy_alter_table = %s" % legacy)
        c.executescript("""
            CREATE TABLE ledger(id INTEGER PRIMARY KEY, v INTEGER, tok INTEGER);
            SELECT fence_protect('ledger', 'tok', 'ledger');
            INSERT INTO ledger VALUES (1, 1, 5);
            SELECT fence_check('ledger', 9);
            ALTER TABLE ledger RENAME TO ledger_2023;
            CREATE TABLE ledger(id INTEGER PRIMARY KEY, v INTEGER, tok INTEGER);
            SELECT fence_protect('ledger', 'tok', 'ledger-new');
        """)
        before = committed(path, "ledger_2023")
        unchanged(path, "ledger_2023", before,
                  "renamed table keeps its guard after a new table takes its old name "
                  "(legacy_alter_table=%s)" % legacy,
                  attempt(c, "UPDATE ledger_2023 SET v = 2, tok = 6"))
        c.execute("SELECT fence_unprotect('ledger_2023')")
        left = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' "
                         "AND tbl_name = 'ledger_2023'").fetchone()[0]
        others = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' "
                           "AND tbl_name = 'ledger'").fetchone()[0]
        ok(left == 0 and others == 4,
           "fence_unprotect of the renamed table removes its guard only (legacy_alter_table=%s)"
           % legacy, (left, others))
        ok(attempt(c, "INSERT INTO ledger VALUES (1, 1, 1)") is None and
           attempt(c, "UPDATE ledger SET tok = 0") is not None,
           "the new table of the old name keeps its own guard")
        c.close()
    # per-row guards whose REPLACE look-ups name their table: with
    # legacy_alter_table=ON a rename leaves the old name in the look-ups,
    # which must not then read another table of that name (a new one, or
    # the other of two tables that swapped names)
    for how in ("new table", "swapped"):
        for legacy in ("ON", "OFF"):
            for inside in (False, True):
                rename_attack(how, legacy, inside)


def rename_attack(how, legacy, inside):
    """kv and kw per-row guarded (a TEXT key: admitted once per transaction); kv
    renamed (under legacy_alter_table), between transactions or inside the one
    that writes it, after its first write to kv."""
    path = os.path.join(work, "ren-%s-%s-%d.db" % (how.replace(" ", ""), legacy, inside))
    c = connect(path)
    for t in ("kv", "kw"):
        c.executescript("""
            CREATE TABLE %s(k TEXT PRIMARY KEY, v TEXT, tok INTEGER);
            CREATE UNIQUE INDEX %s_v ON %s(v);
            SELECT fence_protect('%s', 'tok', '%s:', 'k');
        """ % (t, t, t, t, t))
    c.execute("INSERT INTO kv VALUES ('1', 'va', 10)")
    c.execute("INSERT INTO kw VALUES ('1', 'wa', 3)")
    c.close()
    c = connect(path)
    c.execute("PRAGMA legacy_alter_table = %s" % legacy)
    if inside:
        c.execute("BEGIN")
        c.execute("INSERT INTO kv VALUES ('2', 'vb', 5)")
    if how == "new table":
        c.execute("ALTER TABLE kv RENAME TO kv_2023")
        c.execute("CREATE TABLE kv(k TEXT PRIMARY KEY, v TEXT, tok INTEGER)")
        renamed = "kv_2023"
    else:
        c.execute("ALTER TABLE kv RENAME TO t_tmp")
        c.execute("ALTER TABLE kw RENAME TO kv")
        c.execute("ALTER TABLE t_tmp RENAME TO kw")
        renamed = "kw"
    c.execute("PRAGMA legacy_alter_table = OFF")
    # row 1 (resource kv:1, highest 10) replaced through kv_v at token 5
    err = attempt(c, "INSERT OR REPLACE INTO %s VALUES ('2', 'va', 5)" % renamed)
    attempt(c, "COMMIT")
    rows, tokens = committed(path, renamed)
    ok(err is not None and [r for r in rows if r[0] == "1"] == [("1", "va", 10)] and
       ("kv:1", 10) in tokens,
       "a per-row guard renamed with legacy_alter_table=%s %s (%s under its old name): a "
       "REPLACE through a UNIQUE index cannot delete a row of another resource unchecked"
       % (legacy, "inside the writing transaction, after its first write"
          if inside else "between transactions", how),
       "error: %r\nrows: %r\ntokens: %r" % (err, rows, tokens))
    c.close()


def column_rename_attacks():
    """A migration that moves a UNIQUE index's column name to another column
    (RENAME COLUMN, ADD COLUMN) and makes the index again under its old name:
    the recorded indexes then match by name, but the guard's look-ups,
    which SQLite rewrote with the renames, follow the old column. A REPLACE
    through the new index must not delete the row of acct:victim (highest
    50) under acct:atk's token (attacker round 10)."""
    # (what moves the name, the REPLACE's values): the new index holds 'w1'
    # for the victim's row; renamed to "email", the token column holds 50
    moves = {
        "another column renamed to its name":
            (["ALTER TABLE acct RENAME COLUMN w TO email"], "email = 'w1', tok = 50"),
        "a new column of its name":
            (["ALTER TABLE acct ADD COLUMN email TEXT"], "email = 'w1', tok = 50"),
        "the token column renamed to its name":
            (["ALTER TABLE acct RENAME COLUMN tok TO email", "ALTER TABLE acct ADD COLUMN tok TEXT"],
             "email = 50"),
    }
    for i, (what, (move, values)) in enumerate(sorted(moves.items())):
        cols = [v.split(" = ")[0] for v in values.split(", ")]
        vals = [v.split(" = ")[1] for v in values.split(", ")]
        for form in ("INSERT OR REPLACE INTO acct(k, %s) VALUES ('atk', %s)"
                     % (", ".join(cols), ", ".join(vals)),
                     "UPDATE OR REPLACE acct SET %s WHERE k = 'atk'" % values):
            path = os.path.join(work, "colren-%d-%d.db" % (i, form.startswith("UPDATE")))
            c = connect(path)
            c.executescript("""
                CREATE TABLE acct(k TEXT PRIMARY KEY, email TEXT, w TEXT, tok INTEGER);
                CREATE UNIQUE INDEX u_email ON acct(email);
                SELECT fence_protect('acct', 'tok', 'acct:', 'k');
                INSERT INTO acct VALUES ('victim', 'e1', 'w1', 50);
                INSERT INTO acct VALUES ('atk', 'a0', 'w0', 5);
            """)
            c.close()
            m = connect(path)
            script(m, ["DROP INDEX u_email", "ALTER TABLE acct RENAME COLUMN email TO email_old"]
                   + move + ["CREATE UNIQUE INDEX u_email ON acct(email)"])
            # the victim's own holder gives its row a value in the new column
            if "tok" not in " ".join(move):
                script(m, ["BEGIN", "SELECT fence_check('acct:victim', 50)",
                           "UPDATE acct SET email = 'w1' WHERE k = 'victim'", "COMMIT"])
            m.close()
            c = connect(path)
            err = script(c, ["BEGIN", form, "COMMIT"])
            attempt(c, "ROLLBACK")
            c.close()
            rows, tokens = committed(path, "acct")
            ok(any(r[0] == "victim" for r in rows) and ("acct:victim", 50) in tokens,
               "a UNIQUE index made again on %s, after its column was renamed away: %s "
               "cannot delete the row of acct:victim" % (what, form.split(" acct")[0]),
               "error: %r\nrows: %r\ntokens: %r" % (err, rows, tokens))
    # what must keep working: the names of two indexed columns swapped and the
    # indexes made again on them (each index still has its look-up), and a
    # column no index names renamed
    path = os.path.join(work, "colren-swap.db")
    c = connect(path)
    c.executescript("""
        CREATE TABLE acct(k TEXT PRIMARY KEY, a TEXT, b TEXT, n TEXT, tok INTEGER);
        CREATE UNIQUE INDEX u_a ON acct(a);
        CREATE UNIQUE INDEX u_b ON acct(b);
        SELECT fence_protect('acct', 'tok', 'acct:', 'k');
        INSERT INTO acct VALUES ('victim', 'a1', 'b1', 'n1', 50);
        INSERT INTO acct VALUES ('atk', 'a0', 'b0', 'n0', 5);
        DROP INDEX u_a;
        DROP INDEX u_b;
        ALTER TABLE acct RENAME COLUMN a TO t;
        ALTER TABLE acct RENAME COLUMN b TO a;
        ALTER TABLE acct RENAME COLUMN t TO b;
        ALTER TABLE acct RENAME COLUMN n TO n2;
        CREATE UNIQUE INDEX u_a ON acct(a);
        CREATE UNIQUE INDEX u_b ON acct(b);
    """)
    c.close()
    c = connect(path)
    err_ok = script(c, ["BEGIN", "UPDATE acct SET n2 = 'x', tok = 5 WHERE k = 'atk'", "COMMIT"])
    attempt(c, "ROLLBACK")
    err_replace = script(c, ["BEGIN", "INSERT OR REPLACE INTO acct VALUES ('atk', 'zz', 'b1', 'n', 6)",
                             "COMMIT"])
    attempt(c, "ROLLBACK")
    c.close()
    rows, tokens = committed(path, "acct")
    ok(err_ok is None and err_replace is not None and any(r[0] == "victim" for r in rows),
       "two indexed columns' names swapped and their indexes made again: writes go on, and "
       "a REPLACE through either index is still looked up (the row of acct:victim stays)",
       "plain write: %r\nREPLACE: %r\nrows: %r" % (err_ok, err_replace, rows))


def rowid_column_attacks():
    """A column named rowid hides the rowid from a per-row guard's look-ups
    ("c.rowid = NEW.rowid" reads the column): a REPLACE or UPDATE OR REPLACE
    onto another row's real rowid (through oid) must not delete that row of
    r:victim (highest 100) under r:attacker's token (attacker round 11)."""
    for how in ("made with it", "renamed to it after fence_protect"):
        for form in ("INSERT OR REPLACE INTO t(oid, k, tok, rowid) VALUES (1, 'attacker', 1, 999)",
                     "UPDATE OR REPLACE t SET oid = 1, tok = 1 WHERE k = 'attacker'"):
            path = os.path.join(work, "rowidcol-%d-%d.db" % (how.startswith("made"),
                                                             form.startswith("UPDATE")))
            c = connect(path)
            c.execute("CREATE TABLE t(k TEXT, tok INTEGER, %s INTEGER)"
                      % ("rowid" if how.startswith("made") else "x"))
            err_protect = attempt(c, "SELECT fence_protect('t', 'tok', 'r:', 'k')")
            if not how.startswith("made"):
                c.execute("ALTER TABLE t RENAME COLUMN x TO rowid")
            # the victim's own holder writes its row (refused too if the guard refuses)
            attempt(c, "INSERT INTO t(oid, k, tok, rowid) VALUES (1, 'victim', 100, 5)")
            attempt(c, "INSERT INTO t(oid, k, tok, rowid) VALUES (2, 'attacker', 1, 6)")
            err = script(c, ["BEGIN", "SELECT fence_check('r:attacker', 1)", form, "COMMIT"])
            attempt(c, "ROLLBACK")
            c.close()
            if err_protect is not None:
                # refused at protect time: the table is left unguarded, as said
                c = connect(path, load=False)
                n = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'").fetchone()[0]
                c.close()
                ok("rowid" in err_protect and n == 0,
                   "a column named rowid, %s: fence_protect refuses a per-row guard" % how,
                   err_protect)
                continue
            c = connect(path, load=False)
            rows = c.execute("SELECT oid, k FROM t ORDER BY 1").fetchall()
            try:
                tokens = c.execute("SELECT resource, token FROM fence_tokens ORDER BY 1").fetchall()
            except sqlite3.Error:
                tokens = []		# refused before any accept made the table
            c.close()
            # the victim's row, if its write got through, is still there
            ok((1, "victim") in rows or ("r:victim", 100) not in tokens,
               "a column named rowid, %s: %s cannot delete the row of r:victim"
               % (how, form.split(" t")[0]), "error: %r\nrows: %r\ntokens: %r" % (err, rows, tokens))


def crafted_lookup_attacks():
    """Look-up text where no look-up is: index names are free text, and the
    record of the UNIQUE indexes (which the triggers repeat in their RAISE
    message) carries them raw. An index named so that the old record reads
    like the new set of indexes, and carrying the text of a look-up the
    guard does not make; or a prefix carrying it. A REPLACE through the
    NOCASE index on x, which the guard never looks up, must not delete
    alice's row (k:alice at 9) under k:bob's token (attacker round 12)."""
    def qi(name):
        return '"' + name.replace('"', '""') + '"'

    def fake(col, coll):
        return 'FROM "t" AS c WHERE c."%s" = NEW."%s" COLLATE "%s") IS 0' % (col, col, coll)

    new_name = "v " + fake("x", "nocase") + " AND " + fake("y", "BINARY")
    cases = {
        "an index name carrying look-up text, the old record reading as the new indexes":
            ("k:", ["CREATE UNIQUE INDEX %s ON t(y)" % qi("u(x nocase)," + new_name)],
             ["DROP INDEX %s" % qi("u(x nocase)," + new_name),
              "CREATE UNIQUE INDEX u ON t(x COLLATE nocase)",
              "CREATE UNIQUE INDEX %s ON t(y)" % qi(new_name)]),
        "the resource prefix carrying look-up text":
            ("k:" + fake("x", "nocase"), ["CREATE UNIQUE INDEX u ON t(y)"],
             ["CREATE UNIQUE INDEX u2 ON t(x COLLATE nocase)"]),
        "a composite index's look-up standing for its first column alone":
            ("k:", ["CREATE UNIQUE INDEX %s ON t(x COLLATE nocase, y)" % qi("p(x nocase),q")],
             ["DROP INDEX %s" % qi("p(x nocase),q"), "CREATE UNIQUE INDEX p ON t(x COLLATE nocase)",
              "CREATE UNIQUE INDEX q ON t(x COLLATE nocase, y)"]),
    }
    for i, (what, (prefix, before, after)) in enumerate(sorted(cases.items())):
        path = os.path.join(work, "crafted-%d.db" % i)
        c = connect(path)
        c.execute("CREATE TABLE t(k TEXT, tok INTEGER, x TEXT, y TEXT)")
        for sql in before:
            c.execute(sql)
        c.execute("SELECT fence_protect('t', 'tok', ?, 'k')", (prefix,))
        c.execute("INSERT INTO t VALUES ('alice', 9, 'X', 'a')")
        for sql in after:
            c.execute(sql)
        c.close()
        c = connect(path)
        err = script(c, ["BEGIN", "SELECT fence_check(?, 1)" .replace("?", "'" + (prefix + "bob").replace("'", "''") + "'"),
                         "INSERT OR REPLACE INTO t VALUES ('bob', 1, 'x', 'b')", "COMMIT"])
        attempt(c, "ROLLBACK")
        c.close()
        c = connect(path, load=False)
        rows = c.execute("SELECT k, tok, x, y FROM t ORDER BY 1").fetchall()
        c.close()
        ok(("alice", 9, "X", "a") in rows,
           "%s: a REPLACE through an index the guard does not look up is refused" % what,
           "error: %r\nrows: %r" % (err, rows))


def generated_rowid_attacks():
    """A generated key or UNIQUE column over the INTEGER PRIMARY KEY: before
    an INSERT that leaves the rowid to SQLite, the BEFORE INSERT guard sees
    it computed from rowid -1, and the row is written with another value.
    A key k AS ('u' || id) let a stale INSERT commit on a:u2 (the guard
    checked a:u-1); a UNIQUE g AS (id > 0) let an INSERT OR REPLACE delete
    a:y's row (attacker round 15). fence_protect refuses such a table; one
    without an INTEGER PRIMARY KEY keeps its generated UNIQUE column looked
    up."""
    cases = {
        "a generated key over the INTEGER PRIMARY KEY":
            "CREATE TABLE a(id INTEGER PRIMARY KEY, k TEXT AS ('u' || id) STORED UNIQUE, "
            "v TEXT, tok INTEGER)",
        "a VIRTUAL generated key over the INTEGER PRIMARY KEY":
            "CREATE TABLE a(id INTEGER PRIMARY KEY, k TEXT AS ('u' || id) VIRTUAL, "
            "v TEXT, tok INTEGER)",
    }
    for i, (what, ddl) in enumerate(sorted(cases.items())):
        path = os.path.join(work, "genrowid-%d.db" % i)
        c = connect(path)
        c.execute(ddl)
        err = attempt(c, "SELECT fence_protect('a', 'tok', 'a:', 'k')")
        n = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'").fetchone()[0]
        c.close()
        ok(err is not None and "generated" in err and n == 0,
           "%s: fence_protect refuses the table, no guard made" % what, (err, n))

    # no INTEGER PRIMARY KEY: the generated UNIQUE column is looked up
    path = os.path.join(work, "genrowid-plain.db")
    c = connect(path)
    c.executescript("""
        CREATE TABLE a(k TEXT PRIMARY KEY, name TEXT, g TEXT AS (lower(name)) UNIQUE, tok INTEGER);
        SELECT fence_protect('a', 'tok', 'a:', 'k');
        SELECT fence_check('a:y', 100);
        INSERT INTO a(k, name, tok) VALUES ('y', 'Bob', 100);
    """)
    err = script(c, ["BEGIN", "INSERT OR REPLACE INTO a(k, name, tok) VALUES ('x', 'BOB', 5)",
                     "COMMIT"])
    attempt(c, "ROLLBACK")
    c.close()
    rows, _ = committed(path, "a")
    ok(err is not None and rows == [("y", "Bob", "bob", 100)],
       "a generated UNIQUE column without an INTEGER PRIMARY KEY: a REPLACE through it "
       "is looked up (a:y's row stays)", "error: %r\nrows: %r" % (err, rows))


def attack_outcome(path, table, attack):
    """Run the attack's statements on a new connection (ROLLBACK after the first
    error): its error, and the table and fence_tokens before and after."""
    before = committed(path, table)
    c = connect(path)
    err = script(c, attack, rollback=True)
    c.close()
    return err, before, committed(path, table)


def default_replace_attacks():
    """A NULL put into a NOT NULL column with a DEFAULT, under REPLACE (the
    statement's OR REPLACE, the column's ON CONFLICT REPLACE, or a WITHOUT
    ROWID primary key's implicit NOT NULL): SQLite writes the DEFAULT in its
    place after the BEFORE triggers ran, so the guard's REPLACE look-up
    (c.q = NEW.q) found no row while the REPLACE deleted a:victim's row,
    and a key generated from such a column was checked under one resource
    and written under another, with a token below that one's highest
    (attacker round 18). fence_protect refuses the table; a guard made
    before (here: the table's SQL given the DEFAULT afterwards, as an older
    fence would have left it) is refused at its first write; a NOT NULL
    DEFAULT column the guard does not read is no reason to refuse."""
    def setup(i, ddl, key="k"):
        path = os.path.join(work, "dflt-%d.db" % i)
        c = connect(path)
        c.execute(ddl)
        err = attempt(c, "SELECT fence_protect('a', 'tok', 'a:', '%s')" % key)
        n = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'").fetchone()[0]
        return path, c, err, n

    # the statement forms, each against a table fence_protect would guard
    cases = [
        ("INSERT OR REPLACE, q NOT NULL DEFAULT UNIQUE",
         "CREATE TABLE a(k TEXT PRIMARY KEY, q TEXT NOT NULL DEFAULT 'x' UNIQUE, tok INTEGER)",
         "INSERT INTO a VALUES ('victim', 'x', 100)",
         ["INSERT OR REPLACE INTO a(k, q, tok) VALUES ('mine', NULL, 1)"]),
        ("UPDATE OR REPLACE SET q = NULL",
         "CREATE TABLE a(k TEXT PRIMARY KEY, q TEXT NOT NULL DEFAULT 'x' UNIQUE, tok INTEGER)",
         "INSERT INTO a VALUES ('victim', 'x', 100), ('mine', 'm', 1)",
         ["BEGIN", "SELECT fence_check('a:mine', 1)",
          "UPDATE OR REPLACE a SET q = NULL WHERE k = 'mine'", "COMMIT"]),
        ("a plain INSERT, q NOT NULL ON CONFLICT REPLACE DEFAULT UNIQUE ON CONFLICT REPLACE",
         "CREATE TABLE a(k TEXT PRIMARY KEY, q TEXT NOT NULL ON CONFLICT REPLACE DEFAULT 'x' "
         "UNIQUE ON CONFLICT REPLACE, tok INTEGER)",
         "INSERT INTO a VALUES ('victim', 'x', 100)",
         ["INSERT INTO a(k, q, tok) VALUES ('mine', NULL, 1)"]),
        ("WITHOUT ROWID, a primary key with a DEFAULT",
         "CREATE TABLE a(q TEXT PRIMARY KEY DEFAULT 'x', k TEXT, tok INTEGER) WITHOUT ROWID",
         "INSERT INTO a VALUES ('x', 'victim', 100)",
         ["INSERT OR REPLACE INTO a(q, k, tok) VALUES (NULL, 'mine', 1)"]),
        ("a composite UNIQUE(q, r), r NOT NULL DEFAULT",
         "CREATE TABLE a(k TEXT PRIMARY KEY, q TEXT, r TEXT NOT NULL DEFAULT 'y', tok INTEGER, "
         "UNIQUE(q, r))",
         "INSERT INTO a VALUES ('victim', 'x', 'y', 100)",
         ["INSERT OR REPLACE INTO a(k, q, r, tok) VALUES ('mine', 'x', NULL, 1)"]),
        ("a generated UNIQUE g AS (q), q NOT NULL DEFAULT",
         "CREATE TABLE a(k TEXT PRIMARY KEY, q TEXT NOT NULL DEFAULT 'x', g TEXT AS (q) UNIQUE, "
         "tok INTEGER)",
         "INSERT INTO a(k, q, tok) VALUES ('victim', 'x', 100)",
         ["INSERT OR REPLACE INTO a(k, q, tok) VALUES ('mine', NULL, 1)"]),
    ]
    for i, (what, ddl, victim, attack) in enumerate(cases):
        path, c, err, n = setup(i, ddl)
        if err is not None:
            c.close()
            ok(("DEFAULT" in err or "generated" in err) and n == 0,
               "%s: fence_protect refuses the table, no guard made" % what, (err, n))
            continue
        c.execute("SELECT fence_check('a:victim', 100)")
        c.execute(victim)
        c.close()
        aerr, before, after = attack_outcome(path, "a", attack)
        ok(aerr is not None and after == before,
           "%s: fence_protect refuses the table, or the REPLACE commits nothing" % what,
           "protect: %r\nattack: %r\nbefore: %r\nafter: %r" % (err, aerr, before, after))

    # a key generated from such a column: checked under a:mine, written under a:vic
    for j, (what, attack) in enumerate([
            ("a plain INSERT", ["INSERT INTO a(id, q, tok) VALUES (2, NULL, 1)"]),
            ("an UPDATE with no token column set",
             ["BEGIN", "SELECT fence_check('a:mine', 1)", "UPDATE a SET q = NULL WHERE id = 3",
              "COMMIT"])]):
        path, c, err, n = setup(10 + j, "CREATE TABLE a(id INTEGER, q TEXT NOT NULL ON CONFLICT "
                                "REPLACE DEFAULT 'vic', k TEXT AS (coalesce(q, 'mine')) STORED, "
                                "tok INTEGER)")
        if err is not None:
            c.close()
            ok(("DEFAULT" in err or "generated" in err) and n == 0,
               "a key generated from a NOT NULL DEFAULT column, %s: fence_protect refuses the "
               "table, no guard made" % what, (err, n))
            continue
        c.execute("SELECT fence_check('a:vic', 100)")
        c.execute("INSERT INTO a(id, q, tok) VALUES (1, 'vic', 100)")
        c.execute("SELECT fence_check('a:mine', 1)")
        c.execute("INSERT INTO a(id, q, tok) VALUES (3, 'mine', 1)")
        c.close()
        aerr, before, after = attack_outcome(path, "a", attack)
        ok(aerr is not None and after == before,
           "a key generated from a NOT NULL DEFAULT column, %s: fence_protect refuses the "
           "table, or nothing commits under a:vic" % what,
           "protect: %r\nattack: %r\nbefore: %r\nafter: %r" % (err, aerr, before, after))

    # a guard made before the rule: the table's SQL given the DEFAULT afterwards
    path, c, err, n = setup(20, "CREATE TABLE a(k TEXT PRIMARY KEY, q TEXT UNIQUE, tok INTEGER)")
    c.executescript("""
        SELECT fence_check('a:victim', 100);
        INSERT INTO a VALUES ('victim', 'x', 100);
        PRAGMA writable_schema = ON;
        UPDATE sqlite_schema SET sql = replace(sql, 'q TEXT UNIQUE', 'q TEXT NOT NULL DEFAULT ''x'' UNIQUE')
            WHERE name = 'a';
        PRAGMA writable_schema = OFF;
    """)
    version = c.execute("PRAGMA schema_version").fetchone()[0]
    c.execute("PRAGMA writable_schema = ON")
    c.execute("PRAGMA schema_version = %d" % (version + 1))
    c.execute("PRAGMA writable_schema = OFF")
    c.close()
    before = committed(path, "a")
    c = connect(path)
    aerr = attempt(c, "INSERT OR REPLACE INTO a(k, q, tok) VALUES ('mine', NULL, 1)")
    c.close()
    after = committed(path, "a")
    ok(err is None and aerr is not None and after == before,
       "a guard made before the rule, on a UNIQUE column with a NOT NULL DEFAULT: the write "
       "is refused, a:victim's row stays", "protect: %r\nattack: %r\nbefore: %r\nafter: %r" %
       (err, aerr, before, after))

    # the token column of a guard keyed on the INTEGER PRIMARY KEY, which checks AFTER
    # INSERT: a NULL token became the DEFAULT 999 and was accepted, moving e:1 to 999
    # with no token presented (attacker round 19)
    for j, (what, ddl, edit) in enumerate([
            ("made by fence_protect now",
             "CREATE TABLE e(id INTEGER PRIMARY KEY, v TEXT, tok INTEGER NOT NULL DEFAULT 999)",
             None),
            ("made before the rule",
             "CREATE TABLE e(id INTEGER PRIMARY KEY, v TEXT, tok INTEGER)",
             "tok INTEGER NOT NULL DEFAULT 999")]):
        path = os.path.join(work, "dflt-tok-%d.db" % j)
        c = connect(path)
        c.execute(ddl)
        err = attempt(c, "SELECT fence_protect('e', 'tok', 'e:', 'id')")
        if err is not None:
            n = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'").fetchone()[0]
            c.close()
            ok(("DEFAULT" in err or "generated" in err) and n == 0,
               "a NOT NULL DEFAULT token column of a guard keyed on the INTEGER PRIMARY KEY "
               "(%s): fence_protect refuses, no guard made" % what, (err, n))
            continue
        c.execute("SELECT fence_check('e:0', 1)")
        if edit:
            version = c.execute("PRAGMA schema_version").fetchone()[0]
            c.execute("PRAGMA writable_schema = ON")
            c.execute("UPDATE sqlite_schema SET sql = replace(sql, 'tok INTEGER', ?) "
                      "WHERE name = 'e'", (edit,))
            c.execute("PRAGMA schema_version = %d" % (version + 1))
            c.execute("PRAGMA writable_schema = OFF")
        c.close()
        c = connect(path)
        aerr = attempt(c, "INSERT OR REPLACE INTO e(v, tok) VALUES ('no token', NULL)")
        c.close()
        rows, tokens = committed(path, "e")
        ok(aerr is not None and rows == [] and tokens == [("e:0", 1)],
           "a NOT NULL DEFAULT token column of a guard keyed on the INTEGER PRIMARY KEY (%s): "
           "fence_protect refuses, or a NULL token commits nothing" % what,
           "protect: %r\nattack: %r\nrows: %r\ntokens: %r" % (err, aerr, rows, tokens))

    # what the guard does not read: no reason to refuse
    path, c, err, n = setup(30, "CREATE TABLE a(k TEXT PRIMARY KEY, q TEXT NOT NULL UNIQUE, "
                            "at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, n INTEGER DEFAULT 0, "
                            "tok INTEGER)")
    werr = None if err else script(c, ["BEGIN", "SELECT fence_check('a:x', 1)",
                                       "INSERT INTO a(k, q, tok) VALUES ('x', 'q', 1)", "COMMIT"])
    c.close()
    ok(err is None and n > 0 and werr is None,
       "a NOT NULL DEFAULT on a column no UNIQUE index holds, a UNIQUE NOT NULL column "
       "without one: protected, and written", (err, n, werr))


def partial_unique_attacks():
    """A partial UNIQUE index (CREATE UNIQUE INDEX ux ON t(u) WHERE f = 'on'):
    the guard's UPDATE look-up runs when an indexed column changes, and an
    UPDATE OR REPLACE that changes only f moved the row into the index,
    where SQLite found t:victim's row and deleted it (attacker round 19).
    fence_protect refuses a per-row guard on such a table, and admission
    refuses one made before (here: the index's SQL given its WHERE after
    fence_protect, as an older fence would have left it)."""
    for j, edit in enumerate((False, True)):
        path = os.path.join(work, "partial-%d.db" % j)
        c = connect(path)
        c.execute("CREATE TABLE t(k TEXT PRIMARY KEY, u TEXT, f TEXT, v TEXT, tok INTEGER)")
        c.execute("CREATE UNIQUE INDEX ux ON t(u)%s" % ("" if edit else " WHERE f = 'on'"))
        err = attempt(c, "SELECT fence_protect('t', 'tok', 't:', 'k')")
        if err is not None:
            n = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'").fetchone()[0]
            c.close()
            ok("partial" in err and n == 0,
               "a partial UNIQUE index: fence_protect refuses, no guard made", (err, n))
            continue
        # the attacker's row is out of the partial index (f = 'off'), so both hold u =
        # 'shared'; the victim's INSERT looks it up and accepts t:attacker at 50, and the
        # victim's holder then moves to 100 without a look-up (u unchanged)
        c.executescript("""
            SELECT fence_check('t:attacker', 5);
            INSERT INTO t VALUES ('attacker', '%s', 'off', 'attacker row', 5);
            SELECT fence_check('t:victim', 50);
            INSERT INTO t VALUES ('victim', 'shared', 'on', 'victim row', 50);
            UPDATE t SET v = 'victim row, holder 100', tok = 100 WHERE k = 'victim';
        """ % ("other" if edit else "shared"))
        if edit:
            version = c.execute("PRAGMA schema_version").fetchone()[0]
            c.execute("PRAGMA writable_schema = ON")
            c.execute("UPDATE sqlite_schema SET sql = sql || ? WHERE name = 'ux'",
                      (" WHERE f = 'on'",))
            c.execute("PRAGMA schema_version = %d" % (version + 1))
            c.execute("PRAGMA writable_schema = OFF")
        c.close()
        aerr, before, after = attack_outcome(
            path, "t", ["BEGIN", "SELECT fence_check('t:attacker', 50)",
                        "UPDATE OR REPLACE t SET f = 'on', tok = 50 WHERE k = 'attacker'",
                        "COMMIT"])
        victim = [r for r in after[0] if r[0] == "victim"] == \
            [r for r in before[0] if r[0] == "victim"] and ("t:victim", 100) in after[1]
        ok(victim and (edit or (aerr is not None and after == before)),
           "a partial UNIQUE index (%s): an UPDATE OR REPLACE moving a row into it cannot "
           "delete t:victim's row" % ("given its WHERE after fence_protect" if edit
                                       else "at fence_protect"),
           "protect: %r\nattack: %r\nbefore: %r\nafter: %r" % (err, aerr, before, after))


def nolock_attacks():
    """A connection that opens the file with SQLite's locks turned off (the
    URI parameter nolock=1, or the unix-none VFS) beside connections that
    lock: SQLite's single writer is gone, and in rollback-journal mode a
    transaction fenced at 10 committed a row after another connection had
    committed token 20 (attacker round 18). fence refuses to load on such a
    connection, so its writes to a protected table cannot even prepare;
    whatever happens, no row with token 10 commits after 20."""
    for i, query in enumerate(("nolock=1", "vfs=unix-none")):
        path = os.path.join(work, "nolock-%d.db" % i)
        c = connect(path)
        c.executescript("""
            CREATE TABLE a(k TEXT PRIMARY KEY, v TEXT, tok INTEGER);
            SELECT fence_protect('a', 'tok', 'r');
            SELECT fence_check('r', 10);
            INSERT INTO a VALUES ('row', 'init', 10);
        """)
        c.close()
        load_err = None
        try:
            zombie = connect("file:%s?%s" % (path, query), uri=True)
        except sqlite3.Error as e:
            load_err = str(e)
            zombie = connect("file:%s?%s" % (path, query), load=False, uri=True)
        holder = connect(path)
        errs = [attempt(zombie, "BEGIN"), attempt(zombie, "SELECT fence_check('r', 10)")]
        errs.append(attempt(holder, "UPDATE a SET v = 'new holder', tok = 20 WHERE k = 'row'"))
        errs.append(attempt(zombie, "INSERT INTO a VALUES ('zombie-row', 'zombie', 10)"))
        errs.append(attempt(zombie, "COMMIT"))
        attempt(zombie, "ROLLBACK")
        zombie.close()
        holder.close()
        rows, tokens = committed(path, "a")
        ok(load_err is not None and "lock" in load_err and
           ("zombie-row", "zombie", 10) not in rows and dict(tokens).get("r") == 20,
           "a connection opened with %s: fence does not load, and the stale row does not "
           "commit after token 20" % query,
           "load: %r\nerrors: %r\nrows: %r\ntokens: %r" % (load_err, errs, rows, tokens))


LINE_CHILD = r"""
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=2)
try:
    c.enable_load_extension(True)
    c.load_extension(sys.argv[2])
    print(json.dumps(None), flush=True)
except sqlite3.Error as e:
    print(json.dumps(str(e)), flush=True)
for line in sys.stdin:
    try:
        print(json.dumps(c.execute(line.strip()).fetchall()), flush=True)
    except sqlite3.Error as e:
        print(json.dumps("ERR " + str(e)), flush=True)
"""


def hard_link_attacks():
    """One database file under two names (a hard link): SQLite names the WAL
    and its index after the path, so in WAL mode each name had its own, no
    common writer lock and no common snapshot, and a zombie process through
    one name committed a write at token 10 after the holder's process had
    committed 20 through the other (attacker round 19). fence does not load
    on a file with more than one link, under either name, so neither can
    write the protected table; nothing stale commits."""
    path = os.path.join(work, "linked.db")
    link = os.path.join(work, "linked-2.db")
    c = connect(path)
    c.executescript("""
        PRAGMA journal_mode = WAL;
        CREATE TABLE t(k TEXT PRIMARY KEY, v TEXT, tok INTEGER);
        SELECT fence_protect('t', 'tok', 'lock');
        SELECT fence_check('lock', 10);
        INSERT INTO t VALUES ('a', 'first', 10);
    """)
    c.close()
    os.link(path, link)
    procs = [subprocess.Popen([sys.executable, "-c", LINE_CHILD, name, lib.EXTENSION],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for name in (link, path)]

    def run(proc, sql):
        proc.stdin.write(sql + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    loads = [json.loads(proc.stdout.readline()) for proc in procs]
    zombie, holder = procs
    steps = [run(zombie, "SELECT * FROM t"),
             run(holder, "UPDATE t SET v = 'holder 20', tok = 20 WHERE k = 'a'"),
             run(zombie, "BEGIN"), run(zombie, "SELECT fence_check('lock', 10)"),
             run(zombie, "UPDATE t SET v = 'zombie', tok = 10 WHERE k = 'a'"),
             run(zombie, "COMMIT"), run(holder, "PRAGMA wal_checkpoint(TRUNCATE)")]
    for proc in (holder, zombie):   # the zombie's close checkpoints its own WAL last
        proc.stdin.close()
        proc.wait()
    os.remove(link)
    rows, tokens = committed(path, "t")
    ok(all(e is not None and "link" in e for e in loads) and ("a", "zombie", 10) not in rows,
       "a file with two names (a hard link), two processes: fence loads under neither, and the "
       "zombie's write at 10 does not commit after 20", "load: %r\nsteps: %r\nrows: %r\n"
       "tokens: %r" % (loads, steps, rows, tokens))


def rewriting_trigger_attacks():
    """The application's own BEFORE UPDATE trigger writes the row being
    updated (UPDATE a SET q = 'Q' WHERE k = NEW.k): SQLite reads the columns
    the UPDATE does not set back from the table after its BEFORE triggers,
    so the row is written with q = 'Q' while the guard's REPLACE look-up
    compared NEW.q = 'q0', and UPDATE OR REPLACE deleted a:y's row (highest
    100) in a transaction fenced on a:x alone (attacker round 15). The
    guard must refuse while such a trigger exists, whatever its form; other
    triggers keep working."""
    bodies = {
        "a BEFORE UPDATE OF trigger":
            "CREATE TRIGGER app BEFORE UPDATE OF p ON a BEGIN "
            "UPDATE a SET q = 'Q' WHERE k = NEW.k; END",
        "an UPDATE trigger with no timing (BEFORE by default)":
            "CREATE TRIGGER app UPDATE ON a BEGIN SELECT 1; UPDATE a SET q = 'Q' WHERE k = NEW.k; END",
        "a TEMP BEFORE UPDATE trigger":
            "CREATE TEMP TRIGGER app BEFORE UPDATE ON main.a BEGIN "
            "UPDATE a SET q = 'Q' WHERE k = NEW.k; END",
        "a trigger named like fence's, its header in comments and odd names":
            'CREATE TRIGGER IF NOT EXISTS main."fence:1:update" /* AFTER */ BEFORE -- INSERT\n'
            "UPDATE ON a BEGIN REPLACE INTO a SELECT k, p, 'Q', tok FROM a WHERE k = NEW.k; END",
        "a write through another table's trigger":
            "CREATE TRIGGER app BEFORE UPDATE ON a BEGIN INSERT INTO side VALUES (NEW.k); END",
    }
    for i, (what, ddl) in enumerate(sorted(bodies.items())):
        path = os.path.join(work, "rewrite-%d.db" % i)
        c = connect(path)
        c.executescript("""
            CREATE TABLE a(k TEXT PRIMARY KEY, p TEXT, q TEXT, tok INTEGER, UNIQUE (p, q));
            CREATE TABLE side(k TEXT);
            CREATE TRIGGER side_writes AFTER INSERT ON side BEGIN
              UPDATE a SET q = 'Q' WHERE k = NEW.k; END;
        """)
        temp = "TEMP" in ddl
        c.executescript("""
            SELECT fence_protect('a', 'tok', 'a:', 'k');
            SELECT fence_check('a:x', 10);
            INSERT INTO a VALUES ('x', 'p0', 'q0', 10);
            SELECT fence_check('a:y', 100);
            INSERT INTO a VALUES ('y', 'P', 'Q', 100);
        """)
        # the rows first: with the trigger there, the guard refuses every write
        if not temp:
            c.execute(ddl)
        c.close()
        c = connect(path)
        if temp:
            c.execute(ddl)
        err = script(c, ["BEGIN", "SELECT fence_check('a:x', 10)",
                         "UPDATE OR REPLACE a SET p = 'P' WHERE k = 'x'", "COMMIT"])
        attempt(c, "ROLLBACK")
        c.close()
        rows, tokens = committed(path, "a")
        ok(("y", "P", "Q", 100) in rows and ("a:y", 100) in tokens,
           "%s that writes the updated row: UPDATE OR REPLACE cannot delete a:y's row" % what,
           "error: %r\nrows: %r" % (err, rows))

    # what keeps working: a BEFORE UPDATE trigger that only checks, an AFTER
    # UPDATE and a BEFORE INSERT trigger that write
    path = os.path.join(work, "rewrite-ok.db")
    c = connect(path)
    c.executescript("""
        CREATE TABLE a(k TEXT PRIMARY KEY, p TEXT, q TEXT, tok INTEGER, UNIQUE (p, q));
        CREATE TABLE log(k TEXT, what TEXT);
        CREATE TRIGGER check_p BEFORE UPDATE ON a WHEN NEW.p = 'bad'
          BEGIN SELECT RAISE(ABORT, 'bad p'); END;
        CREATE TRIGGER log_upd AFTER UPDATE ON a BEGIN INSERT INTO log VALUES (NEW.k, 'update'); END;
        CREATE TRIGGER log_ins BEFORE INSERT ON a BEGIN INSERT INTO log VALUES (NEW.k, 'insert'); END;
        SELECT fence_protect('a', 'tok', 'a:', 'k');
    """)
    err = script(c, ["BEGIN", "SELECT fence_check('a:x', 10)",
                     "INSERT INTO a VALUES ('x', 'p0', 'q0', 10)",
                     "UPDATE a SET p = 'p1' WHERE k = 'x'", "COMMIT"])
    attempt(c, "ROLLBACK")
    bad = script(c, ["BEGIN", "SELECT fence_check('a:x', 10)",
                     "UPDATE a SET p = 'bad' WHERE k = 'x'", "COMMIT"])
    attempt(c, "ROLLBACK")
    c.close()
    rows, _ = committed(path, "a")
    ok(err is None and rows == [("x", "p1", "q0", 10)] and bad is not None and "bad p" in bad,
       "a checking BEFORE UPDATE trigger, writing AFTER UPDATE and BEFORE INSERT triggers: "
       "writes go on", "error: %r\nbad: %r\nrows: %r" % (err, bad, rows))


def collation_compare_attacks():
    """An UPDATE's look-up runs only when the row's indexed columns changed
    ("NEW.b IS NOT OLD.b"), and skips the row being updated ("c.a IS OLD.a",
    WITHOUT ROWID): both comparisons took the column's declared collation
    (NOCASE, RTRIM), under which 'x' and 'X' are equal, while the index or
    primary key is BINARY. An UPDATE OR REPLACE fenced on r:w at 5 must not
    delete the row of r:v (highest 100) (attacker round 13)."""
    cases = {
        "the changed-columns test, NOCASE column, BINARY index":
            ("CREATE TABLE t(k TEXT, tok INTEGER, b TEXT COLLATE NOCASE, u TEXT);"
             "CREATE UNIQUE INDEX ib ON t(b COLLATE BINARY)",
             "('v', 100, 'X', 'u1')", "('w', 5, 'x', 'u2')", "SET b = 'X'"),
        "the changed-columns test with the token set too":
            ("CREATE TABLE t(k TEXT, tok INTEGER, b TEXT COLLATE NOCASE, u TEXT);"
             "CREATE UNIQUE INDEX ib ON t(b COLLATE BINARY)",
             "('v', 100, 'X', 'u1')", "('w', 5, 'x', 'u2')", "SET tok = 5, b = 'X'"),
        "the changed-columns test, RTRIM column, BINARY index":
            ("CREATE TABLE t(k TEXT, tok INTEGER, b TEXT COLLATE RTRIM, u TEXT);"
             "CREATE UNIQUE INDEX ib ON t(b COLLATE BINARY)",
             "('v', 100, 'x ', 'u1')", "('w', 5, 'x', 'u2')", "SET b = 'x '"),
        "the updated row's own exclusion, WITHOUT ROWID, NOCASE column, BINARY key":
            ("CREATE TABLE t(k TEXT, tok INTEGER, a TEXT COLLATE NOCASE, u TEXT UNIQUE,"
             " PRIMARY KEY (a COLLATE BINARY)) WITHOUT ROWID",
             "('v', 100, 'X', 'u1')", "('w', 5, 'x', 'u2')", "SET u = 'u1'"),
    }
    for i, (what, (ddl, victim, mine, setter)) in enumerate(sorted(cases.items())):
        path = os.path.join(work, "collcmp-%d.db" % i)
        c = connect(path)
        c.executescript(ddl)
        c.execute("SELECT fence_protect('t', 'tok', 'r:', 'k')")
        c.execute("INSERT INTO t VALUES %s" % victim)
        c.execute("INSERT INTO t VALUES %s" % mine)
        c.close()
        c = connect(path)
        err = script(c, ["BEGIN", "SELECT fence_check('r:w', 5)",
                         "UPDATE OR REPLACE t %s WHERE k = 'w'" % setter, "COMMIT"])
        attempt(c, "ROLLBACK")
        c.close()
        c = connect(path, load=False)
        keys = [r[0] for r in c.execute("SELECT k FROM t ORDER BY 1").fetchall()]
        c.close()
        ok("v" in keys, "%s: UPDATE OR REPLACE cannot delete the row of r:v" % what,
           "error: %r\nkeys: %r" % (err, keys))


def unique_inside_attacks():
    """A UNIQUE index created, dropped, or made again on another column in the
    transaction that already wrote the per-row guarded table (after its first
    write), then a REPLACE through it: row 1 (resource kv:1, highest 10) must
    not be deleted at token 5."""
    ddls = {
        "a new UNIQUE index": ["CREATE UNIQUE INDEX kv_n ON kv(n)"],
        "its UNIQUE index made again under the same name on another column":
            ["DROP INDEX kv_v", "CREATE UNIQUE INDEX kv_v ON kv(n)"],
        "its UNIQUE index dropped and another made":
            ["DROP INDEX kv_v", "CREATE UNIQUE INDEX kv_n2 ON kv(n)"],
    }
    for i, (what, ddl) in enumerate(sorted(ddls.items())):
        for form in ("INSERT OR REPLACE INTO kv VALUES ('2', 'vc', 7, 5)",
                     "UPDATE OR REPLACE kv SET n = 7, tok = 5 WHERE k = '2'"):
            path = os.path.join(work, "uin-%d-%d.db" % (i, form.startswith("UPDATE")))
            c = connect(path)
            c.executescript("""
                CREATE TABLE kv(k TEXT PRIMARY KEY, v TEXT, n INTEGER, tok INTEGER);
                CREATE UNIQUE INDEX kv_v ON kv(v);
                SELECT fence_protect('kv', 'tok', 'kv:', 'k');
                INSERT INTO kv VALUES ('1', 'va', 7, 10);
            """)
            c.close()
            c = connect(path)
            c.execute("BEGIN")
            c.execute("INSERT INTO kv VALUES ('2', 'vb', 8, 5)")
            for sql in ddl:
                c.execute(sql)
            err = attempt(c, form)
            attempt(c, "COMMIT")
            c.close()
            rows, tokens = committed(path, "kv")
            ok([r for r in rows if r[0] == "1"] == [("1", "va", 7, 10)] and ("kv:1", 10) in tokens,
               "%s inside the writing transaction, after its first write, then %s: the row "
               "of kv:1 (highest 10) is not deleted at token 5" % (what, form.split(" kv")[0]),
               "error: %r\nrows: %r\ntokens: %r" % (err, rows, tokens))


# ---------------------------------------------------------------------
# 6. token column affinity
# ---------------------------------------------------------------------
def affinity_attacks():
    path = os.path.join(work, "aff.db")
    c = connect(path)
    for i, decl in enumerate(("TEXT", "VARCHAR(20)", "REAL", "FLOAT", "DOUBLE", "CLOB")):
        c.execute("CREATE TABLE bad%d(id INTEGER PRIMARY KEY, tok %s)" % (i, decl))
        err = attempt(c, "SELECT fence_protect('bad%d', 'tok', 'r')" % i)
        n = c.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' "
                      "AND tbl_name = 'bad%d'" % i).fetchone()[0]
        ok(err is not None and "affinity" in err and n == 0,
           "token column %s refused at protect time, table unguarded" % decl, err)
    for i, decl in enumerate(("INTEGER", "BIGINT", "NUMERIC", "", "BLOB")):
        c.execute("CREATE TABLE good%d(id INTEGER PRIMARY KEY, tok %s)" % (i, decl))
        ok(attempt(c, "SELECT fence_protect('good%d', 'tok', 'r')" % i) is None,
           "token column %r accepted" % decl)
    # a later writable_schema change makes the column TEXT: tokens arrive as
    # text and are refused, never read as some other number
    c.executescript("""
        CREATE TABLE later(id INTEGER PRIMARY KEY, tok INTEGER);
        SELECT fence_protect('later', 'tok', 'later');
        INSERT INTO later VALUES (1, 5);
        PRAGMA writable_schema = ON;
        UPDATE sqlite_schema SET sql = replace(sql, 'tok INTEGER', 'tok TEXT') WHERE name = 'later';
        PRAGMA writable_schema = OFF;
    """)
    c.close()
    c = connect(path)
    before = committed(path, "later")
    unchanged(path, "later", before, "token column changed to TEXT later: writes refused",
              attempt(c, "INSERT INTO later VALUES (2, 6)"))
    c.close()


# ---------------------------------------------------------------------
# 8. incremental BLOB I/O fires no trigger: what holds, exactly
# ---------------------------------------------------------------------
def blob_attacks():
    path = os.path.join(work, "blob.db")
    c = connect(path)
    c.executescript("""
        CREATE TABLE doc(k TEXT PRIMARY KEY, body BLOB, note TEXT, tok INTEGER);
        SELECT fence_protect('doc', 'tok', 'doc:', 'k');
        INSERT INTO doc VALUES ('a', x'00000000', 'abcd', 5);
    """)
    c.close()
    plain = connect(path, load=False)
    rowid = plain.execute("SELECT rowid FROM doc").fetchone()[0]

    def blob_write(col):
        try:
            with plain.blobopen("doc", col, rowid) as b:
                b.write(b"\xff" * 4)
            return None
        except sqlite3.Error as e:
            return str(e)

    ok(blob_write("tok") is not None, "BLOB I/O cannot open the token column (an integer)")
    ok(blob_write("k") is not None, "BLOB I/O cannot write the key column (it is indexed)")
    err = blob_write("body")
    ok(err is None and plain.execute("SELECT hex(body) FROM doc").fetchone()[0] == "FFFFFFFF",
       "documented limit: BLOB I/O rewrites the bytes of an unindexed TEXT/BLOB column "
       "of a protected row, unfenced (SQLite fires no trigger)", err)
    plain.close()


# ---------------------------------------------------------------------
# 9. more shapes: WITHOUT ROWID, generated keys, FK actions, app triggers,
#    INSTEAD OF views
# ---------------------------------------------------------------------
def shape_attacks():
    path = os.path.join(work, "shapes.db")
    c = connect(path)
    c.executescript("""
        PRAGMA foreign_keys = ON;
        CREATE TABLE wr(k TEXT PRIMARY KEY, u TEXT UNIQUE, tok INTEGER) WITHOUT ROWID;
        SELECT fence_protect('wr', 'tok', 'wr:', 'k');
        INSERT INTO wr VALUES ('a', 'x', 5);
        SELECT fence_check('wr:a', 9);
        CREATE TABLE gen(id INTEGER, k TEXT GENERATED ALWAYS AS ('g' || id) STORED,
                         v INTEGER, tok INTEGER);
        CREATE TABLE parent(id INTEGER PRIMARY KEY);
        CREATE TABLE child(id INTEGER PRIMARY KEY, pid INTEGER REFERENCES parent ON DELETE CASCADE,
                           qid INTEGER REFERENCES parent ON DELETE SET NULL, tok INTEGER);
        SELECT fence_protect('child', 'tok', 'child');
        INSERT INTO parent VALUES (1), (2);
        INSERT INTO child VALUES (1, 1, 2, 5);
        CREATE TABLE other(x);
        CREATE TRIGGER app_writes AFTER INSERT ON other BEGIN UPDATE child SET tok = tok; END;
        CREATE TRIGGER app_writes2 AFTER INSERT ON other BEGIN DELETE FROM child; END;
        CREATE VIEW child_view AS SELECT * FROM child;
        CREATE TRIGGER child_view_upd INSTEAD OF UPDATE ON child_view
          BEGIN UPDATE child SET qid = NEW.qid WHERE id = OLD.id; END;
        CREATE TRIGGER child_view_del INSTEAD OF DELETE ON child_view
          BEGIN DELETE FROM child WHERE id = OLD.id; END;
    """)
    before = committed(path, "wr")
    unchanged(path, "wr", before, "WITHOUT ROWID: stale REPLACE through a UNIQUE column refused",
              attempt(c, "INSERT OR REPLACE INTO wr VALUES ('b', 'x', 6)"))
    c.execute("INSERT INTO wr VALUES ('c', 'y', 1)")
    before = committed(path, "wr")
    unchanged(path, "wr", before, "WITHOUT ROWID: UPDATE OR REPLACE refused unfenced",
              script(c, ["BEGIN", "SELECT fence_check('wr:c', 1)",
                         "UPDATE OR REPLACE wr SET u = 'x' WHERE k = 'c'"]))
    attempt(c, "ROLLBACK")
    unchanged(path, "wr", before, "WITHOUT ROWID: UPDATE OR REPLACE with a stale token refused",
              attempt(c, "UPDATE OR REPLACE wr SET u = 'x', tok = 6 WHERE k = 'c'"))
    err = attempt(c, "SELECT fence_protect('gen', 'tok', 'gen:', 'k')")
    ok(err is not None and "generated" in err and c.execute(
        "SELECT count(*) FROM sqlite_schema WHERE tbl_name = 'gen' AND type = 'trigger'"
    ).fetchone()[0] == 0, "a generated key column is refused by fence_protect", err)
    before = committed(path, "child")
    for rt in ("OFF", "ON"):
        c.execute("PRAGMA recursive_triggers = %s" % rt)
        unchanged(path, "child", before, "FK ON DELETE CASCADE into a protected table refused "
                  "(recursive_triggers=%s)" % rt, attempt(c, "DELETE FROM parent WHERE id = 1"))
        unchanged(path, "child", before, "FK ON DELETE SET NULL into a protected table refused "
                  "(recursive_triggers=%s)" % rt, attempt(c, "DELETE FROM parent WHERE id = 2"))
        unchanged(path, "child", before, "the application's own trigger writing a protected table "
                  "is guarded (recursive_triggers=%s)" % rt, attempt(c, "INSERT INTO other VALUES (1)"))
        unchanged(path, "child", before, "INSTEAD OF UPDATE on a view is guarded "
                  "(recursive_triggers=%s)" % rt, attempt(c, "UPDATE child_view SET qid = NULL"))
        unchanged(path, "child", before, "INSTEAD OF DELETE on a view is guarded "
                  "(recursive_triggers=%s)" % rt, attempt(c, "DELETE FROM child_view"))
    # an upsert on a table keyed by its INTEGER PRIMARY KEY: the proposed
    # row is checked as an INSERT although DO UPDATE runs instead
    c.executescript("""
        CREATE TABLE job(id INTEGER PRIMARY KEY, v INTEGER, tok INTEGER);
        SELECT fence_protect('job', 'tok', 'job:', 'id');
        INSERT INTO job VALUES (1, 1, 5);
        SELECT fence_check('job:1', 9);
    """)
    before = committed(path, "job")
    unchanged(path, "job", before, "upsert on an INTEGER PRIMARY KEY key: a stale proposed row refused",
              attempt(c, "INSERT INTO job VALUES (1, 2, 6) ON CONFLICT(id) DO UPDATE SET v = 2, tok = 9"))
    # a guard made by fence 1.3 or older (no guard id) is refused, clearly
    c.executescript("""
        CREATE TABLE legacy(id INTEGER PRIMARY KEY, tok INTEGER);
        CREATE TRIGGER "fence_insert:legacy" BEFORE INSERT ON legacy
          BEGIN SELECT fence_guard_write('legacy', NEW.tok); END;
    """)
    err = attempt(c, "INSERT INTO legacy VALUES (1, 5)")
    ok(err is not None and "run fence_protect" in err and
       c.execute("SELECT count(*) FROM legacy").fetchone()[0] == 0,
       "a guard trigger of an older fence is refused with what to do", err)
    c.execute("SELECT fence_protect('legacy', 'tok', 'legacy')")
    ok(attempt(c, "INSERT INTO legacy VALUES (1, 5)") is None and
       c.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'fence_insert:legacy'").fetchone()[0] == 0,
       "... and fence_protect replaces it")
    # a table whose name merely starts like fence's functions blocks nothing
    c.execute("CREATE TABLE fence_guard_log(x)")
    ok(attempt(c, "INSERT INTO legacy VALUES (2, 5)") is None, "a table named fence_guard_log is harmless")
    # writable_schema itself opens nothing
    before = committed(path, "child")
    c.execute("PRAGMA writable_schema = ON")
    unchanged(path, "child", before, "writable_schema=ON: an unfenced DELETE is still refused",
              attempt(c, "DELETE FROM child"))
    c.execute("PRAGMA writable_schema = OFF")
    c.close()


# ---------------------------------------------------------------------
# 10. A second review (issue 11): key affinity, RAISE(IGNORE), an
#     authorizer that ignores the guard, an index re-made under its name
# ---------------------------------------------------------------------
def review2_attacks():
    # a key column without INTEGER or TEXT affinity: 1 and 1.0 are one key
    # to SQLite but "kv:1" and "kv:1.0" to a resource, so protect refuses it
    for n, (decl, strict) in enumerate((("k PRIMARY KEY", ""), ("k BLOB PRIMARY KEY", ""),
                         ("k NUMERIC PRIMARY KEY", ""), ("k REAL PRIMARY KEY", ""),
                         ("k ANY PRIMARY KEY", " STRICT"))):
        path = os.path.join(work, "aff%d.db" % n)
        c = connect(path)
        c.execute("SELECT fence_check('setup', 1)")
        c.execute("CREATE TABLE kv (%s, v ANY, tok INTEGER)%s" % (decl, strict))
        err = attempt(c, "SELECT fence_protect('kv', 'tok', 'kv:', 'k')")
        attempt(c, "INSERT INTO kv VALUES (1, 'owner', 10)")
        err2 = attempt(c, "REPLACE INTO kv VALUES (1.0, 'zombie', 5)")
        c.close()
        rows, tokens = committed(path, "kv")
        ok(err is not None and "affinity" in err and
           not [t for t in tokens if t[0].startswith("kv:")],
           "a key column declared %r%s is refused by fence_protect" % (decl, strict),
           "protect: %r; replace: %r; rows %r; tokens %r" % (err, err2, rows, tokens))
    for n, decl in enumerate(("k INTEGER PRIMARY KEY", "k TEXT PRIMARY KEY", "k INT PRIMARY KEY")):
        path = os.path.join(work, "affok%d.db" % n)
        c = connect(path)
        c.execute("CREATE TABLE kv (%s, v, tok INTEGER)" % decl)
        err = attempt(c, "SELECT fence_protect('kv', 'tok', 'kv:', 'k')")
        c.close()
        ok(err is None, "a key column declared %r can be protected" % decl, err)

    # RAISE(IGNORE) in the application's AFTER INSERT trigger (once able to
    # skip fence's AFTER check of an auto-assigned INTEGER PRIMARY KEY; such
    # a key is now refused before the row is written)
    for temp, name in (("TEMP ", "a TEMP"), ("", "a later main")):
        path = os.path.join(work, "ign%d.db" % len(temp))
        c = connect(path)
        c.executescript("""
            CREATE TABLE acct (id INTEGER PRIMARY KEY, bal INTEGER, tok INTEGER);
            SELECT fence_protect('acct', 'tok', 'acct:', 'id');
            INSERT INTO acct VALUES (1, 100, 10);
            SELECT fence_check('acct:2', 50);
        """)
        before = committed(path, "acct")
        c.execute("CREATE %sTRIGGER ign AFTER INSERT ON main.acct "
                  "BEGIN SELECT RAISE(IGNORE); END" % temp)
        err = attempt(c, "INSERT INTO acct(bal, tok) VALUES (-1, 5)")
        unchanged(path, "acct", before,
                  "%s AFTER INSERT trigger's RAISE(IGNORE) does not skip the check of an "
                  "assigned key" % name, err)
        c.execute("DROP TRIGGER ign")
        err = attempt(c, "INSERT INTO acct(id, bal, tok) VALUES (2, 7, 50)")
        rows, _ = committed(path, "acct")
        ok(err is None and rows == [(1, 100, 10), (2, 7, 50)],
           "with %s RAISE(IGNORE) trigger dropped, a current token writes its given key" % name,
           "%r %r" % (err, rows))
        c.close()

    # RAISE(FAIL) in such a trigger, or a conflict in an ordinary one under
    # INSERT OR FAIL, also ends the statement with the row written and the
    # AFTER check skipped (FAIL keeps what the statement did so far)
    cases = (("TEMP ", "BEGIN SELECT RAISE(FAIL, 'audit failed'); END", "INSERT",
              "a TEMP RAISE(FAIL)"),
             ("", "BEGIN INSERT INTO audit VALUES (1); END", "INSERT OR FAIL",
              "an audit trigger's conflict under INSERT OR FAIL"))
    for n, (temp, body, verb, name) in enumerate(cases):
        path = os.path.join(work, "fail%d.db" % n)
        c = connect(path)
        c.executescript("""
            CREATE TABLE acct (id INTEGER PRIMARY KEY, bal INTEGER, tok INTEGER);
            CREATE TABLE audit (k INTEGER UNIQUE);
            INSERT INTO audit VALUES (1);
            SELECT fence_protect('acct', 'tok', 'acct:', 'id');
            INSERT INTO acct VALUES (1, 100, 10);
            SELECT fence_check('acct:2', 50);
        """)
        before = committed(path, "acct")
        c.execute("CREATE %sTRIGGER aud AFTER INSERT ON main.acct %s" % (temp, body))
        err = attempt(c, "%s INTO acct(bal, tok) VALUES (666, 5)" % verb)
        err2 = attempt(c, "%s INTO acct(bal, tok) VALUES (777, NULL)" % verb)
        unchanged(path, "acct", before,
                  "%s AFTER INSERT does not skip the check of an assigned key" % name,
                  "%r %r" % (err, err2))
        c.close()

    # the same trigger created inside the transaction, after a write that
    # admitted the guard
    path = os.path.join(work, "ignmid.db")
    c = connect(path)
    c.executescript("""
        CREATE TABLE acct (id INTEGER PRIMARY KEY, bal INTEGER, tok INTEGER);
        SELECT fence_protect('acct', 'tok', 'acct:', 'id');
        INSERT INTO acct VALUES (1, 100, 10);
        SELECT fence_check('acct:3', 50);
    """)
    err = script(c, ["BEGIN", "INSERT INTO acct(bal, tok) VALUES (1, 60)",
                     "CREATE TEMP TRIGGER ign AFTER INSERT ON main.acct "
                     "BEGIN SELECT RAISE(IGNORE); END",
                     "INSERT INTO acct(bal, tok) VALUES (-1, 5)"])
    attempt(c, "COMMIT")
    c.close()
    rows, _ = committed(path, "acct")
    ok(err is not None and (3, -1, 5) not in rows,
       "a RAISE(IGNORE) trigger created mid-transaction does not skip the AFTER check",
       "%r %r" % (err, rows))

    # a UNIQUE index dropped and made again under its name on other columns
    path = os.path.join(work, "reindex.db")
    c = connect(path)
    c.executescript("""
        CREATE TABLE acct (k TEXT PRIMARY KEY, email TEXT, v TEXT, tok INTEGER);
        CREATE UNIQUE INDEX acct_uq ON acct(v);
        SELECT fence_protect('acct', 'tok', 'acct:', 'k');
        INSERT INTO acct VALUES ('a', 'e@x', 'owner', 10);
        DROP INDEX acct_uq;
        CREATE UNIQUE INDEX acct_uq ON acct(email);
    """)
    before = committed(path, "acct")
    err = attempt(c, "INSERT OR REPLACE INTO acct VALUES ('b', 'e@x', 'zombie', 5)")
    c.close()
    unchanged(path, "acct", before,
              "REPLACE through a UNIQUE index re-made under its old name on other columns", err)


# ---------------------------------------------------------------------
# A one-resource guard's triggers pass only its id: the resource is the one
# main.fence_guards records, and its triggers name it in their RAISE text.
def main():
    try:
        for part in (attach_attacks, journal_attacks, replace_attacks, collation_attacks,
                     rename_attacks, unique_inside_attacks, column_rename_attacks,
                     rowid_column_attacks, crafted_lookup_attacks,
                     generated_rowid_attacks, default_replace_attacks, partial_unique_attacks,
                     nolock_attacks, hard_link_attacks,
                     rewriting_trigger_attacks,
                     collation_compare_attacks, affinity_attacks, blob_attacks,
                     shape_attacks, review2_attacks):
            try:
                part()
            except Exception as e:  # a crash in one class must not hide the others
                ok(False, "%s ran to the end" % part.__name__, repr(e))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(check.status())


if __name__ == "__main__":
    main()
