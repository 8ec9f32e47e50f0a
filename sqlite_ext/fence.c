/*
 * fence.c
 *
 * The SQLite loadable extension: entry point sqlite3_fence_init, the token
 * table main.fence_tokens, and every SQL function of SPEC.md:
 *
 *   fence_check(resource, token)       -> token, or a stale-token error
 *   fence_try(resource, token)         -> 1 accepted, 0 stale
 *   fence_current(resource)            -> the highest accepted token or NULL
 *   fence_reset(resource)              -> NULL; forgets the resource
 *   fence_protect(table, token_column, resource)
 *   fence_protect(table, token_column, resource_prefix, key_column)
 *   fence_unprotect(table)             (both in fence_protect.c)
 *   fence_acquire, fence_renew, fence_release   (leases, fence_lease.c)
 *
 * and the functions the guard triggers call (never DIRECTONLY, since a
 * trigger stored in the schema must reach them; see README "trusted_schema").
 * Each first admits its guard id G (fence_guard.c): only a trigger that
 * fence_protect made in this connection's main database passes.
 *
 *   fence_guard_write(G, resource, token)         a row carries a token
 *   fence_guard_write(G, prefix, key, token)
 *   fence_guard_fenced(G, resource)               the transaction must hold
 *   fence_guard_fenced(G, prefix, key)            a fence on the resource
 *   fence_guard_ready(G, resource_or_prefix, keyed)  admission alone
 *
 * Concurrency: SQLite has one writer per database file. An accept first
 * enlists fence_held (fence_held.c) through a virtual table in TEMP, which
 * takes main's read lock but not its write lock, then reads fence_tokens in
 * the transaction's read snapshot, or takes the highest from what this
 * connection remembers of its last transaction when nothing has changed
 * the file since (fence_cache.c, which says how that is known; the
 * snapshot is the same one). An equal accept writes nothing and so takes
 * no write lock:
 * transactions fenced at the same token do not wait for each other. The
 * read pins the snapshot (WAL) or holds the SHARED lock (rollback journal)
 * until the transaction ends, and any write the transaction makes later
 * (an advance of fence_tokens, a guarded row) needs the write lock: in WAL
 * a snapshot older than the newest commit cannot take it
 * (SQLITE_BUSY_SNAPSHOT), and in rollback-journal mode nobody can commit
 * while the SHARED lock is held. So a higher token committed after our read
 * ends our transaction in SQLITE_BUSY or the stale error, never in a
 * committed write at the older token (SPEC.md "SQLite specifics").
 *
 * Trust: fence reads and writes fence_tokens as SQLite gives it; an
 * authorizer or trigger of the application's that changes what fence's own
 * statements read or write is trusted code (docs/trust.md). An application
 * table that holds the name fence_tokens with another shape is refused,
 * never adopted (fenceOwnTableShape).
 *
 * Errors: a stale or missing token is SQLITE_CONSTRAINT_FUNCTION, invalid
 * input SQLITE_ERROR (not SQLITE_MISMATCH: Python maps that to
 * IntegrityError, which must mean "take the lock again").
 */
#include "fence_stats.h"

#include <string.h>

/*
 * sqlite3_api is defined here, in the file whose SQL functions run for every
 * guarded row: defined in the same unit, -fvisibility=hidden lets each API
 * call reach it without a load through the GOT (5 instructions a row).
 */
SQLITE_EXTENSION_INIT1

static const char createTokensSql[] =
"CREATE TABLE IF NOT EXISTS main.fence_tokens" FENCE_TOKENS_COLUMNS;

static const char selectTokenSql[] =
"SELECT token, updated_at FROM main.fence_tokens WHERE resource = ?1";

/* puts back what an accept inside a failed statement changed */
static const char restoreTokenSql[] =
"UPDATE main.fence_tokens SET token = ?2, updated_at = ?3 WHERE resource = ?1";

/* updated_at moves only when the token rises (SPEC.md "highest accepted") */
static const char advanceTokenSql[] =
"INSERT INTO main.fence_tokens(resource, token, updated_at) "
"VALUES (?1, ?2, strftime('%Y-%m-%d %H:%M:%f', 'now')) "
"ON CONFLICT(resource) DO UPDATE SET token = excluded.token, "
"updated_at = excluded.updated_at WHERE excluded.token > fence_tokens.token";

static const char deleteTokenSql[] =
"DELETE FROM main.fence_tokens WHERE resource = ?1";

/* ---------------------------------------------------------------------
 * Cached statements and the token table
 * ------------------------------------------------------------------ */

void
fenceFinalizeStatements(FenceConn *conn)
{
	sqlite3_finalize(conn->pSelectToken);
	sqlite3_finalize(conn->pAdvanceToken);
	sqlite3_finalize(conn->pDeleteToken);
	fenceEnlistForget(conn, &conn->pEnlist);
	fenceEnlistForget(conn, &conn->pEnlistMain);
	sqlite3_finalize(conn->pProbeMain);
	sqlite3_finalize(conn->pSchemaProbe);
	conn->pSchemaProbe = NULL;
	sqlite3_finalize(conn->pWatchMark);
	conn->pWatchMark = NULL;
	conn->pProbeSeen = NULL;
	sqlite3_finalize(conn->pProbeTemp);
	sqlite3_finalize(conn->pJournalMode);
	sqlite3_finalize(conn->pRecursiveSeen);
	conn->pRecursiveSeen = NULL;
	conn->pSelectToken = conn->pAdvanceToken = conn->pDeleteToken = conn->pEnlist = NULL;
	conn->pEnlistMain = NULL;
	conn->pProbeMain = conn->pProbeTemp = conn->pJournalMode = NULL;
}

/*
 * Keep SQLite's message for rc: the calls that follow a failed step (a
 * finalize, another query) replace the connection's message, and the user
 * must read the real one ("database is locked"), not "not an error".
 */
FENCE_COLD static void
saveError(FenceConn *conn, int rc)
{
	conn->savedRc = rc;
	sqlite3_snprintf((int) sizeof(conn->zSavedErr), conn->zSavedErr, "%s",
					 sqlite3_errmsg(conn->db));
}

/*
 * fence_tokens' shape, checked when a statement that names it is first
 * prepared, and again whenever SQLite re-prepares one (the schema changed:
 * another connection may have dropped the table and made another).
 */
static int
tokenTableTrusted(FenceConn *conn)
{
	char	   *zErr = NULL;
	int			rc = fenceOwnTableShape(conn->db, "fence_tokens", &zErr);

	if (rc != SQLITE_OK && zErr != NULL)
	{
		conn->savedRc = rc;
		sqlite3_snprintf((int) sizeof(conn->zSavedErr), conn->zSavedErr, "%s", zErr);
	}
	sqlite3_free(zErr);
	return rc;
}

/*
 * Does main.fence_tokens exist? Asked of the database file, not of the
 * schema this connection cached: another connection may have created the
 * table since (reading sqlite_master checks the schema cookie and reloads a
 * stale schema), and under another connection's lock the answer is that
 * lock's error (SQLITE_BUSY, with its message), never "no table".
 */
