/*
 * sqlite_replace_bench.c
 *
 * How a per-row guard should check the rows a REPLACE deletes, measured
 * (docs/internals.md, "REPLACE"): a keyed table
 *
 *   t(id INTEGER PRIMARY KEY, k TEXT NOT NULL UNIQUE, u TEXT UNIQUE, n, tok)
 *   fence_protect('t', 'tok', 'k-', 'k')
 *
 * (a rowid table with a TEXT key and one extra UNIQUE index) under
 *
 *   lookups   the guard as fence_protect writes it, recursive_triggers off:
 *             on a build with look-ups (5bb6d00 and before) the BEFORE
 *             INSERT and BEFORE UPDATE triggers look up, through u and the
 *             rowid, the rows the new one would replace, and check each
 *   delguard  no look-ups (a build with them has its triggers replaced by
 *             the same without them); PRAGMA recursive_triggers=ON, so
 *             SQLite fires the BEFORE DELETE guard for every row a REPLACE
 *             deletes
 *   delpragma delguard, and the driver steps a cached
 *             "PRAGMA recursive_triggers" before every write statement: what
 *             a guard that read the setting once per outer statement would
 *             pay (reading it costs a prepare: its program expires itself)
 *
 * Cells: insert (a new key), replace (INSERT OR REPLACE of an existing key,
 * same u: it deletes that row) and update (SET n = n + 1, tok = 5 by key),
 * at 1 and 1000 rows per transaction. bench/sqlite_replace_profile.sh counts
 * runCell's instructions with callgrind.
 *
 * Usage: sqlite_replace_bench EXTENSION DBPATH VARIANT OP PER_TXN ROWS
 */
#include <sqlite3.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLE_ROWS 10000

static sqlite3 *db;

static void
die(const char *what)
{
	fprintf(stderr, "sqlite_replace_bench: %s: %s\n", what, sqlite3_errmsg(db));
	exit(1);
}

static void
exec(const char *sql)
{
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		die(sql);
}

static sqlite3_stmt *
prepare(const char *sql)
{
	sqlite3_stmt *s = NULL;

	if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, NULL) != SQLITE_OK)
		die(sql);
	return s;
}

static void
step(sqlite3_stmt *s)
{
	int			rc = sqlite3_step(s);

	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		die(sqlite3_sql(s));
	sqlite3_reset(s);
}

/* The delete guard's triggers: fence_protect's, without the look-ups. */
static void
installDelGuard(void)
{
	sqlite3_stmt *s = prepare("SELECT g.id, (SELECT count(*) FROM sqlite_schema WHERE "
							  "sql LIKE '% AS c WHERE %') FROM fence_guards AS g");
	long long	id;
	int			bLookups;
	char	   *sql;

	if (sqlite3_step(s) != SQLITE_ROW)
		die("fence_guards");
	id = sqlite3_column_int64(s, 0);
	bLookups = sqlite3_column_int(s, 1) > 0;
	sqlite3_finalize(s);
	if (!bLookups)
	{
		exec("PRAGMA recursive_triggers=ON");
		return;
	}
	sql = sqlite3_mprintf(
		"DROP TRIGGER \"fence:%lld:insert\"; DROP TRIGGER \"fence:%lld:update\";"
		"DROP TRIGGER \"fence:%lld:update_token\";"
		"CREATE TRIGGER \"fence:%lld:insert\" BEFORE INSERT ON \"t\" WHEN /* fence guard "
		"shape 4 */ NOT (fence_guard_write(%lld, 'k-', NEW.\"k\", NEW.\"tok\") IS NOT NULL) "
		"BEGIN DELETE FROM fence_join WHERE 0; END;"
		"CREATE TRIGGER \"fence:%lld:update\" BEFORE UPDATE ON \"t\" WHEN /* fence guard "
		"shape 4 */ NOT (fence_guard_fenced(%lld, 'k-', OLD.\"k\") IS NOT NULL AND "
		"fence_guard_fenced(%lld, 'k-', NEW.\"k\") IS NOT NULL) "
		"BEGIN DELETE FROM fence_join WHERE 0; END;"
		"CREATE TRIGGER \"fence:%lld:update_token\" BEFORE UPDATE OF \"tok\" ON \"t\" WHEN "
		"/* fence guard shape 4 */ NOT (fence_guard_write(%lld, 'k-', OLD.\"k\", NEW.\"tok\") "
		"IS NOT NULL AND fence_guard_write(%lld, 'k-', NEW.\"k\", NEW.\"tok\") IS NOT NULL) "
		"BEGIN SELECT 0; END;"
		"PRAGMA recursive_triggers=ON;",
		id, id, id, id, id, id, id, id, id, id, id);
	exec(sql);
	sqlite3_free(sql);
}

