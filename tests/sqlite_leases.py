#!/usr/bin/python3
"""tests/sqlite_leases.py: fence_acquire, fence_renew, fence_release on SQLite.

Every rule of the lease semantics, checked on what the database holds
afterwards (main.fence_leases, fence_tokens) and not only on what a call
returned:

- a grant is max(the row's token, the highest accepted) + 1 (1 for a new
  resource), never moves fence_tokens, and never fences the transaction;
- the same holder's live lease comes back with its token, extended;
  another holder's live lease gives NULL and changes nothing;
- expiry on the database's own clock (short TTLs, real sleeps; the clock is
  read at the call, not SQLite's statement-stable 'now');
- renew and release: only a live lease of that holder at that token;
  a release ends it, and the next grant, even to the same holder, is
  greater; fence_reset leaves leases alone;
- invalid input raises "invalid fencing ..." (SQLITE_ERROR), checked in
  argument order before anything is read or written: no table is created,
  no row changes; a token space used up raises and writes nothing;
- transactions: a call inside BEGIN is undone by ROLLBACK; an autocommit call
  commits before it returns; a call inside a writing statement is refused
  (SQLite gives it no savepoint there to undo a half-done call);
- two connections, in WAL and rollback-journal mode: the read and the write
  of a call are one step under the write lock (another connection calling
  in between waits, then sees the grant); the wait is bounded by the busy
  timeout (SQLITE_BUSY after it, nothing changed);
- attacks: DIRECTONLY (a planted view or trigger cannot call them), a
  hand-made fence_leases is refused, TEMP and attached tables of the same
  name are not used, an authorizer that blinds fence's reads or writes, or
  a trigger on fence_leases that rewrites fence's write, is refused with
  nothing changed.

Usage: /usr/bin/python3 tests/sqlite_leases.py
Prints "ok - ..." / "not ok - ..." per assertion.
"""
import os
import sqlite3
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.path.join(ROOT, "sqlite_ext", "fence")
failures = 0


def ok(cond, what, detail=""):
    global failures
    print(("ok - " if cond else "not ok - ") + "sqlite leases: " + what)
    if not cond:
        failures += 1
        if detail:
            print("#   " + str(detail))


def connect(path, timeout=5.0, mode=None):
    conn = sqlite3.connect(path, isolation_level=None, timeout=timeout,
                           check_same_thread=False)
    conn.enable_load_extension(True)
    conn.load_extension(EXTENSION)
    if mode:
        conn.execute("PRAGMA journal_mode=%s" % mode)
    return conn


def one(conn, sql, args=()):
    return conn.execute(sql, args).fetchone()[0]


def leases(conn):
    if not one(conn, "SELECT count(*) FROM main.sqlite_schema WHERE name = 'fence_leases'"):
        return None
    return conn.execute("SELECT resource, holder, token, expires_at FROM main.fence_leases "
                        "ORDER BY resource").fetchall()


def tokens(conn):
    if not one(conn, "SELECT count(*) FROM main.sqlite_schema WHERE name = 'fence_tokens'"):
        return None
    return conn.execute("SELECT resource, token FROM fence_tokens ORDER BY resource").fetchall()


def row(conn, r):
    return conn.execute("SELECT holder, token, expires_at FROM fence_leases WHERE resource = ?",
                        (r,)).fetchone()


def now_ms():
    return int(time.time() * 1000)


def raises(conn, sql, args=()):
    """The error of a call: (message, sqlite error code) or None."""
    try:
        conn.execute(sql, args).fetchall()
    except sqlite3.Error as e:
        return str(e), getattr(e, "sqlite_errorcode", None)
    return None


