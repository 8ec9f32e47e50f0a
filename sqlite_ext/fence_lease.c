/*
 * fence_lease.c
 *
 * Leases: the lock service inside the store, for workers that share one
 * database file and have no etcd or ZooKeeper. Three SQL functions:
 *
 *   fence_acquire(resource, holder, ttl_ms)        -> token, or NULL while
 *                                                     another holder's lease is live
 *   fence_renew(resource, holder, token, ttl_ms)   -> 1 extended, 0 not
 *   fence_release(resource, holder, token)         -> 1 ended, 0 not
 *
 * The rules are core/fence_core.c's (fence_lease_grant, fence_lease_owned);
 * this file reads the lease row, the resource's highest accepted token and
 * the clock, and writes what the rules say. State is main.fence_leases
 * (resource, holder, token, expires_at in ms since the Unix epoch, UTC),
 * created on first use and never pruned: a row's token is the highest ever
 * granted for its resource, and a grant also exceeds the resource's highest
 * accepted token. A grant never writes fence_tokens: the new holder's first
 * accepted write moves the highest. The lease is for liveness; the fence
 * is what makes writes safe.
 *
 * The clock is the default VFS's xCurrentTimeInt64, read once the write
 * lock is held (not 'now', which SQLite keeps stable within a statement).
 * A lease is live while now < expires_at.
 *
 * Concurrency: a call takes main's write lock before it reads anything, so
 * its read, decision and write are one step no other connection can
 * interleave with (one writer per file).
 *   - In autocommit mode the call brackets its statements in a savepoint,
 *     which is then its own short transaction, committed before it returns.
 *   - fence_renew and fence_release inside an open transaction write there,
 *     in a savepoint of their own, and are undone by its ROLLBACK: a
 *     rolled-back renewal costs liveness, never safety.
 *   - A grant must never be rolled back once its caller has seen the token
 *     (the next grant would hand the same token to another holder). Inside
 *     an open transaction that has not yet read or written any database
 *     (Python 3.12's autocommit=False, which is always inside a deferred
 *     BEGIN), fence_acquire commits its grant through a second connection
 *     of its own to the same file, so the caller's ROLLBACK cannot take it
 *     back; inside a transaction that has read or written it is refused.
 *   - Inside a writing statement (INSERT ... SELECT fence_acquire(...))
 *     SQLite allows no savepoint: every lease call is refused there.
 * The lock statement is the first of the call's transaction, so SQLite's
 * busy handler waits for it, at most the connection's busy timeout. A call
 * inside an autocommit SELECT that reads a table of main is upgraded
 * without waiting, as SQLite does for every such upgrade.
 *
 * The functions are DIRECTONLY: no view or trigger calls them.
 *
 * Provides: fenceAcquireFunc, fenceRenewFunc, fenceReleaseFunc,
 * fenceLeaseFinalize; FenceLeases (fence_sqlite.h). Calls fence.c for
 * argument checks and errors, fence_accept.c for the running writer
 * (fenceOuterWriter), fence_stats.c for the clock (fenceNowMs).
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

enum LeaseOp
{
	LEASE_ACQUIRE,
	LEASE_RENEW,
	LEASE_RELEASE
};

static const char *const kLeaseOpName[] = {"fence_acquire", "fence_renew", "fence_release"};

/* One call: its arguments, and what it read and decided. */
typedef struct LeaseCall
{
	enum LeaseOp op;
	const char *z;				/* resource */
	int			n;
	const char *h;				/* holder */
	int			nh;
	sqlite3_int64 token;
	sqlite3_int64 ttl;
	int			bHas;			/* the lease row exists */
	FenceLease	lease;
	char		zHolder[FENCE_HOLDER_MAX + 1];
	int64_t		granted;
	int			result;
	int			bExhausted;
	char		zErr[256];		/* SQLite's message for the error that ended the call */
} LeaseCall;

