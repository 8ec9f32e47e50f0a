/*
 * fence_accept.c
 *
 * The token table main.fence_tokens and the accept rule applied to it in
 * this connection's transaction: the cached statements that read, advance
 * and delete a resource's highest, the undo of a failed statement's
 * accepts, and the accept path every SQL function and guard of fence.c
 * comes down to.
 *
 * Provides: fenceAccept, fenceReadHighest, fenceForgetResource, fenceOuterWriter,
 * fenceUndoOnError, fenceUndoForget, fenceTakeSavedError,
 * fenceFinalizeStatements. Calls fence_cache.c, fence_held.c and
 * never fence.c or fence_guard.c.
 *
 * Concurrency: SQLite has one writer per database file. An accept first
 * enlists fence_held (fence_held.c) through a virtual table in TEMP, which
 * takes main's read lock but not its write lock, then reads fence_tokens in
 * the transaction's read snapshot, or takes the highest from what this
 * connection remembers of its last transaction when nothing has changed
 * the file since (fence_cache.c, which says how that is known; the
 * snapshot is the same one). An equal accept writes nothing and so takes
 * no write lock: transactions fenced at the same token do not wait for
 * each other. The read pins the snapshot (WAL) or holds the SHARED lock
 * (rollback journal) until the transaction ends, and any write the
 * transaction makes later (an advance of fence_tokens, a guarded row) needs
 * the write lock: in WAL a snapshot older than the newest commit cannot
 * take it (SQLITE_BUSY_SNAPSHOT), and in rollback-journal mode nobody can
 * commit while the SHARED lock is held. So a higher token committed after
 * our read ends our transaction in SQLITE_BUSY or the stale error, never in
 * a committed write at the older token (SPEC.md "SQLite specifics").
 *
 * Trust: fence reads and writes fence_tokens as SQLite gives it; an
 * authorizer or trigger of the application's that changes what fence's own
 * statements read or write is trusted code (docs/trust.md). An application
 * table that holds the name fence_tokens with another shape is refused,
 * never adopted (fenceOwnTableShape).
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

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
	sqlite3_finalize(conn->tokens.pSelect);
	sqlite3_finalize(conn->tokens.pAdvance);
	sqlite3_finalize(conn->tokens.pDelete);
	conn->tokens.pSelect = conn->tokens.pAdvance = conn->tokens.pDelete = NULL;
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
	conn->tokens.sharedCache = shared;
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
	conn->savedRc = SQLITE_ERROR;
	sqlite3_snprintf((int) sizeof(conn->zSavedErr), conn->zSavedErr,
					 "fence refused: read_uncommitted is on in shared cache, so tokens of "
					 "\"%.*s\" may be uncommitted; set PRAGMA read_uncommitted = 0", n, z);
	return SQLITE_ERROR;
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
		}
		rc = sqlite3_prepare_v3(conn->db, sql, -1, SQLITE_PREPARE_PERSISTENT, pp, NULL);
	}
	if (rc == SQLITE_OK && conn->tokens.sharedCache == FENCE_SHARED_UNKNOWN)
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
	sqlite3_finalize(conn->tokens.pSelect);
	sqlite3_finalize(conn->tokens.pAdvance);
	sqlite3_finalize(conn->tokens.pDelete);
	conn->tokens.pSelect = conn->tokens.pAdvance = conn->tokens.pDelete = NULL;
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

		rc = prepareTokenStmt(conn, &conn->tokens.pSelect, selectTokenSql, bCreate);
		if (rc != SQLITE_OK || conn->tokens.pSelect == NULL)
			return rc;
		p = conn->tokens.pSelect;
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
		rc = fenceStepToEnd(*pp);
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
sqlite3_stmt *
fenceOuterWriter(FenceConn *conn)
{
	sqlite3_stmt *p;

	for (p = sqlite3_next_stmt(conn->db, NULL); p; p = sqlite3_next_stmt(conn->db, p))
	{
		if (p == conn->tokens.pSelect || p == conn->tokens.pAdvance ||
			p == conn->tokens.pDelete || p == conn->enlist.pEnlist ||
			p == conn->enlist.pEnlistMain)
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

	for (i = 0; i < conn->undo.n; i++)
		sqlite3_free(conn->undo.a[i].resource);
	conn->undo.n = 0;
	conn->undo.pStmt = NULL;
}

/* Is the log about this run of outer? Start it afresh if not. */
static void
undoFor(FenceConn *conn, sqlite3_stmt *outer)
{
	int			run = sqlite3_stmt_status(outer, SQLITE_STMTSTATUS_RUN, 0);

	if (conn->undo.pStmt == outer && conn->undo.run == run)
		return;
	fenceUndoForget(conn);
	conn->undo.pStmt = outer;
	conn->undo.run = run;
	conn->undo.mark = conn->txn.held.n_entries;
	conn->undo.changes = sqlite3_total_changes64(conn->db);
}

