#!/usr/bin/python3
"""tests/sqlite_equal_accept.py: an equal accept takes no write lock (WAL and rollback journal).

SPEC: transactions fenced at the same token do not wait for each other. An
accept of the token that is already the highest writes nothing, so it must
not take the database's write lock: a second connection (or process) at the
same token, with no busy timeout at all, is fenced too, and an unrelated
writer is not blocked by it. And what the write lock used to give must
still hold: a transaction fenced at t whose snapshot a newer token overtook
cannot commit a write (a stale error or SQLITE_BUSY, SPEC "SQLite
specifics"), judged on what committed, not on the error.

Each case runs in journal_mode=WAL and journal_mode=DELETE, with
connections of this process and with separate processes. Each connection
has accepted the token once before, in autocommit (a holder writing again):
a connection's first accept of a resource takes the write lock first, as
an advance does, so that an advance waits its turn instead of failing
(docs/sqlite-guarantees.md).

Usage: /usr/bin/python3 tests/sqlite_equal_accept.py
Prints "ok - ..." / "not ok - ..." per assertion; exits 1 on a failure.
"""
import multiprocessing
import os
import shutil
import sqlite3
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION = os.environ.get("FENCE_EXTENSION", os.path.join(ROOT, "sqlite_ext", "fence"))
failures = 0
work = tempfile.mkdtemp(prefix="fence_equal_")


def ok(cond, what, detail=""):
    global failures
    print(("ok - " if cond else "not ok - ") + "sqlite equal accept: " + what)
    if not cond:
        failures += 1
        if detail:
            print("#   " + str(detail).replace("\n", "\n#   "))


def connect(path, timeout=0.0, seen=None):
    conn = sqlite3.connect(path, isolation_level=None, timeout=timeout)
    conn.enable_load_extension(True)
    conn.load_extension(EXTENSION)
    if seen is not None:
        conn.execute("SELECT fence_check('r', ?)", (seen,)).fetchall()   # autocommit
    return conn


def attempt(conn, sql):
    try:
        return None, conn.execute(sql).fetchall()
    except sqlite3.Error as e:
        return str(e), None


def fresh(mode):
    path = os.path.join(work, "eq_%s_%d.db" % (mode, len(os.listdir(work))))
    c = connect(path, 5)
    c.execute("PRAGMA journal_mode=%s" % mode).fetchall()
    c.executescript("""
        CREATE TABLE ledger(id INTEGER PRIMARY KEY, v INTEGER, tok INTEGER);
        SELECT fence_protect('ledger', 'tok', 'r');
        INSERT INTO ledger VALUES (1, 0, 5);
        CREATE TABLE other(x);
    """)
    c.close()
    return path


def committed(path):
    c = sqlite3.connect(path, isolation_level=None, timeout=5)
    rows = c.execute("SELECT id, v, tok FROM ledger ORDER BY id").fetchall()
    tokens = c.execute("SELECT resource, token FROM fence_tokens").fetchall()
    c.close()
    return rows, tokens


# ---------------------------------------------------------------------
# connections of one process
# ---------------------------------------------------------------------
def connections(mode):
    path = fresh(mode)
    a = connect(path, seen=5)
    b = connect(path, seen=5)
    w = connect(path)
    attempt(a, "BEGIN")
    err_a, _ = attempt(a, "SELECT fence_check('r', 5)")
    attempt(b, "BEGIN")
    err_b, _ = attempt(b, "SELECT fence_check('r', 5)")
    ok(err_a is None and err_b is None,
       "%s: two connections hold an equal accept at once, no busy timeout" % mode,
       "%r %r" % (err_a, err_b))
    err_t, _ = attempt(b, "SELECT fence_try('r', 5)")
    ok(err_t is None, "%s: fence_try at the same token too" % mode, err_t)
    # an unrelated writer takes the write lock while both hold their fences
    err_w, _ = attempt(w, "BEGIN IMMEDIATE")
    ok(err_w is None, "%s: a writer's BEGIN IMMEDIATE is not blocked by equal accepts" % mode, err_w)
    attempt(w, "ROLLBACK")
    held = a.execute("SELECT resource, token FROM fence_held").fetchall()
    ok(held == [("r", 5)], "%s: the equal accept is held by the transaction" % mode, held)
    # the first of them to write commits; the other cannot commit a write
    # after it (WAL: its snapshot is stale; rollback journal: a shared lock)
    err_aw, _ = attempt(a, "UPDATE ledger SET v = v + 1 WHERE id = 1")
    err_ac, _ = attempt(a, "COMMIT")
    if err_aw or err_ac:
        attempt(a, "ROLLBACK")
    err_bw, _ = attempt(b, "UPDATE ledger SET v = v + 10 WHERE id = 1")
    err_bc, _ = attempt(b, "COMMIT") if err_bw is None else (None, None)
    attempt(b, "ROLLBACK")
    rows, tokens = committed(path)
    wrote = [x for x in (None if (err_aw or err_ac) else 1, None if (err_bw or err_bc) else 10) if x]
    ok(rows == [(1, sum(wrote), 5)] and tokens == [("r", 5)] and len(wrote) >= 1,
       "%s: each write that committed is in the table exactly once, no lost update" % mode,
       "a: %r %r; b: %r %r; rows %r tokens %r" % (err_aw, err_ac, err_bw, err_bc, rows, tokens))
    for c in (a, b, w):
        c.close()

    # overtaken: fenced at 5 (no write lock), then 6 committed elsewhere
    path = fresh(mode)
    a = connect(path, seen=5)
    z = connect(path, 0.2)
    attempt(a, "BEGIN")
    err_a, _ = attempt(a, "SELECT fence_check('r', 5)")
    a.execute("SELECT v FROM ledger").fetchall()      # the zombie reads ...
    err_z, _ = attempt(z, "UPDATE ledger SET v = 100, tok = 6 WHERE id = 1")
    err_aw, _ = attempt(a, "UPDATE ledger SET v = v + 1 WHERE id = 1")   # ... then writes
    err_ac, _ = attempt(a, "COMMIT") if err_aw is None else (None, None)
    attempt(a, "ROLLBACK")
    rows, tokens = committed(path)
    if err_z is None:
        # the newer holder committed first: the zombie's write must not stay
        good = rows == [(1, 100, 6)] and tokens == [("r", 6)] and (err_aw or err_ac)
    else:
        # the newer holder could not commit (rollback journal: the shared
        # lock the zombie's read holds): the zombie's write may stand at 5
        good = tokens == [("r", 5)] and rows in ([(1, 1, 5)], [(1, 0, 5)])
    ok(good and err_a is None,
       "%s: a transaction fenced at an equal token, overtaken by a newer one, commits no write "
       "after it" % mode,
       "accept %r; newer %r; zombie write %r commit %r; rows %r tokens %r"
       % (err_a, err_z, err_aw, err_ac, rows, tokens))
    a.close()
    z.close()


