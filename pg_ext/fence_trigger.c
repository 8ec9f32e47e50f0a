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
 * and so has every partition and inheritance child below it, present and
 * future (fence_protect, and the event trigger fence_guard_hierarchy: see
 * "the guard of a whole hierarchy" below).
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
 * refused for per-row resources. The row rule is core's fence_row_rule and
 * a row's resource core's fence_key_resource, shared with SQLite's guard:
 * this file reads the rows and says whether the statement set the token.
 *
 * Concurrency: the trigger presents tokens through fence_accept(), whose
 * contract is in fence_tokens.c; it adds no lock of its own. It runs BEFORE
 * the row is written, so a stale write never reaches the table or WAL. A
 * user's BEFORE trigger that sorts after "fence_guard" and changes the
 * token column runs after the check: README, "Guarantees and limits".
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/genam.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "parser/parse_coerce.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "catalog/pg_collation.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "fence_pg.h"

#define GUARD_TRIGGER "fence_guard"
#define TRUNCATE_TRIGGER "fence_guard_truncate"

/*
 * A trigger's arguments resolved against its table, so that a row costs no
 * catalog lookup.
 */
typedef struct GuardSpec
{
	Oid			trigger;		/* which trigger this describes */
	AttrNumber	tokenAttnum;	/* InvalidAttrNumber: no token column */
	Oid			tokenType;
	const char *tokenColumn;
	const char *resource;		/* the resource, or the prefix of a per-row one */
	size_t		resourceLen;
	uint64		resourceHash;	/* fence_resource_hash of a table's one resource */
	AttrNumber	keyAttnum;		/* InvalidAttrNumber: one fence for the table */
	int16		keyLen;			/* the key's type: typlen and typbyval */
	bool		keyByVal;
	CoercionPathType keyPath;	/* how the key becomes text, as ::text does */
	FmgrInfo	keyFn;
	Oid			keyCollation;
} GuardSpec;

/*
 * The guard specs outlive the statement. fn_extra alone would keep one for
 * the rows of one statement, and a one-row statement (the common case:
 * one holder writing at its token) would pay guard_spec's catalog lookups
 * and checks on every call. So each guard trigger's spec is kept per
 * backend, keyed by the trigger's OID, in a memory context of its own under
 * CacheMemoryContext, the way PostgreSQL keeps its own caches true: every
 * relcache invalidation of the entry's table marks it stale, and the next
 * call rebuilds it, running every check of guard_spec again. Whatever can
 * change a spec sends one: ALTER TABLE (a column's type, name, generation
 * expression), CREATE, DROP, RENAME, ENABLE and DISABLE TRIGGER,
 * fence_protect and fence_unprotect (they drop and create triggers), and a
 * reset of all caches (relid InvalidOid) marks every entry. PostgreSQL
 * processes them when the statement locks the table, before any row
 * reaches the guard, and at every CommandCounterIncrement of this
 * transaction's own DDL.
 *
 * An entry is rebuilt in place, never freed, so the pointer a running
 * statement keeps in fn_extra is always safe to test (valid and the same
 * trigger). "invalidated" catches an invalidation that arrives during the
 * build (a syscache miss opens a catalog and processes the queue): the spec
 * then serves the call that built it, as it would have before, and the next
 * call builds it again.
 */
typedef struct GuardCacheEntry
{
	Oid			trigger;		/* hash key */
	Oid			relid;
	bool		valid;
	bool		invalidated;
	MemoryContext cxt;
	GuardSpec	spec;
} GuardCacheEntry;

static HTAB *guardCache = NULL;
static GuardCacheEntry *lastGuard = NULL;	/* the entry used last, often next */

static void
guard_cache_invalidate(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	GuardCacheEntry *entry;

	hash_seq_init(&status, guardCache);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (relid == InvalidOid || entry->relid == relid)
		{
			entry->valid = false;
			entry->invalidated = true;
		}
	}
}

/*
 * A token column must be an integer type (SPEC, "No way around the fence").
 * Checked by fence_protect and again every time a guard is prepared, so
 * that ALTER COLUMN ... TYPE after protecting can never make the guard read
 * another type's bits as a token: it makes every write fail instead.
 */
static void
check_token_type(Relation rel, const char *column, Oid type, bool protecting)
{
	if (type != INT8OID && type != INT4OID && type != INT2OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("token column \"%s\" of \"%s\" must be bigint, integer or smallint, not %s",
						column, RelationGetRelationName(rel), format_type_be(type)),
				 protecting ? errhint("Fencing tokens are 64-bit integers: use a bigint column.") :
				 errhint("The column's type was changed after fence_protect(): change it back to "
						 "an integer type; until then every write of the table fails.")));
}

/*
 * A per-row resource must be a function of the key's value alone, and two
 * keys the table treats as equal must be one resource (SPEC, "No way
 * around the fence"). So the key's type must have a text form that no
 * session setting changes (TimeZone, DateStyle, IntervalStyle,
 * extra_float_digits, bytea_output, lc_monetary all change some types'
 * output) and an equality that is equality of that text form (numeric's
 * 1.0 = 1.00, citext, and nondeterministic collations are not). These
 * types qualify; domains over them too. Checked at protect time and at
 * every use, so that ALTER COLUMN ... TYPE cannot change it behind the guard.
 */
