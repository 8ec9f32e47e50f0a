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
 *
 * and the two functions the guard triggers call (never DIRECTONLY, since a
 * trigger stored in the schema must reach them; see README "trusted_schema"):
 *
 *   fence_guard_write(resource, token)            a row carries a token
 *   fence_guard_write(prefix, key, token)
 *   fence_guard_fenced(resource)                  the transaction must hold
 *   fence_guard_fenced(prefix, key)               a fence on the resource
 *
 * Concurrency: SQLite has one writer per database file. An accept first
 * enlists fence_held (fence_held.c), which opens the write transaction on
 * main, and then reads and advances fence_tokens under that write lock, so
 * no other connection can commit a higher token between our read and our
 * commit. In WAL mode, a transaction whose read snapshot is older than the
 * newest commit cannot take the write lock (SQLITE_BUSY_SNAPSHOT), so a stale
 * snapshot ends in SQLITE_BUSY rather than in an accepted stale token.
 *
 * Errors: a stale or missing token is SQLITE_CONSTRAINT_FUNCTION, invalid
 * input SQLITE_ERROR (not SQLITE_MISMATCH: Python maps that to
 * IntegrityError, which must mean "take the lock again").
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT1

static const char createTokensSql[] =
"CREATE TABLE IF NOT EXISTS main.fence_tokens("
"resource TEXT PRIMARY KEY NOT NULL, "
"token INTEGER NOT NULL CHECK (typeof(token) = 'integer' AND token >= 0), "
"updated_at TEXT NOT NULL) WITHOUT ROWID";

static const char selectTokenSql[] =
"SELECT token FROM main.fence_tokens WHERE resource = ?1";

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
	sqlite3_finalize(conn->pEnlist);
	conn->pSelectToken = conn->pAdvanceToken = conn->pDeleteToken = conn->pEnlist = NULL;
}

static int
tokenTableExists(FenceConn *conn)
{
	return sqlite3_table_column_metadata(conn->db, "main", "fence_tokens", "token",
										 NULL, NULL, NULL, NULL, NULL) == SQLITE_OK;
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

	if (*pp)
		return SQLITE_OK;
	/* the eponymous fence_held must be connected to finalize *pp at close */
	rc = fenceHeldConnect(conn);
	if (rc != SQLITE_OK)
		return rc;
	if (!tokenTableExists(conn))
	{
		if (!bCreate)
			return SQLITE_OK;
		rc = sqlite3_exec(conn->db, createTokensSql, NULL, NULL, NULL);
		if (rc != SQLITE_OK)
			return rc;
	}
	return sqlite3_prepare_v3(conn->db, sql, -1, SQLITE_PREPARE_PERSISTENT, pp, NULL);
}

/*
 * A cached statement fails when fence_tokens went away under it: a
 * transaction that created the table on first use rolled back, or somebody
 * dropped it. Forget the statements that named it, so that the next use
 * prepares them again (and creates the table, for a writer).
 */
static int
tokenTableVanished(FenceConn *conn, int rc)
{
	if (rc == SQLITE_ROW || rc == SQLITE_DONE || tokenTableExists(conn))
		return 0;
	sqlite3_finalize(conn->pSelectToken);
	sqlite3_finalize(conn->pAdvanceToken);
	sqlite3_finalize(conn->pDeleteToken);
	conn->pSelectToken = conn->pAdvanceToken = conn->pDeleteToken = NULL;
	return 1;
}

