/*
 * fence_init.c
 *
 * The top of the SQLite extension: the entry point sqlite3_fence_init, the
 * table of SQL functions it registers (their code is in the files below),
 * and the hooks through which fence_held.c, which learns where each
 * transaction ends, tells the files above it.
 *
 * Provides: sqlite3_fence_init, the one symbol fence.so exports.
 *
 * Floors: a file calls only files on lower floors, never one on its own
 * (`farm-studio look sqlite_ext` draws the same):
 *
 *   6  fence_init.c         entry point, registration, hooks
 *   5  fence_lease.c        fence_acquire, fence_renew, fence_release
 *   4  fence.c              fence_check, fence_try, fence_current,
 *                           fence_reset, the guard functions
 *   3  fence_accept.c       fence_tokens and the accept path
 *      fence_guard.c        admission of a guard call
 *      fence_protect.c      fence_protect, fence_unprotect
 *      fence_stats.c        fence_stats
 *   2  fence_held.c         the transaction's fences (fence_held, fence_txn,
 *                           fence_join), the change detector
 *      fence_cache.c        what a connection remembers of fence_tokens
 *      fence_schema_read.c  reads of the schema
 *   1  fence_sqlite.h       the shared state (FenceConn) and declarations
 */
#include "fence_sqlite.h"

#include <string.h>
#ifndef _WIN32
#include <sys/stat.h>
#endif

SQLITE_EXTENSION_INIT3

/* ---------------------------------------------------------------------
 * Hooks (fence_held.c calls them; FenceHooks in fence_sqlite.h)
 * ------------------------------------------------------------------ */

static void
hookFinalize(FenceConn *conn)
{
	fenceFinalizeStatements(conn);
	fenceGuardFinalize(conn);
	fenceLeaseFinalize(conn);
}

static void
hookFree(FenceConn *conn)
{
	fenceUndoForget(conn);
	sqlite3_free(conn->undo.a);
	conn->undo.a = NULL;
	fenceCacheFree(conn);
	fenceGuardFree(conn);
	fenceStatsFree(conn);
}

static void
hookTxnStartOver(FenceConn *conn)
{
	fenceUndoForget(conn);
	fenceGuardTxnEnded(conn);
}

static void
hookRolledBack(FenceConn *conn)
{
	fenceGuardRolledBack(conn);
	fenceCacheTxnEnd(conn, 0);
}

static void
hookRolledBackTo(FenceConn *conn)
{
	fenceGuardRolledBack(conn);
	fenceCacheRolledBackTo(conn);
}

static const FenceHooks fenceHooks = {
	hookFinalize, hookFree, hookTxnStartOver, fenceCacheTxnEnd, hookRolledBack,
	hookRolledBackTo, fenceConnRelease
};

/* ---------------------------------------------------------------------
 * Registration
 * ------------------------------------------------------------------ */

/*
 * fence_loaded(): the connection's FenceConn as an SQLite pointer value of
 * type FENCE_CONN_POINTER (fenceAlreadyLoaded). Only C code can make a
 * pointer value of that type; to SQL it reads as NULL.
 */
static void
fenceLoadedFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void) argc;
	(void) argv;
	sqlite3_result_pointer(ctx, sqlite3_user_data(ctx), FENCE_CONN_POINTER, NULL);
}

/* registered after fence.c's (fenceCoreFunctions); fence_loaded last, saying all are there */
static const FenceFunction initFunctions[] = {
	{"fence_protect", 3, FENCE_APP_WRITES, fenceProtectFunc},
	{"fence_protect", 4, FENCE_APP_WRITES, fenceProtectFunc},
	{"fence_unprotect", 1, FENCE_APP_WRITES, fenceUnprotectFunc},
	{"fence_acquire", 3, FENCE_APP_WRITES, fenceAcquireFunc},
	{"fence_renew", 4, FENCE_APP_WRITES, fenceRenewFunc},
	{"fence_release", 3, FENCE_APP_WRITES, fenceReleaseFunc},
	{"fence_loaded", 0, FENCE_APP_READS | SQLITE_DIRECTONLY, fenceLoadedFunc},
};
#define N_INIT_FUNCTIONS ((int) (sizeof(initFunctions) / sizeof(initFunctions[0])))
#define FUNCTION_AT(i) ((i) < nCore ? &aCore[i] : &initFunctions[(i) - nCore])

