#!/usr/bin/env bash
# tests/install_deps.sh [demo|check]: install the Debian 12 packages that
# the chosen target needs and this machine lacks. Idempotent: runs apt-get
# only when something is missing. Needs root to install (CI runs as root).
#
#   demo    what `make demo` needs and nothing more: a C compiler and the
#           SQLite headers to build sqlite_ext/fence.so, and /usr/bin/python3
#           (whose sqlite3 module can load extensions). A few seconds.
#   check   (the default) everything `make check` uses: the demo's packages,
#           clang and its sanitizer runtime, PostgreSQL 15 and its server
#           headers, psycopg, the sqlite3 shell, and the lock services of
#           tests/lockservice and examples/ (etcd, ZooKeeper with its Java
#           runtime, Redis) and their Python clients, Patroni for tests/ha,
#           SQLAlchemy, Django and node for tests/pg_stacks_*.py, and what
#           dpkg-buildpackage needs for debian/.
#
# FENCE_DEPS_PRINT=1 prints the package list (one a line) instead of
# installing it; FENCE_DEPS_ASSUME_NONE=1 makes every probe fail, so that
# the list is what a fresh machine would get (tests/packaging.sh uses both).
set -eu
what=${1:-check}
case $what in demo|check) ;; *) echo "usage: $0 [demo|check]" >&2; exit 2 ;; esac

has() {		# has PROBE...: the probe succeeds (never, with FENCE_DEPS_ASSUME_NONE=1)
	[ "${FENCE_DEPS_ASSUME_NONE:-0}" = 1 ] && return 1
	"$@" >/dev/null 2>&1
}
pyhas() { has /usr/bin/python3 -c "import $1"; }

need=()
# --- make demo
has command -v cc || need+=(gcc libc6-dev)
has command -v make || need+=(make)
has test -e /usr/include/sqlite3ext.h || need+=(libsqlite3-dev)
has test -x /usr/bin/python3 || need+=(python3)

if [ "$what" = check ]; then
	has command -v clang || need+=(clang)
	has command -v sqlite3 || need+=(sqlite3)
	has test -d /usr/lib/postgresql/15/bin || need+=(postgresql-15)
	# pgxs.mk alone comes with postgresql-client-15; the headers are what the
	# server-dev package adds
	has test -e /usr/include/postgresql/15/server/postgres.h || need+=(postgresql-server-dev-15)
	pyhas psycopg || need+=(python3-psycopg)
	asan=$(clang -print-file-name=libclang_rt.asan-x86_64.so 2>/dev/null || true)
	case $asan in /*) has test -e "$asan" || need+=(libclang-rt-14-dev) ;; *) need+=(libclang-rt-14-dev) ;; esac
	# the lock services of tests/lockservice and examples/ and their clients
	has command -v etcd || need+=(etcd-server)
	has command -v etcdctl || need+=(etcd-client)
	pyhas etcd3 || need+=(python3-etcd3)
	has test -e /usr/share/java/zookeeper.jar || need+=(zookeeper)
	pyhas kazoo || need+=(python3-kazoo)
	has command -v redis-server || need+=(redis-server)
	pyhas redis || need+=(python3-redis)
	has command -v setpriv || need+=(util-linux)
	# tests/pg_cache_race.py stops a backend at a breakpoint
	has command -v gdb || need+=(gdb)
	# tests/pg_pgbouncer.py: fence behind transaction pooling
	has test -x /usr/sbin/pgbouncer || need+=(pgbouncer)
	# tests/pg_stacks_*.py: fence through SQLAlchemy 1.4 and Django (both over
	# psycopg2) and node-postgres (npm installs `pg` itself, into build/)
	pyhas psycopg2 || need+=(python3-psycopg2)
	pyhas sqlalchemy || need+=(python3-sqlalchemy)
	pyhas django || need+=(python3-django)
	has command -v node || need+=(nodejs)
	has command -v npm || need+=(npm)
	# tests/ha: Patroni (its etcd v2 DCS needs python3-etcd, which the
	# package only recommends)
	has command -v patroni || need+=(patroni)
	pyhas etcd || need+=(python3-etcd)
	# and its network partition: ip netns, veth pairs
	has command -v ip || need+=(iproute2)
	# tests/sqlite_stacks_sqlalchemy.py: SQLAlchemy 1.4 Core and ORM on pysqlite
	pyhas sqlalchemy || need+=(python3-sqlalchemy)
	# tests/stacks/run_node.sh and tests/tools/newest_sqlite.sh: npm (better-sqlite3 12
	# needs Node 20 or later; the test says so when it finds an older one)
	has command -v npm || need+=(npm)
	# examples/ in C: libpq's headers and library
	has test -e /usr/include/postgresql/libpq-fe.h || need+=(libpq-dev)
	# tests/deb_packages.sh: dpkg-buildpackage with debhelper and pg_buildext
	has command -v dpkg-buildpackage || need+=(dpkg-dev)
	has command -v dh || need+=(debhelper)
	has test -e /usr/share/postgresql-common/pgxs_debian_control.mk || need+=(postgresql-server-dev-all)
	# tests/npm_package.sh (node and npm: above): better-sqlite3 compiled
	# from source by node-gyp (written for Node 20; Debian's nodejs is 18)
	has command -v g++ || need+=(g++)
	# tests/python_wheel.sh: the wheel built offline, installed into a venv
	pyhas build || need+=(python3-build)
	pyhas setuptools || need+=(python3-setuptools)
	pyhas wheel || need+=(python3-wheel)
	pyhas ensurepip || need+=(python3-venv)
fi

if [ "${FENCE_DEPS_PRINT:-0}" = 1 ]; then
	[ ${#need[@]} -gt 0 ] && printf '%s\n' "${need[@]}"
	exit 0
fi
if [ ${#need[@]} -gt 0 ]; then
	echo "installing: ${need[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "make $what needs these Debian packages: ${need[*]} (run as root, or install them)" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
