/*
 * fence_cache.c
 *
 * What a connection may remember of main.fence_tokens from one of its
 * transactions to the next, so that a transaction presenting the token it
 * presented last time reads nothing: the common case of a lock holder that
 * writes many short transactions at one token.
 *
 * The memory is the hint table of fence.c (FenceHint): what this connection
 * last read or wrote as each resource's highest. An entry is a verdict, not
 * only a hint, while its generation is the connection's (conn->cacheGen);
 * raising the generation forgets every entry at once. A transaction uses
 * verdicts only if, at its first accept (fenceCacheTxnBegin), all of these
 * hold, and otherwise raises the generation first:
 *
 *   the data version  SQLITE_FCNTL_DATA_VERSION of main (the pager's change
 *                     counter, which moves on every commit this connection
 *                     makes and whenever it finds, on taking a read lock,
 *                     that another connection or process committed) is
 *                     the value recorded when this connection's last fenced
 *                     transaction committed (fenceCacheTxnEnd). So
 *                     nothing but that transaction has
 *                     changed the file since; the read is made after main's
 *                     read lock is taken, so the snapshot the transaction
 *                     reads is the one the version describes.
 *   that transaction  was watched whole: every row it changed in
 *                     fence_tokens was fence's own advance or reset, whose
 *                     result the entry holds. Any other change (the
 *                     application's own UPDATE, DELETE or INSERT of
 *                     fence_tokens, an undo of fence's, a trigger of the
 *                     application's on fence_tokens) fires the watch
 *                     triggers, TEMP triggers fence makes on
 *                     main.fence_tokens (fenceCacheWatchCreate), which
 *                     forget everything and keep the commit from being
 *                     recorded. A transaction that rolls back, or rolls
 *                     back to a savepoint after fence_tokens changed in it,
 *                     is not recorded either.
 *   the schema        is the one the cache was filled under: a schema
 *                     change forgets everything (fenceCacheSchemaChanged:
 *                     SQLite prepared fence's enlisting statement again,
 *                     or fence_guard.c read new schema cookies; either
 *                     also follows ATTACH and sqlite3_deserialize, which
 *                     replace main's pager and so restart its data
 *                     version), and the watch triggers must be there,
 *                     exactly as fence makes them (checked again after
 *                     every such change: dropping one changes TEMP's
 *                     schema, which expires every statement).
 *   nothing else      no other database is attached (fence then takes
 *                     main's write lock for every accept, fence.c) and
 *                     the watch runs (before SQLite 3.35.0,
 *                     SQLITE_DBCONFIG_ENABLE_TRIGGER turns TEMP triggers
 *                     off too; see watchRuns).
 *
 * A transaction that began without verdicts still records the entries it
 * reads: they describe its snapshot plus its own changes, which is what
 * the file holds once it commits, so the next transaction can use them.
 *
 * Concurrency: all of it is per connection. Another connection or process
 * can change fence_tokens only by committing, which moves main's data
 * version before this connection's next transaction reads anything; inside
 * a transaction, what this connection reads is its snapshot (see fence.c's
 * head for why an equal accept's snapshot keeps a later write from
 * committing after a newer token).
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

/*
 * The watch triggers. BEFORE, not AFTER: a row is written only after every
 * BEFORE trigger ran, so a RAISE(IGNORE) of another trigger can skip the
 * row but never the watch of a row that is written. The call sits in the
 * WHEN clause with a RAISE for NULL, as the guards do (fence_protect.c): an
 * authorizer that ignores the call gets the write refused, not unwatched.
 */
#define WATCH_WHEN(args) \
	" WHEN CASE WHEN fence_tokens_changed(" args ") IS NOT NULL THEN 0 ELSE " \
	"RAISE(ABORT, 'fence refused: the watch of main.fence_tokens returned NULL') " \
	"END BEGIN SELECT 0; END"


/* after "CREATE TEMP TRIGGER "; sqlite_temp_master keeps "CREATE TRIGGER " and this */
static const char *const watchSql[3] = {
	"\"fence:watch:insert\" BEFORE INSERT ON main.fence_tokens"
	WATCH_WHEN("NULL, NEW.resource, NEW.token"),
	"\"fence:watch:update\" BEFORE UPDATE ON main.fence_tokens"
	WATCH_WHEN("OLD.resource, NEW.resource, NEW.token"),
	"\"fence:watch:delete\" BEFORE DELETE ON main.fence_tokens"
	WATCH_WHEN("OLD.resource, NULL, NULL"),
};

