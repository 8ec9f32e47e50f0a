/*
 * fence_held.c
 *
 * The fences the open transaction holds ("fenced on r at t", SPEC.md
 * Transaction scope), and the eponymous virtual table fence_held that ties
 * them to SQLite's own transaction and savepoint machinery.
 *
 * Why a virtual table: SQLite tells an extension when a transaction ends only
 * through sqlite3_commit_hook/sqlite3_rollback_hook, which hold one callback
 * each (installing ours would take the application's away), and the commit
 * hook does not fire for a transaction that wrote nothing. A virtual table
 * that has joined a transaction, by contrast, gets xCommit or xRollback when
 * it ends, read-only or not, and xSavepoint/xRelease/xRollbackTo for every
 * savepoint, including the statement savepoint that undoes a failed
 * statement. So the first accept of a transaction enlists the table by
 * running "DELETE FROM fence_txn WHERE 0" (fence_txn is a second name for
 * fence_held: see heldDisconnect for why there are two; the statement also
 * opens the write transaction on main), and from then on SQLite drives the
 * state:
 *   xSavepoint(k)  remembers how long the log was when savepoint k opened;
 *   xRollbackTo(k) truncates the log back to that length;
 *   xCommit, xRollback forget everything.
 * The state lives in memory and is never written to a TEMP table, because a
 * TEMP table written from inside another statement is not rolled back with
 * that statement unless it has its own statement journal.
 *
 * SELECT * FROM fence_held lists the fences the transaction holds. Rows
 * cannot be written: only fence's own code changes them.
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

/* The held-fence log (core/fence_held.c) takes SQLite's allocator. */
static void *
sqliteAlloc(size_t n)
{
	return sqlite3_malloc64(n);
}

static void *
sqliteRealloc(void *p, size_t n)
{
	return sqlite3_realloc64(p, n);
}

static void
sqliteFree(void *p)
{
	sqlite3_free(p);
}

const FenceAllocator fenceSqliteAllocator = {sqliteAlloc, sqliteRealloc, sqliteFree};

/* ---------------------------------------------------------------------
 * The fence_held virtual table.
 * ------------------------------------------------------------------ */

/*
 * A FenceConn lives as long as anything points at it: the fence_held module
 * (its destructor) and every connected table of either module. SQLite may
 * disconnect a table after the module is gone (a failed load's cleanup, or
 * a second registration, leaves the table on its deferred-disconnect list),
 * so the last of them frees it, not the module.
 */
static void
connRelease(FenceConn *conn)
{
	if (--conn->nRef > 0)
		return;
	fenceFinalizeStatements(conn);
	fenceUndoForget(conn);
	sqlite3_free(conn->aUndo);
	fence_held_free(&conn->held);
	fenceGuardFree(conn);
	sqlite3_free(conn->aMark);
	sqlite3_free(conn);
}

typedef struct HeldVtab
{
	sqlite3_vtab base;
	FenceConn  *conn;
} HeldVtab;

typedef struct HeldCursor
{
	sqlite3_vtab_cursor base;
	int			i;				/* current entry of the log */
	int			nEnd;			/* log length when the scan began */
} HeldCursor;

static int
heldConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
			sqlite3_vtab **ppVtab, char **pzErr)
{
	FenceConn  *conn = pAux;
	HeldVtab   *vtab;
	int			rc;

	(void) argc;
	(void) argv;
	(void) pzErr;
	rc = sqlite3_declare_vtab(db, "CREATE TABLE x(resource TEXT, token INTEGER)");
	if (rc != SQLITE_OK)
		return rc;
	/* a planted view or trigger must not be able to enlist or read it */
	sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
	vtab = sqlite3_malloc(sizeof(*vtab));
	if (vtab == NULL)
		return SQLITE_NOMEM;
	memset(vtab, 0, sizeof(*vtab));
	vtab->conn = conn;
	conn->nRef++;
	conn->bVtabConnected = 1;
	*ppVtab = &vtab->base;
	return SQLITE_OK;
}

/*
 * Called for the eponymous fence_held when the connection closes, before
 * SQLite checks for unfinalized statements: the one place an extension can
 * finalize the statements it caches, so that sqlite3_close() succeeds. It is
 * reached only because no cached statement names fence_held (a statement
 * that names a virtual table keeps it connected); the cached enlisting
 * statement names fence_txn instead.
 */
