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
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "../core/fence_held.h"
#include "fence_pg.h"

static FenceHeld held;
static bool heldReady = false;	/* held lives in this transaction */

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

static void
at_xact_end(XactEvent event, void *arg)
{
	switch (event)
	{
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
		fence_held_truncate(&held, fence_held_first_tagged(&held, mySubid));
}

void
fence_xact_init(void)
{
	RegisterXactCallback(at_xact_end, NULL);
	RegisterSubXactCallback(at_subxact_end, NULL);
}

int64
fence_held_token(const char *resource, size_t len)
{
	return heldReady ? fence_held_get(&held, resource, len) : -1;
}

void
fence_hold(const char *resource, size_t len, int64 token)
{
	if (!heldReady)
	{
		fence_held_init(&held, &xactAllocator);
		heldReady = true;
	}
	(void) fence_held_set(&held, resource, len, token, GetCurrentSubTransactionId());
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
