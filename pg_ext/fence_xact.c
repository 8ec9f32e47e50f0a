/*
 * fence_xact.c
 *
 * What this backend's open transaction holds ("fenced on r at t", SPEC.md
 * Transaction scope): the shared held-fence log of core/fence_held.c, kept
 * in TopTransactionContext. Each entry is tagged with the subtransaction
 * that took it; a subtransaction that rolls back truncates the log back to
 * its first entry (entries of later subtransactions come after it, since
 * subtransaction ids only grow), matching the lock manager, which releases
 * the subtransaction's locks at the same moment. The transaction's end
 * forgets everything: the memory goes with TopTransactionContext.
 *
 * A second log of the same kind, "written", says which fence_tokens rows
 * this transaction has written and at which token. While such a write
 * stands (its subtransaction is not rolled back) the row is locked by this
 * transaction and its resource's lock is held exclusively, so a further
 * advance of the same resource need not read or write the row again: it is
 * recorded in the held log alone, and the row is brought up to the held
 * token once, just before commit or PREPARE (fence_tokens.c). Advancing one
 * resource N times in a transaction therefore writes at most N row versions
 * only if every advance is in a different subtransaction, and costs O(N);
 * before, every advance wrote a version and the next read walked them all.
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "../core/fence_held.h"
#include "fence_pg.h"

static FenceHeld held;
static FenceHeld written;
static bool heldReady = false;	/* held and written live in this transaction */

/*
 * What writes a pending advance into its row at pre-commit: fence_tokens.c's
 * fence_write_pending, handed over by _PG_init so that this file, below the
 * token table in the layers, never calls up into it.
 */
static FenceWritePending writePending;

/*
 * The held log's first arrays and the first copies of its resources' names,
 * reused by every transaction (the log of one that ended is forgotten,
 * never read again): a transaction with a few fences allocates nothing.
 * Larger arrays and later names come from TopTransactionContext and go
 * with it.
 */
#define FIRST_ENTRIES 16
#define FIRST_NAME_BYTES 1024
static FenceHeldEntry firstEntries[FIRST_ENTRIES];
static int	firstBuckets[FIRST_ENTRIES];
static char firstNames[FIRST_NAME_BYTES];

static void *
xact_alloc(size_t size)
{
	return MemoryContextAlloc(TopTransactionContext, size);
}

static void *
xact_realloc(void *ptr, size_t size)
{
	return repalloc(ptr, size);
}

static const FenceAllocator xactAllocator = {xact_alloc, xact_realloc, pfree};

/* synchronous_commit's values, weakest first (access/xact.h) */
static const char *const syncCommitNames[] = {"off", "local", "remote_write", "on", "remote_apply"};

static int
sync_commit_level(const char *name)
{
	for (int i = 0; i < lengthof(syncCommitNames); i++)
		if (name && pg_strcasecmp(name, syncCommitNames[i]) == 0)
			return i;
	return SYNCHRONOUS_COMMIT_ON;
}

/*
 * A transaction that raised a highest accepted token commits at least at
 * synchronous_commit = on, or at the reset value where that is stronger
 * (remote_apply), whatever the session set for itself: a commit
 * acknowledged before a synchronous standby confirmed it is lost at a
 * failover, and the stale holder's token is then accepted again. Not the
 * reset value alone: an application role can weaken that too (its
 * connection's startup options, ALTER ROLE on itself). Without
 * synchronous_standby_names (which only the server's configuration sets)
 * "on" is a local flush, which ForceSyncCommit (fence_tokens.c) forces in
 * any case. SET LOCAL, so the session's own value is back when the
 * transaction ends. A transaction that only accepted the current highest
 * again is left alone. The lease calls (fence_lease.c) wait for the
 * standbys inside the call at this level too.
 */
void
fence_commit_synchronously(void)
{
	int			required = SYNCHRONOUS_COMMIT_ON;
	int			configured = sync_commit_level(GetConfigOptionResetString("synchronous_commit"));

	if (configured > required)
		required = configured;
	if (synchronous_commit < required)
		(void) set_config_option("synchronous_commit", syncCommitNames[required], PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_LOCAL, true, ERROR, false);
}

static void
at_xact_end(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			if (heldReady && written.n_entries > 0)
			{
				fence_xact_flush();
				fence_commit_synchronously();
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			/* the memory itself goes with TopTransactionContext */
			heldReady = false;
			break;
		default:
			break;
	}
}

static void
at_subxact_end(SubXactEvent event, SubTransactionId mySubid,
			   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && heldReady)
	{
		fence_held_truncate(&held, fence_held_first_tagged(&held, mySubid));
		fence_held_truncate(&written, fence_held_first_tagged(&written, mySubid));
	}
}

void
fence_xact_init(FenceWritePending writer)
{
	writePending = writer;
	RegisterXactCallback(at_xact_end, NULL);
	RegisterSubXactCallback(at_subxact_end, NULL);
}

int64
fence_held_token(const char *resource, size_t len)
{
	return heldReady ? fence_held_get(&held, resource, len) : -1;
}

static void
xact_ready(void)
{
	if (!heldReady)
	{
		/* the last transaction's log, if it stayed in the first arrays */
		if (fence_held_restart(&held) != 0)
		{
			fence_held_init_buffers(&held, &xactAllocator, firstEntries, FIRST_ENTRIES,
									firstBuckets, FIRST_ENTRIES);
			fence_held_use_names(&held, firstNames, FIRST_NAME_BYTES);
		}
		fence_held_init(&written, &xactAllocator);
		heldReady = true;
	}
}

void
fence_hold(const char *resource, size_t len, int64 token)
{
	xact_ready();
	(void) fence_held_replace(&held, resource, len, token, GetCurrentSubTransactionId());
}

/* How many fences (entries) the transaction holds: the escalation measure. */
int
fence_held_count(void)
{
	return heldReady ? held.n_entries : 0;
}

/* The token this transaction last wrote into r's row, or -1. */
int64
fence_written_token(const char *resource, size_t len)
{
	return heldReady ? fence_held_get(&written, resource, len) : -1;
}

void
fence_note_written(const char *resource, size_t len, int64 token)
{
	xact_ready();
	(void) fence_held_replace(&written, resource, len, token, GetCurrentSubTransactionId());
}

/*
 * The highest this transaction has accepted for r beyond what its row
 * says (an advance not yet written, see the file header), or -1.
 */
int64
fence_pending_token(const char *resource, size_t len)
{
	int64		w = fence_written_token(resource, len);
	int64		h = fence_held_token(resource, len);

	return (w >= 0 && h > w) ? h : -1;
}

/* Before commit or PREPARE: write every advance recorded only in the log. */
void
fence_xact_flush(void)
{
	int			n = written.n_entries;

	for (int i = 0; i < n; i++)
	{
		const char *resource;
		size_t		len;
		int64		h;

		if (!fence_held_is_current(&written, i))
			continue;
		resource = written.entries[i].resource;
		len = written.entries[i].len;
		h = fence_held_token(resource, len);
		if (h > written.entries[i].token)
			writePending(resource, len, h);
	}
}

/*
 * fence_held() (since 1.1): the fences this transaction holds, one row per
 * resource with the token it holds it at; SQLite's fence_held table.
 */
PG_FUNCTION_INFO_V1(fence_held);
Datum
fence_held(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; heldReady && i < held.n_entries; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		if (!fence_held_is_current(&held, i))
			continue;
		values[0] = PointerGetDatum(cstring_to_text_with_len(held.entries[i].resource,
															 (int) held.entries[i].len));
		values[1] = Int64GetDatum(held.entries[i].token);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