static int
tokenTableExists(FenceConn *conn, int *pExists)
{
	sqlite3_stmt *stmt = NULL;
	int			rc;

	*pExists = 0;
	rc = sqlite3_prepare_v2(conn->db,
							"SELECT 1 FROM main.sqlite_master "
							"WHERE type = 'table' AND name = 'fence_tokens'",
							-1, &stmt, NULL);
	if (rc == SQLITE_OK)
	{
		rc = sqlite3_step(stmt);
		*pExists = rc == SQLITE_ROW;
		if (rc == SQLITE_ROW || rc == SQLITE_DONE)
			rc = SQLITE_OK;
		else
			sqlite3_reset(stmt);	/* keeps the step's message on the connection */
	}
	if (rc != SQLITE_OK)
		saveError(conn, rc);	/* before finalize clears the message */
	sqlite3_finalize(stmt);
	return rc;
}

/*
 * Does this connection share its page cache (shared-cache mode: a
 * file:...?cache=shared URI, SQLITE_OPEN_SHAREDCACHE, or
 * sqlite3_enable_shared_cache)? There, connections of one process see each
 * other's pages at once and are kept apart by table locks, which SQLite
 * codes into a statement that reads a table (OP_TableLock) only then: the
 * plan of a read of fence_tokens says. Asked once, when fence_tokens is
 * first read; unknown (so never taken as "not shared") until then.
 */
static void
detectSharedCache(FenceConn *conn)
{
	sqlite3_stmt *stmt = NULL;
	int			shared = FENCE_SHARED_UNKNOWN;

	if (sqlite3_prepare_v2(conn->db, "EXPLAIN SELECT 1 FROM main.fence_tokens", -1, &stmt,
						   NULL) == SQLITE_OK)
	{
		int			rc;

		shared = FENCE_SHARED_NO;
		while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
		{
			const char *zOp = (const char *) sqlite3_column_text(stmt, 1);

			if (zOp == NULL)
			{
				shared = FENCE_SHARED_UNKNOWN;	/* blinded: cannot tell */
				break;
			}
			if (strcmp(zOp, "TableLock") == 0)
				shared = FENCE_SHARED_YES;
		}
		if (rc != SQLITE_DONE && rc != SQLITE_ROW)
			shared = FENCE_SHARED_UNKNOWN;
	}
	sqlite3_finalize(stmt);
	conn->sharedCache = shared;
}

/*
 * In shared-cache mode, PRAGMA read_uncommitted lets this connection read
 * fence_tokens as another connection's open transaction left it, without
 * the table lock that would otherwise keep that connection from
 * committing under our verdict: a token it then rolls back could be
 * judged equal. fence refuses to judge then.
 */
static int
readUncommittedRefused(FenceConn *conn, const char *z, int n)
{
	sqlite3_stmt *stmt = NULL;
	int			rc;
	int			bOn = 1;

	rc = sqlite3_prepare_v2(conn->db, "PRAGMA read_uncommitted", -1, &stmt, NULL);
	if (rc == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW &&
		sqlite3_column_type(stmt, 0) == SQLITE_INTEGER)
		bOn = sqlite3_column_int(stmt, 0) != 0;
	sqlite3_finalize(stmt);
	if (!bOn)
		return SQLITE_OK;
	conn->savedRc = FENCE_RC_UNTRUSTED;
	sqlite3_snprintf((int) sizeof(conn->zSavedErr), conn->zSavedErr,
					 "fence refused: shared cache with read_uncommitted on would read uncommitted "
					 "tokens of \"%.*s\"; set PRAGMA read_uncommitted = 0", n, z);
	return FENCE_RC_UNTRUSTED;
}

/*
 * Prepare *pp once. With bCreate, a missing fence_tokens is created (SPEC:
 * "created on first use"); without, a missing table leaves *pp NULL and
 * returns SQLITE_OK, which readers take as "no highest".
 */
static int
prepareTokenStmt(FenceConn *conn, sqlite3_stmt **pp, const char *sql, int bCreate)
{
	int			rc;
	int			exists;

	if (*pp)
		return SQLITE_OK;
	/* the eponymous fence_held must be connected to finalize *pp at close */
	rc = fenceHeldConnect(conn);
	if (rc == SQLITE_OK)
		rc = tokenTableTrusted(conn);
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_prepare_v3(conn->db, sql, -1, SQLITE_PREPARE_PERSISTENT, pp, NULL);
	if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_NOMEM)
	{
		/* no table in the schema we cached: ask the file (and reload) */
		rc = tokenTableExists(conn, &exists);
		if (rc != SQLITE_OK)
			return rc;
		if (!exists)
		{
			if (!bCreate)
				return SQLITE_OK;
			rc = sqlite3_exec(conn->db, createTokensSql, NULL, NULL, NULL);
			if (rc != SQLITE_OK)
				return rc;
			fenceCacheWatchCreate(conn);	/* only outside an explicit transaction */
		}
		rc = sqlite3_prepare_v3(conn->db, sql, -1, SQLITE_PREPARE_PERSISTENT, pp, NULL);
	}
	if (rc == SQLITE_OK && conn->sharedCache == FENCE_SHARED_UNKNOWN)
		detectSharedCache(conn);
	return rc;
}

/*
 * A cached statement fails when fence_tokens went away under it: a
 * transaction that created the table on first use rolled back, or somebody
 * dropped it. Forget the statements that named it, so that the next use
 * prepares them again (and creates the table, for a writer). Any other
 * error (SQLITE_BUSY, out of memory...) is the caller's to report.
 */
static int
tokenTableVanished(FenceConn *conn, int rc)
{
	int			exists;

	if (rc != SQLITE_ERROR && rc != SQLITE_SCHEMA)
		return 0;
	if (tokenTableExists(conn, &exists) != SQLITE_OK || exists)
		return 0;
	sqlite3_finalize(conn->pSelectToken);
	sqlite3_finalize(conn->pAdvanceToken);
	sqlite3_finalize(conn->pDeleteToken);
	conn->pSelectToken = conn->pAdvanceToken = conn->pDeleteToken = NULL;
	return 1;
}