static void
check_key_type(Relation rel, const char *column, Oid type, Oid collation)
{
	Oid			base = getBaseType(type);
	bool		ok;

	switch (base)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case UUIDOID:
		case INETOID:
		case CIDROID:
			ok = true;
			break;
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
			ok = !OidIsValid(collation) || get_collation_isdeterministic(collation);
			if (!ok)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("key column \"%s\" of \"%s\" cannot name a fence: its collation is nondeterministic",
								column, RelationGetRelationName(rel)),
						 errdetail("Keys that the collation treats as equal would be fenced as different resources."),
						 errhint("Use a deterministic collation for the key column, e.g. an ordinary "
								 "column the application fills with lower(key).")));
			break;
		default:
			ok = false;
			break;
	}
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("key column \"%s\" of \"%s\" cannot name a fence: type %s",
						column, RelationGetRelationName(rel), format_type_be(type)),
				 errdetail("A per-row resource must not depend on session settings or on an equality "
						   "other than that of its text: the key must be smallint, integer, bigint, "
						   "text, varchar, char, uuid, inet or cidr."),
				 errhint("Protect with a key of one of these types, e.g. an ordinary column the "
						 "application fills with the key's text.")));
}

/*
 * A generated column is computed after every BEFORE trigger: the guard
 * would judge the row by the old value (an UPDATE of the column it is
 * generated from moved the token or key unchecked) or see NULL. Refused as
 * token or key, at protect time and at every use.
 */
static void
check_not_generated(Relation rel, Form_pg_attribute att)
{
	if (att->attgenerated != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("column \"%s\" of \"%s\" is generated and cannot be a fence's token or key",
						NameStr(att->attname), RelationGetRelationName(rel)),
				 errdetail("Generated columns are computed after BEFORE triggers, so the guard "
						   "would judge the row by their old values."),
				 errhint("Use an ordinary column that the application writes.")));
}

/*
 * A token column that fills itself in (a DEFAULT, serial's nextval, an
 * identity) would turn an INSERT that leaves the token out into one that
 * presents a value the lock service never granted: accepted, it raises the
 * highest and locks the real holder out, where SPEC.md wants "fencing token
 * required". A BEFORE trigger sees the finished row and cannot tell a
 * written token from a default, so the column must have none: refused by
 * fence_protect, by the event trigger when DDL adds one to a guarded table
 * (or creates or attaches a partition or child that has one), and when the
 * guard's arguments are resolved, which makes every write fail while one
 * exists (the event trigger disabled by a superuser). Inserting through a
 * partitioned table takes the default of the table named in the INSERT, so
 * a partition's guard also looks at its ancestors. Nothing of this runs per
 * row.
 */
static void
check_no_default(Relation rel, Form_pg_attribute att, bool protecting)
{
	if (!att->atthasdef && att->attidentity == '\0')
		return;
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("token column \"%s\" of \"%s\" %s",
					NameStr(att->attname), RelationGetRelationName(rel),
					att->attidentity ? "is an identity column" : "has a default"),
			 errdetail("An INSERT that leaves the token out would present the column's own "
					   "value as its fencing token, instead of failing with \"fencing token "
					   "required\"."),
			 protecting ?
			 errhint("Drop it (ALTER TABLE %s ALTER COLUMN %s DROP %s) and write the token "
					 "the lock service granted.",
					 quote_identifier(RelationGetRelationName(rel)),
					 quote_identifier(NameStr(att->attname)),
					 att->attidentity ? "IDENTITY" : "DEFAULT") :
			 errhint("It was added after fence_protect(): drop it (ALTER TABLE %s ALTER COLUMN "
					 "%s DROP %s); until then every write of the table fails.",
					 quote_identifier(RelationGetRelationName(rel)),
					 quote_identifier(NameStr(att->attname)),
					 att->attidentity ? "IDENTITY" : "DEFAULT")));
}

/* check_no_default for the column called column of relid, if it has one. */
static void
check_no_default_named(Oid relid, const char *column, bool protecting)
{
	Relation	rel = relation_open(relid, NoLock);
	AttrNumber	attnum = get_attnum(relid, column);

	if (attnum > 0)
		check_no_default(rel, TupleDescAttr(RelationGetDescr(rel), attnum - 1), protecting);
	relation_close(rel, NoLock);
}

/*
 * BEFORE ROW triggers fire in the order of their names. One that fires
 * after the guard could change the key or the token after the check (a
 * normalising trigger writing lower(NEW.id), or one planted by a role
 * granted TRIGGER): while one exists, the guard refuses every write.
 */
static void
check_no_later_before_trigger(Relation rel, const Trigger *guard)
{
	TriggerDesc *trigdesc = rel->trigdesc;

	if (trigdesc == NULL || !TRIGGER_FOR_ROW(guard->tgtype))
		return;
	for (int i = 0; i < trigdesc->numtriggers; i++)
	{
		const Trigger *t = &trigdesc->triggers[i];

		if (t->tgoid == guard->tgoid || t->tgenabled == TRIGGER_DISABLED ||
			!TRIGGER_FOR_ROW(t->tgtype) || !TRIGGER_FOR_BEFORE(t->tgtype) ||
			!(TRIGGER_FOR_INSERT(t->tgtype) || TRIGGER_FOR_UPDATE(t->tgtype)))
			continue;
		if (strcmp(t->tgname, guard->tgname) > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("trigger \"%s\" on \"%s\" fires after the fence's guard",
							t->tgname, RelationGetRelationName(rel)),
					 errdetail("BEFORE ROW triggers fire in name order; one that fires after "
							   "\"%s\" could change the key or the token after the check.",
							   guard->tgname),
					 errhint("Rename the trigger so that its name sorts before \"%s\" "
							 "(ALTER TRIGGER ... RENAME TO), or drop it.", guard->tgname)));
	}
}

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