static int
heldDisconnect(sqlite3_vtab *pVtab)
{
	HeldVtab   *vtab = (HeldVtab *) pVtab;

	fenceFinalizeStatements(vtab->conn);
	vtab->conn->bVtabConnected = 0;
	connRelease(vtab->conn);
	sqlite3_free(vtab);
	return SQLITE_OK;
}

static int
txnConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
		   sqlite3_vtab **ppVtab, char **pzErr)
{
	FenceConn  *conn = pAux;
	int			bConnected = conn->bVtabConnected;
	int			rc = heldConnect(db, pAux, argc, argv, ppVtab, pzErr);

	conn->bVtabConnected = bConnected;	/* only fence_held's counts */
	return rc;
}

static int
txnDisconnect(sqlite3_vtab *pVtab)
{
	connRelease(((HeldVtab *) pVtab)->conn);
	sqlite3_free(pVtab);
	return SQLITE_OK;
}

static int
heldBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info)
{
	(void) pVtab;
	info->estimatedCost = 10.0;
	info->estimatedRows = 10;
	return SQLITE_OK;
}

static int
heldOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor)
{
	HeldCursor *cur = sqlite3_malloc(sizeof(*cur));

	(void) pVtab;
	if (cur == NULL)
		return SQLITE_NOMEM;
	memset(cur, 0, sizeof(*cur));
	*ppCursor = &cur->base;
	return SQLITE_OK;
}

static int
heldClose(sqlite3_vtab_cursor *cur)
{
	sqlite3_free(cur);
	return SQLITE_OK;
}

static FenceHeld *
cursorHeld(sqlite3_vtab_cursor *cur)
{
	return &((HeldVtab *) cur->pVtab)->conn->held;
}

/* Skip entries shadowed by a newer one and those no longer held. */
static void
cursorSettle(HeldCursor *cur)
{
	FenceHeld  *held = cursorHeld(&cur->base);

	/*
	 * A scan that takes fences (SELECT fence_check(...) FROM fence_held)
	 * appends to the log it reads: stop where the log ended when it began.
	 */
	if (cur->nEnd > held->n_entries)
		cur->nEnd = held->n_entries;
	while (cur->i < cur->nEnd && !fence_held_is_current(held, cur->i))
		cur->i++;
}

static int
heldFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr,
		   int argc, sqlite3_value **argv)
{
	HeldCursor *cur = (HeldCursor *) pCur;

	(void) idxNum;
	(void) idxStr;
	(void) argc;
	(void) argv;
	cur->i = 0;
	cur->nEnd = cursorHeld(pCur)->n_entries;
	cursorSettle(cur);
	return SQLITE_OK;
}

static int
heldNext(sqlite3_vtab_cursor *pCur)
{
	HeldCursor *cur = (HeldCursor *) pCur;

	cur->i++;
	cursorSettle(cur);
	return SQLITE_OK;
}

static int
heldEof(sqlite3_vtab_cursor *pCur)
{
	return ((HeldCursor *) pCur)->i >= ((HeldCursor *) pCur)->nEnd;
}

static int
heldColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int col)
{
	FenceHeldEntry *e = &cursorHeld(pCur)->entries[((HeldCursor *) pCur)->i];

	if (col == 0)
		sqlite3_result_text(ctx, e->resource, (int) e->len, SQLITE_TRANSIENT);
	else
		sqlite3_result_int64(ctx, e->token);
	return SQLITE_OK;
}

static int
heldRowid(sqlite3_vtab_cursor *pCur, sqlite_int64 *pRowid)
{
	*pRowid = ((HeldCursor *) pCur)->i;
	return SQLITE_OK;
}

/* Rows change only through fence's functions, never by DML. */
static int
heldUpdate(sqlite3_vtab *pVtab, int argc, sqlite3_value **argv, sqlite_int64 *pRowid)
{
	(void) argc;
	(void) argv;
	(void) pRowid;
	sqlite3_free(pVtab->zErrMsg);
	pVtab->zErrMsg = sqlite3_mprintf("fence_held is read-only: fences are taken "
									 "with fence_check() or a protected write");
	return SQLITE_READONLY;
}

