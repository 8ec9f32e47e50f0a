/*
 * sqlite_runtime.c
 *
 * Runtime attacks on the SQLite extension that need a C host: allocation
 * failures injected at every allocation of a scripted workload, loading the
 * extension twice (also while allocations fail), sqlite3_close_v2() with
 * statements still open, and loading it into a library that says it is
 * older than 3.40. Built and run under ASan and UBSan by make
 * check, so a use-after-free or a leak fails the run as surely as a broken
 * invariant does.
 *
 *   fence_runtime EXTENSION DIR
 *
 * DIR is a scratch directory for database files. Prints "ok - ..." or
 * "not ok - ..." per check (tests/run_all.sh counts them).
 *
 * The invariant is always checked on what committed, read back through a
 * fresh connection once the workload's connection is closed: every row of
 * the protected table was written at a token no higher than the committed
 * highest, rows appear in commit order with tokens that never decrease, no
 * write that needed a fence it did not hold is there, and the highest never
 * went below its starting value.
 */
#include <sqlite3.h>
#define SQLITE_CORE 1			/* sqlite3_api_routines, without the API macros */
#include <sqlite3ext.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *extensionPath;
static const char *scratchDir;
static int	failures;

static void
report(int ok, const char *what, const char *detail)
{
	printf("%s - sqlite runtime: %s\n", ok ? "ok" : "not ok", what);
	if (!ok)
	{
		failures++;
		if (detail && *detail)
			printf("#   %s\n", detail);
	}
	fflush(stdout);
}

/* ---------------------------------------------------------------------
 * A counting allocator that fails the Nth allocation once armed
 * ------------------------------------------------------------------ */

static sqlite3_mem_methods defaultMem;
static long allocCount;			/* allocations since arming */
static long failAt;				/* 0: never fail */
static int	armed;
static int	failed;				/* an injected failure happened */

static void *
countingMalloc(int n)
{
	if (armed && ++allocCount == failAt)
	{
		failed = 1;
		return NULL;
	}
	return defaultMem.xMalloc(n);
}

static void *
countingRealloc(void *p, int n)
{
	if (armed && ++allocCount == failAt)
	{
		failed = 1;
		return NULL;
	}
	return defaultMem.xRealloc(p, n);
}

static void
arm(long at)
{
	allocCount = 0;
	failAt = at;
	failed = 0;
	armed = 1;
}

static void
disarm(void)
{
	armed = 0;
}

static void
installAllocator(void)
{
	sqlite3_mem_methods m;

	sqlite3_config(SQLITE_CONFIG_GETMALLOC, &defaultMem);
	m = defaultMem;
	m.xMalloc = countingMalloc;
	m.xRealloc = countingRealloc;
	if (sqlite3_config(SQLITE_CONFIG_MALLOC, &m) != SQLITE_OK)
	{
		fprintf(stderr, "sqlite_runtime: cannot install the allocator\n");
		exit(2);
	}
	/* without lookaside every small allocation reaches the allocator */
	sqlite3_config(SQLITE_CONFIG_LOOKASIDE, 0, 0);
}

/* ---------------------------------------------------------------------
 * Connections
 * ------------------------------------------------------------------ */

static sqlite3_int64 queryInt(sqlite3 *db, const char *sql, int *prc);
static char dbPath[4096];
static char basePath[4096];

static sqlite3 *
openDb(const char *path)
{
	sqlite3    *db = NULL;

	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
	{
		sqlite3_close(db);
		return NULL;
	}
	sqlite3_enable_load_extension(db, 1);
	return db;
}

static int
loadFence(sqlite3 *db, char **pzErr)
{
	return sqlite3_load_extension(db, extensionPath, NULL, pzErr);
}

static int
execOk(sqlite3 *db, const char *sql, char *err, size_t nErr)
{
	char	   *zErr = NULL;
	int			rc = sqlite3_exec(db, sql, NULL, NULL, &zErr);

	if (rc != SQLITE_OK && err)
		snprintf(err, nErr, "%s: %s", sql, zErr ? zErr : sqlite3_errstr(rc));
	sqlite3_free(zErr);
	return rc == SQLITE_OK;
}