/* Resolve the trigger's arguments into spec, allocating in cxt. */
static void
build_guard_spec(GuardSpec *spec, MemoryContext cxt, TriggerData *trigdata)
{
	Trigger    *trigger = trigdata->tg_trigger;
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	MemoryContext old;
	Oid			castFunc = InvalidOid;

	if (trigger->tgnargs != 3)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("fence_guard() expects 3 trigger arguments, got %d", trigger->tgnargs),
				 errhint("Install the guard with fence_protect().")));

	/*
	 * The arguments are checked as fence_protect checks them: anyone who can
	 * create a trigger on a table of their own can call fence_guard with
	 * arguments of their choosing, and nothing may reach fence_tokens that
	 * fence_check would refuse.
	 */
	if (trigger->tgargs[2][0])
	{
		if (strlen(trigger->tgargs[1]) > FENCE_RESOURCE_MAX)
			fence_report_invalid("resource prefix", FENCE_TOO_LONG, strlen(trigger->tgargs[1]), 0);
	}
	else
		fence_validate_resource(trigger->tgargs[1], strlen(trigger->tgargs[1]));

	check_no_later_before_trigger(trigdata->tg_relation, trigger);

	old = MemoryContextSwitchTo(cxt);
	memset(spec, 0, sizeof(GuardSpec));
	spec->trigger = trigger->tgoid;
	spec->resource = pstrdup(trigger->tgargs[1]);
	spec->resourceLen = strlen(spec->resource);
	spec->resourceHash = fence_resource_hash(spec->resource, spec->resourceLen);
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
		check_token_type(trigdata->tg_relation, spec->tokenColumn, spec->tokenType, false);
		check_not_generated(trigdata->tg_relation, TupleDescAttr(desc, spec->tokenAttnum - 1));
		check_no_default(trigdata->tg_relation, TupleDescAttr(desc, spec->tokenAttnum - 1), false);
		if (trigdata->tg_relation->rd_rel->relispartition)
		{
			ListCell   *lc;

			foreach(lc, get_partition_ancestors(RelationGetRelid(trigdata->tg_relation)))
				check_no_default_named(lfirst_oid(lc), spec->tokenColumn, false);
		}
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
		check_key_type(trigdata->tg_relation, trigger->tgargs[2], att->atttypid,
					   att->attcollation);
		check_not_generated(trigdata->tg_relation, att);
		spec->keyLen = att->attlen;
		spec->keyByVal = att->attbyval;
		spec->keyCollation = att->attcollation;
		prepare_key_cast(att->atttypid, &spec->keyPath, &castFunc);
		if (OidIsValid(castFunc))
			fmgr_info_cxt(castFunc, &spec->keyFn, cxt);
	}
	MemoryContextSwitchTo(old);
}

static GuardSpec *
guard_spec(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	GuardCacheEntry *entry = fcinfo->flinfo->fn_extra;
	Oid			tgoid = trigdata->tg_trigger->tgoid;
	bool		found;

	if (entry && entry->valid && entry->trigger == tgoid)
		return &entry->spec;
	/* a new statement (fn_extra starts NULL) on the table guarded last */
	entry = lastGuard;
	if (entry && entry->valid && entry->trigger == tgoid)
	{
		fcinfo->flinfo->fn_extra = entry;
		return &entry->spec;
	}
	if (guardCache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(GuardCacheEntry);
		guardCache = hash_create("fence guard specs", 16, &ctl, HASH_ELEM | HASH_BLOBS);
		CacheRegisterRelcacheCallback(guard_cache_invalidate, (Datum) 0);
	}
	entry = hash_search(guardCache, &tgoid, HASH_ENTER, &found);
	if (!found)
	{
		entry->valid = false;
		entry->relid = InvalidOid;
		entry->cxt = AllocSetContextCreate(CacheMemoryContext, "fence guard spec",
										   ALLOCSET_SMALL_SIZES);
	}
	if (!entry->valid)
	{
		MemoryContextReset(entry->cxt);
		entry->relid = RelationGetRelid(trigdata->tg_relation);
		entry->invalidated = false;
		/* an error leaves it invalid, to be built again */
		build_guard_spec(&entry->spec, entry->cxt, trigdata);
		entry->valid = !entry->invalidated;
	}
	lastGuard = entry;
	fcinfo->flinfo->fn_extra = entry;
	return &entry->spec;
}

/*
 * A column of a row the trigger was given. heap_getattr would also run
 * heap_datum_check() on the new row, which heap_form_tuple marks as a
 * versioned datum: a check for composite values that can outlive a change
 * of their type. This row was formed by the running statement from rel's
 * current descriptor, the one the guard's spec was resolved against (and
 * rebuilt after any change of it), so attnum is valid for it; a column added
 * since an old row was stored reads its default, as in heap_getattr. One
 * such check fewer per row read (about 70 instructions).
 */
static inline Datum
row_attr(HeapTuple row, AttrNumber attnum, Relation rel, bool *isnull)
{
	if (attnum > (int) HeapTupleHeaderGetNatts(row->t_data))
		return getmissingattr(RelationGetDescr(rel), attnum, isnull);
	return fastgetattr(row, attnum, RelationGetDescr(rel), isnull);
}