/*
 * Make the watch triggers if main.fence_tokens exists, is fence's, and they
 * are not there yet. Outside a transaction only (at load, or after
 * fence_protect ran on its own), so that no ROLLBACK takes them away again
 * while this connection believes in them; a failure leaves the cache off,
 * which costs speed only.
 */
void
fenceCacheWatchCreate(FenceConn *conn)
{
	sqlite3    *db = conn->db;
	char	   *zErr = NULL;
	char	   *zSql;
	sqlite3_stmt *p;
	int			rc;

	if (!sqlite3_get_autocommit(db) || sqlite3_db_readonly(db, "main") < 0)
		return;
	/* a statement that writes is running (a guard made fence_tokens): its commit is not ours */
	for (p = sqlite3_next_stmt(db, NULL); p; p = sqlite3_next_stmt(db, p))
		if (sqlite3_stmt_busy(p) && !sqlite3_stmt_readonly(p))
			return;
	/*
	 * A statement, not sqlite3_table_column_metadata: its "no such table"
	 * would stay the connection's error, which sqlite3_open_v2 reports as
	 * its own after an automatic extension's init.
	 */
	if (sqlite3_prepare_v2(db, "SELECT 1 FROM main.sqlite_master WHERE type = 'table' "
						   "AND name = 'fence_tokens'", -1, &p, NULL) != SQLITE_OK)
		return;
	rc = sqlite3_step(p);
	sqlite3_finalize(p);
	if (rc != SQLITE_ROW)
		return;
	if (fenceOwnTableShape(db, "fence_tokens", &zErr) != SQLITE_OK)
	{
		sqlite3_free(zErr);
		return;
	}
	/* one transaction (an application's commit hook sees one commit) */
	zSql = sqlite3_mprintf("SAVEPOINT fence_watch; "
						   "CREATE TEMP TRIGGER IF NOT EXISTS %s; "
						   "CREATE TEMP TRIGGER IF NOT EXISTS %s; "
						   "CREATE TEMP TRIGGER IF NOT EXISTS %s; "
						   "RELEASE fence_watch", watchSql[0], watchSql[1], watchSql[2]);
	if (zSql == NULL)
		return;
	if (sqlite3_exec(db, zSql, NULL, NULL, NULL) != SQLITE_OK)
		sqlite3_exec(db, "ROLLBACK TO fence_watch; RELEASE fence_watch", NULL, NULL, NULL);
	sqlite3_free(zSql);
	conn->watchState = 0;		/* look again before believing in them */
}

/*
 * Are the three watch triggers there? Looked at again after each schema
 * change (watchPresent); 1 or 0.
 */
FENCE_COLD static int
watchLook(FenceConn *conn)
{
	sqlite3_stmt *stmt = NULL;
	int			nFound = 0;
	int			bOk = 1;

	if (sqlite3_prepare_v2(conn->db, "SELECT count(*) FROM temp.sqlite_master "
						   "WHERE type = 'trigger' AND name GLOB 'fence:watch:*'",
						   -1, &stmt, NULL) != SQLITE_OK)
		return 0;				/* not remembered: asked again next time */
	if (sqlite3_step(stmt) == SQLITE_ROW)
		nFound = sqlite3_column_int(stmt, 0);
	sqlite3_finalize(stmt);
	/* the mark that a later change of TEMP's schema expires (fenceWatchIntact) */
	sqlite3_finalize(conn->pWatchMark);
	conn->pWatchMark = NULL;
	if (bOk && nFound == 3 &&
		(fenceHeldConnect(conn) != SQLITE_OK ||
		 sqlite3_prepare_v3(conn->db, "SELECT 0", -1, SQLITE_PREPARE_PERSISTENT,
							&conn->pWatchMark, NULL) != SQLITE_OK))
		bOk = 0;
	conn->watchState = bOk && nFound == 3 ? 1 : 2;
	return conn->watchState == 1;
}