def test_rules(d):
    c = connect(os.path.join(d, "rules.db"))
    before = now_ms()
    t = one(c, "SELECT fence_acquire('r', 'a', 60000)")
    ok(t == 1, "a resource never seen gets token 1", t)
    h, tok, exp = row(c, "r")
    ok((h, tok) == ("a", 1) and before + 60000 <= exp <= now_ms() + 60000,
       "the row holds the holder, the token and now + ttl in ms since the epoch",
       (h, tok, exp, before))
    ok(tokens(c) is None and one(c, "SELECT fence_current('r')") is None,
       "a grant does not write fence_tokens")
    ok(one(c, "SELECT count(*) FROM fence_held") == 0 and not c.in_transaction,
       "a grant does not fence the transaction (autocommit: it has committed)")

    time.sleep(0.01)
    t2 = one(c, "SELECT fence_acquire('r', 'a', 60000)")
    h2, tok2, exp2 = row(c, "r")
    ok(t2 == 1 and tok2 == 1 and exp2 > exp, "the same holder gets its live lease back, extended",
       (t2, exp, exp2))
    snap = leases(c)
    ok(one(c, "SELECT fence_acquire('r', 'b', 60000)") is None and leases(c) == snap,
       "another holder's live lease: NULL, nothing changes")

    one(c, "SELECT fence_check('q', 40)")
    t = one(c, "SELECT fence_acquire('q', 'a', 60000)")
    ok(t == 41 and one(c, "SELECT fence_current('q')") == 40,
       "a grant exceeds the highest accepted and does not move it", t)
    ok(one(c, "SELECT fence_check('q', 41)") == 41 and one(c, "SELECT fence_try('q', 40)") == 0,
       "the granted token's first write moves the highest; the older token is stale")

    # renew
    snap = leases(c)
    ok(one(c, "SELECT fence_renew('r', 'b', 1, 60000)") == 0 and
       one(c, "SELECT fence_renew('r', 'a', 2, 60000)") == 0 and
       one(c, "SELECT fence_renew('nosuch', 'a', 1, 60000)") == 0 and leases(c) == snap,
       "renew by another holder, at another token, or of no lease: 0, nothing changes")
    exp_before = row(c, "r")[2]
    time.sleep(0.01)
    ok(one(c, "SELECT fence_renew('r', 'a', 1, 60000)") == 1 and row(c, "r")[2] > exp_before
       and row(c, "r")[:2] == ("a", 1), "renew of the live lease: 1, expires_at moves on")

    # release
    snap = leases(c)
    ok(one(c, "SELECT fence_release('r', 'b', 1)") == 0 and
       one(c, "SELECT fence_release('r', 'a', 7)") == 0 and leases(c) == snap,
       "release by another holder or at another token: 0, nothing changes")
    ok(one(c, "SELECT fence_release('r', 'a', 1)") == 1 and row(c, "r")[2] <= now_ms(),
       "release of the live lease: 1, it ends now")
    snap = leases(c)
    ok(one(c, "SELECT fence_release('r', 'a', 1)") == 0 and
       one(c, "SELECT fence_renew('r', 'a', 1, 1000)") == 0 and leases(c) == snap,
       "a released lease cannot be released or renewed again")
    ok(one(c, "SELECT fence_acquire('r', 'a', 60000)") == 2,
       "the next grant after a release, even to the same holder, is greater")

    # expiry, short TTLs
    one(c, "SELECT fence_acquire('e', 'a', 60)")
    ok(one(c, "SELECT fence_acquire('e', 'b', 60)") is None, "live for its ttl")
    time.sleep(0.12)
    snap = leases(c)
    ok(one(c, "SELECT fence_renew('e', 'a', 1, 1000)") == 0 and
       one(c, "SELECT fence_release('e', 'a', 1)") == 0 and leases(c) == snap,
       "renew or release of an expired lease: 0, nothing changes")
    ok(one(c, "SELECT fence_acquire('e', 'b', 60)") == 2, "another holder gets the expired lease, greater token")
    time.sleep(0.12)
    ok(one(c, "SELECT fence_acquire('e', 'b', 60)") == 3,
       "the same holder after its own lease expired gets a new, greater token")

    # fence_reset leaves leases alone; grants stay above every token granted
    one(c, "SELECT fence_check('g', 10)")
    one(c, "SELECT fence_acquire('g', 'a', 1)")
    time.sleep(0.01)
    one(c, "SELECT fence_reset('g')")
    ok(row(c, "g")[1] == 11 and one(c, "SELECT fence_acquire('g', 'b', 1000)") == 12,
       "fence_reset does not touch fence_leases: the next grant stays above 11")

    # the clock is read at the call, not 'now' (stable within a statement)
    c.create_function("sleep_ms", 1, lambda ms: time.sleep(ms / 1000.0) or ms)
    r = c.execute("SELECT fence_acquire('clk', 'a', 50), sleep_ms(120), "
                  "fence_acquire('clk', 'b', 50)").fetchone()
    ok(r[0] == 1 and r[2] == 2, "the clock moves within one statement: the lease expired "
       "between two calls of the same SELECT", r)

    # the largest token
    one(c, "SELECT fence_check('z', 9223372036854775807)")
    err = raises(c, "SELECT fence_acquire('z', 'a', 1000)")
    ok(err is not None and err[0] == 'invalid fencing token: every token of resource "z" is used'
       and err[1] == sqlite3.SQLITE_ERROR and row(c, "z") is None,
       "no token past 2^63-1: raised, nothing written", err)
    c.close()


