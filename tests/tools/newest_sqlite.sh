#!/usr/bin/env bash
# tests/tools/newest_sqlite.sh: build the newest SQLite that a registry
# package carries as source, for make check to run fence against it as well
# as against Debian's 3.40. Prints the directory it built into.
#
#   build/sqlite-3.53.2/libsqlite3.so.0      the library (soname libsqlite3.so.0,
#                                            so that LD_LIBRARY_PATH=<dir> makes
#                                            /usr/bin/python3's _sqlite3 use it)
#   build/sqlite-3.53.2/fence_sqlite_runner  tests/sqlite_runner.c linked to it
#   build/sqlite-3.53.2/sqlite3              a shell linked to it
#
# Where the source comes from (npm is the one registry with SQLite source):
#   - the SQLite 3.53.2 amalgamation (sqlite3.c, sqlite3.h, sqlite3ext.h) from
#     package/deps/sqlite3/ of better-sqlite3@12.11.1, the version better-sqlite3
#     12 ships and so the one Node applications run;
#   - the shell's source, shell.c, from the SQLite 3.52.0 autoconf tarball inside
#     sqlite3@6.0.1 (no package carries 3.53.2's shell.c). It is compiled
#     against the 3.53.2 header, so it passes the shell's own header/library
#     check, and every statement runs in the 3.53.2 library: only the shell's
#     dot-commands are 3.52.0's.
#
# The library gets Debian 12's compile-time options (`PRAGMA compile_options`
# of /usr/bin/sqlite3), so that what differs from the 3.40 run of the same
# suites is the version, not the options; the Node test (tests/stacks/) runs
# better-sqlite3's own build with its own options. -O0 keeps the build at
# about 10 s (-O1 takes 20 to 35 s here, and the suites run no faster with
# it: they wait on locks and sleeps, not on SQLite's CPU); everything is
# cached in build/ and rebuilt only when this script changes or a file is
# missing. It needs no fence build, so make check starts it early, in the
# background (tests/run_all.sh).
set -eu
. "$(dirname "$0")/../lib.sh"
cd "$FENCE_ROOT"

VERSION=3.53.2
AMALGAMATION_PKG=better-sqlite3@12.11.1
SHELL_PKG=sqlite3@6.0.1
SHELL_TARBALL=package/deps/sqlite-autoconf-3520000.tar.gz
OUT=build/sqlite-$VERSION
SRC=$OUT/src
OPTS="-DSQLITE_ENABLE_COLUMN_METADATA -DSQLITE_ENABLE_DBSTAT_VTAB -DSQLITE_ENABLE_FTS3
 -DSQLITE_ENABLE_FTS3_PARENTHESIS -DSQLITE_ENABLE_FTS3_TOKENIZER -DSQLITE_ENABLE_FTS4
 -DSQLITE_ENABLE_FTS5 -DSQLITE_ENABLE_MATH_FUNCTIONS -DSQLITE_ENABLE_PREUPDATE_HOOK
 -DSQLITE_ENABLE_RTREE -DSQLITE_ENABLE_SESSION -DSQLITE_ENABLE_STMTVTAB
 -DSQLITE_ENABLE_UNLOCK_NOTIFY -DSQLITE_ENABLE_UPDATE_DELETE_LIMIT
 -DSQLITE_SECURE_DELETE -DSQLITE_SOUNDEX -DSQLITE_USE_URI
 -DSQLITE_LIKE_DOESNT_MATCH_BLOBS -DSQLITE_MAX_VARIABLE_NUMBER=250000 -DSQLITE_TEMP_STORE=1
 -DSQLITE_OMIT_LOOKASIDE -DSQLITE_MAX_SCHEMA_RETRY=25 -DSQLITE_DEFAULT_AUTOVACUUM"

fresh() {	# fresh FILE: FILE exists and is newer than this script
	[ -s "$1" ] && [ "$1" -nt "$0" ]
}

mkdir -p "$SRC"
if ! fresh "$SRC/sqlite3.c" || ! fresh "$SRC/shell.c"; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$tmp" && npm pack --silent "$AMALGAMATION_PKG" "$SHELL_PKG" >/dev/null)
	tar -xzf "$tmp"/better-sqlite3-*.tgz -C "$tmp" package/deps/sqlite3
	cp "$tmp"/package/deps/sqlite3/sqlite3.[ch] "$tmp"/package/deps/sqlite3/sqlite3ext.h "$SRC"/
	tar -xzf "$tmp"/sqlite3-*.tgz -C "$tmp" "$SHELL_TARBALL"
	tar -xzf "$tmp/$SHELL_TARBALL" -C "$tmp" --wildcards '*/shell.c'
	cp "$tmp"/sqlite-autoconf-*/shell.c "$SRC"/
	grep -q "#define SQLITE_VERSION *\"$VERSION\"" "$SRC/sqlite3.h" || {
		echo "$AMALGAMATION_PKG does not carry SQLite $VERSION" >&2
		exit 1
	}
	touch "$SRC"/*
fi
if ! fresh "$OUT/libsqlite3.so.0" || [ "$SRC/sqlite3.c" -nt "$OUT/libsqlite3.so.0" ]; then
	# shellcheck disable=SC2086
	${CC:-cc} -O0 -fPIC -shared -Wl,-soname,libsqlite3.so.0 $OPTS -o "$OUT/libsqlite3.so.0.tmp" \
		"$SRC/sqlite3.c" -lpthread -lm
	mv "$OUT/libsqlite3.so.0.tmp" "$OUT/libsqlite3.so.0"
fi
link="-I$SRC -L$OUT -l:libsqlite3.so.0 -Wl,-rpath,\$ORIGIN"
if ! fresh "$OUT/fence_sqlite_runner" || [ tests/sqlite_runner.c -nt "$OUT/fence_sqlite_runner" ] \
	|| [ "$OUT/libsqlite3.so.0" -nt "$OUT/fence_sqlite_runner" ]; then
	# shellcheck disable=SC2086
	${CC:-cc} -O1 -Wall -Wextra -o "$OUT/fence_sqlite_runner" tests/sqlite_runner.c $link
fi
if ! fresh "$OUT/sqlite3" || [ "$OUT/libsqlite3.so.0" -nt "$OUT/sqlite3" ]; then
	# shellcheck disable=SC2086
	${CC:-cc} -O1 -o "$OUT/sqlite3" "$SRC/shell.c" $link -lm
fi

# what was built is what each consumer sees
ldd "$OUT/fence_sqlite_runner" | grep -q "libsqlite3.so.0 => .*/$OUT/libsqlite3.so.0 " || {
	echo "the runner is not linked to $OUT/libsqlite3.so.0" >&2
	exit 1
}
v=$("$OUT/sqlite3" :memory: "SELECT sqlite_version()")
[ "$v" = "$VERSION" ] || { echo "the shell reports SQLite $v, not $VERSION" >&2; exit 1; }
v=$(LD_LIBRARY_PATH="$FENCE_ROOT/$OUT" "$PYTHON" -c 'import sqlite3; print(sqlite3.sqlite_version)')
[ "$v" = "$VERSION" ] || { echo "$PYTHON's sqlite3 reports SQLite $v, not $VERSION" >&2; exit 1; }
echo "$OUT"
