#!/usr/bin/env bash
# tests/lockservice/run.sh [--stress]: fence behind real lock services.
#   (default)  make check: etcd, PostgreSQL and SQLite, >= 20 pauses each,
#              and the paused-inside-a-transaction scenarios (about 1 minute)
#   --stress   make stress: etcd, ZooKeeper and Redis, each with PostgreSQL
#              and SQLite, >= 1000 pauses per pair
# Prints "ok - lockservice ..." / "not ok - lockservice ..." lines and "# "
# details; exits 0 once it has printed them (the callers count the lines).
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
if [ "${1:-}" = "--stress" ]; then
	set -- --all --stress
else
	set -- --service etcd --engine pg,sqlite --pauses 20
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$PYTHON" "$root/tests/lockservice/harness.py" "$@" 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ] && ! grep -q '^not ok - ' "$out"; then
	echo "not ok - lockservice harness (exit status $status)"
fi
exit 0