static int
copyFile(const char *from, const char *to)
{
	FILE	   *in = fopen(from, "rb");
	FILE	   *out = in ? fopen(to, "wb") : NULL;
	char		buf[65536];
	size_t		n;
	int			ok = in && out;

	while (ok && (n = fread(buf, 1, sizeof(buf), in)) > 0)
		ok = fwrite(buf, 1, n, out) == n;
	if (in)
		fclose(in);
	if (out && fclose(out) != 0)
		ok = 0;
	return ok;
}

static void
removeDb(const char *path)
{
	char		p[4200];

	remove(path);
	snprintf(p, sizeof(p), "%s-journal", path);
	remove(p);
	snprintf(p, sizeof(p), "%s-wal", path);
	remove(p);
	snprintf(p, sizeof(p), "%s-shm", path);
	remove(p);
}

/*
 * The starting state: t protected on resource r, which is at 10, one row
 * written at 10; q never fenced.
 */
static int
makeBase(char *err, size_t nErr)
{
	sqlite3    *db;
	int			ok;

	removeDb(basePath);
	db = openDb(basePath);
	if (db == NULL)
	{
		snprintf(err, nErr, "cannot open %s", basePath);
		return 0;
	}
	ok = loadFence(db, NULL) == SQLITE_OK &&
		execOk(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, tok INTEGER, v TEXT);"
			   "SELECT fence_protect('t', 'tok', 'r');"
			   "INSERT INTO t(id, tok, v) VALUES (1, 10, 'base');", err, nErr);
	if (sqlite3_close(db) != SQLITE_OK)
	{
		snprintf(err, nErr, "sqlite3_close of the base connection is busy");
		ok = 0;
	}
	return ok;
}

/*
 * What committed, held to the invariant; returns 1 when it holds, else
 * describes the first breach in err.
 */
static int
checkCommitted(const char *path, char *err, size_t nErr)
{
	sqlite3    *db = openDb(path);
	sqlite3_stmt *stmt = NULL;
	sqlite3_int64 highest = -1;
	sqlite3_int64 last = -1;
	int			ok = 1;
	int			rc;

	if (db == NULL)
	{
		snprintf(err, nErr, "cannot reopen %s", path);
		return 0;
	}
	/* read without the extension: what is in the file */
	rc = sqlite3_prepare_v2(db, "SELECT token FROM fence_tokens WHERE resource = 'r'", -1, &stmt, NULL);
	if (rc == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW)
		highest = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	if (highest < 10)
	{
		snprintf(err, nErr, "the highest of r is %lld, below the 10 it started at",
				 (long long) highest);
		ok = 0;
	}
	rc = sqlite3_prepare_v2(db, "SELECT id, tok, v FROM t ORDER BY id", -1, &stmt, NULL);
	while (ok && rc == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW)
	{
		sqlite3_int64 tok = sqlite3_column_int64(stmt, 1);
		const char *v = (const char *) sqlite3_column_text(stmt, 2);

		if (v && (strncmp(v, "unfenced", 8) == 0 || strcmp(v, "rolled-back") == 0))
		{
			snprintf(err, nErr, "row %lld holds \"%s\": a write that must not commit did",
					 (long long) sqlite3_column_int64(stmt, 0), v);
			ok = 0;
		}
		else if (tok > highest)
		{
			snprintf(err, nErr, "row %lld was written at %lld, above the committed highest %lld",
					 (long long) sqlite3_column_int64(stmt, 0), (long long) tok, (long long) highest);
			ok = 0;
		}
		else if (tok < last)
		{
			snprintf(err, nErr, "row %lld at token %lld committed after a row at %lld",
					 (long long) sqlite3_column_int64(stmt, 0), (long long) tok, (long long) last);
			ok = 0;
		}
		last = tok;
	}
	sqlite3_finalize(stmt);
	if (ok)
	{
		rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM t WHERE id = 1", -1, &stmt, NULL);
		if (rc == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_int(stmt, 0) != 1)
		{
			snprintf(err, nErr, "row 1 was deleted by a transaction that held no fence");
			ok = 0;
		}
		sqlite3_finalize(stmt);
	}
	if (ok)
	{
		rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM fence_tokens WHERE resource = 'q'", -1, &stmt, NULL);
		if (rc == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_int(stmt, 0) != 0)
		{
			snprintf(err, nErr, "q was fenced in a savepoint rolled back, yet committed");
			ok = 0;
		}
		sqlite3_finalize(stmt);
	}
	if (ok)
	{
		rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, NULL);
		if (rc != SQLITE_OK || sqlite3_step(stmt) != SQLITE_ROW ||
			strcmp((const char *) sqlite3_column_text(stmt, 0), "ok") != 0)
		{
			snprintf(err, nErr, "integrity_check fails");
			ok = 0;
		}
		sqlite3_finalize(stmt);
	}
	sqlite3_close(db);
	return ok;
}

