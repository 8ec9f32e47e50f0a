/*
 * fence.c
 *
 * The SQL functions of the SQLite extension (SPEC.md):
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
 * Provides: the SQL functions (fenceCoreFunctions, registered by
 * fence_init.c), and for fence_lease.c fence_check's validation and errors
 * (fenceArgText, fenceArgToken, fenceResultError). The token table and
 * the accept rule, with their concurrency contract, are fence_accept.c's.
 *
 * Errors: a stale or missing token is SQLITE_CONSTRAINT_FUNCTION, invalid
 * input SQLITE_ERROR (not SQLITE_MISMATCH: Python maps that to
 * IntegrityError, which must mean "take the lock again").
 *
 * A per-row guard's resource is core's fence_key_resource.
 */
#include "fence_stats.h"

#include <string.h>

/*
 * sqlite3_api is defined here, in the file whose SQL functions run for every
 * guarded row: defined in the same unit, -fvisibility=hidden lets each API
 * call reach it without a load through the GOT (5 instructions a row).
 */
SQLITE_EXTENSION_INIT1

/* ---------------------------------------------------------------------
 * Arguments and errors
 * ------------------------------------------------------------------ */

FENCE_COLD static void
resultInvalid(sqlite3_context *ctx, const char *what, FenceProblem problem,
			  size_t len, sqlite3_int64 token)
{
	char		buf[FENCE_MSG_MAX];

	fenceUndoOnError(sqlite3_user_data(ctx));

	sqlite3_result_error(ctx, fence_msg_invalid(buf, what, problem, len, token), -1);
	sqlite3_result_error_code(ctx, FENCE_RC_INVALID);
}

FENCE_COLD static void
resultStale(sqlite3_context *ctx, const char *z, int n, sqlite3_int64 token,
			sqlite3_int64 highest)
{
	char		buf[FENCE_MSG_MAX];

	fenceUndoOnError(sqlite3_user_data(ctx));

	sqlite3_result_error(ctx, fence_line_stale(buf, z, (size_t) n, token, highest), -1);
	sqlite3_result_error_code(ctx, FENCE_RC_STALE);
}

FENCE_COLD static void
resultMissing(sqlite3_context *ctx, FenceMissing why, const char *z, int n)
{
	char		buf[FENCE_MSG_MAX];

	fenceUndoOnError(sqlite3_user_data(ctx));

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
	fenceTakeSavedError(conn, rc, saved);
	fenceUndoOnError(conn);
	msg = saved[0] ? saved : sqlite3_errmsg(conn->db);
	if (rc > 0 && (rc & 0xff) == SQLITE_NOMEM)
	{
		sqlite3_result_error_nomem(ctx);
		return;
	}
	/* the connection's last error may belong to another call: never "not an error" */
	if (msg != saved &&
		(sqlite3_errcode(conn->db) == SQLITE_OK || sqlite3_errcode(conn->db) == SQLITE_DONE ||
		 sqlite3_errcode(conn->db) == SQLITE_ROW))
		msg = sqlite3_errstr(rc);
	msg = fenceRcMessage(rc, msg);	/* fence's own refusals: SQLITE_ERROR, never NOMEM */
	sqlite3_result_error(ctx, msg, -1);
	sqlite3_result_error_code(ctx, fenceErrorCode(rc));
}

/*
 * A resource argument (TEXT, non-empty, at most FENCE_RESOURCE_MAX bytes),
 * or with bHolder a lease holder (at most FENCE_HOLDER_MAX).
 */
static int
argText(sqlite3_context *ctx, sqlite3_value *v, const char **pz, int *pn, int bHolder)
{
	char		buf[FENCE_MSG_MAX];
	FenceProblem problem;
	size_t		len = (size_t) sqlite3_value_bytes(v);

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
		problem = bHolder ? fence_check_holder(*pz, (size_t) *pn) :
			fence_check_resource(*pz, (size_t) *pn);
	}
	if (problem == FENCE_VALID)
		return 1;
	fenceResultError(ctx, bHolder ? fence_msg_invalid_holder(buf, problem, len) :
					 fence_msg_invalid(buf, "resource", problem, len, 0), FENCE_RC_INVALID);
	return 0;
}

/*
 * A per-row resource: the prefix, then CAST(key AS TEXT) (sqlite3_value_text),
 * composed by fence_key_resource into buf (FENCE_RESOURCE_MAX + 1 bytes).
 */
