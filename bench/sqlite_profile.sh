#!/usr/bin/env bash
# bench/sqlite_profile.sh: instructions per row of each SQLite cell of the
# benchmark, counted by callgrind (valgrind), for the variants of
# bench/sqlite_bench.c. Timings on a shared machine are noisy; instruction
# counts are not, and they show where a trigger-based guard's cost lies
# (BENCHMARKS.md, "Where the time goes in SQLite"). For the fenced variant it
# also gives the instructions per row spent inside fence's own functions
# (inclusive), which is the profile that explains a missed target. And for
# every variant, callgrind's simulation of the L1 caches (32 KiB each,
# instruction and data, 64-byte lines): misses per row. Where a cell runs
# fewer instructions than its baseline and still takes more time, they say
# why (a transaction that touches more distinct code waits for it). About
# four minutes at the default scale.
#
# Each count starts from a new directory: a database left there by an
# earlier count (the INSERT cells' rows, its WAL) changed a later cell's
# count by up to 1.6% (the floor, UPDATE at 1000 rows per transaction).
#
# Usage: bash bench/sqlite_profile.sh [--raw]
#   --raw    tab-separated lines for bench/report.py instead of the table:
#              sqliteir OP ROWS_PER_TXN VARIANT INSTRUCTIONS_PER_ROW
#              sqliteirfn OP ROWS_PER_TXN FUNCTION INSTRUCTIONS_PER_ROW
#              sqlitel1 OP ROWS_PER_TXN VARIANT I1_MISSES_PER_ROW D1_MISSES_PER_ROW
#   PROFILE_SCALE (default 0.2), PROFILE_CELLS, PROFILE_VARIANTS narrow it;
#   PROFILE_EXT counts another build's fence.so instead of this tree's
#   (bench/sqlite_before_after.sh).
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
raw=0
[ "${1:-}" = "--raw" ] && raw=1
scale=${PROFILE_SCALE:-0.2}
cells=${PROFILE_CELLS:-"update/1 update/1000 insert/1 insert/1000"}
variants=${PROFILE_VARIANTS:-"plain floor fenced sqltrig"}
# fence's functions worth naming in a profile (inclusive counts nest)
functions="fenceGuardWriteFunc fenceGuardFencedFunc fenceGuardReadyFunc fenceCheckFunc readHighestAt fenceHeldEnlist fenceGuardAdmit fenceSchemaCheck stepInt64 heldBegin heldCommit"
ext=${PROFILE_EXT:-}
if [ -z "$ext" ]; then
	make -s sqlite_ext/fence.so
	ext=$root/sqlite_ext/fence.so
fi
work=$(mktemp -d /tmp/fence-profile.XXXXXX)
trap 'rm -rf "$work"' EXIT
${CC:-cc} -O2 -g -o "$work/sqlite_bench" bench/sqlite_bench.c -lsqlite3
[ $raw = 1 ] || printf '%-8s %-7s %-9s %-16s %s\n' variant op rows/txn instructions/row \
	'L1 misses/row (instruction data)'
for cell in $cells; do
	op=${cell%/*}
	per=${cell#*/}
	for v in $variants; do
		rm -rf "$work/db"
		mkdir "$work/db"
		# only runCell is counted: setting up and warming the database is not
		valgrind --tool=callgrind --cache-sim=yes --toggle-collect=runCell \
			--callgrind-out-file="$work/cg.out" \
			"$work/sqlite_bench" "$ext" "$work/db" 1 "$scale" 0 "$v/$cell/" \
			>"$work/out.tsv" 2>/dev/null
		rows=$(awk -F'\t' '$1 == "sqlite" {print $6}' "$work/out.tsv" | head -1)
		# rows written by the cell, as sqlite_bench.c computes them
		n=$(awk -v s="$scale" -v p="$per" 'BEGIN { r = int((p == 1 ? 20000 : 100000) * s);
			r -= r % p; if (r < p) r = p; print r }')
		callgrind_annotate --show=Ir --inclusive=yes --threshold=100 "$work/cg.out" \
			>"$work/annotate.txt" 2>/dev/null
		ir=$(sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' "$work/annotate.txt" | head -1 | tr -d ,)
		# the totals line of the cache events: I1mr D1mr D1mw, each "N (P%)"
		read -r i1 d1r d1w < <(callgrind_annotate --show=I1mr,D1mr,D1mw "$work/cg.out" 2>/dev/null |
			grep 'PROGRAM TOTALS' | head -1 | sed 's/([^)]*)//g' | tr -d , | awk '{ print $1, $2, $3 }')
		[ -n "$rows" ] && [ -n "$ir" ] && [ -n "${d1w:-}" ] || { echo "no count for $v $cell" >&2; exit 1; }
		if [ $raw = 1 ]; then
			printf 'sqliteir\t%s\t%s\t%s\t%d\n' "$op" "$per" "$v" $((ir / n))
			printf 'sqlitel1\t%s\t%s\t%s\t%d\t%d\n' "$op" "$per" "$v" $((i1 / n)) $(((d1r + d1w) / n))
		else
			printf '%-8s %-7s %-9s %-16d %d %d\n' "$v" "$op" "$per" $((ir / n)) $((i1 / n)) \
				$(((d1r + d1w) / n))
		fi
		[ "$v" = fenced ] || continue
		for f in $functions; do
			# the function's summary lines ("N (P%)  file:function [object]"): the largest
			fir=$(grep -E "^ *[0-9,]+ \([ 0-9.]+%\) +[^ ]*:$f(\.[a-z0-9.]+)?( \[.*)?$" "$work/annotate.txt" |
				sed -n 's/^ *\([0-9,]*\) .*/\1/p' | tr -d , | sort -n | tail -1)
			[ -n "$fir" ] || continue
			if [ $raw = 1 ]; then
				printf 'sqliteirfn\t%s\t%s\t%s\t%d\n' "$op" "$per" "$f" $((fir / n))
			else
				printf '           %-28s %d\n' "$f" $((fir / n))
			fi
		done
	done
done
