#!/usr/bin/python3
"""tests/sqlite_autocommit_race.py: a higher token committed between fence_check's read and write.

An autocommit `SELECT fence_check(r, t)` holds no transaction of its own
(the SELECT reads no table), so the extension's read of the highest token
and its write of the new one are two short transactions, and another
connection can commit a higher token in between. The write is an upsert
that only ever raises the token, so the table stays right, but the call
must then answer "stale", not "accepted".

The test makes the race happen every time: a trace callback on connection
A fires as A's write statement starts (after its read has finished), and
there connection B advances the resource past A's token. Checked, for
fence_check and fence_try, with a first fence and with an advance:
A's call reports stale (IntegrityError / 0), the table keeps B's token, and
A holds nothing afterwards.

Usage: /usr/bin/python3 tests/sqlite_autocommit_race.py
Prints "ok - ..." / "not ok - ..." per assertion.
"""
import os
import sqlite3
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.path.join(ROOT, "sqlite_ext", "fence")
failures = 0


def ok(cond, what, detail=""):
    global failures
    print(("ok - " if cond else "not ok - ") + "sqlite autocommit race: " + what)
    if not cond:
        failures += 1
        if detail:
            print("#   " + detail)


def connect(path):
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    conn.enable_load_extension(True)
    conn.load_extension(EXTENSION)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def race(path, resource, start, a_token, b_token, call):
    """A presents a_token; B commits b_token as A's write begins."""
    a, b = connect(path), connect(path)
    if start is not None:
        b.execute("SELECT fence_check(?, ?)", (resource, start))
    fired = []

    def on_statement(sql):
        # the extension's write to fence_tokens, after its read
        if not fired and "INSERT INTO main.fence_tokens" in (sql or ""):
            fired.append(sql)
            b.execute("SELECT fence_check(?, ?)", (resource, b_token))

    a.set_trace_callback(on_statement)
    try:
        outcome = a.execute("SELECT %s(?, ?)" % call, (resource, a_token)).fetchone()[0]
    except sqlite3.IntegrityError as e:
        outcome = str(e)
    a.set_trace_callback(None)
    highest = b.execute("SELECT fence_current(?)", (resource,)).fetchone()[0]
    held = a.execute("SELECT count(*) FROM fence_held").fetchone()[0]
    a.close()
    b.close()
    return bool(fired), outcome, highest, held


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "race.db")
        cases = [
            ("a first fence", None, 7, 8),
            ("an advance", 5, 7, 8),
        ]
        for label, start, a_token, b_token in cases:
            for call in ("fence_check", "fence_try"):
                resource = "race:%s:%s" % (call, label)
                fired, outcome, highest, held = race(path, resource, start, a_token, b_token, call)
                ok(fired, "%s, %s: B committed %d between A's read and write" % (call, label, b_token))
                if call == "fence_check":
                    good = isinstance(outcome, str) and "stale fencing token" in outcome
                else:
                    good = outcome == 0
                ok(good, "%s, %s: A's token %d is reported stale" % (call, label, a_token),
                   "A got %r" % (outcome,))
                ok(highest == b_token, "%s, %s: the highest stays %d" % (call, label, b_token),
                   "fence_current = %r" % (highest,))
                ok(held == 0, "%s, %s: A holds no fence afterwards" % (call, label),
                   "fence_held rows: %r" % (held,))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
