/*
 * sqlite_bench.c
 *
 * The SQLite half of `make bench` (bench/run.sh): the extension driven from C
 * on file databases (WAL, synchronous=NORMAL), prepared single-row
 * statements, against the baselines a user would otherwise pick. Each
 * variant has a database file of its own, with the same tables:
 *
 *   plain    no trigger: the limit, ratio 1.0
 *   floor    empty triggers of the same shape as fence's (the same four
 *            triggers fence_protect() installs, read back from the schema,
 *            each body replaced by SELECT abs(NEW.tok)): what any
 *            trigger-based design costs before it does anything
 *   fenced   fence_protect('t', 'tok', 'r'), the same token every write
 *   sqltrig  the pure-SQL trigger a user writes today: a token table, a
 *            RAISE(ABORT) on a lower token and an upsert of a higher one, on
 *            INSERT and on UPDATE OF tok (it cannot know which transaction
 *            is fenced, so it guards nothing else)
 *
 * Cells: UPDATE t SET n = n + 1, tok = ?1 WHERE id = ?2 (10000 rows), and
 * INSERT INTO ti(n, tok) VALUES (?1, ?2), with 1 and 1000 rows per
 * transaction (BEGIN; rows; COMMIT). Every cell writes a fixed number of rows
 * and is timed with CLOCK_MONOTONIC; each run visits every cell and every
 * variant in turn (round-robin, the variant order rotating between runs), so
 * that machine drift falls on all variants alike.
 *
 * bench/run.sh runs one variant per process (ONLY "fenced/", RUNS "3-3"),
 * the processes alternating: with every variant's connection open in one
 * process, the one-row cells' ratios moved by up to 5% with the order in
 * which the variants were set up (which connection's memory lies where),
 * enough to turn a parity verdict either way.
 *
 * Output, one line per measurement, tab-separated:
 *   sqlite RUN OP ROWS_PER_TXN VARIANT ROWS_PER_SECOND
 *   sqlitemem VARIANT TRANSACTIONS MEMORY_USED_BYTES
 * The memory lines follow sqlite3_memory_used() (the whole process; one
 * connection open) over many single-row transactions, each under its own
 * resource of 10000 (a per-row fence), after a warm-up that has touched every
 * page: the fence's per-connection state must not grow with them.
 *
 * Usage: sqlite_bench EXTENSION_PATH DIRECTORY RUNS SCALE MEMTXNS [ONLY]
 *   RUNS is a count N (runs 1 to N) or a range "A-B", which numbers the
 *   output lines of a process that runs some of the runs.
 *   SCALE multiplies the rows per cell (1.0: about 0.1-0.5 s per cell here).
 *   ONLY: run only the cells whose "variant/op/rows" (e.g.
 *   "fenced/update/1000/") starts with it; the variants it rules out are
 *   not set up at all.
 */
#include <sqlite3.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_VARIANTS 4
#define TABLE_ROWS 10000

static const char *const variantNames[N_VARIANTS] = {"plain", "floor", "fenced", "sqltrig"};

typedef struct Bench
{
	const char *name;
	sqlite3    *db;
	sqlite3_stmt *begin;
	sqlite3_stmt *commit;
	sqlite3_stmt *update;
	sqlite3_stmt *insert;
} Bench;

static void
die(sqlite3 *db, const char *what)
{
	fprintf(stderr, "sqlite_bench: %s: %s\n", what, db ? sqlite3_errmsg(db) : "");
	exit(1);
}

static void
exec(sqlite3 *db, const char *sql)
{
	char	   *err = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
	{
		fprintf(stderr, "sqlite_bench: %s\n  in: %s\n", err ? err : "?", sql);
		exit(1);
	}
}

static sqlite3_stmt *
prepare(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *stmt = NULL;

	if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, NULL) != SQLITE_OK)
		die(db, sql);
	return stmt;
}

static void
step(sqlite3 *db, sqlite3_stmt *stmt)
{
	if (sqlite3_step(stmt) != SQLITE_DONE)
		die(db, sqlite3_sql(stmt));
	sqlite3_reset(stmt);
}