/* *pHas = 0 when the resource has no highest token (or there is no table). */
static int
readHighestAt(FenceConn *conn, const char *z, int n, int bCreate, int *pHas,
			  sqlite3_int64 *pHighest, char *zAt, int nAt)
{
	int			attempt;
	int			rc = SQLITE_OK;

	*pHas = 0;
	*pHighest = 0;
	for (attempt = 0; attempt < 2; attempt++)
	{
		sqlite3_stmt *p;

		rc = prepareTokenStmt(conn, &conn->pSelectToken, selectTokenSql, bCreate);
		if (rc != SQLITE_OK || conn->pSelectToken == NULL)
			return rc;
		p = conn->pSelectToken;
		if (sqlite3_stmt_busy(p))
			return FENCE_RC_REENTERED;
		sqlite3_bind_text(p, 1, z, n, SQLITE_STATIC);
		rc = sqlite3_step(p);
		if (rc == SQLITE_ROW)
		{
			*pHas = 1;
			*pHighest = sqlite3_column_int64(p, 0);
			if (zAt)
				sqlite3_snprintf(nAt, zAt, "%s", (const char *) sqlite3_column_text(p, 1));
		}
		else if (rc != SQLITE_DONE)
			saveError(conn, rc);
		sqlite3_reset(p);
		sqlite3_clear_bindings(p);
		if (!tokenTableVanished(conn, rc))
			break;
	}
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int
readHighest(FenceConn *conn, const char *z, int n, int bCreate, int *pHas,
			sqlite3_int64 *pHighest)
{
	return readHighestAt(conn, z, n, bCreate, pHas, pHighest, NULL, 0);
}

static int
runTokenStmt(FenceConn *conn, sqlite3_stmt **pp, const char *sql, const char *z,
			 int n, sqlite3_int64 token)
{
	int			attempt;
	int			rc = SQLITE_OK;

	for (attempt = 0; attempt < 2; attempt++)
	{
		rc = prepareTokenStmt(conn, pp, sql, 1);
		if (rc != SQLITE_OK)
			return rc;

		/*
		 * Still running: a trigger on fence_tokens fired by this very
		 * statement wrote a protected table, whose guard brought us back.
		 * Stepping it again would restart it under itself, without end.
		 */
		if (sqlite3_stmt_busy(*pp))
			return FENCE_RC_REENTERED;
		sqlite3_bind_text(*pp, 1, z, n, SQLITE_STATIC);
		if (sqlite3_bind_parameter_count(*pp) >= 2)
			sqlite3_bind_int64(*pp, 2, token);
		rc = sqlite3_step(*pp);
		if (rc != SQLITE_DONE)
			saveError(conn, rc);
		sqlite3_reset(*pp);
		sqlite3_clear_bindings(*pp);
		if (!tokenTableVanished(conn, rc))
			break;
	}
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* ---------------------------------------------------------------------
 * Undoing a failed statement
 *
 * SPEC: an error leaves the database as it was before the failing INSERT,
 * UPDATE or DELETE. SQLite undoes a failed statement through its statement
 * journal, but it opens one only for a statement it knows may fail after a
 * first write; a single-row INSERT is not one, because SQLite checks its
 * constraints before writing. A function that writes fence_tokens from
 * inside such an INSERT (INSERT ... VALUES (fence_check(...), ...)) is a
 * write SQLite does not know of, and when a later value of the same row
 * raises, that advance would stay.
 *
 * So an accept made from inside another writing statement notes what it
 * changes (the resource's previous highest, the held log's length), and
 * when one of fence's functions raises an error later in the same run of
 * that statement, before the statement has written a row of its own, fence
 * puts the highest back and forgets what it held. A statement that did
 * write rows in between keeps its statement journal's word: SQLite opens one
 * for multi-row writes, and an INSERT OR FAIL keeps its earlier rows and the
 * tokens they were written at. A bare SELECT (readonly) is the documented
 * exception: SQLite gives it no journal, and fence does not second-guess it.
 * ------------------------------------------------------------------ */

/* The writing statement of the application that is running us, or NULL. */
static sqlite3_stmt *
outerWriter(FenceConn *conn)
{
	sqlite3_stmt *p;

	for (p = sqlite3_next_stmt(conn->db, NULL); p; p = sqlite3_next_stmt(conn->db, p))
	{
		if (p == conn->pSelectToken || p == conn->pAdvanceToken ||
			p == conn->pDeleteToken || p == conn->pEnlist ||
			p == conn->pEnlistMain)
			continue;
		if (sqlite3_stmt_busy(p) && !sqlite3_stmt_readonly(p))
			return p;
	}
	return NULL;
}

void
fenceUndoForget(FenceConn *conn)
{
	int			i;

	for (i = 0; i < conn->nUndo; i++)
		sqlite3_free(conn->aUndo[i].resource);
	conn->nUndo = 0;
	conn->pUndoStmt = NULL;
}

/* Is the log about this run of outer? Start it afresh if not. */
static void
undoFor(FenceConn *conn, sqlite3_stmt *outer)
{
	int			run = sqlite3_stmt_status(outer, SQLITE_STMTSTATUS_RUN, 0);

	if (conn->pUndoStmt == outer && conn->undoRun == run)
		return;
	fenceUndoForget(conn);
	conn->pUndoStmt = outer;
	conn->undoRun = run;
	conn->undoMark = conn->held.n_entries;
	conn->undoChanges = sqlite3_total_changes64(conn->db);
}

/* Note the resource's highest before we change it; SQLITE_NOMEM if we cannot. */
static int
undoNote(FenceConn *conn, const char *z, int n, int bHad, sqlite3_int64 token,
		 const char *zAt)
{
	FenceUndo  *u;

	if (conn->nUndo >= conn->nUndoAlloc)
	{
		int			nAlloc = conn->nUndoAlloc ? conn->nUndoAlloc * 2 : 4;
		FenceUndo  *a = sqlite3_realloc64(conn->aUndo, sizeof(FenceUndo) * (sqlite3_uint64) nAlloc);

		if (a == NULL)
			return SQLITE_NOMEM;
		conn->aUndo = a;
		conn->nUndoAlloc = nAlloc;
	}
	u = &conn->aUndo[conn->nUndo];
	u->resource = sqlite3_malloc(n + 1);
	if (u->resource == NULL)
		return SQLITE_NOMEM;
	memcpy(u->resource, z, (size_t) n);
	u->resource[n] = '\0';
	u->n = n;
	u->bHad = bHad;
	u->token = token;
	sqlite3_snprintf((int) sizeof(u->zUpdatedAt), u->zUpdatedAt, "%s", zAt ? zAt : "");
	conn->nUndo++;
	return SQLITE_OK;
}

static int
undoOne(FenceConn *conn, const FenceUndo *u)
{
	sqlite3_stmt *stmt = NULL;
	int			rc;

	if (!u->bHad)
		return runTokenStmt(conn, &conn->pDeleteToken, deleteTokenSql, u->resource, u->n, 0);
	rc = sqlite3_prepare_v2(conn->db, restoreTokenSql, -1, &stmt, NULL);
	if (rc == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, u->resource, u->n, SQLITE_STATIC);
		sqlite3_bind_int64(stmt, 2, u->token);
		sqlite3_bind_text(stmt, 3, u->zUpdatedAt, -1, SQLITE_STATIC);
		rc = sqlite3_step(stmt);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	}
	sqlite3_finalize(stmt);
	return rc;
}

/*
 * One of fence's functions is about to raise an error: if it runs inside
 * the same run of the writing statement whose accepts we noted, and that
 * statement has written nothing of its own since, undo those accepts.
 */
FENCE_COLD static void
undoOnError(FenceConn *conn)
{
	sqlite3_stmt *outer;
	int			i;
	int			rc = SQLITE_OK;

	/* a trigger on fence_tokens fired by the undo itself brought us back */
	if (conn->pUndoStmt == NULL || conn->bUndoing)
		return;
	conn->bUndoing = 1;
	outer = outerWriter(conn);
	if (outer == conn->pUndoStmt &&
		sqlite3_stmt_status(outer, SQLITE_STMTSTATUS_RUN, 0) == conn->undoRun &&
		sqlite3_total_changes64(conn->db) == conn->undoChanges)
	{
		for (i = conn->nUndo - 1; i >= 0 && rc == SQLITE_OK; i--)
			rc = undoOne(conn, &conn->aUndo[i]);
		if (rc != SQLITE_OK)
			conn->bBroken = 1;	/* fail closed: the transaction cannot commit */
		fenceGuardMemoForget(conn);
		if (conn->bEnlisted && conn->undoMark <= conn->held.n_entries)
			fence_held_truncate(&conn->held, conn->undoMark);
	}
	fenceUndoForget(conn);
	conn->bUndoing = 0;
}

/*
 * The held-fence log could not record a change (out of memory): from now on
 * the transaction fails closed (FENCE_BROKEN_MSG) until it ends.
 */
FENCE_COLD static int
heldOutOfMemory(FenceConn *conn)
{
	conn->bBroken = 1;
	fenceGuardMemoForget(conn);
	return FENCE_RC_BROKEN;
}

/* ---------------------------------------------------------------------
 * Read first
 *
 * An equal accept must take no write lock (SPEC: transactions fenced at the
 * same token do not wait for each other), so an accept reads fence_tokens
 * before anything of main is locked, whatever this connection saw before.
 * An advance then upgrades the transaction's read to a write, which SQLite
 * never waits for (it fails with SQLITE_BUSY at once when another
 * connection writes): the documented pattern is BEGIN IMMEDIATE, which
 * takes the write lock, waiting the busy timeout, before the check. The
 * hints below remember what was read, as verdicts for the cache.
 * ------------------------------------------------------------------ */

static unsigned
hintSlot(const char *z, int n)
{
	unsigned	h = 2166136261u;
	int			i;

	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char) z[i]) * 16777619u;
	return h % FENCE_HINTS;
}