/*
 * Is the watch, seen there when pWatchMark was prepared, still there? Only
 * a change of TEMP's schema can drop one of its triggers (or make one of
 * the same name again, which need not watch), and SQLite then expires every
 * statement of the connection, pWatchMark included. So do other changes (a
 * function defined again, ATTACH, an authorizer set): the watch is then
 * looked at again, which costs only time.
 */
int
fenceWatchIntact(const FenceConn *conn)
{
	/* sqlite3_expired is deprecated: a build without it has no memory, only reads */
	return sqlite3_api->expired != NULL && conn->pWatchMark != NULL &&
		!sqlite3_expired(conn->pWatchMark);
}

/*
 * The pager's change counter of main. NULL names main (as documented)
 * without a look-up of the name: a third of the call's cost.
 */
static int
dataVersion(FenceConn *conn, unsigned *pVersion)
{
	*pVersion = 0;
	return sqlite3_file_control(conn->db, NULL, SQLITE_FCNTL_DATA_VERSION, pVersion) ==
		SQLITE_OK;
}

/*
 * Do the watch triggers run? They are TEMP triggers, which SQLite runs
 * whatever SQLITE_DBCONFIG_ENABLE_TRIGGER says since 3.35.0 (the setting
 * turns off the triggers of main and of attached databases only); before
 * 3.35.0 it turns them off too. The answer is remembered like the watch
 * triggers' presence: SQLite expires every statement when the setting
 * changes, so the schema check before the next transaction's first accept
 * (fenceSchemaCheck) sees fence's own statement prepared again and forgets
 * it with everything else (fenceCacheSchemaChanged).
 */
static int
watchRuns(FenceConn *conn)
{
	int			bOn = 0;

	if (conn->watchRunsState == 0)
		conn->watchRunsState = sqlite3_libversion_number() >= 3035000 ||
			(sqlite3_db_config(conn->db, SQLITE_DBCONFIG_ENABLE_TRIGGER, -1, &bOn) == SQLITE_OK &&
			 bOn) ? 1 : 2;
	return conn->watchRunsState == 1;
}

static inline int
watchPresent(FenceConn *conn)
{
	return conn->watchState == 1 || (conn->watchState == 0 && watchLook(conn));
}

/* Is what this transaction reads and writes of fence_tokens watched? */
static int
watchable(FenceConn *conn)
{
	if (conn->watchState == 1 && !fenceWatchIntact(conn))
	{
		/* TEMP's schema, or the trigger setting, may have changed: look again */
		conn->watchState = 0;
		conn->watchRunsState = 0;
	}
	return conn->sharedCache == FENCE_SHARED_NO && sqlite3_db_name(conn->db, 2) == NULL &&
		watchRuns(conn) && watchPresent(conn);
}

/*
 * The first accept of an enlisted transaction, after its schema check and
 * with main read-locked: may remembered entries be verdicts in it? Entries
 * read from here on carry conn->cacheGen when the transaction is watched,
 * 0 (never a verdict) when not.
 */
void
fenceCacheTxnBegin(FenceConn *conn)
{
	unsigned	version;
	int			bWatched;

	if (conn->cacheTxn != FENCE_CACHE_TXN_UNKNOWN)
		return;
	bWatched = watchable(conn);
	if (!(bWatched && conn->bCacheRecorded && dataVersion(conn, &version) &&
		  version == conn->cacheVersion))
		fenceCacheForget(conn);
	conn->bCacheRecorded = 0;	/* until this transaction commits, watched */
	conn->cacheTxn = bWatched ? FENCE_CACHE_TXN_WATCHED : FENCE_CACHE_TXN_UNWATCHED;
}

/*
 * The watch may have gone in the middle of a watched transaction
 * (fenceWatchIntact): what it did not see may have changed fence_tokens.
 * Nothing remembered is a verdict for the rest of it, and its commit
 * records nothing.
 */
FENCE_COLD void
fenceCacheWatchLost(FenceConn *conn)
{
	fenceCacheForget(conn);
	conn->cacheTxn = FENCE_CACHE_TXN_UNWATCHED;
	conn->watchState = 0;
	conn->watchRunsState = 0;
}

/* Nothing remembered is a verdict any more. */
void
fenceCacheForget(FenceConn *conn)
{
	conn->cacheGen++;
	if (conn->cacheGen == 0)
		conn->cacheGen = 1;		/* 0 marks an entry that is never a verdict */
	conn->bCacheRecorded = 0;
}