static FenceConn *
vtabConn(sqlite3_vtab *pVtab)
{
	return ((HeldVtab *) pVtab)->conn;
}

/* A transaction begins (bEnlisted 1) or ends (0): it holds nothing yet. */
static int
heldStartOver(sqlite3_vtab *pVtab, int bEnlisted)
{
	FenceConn  *conn = vtabConn(pVtab);

	fence_held_clear(&conn->held);
	fenceUndoForget(conn);
	conn->nMark = 0;
	conn->bEnlisted = bEnlisted;
	conn->bBroken = 0;
	fenceGuardTxnEnded(conn);
	return SQLITE_OK;
}

static int
heldBegin(sqlite3_vtab *pVtab)
{
	vtabConn(pVtab)->nBegin++;
	return heldStartOver(pVtab, 1);
}

static int
heldEnd(sqlite3_vtab *pVtab)
{
	return heldStartOver(pVtab, 0);
}

static int
heldSavepoint(sqlite3_vtab *pVtab, int iSavepoint)
{
	FenceConn  *conn = vtabConn(pVtab);
	int			k;

	if (iSavepoint >= conn->nMarkAlloc)
	{
		int			nAlloc = iSavepoint + 8;
		int		   *a = sqlite3_realloc64(conn->aMark, sizeof(int) * (sqlite3_uint64) nAlloc);

		if (a == NULL)
		{
			/* a later ROLLBACK TO could not undo what it must: fail closed */
			conn->bBroken = 1;
			return SQLITE_NOMEM;
		}
		conn->aMark = a;
		conn->nMarkAlloc = nAlloc;
	}

	/*
	 * Savepoints opened before fence_txn joined the transaction were not
	 * announced; everything held came after them, so they mark the current
	 * length (which is 0 when joining).
	 */
	for (k = conn->nMark; k < iSavepoint; k++)
		conn->aMark[k] = conn->held.n_entries;
	conn->aMark[iSavepoint] = conn->held.n_entries;
	conn->nMark = iSavepoint + 1;
	return SQLITE_OK;
}

static int
heldRelease(sqlite3_vtab *pVtab, int iSavepoint)
{
	FenceConn  *conn = vtabConn(pVtab);

	/* what was held stays held; only the marks go */
	if (iSavepoint < conn->nMark)
		conn->nMark = iSavepoint;
	return SQLITE_OK;
}

static int
heldRollbackTo(sqlite3_vtab *pVtab, int iSavepoint)
{
	FenceConn  *conn = vtabConn(pVtab);

	if (iSavepoint < conn->nMark)
	{
		fence_held_truncate(&conn->held, conn->aMark[iSavepoint]);
		conn->nMark = iSavepoint + 1;	/* the savepoint itself stays open */
	}
	return SQLITE_OK;
}

/*
 * Phase one of a commit: a transaction in which fence lost track of its
 * fences (out of memory) may not commit at all. An error here makes SQLite
 * roll the whole transaction back.
 */
static int
heldSync(sqlite3_vtab *pVtab)
{
	FenceConn  *conn = vtabConn(pVtab);

	if (!conn->bBroken)
		return SQLITE_OK;
	sqlite3_free(pVtab->zErrMsg);
	pVtab->zErrMsg = sqlite3_mprintf("%s", FENCE_BROKEN_MSG);
	return SQLITE_ERROR;
}

/* fence_held: what the transaction holds, for people to read */
static const sqlite3_module heldModule = {
	1,							/* iVersion */
	NULL,						/* xCreate: eponymous only */
	heldConnect,
	heldBestIndex,
	heldDisconnect,
	NULL,						/* xDestroy */
	heldOpen,
	heldClose,
	heldFilter,
	heldNext,
	heldEof,
	heldColumn,
	heldRowid,
	heldUpdate,
	NULL, NULL, NULL, NULL,		/* never joins a transaction */
	NULL, NULL, NULL, NULL, NULL, NULL
};