static int
argKeyResource(sqlite3_context *ctx, sqlite3_value *prefix, sqlite3_value *key,
			   char *buf, const char **pz, int *pn)
{
	const char *zPrefix;
	const char *zKey;
	size_t		len;
	FenceProblem problem;

	if (sqlite3_value_type(prefix) != SQLITE_TEXT)
	{
		resultInvalid(ctx, "resource prefix", sqlite3_value_type(prefix) == SQLITE_NULL ?
					  FENCE_NULL : FENCE_NOT_TEXT, 0, 0);
		return 0;
	}
	/* a REAL's or BLOB's text is not the value's alone (the library, fp_digits, UTF-16) */
	if (sqlite3_value_type(key) != SQLITE_INTEGER && sqlite3_value_type(key) != SQLITE_TEXT)
	{
		resultInvalid(ctx, "key", sqlite3_value_type(key) == SQLITE_NULL ? FENCE_NULL :
					  FENCE_NOT_KEY, 0, 0);
		return 0;
	}
	zPrefix = (const char *) sqlite3_value_text(prefix);
	zKey = (const char *) sqlite3_value_text(key);
	if (zPrefix == NULL || zKey == NULL)
	{
		sqlite3_result_error_nomem(ctx);
		return 0;
	}
	problem = fence_key_resource(buf, zPrefix, (size_t) sqlite3_value_bytes(prefix),
								 zKey, (size_t) sqlite3_value_bytes(key), &len);
	if (problem != FENCE_VALID)
	{
		resultInvalid(ctx, "resource", problem, len, 0);
		return 0;
	}
	*pz = buf;
	*pn = (int) len;
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
 * changed, when a guard's call admitted on the change detector's shortcut
 * would write fence_tokens (fenceAccept).
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
	rc = fenceAccept(conn, z, n, token, &stale, &highest);
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

	if (argText(ctx, argv[0], &z, &n, 0) && argToken(ctx, argv[1], &token))
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
	if (!argText(ctx, argv[0], &z, &n, 0))
		return;
	rc = fenceReadHighest(conn, z, n, &has, &highest);
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
	if (!argText(ctx, argv[0], &z, &n, 0))
		return;
	rc = fenceForgetResource(conn, z, n);
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
 * last call that passed (guard id, resource, token) with conn->memo.guardEpoch
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
	return m->epoch == conn->memo.guardEpoch &&
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
	if (m == &conn->memo.memoWrite)
		fenceStatsSettleMemo(conn);	/* its statsSlot changes */
	m->id = sqlite3_value_int64(idArg);
	m->token = token;
	m->statsSlot = slot;
	m->epoch = conn->memo.guardEpoch;
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
		conn->bInGuard = bWasInGuard;
		if (bAccepted && argc == 2 && conn->txn.bEnlisted && !conn->txn.bBroken)
		{
			/* and the transaction now holds the guard's resource: an UPDATE's next call */
			if (memoSet(conn, &conn->memo.memoWrite, argv[0], z, n, token))
				conn->memo.memoFenced = conn->memo.memoWrite;
		}
	}
}

static FENCE_NOINLINE void
guardFencedChecked(sqlite3_context *ctx, FenceConn *conn, int argc, sqlite3_value **argv)
{
	char		buf[FENCE_RESOURCE_MAX + 1];
	const char *z = NULL;
	int			n = 0;

	if (!conn->txn.bEnlisted && argc == 3)
	{
		/* holds nothing: refused whoever calls; only the message needs the name */
		if (argKeyResource(ctx, argv[1], argv[2], buf, &z, &n))
			resultMissing(ctx, FENCE_MISSING_NOT_FENCED, z, n);
		return;
	}
	if (conn->txn.bBroken)
	{
		resultDbError(ctx, conn, FENCE_RC_BROKEN);
		return;
	}
	/* a one-resource guard's name is known once admitted */
	if (!guardResource(ctx, conn, argv, argc == 3, buf, &z, &n))
		return;
	if (conn->txn.bEnlisted && fence_held_get(&conn->txn.held, z, (size_t) n) >= 0)
	{
		sqlite3_result_int(ctx, 1);
		if (argc == 1)
			(void) memoSet(conn, &conn->memo.memoFenced, argv[0], z, n, 0);
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
	const FenceGuardMemo *m = &conn->memo.memoWrite;

	if (argc == 2 && memoHit(conn, m, argv[0]) &&
		sqlite3_value_type(argv[1]) == SQLITE_INTEGER &&
		sqlite3_value_int64(argv[1]) == m->token)
	{
		conn->memo.nMemoAccepts++;	/* fence_stats: fenceStatsSettleMemo */
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

	if (argc == 1 && memoHit(conn, &conn->memo.memoFenced, argv[0]))
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
	sqlite3_result_error(ctx, "fence guard refused: the guard passes an older fence's arguments; "
						 "run fence_protect on the table again", -1);
}

/* ---------------------------------------------------------------------
 * What fence_lease.c shares with the functions above
 * ------------------------------------------------------------------ */

int
fenceArgText(sqlite3_context *ctx, sqlite3_value *v, const char **pz, int *pn, int bHolder)
{
	return argText(ctx, v, pz, pn, bHolder);
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
	fenceUndoOnError(sqlite3_user_data(ctx));
	sqlite3_result_error(ctx, zMsg, -1);
	sqlite3_result_error_code(ctx, fenceErrorCode(rc));
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
};

int
fenceCoreFunctions(const FenceFunction **pa)
{
	*pa = coreFunctions;
	return (int) (sizeof(coreFunctions) / sizeof(coreFunctions[0]));
}
