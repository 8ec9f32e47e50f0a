/*
 * fence_lease.c
 *
 * Leases inside the store: the lock service for workers that share one
 * database and have no etcd or ZooKeeper.
 *
 *   fence_acquire(resource, holder, ttl_ms)        -> token, or NULL while
 *                                                     another holder's lease
 *                                                     is live
 *   fence_renew(resource, holder, token, ttl_ms)   -> extended?
 *   fence_release(resource, holder, token)         -> ended?
 *
 * A lease is for liveness; the fence is what makes writes safe. A grant is
 * above every token ever granted or accepted for the resource, and does not
 * move the highest accepted token: the new holder's first accepted write
 * does, and waits there for the fenced transactions of older holders.
 *
 * Concurrency contract. A grant must never wait behind another transaction,
 * above all not behind a paused holder's open one: a holder that renewed
 * inside its transaction and then stopped (GC, SIGSTOP, a partition) would
 * otherwise keep its lease for as long as its transaction stays open, which
 * is the very failure leases are for. So lease state is not transactional,
 * like a sequence's: each call changes its resource's row of fence_leases
 * in place (systable_inplace_update_*, the same WAL-logged, crash-safe,
 * replicated path PostgreSQL uses for pg_class statistics), under the row's
 * buffer lock, visible to every session at once and not undone by
 * ROLLBACK. The first grant of a resource inserts its row already frozen,
 * so that it too is visible at once; inserts of the same new resource are
 * serialised by a lock held only for the insert (advisory-class LOCKTAG,
 * class FENCE_LEASE_LOCK_CLASS), never to the end of the transaction. The
 * only heavyweight lock kept to the transaction's end is nothing: the table
 * lock is released when the call returns. What can still make a call wait:
 * a call of another backend in progress on the same row (microseconds,
 * plus its WAL flush), and the table's owner altering or locking the table.
 *
 * In-place updates need rows whose length never changes: resource is fixed
 * for a row's life, token and expires_at are fixed-width, and the holder is
 * of the fixed-width type fence_lease_holder (1 to 256 bytes of text, padded
 * with zero bytes), whose text form is what users see and what pg_dump
 * writes.
 *
 * Durability: a call returns only after its WAL is flushed (and, with
 * synchronous replication, confirmed flushed by the synchronous standbys),
 * so a grant the caller saw survives a crash and a failover to a
 * synchronous standby even when its transaction is rolled back or never
 * commits; otherwise two holders could be given the same token. The clock
 * is the server's (GetCurrentTimestamp at the call, not now(), which is the
 * transaction's start): one clock for every grant and check.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "fence_pg.h"

/* field4 of the lease insert lock: 'F' 'L' (fence_tokens.c uses 'F' 'E') */
#define FENCE_LEASE_LOCK_CLASS 0x464c
#define FENCE_LEASE_LOCK_SEED 0x6c65617365ULL


#define Anum_fence_leases_resource		1
#define Anum_fence_leases_holder		2
#define Anum_fence_leases_token			3
#define Anum_fence_leases_expires_at	4
#define Natts_fence_leases				4

/* fence_lease_holder: fixed width, so that a new holder fits in place */
typedef struct FenceHolder
{
	int16		len;
	char		data[FENCE_HOLDER_MAX];
} FenceHolder;

static Oid	leasesRelid = InvalidOid;
static bool leasesCallbackRegistered = false;

static void
forget_leases_relid(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == leasesRelid)
		leasesRelid = InvalidOid;
}

/* ---------------------------------------------------------------------
 * Arguments
 * ------------------------------------------------------------------ */

/*
 * Invalid holders and ttls: core's wording (the same in both engines), with
 * PostgreSQL's codes: 22004 for NULL, 22023 otherwise.
 */
static void
report_invalid_lease(const char *msg, FenceProblem problem) pg_attribute_noreturn();

