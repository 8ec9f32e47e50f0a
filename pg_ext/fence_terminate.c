/*
 * fence_terminate.c
 *
 * fence_terminate(resource text, token bigint) -> integer (since 1.5): end
 * the sessions whose open transactions hold the resource's fence below
 * token, so that the holder of token can advance. A stale holder paused
 * inside a statement (a COPY FROM STDIN waiting for data, a pipeline, a
 * result it stopped reading) sits in ClientRead or ClientWrite, where
 * neither statement_timeout nor idle_in_transaction_session_timeout ends
 * it, and its fence keeps every advance of the resource waiting.
 *
 * Who holds the fence, and at which token, is read from the lock manager
 * (fence_tokens.c, "Concurrency contract"), nothing else being shared:
 *   - a holder of the resource's lock in ShareLock mode is fenced at the
 *     committed highest (no advance can commit while it holds the lock);
 *   - a holder in ExclusiveLock mode is advancing it: it is spared when any
 *     version of the row, committed or in progress, is at or above token
 *     (its advance is newer than the caller's); a transaction that advanced
 *     the resource twice is judged by its first advance, the one written to
 *     the row before commit (fence_xact.c);
 *   - an escalated transaction (more than half of max_locks_per_transaction
 *     fences) holds fence_tokens' own lock in ShareLock or ExclusiveLock
 *     mode and keeps every advance of every resource out: it is ended on
 *     the same terms, whether or not it is fenced on this resource.
 * A token below the committed highest is refused (23T01): a stale holder
 * cannot end its successor's sessions. A token equal to it ends nothing
 * but an uncommitted advance below it.
 *
 * Permissions are pg_terminate_backend's, checked for every session before
 * any is signalled (no partial result): a superuser's session only by a
 * superuser; others by members of the session's role or of
 * pg_signal_backend. So the function grants no new right.
 *
 * A prepared transaction holding the fence has no session to end: it is
 * reported with a WARNING naming its transaction id, and its owner (or a
 * superuser) ends it with ROLLBACK PREPARED.
 *
 * Returns how many sessions were signalled; they end at their next
 * interrupt check (at once in ClientRead or ClientWrite) and their locks go
 * with them, so an advance waiting for them then proceeds. A session that
 * ended and started another transaction between the look at the lock table
 * and the signal is left alone (its virtual transaction id changed).
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

#include "fence_pg.h"

typedef struct FenceTarget
{
	int			pid;
	LocalTransactionId lxid;	/* its transaction at the look, or Invalid */
} FenceTarget;

static bool
same_locktag(const LOCKTAG *a, const LOCKTAG *b)
{
	return a->locktag_field1 == b->locktag_field1 &&
		a->locktag_field2 == b->locktag_field2 &&
		a->locktag_field3 == b->locktag_field3 &&
		a->locktag_field4 == b->locktag_field4 &&
		a->locktag_type == b->locktag_type &&
		a->locktag_lockmethodid == b->locktag_lockmethodid;
}

/*
 * The transaction id of the prepared transaction that holds lock l: the
 * lock on its own transaction id, held under the same virtual transaction
 * id by no process (pg_locks: locktype transactionid, pid NULL).
 */
static TransactionId
prepared_xid(const LockData *locks, const LockInstanceData *l)
{
	for (int i = 0; i < locks->nelements; i++)
	{
		const LockInstanceData *x = &locks->locks[i];

		if (x->pid == 0 && x->locktag.locktag_type == LOCKTAG_TRANSACTION &&
			x->backend == l->backend && x->lxid == l->lxid)
			return (TransactionId) x->locktag.locktag_field1;
	}
	return InvalidTransactionId;
}

/* pg_terminate_backend's rule (pg_signal_backend in signalfuncs.c). */
static void
check_may_signal(int pid)
{
	PGPROC	   *proc = BackendPidGetProc(pid);

	if (proc == NULL)
		return;					/* gone already */
	if (superuser_arg(proc->roleId) && !superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to end process %d", pid),
				 errdetail("Process %d is a superuser's, and its transaction holds the fence below the token: only a superuser may end it.",
						   pid)));
	if (!has_privs_of_role(GetUserId(), proc->roleId) &&
		!has_privs_of_role(GetUserId(), ROLE_PG_SIGNAL_BACKEND))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to end process %d", pid),
				 errdetail("Process %d belongs to another role, and its transaction holds the fence below the token.",
						   pid),
				 errhint("Call fence_terminate as a member of the process's role or of pg_signal_backend, as pg_terminate_backend requires.")));
}

