#!/usr/bin/env bash
# Install what `make check` needs and a fresh Debian 12 lacks. Idempotent:
# runs apt-get only when something is missing. Needs root (CI runs as root).
set -eu
need=()
command -v clang >/dev/null || need+=(clang)
[ -e /usr/include/sqlite3.h ] || need+=(libsqlite3-dev)
command -v sqlite3 >/dev/null || need+=(sqlite3)
[ -d /usr/lib/postgresql/15/bin ] || need+=(postgresql-15)
# pgxs.mk alone comes with postgresql-client-15; the headers are what the
# server-dev package adds
[ -e /usr/include/postgresql/15/server/postgres.h ] || need+=(postgresql-server-dev-15)
/usr/bin/python3 -c 'import psycopg' 2>/dev/null || need+=(python3-psycopg)
[ -n "$(clang -print-file-name=libclang_rt.asan-x86_64.so 2>/dev/null | grep /)" ] && \
	[ -e "$(clang -print-file-name=libclang_rt.asan-x86_64.so)" ] || need+=(libclang-rt-14-dev)
# the lock services of tests/lockservice (etcd in make check; ZooKeeper and
# Redis in make stress) and their Python clients
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
/usr/bin/python3 -c 'import etcd3' 2>/dev/null || need+=(python3-etcd3)
[ -e /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
/usr/bin/python3 -c 'import kazoo' 2>/dev/null || need+=(python3-kazoo)
command -v redis-server >/dev/null || need+=(redis-server)
/usr/bin/python3 -c 'import redis' 2>/dev/null || need+=(python3-redis)
command -v setpriv >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing: ${need[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "make check needs these Debian packages: ${need[*]} (run as root, or install them)" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