/*
 * The row's resource: the fixed one, or the prefix followed by key::text
 * (fence_key_resource).
 */
static char *
row_resource(GuardSpec *spec, Relation rel, HeapTuple row, size_t *len)
{
	Datum		key;
	bool		isnull;
	char	   *keyText;
	size_t		keyLen;
	char	   *resource;
	FenceProblem problem;

	if (spec->keyAttnum == InvalidAttrNumber)
	{
		*len = spec->resourceLen;
		return (char *) spec->resource;
	}
	key = row_attr(row, spec->keyAttnum, rel, &isnull);
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
	resource = palloc(Min(spec->resourceLen + keyLen, FENCE_RESOURCE_MAX) + 1);
	problem = fence_key_resource(resource, spec->resource, spec->resourceLen,
								 keyText, keyLen, len);
	if (problem != FENCE_VALID)
		fence_report_invalid("resource", problem, *len, 0);
	return resource;
}

static int64
row_token(GuardSpec *spec, Relation rel, HeapTuple row, const char *resource, size_t len)
{
	bool		isnull;
	Datum		d = row_attr(row, spec->tokenAttnum, rel, &isnull);
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
		case INT8OID:
			token = DatumGetInt64(d);
			break;
		default:
			/* guard_spec checked the type: cannot happen */
			elog(ERROR, "fence: token column of type %u", spec->tokenType);
	}
	if (fence_check_token(token) != FENCE_VALID)
		fence_report_invalid("token", FENCE_NEGATIVE, 0, token);
	return token;
}

