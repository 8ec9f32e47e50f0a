#!/usr/bin/env bash
# Everything `make check` runs, in order. Each step prints "ok - NAME" or
# "not ok - NAME" lines; a step that dies without saying so counts as one
# failure. The last line is the count CI reads: "N passed, N failed".
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
log=$(mktemp)
trap 'rm -f "$log" "$log.times"' EXIT
# Each step's wall-clock seconds, printed as a summary before the count
# (the machine may be shared: compare shares, not totals).
: >"$log.times"
check_start=$(date +%s)

step() {	# step NAME COMMAND...: run it, echo and keep its report lines
	local name=$1
	shift
	# FENCE_STEPS=REGEX runs only the steps whose name matches (to time or
	# rerun a few; the count then covers those only)
	if [ -n "${FENCE_STEPS:-}" ] && ! [[ $name =~ $FENCE_STEPS ]]; then
		return 0
	fi
	echo "# $name"
	local t0=$(date +%s)
	"$@" 2>&1 | tee -a "$log.step" | grep -v '^ok - ' | grep -v '^not ok - ' | grep -v '^$' | sed 's/^/#   /' | tail -60
	local status=${PIPESTATUS[0]}
	grep -E '^(not )?ok - ' "$log.step" | tee -a "$log"
	if [ "$status" -ne 0 ] && ! grep -q '^not ok - ' "$log.step"; then
		echo "not ok - $name (exit status $status)" | tee -a "$log"
	fi
	rm -f "$log.step"
	printf '%5d s  %s\n' $(($(date +%s) - t0)) "$name" >>"$log.times"
}

build() {	# the builds, each a test: strict warnings are an error in CI
	make -s sqlite_ext/fence.so build/fence_sqlite_runner >/dev/null; report $? "build sqlite_ext/fence.so"
	make -s build/strict/fence.so >/dev/null; report $? "build with -Wall -Wextra -Werror"
	make -s build/asan/fence.so build/asan/fence_sqlite_runner build/asan/core_test \
		build/asan/fence_runtime >/dev/null
	report $? "build with AddressSanitizer and UBSan"
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# The newest SQLite and better-sqlite3 take a minute or two to build the first
# time (cached in build/ after that): start them now, in the background, so
# that they overlap the steps before the ones that use them.
(bash tests/tools/newest_sqlite.sh && bash tests/stacks/run_node.sh install) >/dev/null 2>&1 &
prefetch=$!

step "builds" build
step "core rules (ASan, UBSan)" build/asan/core_test
step "SQLite regression suite" bash tests/run_sqlite_regress.sh
step "SQLite regression suite under ASan and UBSan" \
	env RUNNER=build/asan/fence_sqlite_runner EXT=build/asan/fence.so LABEL=sqlite-asan \
	bash tests/run_sqlite_regress.sh
runtime() {	# tests/sqlite_runtime.c on a scratch directory (in memory when it can)
	local d
	d=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
	build/asan/fence_runtime "$FENCE_ROOT/build/asan/fence.so" "$d"
	local status=$?
	rm -rf "$d"
	return $status
}
step "SQLite allocation failures, loading twice, close_v2 (ASan, UBSan)" runtime
step "shared corpus on SQLite" "$PYTHON" tests/corpus_runner.py --engine sqlite
for t in tests/sqlite_*.py; do
	[ -e "$t" ] && step "$(basename "$t")" "$PYTHON" "$t"
done
wait "$prefetch"	# each step below builds what is missing itself, and says so if it cannot
step "SQLite 3.53.2 (the newest a registry package carries): regression suite, tests/sqlite_*.py" \
	bash tests/run_newest_sqlite.sh
step "Node 20 and better-sqlite3 12 (installed into build/node on first use)" bash tests/stacks/run_node.sh
if [ -x tests/fuzz/run.sh ]; then
	step "fuzzers, a short run (make fuzz runs longer)" bash tests/fuzz/run.sh 10
fi
step "packaging: licence, META.json, make install, make dist" bash tests/packaging.sh
step "PGXN: make dist, META.json's PostgreSQL versions, the zip builds and installs" bash tests/pgxn_dist.sh
step "npm package: pack, install beside better-sqlite3 12, a stale write refused" bash tests/npm_package.sh
step "Python wheel: build offline, pip install --no-index into a venv, load into sqlite3" bash tests/python_wheel.sh
demo_check() {	# make demo must keep telling its story: exit 0 only if both runs do
	"$PYTHON" demo/zombie_lease.py >/dev/null
	report $? "make demo: the zombie's write lands with the fence off and is refused with it on, also under the database's own lease"
}
step "demo" demo_check
if [ -x tests/lockservice/run.sh ]; then
	step "fence behind etcd: workers paused past their lease" bash tests/lockservice/run.sh
fi
if [ -x tests/ha/run.sh ]; then
	step "fence on a Patroni cluster: partition, switchover, kill -9, SIGSTOP, asynchronous loss" bash tests/ha/run.sh
fi
step "Debian packages: build, install, smoke-test the installed files" bash tests/deb_packages.sh
step "examples/, each against the real servers it needs" "$PYTHON" examples/run.py
if [ -x tests/run_pg.sh ]; then
	step "PostgreSQL suites" bash tests/run_pg.sh
fi
# the SQL edition on Debian's 15 and the newest major (make check-versions: 13 to 18)
if [ -x tests/run_versions.sh ]; then
	step "PostgreSQL suites, SQL edition, PostgreSQL 15 and 18" bash tests/run_versions.sh 15 18
fi

echo
echo "# time per step (wall clock, seconds; load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
sed 's/^/#   /' "$log.times"
echo "#   $(($(date +%s) - check_start)) s in all"
passed=$(grep -c '^ok - ' "$log")
failed=$(grep -c '^not ok - ' "$log")
echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