/* ---------------------------------------------------------------------
 * Out of memory at every allocation
 * ------------------------------------------------------------------ */

/*
 * The workload is what a careful application does: transactions made of
 * units, each unit in its own savepoint. An error inside a unit rolls back
 * to its savepoint and the transaction goes on (the usual "try this write"
 * pattern); a unit marked undo is rolled back to even when it succeeds; an
 * error of BEGIN, SAVEPOINT, ROLLBACK TO, RELEASE or COMMIT rolls the whole
 * transaction back. So a unit that runs after an undone unit holds no fence
 * the undone one took, and a write named "unfenced..." or "rolled-back" can
 * only commit if fence believed it held what a savepoint undid. (A unit
 * that goes on after an error may find its transaction gone, SQLite having
 * rolled it all back on SQLITE_NOMEM, and then writes in autocommit: its
 * writes are judged by their tokens alone.)
 */
typedef struct Unit
{
	const char *sql[16];
	int			undo;			/* 1: roll back to the unit's savepoint at its end */
} Unit;

/* runs every statement whatever fails, then rolls back to the unit */
#define UNIT_GO_ON_AND_UNDO 2

typedef struct Txn
{
	int			autocommit;		/* one statement, no BEGIN */
	Unit		units[8];
} Txn;

static const Txn workload[] = {
	/*
	 * The connection's first fence, so that joining the transaction must
	 * allocate the savepoint marks; the application retries after an error
	 * inside the unit, then undoes the unit.
	 */
	{0, {
		{{"SAVEPOINT s1", "SELECT fence_check('r', 12)", "SELECT fence_check('r', 12)"},
		 UNIT_GO_ON_AND_UNDO},
		{{"UPDATE t SET v = 'unfenced-9' WHERE id = 1"}, 0},
	}},
	{0, {{{"SELECT fence_check('p', 1)"}, 0}}},
	/* the first fence of a transaction taken by a guard, deep in savepoints */
	{0, {
		{{"SAVEPOINT s1", "SAVEPOINT s2", "SAVEPOINT s3", "SAVEPOINT s4", "SAVEPOINT s5",
		  "SAVEPOINT s6", "SAVEPOINT s7", "SAVEPOINT s8", "SAVEPOINT s9", "SAVEPOINT s10",
		  "SAVEPOINT s11", "INSERT INTO t(tok, v) VALUES (16, 'rolled-back')",
		  "ROLLBACK TO s1", "UPDATE t SET v = 'unfenced-7' WHERE id = 1"}, 0},
	}},
	/* the same, by an application that goes on after an error in the unit */
	{0, {
		{{"SAVEPOINT s1", "SAVEPOINT s2", "SAVEPOINT s3", "SAVEPOINT s4", "SAVEPOINT s5",
		  "SAVEPOINT s6", "SAVEPOINT s7", "SAVEPOINT s8", "SAVEPOINT s9", "SAVEPOINT s10",
		  "SAVEPOINT s11", "SAVEPOINT s12", "SAVEPOINT s13",
		  "INSERT INTO t(tok, v) VALUES (16, 'at-16 unless rolled back')",
		  "SELECT fence_check('r', 17)"}, UNIT_GO_ON_AND_UNDO},
		{{"UPDATE t SET v = 'unfenced-8' WHERE id = 1"}, 0},
	}},
	/* deeper than the savepoint marks fence keeps at first: they must grow */
	{0, {
		{{"SAVEPOINT s1", "SELECT fence_check('r', 12)", "SAVEPOINT s2", "SAVEPOINT s3",
		  "SAVEPOINT s4", "SAVEPOINT s5", "SAVEPOINT s6", "SAVEPOINT s7", "SAVEPOINT s8",
		  "SAVEPOINT s9", "SAVEPOINT s10", "SELECT fence_check('r', 14)",
		  "ROLLBACK TO s1", "INSERT INTO t(tok, v) VALUES (18, 'at-18')"}, 0},
		{{"INSERT INTO t(tok, v) VALUES (15, 'at-15')"}, 0},
	}},
	{0, {
		{{"SELECT fence_check('r', 20)", "INSERT INTO t(tok, v) VALUES (20, 'rolled-back')"}, 1},
		{{"UPDATE t SET v = 'unfenced-1' WHERE id = 1"}, 0},
		{{"SELECT fence_check('r', 30)"}, 0},
		{{"SAVEPOINT inner", "SELECT fence_check('q', 7)", "RELEASE inner"}, 1},
		{{"INSERT INTO t(tok, v) VALUES (30, 'at-30')"}, 0},
	}},
	{0, {
		{{"SELECT fence_try('r', 25)"}, 0},
		{{"UPDATE t SET v = 'fenced-if-25-was-accepted' WHERE id = 1"}, 0},
		{{"INSERT INTO t(tok, v) VALUES (25, 'at-25')"}, 0},
	}},
	{0, {
		{{"SELECT fence_check('r', 40)"}, 1},
		{{"UPDATE t SET v = 'unfenced-3' WHERE id = 1"}, 0},
		{{"SELECT fence_check('r', 40)"}, 0},
		{{"INSERT INTO t(tok, v) VALUES (40, 'at-40')"}, 0},
	}},
	{1, {{{"INSERT INTO t(tok, v) VALUES (35, 'at-35')"}, 0}}},
	{0, {
		{{"INSERT INTO t(tok, v) VALUES (50, 'rolled-back')"}, 1},
		{{"DELETE FROM t WHERE id = 1"}, 0},
		{{"UPDATE t SET v = 'unfenced-4'"}, 0},
		{{"SAVEPOINT inner", "SELECT fence_check('r', 60)", "ROLLBACK TO inner",
		  "UPDATE t SET v = 'unfenced-5'"}, 0},
	}},
};

