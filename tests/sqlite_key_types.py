#!/usr/bin/python3
"""tests/sqlite_key_types.py: what a per-row key may be, and count_changes.

A per-row resource is the prefix followed by the key as text, a function
of the key's value alone (SPEC.md). SQLite's text of a REAL depends on the
library (15 significant digits in 3.40, 17 from 3.52) and, in 3.53, on the
connection (SQLITE_DBCONFIG_FP_DIGITS); a BLOB's text in a UTF-16 database
depends on whether it was just bound or read back. Either gave one row two
resources, under which a paused holder's write committed. So a key must be
an INTEGER or a TEXT value: REAL and BLOB keys are refused, as NULL is.

PRAGMA count_changes=ON makes every INSERT, UPDATE and DELETE return a row:
fence's own writes of fence_tokens must still be taken as done (they
failed with "another row available", and the failed call's advance stayed).

Each case asserts on what committed, read by a connection without fence.

Usage: /usr/bin/python3 tests/sqlite_key_types.py
"""
import atexit
import os
import shutil
import sys
import tempfile

import attacklib as lib
from attacklib import attempt, connect, script

check = lib.Checks("sqlite key types")
ok = check.ok
work = tempfile.mkdtemp(prefix="fence_key_types_")
atexit.register(shutil.rmtree, work, True)


def committed(path):
    c = connect(path, load=False)
    rows = c.execute("SELECT id, typeof(id), v, tok FROM item ORDER BY rowid").fetchall()
    tokens = dict(c.execute("SELECT resource, token FROM fence_tokens"))
    c.close()
    return rows, tokens


def fresh(name, encoding="UTF-8"):
    path = os.path.join(work, name + ".db")
    c = connect(path)
    c.executescript("""
        PRAGMA encoding = '%s';
        CREATE TABLE item(n INTEGER PRIMARY KEY, id INTEGER, k TEXT, v INTEGER, tok INTEGER);
        SELECT fence_protect('item', 'tok', 'item:', 'id');
        CREATE TABLE named(k TEXT PRIMARY KEY, v INTEGER, tok INTEGER);
        SELECT fence_protect('named', 'tok', 'named:', 'k');
        INSERT INTO item(n, id, v, tok) VALUES (1, 17, 0, 5);
    """ % encoding)
    c.close()
    return path


def key_types():
    # a REAL key in an INTEGER-affinity column (a fraction, or above 2^63:
    # what a JavaScript number can be) stays REAL
    for what, key in (("a fraction", 1.5), ("a REAL above 2^63", 1.2345678901234567e19)):
        path = fresh("real%d" % len(what))
        before = committed(path)
        c = connect(path)
        err = attempt(c, "INSERT INTO item(n, id, v, tok) VALUES (2, ?, 0, 5)", (key,))
        c.close()
        ok(err is not None and "key" in err and committed(path) == before,
           "INSERT of %s as the key is refused, nothing committed" % what, err)

    # a BLOB key (Python binds bytes as a BLOB) in a TEXT column, UTF-8 and UTF-16
    for encoding in ("UTF-8", "UTF-16le"):
        path = fresh("blob_" + encoding.replace("-", ""), encoding)
        c = connect(path)
        err = attempt(c, "INSERT INTO named VALUES (?, 0, 5)", (b"17",))
        rows = connect(path, load=False).execute("SELECT count(*) FROM named").fetchone()[0]
        c.close()
        ok(err is not None and "key" in err and rows == 0,
           "%s: INSERT of a BLOB key is refused, nothing committed" % encoding, err)

    # INTEGER and TEXT keys go on as before
    path = fresh("plain")
    c = connect(path)
    err = script(c, ["INSERT INTO item(n, id, v, tok) VALUES (2, 18, 0, 6)",
                     "INSERT INTO named VALUES ('a', 0, 6)",
                     "UPDATE item SET v = 1, tok = 6 WHERE id = 17"])
    c.close()
    rows, tokens = committed(path)
    ok(err is None and tokens == {"item:17": 6, "item:18": 6, "named:a": 6},
       "INTEGER and TEXT keys are written as before", "%r %r" % (err, tokens))


def count_changes():
    path = fresh("count_changes")
    c = connect(path)
    c.execute("PRAGMA count_changes = ON")
    err_check = attempt(c, "SELECT fence_check('lock', 20)")
    err_write = attempt(c, "UPDATE item SET v = 1, tok = 9 WHERE id = 17")
    err_acquire = attempt(c, "SELECT fence_acquire('lease', 'w1', 60000)")
    err_txn = script(c, ["BEGIN", "SELECT fence_check('lock', 21)",
                         "UPDATE item SET v = 2, tok = 10 WHERE id = 17", "COMMIT"], rollback=True)
    err_stale = attempt(c, "UPDATE item SET v = 3, tok = 8 WHERE id = 17")
    c.close()
    rows, tokens = committed(path)
    ok(err_check is None and err_write is None and err_acquire is None and err_txn is None,
       "count_changes=ON: advances by fence_check, a guarded write and fence_acquire succeed",
       "%r %r %r %r" % (err_check, err_write, err_acquire, err_txn))
    ok(err_stale is not None and rows[0][2:] == (2, 10) and tokens.get("lock") == 21 and
       tokens.get("item:17") == 10,
       "count_changes=ON: the advances committed, a stale write after them is refused",
       "stale: %r\nrows: %r\ntokens: %r" % (err_stale, rows, tokens))


def main():
    for part in (key_types, count_changes):
        try:
            part()
        except Exception as e:      # a crash is a failure, not a pass
            ok(False, "%s ran to its end" % part.__name__, repr(e))
    return check.status()


if __name__ == "__main__":
    sys.exit(main())
