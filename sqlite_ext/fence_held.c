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
 * running "DELETE FROM temp.fence_enlist WHERE ..." (fence_enlist is a table
 * of the module fence_txn, a second name for fence_held: see heldDisconnect
 * for why there are two), and from then on SQLite drives the state:
 *   xSavepoint(k)  remembers how long the log was when savepoint k opened;
 *   xRollbackTo(k) truncates the log back to that length;
 *   xCommit, xRollback forget everything.
 * The state lives in memory and is never written to a TEMP table, because a
 * TEMP table written from inside another statement is not rolled back with
 * that statement unless it has its own statement journal.
 *
 * Why temp.fence_enlist, a virtual table fence creates in the TEMP schema, and
 * not the eponymous main.fence_txn (which SQLite would also find under the
 * name temp.fence_txn): a write to a table opens a write
 * transaction on the table's database, and one on main takes the file's
 * write lock (RESERVED, or WAL's writer lock). An accept of the token that
 * is already the highest writes nothing and must not take it (SPEC.md:
 * transactions fenced at the same token do not wait for each other), so
 * fence enlists through the TEMP database, which is the connection's own,
 * and main is only read until fence_tokens must change. The table is made
 * when fence is loaded outside a transaction (fenceHeldCreateEnlist says
 * why only then); without it fence enlists through main.fence_txn, taking
 * the write lock as older versions did.
 *
 * SELECT * FROM fence_held lists the fences the transaction holds. Rows
 * cannot be written: only fence's own code changes them.
 *
 * Provides: the modules fence_held, fence_txn, fence_join
 * (fenceHeldRegister, fenceHeldUnregister), fenceHeldConnect,
 * fenceHeldEnlist, fenceHeldCreateEnlist, fenceHeldSet (inline,
 * fence_sqlite.h), fenceHeldBreak, fenceHeldTruncate, fenceConnRetain,
 * fenceConnRelease, fenceSqliteAllocator, the scan fence_stats shares
 * (fenceCursorOpen, fenceCursorClose, fenceCursorEof, fenceCursorRowid),
 * and the change detector (FENCE_CHANGES_GEN, a macro in fence_sqlite.h,
 * fenceChangesRun, fenceChangesBump; "What changed" below). It owns FenceConn.txn (what the
 * transaction holds), FenceConn.enlist and FenceConn.changes, and is their
 * one writer. Calls no other file of sqlite_ext: what the files above must
 * hear of a transaction's end goes through FenceConn.pHooks (fence_init.c).
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
static void heldFinalize(FenceConn *conn);
static void fenceEnlistForget(FenceConn *conn, sqlite3_stmt **pp);

static void
connRelease(FenceConn *conn)
{
	if (--conn->enlist.nRef > 0)
		return;
	heldFinalize(conn);
	conn->pHooks->xFree(conn);
	fence_held_free(&conn->txn.held);
	if (conn->txn.aMark != conn->txn.aMarkFirst)
		sqlite3_free(conn->txn.aMark);
	sqlite3_free(conn->pAlloc);
}

/* For fence_stats.c, whose tables hold a reference too. */
void
fenceConnRetain(FenceConn *conn)
{
	conn->enlist.nRef++;
}

void
fenceConnRelease(FenceConn *conn)
{
	connRelease(conn);
}

/*
 * What the transaction holds could not be recorded (out of memory): from
 * now on it fails closed (FENCE_BROKEN_MSG) until it ends.
 */
FENCE_COLD int
fenceHeldBreak(FenceConn *conn)
{
	conn->txn.bBroken = 1;
	fenceGuardMemoForget(conn);
	return FENCE_RC_BROKEN;
}

/* A failed statement's accepts are undone (fence_accept.c): hold what came before n. */
void
fenceHeldTruncate(FenceConn *conn, int n)
{
	fenceGuardMemoForget(conn);
	if (conn->txn.bEnlisted && n <= conn->txn.held.n_entries)
		fence_held_truncate(&conn->txn.held, n);
}

typedef struct HeldVtab
{
	sqlite3_vtab base;
	FenceConn  *conn;
} HeldVtab;


static int
heldConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
			sqlite3_vtab **ppVtab, char **pzErr)
{
	FenceConn  *conn = pAux;
	HeldVtab   *vtab;
	int			bJoin;
	int			rc;

	(void) pzErr;
	/*
	 * fence_join, which guard triggers name, has one column: the INSERT
	 * that names it there costs a register per column in every trigger
	 * frame, though it never runs.
	 */
	bJoin = argv != NULL && argc >= 1 && sqlite3_stricmp(argv[0], "fence_join") == 0;
	rc = sqlite3_declare_vtab(db, bJoin ? "CREATE TABLE x(resource TEXT)" :
							  "CREATE TABLE x(resource TEXT, token INTEGER)");
	if (rc != SQLITE_OK)
		return rc;
	/* a planted view or trigger must not be able to enlist or read it */
	if (!bJoin)
		sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
	vtab = sqlite3_malloc(sizeof(*vtab));
	if (vtab == NULL)
		return SQLITE_NOMEM;
	memset(vtab, 0, sizeof(*vtab));
	vtab->conn = conn;
	conn->enlist.nRef++;
	conn->enlist.bVtabConnected = 1;
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

	heldFinalize(vtab->conn);
	vtab->conn->enlist.bVtabConnected = 0;
	connRelease(vtab->conn);
	sqlite3_free(vtab);
	return SQLITE_OK;
}