static int
step(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *stmt = NULL;
	int			rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);

	if (rc == SQLITE_OK)
	{
		while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
			;
		if (rc == SQLITE_DONE)
			rc = SQLITE_OK;
	}
	if (getenv("FENCE_RT_TRACE"))
		fprintf(stderr, "# [alloc %ld] %s -> %s (%s)\n", allocCount, sql,
				sqlite3_errstr(rc), rc == SQLITE_OK ? "" : sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
	return rc;
}

static void
runWorkload(sqlite3 *db)
{
	size_t		i;

	for (i = 0; i < sizeof(workload) / sizeof(workload[0]); i++)
	{
		const Txn  *txn = &workload[i];
		int			u;
		int			broken = 0;

		if (txn->autocommit)
		{
			step(db, txn->units[0].sql[0]);
			continue;
		}
		if (step(db, "BEGIN") != SQLITE_OK)
			continue;
		for (u = 0; u < 8 && txn->units[u].sql[0] && !broken; u++)
		{
			const Unit *unit = &txn->units[u];
			int			k;
			int			failedInside = 0;

			if (step(db, "SAVEPOINT unit") != SQLITE_OK)
			{
				broken = 1;
				break;
			}
			for (k = 0; k < 16 && unit->sql[k] && (!failedInside || unit->undo == UNIT_GO_ON_AND_UNDO); k++)
				failedInside |= step(db, unit->sql[k]) != SQLITE_OK;
			if ((failedInside || unit->undo) && step(db, "ROLLBACK TO unit") != SQLITE_OK)
				broken = 1;
			else if (step(db, "RELEASE unit") != SQLITE_OK)
				broken = 1;
		}
		if (broken || step(db, "COMMIT") != SQLITE_OK)
			step(db, "ROLLBACK");
	}
}

