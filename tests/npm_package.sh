#!/usr/bin/env bash
# tests/npm_package.sh: the npm package (packages/npm) as a Node user gets
# it: `npm pack` (whose prepack builds the extension from this tree with
# make), the tarball's contents, then the tarball installed into a scratch
# project with better-sqlite3 12 on this machine's Node (20), where
# tests/npm_smoke.js writes through a protected table and sees a stale
# token refused (README.md's better-sqlite3 block too, run as written), and
# tsc checks the package's types.
#
# The scratch project lives in build/npm-smoke and is kept: `npm install
# better-sqlite3@12` compiles it from source on Node 20 (about a minute and a
# half), so only the first run pays for it. Each run installs the freshly
# packed tarball into it. One "ok - " or "not ok - " line per check.
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
	report 1 "npm: node and npm are on PATH"
	exit 1
fi
work=$(mktemp -d /tmp/fence-npm.XXXXXX)
trap 'rm -rf "$work"' EXIT
npmi() { npm install --no-audit --no-fund --loglevel=error "$@"; }

# --- npm pack: builds prebuilds/linux-x64/fence.so from sqlite_ext/ and core/
ver=$(node -p 'require("./packages/npm/package.json").version')
( cd packages/npm && npm pack --pack-destination "$work" ) >"$work/pack.log" 2>&1
st=$?
tgz=$work/sqlite-fence-$ver.tgz
[ $st -eq 0 ] && [ -f "$tgz" ] || tail -20 "$work/pack.log"
[ $st -eq 0 ] && [ -f "$tgz" ]
report $? "npm: npm pack builds the extension and makes sqlite-fence-$ver.tgz (version = META.json's)"
[ -f "$tgz" ] || exit 1

tar -xzf "$tgz" -C "$work"
bad=0
for f in package.json index.js index.d.ts README.md LICENSE prebuilds/linux-x64/fence.so; do
	[ -f "$work/package/$f" ] || { echo "not in the tarball: $f"; bad=1; }
done
exports=$(nm -D --defined-only "$work/package/prebuilds/linux-x64/fence.so" 2>/dev/null |
	awk '$2 ~ /^[TDBRVW]$/ { print $3 }' | tr '\n' ' ')
[ "$exports" = "sqlite3_fence_init " ] || { echo "exports: $exports"; bad=1; }
report $bad "npm: the tarball holds the code, the types, the licence and prebuilds/linux-x64/fence.so (exporting sqlite3_fence_init only)"

# --- the scratch project: better-sqlite3 12 (compiled once, kept), typescript
proj=$FENCE_ROOT/build/npm-smoke
# tests/stacks/run_node.sh compiles better-sqlite3 12 into build/node first (in
# make check, in the background from the start): link that one rather than
# compile it a second time. npm runs a linked (file:) dependency's install
# script on every `npm install` in the project, which recompiled that
# better-sqlite3 in place each time (minutes, twice a run): with the link,
# installs here pass --ignore-scripts. Nothing is lost: sqlite-fence has no
# install script (its one script is prepack, run by npm pack above), and
# typescript and the @types package have none.
noscripts=""
if [ -e "$FENCE_ROOT/build/node/node_modules/better-sqlite3/build/Release/better_sqlite3.node" ]; then
	deps="file:../node/node_modules/better-sqlite3 typescript@5 @types/better-sqlite3@7"
	noscripts=--ignore-scripts
else
	deps="better-sqlite3@12 typescript@5 @types/better-sqlite3@7"
fi
mkdir -p "$proj"
if [ "$(cat "$proj/.deps" 2>/dev/null)" != "$deps" ] || [ ! -e "$proj/node_modules/better-sqlite3/build/Release/better_sqlite3.node" ]; then
	echo "installing $deps into $proj (better-sqlite3 compiles from source: about a minute and a half, once)"
	echo '{ "name": "fence-npm-smoke", "private": true, "version": "0.0.0" }' >"$proj/package.json"
	rm -rf "$proj/node_modules" "$proj/package-lock.json" "$proj/.deps"
	# shellcheck disable=SC2086
	( cd "$proj" && npmi $noscripts $deps ) >"$work/deps.log" 2>&1 && echo "$deps" >"$proj/.deps"
	st=$?
	[ $st -ne 0 ] && tail -20 "$work/deps.log"
	report $st "npm: the scratch project gets better-sqlite3 12 (from source on Node $(node --version)) and typescript"
fi
rm -rf "$proj/node_modules/sqlite-fence"
( cd "$proj" && npmi $noscripts --no-save "$tgz" ) >"$work/install.log" 2>&1
st=$?
[ $st -ne 0 ] && tail -20 "$work/install.log"
report $st "npm: npm install of the packed tarball into a project with better-sqlite3 $(node -p "require('$proj/node_modules/better-sqlite3/package.json').version" 2>/dev/null)"

# --- the write, end to end
cp tests/npm_smoke.js "$proj/smoke.js"
( cd "$proj" && FENCE_README="$FENCE_ROOT/README.md" node smoke.js )
smoke=$?	# a crash before its first line must not pass unseen

# --- the types, as a TypeScript user meets them
cp tests/npm_typecheck.ts "$proj/typecheck.ts"
( cd "$proj" && node_modules/.bin/tsc --noEmit --strict --esModuleInterop --module commonjs \
	--moduleResolution node --types node typecheck.ts ) >"$work/tsc.log" 2>&1
st=$?
[ $st -ne 0 ] && cat "$work/tsc.log"
report $st "npm: index.d.ts type-checks (tsc --strict) against better-sqlite3's own types"
exit $(( smoke || st ))