static int
txnConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
		   sqlite3_vtab **ppVtab, char **pzErr)
{
	FenceConn  *conn = pAux;
	int			bConnected = conn->enlist.bVtabConnected;
	int			rc = heldConnect(db, pAux, argc, argv, ppVtab, pzErr);

	conn->enlist.bVtabConnected = bConnected;	/* only fence_held's counts */
	return rc;
}

static int
txnDisconnect(sqlite3_vtab *pVtab)
{
	FenceConn  *conn = ((HeldVtab *) pVtab)->conn;

	if (conn->txn.pJoined == pVtab)
	{
		/* it will not hear the transaction end: hold nothing, fail closed */
		conn->txn.pJoined = NULL;
		conn->txn.bEnlisted = 0;
		conn->txn.bBroken = 1;
		fenceGuardMemoForget(conn);
	}
	connRelease(conn);
	sqlite3_free(pVtab);
	return SQLITE_OK;
}

static int
heldBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info)
{
	/*
	 * Planned: a statement that reads one of fence's tables is being
	 * prepared, such as one that fires a guard trigger, whose body reads
	 * fence_join (fence_protect.c). Counted for the detector
	 * (FENCE_CHANGES_GEN), and the guard's memo, which answers without
	 * asking it, forgets: the statement may write through an ATTACH made
	 * since (tests/sqlite_attacks_guard.py, "in one transaction").
	 */
	((HeldVtab *) pVtab)->conn->changes.nPlanned++;
	fenceGuardMemoForget(((HeldVtab *) pVtab)->conn);
	info->estimatedCost = 10.0;
	info->estimatedRows = 10;
	return SQLITE_OK;
}

/*
 * A scan of fence_held or fence_stats (FenceCursor, fence_sqlite.h): entry
 * i of a list that held nEnd entries when the scan began.
 */
int
fenceCursorOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor)
{
	FenceCursor *cur = sqlite3_malloc(sizeof(*cur));

	(void) pVtab;
	if (cur == NULL)
		return SQLITE_NOMEM;
	memset(cur, 0, sizeof(*cur));
	*ppCursor = &cur->base;
	return SQLITE_OK;
}

int
fenceCursorClose(sqlite3_vtab_cursor *cur)
{
	sqlite3_free(cur);
	return SQLITE_OK;
}

int
fenceCursorEof(sqlite3_vtab_cursor *pCur)
{
	return ((FenceCursor *) pCur)->i >= ((FenceCursor *) pCur)->nEnd;
}

int
fenceCursorRowid(sqlite3_vtab_cursor *pCur, sqlite_int64 *pRowid)
{
	*pRowid = ((FenceCursor *) pCur)->i;
	return SQLITE_OK;
}

static FenceHeld *
cursorHeld(sqlite3_vtab_cursor *cur)
{
	return &((HeldVtab *) cur->pVtab)->conn->txn.held;
}

/* Skip entries shadowed by a newer one and those no longer held. */
static void
cursorSettle(FenceCursor *cur)
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
	FenceCursor *cur = (FenceCursor *) pCur;

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
	FenceCursor *cur = (FenceCursor *) pCur;

	cur->i++;
	cursorSettle(cur);
	return SQLITE_OK;
}

