#!/usr/bin/env bash
# Everything `make check` runs, in order. Each step prints "ok - NAME" or
# "not ok - NAME" lines; a step that dies without saying so counts as one
# failure. The last line is the count CI reads: "N passed, N failed".
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
# Scratch files (mktemp, Python's tempfile, etcd's and the examples' data)
# on tmpfs when it has room: the SQLite tests commit thousands of small
# transactions, and on a shared virtual disk their fsyncs were most of their
# time (sqlite_stats.py: 55 s on /tmp, 5 s on /dev/shm). What they assert
# does not depend on it: no test can observe durability across an OS crash,
# and SQLite's locks and WAL index work the same on tmpfs. The PostgreSQL
# clusters keep their own directories under /tmp (fsync=off).
if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')" -ge 2000000 ] 2>/dev/null &&
	scratch=$(mktemp -d -p /dev/shm fence-check.XXXXXX 2>/dev/null); then
	chmod 1777 "$scratch"	# like /tmp: the postgres user makes its files here too
	export TMPDIR=$scratch
else
	scratch=""
fi
log=$(mktemp)
bg_lane=$(mktemp)
trap 'rm -f "$log" "$log.times" "$bg_lane" "${newest_built:-}"; [ -n "$scratch" ] && rm -rf "$scratch"' EXIT
# Each step's wall-clock seconds, printed as a summary before the count
# (the machine may be shared: compare shares, not totals).
: >"$log.times"
check_start=$(date +%s)

selected() {	# FENCE_STEPS=REGEX runs only the steps whose name matches (to time or rerun a few)
	[ -z "${FENCE_STEPS:-}" ] || [[ $1 =~ $FENCE_STEPS ]]
}

tally() {	# tally NAME STATUS OUT: keep OUT's report lines; a failing step without one is a failure
	grep -E '^(not )?ok - ' "$3" | tee -a "$log"
	if [ "$2" -ne 0 ] && ! grep -q '^not ok - ' "$3"; then
		echo "not ok - $1 (exit status $2)" | tee -a "$log"
	fi
}

step() {	# step NAME COMMAND...: run it, echo and keep its report lines
	local name=$1
	shift
	selected "$name" || return 0
	echo "# $name"
	local t0
	t0=$(date +%s)
	"$@" 2>&1 | tee -a "$log.step" | grep -v '^ok - ' | grep -v '^not ok - ' | grep -v '^$' | sed 's/^/#   /' | tail -60
	local status=${PIPESTATUS[0]}
	tally "$name" "$status" "$log.step"
	rm -f "$log.step"
	printf '%5d s  %s\n' $(($(date +%s) - t0)) "$name" >>"$log.times"
}