/* hash: the resource's fence_resource_hash, or NULL to compute it if needed */
static void
present_token(Relation rel, const char *resource, size_t len, const uint64 *hash,
			  int64 token)
{
	FenceOutcome outcome = fence_accept_hashed(resource, len, hash, token);

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

/*
 * Do two rows have the same key, bit for bit? Then they name the same
 * resource (the key's text is a function of its value alone: check_key_type)
 * and an UPDATE that kept the key need not build the resource twice.
 */
static bool
same_key(GuardSpec *spec, Relation rel, HeapTuple a, HeapTuple b)
{
	bool		aNull;
	bool		bNull;
	Datum		ak = row_attr(a, spec->keyAttnum, rel, &aNull);
	Datum		bk = row_attr(b, spec->keyAttnum, rel, &bNull);

	return !aNull && !bNull && datumIsEqual(ak, bk, spec->keyByVal, spec->keyLen);
}

/* One row image's check of the row rule (fence_row_rule) under its resource. */
static inline void
check_row(Relation rel, FenceRowCheck check, const char *resource, size_t len,
		  const uint64 *hash, int64 token)
{
	if (check == FENCE_ROW_PRESENT)
		present_token(rel, resource, len, hash, token);
	else if (check == FENCE_ROW_FENCED)
		require_fenced(rel, resource, len);
}

static HeapTuple
guard_row(GuardSpec *spec, TriggerData *trigdata)
{
	Relation	rel = trigdata->tg_relation;
	/* an INSERT's new row, or an UPDATE's or DELETE's old row */
	HeapTuple	row = trigdata->tg_trigtuple;
	bool		hasToken = spec->tokenAttnum != InvalidAttrNumber;
	bool		perRow = spec->keyAttnum != InvalidAttrNumber;
	/* the table's one resource has its lock hash computed once */
	const uint64 *hash = perRow ? NULL : &spec->resourceHash;
	size_t		len;
	char	   *resource = row_resource(spec, rel, row, &len);
	FenceRowRule rule;

	if (!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		bool		insert = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event);
		FenceRowCheck check;

		rule = fence_row_rule(insert ? FENCE_ROW_INSERT : FENCE_ROW_DELETE, hasToken, false);
		check = insert ? rule.new_row : rule.old_row;
		check_row(rel, check, resource, len, hash, check == FENCE_ROW_PRESENT ?
				  row_token(spec, rel, row, resource, len) : 0);
		return row;
	}

	/* UPDATE */
	{
		HeapTuple	newRow = trigdata->tg_newtuple;
		size_t		newLen = len;
		char	   *newResource = resource;
		int64		token = 0;
		bool		tokenSet = hasToken &&
			bms_is_member(spec->tokenAttnum - FirstLowInvalidHeapAttributeNumber,
						  trigdata->tg_updatedcols);

		if (perRow && !same_key(spec, rel, row, newRow))
			newResource = row_resource(spec, rel, newRow, &newLen);

		/*
		 * MERGE reports the SET columns of all its UPDATE actions, not of the
		 * one that matched (fence_executor.c): there, a token column that
		 * kept its value may not have been set at all, and checking the old
		 * row's token would let a zombie write under the current highest. It
		 * counts as not set, so the transaction must be fenced.
		 */
		if (tokenSet && fence_executor_maybe_merge(rel))
		{
			bool		oldNull;
			bool		newNull;
			Datum		oldTok = row_attr(row, spec->tokenAttnum, rel, &oldNull);
			Datum		newTok = row_attr(newRow, spec->tokenAttnum, rel, &newNull);

			if (!oldNull && !newNull &&
				datumIsEqual(oldTok, newTok, true, get_typlen(spec->tokenType)))
				tokenSet = false;
		}

		rule = fence_row_rule(FENCE_ROW_UPDATE, hasToken, tokenSet);
		if (rule.new_row == FENCE_ROW_PRESENT)
			token = row_token(spec, rel, newRow, newResource, newLen);
		check_row(rel, rule.old_row, resource, len, hash, token);
		/* the new row under the old row's resource: the same check */
		if (newResource != resource && !same_resource(resource, len, newResource, newLen))
			check_row(rel, rule.new_row, newResource, newLen, hash, token);
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
 * fence_protect / fence_unprotect, and the guard of a whole hierarchy
 *
 * A guard covers the table and every partition and inheritance child below
 * it, present and future, with the same trigger arguments everywhere:
 *
 *   - PostgreSQL clones a partitioned table's row triggers to its
 *     partitions (those attached or created later too), but not its TRUNCATE
 *     trigger, and copies nothing to inheritance children. fence_protect
 *     therefore creates, on every descendant (find_all_inheritors), whichever
 *     of the two triggers it lacks.
 *   - The event trigger fence_guard_hierarchy (1.3; ddl_command_end of
 *     CREATE TABLE, CREATE FOREIGN TABLE and ALTER TABLE; ENABLE ALWAYS) does
 *     the same for the tables each command created or altered: CREATE TABLE
 *     .. PARTITION OF / INHERITS, ATTACH PARTITION, ALTER TABLE .. INHERIT.
 *   - DETACH PARTITION drops the partition's cloned row trigger; the event
 *     trigger puts it back from the partition's TRUNCATE trigger, which
 *     still holds the arguments. NO INHERIT keeps both triggers. Leaving a
 *     hierarchy never unguards a table; fence_unprotect does that.
 *   - A descendant with a different guard of its own, two parents with
 *     different guards, or a foreign table below a guarded table (it cannot
 *     carry a TRUNCATE trigger, and its rows live elsewhere) is an error:
 *     the command is refused and nothing of it stays.
 *   - fence_protect and fence_unprotect refuse a table that inherits its
 *     guard from above: the guard is managed at the top of the hierarchy.
 *
 * Locks: fence_protect and fence_unprotect take ShareRowExclusiveLock (what
 * CREATE TRIGGER takes) on the table and every descendant. The event trigger
 * reads the hierarchy under AccessShareLock, so that ATTACH PARTITION keeps
 * its light lock on the other partitions, and CREATE TRIGGER takes its own
 * lock only on a table that needs a trigger.
 * ------------------------------------------------------------------ */

/* A guard's trigger arguments, copied out of the relcache. */
typedef struct GuardArgs
{
	Oid			relid;			/* the table they were read from */
	int			nargs;
	char	  **args;
} GuardArgs;

/*
 * fence_guard() of the extension whose schema is nsp. Looked up in the
 * catalog cache, not by name: a name look-up checks USAGE on the schema,
 * and the event trigger runs for every role's CREATE TABLE, also for roles
 * that may not use fence's schema.
 */
static Oid
guard_function(Oid nsp)
{
	Oid			fn = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
									 CStringGetDatum("fence_guard"),
									 PointerGetDatum(buildoidvector(NULL, 0)),
									 ObjectIdGetDatum(nsp));

	if (!OidIsValid(fn))
		elog(ERROR, "fence: function fence_guard() is missing from schema \"%s\"",
			 get_namespace_name(nsp));
	return fn;
}

/* The trigger called name on rel, whatever its function; NULL if none. */
static Trigger *
trigger_named(Relation rel, const char *name)
{
	TriggerDesc *trigdesc = rel->trigdesc;

	if (trigdesc == NULL)
		return NULL;
	for (int i = 0; i < trigdesc->numtriggers; i++)
		if (strcmp(trigdesc->triggers[i].tgname, name) == 0)
			return &trigdesc->triggers[i];
	return NULL;
}

static void
copy_args(Relation rel, const Trigger *t, GuardArgs *out)
{
	out->relid = RelationGetRelid(rel);
	out->nargs = t->tgnargs;
	out->args = palloc0(sizeof(char *) * (t->tgnargs + 1));
	for (int i = 0; i < t->tgnargs; i++)
		out->args[i] = pstrdup(t->tgargs[i]);
}

/*
 * The guard relid carries itself: the arguments of its row trigger, or, when
 * DETACH took the cloned row trigger away, of its TRUNCATE trigger. The
 * caller holds a lock on relid.
 */
static bool
own_guard(Oid relid, Oid fn, GuardArgs *out)
{
	static const char *const names[] = {GUARD_TRIGGER, TRUNCATE_TRIGGER};
	Relation	rel = relation_open(relid, NoLock);
	bool		found = false;

	for (int i = 0; i < lengthof(names) && !found; i++)
	{
		Trigger    *t = trigger_named(rel, names[i]);

		if (t && t->tgfoid == fn)
		{
			copy_args(rel, t, out);
			found = true;
		}
	}
	relation_close(rel, NoLock);
	return found;
}

static bool
same_args(const GuardArgs *a, const GuardArgs *b)
{
	if (a->nargs != b->nargs)
		return false;
	for (int i = 0; i < a->nargs; i++)
		if (strcmp(a->args[i], b->args[i]) != 0)
			return false;
	return true;
}

/* The direct parents of relid, partition parent or inheritance parents. */
static List *
parents_of(Oid relid)
{
	Relation	inherits = table_open(InheritsRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	List	   *parents = NIL;

	ScanKeyInit(&key, Anum_pg_inherits_inhrelid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relid));
	scan = systable_beginscan(inherits, InheritsRelidSeqnoIndexId, true, NULL, 1, &key);
	while ((tuple = systable_getnext(scan)) != NULL)
		parents = lappend_oid(parents, ((Form_pg_inherits) GETSTRUCT(tuple))->inhparent);
	systable_endscan(scan);
	table_close(inherits, AccessShareLock);
	return parents;
}

/*
 * The guard relid inherits: that of the nearest guarded table on each path
 * upwards. Two different ones (multiple inheritance) are an error.
 */
static bool
inherited_guard(Oid relid, Oid fn, GuardArgs *out)
{
	List	   *todo = parents_of(relid);
	List	   *seen = NIL;
	bool		found = false;

	while (todo != NIL)
	{
		Oid			parent = linitial_oid(todo);
		GuardArgs	g;

		todo = list_delete_first(todo);
		if (list_member_oid(seen, parent))
			continue;
		seen = lappend_oid(seen, parent);
		LockRelationOid(parent, AccessShareLock);
		if (!OidIsValid(get_rel_relkind(parent)))
			continue;			/* dropped meanwhile */
		if (!own_guard(parent, fn, &g))
		{
			todo = list_concat(todo, parents_of(parent));
			continue;
		}
		if (found && !same_args(out, &g))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("table \"%s\" would inherit two different fences, from \"%s\" and \"%s\"",
							get_rel_name(relid), get_rel_name(out->relid),
							get_rel_name(g.relid)),
					 errdetail("A table below a protected table is guarded with the fence of the table above it."),
					 errhint("Give the parents one fence, or inherit from only one of them.")));
		*out = g;
		found = true;
	}
	return found;
}