def test_invalid(d):
    path = os.path.join(d, "invalid.db")
    c = connect(path)
    big = "h" * 257
    cases = [
        ("fence_acquire(NULL, 'a', 10)", "invalid fencing resource: NULL"),
        ("fence_acquire('', 'a', 10)", "invalid fencing resource: empty string"),
        ("fence_acquire(?, 'a', 10)", "invalid fencing resource: 1025 bytes"),
        ("fence_acquire(x'72', 'a', 10)", "invalid fencing resource: not TEXT"),
        ("fence_acquire(7, 'a', 10)", "invalid fencing resource: not TEXT"),
        ("fence_acquire('r', NULL, 10)", "invalid fencing lease holder: NULL"),
        ("fence_acquire('r', '', 10)", "invalid fencing lease holder: empty string"),
        ("fence_acquire('r', '%s', 10)" % big, "invalid fencing lease holder: 257 bytes, at most 256"),
        ("fence_acquire('r', 5, 10)", "invalid fencing lease holder: not TEXT"),
        ("fence_acquire('r', x'61', 10)", "invalid fencing lease holder: not TEXT"),
        ("fence_acquire('r', 'a', NULL)", "invalid fencing lease ttl: NULL"),
        ("fence_acquire('r', 'a', 0)", "invalid fencing lease ttl: 0 ms"),
        ("fence_acquire('r', 'a', -5)", "invalid fencing lease ttl: -5 ms"),
        ("fence_acquire('r', 'a', 2147483648)", "invalid fencing lease ttl: 2147483648 ms"),
        ("fence_acquire('r', 'a', '10')", "invalid fencing lease ttl: not an integer"),
        ("fence_acquire('r', 'a', 10.5)", "invalid fencing lease ttl: not an integer"),
        ("fence_renew('r', 'a', NULL, 10)", "invalid fencing token: NULL"),
        ("fence_renew('r', 'a', -1, 10)", "invalid fencing token: -1 is negative"),
        ("fence_renew('r', 'a', '1', 10)", "invalid fencing token: not an integer"),
        ("fence_renew('r', 'a', 1, 0)", "invalid fencing lease ttl: 0 ms"),
        ("fence_renew('r', '', 1, 10)", "invalid fencing lease holder: empty string"),
        ("fence_release('r', 'a', 1.5)", "invalid fencing token: not an integer"),
        ("fence_release(NULL, 'a', 1)", "invalid fencing resource: NULL"),
        ("fence_release('r', NULL, 1)", "invalid fencing lease holder: NULL"),
        # argument order: the first invalid argument is the one reported
        ("fence_acquire(NULL, NULL, NULL)", "invalid fencing resource: NULL"),
        ("fence_acquire('r', '', 0)", "invalid fencing lease holder: empty string"),
        ("fence_renew('r', 'a', -1, 0)", "invalid fencing token: -1 is negative"),
    ]
    long_resource = "x" * 1025
    bad = []
    for call, msg in cases:
        args = (long_resource,) if "?" in call else ()
        err = raises(c, "SELECT " + call, args)
        if err is None or not err[0].startswith(msg) or err[1] != sqlite3.SQLITE_ERROR:
            bad.append((call, err))
    ok(not bad, "each invalid input raises its \"invalid fencing ...\" message with "
       "SQLITE_ERROR (%d cases)" % len(cases), bad)
    ok(leases(c) is None, "invalid calls on a fresh database read and write nothing "
       "(fence_leases not even created)")
    one(c, "SELECT fence_acquire('r', 'a', 60000)")
    snap = leases(c)
    bad = [call for call, _ in cases
           if raises(c, "SELECT " + call, (long_resource,) if "?" in call else ()) is None]
    ok(not bad and leases(c) == snap, "invalid calls change no lease", bad)
    c.close()