static sqlite3 *
openDb(const char *dir, const char *name, const char *extension)
{
	char		path[4096];
	sqlite3    *db = NULL;
	char	   *err = NULL;

	/* a new database each time: an old one's WAL would be found beside it */
	snprintf(path, sizeof(path), "%s/%s.db-wal", dir, name);
	remove(path);
	snprintf(path, sizeof(path), "%s/%s.db-shm", dir, name);
	remove(path);
	snprintf(path, sizeof(path), "%s/%s.db", dir, name);
	remove(path);
	if (sqlite3_open(path, &db) != SQLITE_OK)
		die(db, path);
	exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL");
	/* every variant loads fence, whether it uses it or not */
	if (sqlite3_enable_load_extension(db, 1) != SQLITE_OK ||
		sqlite3_load_extension(db, extension, "sqlite3_fence_init", &err) != SQLITE_OK)
	{
		fprintf(stderr, "sqlite_bench: cannot load %s: %s\n", extension, err ? err : "?");
		exit(1);
	}
	sqlite3_enable_load_extension(db, 0);
	return db;
}

/*
 * The floor: protect the table with fence, read its triggers back, and
 * replace each by one of the same name, timing and event, without fence's
 * WHEN clause, whose body only reads the row: SELECT abs(NEW.tok) (OLD for
 * DELETE).
 */
static void
installFloor(sqlite3 *db, const char *table)
{
	char		sql[512];
	sqlite3_stmt *stmt;
	char	   *triggers[8];
	int			n = 0;
	int			i;

	snprintf(sql, sizeof(sql), "SELECT fence_protect('%s', 'tok', 'r')", table);
	exec(db, sql);
	stmt = prepare(db, "SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ?1");
	sqlite3_bind_text(stmt, 1, table, -1, SQLITE_STATIC);
	while (sqlite3_step(stmt) == SQLITE_ROW && n < 8)
		triggers[n++] = sqlite3_mprintf("%s", (const char *) sqlite3_column_text(stmt, 0));
	sqlite3_finalize(stmt);
	if (n != 4)
	{
		fprintf(stderr, "sqlite_bench: fence_protect installed %d triggers, expected 4\n", n);
		exit(1);
	}
	snprintf(sql, sizeof(sql), "SELECT fence_unprotect('%s')", table);
	exec(db, sql);
	for (i = 0; i < n; i++)
	{
		/* fence's check is the WHEN clause (or, before 1.4, the body): cut both */
		char	   *body = strstr(triggers[i], " WHEN ") ? strstr(triggers[i], " WHEN ") :
			strstr(triggers[i], " BEGIN ");
		int			isDelete;
		char	   *floorSql;

		if (body == NULL)
		{
			fprintf(stderr, "sqlite_bench: unexpected trigger: %s\n", triggers[i]);
			exit(1);
		}
		*body = '\0';
		/* the head only: fence's body (1.4) deletes from fence_join */
		isDelete = strstr(triggers[i], " DELETE ") != NULL;
		floorSql = sqlite3_mprintf("%s BEGIN SELECT abs(%s.tok); END", triggers[i],
								   isDelete ? "OLD" : "NEW");
		exec(db, floorSql);
		sqlite3_free(floorSql);
		sqlite3_free(triggers[i]);
	}
}

static void
installSqlTrigger(sqlite3 *db, const char *table)
{
	static const char body[] =
		" BEGIN"
		" SELECT CASE WHEN NEW.tok IS NULL THEN RAISE(ABORT, 'fencing token required')"
		" WHEN NEW.tok < (SELECT token FROM tokens WHERE resource = 'r')"
		" THEN RAISE(ABORT, 'stale fencing token') END;"
		" INSERT INTO tokens VALUES ('r', NEW.tok) ON CONFLICT (resource)"
		" DO UPDATE SET token = excluded.token WHERE excluded.token > token;"
		" END";
	char	   *sql = sqlite3_mprintf(
		"CREATE TABLE IF NOT EXISTS tokens(resource TEXT PRIMARY KEY, token INTEGER NOT NULL) WITHOUT ROWID;"
		"INSERT OR IGNORE INTO tokens VALUES ('r', 5);"
		"CREATE TRIGGER \"sql_insert:%w\" BEFORE INSERT ON \"%w\"%s;"
		"CREATE TRIGGER \"sql_update_token:%w\" BEFORE UPDATE OF tok ON \"%w\"%s;",
		table, table, body, table, table, body);

	exec(db, sql);
	sqlite3_free(sql);
}

