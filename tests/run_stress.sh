#!/usr/bin/env bash
# make stress: the long forms of the fault tests, with their counts.
# Not part of make check. Ends with "N passed, N failed".
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
make -s sqlite_ext/fence.so >/dev/null
log=$(mktemp)
trap 'rm -f "$log"' EXIT
{
	"$PYTHON" tests/pg_faults.py --stress
	(cd /tmp && "$PYTHON" "$FENCE_ROOT/tests/pg_leases.py" --pauses 1000)
	"$PYTHON" tests/sqlite_lease_workers.py --pauses 1000
	[ -x tests/lockservice/run.sh ] && bash tests/lockservice/run.sh --stress
	[ -x tests/ha/run.sh ] && bash tests/ha/run.sh --stress
	[ -x tests/fuzz/run.sh ] && bash tests/fuzz/run.sh 300
	[ -x tests/pg_valgrind.sh ] && bash tests/pg_valgrind.sh
} 2>&1 | tee "$log"
echo
echo "$(grep -c '^ok - ' "$log") passed, $(grep -c '^not ok - ' "$log") failed"
