#!/usr/bin/python3
"""tests/sqlite_readme.py: README.md's SQLite code, run as a reader would
run it: the quick start in the sqlite3 shell (its output and the errors it
quotes), the Python sqlite3 pattern (one explicit transaction) and its
error handling (which branch runs for a stale token), the claim that
Python's default mode runs SELECT fence_check(...) and a later UPDATE in two
transactions, and the "no such function: fence_guard_write" error of a
connection without fence. Asserts on what committed.

One "ok - " or "not ok - " line per check.
"""
import os
import re
import sqlite3
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from readme_blocks import ROOT, block, instrument, quoted_error  # noqa: E402

EXT = os.path.join(ROOT, "sqlite_ext", "fence")
failed = 0


def report(ok, name, detail=""):
    global failed
    print("%s - readme sqlite: %s" % ("ok" if ok else "not ok", name))
    if not ok:
        failed += 1
        for line in str(detail).splitlines():
            print("#   " + line)


def quick_start(work):
    sql = block("### SQLite (30 seconds)", "sql")
    db = os.path.join(work, "app.db")
    r = subprocess.run(["sqlite3", db], input=sql, cwd=ROOT, capture_output=True, text=True)
    # (fence_protect's NULL result prints as an empty line)
    report(r.stdout == "\n1|1|34\n", "quick start: the table ends as the README says (1|1|34)",
           r.stdout + r.stderr)
    errors = [re.sub(r"^Runtime error near line \d+: ", "", e) for e in r.stderr.splitlines()]
    stale = quoted_error(sql, "-- Runtime error:")
    report(len(errors) == 2 and errors[0] == stale,
           "quick start: the stale-token error is word for word the one quoted", "\n".join(errors))
    required = quoted_error(sql.split("no token at all:")[1], "-- Runtime error:").replace(" (...)", "")
    report(len(errors) == 2 and errors[1].startswith(required),
           "quick start: the missing-token error begins as quoted", "\n".join(errors))
    return db


def python_pattern(work):
    code = block("### Python and SQLite (`sqlite3`)", "python", 0)
    catch = block("### Python and SQLite (`sqlite3`)", "python", 1)
    db = os.path.join(work, "py.db")
    code = code.replace('"app.db"', repr(db)).replace('"/usr/local/lib/sqlite3/fence"', repr(EXT))
    env = {}
    exec(code, env)
    con = env["con"]
    con.execute("CREATE TABLE invoices (id integer PRIMARY KEY, status text)")
    con.execute("INSERT INTO invoices VALUES (7, 'open')")
    env["mark_paid"](con, 7, 5)
    report(con.execute("SELECT status FROM invoices WHERE id = 7").fetchone()[0] == "paid"
           and con.execute("SELECT fence_current('invoice-7')").fetchone()[0] == 5,
           "Python pattern: mark_paid with token 5 commits the UPDATE and fences invoice-7 at 5")
    con.execute("UPDATE invoices SET status = 'open'")
    env.update(token=4, hits=[])
    exec(instrument(catch), env)
    report(env["hits"] == [0] and not con.in_transaction
           and con.execute("SELECT status FROM invoices WHERE id = 7").fetchone()[0] == "open",
           "Python pattern: a stale token takes the 'lost the lock' branch, rolls back, writes nothing",
           env["hits"])
    # the missing-token branch, on a protected table
    con.execute("CREATE TABLE t (id integer PRIMARY KEY, tok integer)")
    con.execute("SELECT fence_protect('t', 'tok', 't-lock')")
    env["hits"] = []
    exec(instrument(catch.replace("mark_paid(con, 7, token)",
                                  "con.execute('INSERT INTO t VALUES (1, NULL)')")), env)
    report(env["hits"] == [1], "Python pattern: a write without a token takes the 'bug' branch",
           env["hits"])
    # a UNIQUE violation is an IntegrityError too, and must not be taken for a refusal
    env["hits"] = []
    try:
        exec(instrument(catch.replace("mark_paid(con, 7, token)",
                                      "con.execute('INSERT INTO invoices VALUES (7, 1)')")), env)
        report(False, "Python pattern: a UNIQUE violation is re-raised, not taken for a refusal")
    except sqlite3.IntegrityError:
        report(env["hits"] == [], "Python pattern: a UNIQUE violation is re-raised, not taken for a refusal")


def default_mode_pitfall(work):
    """What the README warns of: in Python's default mode SELECT fence_check
    commits on its own, so the UPDATE after it is not fenced."""
    db = os.path.join(work, "default.db")
    con = sqlite3.connect(db)           # the default isolation_level
    con.enable_load_extension(True)
    con.load_extension(EXT)
    con.execute("CREATE TABLE invoices (id integer PRIMARY KEY, status text)")
    con.commit()
    con.execute("SELECT fence_check('invoice-7', 5)")
    held_after_check = con.execute("SELECT count(*) FROM fence_held").fetchone()[0]
    report(not con.in_transaction and held_after_check == 0,
           "default mode: after SELECT fence_check no transaction is open and nothing is held")


def unloaded_connection(db):
    con = sqlite3.connect(db)
    try:
        con.execute("INSERT INTO counter VALUES (2, 0, 50)")
        report(False, "a connection without fence cannot write a protected table")
    except sqlite3.OperationalError as e:
        report(str(e) == "no such function: fence_guard_write"
               and con.execute("SELECT count(*) FROM counter").fetchone()[0] == 1,
               "a connection without fence gets 'no such function: fence_guard_write' and writes nothing",
               e)


def main():
    with tempfile.TemporaryDirectory() as work:
        db = quick_start(work)
        python_pattern(work)
        default_mode_pitfall(work)
        unloaded_connection(db)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
