#!/usr/bin/env bash
# bench/sqlite_before_after.sh: the fenced SQLite cells of `make bench`,
# measured for two builds of fence in one run, so that a change to the
# SQLite fence can be judged against the code before it.
#
#   OLD  a commit (default 84a780d, main before the fourth round of the
#        one-row work in BENCHMARKS.md)
#   NEW  this working tree's sqlite_ext/ and core/ (committed or not)
#
# Each build is made by its own tree's Makefile (OLD from `git archive`),
# so with the flags it had, and copied into a directory of its own (the
# file is fence.so in both, so that SQLite finds sqlite3_fence_init in
# each). The driver is this tree's bench/sqlite_bench.c, run with one cell
# and the fenced variant only. Two measurements:
#
# 1. Instructions and simulated L1 misses (instruction, data) per row,
#    counted by bench/sqlite_profile.sh (callgrind, scale 0.2, a new
#    directory per count): deterministic, which is why the verdict is taken
#    from them.
# 2. Rows per second: for every round and cell the two builds run back to
#    back in new directories, in an order that alternates between rounds,
#    so that drift falls on both alike, and in a heap layout that changes
#    between rounds. Printed: the median of the
#    per-round new/old ratios and their interquartile range, which is what
#    says whether a difference stands out of this machine's noise.
#
# Knobs: BA_OLD (commit), BA_ROUNDS (15; 0 for the counts alone), BA_SCALE
# (1.0 for the timed rounds), BA_CELLS (default "update/1 insert/1
# update/1000 insert/1000"). Prints a Markdown table; runs from anywhere.
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
old=${BA_OLD:-84a780d}
rounds=${BA_ROUNDS:-15}
scale=${BA_SCALE:-1.0}
cells=${BA_CELLS:-"update/1 insert/1 update/1000 insert/1000"}
work=$(mktemp -d /tmp/fence-sqlite-ba.XXXXXX)
trap 'rm -rf "$work"' EXIT

# build NAME TREE: $work/NAME/fence.so, made by TREE's Makefile
build() {
	mkdir -p "$work/$1"
	make -s -C "$2" sqlite_ext/fence.so >"$work/$1.log" 2>&1 ||
		{ echo "building $1 failed:" >&2; cat "$work/$1.log" >&2; exit 1; }
	cp "$2/sqlite_ext/fence.so" "$work/$1/fence.so"
}
mkdir -p "$work/old-tree"
git archive "$old" | tar -x -C "$work/old-tree"
build old "$work/old-tree"
build new "$root"
${CC:-cc} -O2 -g -o "$work/sqlite_bench" bench/sqlite_bench.c -lsqlite3

# count BUILD CELL: "instructions i1 d1" per row, by bench/sqlite_profile.sh
count() {
	PROFILE_EXT="$work/$1/fence.so" PROFILE_VARIANTS=fenced PROFILE_CELLS="$2" \
		bash "$root/bench/sqlite_profile.sh" --raw |
		awk -F'\t' '$1 == "sqliteir" { ir = $5 } $1 == "sqlitel1" { i1 = $5; d1 = $6 }
			END { print ir, i1, d1 }'
}

# rate BUILD CELL ROUND: rows per second of one timed run, in the round's
# heap layout (SQLITE_BENCH_HEAP_PAD, bench/sqlite_bench.c)
rate() {
	rm -rf "$work/db" && mkdir "$work/db"
	SQLITE_BENCH_HEAP_PAD=$((($3 - 1) * 1552 % 4096)) "$work/sqlite_bench" "$work/$1/fence.so" "$work/db" 1 "$scale" 0 "fenced/$2/" |
		awk -F'\t' '$1 == "sqlite" { print $6 }'
}

echo "### SQLite, fenced cells: $(git rev-parse --short "$old") (old) against this tree (new)"
echo
echo "Per row: instructions and callgrind's simulated L1 misses (instruction / data), scale 0.2;"
echo "timed: median of $rounds per-round new/old ratios of rows per second (interquartile range), scale $scale."
echo
echo "| cell | old | new | new/old instructions | timed new/old |"
echo "|---|---|---|---|---|"
for cell in $cells; do
	read -r oi o1 od < <(count old "$cell")
	read -r ni n1 nd < <(count new "$cell")
	timed="not run"
	if [ "$rounds" -gt 0 ]; then
		: >"$work/ratios"
		for r in $(seq "$rounds"); do
			if [ $((r % 2)) -eq 1 ]; then
				a=$(rate old "$cell" "$r"); b=$(rate new "$cell" "$r")
			else
				b=$(rate new "$cell" "$r"); a=$(rate old "$cell" "$r")
			fi
			awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f\n", b / a }' >>"$work/ratios"
		done
		timed=$(sort -n "$work/ratios" | awk '{ v[NR] = $1 } END {
			m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			printf "%.3f (%.3f-%.3f)", m, v[int((NR - 1) / 4) + 1], v[int(3 * (NR - 1) / 4) + 1] }')
	fi
	printf '| %s | %s (%s / %s) | %s (%s / %s) | %s | %s |\n' "$cell" "$oi" "$o1" "$od" \
		"$ni" "$n1" "$nd" "$(awk -v a="$oi" -v b="$ni" 'BEGIN { printf "%.3f", b / a }')" "$timed"
done
