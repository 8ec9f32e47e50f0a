#!/usr/bin/python3
"""tests/sqlite_replace.py: every form of REPLACE on a per-row table, with
recursive_triggers on and off, through Python's sqlite3, asserted on what
committed (the table and fence_tokens, read back by a connection without
fence).

SPEC.md "Precise points": a row a REPLACE deletes is a DELETE of that row,
so deleting another resource's row needs a fence on that resource, and the
new row's token is never accepted for it. fence routes such rows through
the BEFORE DELETE guard, which SQLite fires for them only with PRAGMA
recursive_triggers=ON; a per-row table a REPLACE can reach across keys is
refused on a connection that has it off (docs/sqlite-guarantees.md).

The table: t(k TEXT PRIMARY KEY, u TEXT UNIQUE, v, tok) guarded per row on
k ('t:'), rows a and b at token 5; oc likewise with u declared
UNIQUE ON CONFLICT REPLACE. Each form deletes a's row while writing key c
(or b). Three attempts per form and setting:
  unfenced   the transaction holds t:c (its token) or t:b, not t:a: nothing
             commits, t:a stays at 5
  fenced     the transaction also holds t:a at 5: with recursive_triggers
             on it commits (a's row gone, t:a still 5, not the new row's 6);
             off, it is refused and nothing commits
  own key    a REPLACE of a's own row at a token of a's: commits when on

Usage: /usr/bin/python3 tests/sqlite_replace.py
"""
import atexit
import os
import sqlite3
import shutil
import sys
import tempfile

import attacklib as lib
from attacklib import attempt, connect, script

