/*
 * fence_trigger.c
 *
 * The guard of a protected table: the C trigger function fence_guard() and
 * fence_protect()/fence_unprotect(), which install and remove it.
 *
 * A protected table has two triggers, both calling fence_guard() with the
 * arguments (token_column, resource_or_prefix, key_column), '' for absent:
 *   fence_guard           BEFORE INSERT OR UPDATE OR DELETE, FOR EACH ROW
 *   fence_guard_truncate  BEFORE TRUNCATE, FOR EACH STATEMENT
 *
 * Rules (SPEC.md "Protected tables"): an INSERT presents the row's token
 * (NULL is 23T02). An UPDATE whose statement sets the token column (the
 * column is in TriggerData.tg_updatedcols, which holds every column of the
 * SET list, so "SET tok = tok" counts) presents the new token, under the old
 * and, if the key changed, the new row's resource. Any other UPDATE, every
 * DELETE, and every write to a table without a token column must run in a
 * transaction that holds a fence on the row's resource(s). INSERT ... ON
 * CONFLICT DO UPDATE fires the INSERT check and then the UPDATE check, as
 * the SPEC asks. TRUNCATE needs a fence on the table's resource, and is
 * refused for per-row resources.
 *
 * Concurrency: the trigger presents tokens through fence_accept(), whose
 * contract is in fence_tokens.c; it adds no lock of its own. It runs BEFORE
 * the row is written, so a stale write never reaches the table or WAL. A
 * user's BEFORE trigger that sorts after "fence_guard" and changes the
 * token column runs after the check: README, "Guarantees and limits".
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "parser/parse_coerce.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "fence_pg.h"

#define GUARD_TRIGGER "fence_guard"
#define TRUNCATE_TRIGGER "fence_guard_truncate"

/*
 * A trigger's arguments resolved against its table, cached in the trigger
 * function's fn_extra so that a row costs no catalog lookup.
 */
typedef struct GuardSpec
{
	Oid			trigger;		/* which trigger this describes */
	AttrNumber	tokenAttnum;	/* InvalidAttrNumber: no token column */
	Oid			tokenType;
	const char *tokenColumn;
	const char *resource;		/* the resource, or the prefix of a per-row one */
	size_t		resourceLen;
	AttrNumber	keyAttnum;		/* InvalidAttrNumber: one fence for the table */
	CoercionPathType keyPath;	/* how the key becomes text, as ::text does */
	FmgrInfo	keyFn;
	Oid			keyCollation;
} GuardSpec;

static void
prepare_key_cast(Oid keyType, CoercionPathType *path, Oid *castFunc)
{
	*path = find_coercion_pathway(TEXTOID, keyType, COERCION_EXPLICIT, castFunc);
	if (*path == COERCION_PATH_COERCEVIAIO)
	{
		bool		isVarlena;

		getTypeOutputInfo(keyType, castFunc, &isVarlena);
	}
}

static GuardSpec *
guard_spec(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	GuardSpec  *spec = fcinfo->flinfo->fn_extra;
	Trigger    *trigger = trigdata->tg_trigger;
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	MemoryContext old;
	Oid			castFunc = InvalidOid;

	if (spec && spec->trigger == trigger->tgoid)
		return spec;
	if (trigger->tgnargs != 3)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("fence_guard() expects 3 trigger arguments, got %d", trigger->tgnargs),
				 errhint("Install the guard with fence_protect().")));

	old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	spec = palloc0(sizeof(GuardSpec));
	spec->trigger = trigger->tgoid;
	spec->resource = pstrdup(trigger->tgargs[1]);
	spec->resourceLen = strlen(spec->resource);
	if (trigger->tgargs[0][0])
	{
		spec->tokenColumn = pstrdup(trigger->tgargs[0]);
		spec->tokenAttnum = SPI_fnumber(desc, spec->tokenColumn);
		if (spec->tokenAttnum <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("token column \"%s\" of the fence on \"%s\" does not exist",
							spec->tokenColumn, RelationGetRelationName(trigdata->tg_relation)),
					 errhint("Protect the table again with fence_protect().")));
		spec->tokenType = TupleDescAttr(desc, spec->tokenAttnum - 1)->atttypid;
	}
	if (trigger->tgargs[2][0])
	{
		Form_pg_attribute att;

		spec->keyAttnum = SPI_fnumber(desc, trigger->tgargs[2]);
		if (spec->keyAttnum <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("key column \"%s\" of the fence on \"%s\" does not exist",
							trigger->tgargs[2], RelationGetRelationName(trigdata->tg_relation)),
					 errhint("Protect the table again with fence_protect().")));
		att = TupleDescAttr(desc, spec->keyAttnum - 1);
		spec->keyCollation = att->attcollation;
		prepare_key_cast(att->atttypid, &spec->keyPath, &castFunc);
		if (OidIsValid(castFunc))
			fmgr_info_cxt(castFunc, &spec->keyFn, fcinfo->flinfo->fn_mcxt);
	}
	MemoryContextSwitchTo(old);
	fcinfo->flinfo->fn_extra = spec;
	return spec;
}