/*
 * Is a database other than main and temp attached? Then an accept must hold
 * main's write lock whatever the token: an attached database has a pager
 * of its own, and a write through it starts on the newest snapshot, so the
 * snapshot main's read pinned would not stop the transaction from
 * committing a write after a newer token committed (WAL). SQLite lets ATTACH
 * run inside a transaction too, after its accepts: a commit that then wrote
 * an attached database with main only read-locked is refused
 * (unpinnedAttachedWrite, fence_held.c). sqlite3_db_name is 3.39's; before
 * it, assume there is.
 */
static int
otherSchemaAttached(sqlite3 *db)
{
	if (sqlite3_libversion_number() < 3039000)
		return 1;
	return sqlite3_db_name(db, 2) != NULL;
}

/*
 * Remember what was read (out of memory: remember nothing, it is a hint),
 * as a verdict for later transactions when this one is watched
 * (fence_cache.c).
 */
static void
hintSet(FenceConn *conn, const char *z, int n, int bHas, sqlite3_int64 highest)
{
	FenceHint  *h = &conn->aHint[hintSlot(z, n)];

	h->gen = 0;

	if (h->z == NULL || h->n != n || memcmp(h->z, z, (size_t) n) != 0)
	{
		sqlite3_free(h->z);
		h->z = sqlite3_malloc(n > 0 ? n : 1);
		if (h->z == NULL)
			return;
		memcpy(h->z, z, (size_t) n);
		h->n = n;
	}
	h->bHas = bHas;
	h->highest = highest;
	h->gen = fenceCacheStamp(conn);
}

/*
 * The cache's verdict on z: its highest, if this transaction may take it
 * and it is at least token (an equal or a stale token; an advance reads,
 * for the undo log wants the row's updated_at). NULL: read.
 */
static const FenceHint *
cachedAtLeast(FenceConn *conn, const char *z, int n, sqlite3_int64 token)
{
	const FenceHint *h = &conn->aHint[hintSlot(z, n)];

	if (conn->cacheTxn == FENCE_CACHE_TXN_WATCHED && h->gen == conn->cacheGen &&
		h->z != NULL && h->bHas && h->highest >= token && h->n == n &&
		memcmp(h->z, z, (size_t) n) == 0)
	{
		if (fenceWatchIntact(conn))
			return h;
		fenceCacheWatchLost(conn);
	}
	return NULL;
}

/* Forget what was remembered of z (fence_reset) */
static void
hintForget(FenceConn *conn, const char *z, int n)
{
	FenceHint  *h = &conn->aHint[hintSlot(z, n)];

	if (h->z != NULL && h->n == n && memcmp(h->z, z, (size_t) n) == 0)
		h->gen = 0;
}

void
fenceHintsFree(FenceConn *conn)
{
	int			i;

	for (i = 0; i < FENCE_HINTS; i++)
	{
		sqlite3_free(conn->aHint[i].z);
		conn->aHint[i].z = NULL;
	}
}

/*
 * fence's own write of z's row of fence_tokens is under way: the watch
 * triggers (fence_cache.c) let it through without forgetting the cache,
 * since the caller puts what it wrote into the hint table.
 */
static void
writingBegin(FenceConn *conn, const char *z, int n, sqlite3_int64 token, int bReset)
{
	conn->zWriting = z;
	conn->nWriting = n;
	conn->writingToken = token;
	conn->bWritingReset = bReset;
}

static void
writingEnd(FenceConn *conn)
{
	conn->zWriting = NULL;
}

/*
 * The accept rule applied in this connection's transaction. On return with
 * SQLITE_OK, *pStale says whether the token was rejected, and *pHighest is
 * the highest it lost to. An accepted token is held by the transaction.
 */