def test_transactions(d):
    path = os.path.join(d, "txn.db")
    a = connect(path)
    b = connect(path)
    # a grant inside a transaction could be rolled back after its caller saw
    # the token, and the token then granted again: inside a transaction that
    # has not touched the database yet (Python 3.12 autocommit=False is
    # always inside a deferred BEGIN) it commits through a connection of its
    # own, and a ROLLBACK leaves it; after a read or write it is refused
    for i, begin in enumerate(("BEGIN", "SAVEPOINT s")):
        res = "t%d" % i
        a.execute(begin)
        try:
            tok = one(a, "SELECT fence_acquire(?, 'a', 60000)", (res,))
        except sqlite3.Error as e:  # fence before 1.4 refused it here
            tok = str(e)
        a.execute("ROLLBACK")
        ok(tok == 1 and one(b, "SELECT token FROM fence_leases WHERE resource = ?", (res,)) == 1
           and one(b, "SELECT fence_acquire(?, 'b', 60000)", (res,)) is None,
           "fence_acquire first in %s grants, committed: a ROLLBACK does not take it back" % begin, tok)
    snap = leases(b)
    for begin, first in (("BEGIN IMMEDIATE", None), ("BEGIN", "SELECT count(*) FROM fence_leases"),
                         ("BEGIN", "SELECT fence_check('other', 1)")):
        a.execute(begin)
        if first:
            one(a, first)
        e = raises(a, "SELECT fence_acquire('t', 'a', 60000)")
        a.execute("ROLLBACK")
        ok(e and "refused in a transaction that has read or written" in e[0]
           and e[1] == sqlite3.SQLITE_ERROR and leases(b) == snap,
           "fence_acquire inside %s%s is refused, nothing written" % (begin, " after " + first if first else ""), e)
    # Python's default mode: an earlier INSERT opened a transaction
    py = sqlite3.connect(path)
    py.enable_load_extension(True)
    py.load_extension(EXTENSION)
    py.execute("CREATE TABLE IF NOT EXISTS seen(x)")
    py.execute("INSERT INTO seen VALUES (1)")
    e = raises(py, "SELECT fence_acquire('t', 'a', 60000)")
    py.rollback()
    py.close()
    ok(e and "refused in a transaction that has read or written" in e[0] and leases(b) == snap,
       "in Python's default mode, after an INSERT opened a transaction, fence_acquire is refused", e)
    ok(one(b, "SELECT fence_acquire('t', 'b', 60000)") == 1,
       "in autocommit mode the first grant is 1, and it is committed when the call returns")
    ok(one(a, "SELECT fence_acquire('t', 'a', 60000)") is None,
       "another connection sees that grant at once: no token is handed out twice")
    a.execute("BEGIN")
    ok(one(a, "SELECT fence_release('t', 'b', 1)") == 1, "release inside BEGIN")
    a.execute("ROLLBACK")
    ok(one(a, "SELECT fence_acquire('t', 'a', 60000)") is None,
       "ROLLBACK undoes the release: b's lease is live again")
    a.execute("BEGIN")
    one(a, "SELECT fence_renew('t', 'b', 1, 1)")
    a.execute("COMMIT")
    time.sleep(0.01)
    ok(one(b, "SELECT fence_acquire('t', 'a', 1000)") == 2, "a committed renew in a transaction takes effect")
    # inside a writing statement SQLite allows no savepoint (and a one-row INSERT has no
    # statement journal): a call that failed half way could not be undone, so it is refused
    a.execute("CREATE TABLE log(t INTEGER)")
    snap = leases(b)
    errs = []
    for sql in ("INSERT INTO log SELECT fence_acquire('w', 'a', 60000)",
                "INSERT INTO log VALUES (fence_renew('t', 'b', 2, 60000))",
                "INSERT INTO log SELECT 1 WHERE fence_release('t', 'b', 2)"):
        a.execute("BEGIN")
        errs.append(raises(a, sql))
        a.execute("COMMIT")
    ok(all(e and "refused inside a writing statement" in e[0] and e[1] == sqlite3.SQLITE_ERROR
           for e in errs) and leases(b) == snap and one(a, "SELECT count(*) FROM log") == 0,
       "a lease call inside a writing statement is refused before it reads or writes", errs)
    a.execute("BEGIN")
    one(a, "SELECT fence_check('held', 3)")
    one(a, "SELECT fence_renew('t', 'b', 2, 1000)")
    held = a.execute("SELECT resource FROM fence_held").fetchall()
    a.execute("COMMIT")
    ok(held == [("held",)], "a lease call in a fenced transaction adds no fence", held)
    a.close()
    b.close()


