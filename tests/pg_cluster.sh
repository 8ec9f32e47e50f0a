# tests/pg_cluster.sh: start and stop a throwaway PostgreSQL cluster for the
# tests, as the postgres user (the server refuses root), in a temporary
# directory with its own socket and port, and with fence installed into a
# DESTDIR that the server reads through extension_destdir. Source it, call
# pg_cluster_start, and pg_cluster_stop runs on exit whatever happened.
#
# Sets PGHOST, PGPORT, PGUSER, PGDATABASE, PG_BINDIR, PG_WORK.
#
# FENCE_EDITION=sql installs the SQL edition (pg_sql/fence.sql) into
# template1 instead of building the C extension, so that every database
# created afterwards has it (docs/sql-edition.md); FENCE_PG_MAJOR=N runs the
# server of that major (tests/tools/pg_major.sh; 15 is Debian's).

FENCE_EDITION=${FENCE_EDITION:-c}
FENCE_PG_MAJOR=${FENCE_PG_MAJOR:-15}
if [ "$FENCE_PG_MAJOR" = 15 ]; then
	PG_BINDIR=$(pg_config --bindir)
else
	PG_BINDIR=$(bash "$(dirname "${BASH_SOURCE[0]}")/tools/pg_major.sh" "$FENCE_PG_MAJOR") || PG_BINDIR=/nonexistent
fi
# psql, pg_regress and pg_isolation_regress are Debian 15's for every major
PG_CLIENT_BINDIR=$(pg_config --bindir)
PG_SERVER_OPTS=${PG_SERVER_OPTS:-}

as_postgres() {
	if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_cluster_start() {
	PG_WORK=$(mktemp -d /tmp/fence-pg.XXXXXX)
	chmod 755 "$PG_WORK"
	local destdir_opt=""
	if [ "$FENCE_EDITION" = c ]; then
		# fence, built and installed where only this server looks
		make -s -C "$FENCE_ROOT/pg_ext" with_llvm=no >/dev/null || return 1
		make -s -C "$FENCE_ROOT/pg_ext" with_llvm=no install DESTDIR="$PG_WORK/install" >/dev/null || return 1
		destdir_opt="-c extension_destdir=$PG_WORK/install"
	fi
	# the server must be able to read the test inputs
	mkdir -p "$PG_WORK/inputs"
	cp -r "$FENCE_ROOT/sql" "$FENCE_ROOT/expected" "$FENCE_ROOT/specs" "$PG_WORK/inputs/"
	[ "$(id -u)" -eq 0 ] && chown -R postgres "$PG_WORK"
	PGPORT=$((20000 + RANDOM % 20000))
	as_postgres "$PG_BINDIR/initdb" -D "$PG_WORK/data" -A trust -U postgres --no-sync \
		-E UTF8 --locale=C.UTF-8 >"$PG_WORK/initdb.log" 2>&1 || { cat "$PG_WORK/initdb.log"; return 1; }
	trap pg_cluster_stop EXIT
	as_postgres "$PG_BINDIR/pg_ctl" -D "$PG_WORK/data" -l "$PG_WORK/server.log" -w \
		-o "-k $PG_WORK -p $PGPORT -c listen_addresses='' -c fsync=off \
			$destdir_opt -c max_prepared_transactions=4 -c track_commit_timestamp=on $PG_SERVER_OPTS" \
		start >/dev/null || { cat "$PG_WORK/server.log"; return 1; }
	export PGHOST=$PG_WORK PGPORT PGUSER=postgres PGDATABASE=postgres PG_WORK FENCE_EDITION
	if [ "$FENCE_EDITION" = sql ]; then
		# the SQL edition, as a database owner installs it, in every new database
		psql -X -q -v ON_ERROR_STOP=1 -d template1 -f "$FENCE_ROOT/pg_sql/fence.sql" \
			>"$PG_WORK/install_sql.log" 2>&1 || { cat "$PG_WORK/install_sql.log"; return 1; }
	fi
}

pg_cluster_stop() {
	if [ -n "${PG_WORK:-}" ] && [ -d "$PG_WORK/data" ]; then
		as_postgres "$PG_BINDIR/pg_ctl" -D "$PG_WORK/data" -m fast -w stop >/dev/null 2>&1
		# keep the server log where a failing run can be read
		mkdir -p "$FENCE_ROOT/tests/results"
		cp "$PG_WORK/server.log" "$FENCE_ROOT/tests/results/pg_server.log" 2>/dev/null
		rm -rf "$PG_WORK"
	fi
}
