#!/usr/bin/env bash
# The PostgreSQL suites on a throwaway cluster: pg_regress over sql/ and
# pg_isolation_regress over specs/ (expected output in expected/), the shared
# corpus (tests/corpus), then the Python tests that need this server
# (tests/pg_*.py). One "ok - " or
# "not ok - " line per test.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_cluster.sh"
cd "$FENCE_ROOT"
# --use-running: a caller (tests/pg_valgrind.sh) already started the server
# with pg_cluster_start and its own options; run the suites against it only.
if [ "${1:-}" = --use-running ]; then
	using_running=1
else
	using_running=0
	pg_cluster_start || { report 1 "start a PostgreSQL cluster"; exit 1; }
fi

PGXS_DIR=$(dirname "$(pg_config --pgxs)")/..
RESULTS=$FENCE_ROOT/tests/results
mkdir -p "$RESULTS"
out=$PG_WORK/out
mkdir -p "$out/regress" "$out/isolation"
chown -R postgres "$out" 2>/dev/null

# pg_regress in PostgreSQL 15 prints "test NAME ... ok" (or "     NAME ...").
tap_from_pg_regress() {	# LABEL LOG TEST...: one line per test; a test the log does not report failed
	local label=$1 log=$2 name status
	shift 2
	for name in "$@"; do
		status=$(sed -n -E "s/^(test )? *$name +\.\.\. +(ok|FAILED|failed).*/\2/p" "$log" | head -1)
		if [ "$status" = ok ]; then
			echo "ok - $label $name"
		elif [ -n "$status" ]; then
			echo "not ok - $label $name"
		else
			echo "not ok - $label $name (no result: missing expected output, or the run stopped)"
		fi
	done
}

tests=$(ls sql/*.sql 2>/dev/null | xargs -n1 basename 2>/dev/null | sed 's/\.sql$//')
if [ -n "$tests" ]; then
	as_postgres "$PGXS_DIR/test/regress/pg_regress" --inputdir="$PG_WORK/inputs" \
		--outputdir="$out/regress" --bindir="$PG_BINDIR" --host="$PGHOST" --port="$PGPORT" \
		--user=postgres --dbname=contrib_regression $tests > "$out/regress.log" 2>&1
	cp "$out/regress.log" "$RESULTS/pg_regress.log"
	tap_from_pg_regress "pg regress" "$out/regress.log" $tests
	grep -q "tests passed" "$out/regress.log" || grep -q "failed" "$out/regress.log" ||
		{ report 1 "pg_regress ran"; cat "$out/regress.log"; }
	rm -rf "$RESULTS/pg_regress"; cp -r "$out/regress/results" "$RESULTS/pg_regress" 2>/dev/null
	cp "$out/regress/regression.diffs" "$RESULTS/pg_regression.diffs" 2>/dev/null &&
		head -80 "$RESULTS/pg_regression.diffs" | sed 's/^/#   /'
fi

specs=$(ls specs/*.spec 2>/dev/null | xargs -n1 basename 2>/dev/null | sed 's/\.spec$//')
if [ -n "$specs" ]; then
	as_postgres "$PGXS_DIR/test/isolation/pg_isolation_regress" --inputdir="$PG_WORK/inputs" \
		--outputdir="$out/isolation" --bindir="$PG_BINDIR" --host="$PGHOST" --port="$PGPORT" \
		--user=postgres --dbname=isolation_regression $specs > "$out/isolation.log" 2>&1
	cp "$out/isolation.log" "$RESULTS/pg_isolation.log"
	tap_from_pg_regress "pg isolation" "$out/isolation.log" $specs
	rm -rf "$RESULTS/pg_isolation"; cp -r "$out/isolation/results" "$RESULTS/pg_isolation" 2>/dev/null
	cp "$out/isolation/regression.diffs" "$RESULTS/pg_isolation.diffs" 2>/dev/null &&
		head -80 "$RESULTS/pg_isolation.diffs" | sed 's/^/#   /'
fi

# the shared corpus, on this engine
"$PYTHON" tests/corpus_runner.py --engine pg

[ "$using_running" -eq 1 ] && exit 0
# From a directory the postgres user can enter: the checkout may be one it
# cannot (root's clone in /root, a mktemp -d), and the tools these tests run
# as postgres (pg_dump, pg_restore, pg_ctl) warn from such a cwd.
# A script that dies (a traceback, a crashed server) before saying "not ok"
# must still count as a failure: its exit status is reported too.
for t in tests/pg_*.py; do
	[ -e "$t" ] || continue
	out=$(mktemp)
	(cd "$PG_WORK" && "$PYTHON" "$FENCE_ROOT/$t") 2>&1 | tee "$out"
	status=${PIPESTATUS[0]}
	if [ "$status" -ne 0 ] && ! grep -q '^not ok - ' "$out"; then
		echo "not ok - $(basename "$t") exited with status $status before reporting a failure"
	fi
	rm -f "$out"
done
exit 0