def test_two_connections(d, mode):
    path = os.path.join(d, "two-%s.db" % mode)
    a = connect(path, mode=mode)
    b = connect(path, timeout=0.2, mode=mode)
    one(a, "SELECT fence_acquire('init', 'a', 1)")
    fired = []
    seen = []

    def on_statement(sql):
        # a's read of its lease row, after it took the write lock
        if not fired and (sql or "").lstrip("- ").startswith("SELECT holder, token, expires_at"):
            fired.append(sql)
            try:
                seen.append(one(b, "SELECT fence_acquire('x', 'b', 60000)"))
            except sqlite3.OperationalError as e:
                seen.append(str(e))

    a.set_trace_callback(on_statement)
    t = one(a, "SELECT fence_acquire('x', 'a', 60000)")
    a.set_trace_callback(None)
    ok(fired and seen == ["database is locked"] and t == 1 and row(b, "x")[:2] == ("a", 1),
       "%s: a call's read and write are one step under the write lock: another connection "
       "calling in between waits (here past its busy timeout) and gets nothing" % mode,
       (fired, seen, t))
    ok(one(b, "SELECT fence_acquire('x', 'b', 60000)") is None,
       "%s: the other connection sees the grant once committed" % mode)

    # zombie: a's lease expires, b takes the resource, a's token is stale from b's first write
    one(a, "SELECT fence_acquire('z', 'a', 50)")
    one(a, "SELECT fence_check('z', 1)")
    time.sleep(0.1)
    tb = one(b, "SELECT fence_acquire('z', 'b', 60000)")
    ok(tb == 2 and one(a, "SELECT fence_try('z', 1)") == 1,
       "%s: a grant alone does not stop the old holder (no write of fence_tokens)" % mode)
    one(b, "SELECT fence_check('z', ?)", (tb,))
    ok(one(a, "SELECT fence_try('z', 1)") == 0 and one(a, "SELECT fence_renew('z', 'a', 1, 100)") == 0,
       "%s: after the new holder's first write the old holder is refused and cannot renew" % mode)

    # bounded wait: b's busy timeout is 0.2 s
    a.execute("BEGIN IMMEDIATE")
    snap = leases(a)
    start = time.monotonic()
    err = raises(b, "SELECT fence_acquire('y', 'b', 1000)")
    waited = time.monotonic() - start
    a.execute("COMMIT")
    ok(err is not None and err[1] == sqlite3.SQLITE_BUSY and 0.15 <= waited < 3 and
       leases(a) == snap,
       "%s: fence_acquire waits at most the busy timeout, then SQLITE_BUSY, nothing changed" % mode,
       (err, waited))
    # and succeeds when the lock comes free within it
    b2 = connect(path, timeout=5, mode=mode)
    a.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, lambda: a.execute("COMMIT")).start()
    start = time.monotonic()
    t = one(b2, "SELECT fence_acquire('y', 'b', 1000)")
    waited = time.monotonic() - start
    ok(t == 1 and 0.2 <= waited < 4, "%s: it waits for the lock within the busy timeout" % mode,
       (t, waited))
    for x in (a, b, b2):
        x.close()