/* fence_txn: the same rows; the table that joins each fenced transaction */
static const sqlite3_module txnModule = {
	2,							/* iVersion: 2 for the savepoint methods */
	NULL,						/* xCreate: eponymous only */
	txnConnect,
	heldBestIndex,
	txnDisconnect,
	NULL,						/* xDestroy */
	heldOpen,
	heldClose,
	heldFilter,
	heldNext,
	heldEof,
	heldColumn,
	heldRowid,
	heldUpdate,
	heldBegin,
	heldSync,
	heldEnd,					/* xCommit */
	heldEnd,					/* xRollback */
	NULL,						/* xFindFunction */
	NULL,						/* xRename */
	heldSavepoint,
	heldRelease,
	heldRollbackTo,
	NULL						/* xShadowName */
};

/* The module's destructor: it drops the reference the module holds. */
static void
connDestroy(void *p)
{
	FenceConn  *conn = p;

	fenceFinalizeStatements(conn);
	connRelease(conn);
}

/* Register fence_held; the module owns conn and frees it with the connection. */
int
fenceHeldRegister(sqlite3 *db, FenceConn *conn)
{
	int			rc;

	conn->nRef = 1;				/* the fence_held module's */
	rc = sqlite3_create_module_v2(db, "fence_held", &heldModule, conn, connDestroy);

	if (rc == SQLITE_OK)
		rc = sqlite3_create_module_v2(db, "fence_txn", &txnModule, conn, NULL);
	return rc;
}

/*
 * Undo fenceHeldRegister after a failed load: removing fence_held destroys
 * the FenceConn it owns. Removing a module allocates nothing.
 */
void
fenceHeldUnregister(sqlite3 *db)
{
	sqlite3_create_module_v2(db, "fence_txn", NULL, NULL, NULL);
	sqlite3_create_module_v2(db, "fence_held", NULL, NULL, NULL);
}

/*
 * Connect the eponymous table if it is not (preparing a statement that names
 * it does), so that its xDisconnect will finalize our statements at close.
 */
int
fenceHeldConnect(FenceConn *conn)
{
	sqlite3_stmt *stmt = NULL;
	int			rc;

	if (conn->bVtabConnected)
		return SQLITE_OK;
	/* main.: a TEMP or attached table of the same name must not answer */
	rc = sqlite3_prepare_v2(conn->db, "SELECT 1 FROM main.fence_held", -1, &stmt, NULL);
	sqlite3_finalize(stmt);
	if (rc == SQLITE_OK && !conn->bVtabConnected)
	{
		/*
		 * A table of the main database named fence_held hides the virtual
		 * table, and without it the statements cached below could never be
		 * finalized at close. Refuse (fail closed) rather than leak them.
		 */
		rc = FENCE_RC_SHADOWED;
	}
	return rc;
}

/*
 * Make fence_held part of the open transaction, so that its end and its
 * savepoints reach us. Writing a virtual table (even deleting no row) is
 * what enlists it; the statement also opens the write transaction on main.
 * Returns SQLITE_OK with conn->bEnlisted still 0 when the statement's own
 * end committed the transaction (an autocommit SELECT): then there is no
 * transaction left to hold a fence in.
 */
int
fenceHeldEnlist(FenceConn *conn)
{
	int			rc;

	unsigned	nBegin = conn->nBegin;

	if (conn->bEnlisted)
		return SQLITE_OK;
	if (conn->pEnlist == NULL)
	{
		rc = fenceHeldConnect(conn);
		if (rc == SQLITE_OK)
			rc = sqlite3_prepare_v3(conn->db, "DELETE FROM main.fence_txn WHERE 0", -1,
									SQLITE_PREPARE_PERSISTENT, &conn->pEnlist, NULL);
		if (rc != SQLITE_OK)
			return rc;
	}
	rc = sqlite3_step(conn->pEnlist);
	if (rc != SQLITE_DONE)
		return sqlite3_reset(conn->pEnlist);	/* with the step's message */
	sqlite3_reset(conn->pEnlist);

	/*
	 * The statement ran but no transaction began on fence_txn: what it
	 * deleted from was a table of the main database named fence_txn, made
	 * after we prepared. Holding nothing while saying "accepted" is what
	 * must never happen: refuse. (Forget the statement, so that the name is
	 * resolved again once that table is gone.)
	 */
	if (!conn->bEnlisted && conn->nBegin == nBegin)
	{
		sqlite3_finalize(conn->pEnlist);
		conn->pEnlist = NULL;
		return FENCE_RC_SHADOWED;
	}
	return SQLITE_OK;
}