/* The row's resource: the fixed one, or the prefix followed by key::text. */
static char *
row_resource(GuardSpec *spec, Relation rel, HeapTuple row, size_t *len)
{
	Datum		key;
	bool		isnull;
	char	   *keyText;
	size_t		keyLen;
	char	   *resource;

	if (spec->keyAttnum == InvalidAttrNumber)
	{
		*len = spec->resourceLen;
		return (char *) spec->resource;
	}
	key = heap_getattr(row, spec->keyAttnum, RelationGetDescr(rel), &isnull);
	if (isnull)
		fence_report_invalid("key", FENCE_NULL, 0, 0);
	switch (spec->keyPath)
	{
		case COERCION_PATH_RELABELTYPE:
			keyText = TextDatumGetCString(key);
			break;
		case COERCION_PATH_FUNC:
			keyText = TextDatumGetCString(FunctionCall1Coll(&spec->keyFn,
															spec->keyCollation, key));
			break;
		default:
			keyText = OutputFunctionCall(&spec->keyFn, key);
			break;
	}
	keyLen = strlen(keyText);
	*len = spec->resourceLen + keyLen;
	fence_validate_resource(keyText, *len);
	resource = palloc(*len + 1);
	memcpy(resource, spec->resource, spec->resourceLen);
	memcpy(resource + spec->resourceLen, keyText, keyLen + 1);
	return resource;
}

static int64
row_token(GuardSpec *spec, Relation rel, HeapTuple row, const char *resource, size_t len)
{
	bool		isnull;
	Datum		d = heap_getattr(row, spec->tokenAttnum, RelationGetDescr(rel), &isnull);
	int64		token;

	if (isnull)
		fence_report_missing(rel, FENCE_MISSING_NULL_TOKEN, resource, len, spec->tokenColumn);
	switch (spec->tokenType)
	{
		case INT2OID:
			token = DatumGetInt16(d);
			break;
		case INT4OID:
			token = DatumGetInt32(d);
			break;
		default:
			token = DatumGetInt64(d);
			break;
	}
	if (fence_check_token(token) != FENCE_VALID)
		fence_report_invalid("token", FENCE_NEGATIVE, 0, token);
	return token;
}

static void
present_token(Relation rel, const char *resource, size_t len, int64 token)
{
	FenceOutcome outcome = fence_accept(resource, len, token);

	if (outcome.stale)
		fence_report_stale(rel, resource, len, token, outcome.highest);
}

static void
require_fenced(Relation rel, const char *resource, size_t len)
{
	if (fence_held_token(resource, len) < 0)
		fence_report_missing(rel, FENCE_MISSING_NOT_FENCED, resource, len, NULL);
}

static bool
same_resource(const char *a, size_t alen, const char *b, size_t blen)
{
	return alen == blen && memcmp(a, b, alen) == 0;
}