# A step that is independent of the steps around it (no port, cluster or
# build/ file in common) can run in the background while they run:
# bg_step starts it, bg_join waits for it and then shows its lines as step
# would. Background steps take turns (one at a time: a lock), so that
# beside a foreground step that mostly waits on its servers at most two
# CPU-heavy things run on the two cores.
declare -A bg_pid=() bg_file=()
bg_step() {	# bg_step NAME COMMAND...
	local name=$1 f
	shift
	selected "$name" || return 0
	f=$(mktemp)
	(
		flock 8
		t0=$(date +%s)
		"$@" >"$f" 2>&1 8>&-
		st=$?
		echo "$(($(date +%s) - t0))" >"$f.secs"
		exit $st
	) 8>>"$bg_lane" &
	bg_pid[$name]=$!
	bg_file[$name]=$f
	echo "# $name: started in the background"
}
bg_join() {	# bg_join NAME
	local name=$1 f status
	[ -n "${bg_pid[$name]:-}" ] || return 0
	f=${bg_file[$name]}
	wait "${bg_pid[$name]}"
	status=$?
	echo "# $name (ran in the background)"
	grep -v '^ok - ' "$f" | grep -v '^not ok - ' | grep -v '^$' | sed 's/^/#   /' | tail -60
	tally "$name" "$status" "$f"
	printf '%5d s  %s (in the background)\n' "$(cat "$f.secs" 2>/dev/null || echo 0)" "$name" >>"$log.times"
	rm -f "$f" "$f.secs"
	unset "bg_pid[$name]"
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
# that they overlap the steps before the ones that use them. The SQLite
# build (seconds) is done first and says so in $newest_built: the 3.53.2
# rerun waits for that only, not for npm's compile of better-sqlite3.
newest_built=$(mktemp)
(bash tests/tools/newest_sqlite.sh && echo built >"$newest_built" && bash tests/stacks/run_node.sh install) >/dev/null 2>&1 &
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
step "shared corpus on SQLite" "$PYTHON" tests/corpus_runner.py --engine sqlite
for t in tests/sqlite_*.py; do
	[ -e "$t" ] && step "$(basename "$t")" "$PYTHON" "$t"
done
# each step below builds what is missing itself, and says so if it cannot
while [ ! -s "$newest_built" ] && kill -0 "$prefetch" 2>/dev/null; do sleep 1; done
# From here on, the long CPU-bound steps run in the background, one after the
# other (bg_step), beside the foreground steps: the allocation-failure test
# (one core, about 12,000 runs of a workload under ASan) and the fuzzers now,
# the PostgreSQL suites once the Debian-package test is done. What runs meanwhile in the
# foreground is light or mostly waits on servers (failovers, lease expiries).
bg_step "SQLite allocation failures, loading twice, close_v2 (ASan, UBSan)" runtime
if [ -x tests/fuzz/run.sh ]; then	# builds into build/fuzz, which nothing else uses
	bg_step "fuzzers, a short run (make fuzz runs longer)" bash tests/fuzz/run.sh 10
fi
step "SQLite 3.53.2 (the newest a registry package carries): regression suite, tests/sqlite_*.py" \
	bash tests/run_newest_sqlite.sh
step "packaging: licence, META.json, make install, make dist" bash tests/packaging.sh
step "PGXN: make dist, META.json's PostgreSQL versions, the zip builds and installs" bash tests/pgxn_dist.sh
wait "$prefetch"	# better-sqlite3 in build/node, for the two steps below
step "Node 20 and better-sqlite3 12 (installed into build/node on first use)" bash tests/stacks/run_node.sh
step "npm package: pack, install beside better-sqlite3 12, a stale write refused" bash tests/npm_package.sh
step "Python wheel: build offline, pip install --no-index into a venv, load into sqlite3" bash tests/python_wheel.sh
demo_check() {	# make demo must keep telling its story: exit 0 only if both runs do
	"$PYTHON" demo/zombie_lease.py >/dev/null
	report $? "make demo: the zombie's write lands with the fence off and is refused with it on, also under the database's own lease"
}
step "demo" demo_check
# The Debian-package test installs fence system-wide for a while (into
# PostgreSQL 15's own directories): the PostgreSQL suites start after it.
step "Debian packages: build, install, smoke-test the installed files" bash tests/deb_packages.sh
# The C extension built once here, so that the steps that install it into
# their own directories (tests/pg_cluster.sh, the lock-service and Patroni
# harnesses) find it up to date and never build it at the same time.
make -s -C pg_ext with_llvm=no >/dev/null 2>&1
# Each suite on clusters of its own (private socket directories), the SQL
# edition on Debian's 15 and the newest major (make check-versions: 13 to 18).
if [ -x tests/run_pg.sh ]; then
	bg_step "PostgreSQL suites" bash tests/run_pg.sh
fi
if [ -x tests/run_versions.sh ]; then
	bg_step "PostgreSQL suites, SQL edition, PostgreSQL 15 and 18" bash tests/run_versions.sh 15 18
fi
if [ -x tests/lockservice/run.sh ]; then
	step "fence behind etcd: workers paused past their lease" bash tests/lockservice/run.sh
fi
if [ -x tests/ha/run.sh ]; then
	step "fence on a Patroni cluster: partition, switchover, kill -9, SIGSTOP, asynchronous loss" bash tests/ha/run.sh
fi
step "examples/, each against the real servers it needs" "$PYTHON" examples/run.py
bg_join "SQLite allocation failures, loading twice, close_v2 (ASan, UBSan)"
bg_join "fuzzers, a short run (make fuzz runs longer)"
bg_join "PostgreSQL suites"
bg_join "PostgreSQL suites, SQL edition, PostgreSQL 15 and 18"

echo
echo "# time per step (wall clock, seconds; load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
sed 's/^/#   /' "$log.times"
echo "#   $(($(date +%s) - check_start)) s in all"
passed=$(grep -c '^ok - ' "$log")
failed=$(grep -c '^not ok - ' "$log")
echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
