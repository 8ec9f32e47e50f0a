#!/usr/bin/env bash
# tests/run_versions.sh MAJOR...: the PostgreSQL suites (pg_regress topics,
# isolation specs, the shared corpus) against the SQL edition, one throwaway
# cluster per major (tests/run_pg.sh with FENCE_EDITION=sql and
# FENCE_PG_MAJOR). 15 is Debian's server; the others come from npm
# (tests/tools/pg_major.sh). One "ok - " or "not ok - " line per test,
# labelled "sql-edition pgN".
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
for major in "$@"; do
	if ! bash tests/tools/pg_major.sh "$major" >/dev/null; then
		report 1 "PostgreSQL $major server for the SQL edition (tests/tools/pg_major.sh)"
		continue
	fi
	FENCE_EDITION=sql FENCE_PG_MAJOR=$major bash tests/run_pg.sh
done
exit 0
