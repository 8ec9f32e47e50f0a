#!/usr/bin/python3
"""tests/sqlite_messages.py: every SQLite error message of fence is short
(issue 27, "Errors"): at most LIMIT bytes with a 40-byte resource.

Two checks:

- from the sources: tests/tools/sqlite_messages.py lists every message
  fence's SQLite extension can produce (the format strings of the calls
  that build errors, the FENCE_*_MSG macros, the RAISE texts), each
  conversion expanded to a realistic value (a string 40 bytes, a 64-bit
  integer 19 digits); each must fit LIMIT, and each literal pasted into a
  message through %s (a fragment) the 40 bytes its %s is counted as. The
  list must hold the messages SPEC.md requires (stale, missing, invalid),
  so an extractor that found nothing fails too;
- through the extension: the stale and missing errors (the two a user
  sees most) and a sample of the others, raised with a 40-byte resource,
  19-digit tokens and 40-byte names, are measured as SQLite returns them;
  the stale one holds what SPEC.md "Errors" requires (the resource, the
  presented token and the highest accepted).

Usage: /usr/bin/python3 tests/sqlite_messages.py
"""
import os
import sqlite3
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from tap import Report  # noqa: E402
import sqlite_messages  # noqa: E402

EXTENSION = os.path.join(ROOT, "sqlite_ext", "fence")
LIMIT = 200
report = Report("sqlite messages:")


def from_sources():
    rows = sqlite_messages.collect(ROOT)
    msgs = [r for r in rows if r["kind"] == "message"]
    frags = [r for r in rows if r["kind"] == "fragment"]
    formats = " | ".join(r["format"] for r in msgs)
    report.ok(len(msgs) >= 50 and all(s in formats for s in (
        "stale fencing token", "fencing token required", "invalid fencing", "fence_protect: ",
        "fence guard refused: ", "fence not loaded: ")),
        "the sources hold at least 50 messages, the stale, missing and invalid ones among them "
        "(found %d)" % len(msgs))
    long_ = [r for r in msgs if r["bytes"] > LIMIT]
    report.ok(not long_, "every message is at most %d bytes with each string at 40 bytes "
              "(longest %d)" % (LIMIT, max(r["bytes"] for r in msgs)),
              "\n#   ".join("%d %s %s" % (r["bytes"], r["where"], r["format"]) for r in long_))
    wide = [r for r in frags if r["bytes"] > sqlite_messages.STRING_BYTES]
    report.ok(not wide, "every literal pasted into a message through %%s is at most %d bytes"
              % sqlite_messages.STRING_BYTES,
              "\n#   ".join("%d %s %s" % (r["bytes"], r["where"], r["format"]) for r in wide))


def connect(path):
    con = sqlite3.connect(path, isolation_level=None)
    con.enable_load_extension(True)
    con.load_extension(EXTENSION)
    return con


def error(con, sql, args=()):
    try:
        con.execute(sql, args).fetchall()
    except sqlite3.Error as e:
        return str(e)
    return None


def through_extension(work):
    res = "r" * 40                       # a 40-byte resource
    name = "t" * 40                      # 40-byte table and column names
    big, higher = 10 ** 18 + 1, 10 ** 18 + 2   # 19-digit tokens
    con = connect(os.path.join(work, "m.db"))
    con.execute('CREATE TABLE "%s" (id INTEGER PRIMARY KEY, v, "%s" INTEGER)' % (name, name))
    con.execute("SELECT fence_protect(?, ?, ?)", (name, name, res))
    con.execute("SELECT fence_check(?, ?)", (res, higher))
    seen = {}
    seen["stale, from fence_check"] = error(con, "SELECT fence_check(?, ?)", (res, big))
    seen["stale, from a guard"] = error(
        con, 'INSERT INTO "%s" VALUES (1, 0, ?)' % name, (big,))
    seen["missing: the token column is NULL"] = error(
        con, 'INSERT INTO "%s" VALUES (2, 0, NULL)' % name)
    con.execute('INSERT INTO "%s" VALUES (3, 0, ?)' % name, (higher,))
    seen["missing: no token accepted"] = error(con, 'UPDATE "%s" SET v = 1' % name)
    seen["invalid token"] = error(con, "SELECT fence_check(?, 'x')", (res,))
    seen["invalid resource"] = error(con, "SELECT fence_check(?, 1)", ("x" * 2000,))
    seen["negative token"] = error(con, "SELECT fence_check(?, ?)", (res, -big))
    con.execute('CREATE TABLE "%s2" (id INTEGER PRIMARY KEY, k TEXT COLLATE NOCASE, '
                '"%s" REAL)' % (name, name))
    seen["fence_protect, token affinity"] = error(
        con, "SELECT fence_protect(?, ?, ?)", (name + "2", name, res))
    seen["fence_protect, key collation"] = error(
        con, "SELECT fence_protect(?, NULL, ?, 'k')", (name + "2", res))
    seen["fence_protect, no such table"] = error(
        con, "SELECT fence_protect(?, NULL, ?)", (name + "x", res))
    con.execute("PRAGMA journal_mode = OFF")
    seen["guard, journal_mode=OFF"] = error(
        con, 'INSERT INTO "%s" VALUES (4, 0, ?)' % name, (higher,))
    con.close()

    missing = [k for k, v in seen.items() if v is None]
    report.ok(not missing, "each sampled refusal is raised", missing)
    for what, msg in seen.items():
        if msg is not None:
            report.ok(len(msg.encode()) <= LIMIT, "%s: %d bytes, at most %d"
                      % (what, len(msg.encode()), LIMIT), msg)
    stale = seen["stale, from fence_check"] or ""
    report.ok(stale.startswith("stale fencing token %d" % big) and '"%s"' % res in stale
              and str(higher) in stale,
              "the stale message holds 'stale fencing token', the resource, the presented "
              "token and the highest accepted (SPEC.md \"Errors\")", stale)
    report.ok((seen["missing: no token accepted"] or "").startswith(
        'fencing token required for resource "%s"' % res),
        "the missing message begins 'fencing token required for resource \"R\"'",
        seen["missing: no token accepted"])


def main():
    from_sources()
    with tempfile.TemporaryDirectory() as work:
        through_extension(work)
    return report.finish("sqlite_messages")


if __name__ == "__main__":
    sys.exit(main())