static int
heldColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int col)
{
	FenceHeldEntry *e = &cursorHeld(pCur)->entries[((FenceCursor *) pCur)->i];

	if (col == 0)
		sqlite3_result_text(ctx, e->resource, (int) e->len, SQLITE_TRANSIENT);
	else
		sqlite3_result_int64(ctx, e->token);
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
connStartOver(FenceConn *conn, int bEnlisted)
{
	fenceGuardMemoForget(conn);
	fence_held_clear(&conn->txn.held);
	conn->txn.nMark = 0;
	conn->txn.bEnlisted = bEnlisted;
	conn->txn.bBroken = 0;
	conn->pHooks->xTxnStartOver(conn);
	return SQLITE_OK;
}

/*
 * Two of fence's tables can join one transaction: temp.fence_enlist (or
 * main.fence_txn) through fence's enlisting statement, and main.fence_join
 * through the prologue of a statement that fires a guard trigger (whose
 * body names it). The first to join is the transaction's (conn->txn.pJoined);
 * the calls SQLite makes on the other are ignored, since the first hears
 * every savepoint the other does, and more.
 */
static int
notJoined(sqlite3_vtab *pVtab)
{
	return vtabConn(pVtab)->txn.pJoined != pVtab;
}

static int
heldBegin(sqlite3_vtab *pVtab)
{
	FenceConn  *conn = vtabConn(pVtab);

	if (conn->txn.pJoined != NULL)
		return SQLITE_OK;
	conn->txn.pJoined = pVtab;
	conn->enlist.nBegin++;
	if (conn->cache.txn != FENCE_CACHE_TXN_UNKNOWN)
		conn->pHooks->xCacheTxnEnd(conn, 0);	/* an end we never heard of: forget */
	return connStartOver(conn, 1);
}

static int
heldCommit(sqlite3_vtab *pVtab)
{
	FenceConn  *conn = vtabConn(pVtab);

	if (notJoined(pVtab))
		return SQLITE_OK;
	conn->txn.pJoined = NULL;
	conn->pHooks->xCacheTxnEnd(conn, !conn->txn.bBroken);
	return connStartOver(conn, 0);
}

static int
heldRollback(sqlite3_vtab *pVtab)
{
	FenceConn  *conn = vtabConn(pVtab);

	if (notJoined(pVtab))
		return SQLITE_OK;
	conn->txn.pJoined = NULL;
	conn->pHooks->xRolledBack(conn);
	return connStartOver(conn, 0);
}

static int
heldSavepoint(sqlite3_vtab *pVtab, int iSavepoint)
{
	FenceConn  *conn = vtabConn(pVtab);
	int			k;

	if (notJoined(pVtab))
		return SQLITE_OK;
	if (iSavepoint >= conn->txn.nMarkAlloc)
	{
		int			nAlloc = iSavepoint + 8;
		int		   *a = sqlite3_realloc64(conn->txn.aMark == conn->txn.aMarkFirst ? NULL : conn->txn.aMark,
										  sizeof(int) * (sqlite3_uint64) nAlloc);

		if (a == NULL)
		{
			/* a later ROLLBACK TO could not undo what it must: fail closed */
			conn->txn.bBroken = 1;
			fenceGuardMemoForget(conn);
			return SQLITE_NOMEM;
		}
		if (conn->txn.aMark == conn->txn.aMarkFirst)
			memcpy(a, conn->txn.aMarkFirst, sizeof(conn->txn.aMarkFirst));
		conn->txn.aMark = a;
		conn->txn.nMarkAlloc = nAlloc;
	}

	/*
	 * Savepoints opened before fence_txn joined the transaction were not
	 * announced; everything held came after them, so they mark the current
	 * length (which is 0 when joining).
	 */
	for (k = conn->txn.nMark; k < iSavepoint; k++)
		conn->txn.aMark[k] = conn->txn.held.n_entries;
	conn->txn.aMark[iSavepoint] = conn->txn.held.n_entries;
	conn->txn.nMark = iSavepoint + 1;
	return SQLITE_OK;
}

/*
 * No xRelease: what was held stays held when a savepoint is released, and
 * its mark may stay too. Only an open savepoint can be rolled back to, and
 * every open one was announced (here, or as this table joined) after the
 * one released at its depth, overwriting that mark; nMark past it does no
 * harm. Not being called spares every statement a call at its end.
 */

static int
heldRollbackTo(sqlite3_vtab *pVtab, int iSavepoint)
{
	FenceConn  *conn = vtabConn(pVtab);

	if (notJoined(pVtab))
		return SQLITE_OK;
	fenceGuardMemoForget(conn);
	if (iSavepoint < 0)
	{
		/*
		 * ROLLBACK TO the savepoint that began the transaction (SAVEPOINT in
		 * autocommit mode is not counted among db->nSavepoint, so SQLite
		 * passes -1): everything held goes, and the transaction goes on.
		 */
		fence_held_truncate(&conn->txn.held, 0);
		conn->txn.nMark = 0;
	}
	else if (iSavepoint < conn->txn.nMark)
	{
		fence_held_truncate(&conn->txn.held, conn->txn.aMark[iSavepoint]);
		conn->txn.nMark = iSavepoint + 1;	/* the savepoint itself stays open */
	}
	conn->pHooks->xRolledBackTo(conn);
	return SQLITE_OK;
}

/*
 * The attached database this transaction writes while it holds a fence
 * with main only read-locked, or NULL. An equal accept takes no write
 * lock: main's snapshot is what keeps a later write to main from
 * committing after a newer token (fence_accept.c). An attached database has a
 * pager of its own, which starts a write on its newest snapshot, so an
 * accept made with one attached takes main's write lock first. But SQLite
 * lets ATTACH run inside a transaction, after its accepts: then the write
 * through the attachment is pinned by nothing.
 */
static const char *
unpinnedAttachedWrite(FenceConn *conn)
{
	const char *zName;
	int			i;

	if (conn->txn.held.n_entries == 0 || sqlite3_db_name(conn->db, 2) == NULL ||
		sqlite3_txn_state(conn->db, "main") == SQLITE_TXN_WRITE)
		return NULL;
	for (i = 2; (zName = sqlite3_db_name(conn->db, i)) != NULL; i++)
		if (sqlite3_txn_state(conn->db, zName) == SQLITE_TXN_WRITE)
			return zName;
	return NULL;
}

/*
 * Phase one of a commit: a transaction in which fence lost track of its
 * fences (out of memory) may not commit at all, nor one that wrote an
 * attached database unpinned (above). An error here makes SQLite roll the
 * whole transaction back.
 */
static int
heldSync(sqlite3_vtab *pVtab)
{
	FenceConn  *conn = vtabConn(pVtab);
	const char *zAttached;

	if (!conn->txn.bBroken && (zAttached = unpinnedAttachedWrite(conn)) == NULL)
		return SQLITE_OK;
	sqlite3_free(pVtab->zErrMsg);
	if (conn->txn.bBroken)
		pVtab->zErrMsg = sqlite3_mprintf("%s", FENCE_BROKEN_MSG);
	else
		pVtab->zErrMsg = sqlite3_mprintf("fence refused: the transaction wrote \"%s\", "
										 "attached after its first fence; ATTACH before "
										 "fence_check", zAttached);
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
	fenceCursorOpen,
	fenceCursorClose,
	heldFilter,
	heldNext,
	fenceCursorEof,
	heldColumn,
	fenceCursorRowid,
	heldUpdate,
	NULL, NULL, NULL, NULL,		/* never joins a transaction */
	NULL, NULL, NULL, NULL, NULL, NULL
};

/*
 * fence_txn and fence_join: the same rows as fence_held, and the methods by
 * which a table that joined a transaction hears of its savepoints and end.
 * xCreate and xDestroy are the only difference.
 */
#define TXN_MODULE(xCreate_, xDestroy_) { \
	2,							/* iVersion: 2 for the savepoint methods */ \
	xCreate_, \
	txnConnect, \
	heldBestIndex, \
	txnDisconnect, \
	xDestroy_, \
	fenceCursorOpen, \
	fenceCursorClose, \
	heldFilter, \
	heldNext, \
	fenceCursorEof, \
	heldColumn, \
	fenceCursorRowid, \
	heldUpdate, \
	heldBegin, \
	heldSync, \
	heldCommit, \
	heldRollback, \
	NULL,						/* xFindFunction */ \
	NULL,						/* xRename */ \
	heldSavepoint, \
	NULL,						/* xRelease: see heldSavepoint */ \
	heldRollbackTo, \
	NULL						/* xShadowName */ \
}

