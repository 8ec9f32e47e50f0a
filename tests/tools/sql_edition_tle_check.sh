#!/usr/bin/env bash
# The pg_tle form's script under CREATE EXTENSION, without pg_tle: the body
# that pg_sql/pg_tle.sh puts between the $_pgtle_$ quotes, installed as an
# ordinary extension script through Debian's extension_destdir, into a new
# schema of a new database; then the accept rule, a guard and the pg_dump
# configuration. pgtle.install_extension itself is not run (pg_tle is not
# available here). Needs the cluster of tests/pg_cluster.sh on Debian's 15.
set -u
. "$(dirname "$0")/../lib.sh"
cd "$FENCE_ROOT"
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" pg_ext/fence.control)
tle=$PG_WORK/tle/fence--$version.sql
bash pg_sql/pg_tle.sh "$version" "$tle" >/dev/null || { report 1 "pg_tle form generated"; exit 0; }
ext=$PG_WORK/tle_destdir/$(pg_config --sharedir)/extension
mkdir -p "$ext"
# the script pg_tle would run: between the quotes
sed -n '/^\$_pgtle_\$$/,/^\$_pgtle_\$$/p' "$tle" | sed '1d;$d' > "$ext/fence--$version.sql"
printf "comment = 'fence SQL edition'\ndefault_version = '%s'\nrelocatable = false\nsuperuser = false\ntrusted = true\n" \
	"$version" > "$ext/fence.control"
chmod -R a+rX "$PG_WORK/tle_destdir"
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS tle_check" -c "CREATE DATABASE tle_check TEMPLATE template0" >/dev/null 2>&1
out=$(psql -X -q -At -v ON_ERROR_STOP=1 -d tle_check 2>&1 <<SQL
SET extension_destdir = '$PG_WORK/tle_destdir';
CREATE ROLE tle_owner LOGIN;
GRANT CREATE ON DATABASE tle_check TO tle_owner;
SET ROLE tle_owner;
CREATE SCHEMA fencing;
CREATE EXTENSION fence SCHEMA fencing;
SELECT fencing.fence_check('tle:r', 5);
SELECT fencing.fence_try('tle:r', 4);
CREATE SCHEMA app;
CREATE TABLE app.t (id int, tok bigint);
SELECT fencing.fence_protect('app.t', 'tok', 'tle:t');
INSERT INTO app.t VALUES (1, 3);
SELECT count(*) FROM pg_extension e JOIN pg_class c ON c.oid = ANY (e.extconfig) WHERE e.extname = 'fence';
SELECT fencing.fence_edition();
SQL
)
status=$?
expected=$(printf '5\nf\n\n2\nsql')
[ $status -eq 0 ] && [ "$out" = "$expected" ]
report $? "pg_tle form: its script installs with CREATE EXTENSION by a non-superuser into a schema, fences, and registers fence_tokens and fence_leases for pg_dump"
[ "$out" = "$expected" ] || echo "$out" | sed 's/^/#   /'
psql -X -q -d postgres -c "DROP DATABASE tle_check" >/dev/null 2>&1

# The plain form: psql -f by the owner of a database, no superuser, into a
# schema of its choice
psql -X -q -d postgres -c "CREATE DATABASE plain_check OWNER tle_owner" >/dev/null 2>&1
out=$(psql -X -q -At -v ON_ERROR_STOP=1 -U tle_owner -d plain_check \
	-c 'CREATE SCHEMA fencing' -c 'SET search_path = fencing' -f pg_sql/fence.sql \
	-c 'RESET search_path' -c "SELECT fencing.fence_check('plain:r', 3)" \
	-c "SELECT rolsuper FROM pg_roles WHERE rolname = current_user" \
	-c "SELECT count(*) FROM pg_proc WHERE pronamespace = 'fencing'::regnamespace AND prosecdef" 2>&1)
status=$?
[ $status -eq 0 ] && [ "$(echo "$out" | tail -3 | tr '\n' ' ')" = "3 f 10 " ]
report $? "plain form: psql -f pg_sql/fence.sql by a database owner without superuser, into a schema of its choice"
[ "$(echo "$out" | tail -3 | tr "\n" " ")" = "3 f 9 " ] || echo "$out" | tail -5 | sed 's/^/#   /'
psql -X -q -d postgres -c "DROP DATABASE plain_check" -c "DROP ROLE tle_owner" >/dev/null 2>&1
exit 0