static char *
qualified_name_of(Oid relid)
{
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									  get_rel_name(relid));
}

/*
 * True while fence itself creates or drops guard triggers: the event
 * trigger refuses a CREATE TRIGGER of a guard's name by anyone else.
 */
static bool fenceOwnDdl = false;

static void
run_ddl(const char *sql)
{
	volatile int rc;

	if ((rc = SPI_connect()) != SPI_OK_CONNECT)
		elog(ERROR, "fence: SPI_connect failed: %s", SPI_result_code_string(rc));
	fenceOwnDdl = true;
	PG_TRY();
	{
		rc = SPI_execute(sql, false, 0);
	}
	PG_FINALLY();
	{
		fenceOwnDdl = false;
	}
	PG_END_TRY();
	if (rc != SPI_OK_UTILITY)
		elog(ERROR, "fence: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
	SPI_finish();
	/* the next catalog look-up must see what this command did */
	CommandCounterIncrement();
}

/* DROP the guard's triggers that exist; no NOTICE for those that do not. */
static void
drop_guard(Oid relid)
{
	static const char *const names[] = {GUARD_TRIGGER, TRUNCATE_TRIGGER};

	for (int i = 0; i < lengthof(names); i++)
		if (OidIsValid(get_trigger_oid(relid, names[i], true)))
			run_ddl(psprintf("DROP TRIGGER %s ON %s", names[i], qualified_name_of(relid)));
}

/* What PostgreSQL cannot guard below a protected table. */
static void
check_guardable(Oid relid, Oid top)
{
	char		kind = get_rel_relkind(relid);

	if (kind == RELKIND_FOREIGN_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("foreign table \"%s\" cannot be part of the protected table \"%s\"",
						get_rel_name(relid), get_rel_name(top)),
				 errdetail("Its rows are written on another server, and a foreign table cannot have a TRUNCATE trigger."),
				 errhint("Keep foreign tables out of protected hierarchies, or unprotect \"%s\" first.",
						 get_rel_name(top))));
	if (kind != RELKIND_RELATION && kind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" below the protected table \"%s\" is not a table",
						get_rel_name(relid), get_rel_name(top))));
}

/*
 * Give relid the guard g (read from g->relid): create whichever of the two
 * triggers it lacks. A trigger of the same name with another function or
 * other arguments is an error. The row trigger is created before the
 * TRUNCATE one, and on a partitioned table PostgreSQL clones it to the
 * partitions, which the caller visits afterwards (top-down order).
 */
static void
install_guard(Oid relid, Oid fn, const char *function, const GuardArgs *g)
{
	static const char *const names[] = {GUARD_TRIGGER, TRUNCATE_TRIGGER};
	static const char *const events[] = {
		"BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW",
		"BEFORE TRUNCATE ON %s FOR EACH STATEMENT"};
	StringInfoData args;

	check_guardable(relid, g->relid);
	/* a table below a guarded one, or one that DDL just altered */
	if (g->nargs > 0 && g->args[0][0])
		check_no_default_named(relid, g->args[0], true);
	initStringInfo(&args);
	for (int i = 0; i < g->nargs; i++)
		appendStringInfo(&args, "%s%s", i ? ", " : "", quote_literal_cstr(g->args[i]));

	for (int i = 0; i < lengthof(names); i++)
	{
		Relation	rel = relation_open(relid, NoLock);
		Trigger    *t = trigger_named(rel, names[i]);
		bool		missing = (t == NULL);

		if (t)
		{
			GuardArgs	mine;

			copy_args(rel, t, &mine);
			if (t->tgfoid != fn || !same_args(&mine, g))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("table \"%s\" has a trigger \"%s\" of its own, unlike the protected table \"%s\" above it",
								RelationGetRelationName(rel), names[i], get_rel_name(g->relid)),
						 errdetail("Every table below a protected table is guarded with the same fence."),
						 errhint("Unprotect \"%s\" first (fence_unprotect, or DROP TRIGGER %s ON %s once it is below a protected table), then retry.",
								 RelationGetRelationName(rel), names[i],
								 qualified_name_of(relid))));
		}
		relation_close(rel, NoLock);
		if (missing)
			run_ddl(psprintf("CREATE TRIGGER %s %s EXECUTE FUNCTION %s(%s)", names[i],
							 psprintf(events[i], qualified_name_of(relid)), function,
							 args.data));
	}
}

