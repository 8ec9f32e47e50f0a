#!/usr/bin/env bash
# The PostgreSQL suites on a throwaway cluster: pg_regress over sql/ and
# pg_isolation_regress over specs/ (expected output in expected/), the shared
# corpus (tests/corpus), then the Python tests that need this server
# (tests/pg_*.py). One "ok - " or
# "not ok - " line per test.
set -u
# C-only topics, not run against the SQL edition (docs/sql-edition.md): the
# upgrade path of the C extension's scripts, its token cache and its
# lock-table announcement of an escalation.
SQL_EDITION_SKIP='fence_upgrade|fence_cache_(rc|rr|ser)|fence_light_(rc|rr|ser)'
# and the SQL edition's own topic, not run against the C extension
C_EDITION_SKIP='fence_sql_edition'
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
# FENCE_EDITION=sql (tests/pg_cluster.sh): the same topics, specs and corpus
# against the SQL edition, which the cluster put into template1. The tests'
# "CREATE EXTENSION IF NOT EXISTS fence" becomes a comment (and its NOTICE
# goes) in copies of the inputs; the databases are made from template1
# (--use-existing). C-only topics are skipped (docs/sql-edition.md).
edition_label=""
use_existing=""
if [ "$FENCE_EDITION" = sql ]; then
	edition_label=" sql-edition pg$FENCE_PG_MAJOR"
	use_existing="--use-existing"
	"$PYTHON" "$FENCE_ROOT/tests/tools/sql_edition_inputs.py" "$PG_WORK/inputs" || report 1 "SQL edition inputs"
	for db in contrib_regression isolation_regression; do
		psql -X -q -d postgres -c "CREATE DATABASE $db" >/dev/null || report 1 "create $db"
	done
	chown -R postgres "$PG_WORK/inputs" 2>/dev/null