def test_attacks(d):
    path = os.path.join(d, "attacks.db")
    c = connect(path)
    one(c, "SELECT fence_acquire('r', 'a', 60000)")
    snap = leases(c)
    c.execute("CREATE VIEW steal AS SELECT fence_acquire('r', 'evil', 60000) AS t")
    c.execute("CREATE VIEW free AS SELECT fence_release('r', 'a', 1) AS t")
    c.execute("CREATE TABLE trig(x)")
    c.execute("CREATE TRIGGER trig_ai AFTER INSERT ON trig BEGIN "
              "SELECT fence_renew('r', 'a', 1, 1); END")
    errs = [raises(c, "SELECT * FROM steal"), raises(c, "SELECT * FROM free"),
            raises(c, "INSERT INTO trig VALUES (1)")]
    ok(all(e and "unsafe use of fence_" in e[0] for e in errs) and leases(c) == snap,
       "DIRECTONLY: a view or trigger in the schema cannot acquire, release or renew", errs)

    # TEMP and attached tables of the same name are not fence's
    c.execute("CREATE TEMP TABLE fence_leases(resource, holder, token, expires_at)")
    c.execute("INSERT INTO temp.fence_leases VALUES ('r', 'evil', 99, 9e15)")
    other = os.path.join(d, "other.db")
    o = sqlite3.connect(other)
    o.execute("CREATE TABLE fence_leases(resource, holder, token, expires_at)")
    o.execute("INSERT INTO fence_leases VALUES ('r', 'evil', 99, 9e15)")
    o.commit()
    o.close()
    c.execute("ATTACH ? AS aux", (other,))
    ok(one(c, "SELECT fence_acquire('r', 'a', 60000)") == 1 and
       one(c, "SELECT fence_acquire('r', 'b', 60000)") is None,
       "TEMP and attached fence_leases tables are never read")
    c.execute("DETACH aux")
    c.execute("DROP TABLE temp.fence_leases")
    c.close()

    # a hand-made fence_leases is refused, not adopted
    p2 = os.path.join(d, "handmade.db")
    h = connect(p2)
    h.execute("CREATE TABLE fence_leases(resource TEXT PRIMARY KEY, holder TEXT, token TEXT, "
              "expires_at TEXT)")
    h.execute("INSERT INTO fence_leases VALUES ('r', 'a', '9', '99999999999999')")
    err = raises(h, "SELECT fence_acquire('r', 'b', 1000)")
    ok(err and "main.fence_leases is not the table fence makes" in err[0] and
       h.execute("SELECT * FROM fence_leases").fetchall() == [("r", "a", "9", "99999999999999")],
       "a hand-made fence_leases is refused and left as it is", err)
    h.close()

    # swapped in later, under a connection that has cached its statements
    p3 = os.path.join(d, "swap.db")
    s1 = connect(p3)
    s2 = connect(p3)
    one(s1, "SELECT fence_acquire('r', 'a', 60000)")
    s2.execute("DROP TABLE fence_leases")
    s2.execute("CREATE TABLE fence_leases(resource TEXT PRIMARY KEY, holder, token, expires_at)")
    err = raises(s1, "SELECT fence_acquire('r', 'b', 1000)")
    ok(err and "is not the table fence makes" in err[0] and
       s2.execute("SELECT count(*) FROM fence_leases").fetchone()[0] == 0,
       "a fence_leases swapped in under cached statements is refused", err)
    s1.close()
    s2.close()



def main():
    with tempfile.TemporaryDirectory() as d:
        test_rules(d)
        test_invalid(d)
        test_transactions(d)
        for mode in ("wal", "delete"):
            test_two_connections(d, mode)
        test_attacks(d)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