static void
setupBench(Bench *b, const char *dir, const char *extension, int variant)
{
	char		sql[256];

	b->name = variantNames[variant];
	b->db = openDb(dir, b->name, extension);
	exec(b->db, "CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, tok INTEGER);"
		 "CREATE TABLE ti(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, tok INTEGER);"
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 10000)"
		 " INSERT INTO t SELECT i, 0, 5 FROM g");
	switch (variant)
	{
		case 1:
			installFloor(b->db, "t");
			installFloor(b->db, "ti");
			break;
		case 2:
			exec(b->db, "SELECT fence_protect('t', 'tok', 'r');"
				 "SELECT fence_protect('ti', 'tok', 'r');"
				 "SELECT fence_check('r', 5)");
			break;
		case 3:
			installSqlTrigger(b->db, "t");
			installSqlTrigger(b->db, "ti");
			break;
	}
	b->begin = prepare(b->db, "BEGIN");
	b->commit = prepare(b->db, "COMMIT");
	b->update = prepare(b->db, "UPDATE t SET n = n + 1, tok = ?1 WHERE id = ?2");
	b->insert = prepare(b->db, "INSERT INTO ti(n, tok) VALUES (?1, ?2)");
	/*
	 * Warm the page cache and the WAL (every row once) and each statement:
	 * one row through the INSERT too, so that what a connection does once
	 * per statement or schema version (fence admits a guard at its first
	 * call) is not counted in the first cell that uses it.
	 */
	exec(b->db, "BEGIN");
	sqlite3_bind_int64(b->update, 1, 5);
	for (int id = 1; id <= TABLE_ROWS; id++)
	{
		sqlite3_bind_int(b->update, 2, id);
		step(b->db, b->update);
	}
	sqlite3_bind_int(b->insert, 1, 0);
	sqlite3_bind_int64(b->insert, 2, 5);
	step(b->db, b->insert);
	exec(b->db, "COMMIT");
	snprintf(sql, sizeof(sql), "PRAGMA wal_checkpoint(TRUNCATE)");
	exec(b->db, sql);
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/*
 * Write nRows rows, perTxn rows per transaction; returns rows per second.
 * Never inlined, so that bench/sqlite_profile.sh can count its instructions.
 */
static double __attribute__((noinline))
runCell(Bench *b, int isInsert, int perTxn, int nRows, unsigned *seed)
{
	sqlite3_stmt *stmt = isInsert ? b->insert : b->update;
	double		start = now();
	int			done = 0;

	sqlite3_bind_int64(stmt, isInsert ? 2 : 1, 5);
	if (isInsert)
		sqlite3_bind_int(stmt, 1, 0);
	while (done < nRows)
	{
		step(b->db, b->begin);
		for (int i = 0; i < perTxn; i++, done++)
		{
			if (!isInsert)
			{
				/* a cheap LCG: the same ids for every variant of a cell */
				*seed = *seed * 1103515245u + 12345u;
				sqlite3_bind_int(stmt, 2, (int) ((*seed >> 8) % TABLE_ROWS) + 1);
			}
			step(b->db, stmt);
		}
		step(b->db, b->commit);
	}
	return (double) nRows / (now() - start);
}

/* whether ONLY ("fenced/update/1/", "fenced/", "fen" or "") can pick one of variant's cells */
static int
variantSelected(const char *variant, const char *only)
{
	size_t		n = strlen(variant);
	size_t		m = strlen(only);

	if (m <= n)
		return strncmp(variant, only, m) == 0;
	return strncmp(variant, only, n) == 0 && only[n] == '/';
}

static void
closeBench(Bench *b)
{
	sqlite3_finalize(b->begin);
	sqlite3_finalize(b->commit);
	sqlite3_finalize(b->update);
	sqlite3_finalize(b->insert);
	if (sqlite3_close(b->db) != SQLITE_OK)
		die(b->db, "close");
}

/*
 * Memory: one connection, per-row fences over 10000 resources ('m-' || id),
 * nTxn single-row transactions after a warm-up of 2 x 10000; print
 * sqlite3_memory_used() at doubling points.
 */
static void
memoryRun(const char *dir, const char *extension, int fenced, int nTxn)
{
	sqlite3    *db = openDb(dir, fenced ? "mem_fenced" : "mem_plain", extension);
	sqlite3_stmt *begin;
	sqlite3_stmt *commit;
	sqlite3_stmt *update;
	const char *name = fenced ? "fenced" : "plain";
	int			next = 1000;

	exec(db, "CREATE TABLE m(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, tok INTEGER);"
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 10000)"
		 " INSERT INTO m SELECT i, 0, 5 FROM g");
	if (fenced)
		exec(db, "SELECT fence_protect('m', 'tok', 'm-', 'id')");
	begin = prepare(db, "BEGIN");
	commit = prepare(db, "COMMIT");
	update = prepare(db, "UPDATE m SET n = n + 1, tok = ?1 WHERE id = ?2");
	sqlite3_bind_int64(update, 1, 5);
	for (int i = -2 * TABLE_ROWS; i < nTxn; i++)
	{
		step(db, begin);
		sqlite3_bind_int(update, 2, ((i + 2 * TABLE_ROWS) % TABLE_ROWS) + 1);
		step(db, update);
		step(db, commit);
		if (i + 1 == 0 || i + 1 == next || i + 1 == nTxn)
		{
			printf("sqlitemem\t%s\t%d\t%lld\n", name, i + 1,
				   (long long) sqlite3_memory_used());
			if (i + 1 == next)
				next *= 4;
		}
	}
	sqlite3_finalize(begin);
	sqlite3_finalize(commit);
	sqlite3_finalize(update);
	if (sqlite3_close(db) != SQLITE_OK)
		die(db, "close");
}