/*
 * fence_txn: the table that joins each transaction fence_check fences.
 * Dropping temp.fence_enlist inside a transaction is an edit of fence's
 * own state (docs/trust.md).
 */
static const sqlite3_module txnModule =
	TXN_MODULE(txnConnect, txnDisconnect);	/* xCreate, xDestroy: temp.fence_enlist */

/*
 * fence_join: fence_txn again, for the guard triggers, whose bodies name it
 * (fence_protect.c) so that every statement firing one joins it as it
 * starts. Eponymous only, and not DIRECTONLY, since a trigger stored in the
 * schema names it; what a planted object can do with it is join a
 * transaction to fence (which changes nothing) or read what it holds.
 */
static const sqlite3_module joinModule = TXN_MODULE(NULL, NULL);

/* The module's destructor: it drops the reference the module holds. */
static void
connDestroy(void *p)
{
	FenceConn  *conn = p;

	heldFinalize(conn);
	connRelease(conn);
}

/* Register fence_held; the module owns conn and frees it with the connection. */
int
fenceHeldRegister(sqlite3 *db, FenceConn *conn)
{
	int			rc;

	conn->txn.aMark = conn->txn.aMarkFirst;
	conn->txn.nMarkAlloc = FENCE_MARKS_FIRST;
	/* a transaction of a few short resources allocates nothing for them */
	fence_held_init_buffers(&conn->txn.held, &fenceSqliteAllocator, conn->aHeldFirst,
							FENCE_HELD_FIRST, conn->aHeldBuckets, FENCE_HELD_FIRST);
	fence_held_use_names(&conn->txn.held, conn->zHeldNames, sizeof(conn->zHeldNames));
	conn->enlist.nRef = 1;				/* the fence_held module's */
	rc = sqlite3_create_module_v2(db, "fence_held", &heldModule, conn, connDestroy);

	if (rc == SQLITE_OK)
		rc = sqlite3_create_module_v2(db, "fence_txn", &txnModule, conn, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_module_v2(db, "fence_join", &joinModule, conn, NULL);
	return rc;
}

/*
 * Undo fenceHeldRegister after a failed load: removing fence_held destroys
 * the FenceConn it owns. Removing a module allocates nothing.
 */
void
fenceHeldUnregister(sqlite3 *db)
{
	sqlite3_create_module_v2(db, "fence_join", NULL, NULL, NULL);
	sqlite3_create_module_v2(db, "fence_stats", NULL, NULL, NULL);
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

	if (conn->enlist.bVtabConnected)
		return SQLITE_OK;
	/* main.: a TEMP or attached table of the same name must not answer */
	rc = sqlite3_prepare_v2(conn->db, "SELECT 1 FROM main.fence_held", -1, &stmt, NULL);
	sqlite3_finalize(stmt);
	if (rc == SQLITE_OK && !conn->enlist.bVtabConnected)
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
 * The enlisting statements also read main's schema cookie as they start
 * (the subquery names main, which makes SQLite check main's schema and
 * take main's read lock; it never runs: the table is empty when it joins),
 * so that SQLite prepares them again after a schema change, which is how
 * the change detector learns of one (sawRun, "What changed" below).
 */
static void sawRun(FenceConn *conn);

static const char enlistSql[] =
"DELETE FROM temp.fence_enlist WHERE rowid = -1 "
"AND NOT EXISTS (SELECT 1 FROM main.sqlite_schema WHERE 0)";
static const char enlistMainSql[] = "DELETE FROM main.fence_txn WHERE 0";

/*
 * Make temp.fence_enlist, at load and only outside a transaction: SQLite
 * puts a virtual table made inside a transaction on that transaction's list
 * without calling xBegin, and a ROLLBACK TO a savepoint older than the
 * CREATE takes the table away again while the transaction goes on, so that
 * its end would never reach us. Made outside one, it is there for good
 * (unless the application drops it).
 */
int
fenceHeldCreateEnlist(FenceConn *conn)
{
	if (!sqlite3_get_autocommit(conn->db))
		return SQLITE_OK;
	return sqlite3_exec(conn->db, "CREATE VIRTUAL TABLE IF NOT EXISTS temp.fence_enlist "
						"USING fence_txn", NULL, NULL, NULL);
}

/*
 * Prepare the enlisting statement: through temp.fence_enlist when it is
 * there, else (fence loaded inside a transaction, out of memory at load, a
 * DROP) through the eponymous main.fence_txn, which also takes main's write
 * lock: an equal accept then waits like any writer, which is slower but
 * never wrong.
 */
static int
prepareEnlist(FenceConn *conn, int bMain, sqlite3_stmt **pp)
{
	int			rc = fenceHeldConnect(conn);

	if (rc != SQLITE_OK)
		return rc;
	if (!bMain)
	{
		rc = sqlite3_prepare_v3(conn->db, enlistSql, -1, SQLITE_PREPARE_PERSISTENT, pp, NULL);
		if (rc == SQLITE_OK || (rc & 0xff) == SQLITE_NOMEM)
			return rc;
	}
	return sqlite3_prepare_v3(conn->db, enlistMainSql, -1, SQLITE_PREPARE_PERSISTENT, pp, NULL);
}

/*
 * Make fence_held part of the open transaction, so that its end and its
 * savepoints reach us. Writing a virtual table (even deleting no row) is
 * what enlists it; the table is in TEMP, so main stays unlocked (see the
 * head of this file). Returns SQLITE_OK with conn->txn.bEnlisted still 0 when
 * the statement's own end committed the transaction (an autocommit
 * SELECT): then there is no transaction left to hold a fence in.
 */
int
fenceHeldEnlist(FenceConn *conn, int bLockMain)
{
	int			rc;
	sqlite3_stmt **pp;
	unsigned	nBegin = conn->enlist.nBegin;

	if (conn->txn.bEnlisted)
		return SQLITE_OK;

	/*
	 * Through main when the caller wants main's write lock first (an
	 * accept that is likely an advance, fence_accept.c) or when the statement
	 * running us already writes main (a guarded write: it locks nothing
	 * more and costs less than opening a write transaction on TEMP); else
	 * through TEMP. Either table joins alone: only the first enlisting of a
	 * transaction runs.
	 */
	pp = bLockMain || sqlite3_txn_state(conn->db, "main") == SQLITE_TXN_WRITE ?
		&conn->enlist.pEnlistMain : &conn->enlist.pEnlist;
	if (*pp == NULL &&
		(rc = prepareEnlist(conn, pp == &conn->enlist.pEnlistMain, pp)) != SQLITE_OK)
		return rc;
	if (fenceStepToEnd(*pp) != SQLITE_DONE)
	{
		rc = sqlite3_reset(*pp);	/* with the step's message */
		/* temp.fence_enlist dropped (docs/trust.md): the next call prepares again */
		if (rc == SQLITE_ERROR || rc == SQLITE_SCHEMA)
			fenceEnlistForget(conn, pp);
		return rc;
	}
	sqlite3_reset(*pp);

	/*
	 * The statement ran but no transaction began on fence_txn: what it
	 * deleted from was a TEMP table named fence_enlist (or a main table
	 * named fence_txn) of the application's. Holding nothing while saying
	 * "accepted" is what must never happen: refuse. (Forget the statement,
	 * so that the name is resolved again once that table is gone.)
	 */
	if (!conn->txn.bEnlisted && conn->enlist.nBegin == nBegin)
	{
		fenceEnlistForget(conn, pp);
		return FENCE_RC_SHADOWED;
	}

	sawRun(conn);
	return SQLITE_OK;
}

/*
 * Finalize a cached enlisting statement, and forget it as the one the
 * schema was checked with: a statement prepared later may get its address.
 */
static void
fenceEnlistForget(FenceConn *conn, sqlite3_stmt **pp)
{
	if (*pp != NULL)
		conn->changes.nSum = -1;	/* the sum of counts no longer compares */
	sqlite3_finalize(*pp);
	*pp = NULL;
}

/* ---------------------------------------------------------------------
 * What changed: the one change detector
 *
 * SQLite prepares a statement again before it runs when what it was
 * prepared on changed: main's schema (its cookie, read as the statement
 * starts, moved: DDL by this connection or another, committed or rolled
 * back), TEMP's schema, DETACH, sqlite3_deserialize or a flag pragma
 * (recursive_triggers...), the last four by expiring every statement of
 * the connection. The watched statements, which name main's schema (the
 * probe, the enlisting statements), therefore show any such change as a
 * move of their SQLITE_STMTSTATUS_REPREPARE counts once they run:
 * FenceChanges.gen moves then. ATTACH expires no statement but its own;
 * each run also counts the attached databases (tests/sqlite_attacks_guard.py,
 * "a copy as main wrote through main, then attached the real file"). The enlisting statement runs at the
 * start of every transaction fence takes part in, for free; the probe
 * runs only when that proves nothing:
 *
 *   - no watched statement ran in this transaction (it was joined through
 *     fence_join, or none is open), unless the caller is a guard call
 *     (FENCE_POLL_GUARD): one from a statement that fires a guard trigger
 *     proves it alone, for each such trigger reads fence_join, so SQLite
 *     plans a read of it (counted below) whenever it prepares the
 *     statement, and it prepares it again, before it runs, after any change
 *     of main's schema (by any connection, committed or rolled back); the
 *     rest expires the probe, or is an ATTACH, which a statement that
 *     writes through it was prepared after (next point). (A guard function called from anywhere but
 *     a guard trigger is code written around fence: SPEC.md "Threat
 *     model".)
 *   - a statement that reads fence's tables was prepared since one ran
 *     (heldBestIndex counts them): that may follow a schema change made
 *     inside this transaction, after it enlisted; a guard trigger's
 *     statement prepared before the last run runs on the schema of then,
 *     or SQLite would prepare it again;
 *   - the probe has expired (a flag pragma, TEMP DDL, DETACH).
 *
 * An attached database's schema is not watched: admission checks each
 * attached file once per generation (fence_guard.c); a later change inside
 * that file is outside what fence defends (SPEC.md, "Threat model").
 * ------------------------------------------------------------------ */

static const char probeSql[] = "SELECT 1 FROM main.sqlite_schema WHERE 0";

/* Something changed, or may have where the counts cannot show it (a rollback of DDL). */
void
fenceChangesBump(FenceConn *conn)
{
	if (++conn->changes.gen == 0)
		conn->changes.gen = 1;
	fenceGuardMemoForget(conn);
}

/* A watched statement ran: did any of them have to be prepared again? */
static void
sawRun(FenceConn *conn)
{
	FenceChanges *c = &conn->changes;
	sqlite3_stmt *a[3] = {c->pProbe, conn->enlist.pEnlist, conn->enlist.pEnlistMain};
	int			n = 0;
	int			i;

	for (i = 0; i < 3; i++)
		if (a[i] != NULL)
			n += sqlite3_stmt_status(a[i], SQLITE_STMTSTATUS_REPREPARE, 0);
	/* ATTACH expires no statement but itself: count the schemas */
	for (i = 2; sqlite3_db_name(conn->db, i) != NULL; i++)
		;
	if (n != c->nSum || i != c->nDb)
	{
		c->nSum = n;
		c->nDb = i;
		fenceChangesBump(conn);
	}
	c->nBeginSeen = conn->txn.bEnlisted ? conn->enlist.nBegin : conn->enlist.nBegin - 1;
	c->nPlannedSeen = c->nPlanned;
}

/*
 * FENCE_CHANGES_GEN (fence_sqlite.h) when its shortcut does not answer:
 * runs the probe. *pRc: SQLITE_OK, or the probe could not run (then the
 * generation has moved too, and the caller refuses).
 */
FENCE_NOINLINE unsigned
fenceChangesRun(FenceConn *conn, int *pRc)
{
	FenceChanges *c = &conn->changes;
	int			rc = SQLITE_OK;

	*pRc = SQLITE_OK;
	if (c->pProbe == NULL)
	{
		rc = fenceHeldConnect(conn);
		if (rc == SQLITE_OK)
			rc = sqlite3_prepare_v3(conn->db, probeSql, -1, SQLITE_PREPARE_PERSISTENT,
									&c->pProbe, NULL);
		c->nSum = -1;
	}
	if (rc == SQLITE_OK)
	{
		rc = sqlite3_step(c->pProbe);
		sqlite3_reset(c->pProbe);
		rc = rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
	}
	if (rc != SQLITE_OK)
	{
		*pRc = rc;
		fenceChangesBump(conn);
		return c->gen;
	}
	sawRun(conn);
	return c->gen;
}

/* Finalize every cached statement: fence_held.c's, then the other files' (pHooks). */
static void
heldFinalize(FenceConn *conn)
{
	fenceEnlistForget(conn, &conn->enlist.pEnlist);
	fenceEnlistForget(conn, &conn->enlist.pEnlistMain);
	sqlite3_finalize(conn->changes.pProbe);
	conn->changes.pProbe = NULL;
	conn->changes.nSum = -1;
	conn->pHooks->xFinalize(conn);
}
