/*
 * examples/sqlite3_fence.c: fence from the sqlite3 C API.
 *
 * Two lock holders share one database file, each with its own connection.
 * Holder A was granted token 7 and read the stock level; the lock then
 * passed to holder B with token 8 (A paused, its lease ran out). B writes
 * with token 8; A, unaware, writes with token 7 and is refused. The program
 * shows how a C caller loads the extension (without enabling the SQL
 * function load_extension()), tells a stale token from a missing one
 * (extended result code SQLITE_CONSTRAINT_FUNCTION, then the message's first
 * words), and what a connection that has not loaded fence sees when it
 * writes a protected table.
 *
 * Build and run (examples/run.py does both):
 *
 *     cc -o sqlite3_fence examples/sqlite3_fence.c -lsqlite3
 *     FENCE_SQLITE_EXT=./sqlite_ext/fence ./sqlite3_fence
 *
 * The database is example.db in FENCE_EXAMPLE_DIR (default /tmp). Exit
 * status 0 when A's write was refused and the row holds B's write.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#ifndef SQLITE_CONSTRAINT_FUNCTION		/* older headers lack the name */
#define SQLITE_CONSTRAINT_FUNCTION (SQLITE_CONSTRAINT | (4 << 8))
#endif

/* Open the database, optionally with fence loaded; exit with a message on failure. */
static sqlite3 *
open_db(const char *path, const char *ext)
{
	sqlite3    *db;
	char	   *err = NULL;

	if (sqlite3_open(path, &db) != SQLITE_OK)
	{
		fprintf(stderr, "cannot open %s: %s\n", path, sqlite3_errmsg(db));
		exit(2);
	}
	sqlite3_busy_timeout(db, 5000);
	if (ext == NULL)
		return db;
	/* enable sqlite3_load_extension() for this connection, not the SQL function */
	sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 1, NULL);
	if (sqlite3_load_extension(db, ext, NULL, &err) != SQLITE_OK)
	{
		fprintf(stderr, "cannot load the fence extension from %s: %s\n"
				"(build it with make; FENCE_SQLITE_EXT names it without the .so)\n",
				ext, err ? err : "unknown error");
		exit(2);
	}
	sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL);
	return db;
}

static void
exec_or_die(sqlite3 *db, const char *sql)
{
	char	   *err = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
	{
		fprintf(stderr, "setup statement failed: %s\n  %s\n", err, sql);
		exit(2);
	}
}

/*
 * The fenced write: the protected table's token column carries the token.
 * Returns the statement's extended result code; the message is in *msg.
 */
static int
write_stock(sqlite3 *db, int qty, sqlite3_int64 token, const char **msg)
{
	sqlite3_stmt *stmt;
	int			rc;

	rc = sqlite3_prepare_v2(db, "UPDATE stock SET qty = ?1, tok = ?2 WHERE item = 'bolts'",
							-1, &stmt, NULL);
	if (rc != SQLITE_OK)
	{
		*msg = sqlite3_errmsg(db);
		return sqlite3_extended_errcode(db);
	}
	sqlite3_bind_int(stmt, 1, qty);
	sqlite3_bind_int64(stmt, 2, token);
	rc = sqlite3_step(stmt);
	rc = (rc == SQLITE_DONE) ? SQLITE_OK : sqlite3_extended_errcode(db);
	*msg = sqlite3_errmsg(db);
	sqlite3_finalize(stmt);
	return rc;
}

int
main(void)
{
	const char *ext = getenv("FENCE_SQLITE_EXT") ? getenv("FENCE_SQLITE_EXT") : "./sqlite_ext/fence";
	const char *dir = getenv("FENCE_EXAMPLE_DIR") ? getenv("FENCE_EXAMPLE_DIR") : "/tmp";
	char		path[4096];
	sqlite3    *a, *b, *plain;
	sqlite3_stmt *stmt;
	const char *msg;
	int			rc, refused = 0, fails_closed = 0, qty = -1;
	sqlite3_int64 tok = -1, highest = -1;

	snprintf(path, sizeof(path), "%s/example.db", dir);
	remove(path);

	b = open_db(path, ext);
	exec_or_die(b, "CREATE TABLE stock (item text PRIMARY KEY, qty integer, tok integer);"
				"SELECT fence_protect('stock', 'tok', 'stock-lock');"
				"INSERT INTO stock VALUES ('bolts', 10, 7);");
	printf("stock of bolts is 10, written with token 7; the table is protected by the fence \"stock-lock\"\n");

	a = open_db(path, ext);
	printf("holder A was granted token 7 and read 10 bolts; then it paused, and the lock passed to B with token 8\n");

	rc = write_stock(b, 5, 8, &msg);
	printf("B writes 5 bolts with token 8: %s\n", rc == SQLITE_OK ? "accepted" : msg);

	rc = write_stock(a, 9, 7, &msg);
	if (rc == SQLITE_CONSTRAINT_FUNCTION && strncmp(msg, "stale fencing token", 19) == 0)
	{
		refused = 1;
		printf("A writes 9 bolts with token 7: refused, extended result code %d "
			   "(SQLITE_CONSTRAINT_FUNCTION):\n  %s\n", rc, msg);
	}
	else
		printf("A writes 9 bolts with token 7: %s (code %d)\n", rc == SQLITE_OK ? "ACCEPTED" : msg, rc);

	/* a connection without fence cannot write the table at all: it fails closed */
	plain = open_db(path, NULL);
	rc = write_stock(plain, 0, 99, &msg);
	fails_closed = (rc != SQLITE_OK && strstr(msg, "no such function: fence_guard_") != NULL);
	printf("a connection that has not loaded fence writes 0 bolts with token 99: %s\n",
		   rc == SQLITE_OK ? "ACCEPTED" : msg);

	if (sqlite3_prepare_v2(b, "SELECT qty, tok, fence_current('stock-lock') FROM stock WHERE item = 'bolts'",
						   -1, &stmt, NULL) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW)
	{
		qty = sqlite3_column_int(stmt, 0);
		tok = sqlite3_column_int64(stmt, 1);
		highest = sqlite3_column_int64(stmt, 2);
	}
	sqlite3_finalize(stmt);
	printf("committed: %d bolts, token %lld; the highest token accepted for \"stock-lock\" is %lld\n",
		   qty, (long long) tok, (long long) highest);

	sqlite3_close(plain);
	sqlite3_close(a);
	sqlite3_close(b);
	if (refused && fails_closed && qty == 5 && tok == 8 && highest == 8)
	{
		printf("as expected: the stale write was refused and B's write stands\n");
		return 0;
	}
	printf("NOT AS EXPECTED\n");
	return 1;
}