static void
report_invalid_lease(const char *msg, FenceProblem problem)
{
	ereport(ERROR,
			(errcode(problem == FENCE_NULL ? ERRCODE_NULL_VALUE_NOT_ALLOWED
					 : ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg_internal("%s", msg)));
	pg_unreachable();
}

static void
holder_set(FenceHolder *holder, const char *s, size_t len)
{
	FenceProblem problem = fence_check_holder(s, len);
	char		msg[FENCE_MSG_MAX];

	if (problem != FENCE_VALID)
		report_invalid_lease(fence_msg_invalid_holder(msg, problem, len), problem);
	memset(holder, 0, sizeof(FenceHolder));
	holder->len = (int16) len;
	memcpy(holder->data, s, len);
}

static FenceHolder
holder_arg(FunctionCallInfo fcinfo, int n)
{
	FenceHolder holder;
	text	   *t;

	if (PG_ARGISNULL(n))
		holder_set(&holder, NULL, 0);
	t = PG_GETARG_TEXT_PP(n);
	holder_set(&holder, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
	return holder;
}

static int64
ttl_arg(FunctionCallInfo fcinfo, int n)
{
	char		msg[FENCE_MSG_MAX];
	int64		ttl;

	if (PG_ARGISNULL(n))
		report_invalid_lease(fence_msg_invalid_ttl(msg, FENCE_NULL, 0), FENCE_NULL);
	ttl = PG_GETARG_INT64(n);
	if (fence_check_ttl(ttl) != FENCE_VALID)
		report_invalid_lease(fence_msg_invalid_ttl(msg, FENCE_OUT_OF_RANGE, ttl),
							 FENCE_OUT_OF_RANGE);
	return ttl;
}

/* ---------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------ */

static Relation
open_leases(void)
{
	Relation	rel;
	TupleDesc	desc;

	if (!OidIsValid(leasesRelid))
	{
		leasesRelid = fence_extension_relid("fence_leases");
		if (!leasesCallbackRegistered)
		{
			CacheRegisterRelcacheCallback(forget_leases_relid, (Datum) 0);
			leasesCallbackRegistered = true;
		}
	}
	rel = table_open(leasesRelid, RowExclusiveLock);
	desc = RelationGetDescr(rel);

	/*
	 * Rows are written past the executor: refuse a table whose shape is not
	 * the one this code writes, and one with indexes besides the primary
	 * key (they would miss the rows inserted here).
	 */
	if (desc->natts != Natts_fence_leases ||
		TupleDescAttr(desc, Anum_fence_leases_resource - 1)->atttypid != TEXTOID ||
		TupleDescAttr(desc, Anum_fence_leases_holder - 1)->attlen != sizeof(FenceHolder) ||
		TupleDescAttr(desc, Anum_fence_leases_token - 1)->atttypid != INT8OID ||
		TupleDescAttr(desc, Anum_fence_leases_expires_at - 1)->atttypid != TIMESTAMPTZOID ||
		!OidIsValid(RelationGetPrimaryKeyIndex(rel)) ||
		list_length(RelationGetIndexList(rel)) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("fence: table fence_leases does not have the shape fence gave it"),
				 errhint("Only fence writes fence_leases; restore it from the extension's script.")));
	return rel;
}

/* One lease, as read from or written to its row. */
typedef struct Lease
{
	FenceHolder holder;
	int64		token;
	TimestampTz expires_at;
} Lease;

static void
lease_from_tuple(Relation rel, HeapTuple tuple, Lease *lease)
{
	Datum		values[Natts_fence_leases];
	bool		nulls[Natts_fence_leases];

	heap_deform_tuple(tuple, RelationGetDescr(rel), values, nulls);
	if (nulls[Anum_fence_leases_holder - 1] || nulls[Anum_fence_leases_token - 1] ||
		nulls[Anum_fence_leases_expires_at - 1])
		elog(ERROR, "fence: a row of fence_leases has a NULL");
	memcpy(&lease->holder, DatumGetPointer(values[Anum_fence_leases_holder - 1]),
		   sizeof(FenceHolder));
	lease->token = DatumGetInt64(values[Anum_fence_leases_token - 1]);
	lease->expires_at = DatumGetTimestampTz(values[Anum_fence_leases_expires_at - 1]);
}

static HeapTuple
lease_tuple(Relation rel, const char *resource, size_t len, const Lease *lease)
{
	Datum		values[Natts_fence_leases];
	bool		nulls[Natts_fence_leases] = {false, false, false, false};

	values[Anum_fence_leases_resource - 1] =
		PointerGetDatum(cstring_to_text_with_len(resource, (int) len));
	values[Anum_fence_leases_holder - 1] = PointerGetDatum(&lease->holder);
	values[Anum_fence_leases_token - 1] = Int64GetDatum(lease->token);
	values[Anum_fence_leases_expires_at - 1] = TimestampTzGetDatum(lease->expires_at);
	return heap_form_tuple(RelationGetDescr(rel), values, nulls);
}

static void
resource_key(ScanKey key, const char *resource, size_t len)
{
	ScanKeyInit(key, Anum_fence_leases_resource, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(cstring_to_text_with_len(resource, (int) len)));
}

/*
 * Make what this backend just wrote durable before the caller sees it: a
 * transaction that changed only rows in place has no XID and writes no
 * commit record, so nothing else would flush it.
 */
static void
lease_make_durable(void)
{
	XLogRecPtr	lsn = XactLastRecEnd;
	bool		confirmed = true;

	XLogFlush(lsn);

	/*
	 * Wait for the synchronous standbys at synchronous_commit = on at least,
	 * as an advance commits: an application role can weaken the session's
	 * setting (SET, startup options, ALTER ROLE on itself), and a grant a
	 * failover loses is granted again. SET LOCAL for the rest of the
	 * transaction (fence_xact.c).
	 */
	fence_commit_synchronously();
	SyncRepWaitForLSN(lsn, false);

	/*
	 * SyncRepWaitForLSN returns with only a WARNING when the wait is
	 * cancelled (statement_timeout, a cancel request), which most drivers
	 * drop: the change then stands here but a failover could lose it, and
	 * the same token be granted again. The caller must not use it, so that
	 * is an error.
	 */
	if (max_wal_senders > 0)
	{
		int			mode = SYNC_REP_WAIT_FLUSH;

		LWLockAcquire(SyncRepLock, LW_SHARED);
		if (WalSndCtl->sync_standbys_status & SYNC_STANDBY_DEFINED)
			confirmed = WalSndCtl->lsn[mode] >= lsn;
		LWLockRelease(SyncRepLock);
	}
	if (!confirmed)
		ereport(ERROR,
				(errcode(ERRCODE_OPERATOR_INTERVENTION),
				 errmsg("fence: the lease change was not confirmed by the synchronous standbys"),
				 errdetail("The wait for synchronous replication of WAL up to %X/%X was cancelled.",
						   LSN_FORMAT_ARGS(lsn)),
				 errhint("Do not use the token this call would have returned: a failover could lose it. Call the function again.")));
}

/* ---------------------------------------------------------------------
 * The rules (the same in both engines)
 * ------------------------------------------------------------------ */

typedef enum LeaseOp
{
	LEASE_ACQUIRE,
	LEASE_RENEW,
	LEASE_RELEASE
} LeaseOp;

typedef struct LeaseCall
{
	LeaseOp		op;
	const char *resource;
	size_t		len;
	FenceHolder holder;
	int64		token;			/* renew, release: the caller's token */
	int64		ttl_ms;			/* acquire, renew */
	TimestampTz now;
	bool		has_highest;	/* acquire: the highest accepted token, */
	int64		highest;		/* read before the row is locked */
} LeaseCall;

static bool
same_holder(const FenceHolder *a, const FenceHolder *b)
{
	return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

static void
report_tokens_used(const LeaseCall *call) pg_attribute_noreturn();

static void
report_tokens_used(const LeaseCall *call)
{
	char		msg[FENCE_MSG_MAX];
	size_t		len;
	const char *resource = fence_client_text(call->resource, call->len, &len);

	ereport(ERROR,
			(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
			 errmsg_internal("%s", fence_msg_exhausted(msg, resource, len)),
			 errdetail("The highest granted or accepted token is 9223372036854775807."),
			 errhint("Use another resource name.")));
	pg_unreachable();
}

/*
 * Decide the call against the row's lease (NULL: no row) with core's rules,
 * the same as SQLite's. Returns whether the lease changes; *next is what it
 * becomes, *result the call's result (the token for an acquire, 1 for true,
 * 0 for false, -1 for NULL, -2 when the resource has used every token). It
 * reads nothing: it runs while the row's buffer is locked. Times are
 * TimestampTz (microseconds); core only compares and copies them.
 */
static bool
lease_decide(const LeaseCall *call, const Lease *row, Lease *next, int64 *result)
{
	FenceLease	core_row;
	FenceLease *rowp = NULL;

	if (row)
	{
		core_row.holder = row->holder.data;
		core_row.holder_len = row->holder.len;
		core_row.token = row->token;
		core_row.expires_at = row->expires_at;
		rowp = &core_row;
	}
	if (call->op == LEASE_ACQUIRE)
	{
		int64_t		token;

		switch (fence_lease_grant(rowp, call->has_highest, call->highest,
								  call->holder.data, call->holder.len, call->now, &token))
		{
			case FENCE_GRANT_BUSY:
				*result = -1;
				return false;
			case FENCE_GRANT_EXHAUSTED:
				*result = -2;
				return false;
			case FENCE_GRANT_NEW:
			case FENCE_GRANT_EXTEND:
				break;
		}
		next->holder = call->holder;
		next->token = token;
		next->expires_at = call->now + call->ttl_ms * INT64CONST(1000);
		*result = token;
		return true;
	}
	if (!fence_lease_owned(rowp, call->holder.data, call->holder.len, call->token, call->now))
	{
		*result = 0;
		return false;
	}
	*next = *row;
	next->expires_at = call->op == LEASE_RENEW
		? call->now + call->ttl_ms * INT64CONST(1000)
		: call->now;
	*result = 1;
	return true;
}

/* The first grant of a resource: a frozen row, visible to all at once. */
static bool
insert_first_lease(Relation rel, const LeaseCall *call, int64 *result)
{
	LOCKTAG		tag;
	uint64		h = hash_bytes_extended((const unsigned char *) call->resource,
										(int) call->len, FENCE_LEASE_LOCK_SEED);
	Relation	index;
	ScanKeyData key;
	SysScanDesc scan;
	bool		exists;
	Lease		lease;
	HeapTuple	tuple;
	Datum		ivalue;
	bool		inull = false;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 FENCE_LEASE_LOCK_CLASS);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);

	/* another backend may have inserted it while we took the lock */
	resource_key(&key, call->resource, call->len);
	scan = systable_beginscan(rel, RelationGetPrimaryKeyIndex(rel), true, NULL, 1, &key);
	exists = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	if (exists)
	{
		LockRelease(&tag, ExclusiveLock, false);
		return false;
	}

	if (!lease_decide(call, NULL, &lease, result))
		report_tokens_used(call);
	tuple = lease_tuple(rel, call->resource, call->len, &lease);
	heap_insert(rel, tuple, GetCurrentCommandId(true), HEAP_INSERT_FROZEN, NULL);
	index = index_open(RelationGetPrimaryKeyIndex(rel), RowExclusiveLock);
	ivalue = heap_getattr(tuple, Anum_fence_leases_resource, RelationGetDescr(rel), &inull);
	index_insert(index, &ivalue, &inull, &tuple->t_self, rel, UNIQUE_CHECK_YES, false,
				 BuildIndexInfo(index));
	index_close(index, RowExclusiveLock);
	heap_freetuple(tuple);
	LockRelease(&tag, ExclusiveLock, false);
	return true;
}