/* Run one statement to its end, binding the resource as ?1 if it has one. */
static int
leaseExec(sqlite3 *db, const char *zSql, const LeaseCall *c)
{
	sqlite3_stmt *p = NULL;
	int			rc = sqlite3_prepare_v2(db, zSql, -1, &p, NULL);

	if (rc == SQLITE_OK && sqlite3_bind_parameter_count(p) > 0)
		sqlite3_bind_text(p, 1, c->z, c->n, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = fenceStepToEnd(p);
	sqlite3_finalize(p);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The lease row of c->z into c, and the resource's highest accepted token. */
static int
leaseRead(sqlite3 *db, LeaseCall *c, int *pHas, sqlite3_int64 *pHighest)
{
	sqlite3_stmt *p = NULL;
	int			rc = sqlite3_prepare_v2(db, "SELECT holder, token, expires_at FROM "
										"main.fence_leases WHERE resource = ?1", -1, &p, NULL);

	c->bHas = 0;
	if (rc == SQLITE_OK)
	{
		sqlite3_bind_text(p, 1, c->z, c->n, SQLITE_STATIC);
		rc = sqlite3_step(p);
		if (rc == SQLITE_ROW)
		{
			int			nh = sqlite3_column_bytes(p, 0);

			c->bHas = 1;
			if (nh > FENCE_HOLDER_MAX)
				nh = FENCE_HOLDER_MAX;
			if (nh > 0)
				memcpy(c->zHolder, sqlite3_column_text(p, 0), (size_t) nh);
			c->zHolder[nh] = '\0';
			c->lease.holder = c->zHolder;
			c->lease.holder_len = (size_t) nh;
			c->lease.token = sqlite3_column_int64(p, 1);
			c->lease.expires_at = sqlite3_column_int64(p, 2);
			rc = SQLITE_DONE;
		}
	}
	sqlite3_finalize(p);
	if (rc != SQLITE_DONE)
		return rc;
	*pHas = 0;
	if (c->op != LEASE_ACQUIRE)
		return SQLITE_OK;
	/* no fence_tokens yet: nothing was ever accepted */
	if (sqlite3_prepare_v2(db, "SELECT token FROM main.fence_tokens WHERE resource = ?1", -1,
						   &p, NULL) != SQLITE_OK)
		return SQLITE_OK;
	sqlite3_bind_text(p, 1, c->z, c->n, SQLITE_STATIC);
	rc = sqlite3_step(p);
	if (rc == SQLITE_ROW)
	{
		*pHas = 1;
		*pHighest = sqlite3_column_int64(p, 0);
		rc = SQLITE_DONE;
	}
	sqlite3_finalize(p);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int
leaseWrite(sqlite3 *db, const LeaseCall *c, sqlite3_int64 token, sqlite3_int64 expiresAt)
{
	sqlite3_stmt *p = NULL;
	int			rc = sqlite3_prepare_v2(db,
										"INSERT INTO main.fence_leases(resource, holder, token, "
										"expires_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT(resource) "
										"DO UPDATE SET holder = excluded.holder, token = "
										"excluded.token, expires_at = excluded.expires_at",
										-1, &p, NULL);

	if (rc == SQLITE_OK)
	{
		sqlite3_bind_text(p, 1, c->z, c->n, SQLITE_STATIC);
		sqlite3_bind_text(p, 2, c->h, c->nh, SQLITE_STATIC);
		sqlite3_bind_int64(p, 3, token);
		sqlite3_bind_int64(p, 4, expiresAt);
		rc = fenceStepToEnd(p);
	}
	sqlite3_finalize(p);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/*
 * Lock, read, decide and write on db, in the savepoint fence_lease (which
 * is the call's own transaction when db is in autocommit mode): all of it
 * or, on an error, none.
 */
static int
leaseRun(sqlite3 *db, LeaseCall *c)
{
	sqlite3_int64 now = 0;
	sqlite3_int64 highest = 0;
	int			bHasHighest = 0;
	int			bOwnTxn = sqlite3_get_autocommit(db);
	sqlite3_stmt *apEnd[3] = {NULL, NULL, NULL};	/* ROLLBACK TO, RELEASE, ROLLBACK */
	static const char *const azEnd[3] = {
		"ROLLBACK TO fence_lease", "RELEASE fence_lease", "ROLLBACK"
	};
	int			rc = SQLITE_OK;
	int			i;

	/* ending the savepoint must not depend on an allocation: prepared first */
	for (i = 0; i < 3 && rc == SQLITE_OK; i++)
		rc = sqlite3_prepare_v2(db, azEnd[i], -1, &apEnd[i], NULL);
	if (rc == SQLITE_OK)
		rc = leaseExec(db, "SAVEPOINT fence_lease", c);
	if (rc != SQLITE_OK)
	{
		sqlite3_snprintf((int) sizeof(c->zErr), c->zErr, "%s", sqlite3_errmsg(db));
		for (i = 0; i < 3; i++)
			sqlite3_finalize(apEnd[i]);
		return rc;
	}
	/* the write lock first, so that the busy handler can wait for it */
	rc = leaseExec(db, "DELETE FROM main.fence_leases WHERE 0", c);
	if (rc == SQLITE_ERROR)
	{
		/* no table yet (IF NOT EXISTS: another connection may have made it since) */
		rc = leaseExec(db, "CREATE TABLE IF NOT EXISTS main.fence_leases"
					   FENCE_LEASES_COLUMNS, c);
		if (rc == SQLITE_OK)
			rc = leaseExec(db, "DELETE FROM main.fence_leases WHERE 0", c);
	}
	if (rc == SQLITE_OK)
	{
		/* an application's own table of that name is never used */
		char	   *zErr = NULL;

		rc = fenceOwnTableShape(db, "fence_leases", &zErr);
		if (zErr != NULL)
		{
			sqlite3_snprintf((int) sizeof(c->zErr), c->zErr, "%s", zErr);
			sqlite3_free(zErr);
			rc = SQLITE_ERROR;
		}
	}
	if (rc == SQLITE_OK)
		rc = fenceNowMs(&now);
	if (rc == SQLITE_OK)
		rc = leaseRead(db, c, &bHasHighest, &highest);
	if (rc == SQLITE_OK && c->op == LEASE_ACQUIRE)
	{
		switch (fence_lease_grant(c->bHas ? &c->lease : NULL, bHasHighest, highest, c->h,
								  (size_t) c->nh, now, &c->granted))
		{
			case FENCE_GRANT_NEW:
			case FENCE_GRANT_EXTEND:
				rc = leaseWrite(db, c, c->granted, now + c->ttl);
				c->result = 1;
				break;
			case FENCE_GRANT_BUSY:
				break;
			case FENCE_GRANT_EXHAUSTED:
				c->bExhausted = 1;
				break;
		}
	}
	else if (rc == SQLITE_OK &&
			 fence_lease_owned(c->bHas ? &c->lease : NULL, c->h, (size_t) c->nh, c->token, now))
	{
		/* a release ends the lease now: live no longer, since now < now is false */
		rc = leaseWrite(db, c, c->token, c->op == LEASE_RENEW ? now + c->ttl : now);
		c->result = 1;
	}
	if (rc != SQLITE_OK)
	{
		/* keep the message: the statements below replace it */
		if (c->zErr[0] == '\0')
			sqlite3_snprintf((int) sizeof(c->zErr), c->zErr, "%s", sqlite3_errmsg(db));
		sqlite3_step(apEnd[0]);
		sqlite3_step(apEnd[1]);
	}
	else if ((rc = sqlite3_step(apEnd[1])) != SQLITE_DONE)
		sqlite3_snprintf((int) sizeof(c->zErr), c->zErr, "%s", sqlite3_errmsg(db));
	else
		rc = SQLITE_OK;
	/* a commit that failed (readers in rollback-journal mode), or a savepoint
	 * left open: none of it, and no transaction the caller never opened */
	if (bOwnTxn && !sqlite3_get_autocommit(db))
		sqlite3_step(apEnd[2]);
	for (i = 0; i < 3; i++)
		sqlite3_finalize(apEnd[i]);
	return rc;
}

/*
 * The second connection fence_acquire grants through inside an open
 * transaction that has not touched any database yet: main's file, opened
 * with main's VFS and busy timeout, kept until the connection closes.
 * NULL with c->zErr set when main is no file or it cannot be opened.
 */
static sqlite3 *
leaseSideDb(FenceConn *conn, LeaseCall *c)
{
	const char *zFile = sqlite3_db_filename(conn->db, "main");
	sqlite3_vfs *pVfs = NULL;
	sqlite3_stmt *p = NULL;
	int			ms = 0;
	int			rc;

	if (conn->lease.pDb != NULL)
		return conn->lease.pDb;
	if (zFile == NULL || zFile[0] == '\0')
	{
		sqlite3_snprintf((int) sizeof(c->zErr), c->zErr,
						 "fence_acquire refused inside a transaction on a database in memory: "
						 "call it outside one");
		return NULL;
	}
	sqlite3_file_control(conn->db, "main", SQLITE_FCNTL_VFS_POINTER, &pVfs);
	rc = sqlite3_open_v2(zFile, &conn->lease.pDb, SQLITE_OPEN_READWRITE,
						 pVfs ? pVfs->zName : NULL);
	if (rc == SQLITE_OK && sqlite3_prepare_v2(conn->db, "PRAGMA busy_timeout", -1, &p,
											  NULL) == SQLITE_OK &&
		sqlite3_step(p) == SQLITE_ROW)
		ms = sqlite3_column_int(p, 0);
	sqlite3_finalize(p);
	if (rc == SQLITE_OK)
		sqlite3_busy_timeout(conn->lease.pDb, ms);
	else
	{
		sqlite3_snprintf((int) sizeof(c->zErr), c->zErr, "fence_acquire: %s",
						 conn->lease.pDb ? sqlite3_errmsg(conn->lease.pDb) : "out of memory");
		sqlite3_close(conn->lease.pDb);
		conn->lease.pDb = NULL;
	}
	return conn->lease.pDb;
}

void
fenceLeaseFinalize(FenceConn *conn)
{
	sqlite3_close(conn->lease.pDb);
	conn->lease.pDb = NULL;
}

/* A ttl argument: an integer (fenceValueInt64), 1..2^31-1. */
static int
argTtl(sqlite3_context *ctx, sqlite3_value *v, sqlite3_int64 *pTtl)
{
	char		buf[FENCE_MSG_MAX];
	FenceProblem problem = FENCE_VALID;

	if (sqlite3_value_type(v) == SQLITE_NULL)
		problem = FENCE_NULL;
	else if (!fenceValueInt64(v, pTtl))
		problem = FENCE_NOT_INTEGER;
	else
		problem = fence_check_ttl(*pTtl);
	if (problem == FENCE_VALID)
		return 1;
	fenceResultError(ctx, fence_msg_invalid_ttl(buf, problem, *pTtl), FENCE_RC_INVALID);
	return 0;
}

static void
leaseCall(sqlite3_context *ctx, sqlite3_value **argv, enum LeaseOp op)
{
	FenceConn  *conn = sqlite3_user_data(ctx);
	sqlite3    *db = conn->db;
	LeaseCall	c;
	int			rc;

	memset(&c, 0, sizeof(c));
	c.op = op;
	/* every argument is checked before anything is read or written */
	if (!fenceArgText(ctx, argv[0], &c.z, &c.n, 0) || !fenceArgText(ctx, argv[1], &c.h, &c.nh, 1))
		return;
	if (op != LEASE_ACQUIRE && !fenceArgToken(ctx, argv[2], &c.token))
		return;
	if (op != LEASE_RELEASE && !argTtl(ctx, argv[op == LEASE_ACQUIRE ? 2 : 3], &c.ttl))
		return;

	/* SQLite opens no savepoint while a writing statement runs */
	if (fenceOuterWriter(conn) != NULL)
	{
		sqlite3_snprintf((int) sizeof(c.zErr), c.zErr,
						 "%s refused inside a writing statement: call it in a SELECT of its own",
						 kLeaseOpName[op]);
		fenceResultError(ctx, c.zErr, SQLITE_ERROR);
		return;
	}
	/* a grant inside an open transaction commits on its own, or not at all */
	if (op == LEASE_ACQUIRE && !sqlite3_get_autocommit(db))
	{
		if (sqlite3_txn_state(db, NULL) != SQLITE_TXN_NONE)
		{
			fenceResultError(ctx, "fence_acquire refused in a transaction that has read or "
							 "written: a ROLLBACK must not take back a grant; call it first "
							 "in the transaction, or outside one", SQLITE_ERROR);
			return;
		}
		db = leaseSideDb(conn, &c);
		if (db == NULL)
		{
			fenceResultError(ctx, c.zErr, SQLITE_ERROR);
			return;
		}
	}
	rc = leaseRun(db, &c);
	if (rc != SQLITE_OK)
	{
		sqlite3_result_error(ctx, c.zErr[0] ? c.zErr : sqlite3_errstr(rc), -1);
		sqlite3_result_error_code(ctx, fenceErrorCode(rc));
	}
	else if (c.bExhausted)
	{
		char		buf[FENCE_MSG_MAX];

		fenceResultError(ctx, fence_msg_exhausted(buf, c.z, (size_t) c.n), FENCE_RC_INVALID);
	}
	else if (op != LEASE_ACQUIRE)
		sqlite3_result_int(ctx, c.result);
	else if (c.result)
		sqlite3_result_int64(ctx, c.granted);
	else
		sqlite3_result_null(ctx);
}

void
fenceAcquireFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void) argc;
	leaseCall(ctx, argv, LEASE_ACQUIRE);
}

void
fenceRenewFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void) argc;
	leaseCall(ctx, argv, LEASE_RENEW);
}

void
fenceReleaseFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void) argc;
	leaseCall(ctx, argv, LEASE_RELEASE);
}