/*
 * One run with allocation number at failing (0: none). Returns 1 when the
 * invariant held; *pFailed says whether the failure was reached.
 */
static int
oomRun(long at, int *pFailed, char *err, size_t nErr)
{
	sqlite3    *db;
	int			rc;
	char	   *zErr = NULL;

	removeDb(dbPath);
	if (!copyFile(basePath, dbPath))
	{
		snprintf(err, nErr, "cannot copy %s", basePath);
		return 0;
	}
	db = openDb(dbPath);
	if (db == NULL)
	{
		snprintf(err, nErr, "cannot open %s", dbPath);
		return 0;
	}
	arm(at);
	loadFence(db, &zErr);
	sqlite3_free(zErr);
	zErr = NULL;
	/* loading twice is harmless, also when it fails half way */
	loadFence(db, &zErr);
	sqlite3_free(zErr);
	runWorkload(db);
	disarm();
	*pFailed = failed;
	rc = sqlite3_close(db);
	if (rc != SQLITE_OK)
	{
		snprintf(err, nErr, "sqlite3_close: %s (a statement of fence's left open)",
				 sqlite3_errstr(rc));
		sqlite3_close_v2(db);
		return 0;
	}
	return checkCommitted(dbPath, err, nErr);
}

static void
testOutOfMemory(void)
{
	char		err[512] = "";
	char		what[600];
	long		at;
	int			reached = 1;
	int			ok = 1;
	long		breaches = 0;

	if (!makeBase(err, sizeof(err)))
	{
		report(0, "out of memory: the base database", err);
		return;
	}
	/* without a failure the workload must commit what it should */
	if (!oomRun(0, &reached, err, sizeof(err)))
	{
		report(0, "out of memory: the workload without failures keeps the invariant", err);
		return;
	}
	reached = 1;
	for (at = 1; reached; at++)
	{
		char		e[512] = "";

		if (!oomRun(at, &reached, e, sizeof(e)))
		{
			if (breaches++ == 0)
			{
				snprintf(err, sizeof(err), "allocation %ld failed: %s", at, e);
				ok = 0;
			}
		}
	}
	snprintf(what, sizeof(what),
			 "out of memory at each of the workload's %ld allocations in turn keeps the "
			 "invariant (%ld runs broke it)", at - 2, breaches);
	report(ok, what, err);
}

/* ---------------------------------------------------------------------
 * Out of memory during lease calls
 * ------------------------------------------------------------------ */

/*
 * Lease calls on the base database (r at 10): grants, a renew, a release,
 * a fenced first write at a granted token, a read of fence_stats, a renew
 * of a resource never leased, rolled back (a grant inside a transaction
 * is refused). Whatever
 * allocation fails, what committed must keep the lease rules: r's lease
 * token, when there is one, is above the 10 accepted before any grant and
 * no lower than r's highest accepted; the rolled-back resource m has no
 * lease; a lease call that failed changed nothing; and the connection
 * closes (no statement of fence's left open).
 */
static const char *const leaseWorkload[] = {
	"SELECT fence_acquire('r', 'a', 60000)",
	"SELECT fence_renew('r', 'a', 11, 60000)",
	"SELECT fence_acquire('r', 'b', 60000)",
	"SELECT fence_check('r', fence_acquire('r', 'a', 60000))",
	"SELECT * FROM fence_stats",
	"SELECT fence_release('r', 'a', 11)",
	"SELECT fence_acquire('r', 'b', 60000)",
	"BEGIN", "SELECT fence_renew('m', 'b', 1, 60000)", "ROLLBACK",
	"SELECT fence_acquire('r', 'b', 60000)",
};

/*
 * fence_leases as text, read with the allocator's counting paused, or NULL
 * (no table yet reads as "").
 */
static char *
leaseSnapshot(sqlite3 *db)
{
	sqlite3_stmt *stmt = NULL;
	char	   *z = NULL;
	int			wasArmed = armed;

	armed = 0;
	if (sqlite3_prepare_v2(db, "SELECT coalesce(group_concat(resource || ',' || holder || ',' || "
						   "token || ',' || expires_at, ';'), '') FROM main.fence_leases",
						   -1, &stmt, NULL) != SQLITE_OK)
		z = sqlite3_mprintf("");
	else if (sqlite3_step(stmt) == SQLITE_ROW)
		z = sqlite3_mprintf("%s", (const char *) sqlite3_column_text(stmt, 0));
	sqlite3_finalize(stmt);
	armed = wasArmed;
	return z;
}