/* Carry out one call; returns what lease_decide said. */
static int64
lease_call(LeaseCall *call)
{
	Relation	rel;
	int64		result = -1;

	const char *name = call->op == LEASE_ACQUIRE ? "fence_acquire()"
		: call->op == LEASE_RENEW ? "fence_renew()" : "fence_release()";

	PreventCommandIfReadOnly(name);
	PreventCommandIfParallelMode(name);
	if (call->op == LEASE_ACQUIRE)
		call->has_highest = fence_read_highest(call->resource, call->len, &call->highest);
	rel = open_leases();
	call->now = GetCurrentTimestamp();

	for (;;)
	{
		ScanKeyData key;
		HeapTuple	oldtup;
		void	   *state;
		Lease		row;
		Lease		next;

		resource_key(&key, call->resource, call->len);
		systable_inplace_update_begin(rel, RelationGetPrimaryKeyIndex(rel), true, NULL,
									  1, &key, &oldtup, &state);
		if (HeapTupleIsValid(oldtup))
		{
			HeapTuple	newtup;

			lease_from_tuple(rel, oldtup, &row);
			if (!lease_decide(call, &row, &next, &result))
			{
				systable_inplace_update_cancel(state);
				if (result == -2)
					report_tokens_used(call);
				break;
			}
			newtup = lease_tuple(rel, call->resource, call->len, &next);
			if (newtup->t_len != oldtup->t_len)
			{
				systable_inplace_update_cancel(state);
				elog(ERROR, "fence: the row of fence_leases for a resource changed length");
			}
			newtup->t_self = oldtup->t_self;
			systable_inplace_update_finish(state, newtup);
			lease_make_durable();
			break;
		}
		if (call->op != LEASE_ACQUIRE)
		{
			result = 0;			/* never leased: nothing to renew or release */
			break;
		}
		if (insert_first_lease(rel, call, &result))
		{
			lease_make_durable();
			break;
		}
		/* inserted by another backend meanwhile: decide against its row */
	}
	table_close(rel, RowExclusiveLock);
	return result;
}