static HeapTuple
guard_row(GuardSpec *spec, TriggerData *trigdata)
{
	Relation	rel = trigdata->tg_relation;
	HeapTuple	oldRow = trigdata->tg_trigtuple;
	bool		hasToken = spec->tokenAttnum != InvalidAttrNumber;
	size_t		oldLen;
	char	   *oldResource = row_resource(spec, rel, oldRow, &oldLen);

	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
	{
		if (hasToken)
			present_token(rel, oldResource, oldLen,
						  row_token(spec, rel, oldRow, oldResource, oldLen));
		else
			require_fenced(rel, oldResource, oldLen);
		return oldRow;
	}
	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
	{
		require_fenced(rel, oldResource, oldLen);
		return oldRow;
	}

	/* UPDATE */
	{
		HeapTuple	newRow = trigdata->tg_newtuple;
		size_t		newLen;
		char	   *newResource = row_resource(spec, rel, newRow, &newLen);
		bool		keyChanged = !same_resource(oldResource, oldLen, newResource, newLen);
		bool		tokenSet = hasToken &&
			bms_is_member(spec->tokenAttnum - FirstLowInvalidHeapAttributeNumber,
						  trigdata->tg_updatedcols);

		if (tokenSet)
		{
			int64		token = row_token(spec, rel, newRow, newResource, newLen);

			present_token(rel, oldResource, oldLen, token);
			if (keyChanged)
				present_token(rel, newResource, newLen, token);
		}
		else
		{
			require_fenced(rel, oldResource, oldLen);
			if (keyChanged)
				require_fenced(rel, newResource, newLen);
		}
		return newRow;
	}
}

PG_FUNCTION_INFO_V1(fence_guard);
Datum
fence_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	GuardSpec  *spec;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		(TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event) ?
		 TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) :
		 !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event)))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("fence_guard() must be fired BEFORE, for each row or for TRUNCATE"),
				 errhint("Install the guard with fence_protect().")));

	spec = guard_spec(fcinfo, trigdata);
	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
	{
		if (spec->keyAttnum != InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot truncate \"%s\": it is fenced per row",
							RelationGetRelationName(trigdata->tg_relation)),
					 errdetail("Each row has its own resource, and TRUNCATE sees no rows."),
					 errhint("DELETE the rows in a transaction fenced on each of them.")));
		require_fenced(trigdata->tg_relation, spec->resource, spec->resourceLen);
		/* a statement trigger returns a NULL pointer, not an SQL NULL */
		return PointerGetDatum(NULL);
	}
	PG_RETURN_POINTER(guard_row(spec, trigdata));
}

/* ---------------------------------------------------------------------
 * fence_protect / fence_unprotect
 * ------------------------------------------------------------------ */

/* Open the table for DDL, checking that it can be protected by this user. */
static Relation
open_protectable(FunctionCallInfo fcinfo, const char *func)
{
	Oid			relid;
	Relation	rel;

	if (PG_ARGISNULL(0))
		fence_report_invalid("table", FENCE_NULL, 0, 0);
	relid = PG_GETARG_OID(0);
	/* the lock CREATE TRIGGER takes */
	rel = relation_open(relid, ShareRowExclusiveLock);
	if (rel->rd_rel->relkind != RELKIND_RELATION &&
		rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("%s: \"%s\" is not a table", func, RelationGetRelationName(rel))));
	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, RelationGetRelationName(rel));
	if (strcmp(RelationGetRelationName(rel), "fence_tokens") == 0 &&
		get_rel_namespace(relid) == get_func_namespace(fcinfo->flinfo->fn_oid))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("%s: the fence's own table cannot be protected", func)));
	return rel;
}

static AttrNumber
column_arg(Relation rel, const char *column)
{
	AttrNumber	attnum = get_attnum(RelationGetRelid(rel), column);

	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						column, RelationGetRelationName(rel))));
	return attnum;
}

