# tests/pg_cluster.sh: start and stop a throwaway PostgreSQL cluster for the
# tests, as the postgres user (the server refuses root), in a temporary
# directory with its own socket and port, and with fence installed into a
# DESTDIR that the server reads through extension_destdir. Source it, call
# pg_cluster_start, and pg_cluster_stop runs on exit whatever happened.
#
# Sets PGHOST, PGPORT, PGUSER, PGDATABASE, PG_BINDIR, PG_WORK.

PG_BINDIR=$(pg_config --bindir)
PG_SERVER_OPTS=${PG_SERVER_OPTS:-}

as_postgres() {
	if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_cluster_start() {
	PG_WORK=$(mktemp -d /tmp/fence-pg.XXXXXX)
	chmod 755 "$PG_WORK"
	# fence, built and installed where only this server looks
	make -s -C "$FENCE_ROOT/pg_ext" with_llvm=no >/dev/null || return 1
	make -s -C "$FENCE_ROOT/pg_ext" with_llvm=no install DESTDIR="$PG_WORK/install" >/dev/null || return 1
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
			-c extension_destdir=$PG_WORK/install -c max_prepared_transactions=4 -c track_commit_timestamp=on $PG_SERVER_OPTS" \
		start >/dev/null || { cat "$PG_WORK/server.log"; return 1; }
	export PGHOST=$PG_WORK PGPORT PGUSER=postgres PGDATABASE=postgres PG_WORK
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