/* ---------------------------------------------------------------------
 * SQL functions
 * ------------------------------------------------------------------ */

PG_FUNCTION_INFO_V1(fence_acquire);
Datum
fence_acquire(PG_FUNCTION_ARGS)
{
	LeaseCall	call = {LEASE_ACQUIRE};
	int64		result;

	call.resource = fence_resource_arg(fcinfo, 0, &call.len);
	call.holder = holder_arg(fcinfo, 1);
	call.ttl_ms = ttl_arg(fcinfo, 2);
	result = lease_call(&call);
	if (result < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(result);
}

PG_FUNCTION_INFO_V1(fence_renew);
Datum
fence_renew(PG_FUNCTION_ARGS)
{
	LeaseCall	call = {LEASE_RENEW};

	call.resource = fence_resource_arg(fcinfo, 0, &call.len);
	call.holder = holder_arg(fcinfo, 1);
	call.token = fence_token_arg(fcinfo, 2);
	call.ttl_ms = ttl_arg(fcinfo, 3);
	PG_RETURN_BOOL(lease_call(&call) == 1);
}

PG_FUNCTION_INFO_V1(fence_release);
Datum
fence_release(PG_FUNCTION_ARGS)
{
	LeaseCall	call = {LEASE_RELEASE};

	call.resource = fence_resource_arg(fcinfo, 0, &call.len);
	call.holder = holder_arg(fcinfo, 1);
	call.token = fence_token_arg(fcinfo, 2);
	PG_RETURN_BOOL(lease_call(&call) == 1);
}

/* ---------------------------------------------------------------------
 * The type fence_lease_holder
 * ------------------------------------------------------------------ */

PG_FUNCTION_INFO_V1(fence_lease_holder_in);
Datum
fence_lease_holder_in(PG_FUNCTION_ARGS)
{
	const char *s = PG_GETARG_CSTRING(0);
	FenceHolder *holder = palloc(sizeof(FenceHolder));

	holder_set(holder, s, strlen(s));
	PG_RETURN_POINTER(holder);
}

PG_FUNCTION_INFO_V1(fence_lease_holder_out);
Datum
fence_lease_holder_out(PG_FUNCTION_ARGS)
{
	FenceHolder *holder = (FenceHolder *) PG_GETARG_POINTER(0);

	if (holder->len < 1 || holder->len > FENCE_HOLDER_MAX)
		elog(ERROR, "fence: corrupt fence_lease_holder of length %d", holder->len);
	PG_RETURN_CSTRING(pnstrdup(holder->data, holder->len));
}

PG_FUNCTION_INFO_V1(fence_lease_holder_recv);
Datum
fence_lease_holder_recv(PG_FUNCTION_ARGS)
{
	StringInfo	buf = (StringInfo) PG_GETARG_POINTER(0);
	FenceHolder *holder = palloc(sizeof(FenceHolder));
	int			nbytes;
	char	   *s = pq_getmsgtext(buf, buf->len - buf->cursor, &nbytes);

	holder_set(holder, s, (size_t) nbytes);
	PG_RETURN_POINTER(holder);
}

PG_FUNCTION_INFO_V1(fence_lease_holder_send);
Datum
fence_lease_holder_send(PG_FUNCTION_ARGS)
{
	FenceHolder *holder = (FenceHolder *) PG_GETARG_POINTER(0);
	StringInfoData buf;

	pq_begintypsend(&buf);
	pq_sendtext(&buf, holder->data, holder->len);
	PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}

/*
 * Comparison, so that fence_leases can be sorted, grouped and joined by
 * holder: the bytes of the text (as the "C" collation orders text).
 */
PG_FUNCTION_INFO_V1(fence_lease_holder_cmp);
Datum
fence_lease_holder_cmp(PG_FUNCTION_ARGS)
{
	FenceHolder *a = (FenceHolder *) PG_GETARG_POINTER(0);
	FenceHolder *b = (FenceHolder *) PG_GETARG_POINTER(1);
	int			c = memcmp(a->data, b->data, Min(a->len, b->len));

	if (c == 0)
		c = a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
	PG_RETURN_INT32(c < 0 ? -1 : c > 0 ? 1 : 0);
}

PG_FUNCTION_INFO_V1(fence_lease_holder_eq);
Datum
fence_lease_holder_eq(PG_FUNCTION_ARGS)
{
	FenceHolder *a = (FenceHolder *) PG_GETARG_POINTER(0);
	FenceHolder *b = (FenceHolder *) PG_GETARG_POINTER(1);

	PG_RETURN_BOOL(same_holder(a, b));
}
