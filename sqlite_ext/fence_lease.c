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
 * granted for its resource, so every grant exceeds every token ever granted
 * or accepted. A grant never writes fence_tokens: the new holder's first
 * accepted write moves the highest, and the old holder is refused from then
 * on. The lease is for liveness; the fence is what makes writes safe.
 *
 * The clock is the default VFS's xCurrentTimeInt64, read at the moment of
 * the call once the write lock is held (not 'now', which SQLite keeps
 * stable within a statement). A lease is live while now < expires_at.
 *
 * Concurrency contract: a call takes main's write lock before it reads
 * anything, so its read, decision and write are one atomic step that no
 * other connection can interleave with (SQLite has one writer per file).
 *   - Inside the caller's open transaction, the call writes there and is
 *     undone by its ROLLBACK; a savepoint of the call's own keeps a failed
 *     call from leaving half of its work behind.
 *   - In autocommit mode, the call brackets its statements in that
 *     savepoint, which is then its own short transaction: released, it
 *     commits before the function returns.
 *   - Called from inside a writing statement (INSERT ... SELECT
 *     fence_acquire(...)), SQLite allows no savepoint, and a single-row
 *     INSERT has no statement journal either: a call refused after its
 *     write (a trigger or an authorizer changed what it wrote) would leave
 *     that write behind. So the call is refused there, before it reads or
 *     writes anything: lease calls run in a statement of their own.
 * Taking the lock as the first step of a transaction lets SQLite's busy
 * handler wait for it: the call waits at most the connection's busy
 * timeout, then fails with SQLITE_BUSY and changes nothing. A transaction
 * that has already read main (or an autocommit SELECT that reads a table
 * of main while calling) is upgraded without waiting, as SQLite does for
 * every such upgrade to avoid deadlock: it fails with SQLITE_BUSY at once
 * when another connection writes (BEGIN IMMEDIATE avoids that).
 *
 * Trust: as for fence_tokens (fence.c), the table must have fence's shape,
 * every read proves itself against an authorizer that blinds columns (the
 * row read back under its resource, typed columns, a canary row), and every
 * write is read back.
 *
 * The functions are DIRECTONLY: a view or trigger planted in the schema
 * cannot take, extend or end a lease for the application.
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

static const char createLeasesSql[] =
"CREATE TABLE IF NOT EXISTS main.fence_leases" FENCE_LEASES_COLUMNS;

/* Takes main's write lock and writes nothing. */
static const char lockLeasesSql[] =
"DELETE FROM main.fence_leases WHERE 0";

/* The resource's row (tag 1) and a canary (tag 0), as in fence.c. */
static const char selectLeaseSql[] =
"SELECT 1, resource, holder, token, expires_at FROM main.fence_leases WHERE resource = ?1 "
"UNION ALL SELECT 0, resource, NULL, NULL, NULL FROM "
"(SELECT resource FROM main.fence_leases LIMIT 1)";

static const char writeLeaseSql[] =
"INSERT INTO main.fence_leases(resource, holder, token, expires_at) VALUES (?1, ?2, ?3, ?4) "
"ON CONFLICT(resource) DO UPDATE SET holder = excluded.holder, token = excluded.token, "
"expires_at = excluded.expires_at";

/* Milliseconds between the Julian day epoch and the Unix epoch. */
#define JULIAN_UNIX_MS ((sqlite3_int64) 210866760000000)

#define LEASE_HINT \
	"an authorizer (sqlite3_set_authorizer) that answers SQLITE_IGNORE for fence's " \
	"own statements makes SQLite read NULL or skip the write; fence refuses rather " \
	"than guess: let the authorizer allow reads and writes of main.fence_leases, " \
	"main.fence_tokens and main.sqlite_schema"

/* The lease row as read, with room for its holder. */
typedef struct LeaseRow
{
	int			bHas;
	FenceLease	lease;
	char		zHolder[FENCE_HOLDER_MAX + 1];
} LeaseRow;

