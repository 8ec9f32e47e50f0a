#!/usr/bin/env bash
# tests/pgxn_dist.sh: what a PGXN user gets from `make dist`: the .zip PGXN
# takes, with META.json at its top, whose PostgreSQL prerequisite names the
# majors the C extension is built for (debian/pgversions) and nothing
# beyond; unpacked, it builds and installs the PostgreSQL extension the way
# `pgxn install` does (make, make install, with PG_CONFIG), into a DESTDIR.
# One "ok - " or "not ok - " line per check.
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
work=$(mktemp -d /tmp/fence-pgxn.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$PYTHON" - <<'EOF2'
import json, re, sys
m = json.load(open("META.json"))
req = m["prereqs"]["runtime"]["requires"]["PostgreSQL"]
built = sorted(int(v) for v in open("debian/pgversions").read().split())
# ">= A.0.0, < B.0.0" (or ">= A.0.0" alone): the majors A .. B-1
lo = re.search(r">=\s*(\d+)\.0\.0", req)
hi = re.search(r"<\s*(\d+)\.0\.0", req)
if not lo or not hi:
    sys.exit("META.json's PostgreSQL prerequisite %r has no upper bound: it claims majors never built" % req)
claimed = list(range(int(lo.group(1)), int(hi.group(1))))
if claimed != built:
    sys.exit("META.json claims PostgreSQL %s, debian/pgversions builds %s" % (claimed, built))
EOF2
report $? "pgxn: META.json's PostgreSQL prerequisite names the majors the extension is built and tested on ($(tr '\n' ' ' <debian/pgversions | sed 's/ $//'))"

if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
	echo "not a git checkout: make dist is not tested"
	exit 0
fi
ver=$("$PYTHON" -c 'import json; print(json.load(open("META.json"))["version"])')
make -s dist >"$work/dist.log" 2>&1 && mv "fence-$ver.zip" "fence-$ver.tar.gz" "$work/"
st=$?
[ $st -ne 0 ] && cat "$work/dist.log"
unzip -q "$work/fence-$ver.zip" -d "$work/u" 2>/dev/null && [ -f "$work/u/fence-$ver/META.json" ] &&
	[ -f "$work/u/fence-$ver/pg_ext/fence.control" ]
report $(( st || $? )) "pgxn: make dist's fence-$ver.zip has fence-$ver/META.json at its top and the extension's sources"

# what pgxn install runs: make, then make install, with PG_CONFIG
pgc=$(command -v pg_config)
( cd "$work/u/fence-$ver" && make -s PG_CONFIG="$pgc" && make -s PG_CONFIG="$pgc" install DESTDIR="$work/stage" ) \
	>"$work/build.log" 2>&1
st=$?
[ $st -ne 0 ] && tail -20 "$work/build.log"
[ $st -eq 0 ] && [ -f "$work/stage$(pg_config --pkglibdir)/fence.so" ] &&
	[ -f "$work/stage$(pg_config --sharedir)/extension/fence--1.0.sql" ]
report $? "pgxn: the unpacked zip builds and installs the PostgreSQL extension as pgxn install does (make, make install)"