static void
run_ddl(const char *sql)
{
	int			rc;

	if ((rc = SPI_connect()) != SPI_OK_CONNECT)
		elog(ERROR, "fence: SPI_connect failed: %s", SPI_result_code_string(rc));
	rc = SPI_execute(sql, false, 0);
	if (rc != SPI_OK_UTILITY)
		elog(ERROR, "fence: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
	SPI_finish();
}

/* DROP the guard's triggers that exist; no NOTICE for those that do not. */
static void
drop_guard(Relation rel, const char *qualified)
{
	static const char *const names[] = {GUARD_TRIGGER, TRUNCATE_TRIGGER};
	int			i;

	for (i = 0; i < lengthof(names); i++)
		if (OidIsValid(get_trigger_oid(RelationGetRelid(rel), names[i], true)))
			run_ddl(psprintf("DROP TRIGGER %s ON %s", names[i], qualified));
}

static char *
qualified_name(Relation rel)
{
	return quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
									  RelationGetRelationName(rel));
}

/*
 * fence_protect(table regclass, token_column name, resource text)
 * fence_protect(table regclass, token_column name, resource_prefix text,
 *               key_column name)
 */
PG_FUNCTION_INFO_V1(fence_protect);
Datum
fence_protect(PG_FUNCTION_ARGS)
{
	Relation	rel = open_protectable(fcinfo, "fence_protect");
	bool		perRow = PG_NARGS() == 4;
	const char *tokenColumn = PG_ARGISNULL(1) ? "" : NameStr(*PG_GETARG_NAME(1));
	const char *keyColumn = "";
	text	   *resourceText;
	char	   *resource;
	size_t		len;
	char	   *qualified = qualified_name(rel);
	char	   *function;
	char	   *args;

	if (PG_ARGISNULL(2))
		fence_report_invalid(perRow ? "resource prefix" : "resource", FENCE_NULL, 0, 0);
	resourceText = PG_GETARG_TEXT_PP(2);
	resource = text_to_cstring(resourceText);
	len = strlen(resource);
	if (perRow)
	{
		/* a prefix may be empty: the key alone is then the resource */
		if (len > FENCE_RESOURCE_MAX)
			fence_report_invalid("resource prefix", FENCE_TOO_LONG, len, 0);
		if (PG_ARGISNULL(3))
			fence_report_invalid("key column", FENCE_NULL, 0, 0);
		keyColumn = NameStr(*PG_GETARG_NAME(3));
	}
	else
		fence_validate_resource(resource, len);

	if (tokenColumn[0])
	{
		Oid			type = get_atttype(RelationGetRelid(rel), column_arg(rel, tokenColumn));

		if (type != INT8OID && type != INT4OID && type != INT2OID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("token column \"%s\" must be bigint, integer or smallint, not %s",
							tokenColumn, format_type_be(type))));
	}
	if (keyColumn[0])
	{
		Oid			type = get_atttype(RelationGetRelid(rel), column_arg(rel, keyColumn));
		CoercionPathType path;
		Oid			castFunc;

		prepare_key_cast(type, &path, &castFunc);
		if (path == COERCION_PATH_NONE || path == COERCION_PATH_ARRAYCOERCE)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("key column \"%s\" of type %s has no cast to text",
							keyColumn, format_type_be(type))));
	}

	/* the trigger function lives in this extension's schema */
	function = quote_qualified_identifier(get_namespace_name(
									  get_func_namespace(fcinfo->flinfo->fn_oid)), "fence_guard");
	args = psprintf("%s, %s, %s", quote_literal_cstr(tokenColumn),
					quote_literal_cstr(resource), quote_literal_cstr(keyColumn));

	/* protecting again replaces the guard */
	drop_guard(rel, qualified);
	run_ddl(psprintf("CREATE TRIGGER " GUARD_TRIGGER
					 " BEFORE INSERT OR UPDATE OR DELETE ON %s"
					 " FOR EACH ROW EXECUTE FUNCTION %s(%s)", qualified, function, args));
	run_ddl(psprintf("CREATE TRIGGER " TRUNCATE_TRIGGER
					 " BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)",
					 qualified, function, args));
	relation_close(rel, NoLock);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(fence_unprotect);
Datum
fence_unprotect(PG_FUNCTION_ARGS)
{
	Relation	rel = open_protectable(fcinfo, "fence_unprotect");

	drop_guard(rel, qualified_name(rel));
	relation_close(rel, NoLock);
	PG_RETURN_VOID();
}