# ---------------------------------------------------------------------
# separate processes
# ---------------------------------------------------------------------
def holder(path, ready, release, result):
    """BEGIN; fence_check('r', 5); tell the parent; wait; write; COMMIT."""
    try:
        c = connect(path, 5.0, seen=5)
        c.execute("BEGIN")
        c.execute("SELECT fence_check('r', 5)").fetchall()
        ready.set()
        release.wait(10)
        err, _ = attempt(c, "UPDATE ledger SET v = v + 1 WHERE id = 1")
        if err is None:
            err, _ = attempt(c, "COMMIT")
        attempt(c, "ROLLBACK")
        result.put(("holder", err))
        c.close()
    except Exception as e:  # reported, never hidden
        ready.set()
        result.put(("holder", "exception: %r" % e))


def processes(mode):
    path = fresh(mode)
    ctx = multiprocessing.get_context("fork")
    ready, release, result = ctx.Event(), ctx.Event(), ctx.Queue()
    c = connect(path, seen=5)
    p = ctx.Process(target=holder, args=(path, ready, release, result))
    p.start()
    ready.wait(10)
    attempt(c, "BEGIN")
    err_eq, _ = attempt(c, "SELECT fence_check('r', 5)")
    attempt(c, "ROLLBACK")
    ok(err_eq is None, "%s: another process accepts the same token while the first holds it, "
       "no busy timeout" % mode, err_eq)
    # a newer holder commits while the first process still holds 5
    z = connect(path, 0.2)
    err_new, _ = attempt(z, "UPDATE ledger SET v = 100, tok = 6 WHERE id = 1")
    z.close()
    release.set()
    _, err_old = result.get(timeout=20)
    p.join(10)
    rows, tokens = committed(path)
    if err_new is None:
        good = rows == [(1, 100, 6)] and tokens == [("r", 6)] and err_old is not None
    else:
        good = rows == [(1, 1, 5)] and tokens == [("r", 5)] and err_old is None
    ok(good, "%s: across processes the overtaken holder's write does not commit after the newer "
       "token" % mode, "newer %r; old holder %r; rows %r tokens %r" % (err_new, err_old, rows, tokens))