static int
acceptToken(FenceConn *conn, const char *z, int n, sqlite3_int64 token,
			int *pStale, sqlite3_int64 *pHighest)
{
	FenceVerdict verdict;
	sqlite3_int64 highest;
	int			has;
	int			rc;
	char		zAt[64] = "";
	sqlite3_stmt *outer;

	*pStale = 0;
	*pHighest = 0;

	/*
	 * Held at this very token in this transaction: judged in the snapshot
	 * the transaction still reads, which only its own moves (which update
	 * what it holds) change; a newer commit by another connection keeps its
	 * writes from committing (see the head of this file).
	 */
	if (conn->bEnlisted && !conn->bBroken &&
		fence_held_get(&conn->held, z, (size_t) n) == token)
		return SQLITE_OK;

	rc = fenceHeldEnlist(conn, !conn->bEnlisted && otherSchemaAttached(conn->db));
	if (rc == SQLITE_OK && conn->bBroken)
		rc = FENCE_RC_BROKEN;
	if (rc == SQLITE_OK && conn->bEnlisted && conn->cacheTxn == FENCE_CACHE_TXN_UNKNOWN)
	{
		/*
		 * The first accept of the transaction: may it take the cache's
		 * word? A guard's call admitted by the count (fence_guard.c) has
		 * the schema's word already.
		 */
		if ((conn->bInGuard && conn->bByCount) || fenceSchemaCheck(conn) == SQLITE_OK)
			fenceCacheTxnBegin(conn);
		else
		{
			fenceCacheForget(conn);
			conn->cacheTxn = FENCE_CACHE_TXN_UNWATCHED;
		}
	}
	if (rc == SQLITE_OK)
	{
		const FenceHint *cached = cachedAtLeast(conn, z, n, token);

		if (cached != NULL)
		{
			has = 1;
			highest = cached->highest;
		}
		else
		{
			rc = readHighestAt(conn, z, n, 1, &has, &highest, zAt, (int) sizeof(zAt));
			if (rc == SQLITE_OK)
				hintSet(conn, z, n, has, highest);
		}
	}
	if (rc == SQLITE_OK && conn->sharedCache == FENCE_SHARED_YES)
		rc = readUncommittedRefused(conn, z, n);
	if (rc != SQLITE_OK)
		return rc;
	/*
	 * A guard's accept needs no undo log: the statement that fires a guard
	 * trigger has triggers that may abort, so SQLite gives it a statement
	 * journal (or, in autocommit, rolls the whole transaction back), which
	 * undoes its writes of fence_tokens and tells fence_held to truncate.
	 * Finding the outer statement walks every statement of the connection.
	 */
	outer = conn->bEnlisted && !conn->bInGuard ? outerWriter(conn) : NULL;
	if (outer)
		undoFor(conn, outer);

	verdict = fence_decide(has, highest, token);
	if (!fence_verdict_accepts(verdict))
	{
		*pStale = 1;
		*pHighest = highest;
		return SQLITE_OK;
	}
	if (verdict != FENCE_ACCEPT_EQUAL)
	{
		/*
		 * Only fence's own guards may write fence_tokens through a guard
		 * function, and the call may be another caller's (a view, a
		 * trigger) made after the schema was last read: admitted by the
		 * count (fence_guard.c), or made in this transaction after its
		 * first check. Its caller reads the schema now and admits it
		 * again before the write.
		 */
		if (conn->bInGuard && !conn->bSchemaFresh)
			return FENCE_RC_READ_SCHEMA;
		if (outer && undoNote(conn, z, n, has, highest, zAt) != SQLITE_OK)
			return SQLITE_NOMEM;
		int			bWrote;

		writingBegin(conn, z, n, token, 0);
		rc = runTokenStmt(conn, &conn->pAdvanceToken, advanceTokenSql, z, n, token);
		writingEnd(conn);
		if (outer)
			conn->undoChanges = sqlite3_total_changes64(conn->db);
		if (rc != SQLITE_OK)
			return rc;
		bWrote = sqlite3_changes(conn->db) > 0;

		/*
		 * No row written: another connection raised the highest between
		 * our read and our write, which can only happen when there is no
		 * open transaction to hold the write lock (an autocommit SELECT,
		 * whose enlisting statement has already committed): judge again.
		 */
		if (bWrote)
			highest = token;
		else
		{
			rc = readHighest(conn, z, n, 1, &has, &highest);
			if (rc != SQLITE_OK)
				return rc;
		}
		hintSet(conn, z, n, 1, highest);
		if (!fence_verdict_accepts(fence_decide(has, highest, token)))
		{
			*pStale = 1;
			*pHighest = highest;
			return SQLITE_OK;
		}
	}
	/* not enlisted: an autocommit SELECT whose transaction has already ended */
	if (conn->bEnlisted && fence_held_get(&conn->held, z, (size_t) n) < token)
	{
		fenceGuardMemoForget(conn);
		if (fence_held_set(&conn->held, z, (size_t) n, token, 0) != 0)
			return heldOutOfMemory(conn);
	}
	return rc;
}

/* ---------------------------------------------------------------------
 * Arguments and errors
 * ------------------------------------------------------------------ */

FENCE_COLD static void
resultInvalid(sqlite3_context *ctx, const char *what, FenceProblem problem,
			  size_t len, sqlite3_int64 token)
{
	char		buf[FENCE_MSG_MAX];

	undoOnError(sqlite3_user_data(ctx));

	sqlite3_result_error(ctx, fence_msg_invalid(buf, what, problem, len, token), -1);
	sqlite3_result_error_code(ctx, FENCE_RC_INVALID);
}

FENCE_COLD static void
resultStale(sqlite3_context *ctx, const char *z, int n, sqlite3_int64 token,
			sqlite3_int64 highest)
{
	char		buf[FENCE_MSG_MAX];

	undoOnError(sqlite3_user_data(ctx));

	sqlite3_result_error(ctx, fence_line_stale(buf, z, (size_t) n, token, highest), -1);
	sqlite3_result_error_code(ctx, FENCE_RC_STALE);
}

FENCE_COLD static void
resultMissing(sqlite3_context *ctx, FenceMissing why, const char *z, int n)
{
	char		buf[FENCE_MSG_MAX];

	undoOnError(sqlite3_user_data(ctx));

	sqlite3_result_error(ctx, fence_line_missing(buf, why, z, (size_t) n, NULL), -1);
	sqlite3_result_error_code(ctx, FENCE_RC_MISSING);
}

/*
 * An error of SQLite itself (SQLITE_BUSY, SQLITE_READONLY...) passes through
 * with SQLite's message, or ours for what fence itself refuses.
 */
FENCE_COLD static void
resultDbError(sqlite3_context *ctx, FenceConn *conn, int rc)
{
	char		saved[sizeof(conn->zSavedErr)];
	const char *msg;

	/* undoing may run statements of ours: keep the message it would replace */
	saved[0] = '\0';
	if (conn->savedRc == rc)
		memcpy(saved, conn->zSavedErr, sizeof(saved));
	conn->savedRc = SQLITE_OK;
	undoOnError(conn);
	msg = saved[0] ? saved : sqlite3_errmsg(conn->db);
	if (rc == FENCE_RC_BROKEN)
	{
		/* SQLITE_ERROR, not SQLITE_NOMEM: clients drop the message of the latter */
		sqlite3_result_error(ctx, FENCE_BROKEN_MSG, -1);
		sqlite3_result_error_code(ctx, SQLITE_ERROR);
		return;
	}
	if (rc == FENCE_RC_SHADOWED)
	{
		sqlite3_result_error(ctx, FENCE_SHADOWED_MSG, -1);
		sqlite3_result_error_code(ctx, SQLITE_ERROR);
		return;
	}
	if (rc == FENCE_RC_UNTRUSTED)
	{
		sqlite3_result_error(ctx, saved[0] ? saved : "fence: cannot trust main.fence_tokens", -1);
		sqlite3_result_error_code(ctx, SQLITE_ERROR);
		return;
	}
	if (rc == FENCE_RC_REENTERED)
	{
		sqlite3_result_error(ctx, FENCE_REENTERED_MSG, -1);
		sqlite3_result_error_code(ctx, SQLITE_ERROR);
		return;
	}
	if ((rc & 0xff) == SQLITE_NOMEM)
	{
		sqlite3_result_error_nomem(ctx);
		return;
	}
	/* the connection's last error may belong to another call: never "not an error" */
	if (msg != saved &&
		(sqlite3_errcode(conn->db) == SQLITE_OK || sqlite3_errcode(conn->db) == SQLITE_DONE ||
		 sqlite3_errcode(conn->db) == SQLITE_ROW))
		msg = sqlite3_errstr(rc);
	sqlite3_result_error(ctx, msg, -1);
	sqlite3_result_error_code(ctx, fenceErrorCode(rc));
}