/*
 * FenceConn, zeroed, at the start of a cache line: its first two lines hold
 * what a statement of a many-statement transaction reads (fence_sqlite.h).
 * sqlite3_malloc's memory is aligned to 8 bytes only.
 */
#define FENCE_CACHE_LINE 64
_Static_assert(offsetof(FenceConn, txn.pJoined) == FENCE_CACHE_LINE,
			   "a memo-answered guard call reads FenceConn's first cache line only");
_Static_assert(offsetof(FenceConn, txn.held.n_entries) + sizeof(int) <= 2 * FENCE_CACHE_LINE,
			   "a statement savepoint reads FenceConn's second cache line only");

static FenceConn *
fenceConnAlloc(void)
{
	char	   *p = sqlite3_malloc64(sizeof(FenceConn) + FENCE_CACHE_LINE - 1);
	FenceConn  *conn;

	if (p == NULL)
		return NULL;
	conn = (FenceConn *) (p + ((FENCE_CACHE_LINE - (uintptr_t) p % FENCE_CACHE_LINE) %
							   FENCE_CACHE_LINE));
	memset(conn, 0, sizeof(*conn));
	conn->pAlloc = p;
	return conn;
}

/*
 * A connection whose main database takes no file locks, or not the locks
 * every other connection to the file takes: the URI parameter nolock=1, the
 * unix-none VFS, or a file with more than one name (a hard link: SQLite
 * names the WAL and its lock index after the path, so in WAL mode each name
 * has its own; refused in every mode, since the mode can change). SQLite's single writer, which orders a
 * fenced transaction after every accept it saw and before every later one
 * (a commit after a newer token fails as BUSY or stale), is then gone
 * between this connection and the others of the file: in rollback-journal
 * mode a transaction fenced at 10 committed after another connection had
 * committed 20. fence does not load on such a connection, so a protected
 * table's writes fail to prepare there. The error message, or NULL.
 */
static char *
fenceLocksOff(sqlite3 *db)
{
	const char *zFile = sqlite3_db_filename(db, "main");
	char	   *zVfs = NULL;
	char	   *zMsg = NULL;
	int			bNoVfsLocks;

	if (sqlite3_file_control(db, "main", SQLITE_FCNTL_VFSNAME, &zVfs) != SQLITE_OK)
		zVfs = NULL;
	/* the name of each VFS in a stack, joined by "/": any layer may be unix-none */
	bNoVfsLocks = zVfs != NULL && (strcmp(zVfs, "unix-none") == 0 ||
								   strstr(zVfs, "/unix-none") != NULL ||
								   strncmp(zVfs, "unix-none/", 10) == 0);
	if ((zFile != NULL && sqlite3_uri_boolean(zFile, "nolock", 0)) || bNoVfsLocks)
		zMsg = sqlite3_mprintf("fence not loaded: %s turns off the file locks that order "
							   "fences; open the database without it", bNoVfsLocks ? "the unix-none VFS" :
							   "nolock=1");
#ifndef _WIN32
	else if (zFile != NULL && zFile[0] != '\0')
	{
		struct stat st;

		if (stat(zFile, &st) == 0 && st.st_nlink > 1)
			zMsg = sqlite3_mprintf("fence not loaded: \"%s\" has %lu hard links, whose "
								   "connections do not exclude each other; remove the other links",
								   zFile, (unsigned long) st.st_nlink);
	}
#endif
	sqlite3_free(zVfs);
	return zMsg;
}

/*
 * Is fence already loaded on db? Loading it again must be harmless (SPEC.md
 * "No way around the fence"): registering the modules again would make
 * SQLite destroy the first FenceConn while the open transaction, its
 * savepoints and the functions registered the first time still point at
 * it. So a second load finds the first by calling fence_loaded() and keeps
 * it. Returns SQLITE_OK with *pLoaded set, or the error that kept us from
 * asking (out of memory, say), in which case nothing was changed.
 */