/*
 * The schema may have changed, TEMP's included (the watch triggers may be
 * gone), or main's file replaced (sqlite3_deserialize, which starts a new
 * data version count): forget, and look for the watch again.
 */
void
fenceCacheSchemaChanged(FenceConn *conn)
{
	fenceCacheForget(conn);
	conn->watchState = 0;
	conn->watchRunsState = 0;
}

/* The generation an entry read now carries. */
unsigned
fenceCacheStamp(const FenceConn *conn)
{
	return conn->cacheTxn == FENCE_CACHE_TXN_WATCHED ? conn->cacheGen : 0;
}

/*
 * The transaction ended. A watched one that committed with nothing
 * unwatched changing fence_tokens makes its entries true of the file as it
 * now is: record main's data version after the commit (xCommit comes after
 * the pager's commit). Anything else forgets.
 */
void
fenceCacheTxnEnd(FenceConn *conn, int bCommitted)
{
	unsigned	version;

	if (conn->cacheTxn != FENCE_CACHE_TXN_UNKNOWN)
	{
		if (bCommitted && conn->cacheTxn == FENCE_CACHE_TXN_WATCHED && !conn->bBroken &&
			fenceWatchIntact(conn) && dataVersion(conn, &version))
		{
			conn->cacheVersion = version;
			conn->bCacheRecorded = 1;
		}
		else
			fenceCacheForget(conn);
	}
	conn->cacheTxn = FENCE_CACHE_TXN_UNKNOWN;
	conn->bCacheTxnWrote = 0;
}

/*
 * ROLLBACK TO (or a failed statement's rollback): if fence_tokens changed
 * in this transaction, an entry may hold what was just undone.
 */
void
fenceCacheRolledBackTo(FenceConn *conn)
{
	if (conn->bCacheTxnWrote)
		fenceCacheForget(conn);
}

/*
 * fence_tokens_changed(old_resource, new_resource, new_token), called by
 * the watch triggers for every row about to change in main.fence_tokens:
 * fence's own advance or reset of the resource it is writing
 * (conn->zWriting) keeps what is remembered (fence.c updates the entry);
 * anything else forgets it all, for this transaction and the next. Returns
 * 1 (NULL would make the trigger raise).
 */
void
fenceTokensChangedFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	FenceConn  *conn = sqlite3_user_data(ctx);
	int			bOurs = conn->zWriting != NULL;
	int			i;

	(void) argc;
	if (sqlite3_value_type(argv[0]) == SQLITE_NULL && sqlite3_value_type(argv[1]) == SQLITE_NULL &&
		sqlite3_value_type(argv[2]) == SQLITE_NULL)
	{
		/* no row has three NULLs (resource is NOT NULL): a blinded read */
		sqlite3_result_null(ctx);
		return;
	}
	for (i = 0; i < 2 && bOurs; i++)
	{
		if (sqlite3_value_type(argv[i]) == SQLITE_NULL)
			continue;
		const unsigned char *z = sqlite3_value_type(argv[i]) == SQLITE_TEXT ?
			sqlite3_value_text(argv[i]) : NULL;

		/* not TEXT, or no memory to read it: not ours, so forget (fails safe) */
		bOurs = z != NULL && sqlite3_value_bytes(argv[i]) == conn->nWriting &&
			memcmp(z, conn->zWriting, (size_t) conn->nWriting) == 0;
	}
	if (bOurs && conn->bWritingReset)
		bOurs = sqlite3_value_type(argv[1]) == SQLITE_NULL;
	else if (bOurs)
		bOurs = sqlite3_value_type(argv[2]) == SQLITE_INTEGER &&
			sqlite3_value_int64(argv[2]) == conn->writingToken;
	conn->bCacheTxnWrote = 1;
	if (!bOurs)
	{
		fenceCacheForget(conn);
		/* and what this transaction reads from now on is not recorded at its commit */
		if (conn->cacheTxn == FENCE_CACHE_TXN_WATCHED)
			conn->cacheTxn = FENCE_CACHE_TXN_UNWATCHED;
	}
	sqlite3_result_int(ctx, 1);
}
