#!/usr/bin/env bash
# Run the SQLite regression suite: each tests/sqlite/sql/NAME.sql through
# the runner on a fresh database file, output diffed against
# tests/sqlite/expected/NAME.out. RUNNER and EXT choose the build (the
# sanitizer run sets both); LABEL prefixes the test names.
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
RUNNER=${RUNNER:-build/fence_sqlite_runner}
EXT=${EXT:-sqlite_ext/fence.so}
LABEL=${LABEL:-sqlite}
RESULTS=tests/results/$LABEL
mkdir -p "$RESULTS"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for sql in tests/sqlite/sql/*.sql; do
	name=$(basename "$sql" .sql)
	rm -f "$work"/db*
	out=$RESULTS/$name.out
	(cd "$work" && "$FENCE_ROOT/$RUNNER" "$FENCE_ROOT/$EXT" "$work/db" < "$FENCE_ROOT/$sql") > "$out" 2> "$RESULTS/$name.stderr"
	status=$?
	if [ $status -eq 0 ] && [ ! -s "$RESULTS/$name.stderr" ] && diff -u "tests/sqlite/expected/$name.out" "$out" > "$RESULTS/$name.diff"; then
		report 0 "$LABEL regress $name"
	else
		report 1 "$LABEL regress $name"
		head -40 "$RESULTS/$name.diff" "$RESULTS/$name.stderr" | sed 's/^/#   /'
	fi
done
