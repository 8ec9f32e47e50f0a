#!/usr/bin/env bash
# make stress: the pg_regress and isolation suites once more, with the
# server (every backend) under valgrind memcheck. TOOLCHAIN.md: start
# postgres itself under valgrind --trace-children=yes, not through pg_ctl.
# Debian's server has no USE_VALGRIND, so palloc overruns stay unseen: that is
# why the core is plain C and runs under ASan in make check. Reports
# "ok - valgrind ..." when no memcheck error is left after
# tests/valgrind/postgres.supp; every error's log is kept in
# tests/results/valgrind/.
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
command -v valgrind >/dev/null || { report 1 "valgrind installed"; exit 0; }
. tests/pg_cluster.sh
# initdb and the DESTDIR install as usual, then restart under valgrind
pg_cluster_start || { report 1 "valgrind: start a cluster"; exit 0; }
as_postgres "$PG_BINDIR/pg_ctl" -D "$PG_WORK/data" -m fast -w stop >/dev/null
cp tests/valgrind/postgres.supp "$PG_WORK/"
mkdir -p "$PG_WORK/vg" && chown postgres "$PG_WORK/vg" "$PG_WORK/postgres.supp"
as_postgres valgrind --quiet --trace-children=yes --error-limit=no --num-callers=30 \
	--suppressions="$PG_WORK/postgres.supp" --log-file="$PG_WORK/vg/%p.log" \
	"$PG_BINDIR/postgres" -D "$PG_WORK/data" -k "$PG_WORK" -p "$PGPORT" \
	-c listen_addresses='' -c fsync=off -c extension_destdir="$PG_WORK/install" \
	-c max_prepared_transactions=4 -c track_commit_timestamp=on \
	>"$PG_WORK/server.log" 2>&1 &
vg_pid=$!
stop_valgrind() {
	# pg_ctl finds the postmaster by its pid file; runuser does not pass
	# signals on
	as_postgres "$PG_BINDIR/pg_ctl" -D "$PG_WORK/data" -m fast -w -t 120 stop >/dev/null 2>&1
	wait "$vg_pid" 2>/dev/null
	pg_cluster_stop
}
trap stop_valgrind EXIT
ready=1
for _ in $(seq 1 120); do
	"$PG_BINDIR/pg_isready" -q -h "$PG_WORK" -p "$PGPORT" && { ready=0; break; }
	kill -0 "$vg_pid" 2>/dev/null || break
	sleep 1
done
report $ready "valgrind: the server starts under valgrind"
[ $ready -eq 0 ] || { cat "$PG_WORK"/vg/*.log | head -20 | sed 's/^/#   /'; exit 0; }

bash tests/run_pg.sh --use-running > "$PG_WORK/suites.log" 2>&1
passed=$(grep -c '^ok - ' "$PG_WORK/suites.log")
failed=$(grep -c '^not ok - ' "$PG_WORK/suites.log")
echo "# valgrind: suites under valgrind: $passed passed, $failed failed"
grep '^not ok - ' "$PG_WORK/suites.log" | sed 's/^/#   /'
status=$(( failed > 0 || passed == 0 ))
as_postgres "$PG_BINDIR/pg_ctl" -D "$PG_WORK/data" -m fast -w -t 120 stop >/dev/null 2>&1
wait "$vg_pid" 2>/dev/null
RESULTS=tests/results/valgrind
rm -rf "$RESULTS" && mkdir -p "$RESULTS"
errors=0
for f in "$PG_WORK"/vg/*.log; do
	if grep -q "^==[0-9]*== [A-Z]" "$f"; then
		errors=$((errors + 1))
		cp "$f" "$RESULTS/"
	fi
done
echo "# valgrind: $(ls "$PG_WORK"/vg | wc -l) log files, $errors with memcheck errors (kept in $RESULTS)"
report $status "valgrind: pg_regress, isolation and corpus suites pass with the server under valgrind"
report $errors "valgrind: no memcheck error in any server process"