# ---------------------------------------------------------------------
# without temp.fence_enlist (fence loaded inside a transaction, or the
# table dropped) fence enlists through main, as before: slower, never wrong
# ---------------------------------------------------------------------
def fallback(mode):
    path = fresh(mode)
    c = sqlite3.connect(path, isolation_level=None, timeout=0)
    c.execute("BEGIN")
    c.enable_load_extension(True)
    c.load_extension(EXTENSION)
    errs = [attempt(c, sql)[0] for sql in ("SAVEPOINT s", "SELECT fence_check('r', 5)",
                                            "ROLLBACK TO s")]
    held = c.execute("SELECT * FROM fence_held").fetchall()
    err_w, _ = attempt(c, "UPDATE ledger SET v = 7 WHERE id = 1")
    attempt(c, "COMMIT")
    rows, _ = committed(path)
    ok(errs == [None, None, None] and held == [] and err_w is not None and rows == [(1, 0, 5)],
       "%s: loaded inside a transaction, ROLLBACK TO still undoes an accept; the unfenced "
       "UPDATE is refused" % mode, "%r %r %r %r" % (errs, held, err_w, rows))
    for drop in (False, True):
        if drop:
            c.close()
            c = connect(path)
            c.execute("DROP TABLE temp.fence_enlist")
        err1 = [attempt(c, sql)[0] for sql in ("BEGIN", "SELECT fence_check('r', 5)",
                                                "UPDATE ledger SET v = v + 1 WHERE id = 1",
                                                "COMMIT")]
        attempt(c, "BEGIN")
        held = c.execute("SELECT * FROM fence_held").fetchall()
        err2, _ = attempt(c, "UPDATE ledger SET v = 99 WHERE id = 1")
        attempt(c, "ROLLBACK")
        rows, _ = committed(path)
        ok(err1 == [None] * 4 and held == [] and err2 is not None and rows[0][1] in (1, 2),
           "%s: %s: a fenced write commits, the next transaction holds nothing and an unfenced "
           "UPDATE is refused" % (mode, "temp.fence_enlist dropped" if drop else "still so"),
           "%r %r %r %r" % (err1, held, err2, rows))
    c.close()


# ---------------------------------------------------------------------
# writes through an attached schema (found by an attack review)
# ---------------------------------------------------------------------
# B's busy timeout. While B runs, A only waits for it (proc.join) holding
# what it holds: no lock B meets is ever released before B gives up, so a
# longer timeout only waited (5 s, three times per journal mode, in DELETE
# mode where A's lock blocks B) and changed no outcome.
ADVANCE_BUSY_TIMEOUT = 1.0


def advance_elsewhere(path, token):
    """Another process: fence at token and write the main file."""
    b = connect(path, ADVANCE_BUSY_TIMEOUT)
    try:
        b.execute("BEGIN")
        b.execute("SELECT fence_check('r', ?)", (token,)).fetchall()
        b.execute("INSERT INTO log VALUES (?, 'B')", (token,))
        b.execute("COMMIT")
    except sqlite3.Error:
        pass
    b.close()


def attached(mode):
    """An attached schema has a pager of its own: a write there starts on the
    newest snapshot whatever main's. A transaction fenced at the highest (an
    equal accept) that writes through it must still not commit after a
    newer token committed: either its write or the newer one fails. SQLite
    lets ATTACH run inside a transaction too: after the equal accept, which
    took no write lock because nothing was attached yet."""
    for target, read_first, inside in (("self", False, False), ("other", False, False),
                                       ("other", True, False), ("self", False, True),
                                       ("other", False, True)):
        path = fresh(mode)
        aux = path + ".aux" if target == "other" else path
        for p in {path, aux}:
            c = sqlite3.connect(p, isolation_level=None)
            c.execute("PRAGMA journal_mode=%s" % mode).fetchall()
            c.execute("CREATE TABLE IF NOT EXISTS log(tok, who)")
            c.close()
        a = connect(path, seen=5)
        if not inside:
            a.execute("ATTACH ? AS aux", (aux,))
        a.execute("SELECT fence_check('r', 5)").fetchall()      # a has seen 5
        err_a = None
        try:
            a.execute("BEGIN")
            if read_first:
                a.execute("SELECT count(*) FROM main.ledger").fetchall()
            a.execute("SELECT fence_check('r', 5)").fetchall()  # equal accept
            if inside:
                a.execute("ATTACH ? AS aux", (aux,))
        except sqlite3.Error as e:
            err_a = str(e)
        proc = multiprocessing.get_context("fork").Process(target=advance_elsewhere,
                                                           args=(path, 6))
        proc.start()
        proc.join(30)
        if err_a is None:
            try:
                a.execute("INSERT INTO aux.log VALUES (5, 'A')")
                a.execute("COMMIT")
            except sqlite3.Error as e:
                err_a = str(e)
                try:
                    a.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
        a.close()
        c = sqlite3.connect(path, isolation_level=None, timeout=5)
        highest = c.execute("SELECT token FROM fence_tokens WHERE resource = 'r'").fetchone()[0]
        c.close()
        a_rows = sqlite3.connect(aux).execute("SELECT count(*) FROM log WHERE who = 'A'").fetchone()[0]
        # the invariant: A's write at 5 and B's advance to 6 did not both commit
        ok(not (a_rows and highest == 6),
           "%s: an equal accept then a write through an attached schema (%s file%s) does "
           "not commit after a newer token" % (mode, target, ", main read first" if read_first
                                               else ", attached inside the transaction after the "
                                               "accept" if inside else ""),
           "A wrote %d rows, highest %s, A's error %r" % (a_rows, highest, err_a))


def main():
    try:
        for mode in ("WAL", "DELETE"):
            for part in (connections, processes, fallback, attached):
                try:
                    part(mode)
                except Exception as e:
                    ok(False, "%s %s ran to the end" % (part.__name__, mode), repr(e))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
