#!/usr/bin/env bash
# tests/deb_packages.sh: build the Debian packages from debian/ with
# dpkg-buildpackage, install them on this machine, and smoke-test the
# installed files (not the build tree): CREATE EXTENSION fence on a
# throwaway cluster that has no extension_destdir, so that it can only find
# the package's files, and .load /usr/lib/sqlite3/fence in the sqlite3
# shell. The packages are removed again at the end, whatever happened,
# unless they were installed before the test began.
#
# Needs root (dpkg -i); the build dependencies come from
# tests/install_deps.sh. Two runs at once (two worktrees' make check) take
# turns through a lock file, so that one never removes the packages the
# other is testing. One "ok - " or "not ok - " line per check.
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
if [ "$(id -u)" -ne 0 ]; then
	echo "not root: the Debian packages are not built or installed"
	exit 0
fi

work=$(mktemp -d /tmp/fence-deb.XXXXXX)
chmod 755 "$work"
PKGS="postgresql-15-fence libsqlite3-mod-fence"
installed_before=1	# until known (under the lock, below): never remove what we did not install
# apt-get of another test (install_deps) may hold dpkg's lock for a while
dpkg_waiting() {	# dpkg_waiting ARGS...: dpkg, retried while another dpkg or apt holds its lock
	local i
	for i in $(seq 1 60); do
		dpkg "$@" >"$work/dpkg.log" 2>&1 && return 0
		grep -qi 'lock' "$work/dpkg.log" || return 1
		sleep 2
	done
	return 1
}
pg_pid=
cleanup() {
	if [ -n "$pg_pid" ] && [ -d "$work/data" ]; then
		runuser -u postgres -- "$(pg_config --bindir)/pg_ctl" -D "$work/data" -m fast -w stop >/dev/null 2>&1
	fi
	if [ "$installed_before" -eq 0 ]; then
		dpkg_waiting -r $PKGS
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# --- build from a copy of the tracked files (the working tree's content)
mkdir "$work/src"
git ls-files -co --exclude-standard -z 2>/dev/null | xargs -0 cp --parents -t "$work/src" 2>/dev/null ||
	cp -r core sqlite_ext pg_ext debian Makefile LICENSE "$work/src/"
( cd "$work/src" && dpkg-buildpackage -b -uc -us ) >"$work/build.log" 2>&1
st=$?
[ $st -ne 0 ] && tail -30 "$work/build.log"
ver=$(dpkg-parsechangelog -l debian/changelog -S Version)
arch=$(dpkg --print-architecture)
pg_deb=$work/postgresql-15-fence_${ver}_$arch.deb
sq_deb=$work/libsqlite3-mod-fence_${ver}_$arch.deb
[ $st -eq 0 ] && [ -f "$pg_deb" ] && [ -f "$sq_deb" ]
report $? "debian: dpkg-buildpackage builds postgresql-15-fence and libsqlite3-mod-fence $ver"
[ -f "$pg_deb" ] && [ -f "$sq_deb" ] || exit 1

# --- what the packages hold
dpkg-deb -c "$pg_deb" >"$work/pg.list" && dpkg-deb -c "$sq_deb" >"$work/sq.list" &&
	grep -q ' \./usr/lib/postgresql/15/lib/fence\.so$' "$work/pg.list" &&
	grep -q ' \./usr/share/postgresql/15/extension/fence\.control$' "$work/pg.list" &&
	grep -q ' \./usr/share/doc/postgresql-15-fence/copyright$' "$work/pg.list" &&
	grep -q ' \./usr/lib/sqlite3/fence\.so$' "$work/sq.list"
report $? "debian: the packages hold the PostgreSQL extension, /usr/lib/sqlite3/fence.so and the copyright"

# Held until this script exits (its EXIT trap included): another run's
# install, smoke test and removal never interleave with ours.
exec 9>/tmp/fence-deb-test.lock
flock -w 600 9 || { report 1 "debian: wait for another run's package test"; exit 1; }
installed_before=$(dpkg-query -W -f '${db:Status-Status} ${Package}\n' $PKGS 2>/dev/null | grep -c '^installed ')

# --- install them
dpkg_waiting -i "$pg_deb" "$sq_deb"
st=$?
cp "$work/dpkg.log" "$work/install.log"
[ $st -ne 0 ] && cat "$work/install.log"
dpkg -S /usr/lib/postgresql/15/lib/fence.so 2>/dev/null | grep -q '^postgresql-15-fence:' &&
	dpkg -S /usr/lib/sqlite3/fence.so 2>/dev/null | grep -q '^libsqlite3-mod-fence:'
report $(( st || $? )) "debian: dpkg -i installs both packages, and dpkg owns the installed files"

# --- SQLite: the installed extension, from a directory far from the build tree
out=$(cd / && sqlite3 :memory: -cmd '.load /usr/lib/sqlite3/fence' \
	"SELECT fence_check('deb', 5); SELECT fence_try('deb', 4); SELECT fence_check('deb', 4);" 2>"$work/sqlite.err")
cat "$work/sqlite.err" | sed 's/^/sqlite3: /'
echo "$out" | sed 's/^/sqlite3: /'
[ "$(echo "$out" | tr '\n' ' ')" = "5 0 " ] && grep -q 'stale fencing token 4 for resource "deb"' "$work/sqlite.err"
report $? "debian: sqlite3 loads /usr/lib/sqlite3/fence and refuses a stale token"

# --- PostgreSQL: a cluster that can only find the installed files
bindir=$(pg_config --bindir)
chown postgres "$work"
(cd "$work" && runuser -u postgres -- "$bindir/initdb" -D "$work/data" -A trust -U postgres --no-sync \
	-E UTF8 --locale=C.UTF-8 >"$work/initdb.log" 2>&1) &&
	(cd "$work" && runuser -u postgres -- "$bindir/pg_ctl" -D "$work/data" -l "$work/server.log" -w \
		-o "-k $work -p 5439 -c listen_addresses='' -c fsync=off" start >/dev/null)
st=$?
[ $st -ne 0 ] && { cat "$work/initdb.log"; cat "$work/server.log" 2>/dev/null; }
pg_pid=started
report $st "debian: a throwaway cluster without extension_destdir starts"
psql_() { (cd "$work" && psql -X -At -h "$work" -p 5439 -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"); }
out=$(psql_ -c "CREATE EXTENSION fence" -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'" \
	-c "SELECT fence_check('deb', 5)" -c "SELECT fence_try('deb', 4)" 2>&1)
echo "$out" | sed 's/^/psql: /'
ctl=$(sed -n "s/^default_version = '\(.*\)'/\1/p" /usr/share/postgresql/15/extension/fence.control)
[ "$(echo "$out" | tr '\n' ' ')" = "CREATE EXTENSION $ctl 5 f " ]
report $? "debian: CREATE EXTENSION fence from the installed package, version $ctl, fence_check accepts and fence_try refuses"
out=$(psql_ -c "\\set VERBOSITY verbose" -c "SELECT fence_check('deb', 4)" 2>&1)
echo "$out" | grep -q '23T01' && echo "$out" | grep -q 'stale fencing token 4 for resource "deb"' &&
	[ "$(psql_ -c "SELECT token FROM fence_tokens WHERE resource = 'deb'")" = 5 ]
report $? "debian: the installed extension refuses a stale token with 23T01 and keeps the highest"

# --- README.md's three lines (Installation, Debian and Ubuntu): its build
# and its install are the ones above (the install's globs, expanded from the
# source tree as a reader's shell would, name exactly the two packages
# built); its third line runs as written against this cluster, in a
# database and a directory of its own.
readme=$(awk '/^dpkg-buildpackage -b -uc -us/ { f = 1 } f && /^```$/ { exit } f' README.md)
l1=$(sed -n 1p <<<"$readme")
l2=$(sed -n 2p <<<"$readme")
l3=$(sed -n 3p <<<"$readme")
bad=0
case $l1 in "dpkg-buildpackage -b -uc -us"*) ;; *) echo "README's first line: $l1"; bad=1 ;; esac
case $l2 in "sudo dpkg -i "*) ;; *) echo "README's second line: $l2"; bad=1 ;; esac
expanded=$(cd "$work/src" && eval "echo ${l2#sudo dpkg -i }")
[ "$expanded" = "../$(basename "$pg_deb") ../$(basename "$sq_deb")" ] || { echo "README's install names: $expanded"; bad=1; }
mkdir -p "$work/readme"
psql_ -c "CREATE DATABASE readme_deb" >/dev/null &&
	(cd "$work/readme" && PGHOST=$work PGPORT=5439 PGUSER=postgres PGDATABASE=readme_deb bash -c "$l3") \
		>"$work/readme.log" 2>&1 || { cat "$work/readme.log"; bad=1; }
[ "$(cd "$work" && psql -X -At -h "$work" -p 5439 -U postgres -d readme_deb \
	-c "SELECT extname FROM pg_extension WHERE extname = 'fence'")" = fence ] || bad=1
report $bad "debian: README's three lines: dpkg-buildpackage, dpkg -i of the two packages built, then CREATE EXTENSION fence and .load /usr/lib/sqlite3/fence, run as written"
