#!/usr/bin/env bash
# tests/stacks/run_node.sh: fence from Node 20 with better-sqlite3 12
# (tests/stacks/better_sqlite3.js). Installs better-sqlite3 into build/node on
# first use (npm compiles it and its SQLite 3.53.2 from source: one to two
# minutes) and keeps it there, so later runs start at once. With the argument
# "install" it installs and stops there (examples/run.py, and tests/run_all.sh
# early in the background).
set -u
. "$(dirname "$0")/../lib.sh"
cd "$FENCE_ROOT" || exit 1
PKG=better-sqlite3@12.11.1
NODE_DIR=build/node

major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ]; then
	report 1 "stacks node: Node 20 or later is installed (found: $(node --version 2>&1))"
	exit 1
fi
installed=$(node -p "require('./$NODE_DIR/node_modules/better-sqlite3/package.json').version" 2>/dev/null)
if [ "$installed" != "${PKG#*@}" ] || [ ! -e "$NODE_DIR/node_modules/better-sqlite3/build/Release/better_sqlite3.node" ]; then
	rm -rf "$NODE_DIR"
	mkdir -p "$NODE_DIR"
	log=$(mktemp)
	start=$(date +%s)
	(cd "$NODE_DIR" && npm install --no-audit --no-fund --no-save --prefix . "$PKG") >"$log" 2>&1
	status=$?
	report $status "stacks node: npm install $PKG into $NODE_DIR ($(($(date +%s) - start)) s, cached for later runs)"
	[ $status -eq 0 ] || { tail -20 "$log" | sed 's/^/#   /'; rm -f "$log"; exit 1; }
	rm -f "$log"
fi
[ "${1:-}" = install ] && exit 0	# examples/run.py, tests/run_all.sh: install only
make -s sqlite_ext/fence.so || exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
NODE_PATH=$FENCE_ROOT/$NODE_DIR/node_modules node tests/stacks/better_sqlite3.js \
	"$FENCE_ROOT/sqlite_ext/fence" "$work" || status=1
# REPLACE and upserts on a per-row table, recursive_triggers on and off
NODE_PATH=$FENCE_ROOT/$NODE_DIR/node_modules node tests/stacks/better_sqlite3_replace.js \
	"$FENCE_ROOT/sqlite_ext/fence" "$work/replace" || status=1
exit $status
