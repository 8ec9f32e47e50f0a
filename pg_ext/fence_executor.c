/*
 * fence_executor.c
 *
 * Which kind of statement is running the executor that fires the guard.
 *
 * PostgreSQL 15 gives a BEFORE UPDATE row trigger fired by MERGE the union
 * of the SET columns of all of MERGE's UPDATE actions in tg_updatedcols, so
 * the guard cannot tell from TriggerData whether the action that matched
 * this row set the token column. An action that did not set it would be
 * "checked" with the row's old token, which the highest accepted may well
 * equal: a zombie holding 7 would write and become fenced at 10 (issue 10,
 * item 2). The guard therefore asks here whether the innermost running
 * executor is a MERGE, and if so treats an unchanged token as not set: the
 * transaction must then be fenced on the row's resource, as for any UPDATE
 * that leaves the token column out.
 *
 * We learn it from ExecutorRun_hook, which brackets the run of every
 * executor; BEFORE row triggers fire inside the run of the statement that
 * writes the row, so the innermost bracket is that statement. A statement
 * whose run began before this library was loaded (the library loads when a
 * fence function is first called in a backend, possibly by the guard of
 * that very statement) has no bracket: until the transaction that loaded us
 * ends, a guard fired outside every bracket cannot know its statement and
 * answers from the client's statement when that is a plain INSERT, UPDATE
 * or DELETE, and "maybe MERGE", the safe side, otherwise. Adding fence to
 * shared_preload_libraries or session_preload_libraries removes even that.
 *
 * The bracket is kept without PG_TRY, which would cost a sigsetjmp on every
 * statement of every backend that has loaded fence. An error that leaves an
 * executor run ends either the transaction (at_xact_end forgets everything)
 * or a subtransaction (a savepoint, an EXCEPTION block) that began inside
 * or outside the run: at_subxact_end puts back the bracket that was
 * innermost when that subtransaction began. PostgreSQL code that catches an
 * error goes on only after rolling back a subtransaction, or rethrows it.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/partition.h"
#include "executor/executor.h"
#include "parser/parsetree.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "tcop/pquery.h"
#include "utils/portal.h"

#include "fence_pg.h"

static ExecutorRun_hook_type previousExecutorRun = NULL;

/* the command of the innermost executor run we saw begin */
static CmdType innermost = CMD_UNKNOWN;
static int	runDepth = 0;

/* loaded while statements we never saw begin may be running */
static bool outerUnknown = false;

/*
 * The bracket innermost when each open subtransaction began, newest first,
 * in TopTransactionContext.
 */
typedef struct SubxactBracket
{
	SubTransactionId subid;
	CmdType		innermost;
	int			runDepth;
	struct SubxactBracket *next;
} SubxactBracket;

static SubxactBracket *subxactBrackets = NULL;

static void
fence_executor_run(QueryDesc *queryDesc, ScanDirection direction, uint64 count,
				   bool execute_once)
{
	CmdType		saved = innermost;

	innermost = queryDesc->operation;
	runDepth++;
	if (previousExecutorRun)
		previousExecutorRun(queryDesc, direction, count, execute_once);
	else
		standard_ExecutorRun(queryDesc, direction, count, execute_once);
	/* an error does not come back here: see the file header */
	innermost = saved;
	runDepth--;
}

static void
at_subxact_end(SubXactEvent event, SubTransactionId mySubid,
			   SubTransactionId parentSubid, void *arg)
{
	SubxactBracket *b;

	switch (event)
	{
		case SUBXACT_EVENT_START_SUB:
			b = MemoryContextAlloc(TopTransactionContext, sizeof(SubxactBracket));
			b->subid = mySubid;
			b->innermost = innermost;
			b->runDepth = runDepth;
			b->next = subxactBrackets;
			subxactBrackets = b;
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
		case SUBXACT_EVENT_ABORT_SUB:
			/* subtransactions end newest first */
			b = subxactBrackets;
			if (b == NULL || b->subid != mySubid)
			{
				/*
				 * It began before fence was loaded, so every run we saw
				 * began inside it: rolled back, none of them is running.
				 */
				if (event == SUBXACT_EVENT_ABORT_SUB)
				{
					innermost = CMD_UNKNOWN;
					runDepth = 0;
				}
				break;
			}
			if (event == SUBXACT_EVENT_ABORT_SUB)
			{
				innermost = b->innermost;
				runDepth = b->runDepth;
			}
			subxactBrackets = b->next;
			pfree(b);
			break;
		default:
			break;
	}
}

static void
at_xact_end(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		/* every statement of that transaction is over */
		outerUnknown = false;
		runDepth = 0;
		innermost = CMD_UNKNOWN;
		/* the memory goes with TopTransactionContext */
		subxactBrackets = NULL;
	}
}

void
fence_executor_init(void)
{
	previousExecutorRun = ExecutorRun_hook;
	ExecutorRun_hook = fence_executor_run;
	RegisterXactCallback(at_xact_end, NULL);
	RegisterSubXactCallback(at_subxact_end, NULL);
	outerUnknown = IsTransactionState();
}

/*
 * Might the row being guarded be written by a MERGE? True for a MERGE. For
 * a statement that began before fence was loaded, the client's own
 * statement (the active portal) tells when it is a plain INSERT, UPDATE or
 * DELETE, the common first statement of a pooled connection; anything else
 * (a function or procedure that may run MERGE inside) is treated as one.
 */
bool
fence_executor_maybe_merge(Relation rel)
{
	if (runDepth > 0)
		return innermost == CMD_MERGE;
	if (!outerUnknown)
		return false;
	if (ActivePortal != NULL && list_length(ActivePortal->stmts) == 1)
	{
		Node	   *stmt = linitial(ActivePortal->stmts);

		if (IsA(stmt, PlannedStmt))
		{
			PlannedStmt *plan = (PlannedStmt *) stmt;
			CmdType		cmd = plan->commandType;

			/*
			 * Only the statement's own target: a MERGE run by a function or
			 * a trigger that the statement calls writes another table (or
			 * the same one from inside, which stays the safe side's only
			 * gap; docs/postgresql-guarantees.md).
			 */
			if (cmd == CMD_INSERT || cmd == CMD_UPDATE || cmd == CMD_DELETE)
			{
				Oid			relid = RelationGetRelid(rel);
				List	   *ancestors = rel->rd_rel->relispartition ?
					get_partition_ancestors(relid) : NIL;
				ListCell   *lc;

				foreach(lc, plan->resultRelations)
				{
					RangeTblEntry *rte = rt_fetch(lfirst_int(lc), plan->rtable);

					if (rte->relid == relid || list_member_oid(ancestors, rte->relid))
						return false;
				}
			}
		}
	}
	return true;
}