/* A resource argument: TEXT, non-empty, at most FENCE_RESOURCE_MAX bytes. */
static int
argResource(sqlite3_context *ctx, sqlite3_value *v, const char **pz, int *pn)
{
	FenceProblem problem;

	if (sqlite3_value_type(v) == SQLITE_NULL)
		problem = FENCE_NULL;
	else if (sqlite3_value_type(v) != SQLITE_TEXT)
		problem = FENCE_NOT_TEXT;
	else
	{
		*pz = (const char *) sqlite3_value_text(v);
		*pn = sqlite3_value_bytes(v);
		if (*pz == NULL)
		{
			sqlite3_result_error_nomem(ctx);
			return 0;
		}
		problem = fence_check_resource(*pz, (size_t) *pn);
	}
	if (problem != FENCE_VALID)
	{
		resultInvalid(ctx, "resource", problem, (size_t) sqlite3_value_bytes(v), 0);
		return 0;
	}
	return 1;
}

/*
 * A per-row resource: the prefix followed by the key as CAST(key AS TEXT),
 * which is what sqlite3_value_text() gives. buf has FENCE_RESOURCE_MAX + 1
 * bytes.
 */
static int
argKeyResource(sqlite3_context *ctx, sqlite3_value *prefix, sqlite3_value *key,
			   char *buf, const char **pz, int *pn)
{
	const char *zPrefix;
	const char *zKey;
	int			nPrefix;
	int			nKey;
	FenceProblem problem;

	if (sqlite3_value_type(prefix) != SQLITE_TEXT)
	{
		resultInvalid(ctx, "resource prefix", sqlite3_value_type(prefix) == SQLITE_NULL ?
					  FENCE_NULL : FENCE_NOT_TEXT, 0, 0);
		return 0;
	}
	if (sqlite3_value_type(key) == SQLITE_NULL)
	{
		resultInvalid(ctx, "key", FENCE_NULL, 0, 0);
		return 0;
	}
	zPrefix = (const char *) sqlite3_value_text(prefix);
	nPrefix = sqlite3_value_bytes(prefix);
	zKey = (const char *) sqlite3_value_text(key);
	nKey = sqlite3_value_bytes(key);
	if (zPrefix == NULL || zKey == NULL)
	{
		sqlite3_result_error_nomem(ctx);
		return 0;
	}
	problem = fence_check_resource(zPrefix, (size_t) nPrefix + (size_t) nKey);
	if (problem != FENCE_VALID)
	{
		resultInvalid(ctx, "resource", problem, (size_t) nPrefix + (size_t) nKey, 0);
		return 0;
	}
	memcpy(buf, zPrefix, (size_t) nPrefix);
	memcpy(buf + nPrefix, zKey, (size_t) nKey);
	buf[nPrefix + nKey] = '\0';
	*pz = buf;
	*pn = nPrefix + nKey;
	return 1;
}

int
fenceValueInt64(sqlite3_value *v, sqlite3_int64 *p)
{
	int			t = sqlite3_value_type(v);
	double		d;

	if (t == SQLITE_INTEGER)
	{
		*p = sqlite3_value_int64(v);
		return 1;
	}
	if (t != SQLITE_FLOAT)
		return 0;
	d = sqlite3_value_double(v);
	if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) ||
		d != (double) (sqlite3_int64) d)
		return 0;
	*p = (sqlite3_int64) d;
	return 1;
}

/* A token argument: an integer (fenceValueInt64), >= 0. */
static int
argToken(sqlite3_context *ctx, sqlite3_value *v, sqlite3_int64 *pToken)
{
	int			t = sqlite3_value_type(v);

	if (t == SQLITE_INTEGER)
		*pToken = sqlite3_value_int64(v);
	if (t == SQLITE_NULL)
		resultInvalid(ctx, "token", FENCE_NULL, 0, 0);
	else if (t != SQLITE_INTEGER && !fenceValueInt64(v, pToken))
		resultInvalid(ctx, "token", FENCE_NOT_INTEGER, 0, 0);
	else if (fence_check_token(*pToken) != FENCE_VALID)
		resultInvalid(ctx, "token", FENCE_NEGATIVE, 0, *pToken);
	else
		return 1;
	return 0;
}

/* ---------------------------------------------------------------------
 * SQL functions
 * ------------------------------------------------------------------ */

/*
 * Present a validated token and give the function's result: the token, or
 * with bTry 1/0; a stale token raises unless bTry. Returns 1 when accepted,
 * 0 when not (the result says why), and -1, with no result and nothing
 * changed, when a guard's call admitted by the count would write
 * fence_tokens (acceptToken).
 */
static int
resultAccept(sqlite3_context *ctx, const char *z, int n, sqlite3_int64 token, int bTry)
{
	FenceConn  *conn = sqlite3_user_data(ctx);
	sqlite3_int64 highest;
	int			stale;
	int			rc;

	/* fence_stats' slot first: out of memory then refuses before anything changes */
	int			slot = fenceStatsFind(conn, z, n);

	if (slot < 0)
	{
		resultDbError(ctx, conn, SQLITE_NOMEM);
		return 0;
	}
	rc = acceptToken(conn, z, n, token, &stale, &highest);
	if (rc == FENCE_RC_READ_SCHEMA)
		return -1;				/* nothing changed: guardWriteChecked admits again */
	if (rc == SQLITE_OK)
		fenceStatsCount(conn, slot, stale, token);
	if (rc != SQLITE_OK)
		resultDbError(ctx, conn, rc);
	else if (bTry)
		sqlite3_result_int(ctx, !stale);
	else if (stale)
		resultStale(ctx, z, n, token, highest);
	else
		sqlite3_result_int64(ctx, token);
	return rc == SQLITE_OK && !stale;
}

/* fence_check(resource, token) and fence_try(resource, token) */
static void
checkOrTry(sqlite3_context *ctx, sqlite3_value **argv, int bTry)
{
	const char *z = NULL;
	int			n = 0;
	sqlite3_int64 token = 0;

	if (argResource(ctx, argv[0], &z, &n) && argToken(ctx, argv[1], &token))
		(void) resultAccept(ctx, z, n, token, bTry);
}

static void
fenceCheckFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void) argc;
	checkOrTry(ctx, argv, 0);
}

static void
fenceTryFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void) argc;
	checkOrTry(ctx, argv, 1);
}

static void
fenceCurrentFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	FenceConn  *conn = sqlite3_user_data(ctx);
	const char *z = NULL;
	int			n = 0;
	int			has;
	sqlite3_int64 highest;
	int			rc;

	(void) argc;
	if (!argResource(ctx, argv[0], &z, &n))
		return;
	rc = readHighest(conn, z, n, 0, &has, &highest);
	if (rc != SQLITE_OK)
		resultDbError(ctx, conn, rc);
	else if (has)
		sqlite3_result_int64(ctx, highest);
	else
		sqlite3_result_null(ctx);
}