/* Refuse protect/unprotect of a table whose guard comes from above. */
static void
refuse_inherited(Oid relid, Oid fn, const char *func)
{
	GuardArgs	g;

	if (inherited_guard(relid, fn, &g))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s: \"%s\" is guarded by the fence of \"%s\", above it",
						func, get_rel_name(relid), get_rel_name(g.relid)),
				 errdetail("A partition or inheritance child carries the guard of its protected parent."),
				 errhint("Call %s on \"%s\" instead.", func, get_rel_name(g.relid))));
}

/*
 * The table and every descendant, locked for CREATE/DROP TRIGGER, each
 * owned by the caller.
 */
static List *
hierarchy_for_ddl(Relation rel)
{
	List	   *all = find_all_inheritors(RelationGetRelid(rel), ShareRowExclusiveLock, NULL);
	ListCell   *lc;

	foreach(lc, all)
	{
		Oid			relid = lfirst_oid(lc);

		if (relid == RelationGetRelid(rel))
			continue;
		check_guardable(relid, RelationGetRelid(rel));
		if (!pg_class_ownercheck(relid, GetUserId()))
			aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, get_rel_name(relid));
	}
	return all;
}

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

static char *
qualified_name(Relation rel)
{
	return quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
									  RelationGetRelationName(rel));
}

/* fence_guard() of this function's extension, qualified for CREATE TRIGGER */
static char *
guard_function_sql(FunctionCallInfo fcinfo)
{
	return quote_qualified_identifier(get_namespace_name(
									  get_func_namespace(fcinfo->flinfo->fn_oid)), "fence_guard");
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
	/* NULL means no token column; '' is a column name that cannot exist */
	const char *tokenColumn = PG_ARGISNULL(1) ? NULL : NameStr(*PG_GETARG_NAME(1));
	const char *keyColumn = "";
	text	   *resourceText;
	char	   *resource;
	size_t		len;
	char	   *qualified = qualified_name(rel);
	char	   *function;
	char	   *args;
	Oid			fn = guard_function(get_func_namespace(fcinfo->flinfo->fn_oid));
	List	   *hierarchy;
	ListCell   *lc;
	GuardArgs	g;

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

	if (tokenColumn)
	{
		AttrNumber	tokenAttnum = column_arg(rel, tokenColumn);

		check_token_type(rel, tokenColumn, get_atttype(RelationGetRelid(rel), tokenAttnum), true);
		check_not_generated(rel, TupleDescAttr(RelationGetDescr(rel), tokenAttnum - 1));
		check_no_default(rel, TupleDescAttr(RelationGetDescr(rel), tokenAttnum - 1), true);
	}
	else
		tokenColumn = "";
	if (perRow)
	{
		AttrNumber	attnum = column_arg(rel, keyColumn);
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
		Oid			type = att->atttypid;
		CoercionPathType path;
		Oid			castFunc;

		check_key_type(rel, keyColumn, type, att->attcollation);
		check_not_generated(rel, att);
		prepare_key_cast(type, &path, &castFunc);
		if (path == COERCION_PATH_NONE || path == COERCION_PATH_ARRAYCOERCE)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("key column \"%s\" of type %s has no cast to text",
							keyColumn, format_type_be(type))));
	}

	refuse_inherited(RelationGetRelid(rel), fn, "fence_protect");
	hierarchy = hierarchy_for_ddl(rel);

	/* the trigger function lives in this extension's schema */
	function = guard_function_sql(fcinfo);
	args = psprintf("%s, %s, %s", quote_literal_cstr(tokenColumn),
					quote_literal_cstr(resource), quote_literal_cstr(keyColumn));

	/*
	 * Protecting again replaces the guard, everywhere below too. Top-down:
	 * dropping a partitioned table's row trigger drops its clones.
	 */
	foreach(lc, hierarchy)
		drop_guard(lfirst_oid(lc));
	run_ddl(psprintf("CREATE TRIGGER " GUARD_TRIGGER
					 " BEFORE INSERT OR UPDATE OR DELETE ON %s"
					 " FOR EACH ROW EXECUTE FUNCTION %s(%s)", qualified, function, args));
	run_ddl(psprintf("CREATE TRIGGER " TRUNCATE_TRIGGER
					 " BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)",
					 qualified, function, args));

	/* partitions and inheritance children: the same arguments */
	if (!own_guard(RelationGetRelid(rel), fn, &g))
		elog(ERROR, "fence: the guard just created on \"%s\" is missing",
			 RelationGetRelationName(rel));
	foreach(lc, hierarchy)
		if (lfirst_oid(lc) != RelationGetRelid(rel))
			install_guard(lfirst_oid(lc), fn, function, &g);
	relation_close(rel, NoLock);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(fence_unprotect);
