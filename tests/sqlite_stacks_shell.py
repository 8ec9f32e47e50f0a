#!/usr/bin/python3
"""tests/sqlite_stacks_shell.py: fence from the sqlite3 shell, scripts on stdin.

The shell on PATH: Debian's 3.40 in make check's first run, a 3.53.2 build
in the run on the newest SQLite (tests/run_newest_sqlite.sh). A holder at
token 5 has written; a zombie at token 4 runs its script. Asserted on what
committed:

  - without -bail a shell script goes on after an error: the zombie's
    refused fence_check is followed by its UPDATE of an unprotected table
    and its COMMIT, and the write commits (pinned: why docs/stacks-sqlite.md
    says `sqlite3 -bail`);
  - with -bail (or .bail on in the script) the script stops at the
    refused check: nothing commits;
  - a protected table refuses the zombie's write in the statement itself,
    -bail or not;
  - the holder's script with `PRAGMA trusted_schema = ON` after `.load`
    commits; newer shells open every database with trusted_schema off,
    where fence's guard triggers may not call its functions (the write
    fails closed): printed, and asserted to commit nothing then.

Usage: /usr/bin/python3 tests/sqlite_stacks_shell.py
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stacklib import EXTENSION, Report, committed, connect, scratch, tokens  # noqa: E402

SHELL = shutil.which("sqlite3")
version = subprocess.run([SHELL, ":memory:", "SELECT sqlite_version()"], capture_output=True,
                         text=True).stdout.strip()
report = Report("stacks sqlite3 shell %s:" % version)


def fresh():
    path = os.path.join(scratch("shell"), "db")
    c = connect(path, isolation_level=None)
    c.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, who TEXT)")
    c.execute("CREATE TABLE counter(id INTEGER PRIMARY KEY, who TEXT, tok INTEGER)")
    c.execute("SELECT fence_protect('counter', 'tok', 'job')")
    c.execute("INSERT INTO notes VALUES (1, 'holder')")
    c.execute("INSERT INTO counter VALUES (1, 'holder', 5)")
    c.close()
    return path


def shell(path, script, *flags):
    """Run a script; the flag ".bail on" goes into the script, others on the command line."""
    head = ".load %s\n.timeout 5000\nPRAGMA trusted_schema = ON;\n" % EXTENSION
    if ".bail on" in flags:
        head = ".bail on\n" + head
    argv = [f for f in flags if f != ".bail on"]
    return subprocess.run([SHELL, *argv, path], input=head + script, capture_output=True, text=True)


ZOMBIE_UNPROTECTED = """BEGIN IMMEDIATE;
SELECT fence_check('job', 4);
UPDATE notes SET who = 'zombie' WHERE id = 1;
COMMIT;
"""


def main():
    path = fresh()
    r = shell(path, ZOMBIE_UNPROTECTED)
    report.ok("stale fencing token" in r.stderr and committed(path, "SELECT who FROM notes") == [("zombie",)],
              "without -bail, the zombie's script goes on past its refused fence_check and its UPDATE of "
              "an unprotected table commits (why the docs say sqlite3 -bail)",
              "stderr %r; notes %r" % (r.stderr, committed(path, "SELECT * FROM notes")))

    for bail in ("-bail", ".bail on"):
        path = fresh()
        r = shell(path, ZOMBIE_UNPROTECTED, bail)
        report.ok(r.returncode != 0 and "stale fencing token" in r.stderr
                  and committed(path, "SELECT who FROM notes") == [("holder",)],
                  "%s: the zombie's script stops at its refused fence_check, exit status %d; "
                  "nothing of it commits" % (bail, r.returncode),
                  "stderr %r; notes %r" % (r.stderr, committed(path, "SELECT * FROM notes")))

    for flags in ((), ("-bail",)):
        path = fresh()
        r = shell(path, "BEGIN IMMEDIATE;\nUPDATE counter SET who = 'zombie', tok = 4 WHERE id = 1;\nCOMMIT;\n",
                  *flags)
        report.ok("stale fencing token" in r.stderr
                  and committed(path, "SELECT who, tok FROM counter") == [("holder", 5)]
                  and tokens(path) == {"job": 5},
                  "a protected table%s: the zombie's UPDATE at 4 is refused in the statement; committed: "
                  "the holder's row, fence_tokens 5" % (" with -bail" if flags else ", no -bail"),
                  "stderr %r; counter %r" % (r.stderr, committed(path, "SELECT * FROM counter")))

    path = fresh()
    r = shell(path, "BEGIN IMMEDIATE;\nSELECT fence_check('job', 6);\n"
                    "UPDATE counter SET who = 'next holder', tok = 6 WHERE id = 1;\n"
                    "UPDATE notes SET who = 'next holder' WHERE id = 1;\nCOMMIT;\n", ".bail on")
    report.ok(r.returncode == 0
              and committed(path, "SELECT who, tok FROM counter") == [("next holder", 6)]
              and committed(path, "SELECT who FROM notes") == [("next holder",)]
              and tokens(path) == {"job": 6},
              "the next holder's script (.bail on, .load, .timeout, PRAGMA trusted_schema = ON, BEGIN IMMEDIATE, "
              "fence_check, writes, COMMIT) commits at 6",
              "status %d, stderr %r" % (r.returncode, r.stderr))

    path = fresh()
    r = subprocess.run([SHELL, "-bail", path], capture_output=True, text=True,
                       input=".load %s\nUPDATE counter SET who = 'next holder', tok = 6 WHERE id = 1;\n"
                       % EXTENSION)
    rows = committed(path, "SELECT who, tok FROM counter")
    if r.returncode == 0:
        print("#   this shell runs fence's guards without PRAGMA trusted_schema = ON")
    else:
        print("#   this shell opens databases with trusted_schema off: %s" % r.stderr.strip())
    report.ok((r.returncode == 0 and rows == [("next holder", 6)])
              or ("unsafe use of fence_guard" in r.stderr and rows == [("holder", 5)]),
              "without PRAGMA trusted_schema = ON: the write commits, or (newer shells) fails closed "
              "with 'unsafe use of fence_guard_...' and commits nothing",
              "status %d, stderr %r, counter %r" % (r.returncode, r.stderr, rows))
    return report.finish("sqlite_stacks_shell")


if __name__ == "__main__":
    sys.exit(main())