static void
fenceResetFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	FenceConn  *conn = sqlite3_user_data(ctx);
	const char *z = NULL;
	int			n = 0;
	int			rc;

	(void) argc;
	if (!argResource(ctx, argv[0], &z, &n))
		return;
	hintForget(conn, z, n);
	writingBegin(conn, z, n, 0, 1);
	rc = runTokenStmt(conn, &conn->pDeleteToken, deleteTokenSql, z, n, 0);
	writingEnd(conn);
	/* the transaction no longer holds what was forgotten (undone on rollback) */
	fenceGuardMemoForget(conn);
	if (rc == SQLITE_OK && conn->bEnlisted && fence_held_get(&conn->held, z, (size_t) n) >= 0 &&
		fence_held_set(&conn->held, z, (size_t) n, -1, 0) != 0)
		rc = heldOutOfMemory(conn);
	if (rc != SQLITE_OK)
		resultDbError(ctx, conn, rc);
	else
		sqlite3_result_null(ctx);
}

/*
 * The guard's resource: the one main.fence_guards records for guard argv[0]
 * (a one-resource guard, bKeyed 0), or the prefix argv[1] followed by the
 * key argv[2]. Admitted (fence_guard.c) before anything else is looked at.
 * Either way it ends up in buf (FENCE_RESOURCE_MAX + 1 bytes): what
 * admission keeps is forgotten when a statement this call runs rolls back.
 */
static int
guardResource(sqlite3_context *ctx, FenceConn *conn, sqlite3_value **argv, int bKeyed,
			  char *buf, const char **pz, int *pn)
{
	const char *zRes = NULL;
	int			nRes = 0;
	FenceProblem problem;

	if (sqlite3_value_type(argv[0]) != SQLITE_INTEGER)
		return fenceGuardAdmit(ctx, conn, argv[0], &zRes, &nRes, bKeyed);	/* refuses */
	if (bKeyed)
	{
		if (sqlite3_value_type(argv[1]) != SQLITE_TEXT)
			return argKeyResource(ctx, argv[1], argv[2], buf, pz, pn);	/* refuses */
		zRes = (const char *) sqlite3_value_text(argv[1]);
		nRes = sqlite3_value_bytes(argv[1]);
		if (zRes == NULL)
		{
			sqlite3_result_error_nomem(ctx);
			return 0;
		}
		return fenceGuardAdmit(ctx, conn, argv[0], &zRes, &nRes, 1) &&
			argKeyResource(ctx, argv[1], argv[2], buf, pz, pn);
	}
	if (!fenceGuardAdmit(ctx, conn, argv[0], &zRes, &nRes, 0))
		return 0;
	/* recorded by fence_protect, which checked it; an edited row is checked again */
	problem = fence_check_resource(zRes, (size_t) nRes);
	if (problem != FENCE_VALID)
	{
		resultInvalid(ctx, "resource", problem, (size_t) nRes, 0);
		return 0;
	}
	memcpy(buf, zRes, (size_t) nRes);
	buf[nRes] = '\0';
	*pz = buf;
	*pn = nRes;
	return 1;
}

/* ---------------------------------------------------------------------
 * The guard's memo
 *
 * A statement that writes many rows of a table with one resource calls the
 * same guard with the same arguments for each row, and after the first the
 * answer is known: the guard was admitted, the journal checked, the
 * resource held at that token. So each kind of guard call remembers the
 * last call that passed (guard id, resource, token) with conn->guardEpoch
 * as it was; a call with the same arguments passes at once while the epoch
 * has not moved. Everything that could change the answer moves it: a
 * transaction's start or end, a savepoint rolled back, a change of what
 * the transaction holds, admission forgotten or asked again, a fence
 * function's undo, running out of memory. Only the one-resource forms
 * (fence_guard_write/3, fence_guard_fenced/2) use it; a per-row resource
 * differs from row to row. fence_stats counts the accept as always, in
 * FenceConn.nMemoAccepts until it is read (fenceStatsSettleMemo).
 * ------------------------------------------------------------------ */

static inline int
memoHit(const FenceConn *conn, const FenceGuardMemo *m, sqlite3_value *idArg)
{
	return m->epoch == conn->guardEpoch &&
		sqlite3_value_type(idArg) == SQLITE_INTEGER &&
		sqlite3_value_int64(idArg) == m->id;
}

/* Remember a call of guard idArg on resource z that passed (at token): 1 if remembered. */
static int
memoSet(FenceConn *conn, FenceGuardMemo *m, sqlite3_value *idArg, const char *z, int n,
		sqlite3_int64 token)
{
	int			slot = fenceStatsFind(conn, z, n);

	/* the accept made the entry; without one (no memory) nothing is remembered */
	if (slot < 0 || sqlite3_value_type(idArg) != SQLITE_INTEGER)
		return 0;
	if (m == &conn->memoWrite)
		fenceStatsSettleMemo(conn);	/* its statsSlot changes */
	m->id = sqlite3_value_int64(idArg);
	m->token = token;
	m->statsSlot = slot;
	m->epoch = conn->guardEpoch;
	return 1;
}

/*
 * The whole check of fence_guard_write and fence_guard_fenced, apart from
 * the memo's answer: out of line, so that a call the memo answers pays for
 * none of its stack (a resource buffer of FENCE_RESOURCE_MAX bytes).
 */
static FENCE_NOINLINE void
guardWriteChecked(sqlite3_context *ctx, FenceConn *conn, int argc, sqlite3_value **argv)
{
	char		buf[FENCE_RESOURCE_MAX + 1];
	const char *z = NULL;
	int			n = 0;
	sqlite3_int64 token = 0;
	sqlite3_value *tokenArg = argv[argc - 1];
	int			rc;

	/* admission is cached per transaction, which enlisting opens */
	conn->bSchemaFresh = 0;
	rc = fenceHeldEnlist(conn, 0);
	if (rc != SQLITE_OK)
	{
		resultDbError(ctx, conn, rc);
		return;
	}
	if (!guardResource(ctx, conn, argv, argc == 4, buf, &z, &n))
		return;
	if (sqlite3_value_type(tokenArg) == SQLITE_NULL)
	{
		resultMissing(ctx, FENCE_MISSING_NULL_TOKEN, z, n);
		return;
	}
	if (argToken(ctx, tokenArg, &token))
	{
		int			bAccepted;
		int			bWasInGuard = conn->bInGuard;

		conn->bInGuard = 1;
		bAccepted = resultAccept(ctx, z, n, token, 0);
		if (bAccepted < 0)
		{
			/* it would write fence_tokens: read the schema, admit again, accept */
			conn->bSchemaFresh = 1;
			bAccepted = guardResource(ctx, conn, argv, argc == 4, buf, &z, &n) &&
				resultAccept(ctx, z, n, token, 0) > 0;
			conn->bSchemaFresh = 0;
		}
		conn->bInGuard = bWasInGuard;
		if (bAccepted && argc == 2 && conn->bEnlisted && !conn->bBroken)
		{
			/* and the transaction now holds the guard's resource: an UPDATE's next call */
			if (memoSet(conn, &conn->memoWrite, argv[0], z, n, token))
				conn->memoFenced = conn->memoWrite;
		}
	}
}