static int
fenceAlreadyLoaded(sqlite3 *db, int *pLoaded)
{
	sqlite3_stmt *stmt = NULL;
	int			rc;

	*pLoaded = 0;
	rc = sqlite3_prepare_v2(db, "SELECT fence_loaded()", -1, &stmt, NULL);
	if (rc == SQLITE_ERROR)
	{
		/* "no such function": not loaded yet */
		sqlite3_finalize(stmt);
		return SQLITE_OK;
	}
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW)
	{
		*pLoaded = sqlite3_value_pointer(sqlite3_column_value(stmt, 0),
										 FENCE_CONN_POINTER) != NULL;
		rc = SQLITE_OK;
	}
	sqlite3_finalize(stmt);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

FENCE_EXPORT int
sqlite3_fence_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi)
{
	FenceConn  *conn;
	const FenceFunction *aCore;
	int			nCore = fenceCoreFunctions(&aCore);
	int			i;
	int			rc;
	int			bLoaded;

	SQLITE_EXTENSION_INIT2(pApi);

	rc = fenceAlreadyLoaded(db, &bLoaded);
	if (rc != SQLITE_OK)
	{
		*pzErrMsg = sqlite3_mprintf("fence: cannot tell whether fence is already loaded "
									"on this connection: %s", sqlite3_errstr(rc));
		return rc;
	}
	if (bLoaded)
		return SQLITE_OK;		/* the first load's state stays in charge */
	/* older libraries lack calls fence makes (sqlite3_db_name is 3.39's) */
	if (sqlite3_libversion_number() < 3040000)
	{
		*pzErrMsg = sqlite3_mprintf("fence not loaded: SQLite %s is older than 3.40",
									sqlite3_libversion());
		return SQLITE_ERROR;
	}
	if ((*pzErrMsg = fenceLocksOff(db)) != NULL)
		return SQLITE_ERROR;

	conn = fenceConnAlloc();
	if (conn == NULL)
		return SQLITE_NOMEM;
	conn->db = db;
	conn->pHooks = &fenceHooks;
	conn->cache.gen = 1;
	conn->memo.guardEpoch = 1;

	/* from here on the fence_held module owns conn, even when this fails */
	rc = fenceHeldRegister(db, conn);
	if (rc == SQLITE_OK)
		rc = fenceStatsRegister(db, conn);
	if (rc != SQLITE_OK)
	{
		*pzErrMsg = sqlite3_mprintf("fence: cannot register fence_held: %s",
									sqlite3_errstr(rc));
		fenceHeldUnregister(db);
		return rc;
	}
	for (i = 0; i < N_INIT_FUNCTIONS + nCore; i++)
	{
		const FenceFunction *f = FUNCTION_AT(i);

		rc = sqlite3_create_function_v2(db, f->name, f->nArg, f->flags, conn,
										f->xFunc, NULL, NULL, NULL);
		if (rc != SQLITE_OK)
		{
			*pzErrMsg = sqlite3_mprintf("fence: cannot register %s/%d: %s",
										f->name, f->nArg, sqlite3_errmsg(db));
			break;
		}
	}
	if (rc == SQLITE_OK)
	{
		/*
		 * Connecting now reads the schema, which another connection's lock
		 * may forbid; loading must not fail for that. Each use connects
		 * first (fenceHeldConnect) and reports what stops it then.
		 */
		(void) fenceHeldConnect(conn);
		(void) fenceHeldCreateEnlist(conn);	/* only outside a transaction */
	}
	if (rc != SQLITE_OK)
	{
		/*
		 * A failed load is undone whole: SQLite unmaps the library after a
		 * failed init, so no function may stay bound to its code or to conn,
		 * which removing the module frees. Removing a function that exists
		 * allocates nothing, so this cannot fail half way.
		 */
		while (i-- > 0)
		{
			const FenceFunction *f = FUNCTION_AT(i);

			sqlite3_create_function_v2(db, f->name, f->nArg, f->flags, NULL, NULL, NULL, NULL,
									   NULL);
		}
		fenceHeldUnregister(db);
	}
	return rc;
}