/* Note the resource's highest before we change it; SQLITE_NOMEM if we cannot. */
static int
undoNote(FenceConn *conn, const char *z, int n, int bHad, sqlite3_int64 token,
		 const char *zAt)
{
	FenceUndo  *u;

	if (conn->undo.n >= conn->undo.nAlloc)
	{
		int			nAlloc = conn->undo.nAlloc ? conn->undo.nAlloc * 2 : 4;
		FenceUndo  *a = sqlite3_realloc64(conn->undo.a, sizeof(FenceUndo) * (sqlite3_uint64) nAlloc);

		if (a == NULL)
			return SQLITE_NOMEM;
		conn->undo.a = a;
		conn->undo.nAlloc = nAlloc;
	}
	u = &conn->undo.a[conn->undo.n];
	u->resource = sqlite3_malloc(n + 1);
	if (u->resource == NULL)
		return SQLITE_NOMEM;
	memcpy(u->resource, z, (size_t) n);
	u->resource[n] = '\0';
	u->n = n;
	u->bHad = bHad;
	u->token = token;
	sqlite3_snprintf((int) sizeof(u->zUpdatedAt), u->zUpdatedAt, "%s", zAt ? zAt : "");
	conn->undo.n++;
	return SQLITE_OK;
}

static int
undoOne(FenceConn *conn, const FenceUndo *u)
{
	sqlite3_stmt *stmt = NULL;
	int			rc;

	if (!u->bHad)
		return runTokenStmt(conn, &conn->tokens.pDelete, deleteTokenSql, u->resource, u->n, 0);
	rc = sqlite3_prepare_v2(conn->db, restoreTokenSql, -1, &stmt, NULL);
	if (rc == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, u->resource, u->n, SQLITE_STATIC);
		sqlite3_bind_int64(stmt, 2, u->token);
		sqlite3_bind_text(stmt, 3, u->zUpdatedAt, -1, SQLITE_STATIC);
		rc = fenceStepToEnd(stmt);
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
FENCE_COLD void
fenceUndoOnError(FenceConn *conn)
{
	sqlite3_stmt *outer;
	int			i;
	int			rc = SQLITE_OK;

	/* a trigger on fence_tokens fired by the undo itself brought us back */
	if (conn->undo.pStmt == NULL || conn->undo.bUndoing)
		return;
	conn->undo.bUndoing = 1;
	outer = fenceOuterWriter(conn);
	if (outer == conn->undo.pStmt &&
		sqlite3_stmt_status(outer, SQLITE_STMTSTATUS_RUN, 0) == conn->undo.run &&
		sqlite3_total_changes64(conn->db) == conn->undo.changes)
	{
		for (i = conn->undo.n - 1; i >= 0 && rc == SQLITE_OK; i--)
			rc = undoOne(conn, &conn->undo.a[i]);
		if (rc != SQLITE_OK)
			(void) fenceHeldBreak(conn);	/* fail closed: the transaction cannot commit */
		if (conn->undo.n > 0)
			fenceCacheForget(conn);	/* the hints hold the undone advances */
		fenceHeldTruncate(conn, conn->undo.mark);
	}
	fenceUndoForget(conn);
	conn->undo.bUndoing = 0;
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

/*
 * The accept rule applied in this connection's transaction. On return with
 * SQLITE_OK, *pStale says whether the token was rejected, and *pHighest is
 * the highest it lost to. An accepted token is held by the transaction.
 */
int
fenceAccept(FenceConn *conn, const char *z, int n, sqlite3_int64 token,
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
	if (conn->txn.bEnlisted && !conn->txn.bBroken &&
		fence_held_get(&conn->txn.held, z, (size_t) n) == token)
		return SQLITE_OK;

	/*
	 * With another database attached an accept takes main's write lock
	 * whatever the token: an attached database has a pager of its own, and
	 * a write through it starts on the newest snapshot, which main's read
	 * would not pin (WAL). An ATTACH inside the transaction, after its
	 * accepts, is refused at commit (unpinnedAttachedWrite, fence_held.c).
	 */
	rc = fenceHeldEnlist(conn, !conn->txn.bEnlisted && sqlite3_db_name(conn->db, 2) != NULL);
	if (rc == SQLITE_OK && conn->txn.bBroken)
		rc = FENCE_RC_BROKEN;
	if (rc == SQLITE_OK && conn->txn.bEnlisted && conn->cache.txn == FENCE_CACHE_TXN_UNKNOWN)
	{
		/* the first accept of the transaction: may it take the cache's word? */
		int			rcPoll = SQLITE_OK;

		/* a guard's call: its admission has just asked */
		unsigned	gen = conn->bInGuard ? conn->changes.gen :
			FENCE_CHANGES_GEN(conn, FENCE_POLL_ANY, &rcPoll);

		fenceCacheTxnBegin(conn, rcPoll == SQLITE_OK &&
						   conn->tokens.sharedCache == FENCE_SHARED_NO, gen);
	}
	if (rc == SQLITE_OK)
	{
		const FenceHint *cached = fenceCacheGet(conn, z, n, token);

		if (cached != NULL)
		{
			has = 1;
			highest = cached->highest;
		}
		else
		{
			rc = readHighestAt(conn, z, n, 1, &has, &highest, zAt, (int) sizeof(zAt));
			if (rc == SQLITE_OK)
				fenceCacheSet(conn, z, n, has, highest);
		}
	}
	if (rc == SQLITE_OK && conn->tokens.sharedCache == FENCE_SHARED_YES)
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
	outer = conn->txn.bEnlisted && !conn->bInGuard ? fenceOuterWriter(conn) : NULL;
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
		if (outer && undoNote(conn, z, n, has, highest, zAt) != SQLITE_OK)
			return SQLITE_NOMEM;
		int			bWrote;

		fenceCacheWrote(conn);
		rc = runTokenStmt(conn, &conn->tokens.pAdvance, advanceTokenSql, z, n, token);
		if (outer)
			conn->undo.changes = sqlite3_total_changes64(conn->db);
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
			rc = readHighestAt(conn, z, n, 1, &has, &highest, NULL, 0);
			if (rc != SQLITE_OK)
				return rc;
		}
		fenceCacheSet(conn, z, n, 1, highest);
		if (!fence_verdict_accepts(fence_decide(has, highest, token)))
		{
			*pStale = 1;
			*pHighest = highest;
			return SQLITE_OK;
		}
	}
	/* not enlisted: an autocommit SELECT whose transaction has already ended */
	if (conn->txn.bEnlisted && fence_held_get(&conn->txn.held, z, (size_t) n) < token &&
		fenceHeldSet(conn, z, n, token) != 0)
		return fenceHeldBreak(conn);
	return rc;
}


