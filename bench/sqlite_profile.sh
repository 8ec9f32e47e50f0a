#!/usr/bin/env bash
# bench/sqlite_profile.sh: instructions per row of each SQLite cell of the
# benchmark, counted by callgrind (valgrind), for the variants of
# bench/sqlite_bench.c. Timings on a shared machine are noisy; instruction
# counts are not, and they show where a trigger-based guard's cost lies
# (BENCHMARKS.md, "SQLite: where the time goes"). About two minutes.
#
# Usage: bash bench/sqlite_profile.sh
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
make -s sqlite_ext/fence.so
work=$(mktemp -d /tmp/fence-profile.XXXXXX)
trap 'rm -rf "$work"' EXIT
${CC:-cc} -O2 -g -o "$work/sqlite_bench" bench/sqlite_bench.c -lsqlite3
printf '%-8s %-7s %-9s %s\n' variant op rows/txn instructions/row
for cell in update/1 update/1000 insert/1 insert/1000; do
	op=${cell%/*}
	per=${cell#*/}
	for v in plain floor fenced sqltrig; do
		valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
			"$work/sqlite_bench" "$root/sqlite_ext/fence.so" "$work" 1 0.2 0 "$v/$cell/" \
			>"$work/out.tsv" 2>/dev/null
		rows=$(awk -F'\t' '$1 == "sqlite" {print $6}' "$work/out.tsv" | head -1)
		# rows written by the cell: the bench's row count at scale 0.2
		n=$(( per == 1 ? 4000 : 20000 ))
		ir=$(callgrind_annotate --inclusive=yes "$work/cg.out" 2>/dev/null |
			sed -n 's/^ *\([0-9,]*\) ([ 0-9.]*%) *[^ ]*:runCell .*/\1/p' | head -1 | tr -d ,)
		[ -n "$rows" ] && [ -n "$ir" ] || { echo "no count for $v $cell" >&2; exit 1; }
		printf '%-8s %-7s %-9s %d\n' "$v" "$op" "$per" $((ir / n))
	done
done