/* *pHas = 0 when the resource has no highest token (or there is no table). */
static int
readHighest(FenceConn *conn, const char *z, int n, int bCreate, int *pHas,
			sqlite3_int64 *pHighest)
{
	int			attempt;
	int			rc = SQLITE_OK;

	*pHas = 0;
	*pHighest = 0;
	for (attempt = 0; attempt < 2; attempt++)
	{
		rc = prepareTokenStmt(conn, &conn->pSelectToken, selectTokenSql, bCreate);
		if (rc != SQLITE_OK || conn->pSelectToken == NULL)
			return rc;
		sqlite3_bind_text(conn->pSelectToken, 1, z, n, SQLITE_STATIC);
		rc = sqlite3_step(conn->pSelectToken);
		if (rc == SQLITE_ROW)
		{
			*pHas = 1;
			*pHighest = sqlite3_column_int64(conn->pSelectToken, 0);
		}
		sqlite3_reset(conn->pSelectToken);
		sqlite3_clear_bindings(conn->pSelectToken);
		if (!tokenTableVanished(conn, rc))
			break;
	}
	return (rc == SQLITE_ROW || rc == SQLITE_DONE) ? SQLITE_OK : rc;
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
		sqlite3_bind_text(*pp, 1, z, n, SQLITE_STATIC);
		if (sqlite3_bind_parameter_count(*pp) >= 2)
			sqlite3_bind_int64(*pp, 2, token);
		rc = sqlite3_step(*pp);
		sqlite3_reset(*pp);
		sqlite3_clear_bindings(*pp);
		if (!tokenTableVanished(conn, rc))
			break;
	}
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
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

	*pStale = 0;
	*pHighest = 0;

	/*
	 * Held at this very token in this transaction, under the write lock we
	 * took when enlisting: nothing but this transaction can have moved the
	 * highest since, and its own moves update what it holds.
	 */
	if (conn->bEnlisted && fence_held_get(&conn->held, z, (size_t) n) == token)
		return SQLITE_OK;

	rc = fenceHeldEnlist(conn);
	if (rc == SQLITE_OK)
		rc = readHighest(conn, z, n, 1, &has, &highest);
	if (rc != SQLITE_OK)
		return rc;

	verdict = fence_decide(has, highest, token);
	if (!fence_verdict_accepts(verdict))
	{
		*pStale = 1;
		*pHighest = highest;
		return SQLITE_OK;
	}
	if (verdict != FENCE_ACCEPT_EQUAL)
	{
		rc = runTokenStmt(conn, &conn->pAdvanceToken, advanceTokenSql, z, n, token);
		if (rc != SQLITE_OK)
			return rc;

		/*
		 * No row changed: another connection raised the highest between our
		 * read and our write. That can only happen when there is no open
		 * transaction to hold the write lock (an autocommit SELECT, whose
		 * enlisting statement has already committed); judge again.
		 */
		if (sqlite3_changes(conn->db) == 0)
		{
			rc = readHighest(conn, z, n, 1, &has, &highest);
			if (rc != SQLITE_OK)
				return rc;
			if (!fence_verdict_accepts(fence_decide(has, highest, token)))
			{
				*pStale = 1;
				*pHighest = highest;
				return SQLITE_OK;
			}
		}
	}
	/* not enlisted: an autocommit SELECT whose transaction has already ended */
	if (conn->bEnlisted && fence_held_get(&conn->held, z, (size_t) n) < token)
		rc = fence_held_set(&conn->held, z, (size_t) n, token, 0) ? SQLITE_NOMEM : SQLITE_OK;
	return rc;
}

/* ---------------------------------------------------------------------
 * Arguments and errors
 * ------------------------------------------------------------------ */

static void
resultInvalid(sqlite3_context *ctx, const char *what, FenceProblem problem,
			  size_t len, sqlite3_int64 token)
{
	char		buf[FENCE_MSG_MAX];

	sqlite3_result_error(ctx, fence_msg_invalid(buf, what, problem, len, token), -1);
	sqlite3_result_error_code(ctx, FENCE_RC_INVALID);
}

static void
resultStale(sqlite3_context *ctx, const char *z, int n, sqlite3_int64 token,
			sqlite3_int64 highest)
{
	char		buf[FENCE_MSG_MAX];

	sqlite3_result_error(ctx, fence_line_stale(buf, z, (size_t) n, token, highest), -1);
	sqlite3_result_error_code(ctx, FENCE_RC_STALE);
}

static void
resultMissing(sqlite3_context *ctx, FenceMissing why, const char *z, int n)
{
	char		buf[FENCE_MSG_MAX];

	sqlite3_result_error(ctx, fence_line_missing(buf, why, z, (size_t) n, NULL), -1);
	sqlite3_result_error_code(ctx, FENCE_RC_MISSING);
}

