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