static int
leaseOomRun(long at, int *pFailed, char *err, size_t nErr)
{
	sqlite3    *db;
	char	   *zErr = NULL;
	size_t		i;
	int			rc;
	sqlite3_int64 lease;
	sqlite3_int64 highest;
	sqlite3_int64 m;

	*err = '\0';
	removeDb(dbPath);
	if (!copyFile(basePath, dbPath) || (db = openDb(dbPath)) == NULL)
	{
		snprintf(err, nErr, "cannot copy or open %s", dbPath);
		return 0;
	}
	arm(at);
	loadFence(db, &zErr);
	sqlite3_free(zErr);
	for (i = 0; i < sizeof(leaseWorkload) / sizeof(leaseWorkload[0]); i++)
	{
		const char *sql = leaseWorkload[i];
		int			bLease = strstr(sql, "fence_check") == NULL &&
			(strstr(sql, "fence_acquire") || strstr(sql, "fence_renew") ||
			 strstr(sql, "fence_release"));
		char	   *before = bLease ? leaseSnapshot(db) : NULL;
		char	   *after;

		rc = step(db, sql);
		/* a lease call that failed changed nothing (read with allocations not counted) */
		if (rc != SQLITE_OK && before && (after = leaseSnapshot(db)) != NULL)
		{
			if (strcmp(before, after) != 0 && !*err)
				snprintf(err, nErr, "%s failed (%s) but changed fence_leases from [%s] to [%s]",
						 sql, sqlite3_errstr(rc), before, after);
			sqlite3_free(after);
		}
		sqlite3_free(before);
		/* a transaction that could not begin is skipped whole, as an application would */
		if (rc != SQLITE_OK && strcmp(sql, "BEGIN") == 0)
			while (strcmp(leaseWorkload[i], "COMMIT") != 0 &&
				   strcmp(leaseWorkload[i], "ROLLBACK") != 0)
				i++;
	}
	if (!sqlite3_get_autocommit(db))
		step(db, "ROLLBACK");
	disarm();
	*pFailed = failed;
	if ((rc = sqlite3_close(db)) != SQLITE_OK)
	{
		snprintf(err, nErr, "sqlite3_close: %s (a statement of fence's left open)",
				 sqlite3_errstr(rc));
		sqlite3_close_v2(db);
		return 0;
	}
	if (*err)
		return 0;
	db = openDb(dbPath);
	lease = queryInt(db, "SELECT coalesce((SELECT token FROM fence_leases WHERE resource = 'r'), -1)", &rc);
	highest = queryInt(db, "SELECT token FROM fence_tokens WHERE resource = 'r'", &rc);
	m = queryInt(db, "SELECT count(*) FROM fence_leases WHERE resource = 'm'", &rc);
	sqlite3_close(db);
	if (lease != -1 && (lease <= 10 || lease < highest))
	{
		snprintf(err, nErr, "r's lease token %lld is not above 10 and its highest %lld",
				 (long long) lease, (long long) highest);
		return 0;
	}
	if (highest < 10 || m > 0)
	{
		snprintf(err, nErr, "r's highest %lld, m's leases %lld", (long long) highest,
				 (long long) m);
		return 0;
	}
	return 1;
}

static void
testLeaseOutOfMemory(void)
{
	char		err[512] = "";
	char		what[600];
	long		at;
	int			reached = 1;
	int			ok = 1;
	long		breaches = 0;

	if (!makeBase(err, sizeof(err)) || !leaseOomRun(0, &reached, err, sizeof(err)))
	{
		report(0, "out of memory in lease calls: the workload without failures", err);
		return;
	}
	reached = 1;
	for (at = 1; reached; at++)
	{
		char		e[512] = "";

		if (!leaseOomRun(at, &reached, e, sizeof(e)) && breaches++ == 0)
		{
			snprintf(err, sizeof(err), "allocation %ld failed: %s", at, e);
			ok = 0;
		}
	}
	snprintf(what, sizeof(what),
			 "out of memory at each of the lease workload's %ld allocations in turn keeps "
			 "the lease rules (%ld runs broke them)", at - 2, breaches);
	report(ok, what, err);
}