PG_FUNCTION_INFO_V1(fence_terminate);
Datum
fence_terminate(PG_FUNCTION_ARGS)
{
	size_t		len;
	char	   *resource = fence_resource_arg(fcinfo, 0, &len);
	int64		token = fence_token_arg(fcinfo, 1);
	int64		highest;
	int64		newest;
	bool		spareAdvance;
	bool		shareBelow;
	bool		found;
	LOCKTAG		tag;
	Oid			tokens;
	LockData   *locks;
	FenceTarget *targets;
	int			ntargets = 0;
	int			ended = 0;

	fence_resource_locktag(&tag, resource, len);
	tokens = fence_extension_relid("fence_tokens");

	/*
	 * The lock table first, the row after: a session seen holding the
	 * shared lock is fenced at the highest committed when it was seen, at
	 * most the highest read now.
	 */
	locks = GetLockStatusData();
	found = fence_read_highest(resource, len, &highest);
	if (found && highest > token)
		fence_report_stale(NULL, resource, len, token, highest);
	/* a holder of the shared lock is fenced at the highest */
	shareBelow = !found || highest < token;
	spareAdvance = fence_read_uncommitted_highest(resource, len, &newest) && newest >= token;
	targets = palloc0(sizeof(FenceTarget) * (locks->nelements + 1));
	for (int i = 0; i < locks->nelements; i++)
	{
		LockInstanceData *l = &locks->locks[i];
		bool		exclusive = (l->holdMask & LOCKBIT_ON(ExclusiveLock)) != 0;
		bool		blocks;
		int			pid;
		bool		seen = false;

		if (l->holdMask == 0)
			continue;			/* waiting only */
		if (same_locktag(&l->locktag, &tag))
			blocks = true;
		else
			blocks = l->locktag.locktag_type == LOCKTAG_RELATION &&
				l->locktag.locktag_field1 == MyDatabaseId &&
				l->locktag.locktag_field2 == tokens &&
				(l->holdMask & (LOCKBIT_ON(ShareLock) | LOCKBIT_ON(ExclusiveLock))) != 0;
		if (!blocks || (exclusive ? spareAdvance : !shareBelow))
			continue;
		if (l->pid == 0)
		{
			/* a prepared transaction: nothing to end, its owner must */
			TransactionId xid = prepared_xid(locks, l);

			ereport(WARNING,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("prepared transaction %u holds the fence below token " INT64_FORMAT,
							xid, token),
					 errdetail("A prepared transaction has no session to end."),
					 errhint("Its owner or a superuser ends it: SELECT gid, owner FROM pg_prepared_xacts WHERE transaction = '%u'; then ROLLBACK PREPARED with that gid.",
							 xid)));
			continue;
		}
		pid = l->leaderPid != 0 ? l->leaderPid : l->pid;
		if (pid == MyProcPid)
			continue;
		for (int j = 0; j < ntargets && !seen; j++)
			seen = targets[j].pid == pid;
		if (seen)
			continue;
		targets[ntargets].pid = pid;
		/* a parallel worker's lock names the worker's transaction */
		targets[ntargets].lxid = pid == l->pid ? l->lxid : InvalidLocalTransactionId;
		ntargets++;
	}

	/* every permission first: either all are signalled or none */
	for (int i = 0; i < ntargets; i++)
		check_may_signal(targets[i].pid);
	for (int i = 0; i < ntargets; i++)
	{
		PGPROC	   *proc = BackendPidGetProc(targets[i].pid);

		if (proc == NULL ||
			(LocalTransactionIdIsValid(targets[i].lxid) && proc->lxid != targets[i].lxid))
			continue;			/* ended, or in another transaction now */
		if (DatumGetBool(DirectFunctionCall2(pg_terminate_backend,
											 Int32GetDatum(targets[i].pid),
											 Int64GetDatum(0))))
			ended++;
	}
	PG_RETURN_INT32(ended);
}