/* The resource's highest accepted token; never creates fence_tokens. */
int
fenceReadHighest(FenceConn *conn, const char *z, int n, int *pHas, sqlite3_int64 *pHighest)
{
	return readHighestAt(conn, z, n, 0, pHas, pHighest, NULL, 0);
}

/*
 * fence_reset's work: delete the resource's row of fence_tokens, forget
 * what the cache holds of it, and what the transaction holds of it (put
 * back by a rollback).
 */
int
fenceForgetResource(FenceConn *conn, const char *z, int n)
{
	int			rc;

	fenceCacheForgetOne(conn, z, n);
	fenceCacheWrote(conn);
	rc = runTokenStmt(conn, &conn->tokens.pDelete, deleteTokenSql, z, n, 0);
	fenceGuardMemoForget(conn);
	if (rc == SQLITE_OK && conn->txn.bEnlisted && fence_held_get(&conn->txn.held, z, (size_t) n) >= 0 &&
		fenceHeldSet(conn, z, n, -1) != 0)
		rc = fenceHeldBreak(conn);
	return rc;
}

/*
 * The message saved for rc (saveError) into buf, or "" when the saved one
 * is for another error; either way it is taken.
 */
void
fenceTakeSavedError(FenceConn *conn, int rc, char *buf)
{
	buf[0] = '\0';
	if (conn->savedRc == rc)
		memcpy(buf, conn->zSavedErr, sizeof(conn->zSavedErr));
	conn->savedRc = SQLITE_OK;
}