/* ---------------------------------------------------------------------
 * Loading twice, close_v2 with statements open
 * ------------------------------------------------------------------ */

static sqlite3_int64
queryInt(sqlite3 *db, const char *sql, int *prc)
{
	sqlite3_stmt *stmt = NULL;
	sqlite3_int64 v = -1;

	*prc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
	if (*prc == SQLITE_OK)
	{
		*prc = sqlite3_step(stmt);
		if (*prc == SQLITE_ROW)
		{
			v = sqlite3_column_int64(stmt, 0);
			*prc = SQLITE_OK;
		}
	}
	sqlite3_finalize(stmt);
	return v;
}

static void
testLoadTwice(void)
{
	char		err[512] = "";
	sqlite3    *db;
	int			rc;
	sqlite3_int64 v;

	if (!makeBase(err, sizeof(err)))
	{
		report(0, "load twice: the base database", err);
		return;
	}
	removeDb(dbPath);
	copyFile(basePath, dbPath);
	db = openDb(dbPath);
	rc = loadFence(db, NULL);
	report(rc == SQLITE_OK, "load once", sqlite3_errmsg(db));
	execOk(db, "BEGIN; SELECT fence_check('r', 11);", NULL, 0);
	rc = loadFence(db, NULL);
	report(rc == SQLITE_OK, "load a second time, inside a fenced transaction", sqlite3_errmsg(db));
	/* still fenced: the second load changed nothing */
	v = queryInt(db, "SELECT count(*) FROM fence_held WHERE resource = 'r' AND token = 11", &rc);
	report(rc == SQLITE_OK && v == 1, "after the second load the transaction still holds r at 11",
		   sqlite3_errmsg(db));
	rc = execOk(db, "UPDATE t SET v = 'fenced' WHERE id = 1; COMMIT;", err, sizeof(err));
	report(rc, "a fenced write after loading twice commits", err);
	rc = loadFence(db, NULL);
	v = queryInt(db, "SELECT fence_current('r')", &rc);
	report(rc == SQLITE_OK && v == 11, "fence_current after a third load is 11", sqlite3_errmsg(db));
	rc = execOk(db, "BEGIN; SELECT fence_check('r', 9);", NULL, 0);
	report(!rc, "a stale token after loading three times is refused", NULL);
	execOk(db, "ROLLBACK", NULL, 0);
	rc = sqlite3_close(db);
	report(rc == SQLITE_OK, "sqlite3_close after loading three times", sqlite3_errstr(rc));
}

/*
 * sqlite3_close_v2 with the application's statements still open: the
 * connection becomes a zombie, and the extension's state must outlive it
 * until the last statement is finalized, with no leak and no use after free.
 */
static void
testCloseV2(void)
{
	char		err[512] = "";
	sqlite3    *db;
	sqlite3_stmt *pending = NULL;
	sqlite3_stmt *reader = NULL;
	int			rc;

	if (!makeBase(err, sizeof(err)))
	{
		report(0, "close_v2: the base database", err);
		return;
	}
	removeDb(dbPath);
	copyFile(basePath, dbPath);
	db = openDb(dbPath);
	loadFence(db, NULL);
	execOk(db, "BEGIN", NULL, 0);
	sqlite3_prepare_v2(db, "SELECT fence_check('r', 12)", -1, &pending, NULL);
	sqlite3_prepare_v2(db, "SELECT resource FROM fence_held", -1, &reader, NULL);
	sqlite3_step(pending);
	rc = sqlite3_step(reader);
	rc = sqlite3_close_v2(db);
	report(rc == SQLITE_OK, "sqlite3_close_v2 with a fence_check and a fence_held scan open",
		   sqlite3_errstr(rc));
	/* the zombie's statements still run safely, then go */
	sqlite3_step(reader);
	sqlite3_reset(pending);
	sqlite3_step(pending);
	sqlite3_finalize(reader);
	sqlite3_finalize(pending);
	/* the transaction never committed: r is still at 10 */
	report(checkCommitted(dbPath, err, sizeof(err)), "what the zombie connection committed", err);
	db = openDb(dbPath);
	rc = 0;
	report(queryInt(db, "SELECT token FROM fence_tokens WHERE resource = 'r'", &rc) == 10,
		   "the zombie's uncommitted fence at 12 did not commit", NULL);
	sqlite3_close(db);
}