/* An error of SQLite itself (SQLITE_BUSY, SQLITE_READONLY...) passes through. */
static void
resultDbError(sqlite3_context *ctx, FenceConn *conn, int rc)
{
	sqlite3_result_error(ctx, sqlite3_errmsg(conn->db), -1);
	sqlite3_result_error_code(ctx, rc);
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

/* A token argument: the INTEGER storage class, never coerced, >= 0. */
static int
argToken(sqlite3_context *ctx, sqlite3_value *v, sqlite3_int64 *pToken)
{
	if (sqlite3_value_type(v) == SQLITE_NULL)
		resultInvalid(ctx, "token", FENCE_NULL, 0, 0);
	else if (sqlite3_value_type(v) != SQLITE_INTEGER)
		resultInvalid(ctx, "token", FENCE_NOT_INTEGER, 0, 0);
	else if (fence_check_token(*pToken = sqlite3_value_int64(v)) != FENCE_VALID)
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
 * with bTry 1/0; a stale token raises unless bTry.
 */
static void
resultAccept(sqlite3_context *ctx, const char *z, int n, sqlite3_int64 token, int bTry)
{
	FenceConn  *conn = sqlite3_user_data(ctx);
	sqlite3_int64 highest;
	int			stale;
	int			rc = acceptToken(conn, z, n, token, &stale, &highest);

	if (rc != SQLITE_OK)
		resultDbError(ctx, conn, rc);
	else if (bTry)
		sqlite3_result_int(ctx, !stale);
	else if (stale)
		resultStale(ctx, z, n, token, highest);
	else
		sqlite3_result_int64(ctx, token);
}

/* fence_check(resource, token) and fence_try(resource, token) */
static void
checkOrTry(sqlite3_context *ctx, sqlite3_value **argv, int bTry)
{
	const char *z = NULL;
	int			n = 0;
	sqlite3_int64 token = 0;

	if (argResource(ctx, argv[0], &z, &n) && argToken(ctx, argv[1], &token))
		resultAccept(ctx, z, n, token, bTry);
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
	rc = runTokenStmt(conn, &conn->pDeleteToken, deleteTokenSql, z, n, 0);
	/* the transaction no longer holds what was forgotten (undone on rollback) */
	if (rc == SQLITE_OK && conn->bEnlisted && fence_held_get(&conn->held, z, (size_t) n) >= 0)
		rc = fence_held_set(&conn->held, z, (size_t) n, -1, 0) ? SQLITE_NOMEM : SQLITE_OK;
	if (rc != SQLITE_OK)
		resultDbError(ctx, conn, rc);
	else
		sqlite3_result_null(ctx);
}

/*
 * fence_guard_write(resource, token) / (prefix, key, token): a row written
 * to a protected table carries this token. NULL is "fencing token required"
 * whatever the transaction holds (SPEC.md "Precise points").
 */
static void
fenceGuardWriteFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	char		buf[FENCE_RESOURCE_MAX + 1];
	const char *z = NULL;
	int			n = 0;
	sqlite3_int64 token = 0;
	sqlite3_value *tokenArg = argv[argc - 1];

	if (argc == 2 ? !argResource(ctx, argv[0], &z, &n)
		: !argKeyResource(ctx, argv[0], argv[1], buf, &z, &n))
		return;
	if (sqlite3_value_type(tokenArg) == SQLITE_NULL)
	{
		resultMissing(ctx, FENCE_MISSING_NULL_TOKEN, z, n);
		return;
	}
	if (argToken(ctx, tokenArg, &token))
		resultAccept(ctx, z, n, token, 0);
}

/*
 * fence_guard_fenced(resource) / (prefix, key): an UPDATE that does not set
 * the token, a DELETE, or any write to a token-less table must run in a
 * transaction that holds a fence on the row's resource.
 */
static void
fenceGuardFencedFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	FenceConn  *conn = sqlite3_user_data(ctx);
	char		buf[FENCE_RESOURCE_MAX + 1];
	const char *z = NULL;
	int			n = 0;

	if (argc == 1 ? !argResource(ctx, argv[0], &z, &n)
		: !argKeyResource(ctx, argv[0], argv[1], buf, &z, &n))
		return;
	if (conn->bEnlisted && fence_held_get(&conn->held, z, (size_t) n) >= 0)
		sqlite3_result_int(ctx, 1);
	else
		resultMissing(ctx, FENCE_MISSING_NOT_FENCED, z, n);
}