static int
leaseUntrusted(FenceConn *conn, const char *zWhat, const char *z, int n)
{
	conn->savedRc = FENCE_RC_UNTRUSTED;
	sqlite3_snprintf((int) sizeof(conn->zSavedErr), conn->zSavedErr,
					 "fence: %s for resource \"%.*s\", so fence refuses to judge the "
					 "lease: %s", zWhat, n, z, LEASE_HINT);
	return FENCE_RC_UNTRUSTED;
}

/* Keep SQLite's message for rc before later calls replace it. */
static int
leaseSaveError(FenceConn *conn, int rc)
{
	conn->savedRc = rc;
	sqlite3_snprintf((int) sizeof(conn->zSavedErr), conn->zSavedErr, "%s",
					 sqlite3_errmsg(conn->db));
	return rc;
}

static void
leaseFinalizeTable(FenceConn *conn)
{
	sqlite3_finalize(conn->pLeaseLock);
	sqlite3_finalize(conn->pLeaseSelect);
	sqlite3_finalize(conn->pLeaseWrite);
	conn->pLeaseLock = conn->pLeaseSelect = conn->pLeaseWrite = NULL;
}

void
fenceLeaseFinalize(FenceConn *conn)
{
	int			i;

	leaseFinalizeTable(conn);
	for (i = 0; i < 4; i++)
	{
		sqlite3_finalize(conn->pLeaseTxn[i]);
		conn->pLeaseTxn[i] = NULL;
	}
}

/*
 * The call's savepoint statements, prepared once and kept: ending the
 * savepoint must not depend on an allocation (out of memory there would
 * leave half a call behind), so nothing is begun before they exist.
 */
enum
{
	TXN_BEGIN, TXN_RELEASE, TXN_UNDO, TXN_ROLLBACK
};

static int
leasePrepareTxn(FenceConn *conn)
{
	static const char *const sql[4] = {
		"SAVEPOINT fence_lease", "RELEASE fence_lease", "ROLLBACK TO fence_lease", "ROLLBACK"
	};
	int			i;
	int			rc = SQLITE_OK;

	if (conn->pLeaseTxn[3])
		return SQLITE_OK;
	/* the eponymous fence_held must be connected to finalize these at close */
	rc = fenceHeldConnect(conn);
	for (i = 0; i < 4 && rc == SQLITE_OK; i++)
		if (conn->pLeaseTxn[i] == NULL)
			rc = sqlite3_prepare_v3(conn->db, sql[i], -1, SQLITE_PREPARE_PERSISTENT,
									&conn->pLeaseTxn[i], NULL);
	return rc;
}

