#!/usr/bin/env bash
# tests/fuzz/run.sh SECONDS: build the two libFuzzer targets (fuzz_core over
# core/, fuzz_sqlite over the SQLite extension) into build/fuzz/ and run each
# for SECONDS/2 from a scratch copy of its seed corpus, so that the seeds in
# tests/fuzz/seeds/ never change under a run. Prints one line per target,
# "ok - fuzz core (N runs)" or "not ok - fuzz core ...", details on "# "
# lines, and keeps any crashing input under tests/results/fuzz/. Always exits
# 0: the caller counts the ok / not ok lines.
set -u

seconds=${1:-60}
case $seconds in
'' | *[!0-9]*) echo "usage: $0 SECONDS" >&2; exit 2 ;;
esac
half=$((seconds / 2))
[ "$half" -ge 1 ] || half=1

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 0
out=build/fuzz
results=tests/results/fuzz
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

CC=${FUZZ_CC:-clang}
CFLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
WARN="-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes"

# Leaks are bugs here too; abort_on_error lets libFuzzer save the input.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

build() {	# build NAME SOURCES... [-lLIB]: into $out/fuzz_NAME, log in $work
	local name=$1
	shift
	$CC $CFLAGS $WARN -o "$out/fuzz_$name" "$@" >"$work/build_$name.log" 2>&1
}

# fuzz NAME: run one target; prints its ok / not ok line
fuzz() {
	local name=$1 bin=$out/fuzz_$1 corpus=$work/corpus_$1 log=$work/run_$1.log
	local artifacts=$work/artifacts_$1/
	mkdir -p "$corpus" "$artifacts"
	cp tests/fuzz/seeds/"$name"/* "$corpus"/ 2>/dev/null
	# a subshell that is not just an exec: bash's "Aborted" notice lands in the log
	("$bin" -max_total_time="$half" -rss_limit_mb=2048 -max_len=4096 -timeout=10 \
		-print_final_stats=1 -artifact_prefix="$artifacts" "$corpus"
	exit $?) >"$log" 2>&1
	local status=$?
	local runs rate
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	local found
	found=$(ls "$artifacts" 2>/dev/null | head -1)
	if [ "$status" -eq 0 ] && [ -z "$found" ]; then
		echo "ok - fuzz $name (${runs:-?} runs)"
		echo "# fuzz $name: ${rate:-?} execs/s for ${half}s, corpus $(ls "$corpus" | wc -l) inputs"
		return
	fi
	local kept=""
	if [ -n "$found" ]; then
		mkdir -p "$results"
		kept=$results/${name}-$found
		cp "$artifacts/$found" "$kept"
	fi
	echo "not ok - fuzz $name (${kept:-exit status $status})"
	# the invariant or sanitizer report, then the top of its stack
	grep -E 'invariant broken|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY' \
		"$log" | head -8 | sed 's/^/# /'
	grep -E '^ +#[0-9]+ ' "$log" | grep -F -e "$root/tests/" -e "$root/sqlite_ext/" -e "$root/core/" \
		| head -12 | sed 's/^/# /'
	if [ -n "$kept" ]; then
		echo "# kept the input: $kept"
		echo "# reproduce: $bin $kept"
		[ "$name" = sqlite ] && echo "# with FUZZ_TRACE=1 it prints each statement the input runs"
	else
		tail -5 "$log" | sed 's/^/# /'
	fi
}

# every source of each part, so that a new file needs no change here
if build core tests/fuzz/fuzz_core.c core/*.c; then
	fuzz core
else
	echo "not ok - fuzz core (build failed)"
	sed 's/^/# /' "$work/build_core.log" | head -20
fi

if build sqlite tests/fuzz/fuzz_sqlite.c sqlite_ext/*.c core/*.c -lsqlite3; then
	fuzz sqlite
else
	echo "not ok - fuzz sqlite (build failed)"
	sed 's/^/# /' "$work/build_sqlite.log" | head -20
fi
exit 0
