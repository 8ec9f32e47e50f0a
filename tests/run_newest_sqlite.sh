#!/usr/bin/env bash
# tests/run_newest_sqlite.sh: the SQLite suites again, on the newest SQLite a
# registry package carries (3.53.2, built by tests/tools/newest_sqlite.sh and
# cached in build/), where make check's other steps run Debian's 3.40:
#
#   - the regression suite through tests/sqlite_runner.c linked to 3.53.2;
#   - every tests/sqlite_*.py with /usr/bin/python3, whose _sqlite3 then loads
#     the 3.53.2 libsqlite3.so.0 (LD_LIBRARY_PATH; checked by
#     sqlite3.sqlite_version) and whose `sqlite3` shell on PATH is linked to it.
#
# Every test line is prefixed "[SQLite 3.53.2]" so that it reads apart from
# the 3.40 run of the same test; a test file that dies without saying so
# counts as one failure.
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT" || exit 1

out=$(bash tests/tools/newest_sqlite.sh 2>&1)
status=$?
report $status "build SQLite 3.53.2 (library, test runner, shell) from the amalgamation in better-sqlite3@12.11.1"
if [ $status -ne 0 ]; then
	echo "$out" | tail -20 | sed 's/^/#   /'
	exit 1
fi
dir=$FENCE_ROOT/$(echo "$out" | tail -1)
tag="[SQLite 3.53.2]"

prefix() { sed -u "s/^\(not \)\{0,1\}ok - /&$tag /"; }

RUNNER=${dir#"$FENCE_ROOT"/}/fence_sqlite_runner LABEL=sqlite-3.53.2 bash tests/run_sqlite_regress.sh | prefix

export LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$dir:$PATH
v=$("$PYTHON" -c 'import sqlite3; print(sqlite3.sqlite_version)')
[ "$v" = 3.53.2 ]
report $? "$tag $PYTHON's sqlite3 module runs SQLite $v"
for t in tests/sqlite_*.py; do
	log=$(mktemp)
	t0=$(date +%s)
	"$PYTHON" "$t" > "$log" 2>&1
	status=$?
	prefix < "$log"
	if [ $status -ne 0 ] && ! grep -q '^not ok - ' "$log"; then
		report 1 "$tag $(basename "$t") (exit status $status)"
	fi
	echo "# time: $(($(date +%s) - t0)) s $(basename "$t")"
	rm -f "$log"
done