static int
leaseTxnStep(FenceConn *conn, int which)
{
	int			rc = sqlite3_step(conn->pLeaseTxn[which]);

	if (rc != SQLITE_DONE)
		leaseSaveError(conn, rc);
	sqlite3_reset(conn->pLeaseTxn[which]);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int
leaseReprepared(FenceConn *conn)
{
	sqlite3_stmt *a[3] = {conn->pLeaseLock, conn->pLeaseSelect, conn->pLeaseWrite};
	int			sum = 0;
	int			i;

	for (i = 0; i < 3; i++)
		if (a[i])
			sum += sqlite3_stmt_status(a[i], SQLITE_STMTSTATUS_REPREPARE, 0);
	return sum;
}

/*
 * main.fence_leases has fence's shape: checked when the statements are
 * prepared and again whenever SQLite re-prepared one of them (the schema
 * changed: the table may have been dropped and made again by hand).
 */
static int
leaseTableTrusted(FenceConn *conn)
{
	char	   *zErr = NULL;
	int			n = leaseReprepared(conn);
	int			rc;

	if (n == conn->nLeaseReprepared)
		return SQLITE_OK;
	rc = fenceOwnTableShape(conn->db, "fence_leases", &zErr);
	if (rc != SQLITE_OK && zErr != NULL)
	{
		conn->savedRc = rc;
		sqlite3_snprintf((int) sizeof(conn->zSavedErr), conn->zSavedErr, "%s", zErr);
	}
	sqlite3_free(zErr);
	if (rc == SQLITE_OK)
		conn->nLeaseReprepared = n;
	return rc;
}

static int
leasePrepare(FenceConn *conn)
{
	int			rc = SQLITE_OK;

	if (conn->pLeaseLock && conn->pLeaseSelect && conn->pLeaseWrite)
		return SQLITE_OK;
	leaseFinalizeTable(conn);
	rc = sqlite3_prepare_v3(conn->db, lockLeasesSql, -1, SQLITE_PREPARE_PERSISTENT,
								&conn->pLeaseLock, NULL);
	if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_NOMEM)
	{
		/*
		 * No such table (in the schema this connection has cached, at
		 * least): make it. CREATE takes the write lock itself, waiting for
		 * it like any first write; IF NOT EXISTS, because another
		 * connection may have made it since.
		 */
		rc = sqlite3_exec(conn->db, createLeasesSql, NULL, NULL, NULL);
		if (rc != SQLITE_OK)
			return leaseSaveError(conn, rc);
		rc = sqlite3_prepare_v3(conn->db, lockLeasesSql, -1, SQLITE_PREPARE_PERSISTENT,
								&conn->pLeaseLock, NULL);
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v3(conn->db, selectLeaseSql, -1, SQLITE_PREPARE_PERSISTENT,
								&conn->pLeaseSelect, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v3(conn->db, writeLeaseSql, -1, SQLITE_PREPARE_PERSISTENT,
								&conn->pLeaseWrite, NULL);
	if (rc != SQLITE_OK)
	{
		leaseSaveError(conn, rc);
		leaseFinalizeTable(conn);
		return rc;
	}

	/*
	 * The shape is checked once the lock is held (leaseLock): reading
	 * sqlite_schema now would open a read transaction, and SQLite lets no
	 * busy handler wait for the upgrade of one.
	 */
	conn->nLeaseReprepared = -1;
	return SQLITE_OK;
}

/*
 * Take main's write lock, making fence_leases first when there is none.
 * The lock statement is the first of the call's transaction (or savepoint),
 * so SQLite's busy handler waits for the lock.
 */
static int
leaseLock(FenceConn *conn)
{
	int			attempt;
	int			rc = SQLITE_OK;

	for (attempt = 0; attempt < 2; attempt++)
	{
		rc = leasePrepare(conn);
		if (rc != SQLITE_OK)
			return rc;
		if (sqlite3_stmt_busy(conn->pLeaseLock))
			return FENCE_RC_REENTERED;
		rc = sqlite3_step(conn->pLeaseLock);
		if (rc != SQLITE_DONE)
			leaseSaveError(conn, rc);
		sqlite3_reset(conn->pLeaseLock);
		if (rc == SQLITE_DONE)
			break;

		/*
		 * The table went away under the cached statements (a transaction
		 * that created it rolled back, or it was dropped): forget them and
		 * make it again, once.
		 */
		if (rc != SQLITE_ERROR && rc != SQLITE_SCHEMA)
			return rc;
		leaseFinalizeTable(conn);
	}
	if (rc != SQLITE_DONE)
		return rc;
	if (sqlite3_txn_state(conn->db, "main") != SQLITE_TXN_WRITE)
	{
		conn->savedRc = FENCE_RC_UNTRUSTED;
		sqlite3_snprintf((int) sizeof(conn->zSavedErr), conn->zSavedErr,
						 "fence: could not take the write lock of the main database "
						 "before reading main.fence_leases, so fence refuses to grant "
						 "or change a lease: %s", LEASE_HINT);
		return FENCE_RC_UNTRUSTED;
	}
	return leaseTableTrusted(conn);
}

/* Read the lease row of resource z, proving what is read. */
static int
leaseRead(FenceConn *conn, const char *z, int n, LeaseRow *row)
{
	sqlite3_stmt *p = conn->pLeaseSelect;
	int			rc;
	int			rcRow = SQLITE_OK;

	memset(row, 0, sizeof(*row));
	if (sqlite3_stmt_busy(p))
		return FENCE_RC_REENTERED;
	sqlite3_bind_text(p, 1, z, n, SQLITE_STATIC);
	while ((rc = sqlite3_step(p)) == SQLITE_ROW && rcRow == SQLITE_OK)
	{
		if (sqlite3_column_int(p, 0) == 0)
		{
			if (sqlite3_column_type(p, 1) != SQLITE_TEXT)
				rcRow = leaseUntrusted(conn, "main.fence_leases read back a NULL resource",
									   z, n);
			continue;
		}
		if (sqlite3_column_type(p, 1) != SQLITE_TEXT || sqlite3_column_bytes(p, 1) != n ||
			memcmp(sqlite3_column_text(p, 1), z, (size_t) n) != 0)
			rcRow = leaseUntrusted(conn, "main.fence_leases returned another row than asked",
								   z, n);
		else if (sqlite3_column_type(p, 2) != SQLITE_TEXT ||
				 fence_check_holder((const char *) sqlite3_column_text(p, 2),
									(size_t) sqlite3_column_bytes(p, 2)) != FENCE_VALID)
			rcRow = leaseUntrusted(conn, "main.fence_leases read back a holder that is not "
								   "valid", z, n);
		else if (sqlite3_column_type(p, 3) != SQLITE_INTEGER || sqlite3_column_int64(p, 3) < 1)
			rcRow = leaseUntrusted(conn, "main.fence_leases read back a token that is not a "
								   "positive integer", z, n);
		else if (sqlite3_column_type(p, 4) != SQLITE_INTEGER)
			rcRow = leaseUntrusted(conn, "main.fence_leases read back an expires_at that is "
								   "not an integer", z, n);
		else
		{
			row->bHas = 1;
			row->lease.holder_len = (size_t) sqlite3_column_bytes(p, 2);
			memcpy(row->zHolder, sqlite3_column_text(p, 2), row->lease.holder_len);
			row->zHolder[row->lease.holder_len] = '\0';
			row->lease.holder = row->zHolder;
			row->lease.token = sqlite3_column_int64(p, 3);
			row->lease.expires_at = sqlite3_column_int64(p, 4);
		}
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		leaseSaveError(conn, rc);
	sqlite3_reset(p);
	sqlite3_clear_bindings(p);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return rc;
	return rcRow;
}

/* Write the row and read it back: it must hold exactly what was written. */
static int
leaseWrite(FenceConn *conn, const char *z, int n, const char *h, int nh,
		   sqlite3_int64 token, sqlite3_int64 expiresAt)
{
	sqlite3_stmt *p = conn->pLeaseWrite;
	LeaseRow	back;
	int			rc;

	if (sqlite3_stmt_busy(p))
		return FENCE_RC_REENTERED;
	sqlite3_bind_text(p, 1, z, n, SQLITE_STATIC);
	sqlite3_bind_text(p, 2, h, nh, SQLITE_STATIC);
	sqlite3_bind_int64(p, 3, token);
	sqlite3_bind_int64(p, 4, expiresAt);
	rc = sqlite3_step(p);
	if (rc != SQLITE_DONE)
		leaseSaveError(conn, rc);
	sqlite3_reset(p);
	sqlite3_clear_bindings(p);
	if (rc != SQLITE_DONE)
		return rc;
	rc = leaseRead(conn, z, n, &back);
	if (rc != SQLITE_OK)
		return rc;
	if (!back.bHas || back.lease.token != token || back.lease.expires_at != expiresAt ||
		back.lease.holder_len != (size_t) nh || memcmp(back.zHolder, h, (size_t) nh) != 0)
		return leaseUntrusted(conn, "the write of main.fence_leases did not take effect as "
							  "written", z, n);
	return SQLITE_OK;
}

/* The default VFS's clock, in ms since the Unix epoch. */
static int
leaseNow(FenceConn *conn, sqlite3_int64 *pNow)
{
	sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
	sqlite3_int64 jd = 0;
	int			rc = SQLITE_ERROR;

	if (vfs && vfs->iVersion >= 2 && vfs->xCurrentTimeInt64)
		rc = vfs->xCurrentTimeInt64(vfs, &jd);
	else if (vfs && vfs->xCurrentTime)
	{
		double		d = 0;

		rc = vfs->xCurrentTime(vfs, &d);
		jd = (sqlite3_int64) (d * 86400000.0);
	}
	if (rc != SQLITE_OK)
	{
		conn->savedRc = FENCE_RC_UNTRUSTED;
		sqlite3_snprintf((int) sizeof(conn->zSavedErr), conn->zSavedErr,
						 "fence: the default VFS could not read the clock, so no lease "
						 "can be judged");
		return FENCE_RC_UNTRUSTED;
	}
	*pNow = jd - JULIAN_UNIX_MS;
	return SQLITE_OK;
}

/*
 * May the call open a savepoint? Not while a writing statement runs (SQLite
 * refuses one then: "SQL statements in progress"), and then the call is
 * refused.
 */
static int
leaseCanSavepoint(FenceConn *conn)
{
	sqlite3_stmt *p;

	for (p = sqlite3_next_stmt(conn->db, NULL); p; p = sqlite3_next_stmt(conn->db, p))
		if (sqlite3_stmt_busy(p) && !sqlite3_stmt_readonly(p))
			return 0;
	return 1;
}

/*
 * End the call's savepoint: released when rc is SQLITE_OK (which commits
 * it when it was the call's own transaction), else rolled back first. A
 * release that cannot commit (SQLITE_BUSY waiting for readers in rollback
 * journal mode) leaves a transaction the caller never opened: roll it back
 * whole, so the call changes nothing.
 */
static int
leaseEnd(FenceConn *conn, int bOwnTxn, int rc)
{
	int			rc2;

	rc2 = rc == SQLITE_OK ? SQLITE_OK : leaseTxnStep(conn, TXN_UNDO);
	if (rc2 == SQLITE_OK)
		rc2 = leaseTxnStep(conn, TXN_RELEASE);
	if (rc2 != SQLITE_OK)
	{
		if (rc == SQLITE_OK)
			rc = rc2;
		/* a transaction the caller never opened is not left behind */
		if (bOwnTxn && !sqlite3_get_autocommit(conn->db))
			leaseTxnStep(conn, TXN_ROLLBACK);
	}
	return rc;
}

enum LeaseOp
{
	LEASE_ACQUIRE,
	LEASE_RENEW,
	LEASE_RELEASE
};

static const char *const kLeaseOpName[] = {"fence_acquire", "fence_renew", "fence_release"};

/* A holder argument: TEXT, non-empty, at most FENCE_HOLDER_MAX bytes. */
static int
argHolder(sqlite3_context *ctx, sqlite3_value *v, const char **pz, int *pn)
{
	char		buf[FENCE_MSG_MAX];
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
		problem = fence_check_holder(*pz, (size_t) *pn);
	}
	if (problem == FENCE_VALID)
		return 1;
	fenceResultError(ctx, fence_msg_invalid_holder(buf, problem, (size_t) sqlite3_value_bytes(v)),
					 FENCE_RC_INVALID);
	return 0;
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
	const char *z = NULL;
	const char *h = NULL;
	int			n = 0;
	int			nh = 0;
	sqlite3_int64 token = 0;
	sqlite3_int64 ttl = 0;
	sqlite3_int64 now = 0;
	int64_t		granted = 0;
	int			bOwnTxn;
	int			bExhausted = 0;
	int			result = 0;
	LeaseRow	row;
	int			rc;

	/* every argument is checked before anything is read or written */
	if (!fenceArgResource(ctx, argv[0], &z, &n) || !argHolder(ctx, argv[1], &h, &nh))
		return;
	if (op != LEASE_ACQUIRE && !fenceArgToken(ctx, argv[2], &token))
		return;
	if (op != LEASE_RELEASE && !argTtl(ctx, argv[op == LEASE_ACQUIRE ? 2 : 3], &ttl))
		return;

	bOwnTxn = sqlite3_get_autocommit(conn->db);

	if (!leaseCanSavepoint(conn))
	{
		char	   *zMsg = sqlite3_mprintf(
			"fence: %s() cannot run inside a statement that writes (such as INSERT ... "
			"SELECT %s(...)): SQLite gives it no savepoint there to undo a call that fails "
			"half way; call it in a SELECT of its own and use its result in the next "
			"statement", kLeaseOpName[op], kLeaseOpName[op]);

		if (zMsg == NULL)
			sqlite3_result_error_nomem(ctx);
		else
			fenceResultError(ctx, zMsg, SQLITE_ERROR);
		sqlite3_free(zMsg);
		return;
	}
	/*
	 * A grant must not be rolled back once its caller has seen the token:
	 * the next grant would hand the same token to another holder, and the
	 * fence accepts equal tokens. So fence_acquire commits its own grant,
	 * and refuses to run inside a transaction whose ROLLBACK would take it
	 * back. Renewals and releases only change how long a lease lives; a
	 * rolled-back one costs liveness, never safety, and may run anywhere.
	 */
	if (op == LEASE_ACQUIRE && !bOwnTxn)
	{
		fenceResultError(ctx,
						 "fence: fence_acquire() cannot run inside an open transaction: a "
						 "ROLLBACK would take back a grant whose token the caller has seen, "
						 "and the same token could then be granted to another holder; call it "
						 "in autocommit mode (Python: isolation_level=None, or commit first)",
						 SQLITE_ERROR);
		return;
	}
	rc = leasePrepareTxn(conn);
	if (rc == SQLITE_OK)
		rc = leaseTxnStep(conn, TXN_BEGIN);
	if (rc != SQLITE_OK)
	{
		fenceResultDbError(ctx, conn, rc);
		return;
	}
	rc = leaseLock(conn);
	if (rc == SQLITE_OK)
		rc = leaseNow(conn, &now);
	if (rc == SQLITE_OK)
		rc = leaseRead(conn, z, n, &row);
	if (rc == SQLITE_OK && op == LEASE_ACQUIRE)
	{
		int			has = 0;
		sqlite3_int64 highest = 0;

		rc = fenceReadHighest(conn, z, n, &has, &highest);
		if (rc == SQLITE_OK)
		{
			switch (fence_lease_grant(row.bHas ? &row.lease : NULL, has, highest, h,
									  (size_t) nh, now, &granted))
			{
				case FENCE_GRANT_NEW:
				case FENCE_GRANT_EXTEND:
					rc = leaseWrite(conn, z, n, h, nh, granted, now + ttl);
					result = 1;
					break;
				case FENCE_GRANT_BUSY:
					break;
				case FENCE_GRANT_EXHAUSTED:
					bExhausted = 1;
					break;
			}
		}
	}
	else if (rc == SQLITE_OK &&
			 fence_lease_owned(row.bHas ? &row.lease : NULL, h, (size_t) nh, token, now))
	{
		/* a release ends the lease now: live no longer, since now < now is false */
		rc = leaseWrite(conn, z, n, h, nh, token, op == LEASE_RENEW ? now + ttl : now);
		result = 1;
	}
	rc = leaseEnd(conn, bOwnTxn, rc);
	if (rc != SQLITE_OK)
		fenceResultDbError(ctx, conn, rc);
	else if (bExhausted)
	{
		char		buf[FENCE_MSG_MAX];

		fenceResultError(ctx, fence_msg_exhausted(buf, z, (size_t) n), FENCE_RC_INVALID);
	}
	else if (op != LEASE_ACQUIRE)
		sqlite3_result_int(ctx, result);
	else if (result)
		sqlite3_result_int64(ctx, granted);
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