static FENCE_NOINLINE void
guardFencedChecked(sqlite3_context *ctx, FenceConn *conn, int argc, sqlite3_value **argv)
{
	char		buf[FENCE_RESOURCE_MAX + 1];
	const char *z = NULL;
	int			n = 0;

	if (!conn->bEnlisted && argc == 3)
	{
		/* holds nothing: refused whoever calls; only the message needs the name */
		if (argKeyResource(ctx, argv[1], argv[2], buf, &z, &n))
			resultMissing(ctx, FENCE_MISSING_NOT_FENCED, z, n);
		return;
	}
	if (conn->bBroken)
	{
		resultDbError(ctx, conn, FENCE_RC_BROKEN);
		return;
	}
	/* a one-resource guard's name is known once admitted */
	if (!guardResource(ctx, conn, argv, argc == 3, buf, &z, &n))
		return;
	if (conn->bEnlisted && fence_held_get(&conn->held, z, (size_t) n) >= 0)
	{
		sqlite3_result_int(ctx, 1);
		if (argc == 1)
			(void) memoSet(conn, &conn->memoFenced, argv[0], z, n, 0);
	}
	else
		resultMissing(ctx, FENCE_MISSING_NOT_FENCED, z, n);
}

/*
 * fence_guard_write(guard, token) / (guard, prefix, key, token): a row
 * written to a protected table carries this token. NULL is "fencing token
 * required" whatever the transaction holds (SPEC.md "Precise points").
 * guard is the id fence_protect recorded in main.fence_guards, with the
 * guard's resource or prefix. fence_guard_write(resource, token), what the
 * triggers of fence 1.2 and older call, passes no id and is refused.
 */
static void
fenceGuardWriteFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	FenceConn  *conn = sqlite3_user_data(ctx);
	const FenceGuardMemo *m = &conn->memoWrite;

	if (argc == 2 && memoHit(conn, m, argv[0]) &&
		sqlite3_value_type(argv[1]) == SQLITE_INTEGER &&
		sqlite3_value_int64(argv[1]) == m->token)
	{
		conn->nMemoAccepts++;	/* fence_stats: fenceStatsSettleMemo */
		sqlite3_result_int64(ctx, m->token);
	}
	else
		guardWriteChecked(ctx, conn, argc, argv);
}

/*
 * fence_guard_fenced(guard) / (guard, prefix, key): an UPDATE that does not
 * set the token, a DELETE, or any write to a token-less table must run in a
 * transaction that holds a fence on the row's resource. The one-argument
 * form of fence 1.2 and older, fence_guard_fenced(resource), is refused.
 */
static void
fenceGuardFencedFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	FenceConn  *conn = sqlite3_user_data(ctx);

	if (argc == 1 && memoHit(conn, &conn->memoFenced, argv[0]))
		sqlite3_result_int(ctx, 1);
	else
		guardFencedChecked(ctx, conn, argc, argv);
}

/*
 * fence_guard_write(guard, resource, token), fence_guard_fenced(guard,
 * resource): what the triggers of an earlier 1.4 development build call;
 * fence_guard_ready(guard, prefix, keyed): what those of 1.4 call for a key
 * that is the INTEGER PRIMARY KEY (since refused when SQLite assigns it).
 * Refused, saying what to do.
 */
static void
fenceGuardOldFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void) argc;
	(void) argv;
	sqlite3_result_error(ctx, "fence guard refused: this table's guard was made by an "
						 "earlier fence, whose triggers pass other arguments; run "
						 "fence_protect on the table again to replace its guard", -1);
}

/*
 * fence_loaded(): the connection's FenceConn as an SQLite pointer value of
 * type FENCE_CONN_POINTER. Only C code can make a pointer value of that
 * type, so a function of the same name that an application defines in SQL
 * or returns NULL cannot pass for it. To SQL it reads as NULL.
 */

static void
fenceLoadedFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void) argc;
	(void) argv;
	sqlite3_result_pointer(ctx, sqlite3_user_data(ctx), FENCE_CONN_POINTER, NULL);
}

/* ---------------------------------------------------------------------
 * What fence_lease.c shares with the functions above
 * ------------------------------------------------------------------ */

int
fenceArgResource(sqlite3_context *ctx, sqlite3_value *v, const char **pz, int *pn)
{
	return argResource(ctx, v, pz, pn);
}

int
fenceArgToken(sqlite3_context *ctx, sqlite3_value *v, sqlite3_int64 *pToken)
{
	return argToken(ctx, v, pToken);
}

/* An error of fence's own (invalid input): undo as the others do, then raise. */
void
fenceResultError(sqlite3_context *ctx, const char *zMsg, int rc)
{
	undoOnError(sqlite3_user_data(ctx));
	sqlite3_result_error(ctx, zMsg, -1);
	sqlite3_result_error_code(ctx, fenceErrorCode(rc));
}

void
fenceResultDbError(sqlite3_context *ctx, FenceConn *conn, int rc)
{
	resultDbError(ctx, conn, rc);
}

/* The resource's highest accepted token; never creates fence_tokens. */
int
fenceReadHighest(FenceConn *conn, const char *z, int n, int *pHas, sqlite3_int64 *pHighest)
{
	return readHighest(conn, z, n, 0, pHas, pHighest);
}

static const FenceFunction coreFunctions[] = {
	{"fence_check", 2, FENCE_APP_WRITES, fenceCheckFunc},
	{"fence_try", 2, FENCE_APP_WRITES, fenceTryFunc},
	{"fence_current", 1, FENCE_APP_READS, fenceCurrentFunc},
	{"fence_reset", 1, FENCE_APP_WRITES, fenceResetFunc},
	{"fence_guard_write", 2, FENCE_FROM_TRIGGER, fenceGuardWriteFunc},
	{"fence_guard_write", 4, FENCE_FROM_TRIGGER, fenceGuardWriteFunc},
	{"fence_guard_fenced", 1, FENCE_FROM_TRIGGER, fenceGuardFencedFunc},
	{"fence_guard_fenced", 3, FENCE_FROM_TRIGGER, fenceGuardFencedFunc},
	{"fence_guard_ready", 3, FENCE_FROM_TRIGGER, fenceGuardOldFunc},
	{"fence_guard_write", 3, FENCE_FROM_TRIGGER, fenceGuardOldFunc},
	{"fence_guard_fenced", 2, FENCE_FROM_TRIGGER, fenceGuardOldFunc},
	/* last (fence_init.c registers these after its own): says every one is there */
	{"fence_loaded", 0, FENCE_APP_READS | SQLITE_DIRECTONLY, fenceLoadedFunc},
};

int
fenceCoreFunctions(const FenceFunction **pa)
{
	*pa = coreFunctions;
	return (int) (sizeof(coreFunctions) / sizeof(coreFunctions[0]));
}
