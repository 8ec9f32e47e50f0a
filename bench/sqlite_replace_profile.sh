#!/usr/bin/env bash
# bench/sqlite_replace_profile.sh: instructions per row (callgrind) of a
# keyed table with one extra UNIQUE index under the two ways a guard can
# check the rows a REPLACE deletes (bench/sqlite_replace_bench.c): the
# look-ups, and the BEFORE DELETE guard with recursive_triggers (with and
# without a PRAGMA read per statement). docs/internals.md, "REPLACE".
# The look-ups are counted on the last build that had them (LOOKUPS_REV,
# default 5bb6d00, built in a scratch worktree), the rest on this tree's.
# Usage: bash bench/sqlite_replace_profile.sh   (about seven minutes)
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
make -s sqlite_ext/fence.so
ext=${PROFILE_EXT:-$root/sqlite_ext/fence.so}
variants=${PROFILE_VARIANTS:-"lookups delguard delpragma"}
work=$(mktemp -d /tmp/fence-replace.XXXXXX)
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/old" "${LOOKUPS_REV:-5bb6d00}" >/dev/null 2>&1
make -s -C "$work/old" sqlite_ext/fence.so >/dev/null
${CC:-cc} -O2 -g -o "$work/bench" bench/sqlite_replace_bench.c -lsqlite3
printf '%-8s %-9s' op rows/txn
for v in $variants; do printf ' %10s' "$v"; done
printf '\n'
for cell in insert/1 insert/1000 replace/1 replace/1000 update/1 update/1000; do
	op=${cell%/*}
	per=${cell#*/}
	n=$([ "$per" = 1 ] && echo 2000 || echo 10000)
	printf '%-8s %-9s' "$op" "$per"
	for v in $variants; do
		e=$ext
		[ "$v" = lookups ] && e=$work/old/sqlite_ext/fence.so
		valgrind --tool=callgrind --toggle-collect=runCell --callgrind-out-file="$work/cg.out" \
			"$work/bench" "$e" "$work/t.db" "$v" "$op" "$per" "$n" >/dev/null 2>&1
		ir=$(callgrind_annotate --show=Ir "$work/cg.out" 2>/dev/null |
			sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | head -1 | tr -d ,)
		printf ' %10d' $((ir / n))
	done
	printf '\n'
done
