#!/usr/bin/env bash
# pg_sql/pg_tle.sh VERSION OUT: write the pg_tle form of the SQL edition,
#
#     SELECT pgtle.install_extension('fence', 'VERSION', 'DESCRIPTION',
#     $_pgtle_$ <pg_sql/fence.sql> $_pgtle_$);
#
# so that `CREATE EXTENSION fence;` works where pg_tle is offered (RDS,
# Aurora, Supabase). pg_sql/fence.sql is the one source; this wraps it
# unchanged. Untested: pg_tle is not available where fence is tested.
set -eu
version=${1:?usage: pg_tle.sh VERSION OUT}
out=${2:?usage: pg_tle.sh VERSION OUT}
src=$(dirname "$0")/fence.sql
if grep -q '\$_pgtle_\$' "$src"; then
	echo "pg_tle.sh: $src contains the quote \$_pgtle_\$" >&2
	exit 1
fi
mkdir -p "$(dirname "$out")"
{
	echo "-- fence $version, the SQL edition, as a pg_tle extension (generated from"
	echo "-- pg_sql/fence.sql by pg_sql/pg_tle.sh; untested: see docs/sql-edition.md)."
	echo "-- Run as a role granted pgtle_admin, then: CREATE EXTENSION fence;"
	echo "SELECT pgtle.install_extension("
	echo "  'fence',"
	echo "  '$version',"
	echo "  'refuse writes that carry a stale fencing token (SQL edition)',"
	echo '$_pgtle_$'
	cat "$src"
	echo '$_pgtle_$'
	echo ");"
} > "$out"
echo "$out"