/* ---------------------------------------------------------------------
 * Registration
 * ------------------------------------------------------------------ */

/*
 * Flags by role (STYLE.md C6): functions that applications call and that
 * change the fence are DIRECTONLY, so a view or trigger planted in the
 * schema cannot move a fence; fence_current only reads and is INNOCUOUS; the
 * guards must be reachable from our schema triggers and so carry neither,
 * which means they refuse to run under PRAGMA trusted_schema=OFF: protected
 * tables then fail closed ("unsafe use of fence_guard_write()").
 */
#define APP_WRITES   (SQLITE_UTF8 | SQLITE_DIRECTONLY)
#define APP_READS    (SQLITE_UTF8 | SQLITE_INNOCUOUS)
#define FROM_TRIGGER (SQLITE_UTF8)

static const struct FenceFunction
{
	const char *name;
	int			nArg;
	int			flags;
	void		(*xFunc) (sqlite3_context *, int, sqlite3_value **);
}			fenceFunctions[] =
{
	{"fence_check", 2, APP_WRITES, fenceCheckFunc},
	{"fence_try", 2, APP_WRITES, fenceTryFunc},
	{"fence_current", 1, APP_READS, fenceCurrentFunc},
	{"fence_reset", 1, APP_WRITES, fenceResetFunc},
	{"fence_protect", 3, APP_WRITES, fenceProtectFunc},
	{"fence_protect", 4, APP_WRITES, fenceProtectFunc},
	{"fence_unprotect", 1, APP_WRITES, fenceUnprotectFunc},
	{"fence_guard_write", 2, FROM_TRIGGER, fenceGuardWriteFunc},
	{"fence_guard_write", 3, FROM_TRIGGER, fenceGuardWriteFunc},
	{"fence_guard_fenced", 1, FROM_TRIGGER, fenceGuardFencedFunc},
	{"fence_guard_fenced", 2, FROM_TRIGGER, fenceGuardFencedFunc},
};

#ifdef _WIN32
__declspec(dllexport)
#endif
int
sqlite3_fence_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi)
{
	FenceConn  *conn;
	size_t		i;
	int			rc;

	SQLITE_EXTENSION_INIT2(pApi);

	conn = sqlite3_malloc(sizeof(*conn));
	if (conn == NULL)
		return SQLITE_NOMEM;
	memset(conn, 0, sizeof(*conn));
	conn->db = db;
	fence_held_init(&conn->held, &fenceSqliteAllocator);

	/* from here on the module owns conn, even when registering fails */
	rc = fenceHeldRegister(db, conn);
	if (rc != SQLITE_OK)
	{
		*pzErrMsg = sqlite3_mprintf("fence: cannot register fence_held: %s",
									sqlite3_errstr(rc));
		return rc;
	}
	for (i = 0; i < sizeof(fenceFunctions) / sizeof(fenceFunctions[0]); i++)
	{
		const struct FenceFunction *f = &fenceFunctions[i];

		rc = sqlite3_create_function_v2(db, f->name, f->nArg, f->flags, conn,
										f->xFunc, NULL, NULL, NULL);
		if (rc != SQLITE_OK)
		{
			*pzErrMsg = sqlite3_mprintf("fence: cannot register %s/%d: %s",
										f->name, f->nArg, sqlite3_errmsg(db));
			return rc;
		}
	}
	rc = fenceHeldConnect(conn);
	if (rc != SQLITE_OK)
		*pzErrMsg = sqlite3_mprintf("fence: cannot connect fence_held: %s",
									sqlite3_errmsg(db));
	return rc;
}
