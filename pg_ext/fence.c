/*
 * fence.c
 *
 * The PostgreSQL extension's entry points: _PG_init, the SQL-callable
 * functions of SPEC.md. Errors are reported by fence_errors.c.
 *
 *   fence_check(resource text, token bigint) -> bigint   accept or 23T01
 *   fence_try(resource text, token bigint)   -> boolean  accept or false
 *   fence_current(resource text)             -> bigint   highest or NULL
 *   fence_reset(resource text)               -> void     owner or grantee
 *
 * fence_protect, fence_unprotect and the trigger are in fence_trigger.c; the
 * accept protocol and its locking contract in fence_tokens.c. None of the
 * functions is STRICT: a NULL argument must raise 22004, not return NULL.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"

#include "fence_pg.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Which copy of this library initialised this process. When
 * shared_preload_libraries loads one fence.so and CREATE EXTENSION another
 * (a package and a build both installed, an absolute path in the setting),
 * the second copy's code would run partly against the first copy's state
 * (the first loaded definition of a global name wins) and install its hooks
 * twice, which crashed the backend. Refuse the second copy instead, with a
 * message that says how to fix the setting (tests/pg_two_copies.py).
 */
static const char thisCopy[] = "fence";

void
_PG_init(void)
{
	void	  **loaded = find_rendezvous_variable("fence library");

	if (*loaded != NULL && *loaded != (void *) thisCopy)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("fence: another copy of fence's library is already loaded in this server process"),
				 errdetail("shared_preload_libraries (or an earlier LOAD) named a different fence.so file than the one the extension's functions use."),
				 errhint("Name the library the same way everywhere, e.g. shared_preload_libraries = 'fence', and restart the server.")));
	*loaded = (void *) thisCopy;
	fence_xact_init(fence_write_pending);
	fence_executor_init();
	fence_stats_init();
}

/* ---------------------------------------------------------------------
 * SQL functions
 * ------------------------------------------------------------------ */

PG_FUNCTION_INFO_V1(fence_check);
Datum
fence_check(PG_FUNCTION_ARGS)
{
	size_t		len;
	char	   *resource = fence_resource_arg(fcinfo, 0, &len);
	int64		token = fence_token_arg(fcinfo, 1);
	FenceOutcome outcome = fence_accept(resource, len, token);

	if (outcome.stale)
		fence_report_stale(NULL, resource, len, token, outcome.highest);
	PG_RETURN_INT64(token);
}

PG_FUNCTION_INFO_V1(fence_try);
Datum
fence_try(PG_FUNCTION_ARGS)
{
	size_t		len;
	char	   *resource = fence_resource_arg(fcinfo, 0, &len);
	int64		token = fence_token_arg(fcinfo, 1);

	PG_RETURN_BOOL(!fence_accept(resource, len, token).stale);
}

PG_FUNCTION_INFO_V1(fence_current);
Datum
fence_current(PG_FUNCTION_ARGS)
{
	size_t		len;
	char	   *resource = fence_resource_arg(fcinfo, 0, &len);
	int64		highest;

	if (!fence_read_highest(resource, len, &highest))
		PG_RETURN_NULL();
	PG_RETURN_INT64(highest);
}

PG_FUNCTION_INFO_V1(fence_reset);
Datum
fence_reset(PG_FUNCTION_ARGS)
{
	size_t		len;
	char	   *resource = fence_resource_arg(fcinfo, 0, &len);

	fence_forget(resource, len);
	PG_RETURN_VOID();
}