Datum
fence_unprotect(PG_FUNCTION_ARGS)
{
	Relation	rel = open_protectable(fcinfo, "fence_unprotect");
	Oid			fn = guard_function(get_func_namespace(fcinfo->flinfo->fn_oid));
	List	   *hierarchy;
	ListCell   *lc;

	refuse_inherited(RelationGetRelid(rel), fn, "fence_unprotect");
	hierarchy = hierarchy_for_ddl(rel);
	/* top-down: a partitioned table's row trigger takes its clones along */
	foreach(lc, hierarchy)
		drop_guard(lfirst_oid(lc));
	relation_close(rel, NoLock);
	PG_RETURN_VOID();
}

/*
 * Give relid and everything below it the guard relid has or inherits.
 */
static void
guard_below(Oid relid, Oid fn, const char *function)
{
	char		kind = get_rel_relkind(relid);
	GuardArgs	own;
	GuardArgs	above;
	bool		hasOwn;
	bool		hasAbove;
	const GuardArgs *g;
	List	   *hierarchy;
	ListCell   *lc;

	if (kind != RELKIND_RELATION && kind != RELKIND_PARTITIONED_TABLE &&
		kind != RELKIND_FOREIGN_TABLE)
		return;
	LockRelationOid(relid, AccessShareLock);
	hasOwn = own_guard(relid, fn, &own);
	hasAbove = inherited_guard(relid, fn, &above);
	if (!hasOwn && !hasAbove)
		return;
	g = hasAbove ? &above : &own;
	hierarchy = find_all_inheritors(relid, AccessShareLock, NULL);
	foreach(lc, hierarchy)
		install_guard(lfirst_oid(lc), fn, function, g);
}

/*
 * fence_guard_hierarchy(): the event trigger (ddl_command_end of CREATE
 * TABLE, CREATE FOREIGN TABLE, ALTER TABLE) that keeps every table below a
 * protected one guarded. An error here undoes the whole command.
 */
PG_FUNCTION_INFO_V1(fence_guard_hierarchy);
Datum
fence_guard_hierarchy(PG_FUNCTION_ARGS)
{
	EventTriggerData *ev;
	MemoryContext outer = CurrentMemoryContext;
	List	   *relids = NIL;
	Oid			fn;
	char	   *function;
	ListCell   *lc;
	int			rc;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("fence_guard_hierarchy() must be called as an event trigger")));
	ev = (EventTriggerData *) fcinfo->context;

	/*
	 * CREATE OR REPLACE TRIGGER needs only the TRIGGER privilege, not
	 * ownership: a role granted it could replace the guard with one that
	 * never fires (WHEN (false), another function). The guard's names
	 * belong to fence_protect and the table's owner (who can drop the guard
	 * anyway, and whose pg_restore recreates it); anyone else's CREATE
	 * TRIGGER of them is undone here.
	 */
	if (ev->parsetree && IsA(ev->parsetree, CreateTrigStmt))
	{
		CreateTrigStmt *stmt = (CreateTrigStmt *) ev->parsetree;
		Oid			relid = RangeVarGetRelid(stmt->relation, NoLock, true);

		if (!fenceOwnDdl && !stmt->isconstraint && OidIsValid(relid) &&
			!pg_class_ownercheck(relid, GetUserId()) &&
			(strcmp(stmt->trigname, GUARD_TRIGGER) == 0 ||
			 strcmp(stmt->trigname, TRUNCATE_TRIGGER) == 0))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("trigger name \"%s\" is reserved for fence's guard", stmt->trigname),
					 errdetail("A role that does not own the table cannot create or replace "
							   "the guard's triggers."),
					 errhint("Only the table's owner (or fence_protect()) may create them; name "
							 "the trigger otherwise.")));
		PG_RETURN_NULL();
	}

	fn = guard_function(get_func_namespace(fcinfo->flinfo->fn_oid));
	function = guard_function_sql(fcinfo);

	/* the tables this command created or altered */
	if ((rc = SPI_connect()) != SPI_OK_CONNECT)
		elog(ERROR, "fence: SPI_connect failed: %s", SPI_result_code_string(rc));
	rc = SPI_execute("SELECT objid FROM pg_catalog.pg_event_trigger_ddl_commands()"
					 " WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass",
					 true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "fence: reading pg_event_trigger_ddl_commands() failed: %s",
			 SPI_result_code_string(rc));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);
		MemoryContext spi = MemoryContextSwitchTo(outer);

		if (!isnull)
			relids = list_append_unique_oid(relids, DatumGetObjectId(d));
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();

	/* a partition just detached: PostgreSQL dropped its cloned row trigger */
	if (ev->parsetree && IsA(ev->parsetree, AlterTableStmt))
	{
		foreach(lc, ((AlterTableStmt *) ev->parsetree)->cmds)
		{
			AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

			if ((cmd->subtype == AT_DetachPartition ||
				 cmd->subtype == AT_DetachPartitionFinalize) &&
				cmd->def && IsA(cmd->def, PartitionCmd))
			{
				Oid			detached = RangeVarGetRelid(((PartitionCmd *) cmd->def)->name,
														NoLock, true);

				if (OidIsValid(detached))
					relids = list_append_unique_oid(relids, detached);
			}
		}
	}

	foreach(lc, relids)
		guard_below(lfirst_oid(lc), fn, function);
	PG_RETURN_NULL();
}