check = lib.Checks("sqlite replace")
ok = check.ok
# in memory where the machine has it: 38 small databases, each synced
work = tempfile.mkdtemp(prefix="fence_replace_",
                        dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
atexit.register(shutil.rmtree, work, True)

# (name, table, statements that delete a's row, the fence they take besides)
FORMS = [
    ("INSERT OR REPLACE through a UNIQUE column", "t",
     ["INSERT OR REPLACE INTO t VALUES ('c', 'ua', 0, 6)"]),
    ("REPLACE through a UNIQUE column", "t",
     ["REPLACE INTO t VALUES ('c', 'ua', 0, 6)"]),
    ("INSERT OR REPLACE through the rowid", "t",
     ["INSERT OR REPLACE INTO t(rowid, k, u, v, tok) "
      "SELECT rowid, 'c', 'uc', 0, 6 FROM t WHERE k = 'a'"]),
    ("UPDATE OR REPLACE onto a's UNIQUE value", "t",
     ["SELECT fence_check('t:b', 5)", "UPDATE OR REPLACE t SET u = 'ua' WHERE k = 'b'"]),
    ("UPDATE OR REPLACE with a token onto a's UNIQUE value", "t",
     ["UPDATE OR REPLACE t SET u = 'ua', tok = 6 WHERE k = 'b'"]),
    ("UPDATE OR REPLACE onto a's rowid", "t",
     ["SELECT fence_check('t:b', 5)",
      "UPDATE OR REPLACE t SET rowid = (SELECT rowid FROM t WHERE k = 'a') WHERE k = 'b'"]),
    ("a plain INSERT through an ON CONFLICT REPLACE column", "oc",
     ["INSERT INTO oc VALUES ('c', 'ua', 0, 6)"]),
    ("an upsert whose proposed row replaces through an ON CONFLICT REPLACE column", "oc",
     ["INSERT INTO oc VALUES ('c', 'ua', 0, 6) ON CONFLICT(k) DO UPDATE SET v = 1"]),
    ("an upsert's DO UPDATE onto a's value of an ON CONFLICT REPLACE column", "oc",
     ["INSERT INTO oc VALUES ('b', 'ub', 0, 6) ON CONFLICT(k) DO UPDATE SET u = 'ua', "
      "tok = excluded.tok"]),
]


def fresh(name):
    path = os.path.join(work, name + ".db")
    c = connect(path)
    c.executescript("""
        CREATE TABLE t(k TEXT PRIMARY KEY, u TEXT UNIQUE, v INTEGER, tok INTEGER);
        SELECT fence_protect('t', 'tok', 't:', 'k');
        CREATE TABLE oc(k TEXT PRIMARY KEY, u TEXT UNIQUE ON CONFLICT REPLACE, v INTEGER,
                        tok INTEGER);
        SELECT fence_protect('oc', 'tok', 't:', 'k');
        BEGIN;
        SELECT fence_check('t:a', 5), fence_check('t:b', 5);
        INSERT INTO t VALUES ('a', 'ua', 0, 5), ('b', 'ub', 0, 5);
        INSERT INTO oc VALUES ('a', 'ua', 0, 5), ('b', 'ub', 0, 5);
        COMMIT;
    """)
    c.close()
    return path


def committed(path, table):
    c = connect(path, load=False, recursive=False)
    rows = c.execute("SELECT k, u, tok FROM %s ORDER BY k" % table).fetchall()
    tokens = dict(c.execute("SELECT resource, token FROM fence_tokens"))
    c.close()
    return rows, tokens


def run(path, rt, sqls):
    c = connect(path, recursive=False)
    c.execute("PRAGMA recursive_triggers = %s" % rt)
    err = script(c, ["BEGIN"] + sqls + ["COMMIT"], rollback=True)
    c.close()
    return err


def main():
    n = 0
    for what, table, sqls in FORMS:
        for rt in ("OFF", "ON"):
            n += 1
            path = fresh("f%d" % n)
            before = committed(path, table)
            err = run(path, rt, sqls)
            after = committed(path, table)
            ok(err is not None and after == before,
               "%s, recursive_triggers=%s, fenced on the new row's key only: refused, "
               "a's row and t:a stay" % (what, rt),
               "error: %r\nbefore: %r\nafter: %r" % (err, before, after))

            path = fresh("g%d" % n)
            before = committed(path, table)
            err = run(path, rt, ["SELECT fence_check('t:a', 5)"] + sqls)
            rows, tokens = committed(path, table)
            if rt == "ON" and "DO UPDATE SET u" in sqls[-1]:
                # SQLite itself refuses: an upsert's DO UPDATE aborts on a UNIQUE conflict
                ok(err is not None and "UNIQUE" in err and (rows, tokens) == before,
                   "%s, recursive_triggers=ON, fenced on t:a too: SQLite aborts it, nothing "
                   "committed" % what, "error: %r\nrows: %r\ntokens: %r" % (err, rows, tokens))
            elif rt == "ON":
                ok(err is None and "a" not in [r[0] for r in rows] and tokens.get("t:a") == 5,
                   "%s, recursive_triggers=ON, fenced on t:a too: commits, a's row gone, t:a "
                   "still 5" % what, "error: %r\nrows: %r\ntokens: %r" % (err, rows, tokens))
            else:
                ok(err is not None and "recursive_triggers" in err and (rows, tokens) == before,
                   "%s, recursive_triggers=OFF, fenced on t:a too: refused, naming the "
                   "setting, nothing committed" % what,
                   "error: %r\nrows: %r\ntokens: %r" % (err, rows, tokens))

    # a REPLACE of a row by its own key, at a token of its own
    path = fresh("own")
    err = run(path, "ON", ["INSERT OR REPLACE INTO t VALUES ('a', 'ua', 1, 7)"])
    rows, tokens = committed(path, "t")
    ok(err is None and ("a", "ua", 7) in rows and tokens.get("t:a") == 7,
       "INSERT OR REPLACE of a's own row at a's token 7 commits (recursive_triggers=ON)",
       "error: %r\nrows: %r\ntokens: %r" % (err, rows, tokens))
    err = run(path, "ON", ["INSERT OR REPLACE INTO t VALUES ('a', 'ua', 1, 6)"])
    after = committed(path, "t")
    ok(err is not None and "stale" in err and after == (rows, tokens),
       "... and at the stale 6 it is refused", "error: %r\nafter: %r" % (err, after))

    # the setting changed between statements of one connection is seen
    path = fresh("toggle")
    c = connect(path, recursive=False)
    errs = []
    for rt in ("ON", "OFF", "ON"):
        c.execute("PRAGMA recursive_triggers = %s" % rt)
        errs.append(attempt(c, "INSERT INTO t VALUES ('d%s', 'u%s', 0, 1)" % (len(errs), len(errs))))
    c.close()
    rows, _ = committed(path, "t")
    ok(errs[0] is None and errs[1] is not None and errs[2] is None and
       [r[0] for r in rows] == ["a", "b", "d0", "d2"],
       "recursive_triggers turned off and on again on one connection: the write in between "
       "is refused, the others commit", "errors: %r\nrows: %r" % (errs, rows))

    # a per-row table no REPLACE can reach across keys needs no setting
    path = os.path.join(work, "ipk.db")
    c = connect(path, recursive=False)
    c.executescript("""
        CREATE TABLE j(id INTEGER PRIMARY KEY, v TEXT, tok INTEGER);
        SELECT fence_protect('j', 'tok', 'j:', 'id');
        CREATE TABLE w(k TEXT PRIMARY KEY, v TEXT, tok INTEGER) WITHOUT ROWID;
        SELECT fence_protect('w', 'tok', 'w:', 'k');
    """)
    errs = [attempt(c, "INSERT OR REPLACE INTO j VALUES (1, 'x', 3)"),
            attempt(c, "INSERT OR REPLACE INTO w VALUES ('k', 'x', 3)"),
            attempt(c, "INSERT INTO j(v, tok) VALUES ('assigned', 3)")]
    c.close()
    c = connect(path, load=False, recursive=False)
    rows = c.execute("SELECT 'j', id, v FROM j UNION ALL SELECT 'w', k, v FROM w").fetchall()
    c.close()
    ok(errs[0] is None and errs[1] is None and errs[2] is not None and "NULL" in errs[2] and
       sorted(rows) == [("j", 1, "x"), ("w", "k", "x")],
       "INTEGER PRIMARY KEY and WITHOUT ROWID keys with no other UNIQUE index: written with "
       "recursive_triggers off; a key left for SQLite to assign is refused as NULL",
       "errors: %r\nrows: %r" % (errs, rows))
    # a UNIQUE index made later by another connection (a migration) is seen by a
    # connection that already wrote the table with recursive_triggers off
    path = os.path.join(work, "migrate.db")
    a = connect(path, recursive=False)
    a.execute("PRAGMA recursive_triggers = OFF")
    a.executescript("""
        CREATE TABLE j(id INTEGER PRIMARY KEY, v TEXT, tok INTEGER);
        SELECT fence_protect('j', 'tok', 'j:', 'id');
        INSERT INTO j VALUES (1, 'x', 100);
    """)
    first = attempt(a, "INSERT INTO j VALUES (2, 'y', 1)")
    b = connect(path, recursive=False)
    b.execute("CREATE UNIQUE INDEX j_v ON j(v)")
    b.close()
    err = attempt(a, "INSERT OR REPLACE INTO j VALUES (3, 'x', 1)")
    a.close()
    c = connect(path, load=False, recursive=False)
    rows = c.execute("SELECT id, v, tok FROM j ORDER BY id").fetchall()
    c.close()
    ok(first is None and err is not None and "recursive_triggers" in err and
       rows == [(1, "x", 100), (2, "y", 1)],
       "a UNIQUE index made by another connection after this one wrote the table: its next "
       "REPLACE through it, with recursive_triggers off, is refused and j:1's row stays",
       "first: %r\nerror: %r\nrows: %r" % (first, err, rows))

    # the same two changes made inside one transaction, after its first guarded
    # write admitted the guard: seen by the next write of that transaction, one
    # at a token the transaction already holds (so that nothing is written to
    # fence_tokens, which reads the schema anyway)
    path = os.path.join(work, "intxn.db")
    a = connect(path, recursive=False)
    a.execute("PRAGMA recursive_triggers = OFF")  # some builds default to ON
    a.executescript("""
        CREATE TABLE j(id INTEGER PRIMARY KEY, v TEXT, tok INTEGER);
        SELECT fence_protect('j', 'tok', 'j:', 'id');
        INSERT INTO j VALUES (1, 'x', 100);
    """)
    err = script(a, ["BEGIN", "INSERT INTO j VALUES (2, 'y', 1)",
                     "CREATE UNIQUE INDEX j_v ON j(v)",
                     "INSERT OR REPLACE INTO j VALUES (2, 'x', 1)", "COMMIT"], rollback=True)
    a.close()
    c = connect(path, load=False, recursive=False)
    rows = c.execute("SELECT id, v, tok FROM j ORDER BY id").fetchall()
    c.close()
    ok(err is not None and "recursive_triggers" in err and rows == [(1, "x", 100)],
       "a UNIQUE index made inside the transaction after its first write: a REPLACE "
       "through it at the held j:2, with recursive_triggers off, is refused and nothing commits",
       "error: %r\nrows: %r" % (err, rows))

    path = fresh("toggle_txn")
    c = connect(path, recursive=True)
    err = script(c, ["BEGIN", "INSERT INTO t VALUES ('d', 'ud', 0, 1)",
                     "PRAGMA recursive_triggers = OFF",
                     "UPDATE t SET v = 1 WHERE k = 'd'", "COMMIT"], rollback=True)
    c.close()
    rows, _ = committed(path, "t")
    ok(err is not None and "recursive_triggers" in err and [r[0] for r in rows] == ["a", "b"],
       "recursive_triggers turned off inside a transaction after a write: the next write "
       "of the same row at its held token is refused, nothing commits", "error: %r\nrows: %r" % (err, rows))

    # PRAGMA recursive_triggers = OFF cancelled at its first step (a
    # statement timeout through a progress handler): SQLite has applied it
    # when preparing it but expired nothing, so the guard must read the
    # setting again in the next transaction
    path = fresh("cancelled_pragma")
    c = connect(path, recursive=True)
    c.execute("BEGIN")
    c.execute("SELECT fence_check('t:b', 5)")
    c.execute("UPDATE t SET v = 1 WHERE k = 'b'")
    c.execute("COMMIT")
    c.set_progress_handler(lambda: 1, 1)
    try:
        c.execute("PRAGMA recursive_triggers = OFF")
    except sqlite3.OperationalError:
        pass
    c.set_progress_handler(None, 1)
    setting = c.execute("PRAGMA recursive_triggers").fetchone()[0]
    err = script(c, ["BEGIN", "SELECT fence_check('t:b', 5)",
                     "INSERT OR REPLACE INTO t VALUES ('b', 'ua', 2, 5)", "COMMIT"], rollback=True)
    c.close()
    rows, tokens = committed(path, "t")
    ok(setting == 0 and err is not None and "recursive_triggers" in err and
       [r[0] for r in rows] == ["a", "b"],
       "recursive_triggers=OFF cancelled by a progress handler (applied, nothing expired): the "
       "next transaction's REPLACE through another UNIQUE index is refused, a's row stays",
       "setting: %r\nerror: %r\nrows: %r" % (setting, err, rows))

    # a migration renames the key column, then gives its old name to the
    # primary key: the guard must go by the column its triggers name
    for shape, ddl, swap in (
            ("rowid", "CREATE TABLE acct(rid INTEGER PRIMARY KEY, id TEXT, bal INTEGER, tok INTEGER)",
             ["ALTER TABLE acct RENAME COLUMN id TO name", "ALTER TABLE acct RENAME COLUMN rid TO id"]),
            ("WITHOUT ROWID", "CREATE TABLE acct(pk TEXT PRIMARY KEY, id TEXT, bal INTEGER, "
             "tok INTEGER) WITHOUT ROWID",
             ["ALTER TABLE acct RENAME COLUMN id TO owner", "ALTER TABLE acct RENAME COLUMN pk TO id"])):
        path = os.path.join(work, "swap_%s.db" % shape.split()[0])
        c = connect(path, recursive=True)
        key1, key2 = ("1", "2") if shape == "WITHOUT ROWID" else (1, 2)
        script(c, [ddl, "SELECT fence_protect('acct', 'tok', 'acct:', 'id')", "BEGIN",
                   "SELECT fence_check('acct:alice', 50), fence_check('acct:bob', 7)",
                   "INSERT INTO acct VALUES (%r, 'alice', 100, 50)" % (key1,),
                   "INSERT INTO acct VALUES (%r, 'bob', 100, 7)" % (key2,), "COMMIT"] + swap)
        c.close()
        c = connect(path, recursive=False)
        err = script(c, ["INSERT OR REPLACE INTO acct VALUES (%r, 'bob', 0, 7)" % (key1,)],
                     rollback=True)
        c.close()
        c = connect(path, load=False, recursive=False)
        rows = c.execute("SELECT bal, tok FROM acct ORDER BY tok").fetchall()
        c.close()
        ok(err is not None and rows == [(100, 7), (100, 50)],
           "%s table: the key column renamed and its old name given to the primary key; "
           "a REPLACE onto alice's row with recursive_triggers off is refused, her row stays"
           % shape, "error: %r\nrows: %r" % (err, rows))
    return check.status()


if __name__ == "__main__":
    sys.exit(main())
