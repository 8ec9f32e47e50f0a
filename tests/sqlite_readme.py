#!/usr/bin/python3
"""tests/sqlite_readme.py: README.md's SQLite code, run as a reader would
run it: the quick start in the sqlite3 shell (its output, the errors it
quotes, and its clean-up, after which a fresh lock service's token 1 is
accepted), the Python sqlite3 pattern (a protected table written in BEGIN
IMMEDIATE, loaded with the wheel's module `fence`) and its error handling
(which branch runs for a stale token), the claim that
Python's default mode runs SELECT fence_check(...) and a later UPDATE in two
transactions, and the "no such function: fence_guard_write" error of a
connection without fence. Asserts on what committed.

One "ok - " or "not ok - " line per check.
"""
import importlib.util
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


def fence_module():
    """packages/python's module `fence` (what `import fence` gives after pip
    install sqlite-fence), its fence.so taken from the build tree."""
    spec = importlib.util.spec_from_file_location(
        "fence", os.path.join(ROOT, "packages", "python", "fence", "__init__.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.loadable_path = lambda: EXT + ".so"
    return mod


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
    # (the NULL results of fence_protect, fence_unprotect and fence_reset print as empty lines)
    report(r.stdout == "\n1|1|34\n\n\n", "quick start: the table ends as the README says (1|1|34)",
           r.stdout + r.stderr)
    con = sqlite3.connect(db, isolation_level=None)
    con.enable_load_extension(True)
    con.load_extension(EXT)
    left = (con.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'counter'").fetchone()[0],
            con.execute("SELECT count(*) FROM fence_tokens WHERE resource = 'counter-lock'").fetchone()[0],
            con.execute("SELECT count(*) FROM fence_guards").fetchone()[0])
    fresh = con.execute("SELECT fence_try('counter-lock', 1)").fetchone()[0]
    con.close()
    report(left == (0, 0, 0) and fresh == 1,
           "quick start: its clean-up leaves no table, token or guard, and a fresh lock service's token 1 "
           "is accepted", (left, fresh))
    # the 3.40 shell says "Runtime error near line N: MESSAGE (19)", the
    # 3.52 one "Error near line N: MESSAGE": the message is the same
    errors = [re.sub(r" \(\d+\)$", "", re.sub(r"^(Runtime error|Error) near line \d+: ", "", e))
              for e in r.stderr.splitlines()]
    stale = re.sub(r" \(\d+\)$", "", quoted_error(sql, "-- Runtime error:"))
    report(len(errors) == 2 and errors[0] == stale,
           "quick start: the stale-token error is word for word the one quoted", "\n".join(errors))
    required = re.sub(r" \(\d+\)$", "",
                      quoted_error(sql.split("no token at all:")[1], "-- Runtime error:"))
    report(len(errors) == 2 and errors[1] == required,
           "quick start: the missing-token error is word for word the one quoted", "\n".join(errors))
    return db


def python_pattern(work):
    code = block("### Python and SQLite (`sqlite3`)", "python", 0)
    catch = block("### Python and SQLite (`sqlite3`)", "python", 1)
    db = os.path.join(work, "py.db")
    code = code.replace('"app.db"', repr(db))
    sys.modules["fence"] = fence_module()
    env = {}
    try:
        exec(code, env)
    finally:
        del sys.modules["fence"]
    con = env["con"]
    report(con.execute("SELECT count(*) FROM fence_guards").fetchone()[0] == 1,
           "Python pattern: fence.load(con) and fence_protect protect invoices")
    con.execute("INSERT INTO invoices VALUES (7, 'open', 4)")
    env["mark_paid"](con, 7, 5)
    report(con.execute("SELECT status, tok FROM invoices WHERE id = 7").fetchone() == ("paid", 5)
           and con.execute("SELECT fence_current('invoice:7')").fetchone()[0] == 5 and not con.in_transaction,
           "Python pattern: mark_paid with token 5 commits the UPDATE in BEGIN IMMEDIATE and fences "
           "invoice:7 at 5")
    con.execute("UPDATE invoices SET status = 'open', tok = 5 WHERE id = 7")
    env.update(token=4, hits=[])
    exec(instrument(catch), env)
    report(env["hits"] == [0] and not con.in_transaction
           and con.execute("SELECT status, tok FROM invoices WHERE id = 7").fetchone() == ("open", 5),
           "Python pattern: a stale token takes the 'lost the lock' branch, rolls back, writes nothing",
           env["hits"])
    # the missing-token branch
    env["hits"] = []
    exec(instrument(catch.replace("mark_paid(con, 7, token)",
                                  "con.execute(\"INSERT INTO invoices VALUES (8, 'open', NULL)\")")), env)
    report(env["hits"] == [1] and con.execute("SELECT count(*) FROM invoices").fetchone()[0] == 1,
           "Python pattern: a write without a token takes the 'bug' branch", env["hits"])
    # a UNIQUE violation is an IntegrityError too, and must not be taken for a refusal
    env["hits"] = []
    try:
        exec(instrument(catch.replace("mark_paid(con, 7, token)",
                                      "con.execute(\"INSERT INTO invoices VALUES (7, 'x', 9)\")")), env)
        report(False, "Python pattern: a UNIQUE violation is re-raised, not taken for a refusal")
    except sqlite3.IntegrityError:
        report(env["hits"] == [] and con.execute("SELECT fence_current('invoice:7')").fetchone()[0] == 5,
               "Python pattern: a UNIQUE violation is re-raised, not taken for a refusal")


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


def unloaded_connection(work):
    db = os.path.join(work, "unloaded.db")
    setup = sqlite3.connect(db, isolation_level=None)
    setup.enable_load_extension(True)
    setup.load_extension(EXT)
    setup.execute("CREATE TABLE counter (id integer PRIMARY KEY, n integer, tok bigint)")
    setup.execute("SELECT fence_protect('counter', 'tok', 'counter-lock')")
    setup.execute("INSERT INTO counter VALUES (1, 0, 33)")
    setup.close()
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
        quick_start(work)
        python_pattern(work)
        default_mode_pitfall(work)
        unloaded_connection(work)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
