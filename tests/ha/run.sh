#!/usr/bin/env bash
# tests/ha/run.sh [--stress]: fence on a Patroni-managed PostgreSQL cluster
# (etcd, three Patroni nodes, writers holding etcd leases).
#   (default)  make check: synchronous_mode with a network partition of the
#              primary, a switchover, a postmaster kill -9, a node kill -9 and
#              a node SIGSTOP past the TTL (four failovers), one asynchronous
#              failover with the losses counted, the floor-raising procedure
#              (about 4 minutes)
#   --stress   make stress: at least 50 failovers in synchronous_mode, then
#              5 asynchronous failovers and the floor procedure (about 30
#              minutes)
# Prints "ok - ha ..." / "not ok - ha ..." lines and "# " counts; exits 0
# once it has printed them (the callers count the lines).
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$PYTHON" "$root/tests/ha/harness.py" "$@" 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ] && ! grep -q '^not ok - ' "$out"; then
	echo "not ok - ha harness (exit status $status)"
fi
exit 0