int
main(int argc, char **argv)
{
	static const struct
	{
		const char *op;
		int			isInsert;
		int			perTxn;
		int			rows;
	}			cells[] =
	{
		{"update", 0, 1, 20000},
		{"update", 0, 1000, 100000},
		{"insert", 1, 1, 20000},
		{"insert", 1, 1000, 100000},
	};
	Bench		benches[N_VARIANTS];
	const char *extension;
	const char *dir;
	int			firstRun;
	int			lastRun;
	double		scale;
	int			memTxns;
	const char *only;
	void	   *heapPad;

	if (argc != 6 && argc != 7)
	{
		fprintf(stderr, "usage: %s EXTENSION DIRECTORY RUNS SCALE MEMTXNS [ONLY]\n", argv[0]);
		return 2;
	}
	/*
	 * SQLITE_BENCH_HEAP_PAD=N: N bytes allocated first, which moves every
	 * later allocation of the process (SQLite's pages, statements, fence's
	 * state) to another offset within its page. A line's place in the L1
	 * data cache is its offset within the page, so which lines evict each
	 * other is fixed by these offsets: in callgrind's simulation, the floor's
	 * misses per row at 1000 rows per transaction ranged from 61 to 70 over
	 * ten such layouts, about 3% of a row's time. ASLR moves the heap by
	 * whole pages only, so one layout would hold for every run of a build;
	 * bench/run.sh varies N between runs instead (the same N for every
	 * variant of a run).
	 */
	heapPad = getenv("SQLITE_BENCH_HEAP_PAD") ? malloc((size_t) atoi(getenv("SQLITE_BENCH_HEAP_PAD")) + 1) : NULL;
	extension = argv[1];
	dir = argv[2];
	if (sscanf(argv[3], "%d-%d", &firstRun, &lastRun) != 2)
	{
		firstRun = 1;
		lastRun = atoi(argv[3]);
	}
	scale = atof(argv[4]);
	memTxns = atoi(argv[5]);
	only = argc == 7 ? argv[6] : "";

	for (int v = 0; v < N_VARIANTS; v++)
		benches[v].db = NULL;
	if (lastRun >= firstRun)
		for (int v = 0; v < N_VARIANTS; v++)
			if (variantSelected(variantNames[v], only))
				setupBench(&benches[v], dir, extension, v);
	for (int run = firstRun; run <= lastRun; run++)
		for (size_t c = 0; c < sizeof(cells) / sizeof(cells[0]); c++)
		{
			int			nRows = (int) (cells[c].rows * scale);

			nRows -= nRows % cells[c].perTxn;
			if (nRows < cells[c].perTxn)
				nRows = cells[c].perTxn;
			for (int k = 0; k < N_VARIANTS; k++)
			{
				int			v = (k + run) % N_VARIANTS;
				unsigned	seed = (unsigned) (run * 7919 + (int) c);
				char		label[64];
				double		rate;

				if (benches[v].db == NULL)
					continue;
				snprintf(label, sizeof(label), "%s/%s/%d/", benches[v].name, cells[c].op,
						 cells[c].perTxn);
				if (strncmp(label, only, strlen(only)) != 0)
					continue;
				rate = runCell(&benches[v], cells[c].isInsert, cells[c].perTxn, nRows, &seed);
				printf("sqlite\t%d\t%s\t%d\t%s\t%.0f\n", run, cells[c].op, cells[c].perTxn,
					   benches[v].name, rate);
				fflush(stdout);
			}
		}
	for (int v = 0; v < N_VARIANTS; v++)
		if (benches[v].db != NULL)
			closeBench(&benches[v]);
	if (memTxns > 0)
	{
		memoryRun(dir, extension, 0, memTxns);
		memoryRun(dir, extension, 1, memTxns);
	}
	printf("sqliteversion\t%s\n", sqlite3_libversion());
	free(heapPad);
	return 0;
}
