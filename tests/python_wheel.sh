#!/usr/bin/env bash
# tests/python_wheel.sh: the Python wheel (packages/python) as a Python user
# gets it: built offline with Debian's python3-build, python3-setuptools and
# python3-wheel (no index, no isolated build environment), installed with
# `pip install --no-index` into a venv made from /usr/bin/python3 (whose
# sqlite3 loads extensions), then imported there: fence.load(conn) and a
# write through a protected table with BEGIN IMMEDIATE, a stale holder's
# refused. Asserts on what committed. One "ok - " or "not ok - " line per
# check.
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
work=$(mktemp -d /tmp/fence-whl.XXXXXX)
trap 'rm -rf "$work" "$FENCE_ROOT"/packages/python/build "$FENCE_ROOT"/packages/python/*.egg-info' EXIT

ver=$("$PYTHON" -c 'import json; print(json.load(open("META.json"))["version"])')
"$PYTHON" -m build --wheel --no-isolation --outdir "$work/dist" packages/python >"$work/build.log" 2>&1
st=$?
whl=$work/dist/sqlite_fence-$ver-py3-none-linux_x86_64.whl
[ $st -eq 0 ] && [ -f "$whl" ] || tail -20 "$work/build.log"
[ $st -eq 0 ] && [ -f "$whl" ]
report $? "python: python3 -m build --wheel --no-isolation makes sqlite_fence-$ver-py3-none-linux_x86_64.whl offline"
[ -f "$whl" ] || exit 1

"$PYTHON" - "$whl" <<'PYEOF'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
want = {"fence/__init__.py", "fence/fence.so", "fence/LICENSE"}
missing = want - names
print("missing from the wheel: %s" % sorted(missing) if missing else "", end="")
sys.exit(1 if missing else 0)
PYEOF
report $? "python: the wheel holds the module fence, fence/fence.so and the licence"

"$PYTHON" -m venv "$work/venv" >"$work/venv.log" 2>&1 &&
	"$work/venv/bin/pip" install --no-index --disable-pip-version-check -q "$whl" >"$work/pip.log" 2>&1
st=$?
[ $st -ne 0 ] && cat "$work/venv.log" "$work/pip.log"
report $st "python: pip install --no-index of the wheel into a venv made from $PYTHON"

cd "$work"	# not the repository: the module must come from the venv
"$work/venv/bin/python" - "$work/venv" "$FENCE_ROOT" <<'PYEOF'
import os, sqlite3, sys, tempfile
import fence

failed = 0
def report(ok, name, detail=""):
    global failed
    print("%s - python: %s" % ("ok" if ok else "not ok", name))
    if not ok:
        failed += 1
        print("#   %s" % detail)

path = fence.loadable_path()
report(path.startswith(sys.argv[1] + "/") and os.path.exists(path), "fence.loadable_path() names fence.so inside the venv", path)

d = tempfile.mkdtemp()
db = os.path.join(d, "app.db")
conn = sqlite3.connect(db, isolation_level=None)
fence.load(conn)
conn.execute("PRAGMA busy_timeout = 5000")
conn.execute("CREATE TABLE invoices (id integer PRIMARY KEY, status text, tok bigint)")
conn.execute("SELECT fence_protect('invoices', 'tok', 'invoices-lock')")
conn.execute("INSERT INTO invoices VALUES (7, 'open', 33)")

def mark_paid(conn, invoice_id, token):
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("UPDATE invoices SET status = 'paid', tok = ? WHERE id = ?", (token, invoice_id))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise

mark_paid(conn, 7, 34)
err = None
try:
    mark_paid(conn, 7, 33)
except sqlite3.IntegrityError as e:
    err = e
conn.close()
again = sqlite3.connect(db)
row = again.execute("SELECT status, tok FROM invoices WHERE id = 7").fetchone()
highest = again.execute("SELECT token FROM fence_tokens WHERE resource = 'invoices-lock'").fetchone()
report(err is not None and err.sqlite_errorcode == 1043 and str(err).startswith("stale fencing token 33")
       and row == ("paid", 34) and highest == (34,),
       "Debian's sqlite3 in the venv: fence.load(conn), a fenced write commits, the stale holder's is "
       "refused (1043); the table and fence_tokens keep 34", (err, row, highest))
# a connection without fence cannot write the protected table
try:
    again.execute("UPDATE invoices SET status = 'x', tok = 40")
    report(False, "a connection that did not call fence.load cannot write the protected table")
except sqlite3.OperationalError as e:
    report(str(e).startswith("no such function: fence_guard"),
           "a connection that did not call fence.load cannot write the protected table", e)

# the package's own README (what PyPI shows), its code block run as written
import re
readme = open(os.path.join(sys.argv[2], "packages", "python", "README.md")).read()
code = re.search(r"^```python\n(.*?)^```$", readme, re.M | re.S).group(1)
env = {}
try:
    exec(code.replace('"app.db"', repr(os.path.join(d, "pkg.db"))), env)
    ok = env["conn"].execute("SELECT count(*) FROM fence_guards").fetchone()[0] == 1
except Exception as e:
    ok, env = False, e
report(ok, "the wheel's README.md: its example runs as written and protects counter", env)
sys.exit(1 if failed else 0)
PYEOF