fi
# Each edition matches only its own expected outputs: NAME_1.out (and _2)
# are the SQL edition's (docs/sql-edition.md, "Differences"). The C edition
# runs without them, so that a change of the C edition toward the SQL
# edition's output fails; for the SQL edition NAME_1.out takes the place of
# NAME.out where it exists, so that it matches only its alternatives there.
for alt in "$PG_WORK"/inputs/expected/*_[0-9].out; do
	[ -e "$alt" ] || continue
	if [ "$FENCE_EDITION" = sql ]; then
		case $alt in *_1.out) cp "$alt" "${alt%_1.out}.out" ;; esac
	else
		rm -f "$alt"
	fi
done
RESULTS=$FENCE_ROOT/tests/results
[ "$FENCE_EDITION" = sql ] && RESULTS=$FENCE_ROOT/tests/results/sql-pg$FENCE_PG_MAJOR
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
if [ "$FENCE_EDITION" = sql ]; then
	tests=$(echo "$tests" | grep -v -x -E "$SQL_EDITION_SKIP")
else
	tests=$(echo "$tests" | grep -v -x -E "$C_EDITION_SKIP")
fi
if [ -n "$tests" ]; then
	as_postgres "$PGXS_DIR/test/regress/pg_regress" --inputdir="$PG_WORK/inputs" \
		--outputdir="$out/regress" --bindir="$PG_CLIENT_BINDIR" --host="$PGHOST" --port="$PGPORT" \
		--user=postgres --dbname=contrib_regression $use_existing $tests > "$out/regress.log" 2>&1
	cp "$out/regress.log" "$RESULTS/pg_regress.log"
	tap_from_pg_regress "pg regress$edition_label" "$out/regress.log" $tests
	grep -q "tests passed" "$out/regress.log" || grep -q "failed" "$out/regress.log" ||
		{ report 1 "pg_regress ran"; cat "$out/regress.log"; }
	rm -rf "$RESULTS/pg_regress"; cp -r "$out/regress/results" "$RESULTS/pg_regress" 2>/dev/null
	cp "$out/regress/regression.diffs" "$RESULTS/pg_regression.diffs" 2>/dev/null &&
		head -80 "$RESULTS/pg_regression.diffs" | sed 's/^/#   /'
fi

specs=$(ls specs/*.spec 2>/dev/null | xargs -n1 basename 2>/dev/null | sed 's/\.spec$//')
[ "$FENCE_EDITION" = sql ] && specs=$(echo "$specs" | grep -v -x -E "$SQL_EDITION_SKIP")
if [ -n "$specs" ]; then
	as_postgres "$PGXS_DIR/test/isolation/pg_isolation_regress" --inputdir="$PG_WORK/inputs" \
		--outputdir="$out/isolation" --bindir="$PG_CLIENT_BINDIR" --host="$PGHOST" --port="$PGPORT" \
		--user=postgres --dbname=isolation_regression $use_existing $specs > "$out/isolation.log" 2>&1
	cp "$out/isolation.log" "$RESULTS/pg_isolation.log"
	tap_from_pg_regress "pg isolation$edition_label" "$out/isolation.log" $specs
	rm -rf "$RESULTS/pg_isolation"; cp -r "$out/isolation/results" "$RESULTS/pg_isolation" 2>/dev/null
	cp "$out/isolation/regression.diffs" "$RESULTS/pg_isolation.diffs" 2>/dev/null &&
		head -80 "$RESULTS/pg_isolation.diffs" | sed 's/^/#   /'
fi

# the shared corpus, on this engine
"$PYTHON" tests/corpus_runner.py --engine pg

[ "$using_running" -eq 1 ] && exit 0
# the SQL edition's pg_tle form, as CREATE EXTENSION runs it (Debian's
# server only: it has extension_destdir)
[ "$FENCE_EDITION" = sql ] && [ "$FENCE_PG_MAJOR" = 15 ] && bash tests/tools/sql_edition_tle_check.sh
# run_reported SCRIPT [VAR=VALUE...]: a Python test run in $PG_WORK with
# those variables; an exit that reported no failure of its own counts as one
run_reported() {
	local script=$1 out status
	shift
	out=$(mktemp)
	(cd "$PG_WORK" && env "$@" "$PYTHON" "$FENCE_ROOT/$script") 2>&1 | tee "$out"
	status=${PIPESTATUS[0]}
	if [ "$status" -ne 0 ] && ! grep -q '^not ok - ' "$out"; then
		echo "not ok - $(basename "$script") (pg$FENCE_PG_MAJOR) exited with status $status before reporting a failure"
	fi
	rm -f "$out"
}
if [ "$FENCE_EDITION" = sql ]; then
	# the invariant under eight racing connections, on every major
	run_reported tests/tools/sql_edition_race.py
	# an acknowledged advance survives a crash whatever synchronous_commit
	# the transaction set after it (docs/sql-edition.md, row 21); restarts
	# this cluster
	run_reported tests/tools/sql_edition_sync_commit.py PG_BINDIR="$PG_BINDIR"
	# connections of one holder advancing to one new token at once (the C
	# edition runs it with the other tests/pg_*.py below)
	run_reported tests/pg_same_token_advance.py
fi
# the Python tests exercise the C edition's internals and its library
[ "$FENCE_EDITION" = sql ] && exit 0
# From a directory the postgres user can enter: the checkout may be one it
# cannot (root's clone in /root, a mktemp -d), and the tools these tests run
# as postgres (pg_dump, pg_restore, pg_ctl) warn from such a cwd.
# A script that dies (a traceback, a crashed server) before saying "not ok"
# must still count as a failure: its exit status is reported too.
for t in tests/pg_*.py; do
	[ -e "$t" ] || continue
	out=$(mktemp)
	t0=$(date +%s)
	(cd "$PG_WORK" && "$PYTHON" "$FENCE_ROOT/$t") 2>&1 | tee "$out"
	status=${PIPESTATUS[0]}
	if [ "$status" -ne 0 ] && ! grep -q '^not ok - ' "$out"; then
		echo "not ok - $(basename "$t") exited with status $status before reporting a failure"
	fi
	echo "# time: $(($(date +%s) - t0)) s $(basename "$t")"
	rm -f "$out"
done
exit 0