static sqlite3_stmt *pBegin,
		   *pCommit,
		   *pWrite,
		   *pPragma;

/* nRows writes, perTxn per transaction: what callgrind counts */
static void __attribute__((noinline))
runCell(int op, int perTxn, int nRows)
{
	unsigned	seed = 12345;
	int			done = 0;
	char		k[32],
				u[32];

	while (done < nRows)
	{
		step(pBegin);
		for (int i = 0; i < perTxn; i++, done++)
		{
			int			j;

			seed = seed * 1103515245u + 12345u;
			j = op == 'i' ? TABLE_ROWS + 1 + done : (int) ((seed >> 8) % TABLE_ROWS) + 1;
			snprintf(k, sizeof(k), "%d", j);
			snprintf(u, sizeof(u), "u%d", j);
			sqlite3_bind_text(pWrite, 1, k, -1, SQLITE_TRANSIENT);
			if (op != 'u')
				sqlite3_bind_text(pWrite, 2, u, -1, SQLITE_TRANSIENT);
			if (pPragma)
				step(pPragma);
			step(pWrite);
		}
		step(pCommit);
	}
}

int
main(int argc, char **argv)
{
	const char *variant;
	int			op;
	char	   *err = NULL;

	if (argc != 7)
	{
		fprintf(stderr, "usage: sqlite_replace_bench EXT DB VARIANT OP PER_TXN ROWS\n");
		return 2;
	}
	variant = argv[3];
	op = argv[4][0];
	remove(argv[2]);
	if (sqlite3_open(argv[2], &db) != SQLITE_OK)
		die(argv[2]);
	sqlite3_enable_load_extension(db, 1);
	if (sqlite3_load_extension(db, argv[1], "sqlite3_fence_init", &err) != SQLITE_OK)
	{
		fprintf(stderr, "cannot load %s: %s\n", argv[1], err);
		return 1;
	}
	exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
		 "CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT NOT NULL UNIQUE, u TEXT UNIQUE,"
		 " n INTEGER NOT NULL, tok INTEGER);"
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 10000)"
		 " INSERT INTO t(k, u, n, tok) SELECT i, 'u' || i, 0, 5 FROM g;"
		 "SELECT fence_protect('t', 'tok', 'k-', 'k');");
	if (strcmp(variant, "lookups") != 0)
		installDelGuard();
	/* every key's fence_tokens row exists, every page is warm */
	exec("BEGIN; UPDATE t SET tok = 5; COMMIT; PRAGMA wal_checkpoint(TRUNCATE);");
	pBegin = prepare("BEGIN");
	pCommit = prepare("COMMIT");
	pWrite = prepare(op == 'i' ? "INSERT INTO t(k, u, n, tok) VALUES (?1, ?2, 0, 5)" :
					 op == 'r' ? "INSERT OR REPLACE INTO t(k, u, n, tok) VALUES (?1, ?2, 0, 5)" :
					 "UPDATE t SET n = n + 1, tok = 5 WHERE k = ?1");
	if (strcmp(variant, "delpragma") == 0)
		pPragma = prepare("PRAGMA recursive_triggers");
	/* one write of each kind first: admission is once per schema, not per cell */
	exec("BEGIN; INSERT OR REPLACE INTO t(k, u, n, tok) VALUES ('1', 'u1', 0, 5);"
		 "UPDATE t SET n = n + 1, tok = 5 WHERE k = '2';"
		 "INSERT INTO t(k, u, n, tok) VALUES ('w', 'uw', 0, 5); COMMIT");
	runCell(op, atoi(argv[5]), atoi(argv[6]));
	/* what committed: every row under its own key, none lost to a REPLACE */
	{
		sqlite3_stmt *s = prepare("SELECT count(*) FROM t");

		sqlite3_step(s);
		printf("rows\t%d\n", sqlite3_column_int(s, 0));
		sqlite3_finalize(s);
	}
	sqlite3_close_v2(db);
	return 0;
}