/*
 * An SQLite older than 3.40 (the README's floor) lacks calls fence makes:
 * fence must refuse to load, registering nothing. The library here is
 * newer, so fence's entry point is handed SQLite's own API table (caught
 * from an auto-extension) with the version calls answering 3.39.4.
 */
static sqlite3_api_routines realApi;
static int	apiCaught;

static int
catchApi(sqlite3 *db, char **pzErr, const sqlite3_api_routines *pApi)
{
	(void) db;
	(void) pzErr;
	realApi = *pApi;
	apiCaught = 1;
	return SQLITE_OK;
}

static int
olderVersionNumber(void)
{
	return 3039004;
}

static const char *
olderVersion(void)
{
	return "3.39.4";
}

static void
testOlderLibrary(void)
{
	typedef int (*InitFn) (sqlite3 *, char **, const sqlite3_api_routines *);
	void	   *lib = dlopen(extensionPath, RTLD_NOW);
	InitFn		init = lib ? (InitFn) dlsym(lib, "sqlite3_fence_init") : NULL;
	sqlite3_api_routines older;
	sqlite3    *db = NULL;
	char	   *err = NULL;
	int			rc = -1;

	sqlite3_auto_extension((void (*) (void)) catchApi);
	sqlite3_open(":memory:", &db);
	sqlite3_cancel_auto_extension((void (*) (void)) catchApi);
	older = realApi;
	older.libversion_number = olderVersionNumber;
	older.libversion = olderVersion;
	if (init && apiCaught)
		rc = init(db, &err, &older);
	report(rc == SQLITE_ERROR && err && strstr(err, "older than 3.40") &&
		   sqlite3_exec(db, "SELECT fence_check('r', 1)", NULL, NULL, NULL) != SQLITE_OK,
		   "on an SQLite older than 3.40 fence refuses to load and registers nothing",
		   err ? err : dlerror());
	sqlite3_free(err);
	sqlite3_close(db);
	if (lib)
		dlclose(lib);
}

int
main(int argc, char **argv)
{
	const char *only = argc > 3 ? argv[3] : NULL;
	long		single = argc > 4 ? atol(argv[4]) : 0;

	if (argc < 3)
	{
		fprintf(stderr, "usage: %s EXTENSION DIR [oom|leaseoom|older|twice|closev2]\n", argv[0]);
		return 2;
	}
	extensionPath = argv[1];
	scratchDir = argv[2];
	snprintf(dbPath, sizeof(dbPath), "%s/runtime.db", scratchDir);
	snprintf(basePath, sizeof(basePath), "%s/base.db", scratchDir);
	installAllocator();
	sqlite3_initialize();

	if (!only || strcmp(only, "older") == 0)
		testOlderLibrary();
	if (!only || strcmp(only, "twice") == 0)
		testLoadTwice();
	if (!only || strcmp(only, "closev2") == 0)
		testCloseV2();
	if (single > 0 && only && strcmp(only, "leaseoom") == 0)
	{
		char		err[512] = "";
		int			reached = 0;

		report(makeBase(err, sizeof(err)) && leaseOomRun(single, &reached, err, sizeof(err)),
			   "one lease run with an allocation failure", err);
	}
	else if (single > 0)
	{
		/* oom N: one run failing allocation N, for a closer look */
		char		err[512] = "";
		int			reached = 0;

		report(makeBase(err, sizeof(err)) && oomRun(single, &reached, err, sizeof(err)),
			   "one run with an allocation failure", err);
	}
	else if (!only || strcmp(only, "oom") == 0)
		testOutOfMemory();
	if (single == 0 && (!only || strcmp(only, "leaseoom") == 0))
		testLeaseOutOfMemory();
	removeDb(dbPath);
	removeDb(basePath);
	return failures ? 1 : 0;
}
