/*
 * fence_tokens.c
 *
 * The highest accepted token per resource (the table fence_tokens) and the
 * accept protocol that keeps SPEC.md's invariant under concurrency.
 *
 * Concurrency contract. Every resource has a heavyweight lock of its own in
 * the lock manager (an advisory-class LOCKTAG: database, 64-bit hash of the
 * resource, class FENCE_LOCK_CLASS; pg_locks shows it as "advisory" with
 * objsubid 17989). A transaction fenced on r at t holds it in ShareLock
 * mode; raising r's highest needs ExclusiveLock. So:
 *   - transactions fenced at the same token share the lock and never wait
 *     for each other;
 *   - an advance waits until every open transaction fenced at a lower token
 *     has ended, and then holds off the others until it ends itself;
 *   - a token at or below the committed highest, presented while an advance
 *     is uncommitted, waits for that advance and is judged against its
 *     outcome, because the decision is taken after the lock is granted;
 *   - locks taken in a subtransaction go when it is rolled back, so a fence
 *     rolled back with its savepoint no longer makes anyone wait.
 *
 * Escalation (1.3). Past half of max_locks_per_transaction fences a
 * transaction stops taking resource locks: it takes fence_tokens' own lock
 * in ShareLock mode (which keeps every advance out, since an advance also
 * takes fence_tokens in RowExclusiveLock), and ExclusiveLock once it
 * advances a resource, writing rows without their resources' locks. That
 * ExclusiveLock must wait for every fenced transaction and keep new fences
 * out until it ends. A fence that reads fence_tokens holds an intention
 * lock on it (RowShareLock, RowExclusiveLock to advance), which does that.
 * A same-token fence answered from the token cache (the common case, a
 * "light" fence) holds its resource's lock alone, as in 1.2; the
 * transaction about to take the ExclusiveLock does the rest itself
 * (lock_tokens_exclusive): it first takes an announcement lock (an object
 * lock on fence_tokens, objsubid 17989, held to its end), then waits for
 * every transaction holding a resource's lock, then takes the ExclusiveLock.
 * A light fence asks, after its resource's lock is granted, whether anyone
 * else holds the announcement; if so it takes the intention lock too (and
 * so waits). Of a fence granted its lock before the announcement and an
 * announcement taken before that fence asked, one always sees the other:
 * the fence asks after its grant, the announcer looks for resource locks
 * after its announcement. Costs an announcer a scan of the lock table, once
 * per transaction; saves every light fence a lock and its release.
 *
 * The decision reads the newest committed row (a fresh snapshot, taken after
 * the lock is granted; a committing transaction becomes visible before it
 * releases its locks), never the transaction's snapshot, so the result is
 * the same at READ COMMITTED, REPEATABLE READ and SERIALIZABLE: a concurrent
 * advance is a stale-token error, never an accepted stale token.
 *
 * Why these and not row locks: SELECT ... FOR SHARE on the fence_tokens row
 * would give the same waits, but every share lock writes the tuple's xmax
 * (a WAL record, and a MultiXact once two transactions share it), which is
 * what the same-token case does on every write. The lock manager keeps its
 * locks in shared memory only: nothing is written for the common case. See
 * BENCHMARKS.md for the measurement.
 *
 * Why direct heap and index access and not SPI: application roles may not
 * write fence_tokens (REVOKE in the install script), yet their writes must
 * advance it; table_open/CatalogTupleInsert need no table privilege and no
 * SECURITY DEFINER wrapper with its per-call GUC switching, and a cached
 * index lookup costs a fraction of an SPI plan execution. Writes are plain
 * heap operations: WAL-logged, replicated, undone by rollback. A
 * transaction that wrote one commits synchronously (ForceSyncCommit), so
 * synchronous_commit = off cannot lose an acknowledged advance at a crash.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlogutils.h"
#include "catalog/indexing.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "fence_pg.h"

/* field4 of our LOCKTAGs: 'F' 'E'; user advisory locks use 1 and 2 */
#define FENCE_LOCK_CLASS 0x4645
#define FENCE_LOCK_SEED 0x66656e6365ULL

#define Anum_fence_tokens_resource		1
#define Anum_fence_tokens_token			2
#define Anum_fence_tokens_updated_at	3
#define Natts_fence_tokens				3

/* The token table of this database, looked up once per backend. */
static Oid	tokensRelid = InvalidOid;
static bool invalidationRegistered = false;

static void
forget_tokens_relid(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == tokensRelid)
		tokensRelid = InvalidOid;
}

/* The schema the extension lives in (PostgreSQL 15 does not export one). */
static Oid
extension_schema(Oid extension)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			schema = InvalidOid;

	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extension));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		schema = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return schema;
}

/*
 * A relation of the extension's own (fence_tokens, fence_leases), found in
 * the extension's schema, never through search_path.
 */
Oid
fence_extension_relid(const char *relname)
{
	Oid			extension = get_extension_oid("fence", true);
	Oid			schema;
	Oid			relid;

	if (!OidIsValid(extension))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"fence\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION fence;")));
	schema = extension_schema(extension);
	relid = get_relname_relid(relname, schema);
	if (!OidIsValid(relid))
		elog(ERROR, "fence: table %s is missing from schema %u", relname, schema);
	return relid;
}

static Oid
tokens_relid(void)
{
	if (!OidIsValid(tokensRelid))
	{
		tokensRelid = fence_extension_relid("fence_tokens");
		if (!invalidationRegistered)
		{
			CacheRegisterRelcacheCallback(forget_tokens_relid, (Datum) 0);
			invalidationRegistered = true;
		}
	}
	return tokensRelid;
}

static Relation
open_tokens(LOCKMODE mode)
{
	Relation	rel = table_open(tokens_relid(), mode);

	if (RelationGetDescr(rel)->natts != Natts_fence_tokens ||
		!OidIsValid(RelationGetPrimaryKeyIndex(rel)))
		elog(ERROR, "fence: table fence_tokens does not have the expected shape");
	fence_cache_attach(rel);
	return rel;
}

/*
 * Look the resource up in the newest committed state (and this
 * transaction's own changes). Returns whether a row exists; *tid is its
 * location for an update.
 */
static bool
read_row(Relation rel, const char *resource, size_t len, int64 *token, ItemPointer tid)
{
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	text	   *key_text = cstring_to_text_with_len(resource, (int) len);
	bool		found = false;

	ScanKeyInit(&key, Anum_fence_tokens_resource, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(key_text));
	scan = systable_beginscan(rel, RelationGetPrimaryKeyIndex(rel), true, snapshot, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;

		*token = DatumGetInt64(heap_getattr(tuple, Anum_fence_tokens_token,
											RelationGetDescr(rel), &isnull));
		if (tid)
			*tid = tuple->t_self;
		found = true;
	}
	systable_endscan(scan);
	UnregisterSnapshot(snapshot);
	pfree(key_text);
	return found;
}

static void
write_row(Relation rel, const char *resource, size_t len, int64 token, bool exists,
		  ItemPointer tid)
{
	Datum		values[Natts_fence_tokens];
	bool		nulls[Natts_fence_tokens] = {false, false, false};
	HeapTuple	tuple;

	/*
	 * The catalog API skips the table's CHECK constraints: validate here
	 * what every row must be, so that a dump of fence_tokens always restores.
	 */
	fence_validate_resource(resource, len);
	if (fence_check_token(token) != FENCE_VALID)
		fence_report_invalid("token", FENCE_NEGATIVE, 0, token);

	values[Anum_fence_tokens_resource - 1] =
		PointerGetDatum(cstring_to_text_with_len(resource, (int) len));
	values[Anum_fence_tokens_token - 1] = Int64GetDatum(token);
	/* updated_at moves only here, when the token rises */
	values[Anum_fence_tokens_updated_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	if (exists)
		CatalogTupleUpdate(rel, tid, tuple);
	else
		CatalogTupleInsert(rel, tuple);
	heap_freetuple(tuple);
	fence_note_written(resource, len, token);
	fence_cache_signal(rel);

	/*
	 * A raised highest must be durable before the commit is acknowledged,
	 * whatever the session's synchronous_commit (any role may turn it off):
	 * a crash that lost it would bring the old highest back and let the
	 * stale holder write again. Only a transaction that advanced flushes;
	 * an equal accept writes nothing here and keeps the session's setting.
	 * (Replication to synchronous standbys still follows the setting, as
	 * for the leases: see docs/postgresql-guarantees.md.)
	 */
	ForceSyncCommit();
	/* a later advance in this same command must see this version */
	CommandCounterIncrement();
}

/* The 64-bit hash that names the resource's lock (and its cache slot). */
uint64
fence_resource_hash(const char *resource, size_t len)
{
	return hash_bytes_extended((const unsigned char *) resource, (int) len, FENCE_LOCK_SEED);
}

/* The resource's lock, named by its hash. */
static void
resource_locktag_hashed(LOCKTAG *tag, uint64 h)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 FENCE_LOCK_CLASS);
}

static uint64
resource_locktag(LOCKTAG *tag, const char *resource, size_t len)
{
	uint64		h = fence_resource_hash(resource, len);

	resource_locktag_hashed(tag, h);
	return h;
}

/*
 * The fence locks belong to the (sub)transaction that accepts the fence,
 * never to whatever resource owner is current: inside a cursor FETCH that is
 * the portal's, and a failed portal releases its locks at ROLLBACK TO while
 * the held-fence log (tagged by subtransaction) keeps the fence; a fence
 * accepted by a FETCH inside a savepoint would keep its lock after the
 * savepoint is rolled back. CurTransactionResourceOwner is released exactly
 * when the held-fence log is truncated (fence_xact.c), and handed to the
 * parent when the subtransaction commits, so lock and fence end together.
 * An error inside LockAcquire leaves CurrentResourceOwner to abort
 * processing, which resets it.
 */
static void
fence_lock(const LOCKTAG *tag, LOCKMODE mode)
{
	ResourceOwner saved = CurrentResourceOwner;

	CurrentResourceOwner = CurTransactionResourceOwner;
	(void) LockAcquire(tag, mode, false, false);
	CurrentResourceOwner = saved;
}

static void
fence_unlock(const LOCKTAG *tag, LOCKMODE mode)
{
	ResourceOwner saved = CurrentResourceOwner;

	CurrentResourceOwner = CurTransactionResourceOwner;
	LockRelease(tag, mode, false);
	CurrentResourceOwner = saved;
}

/* fence_tokens' own lock, as the escalation level: same owner rule. */
static void
lock_tokens_table(LOCKMODE mode)
{
	ResourceOwner saved = CurrentResourceOwner;

	CurrentResourceOwner = CurTransactionResourceOwner;
	LockRelationOid(tokens_relid(), mode);
	CurrentResourceOwner = saved;
}

/*
 * The announcement of a transaction about to hold fence_tokens' own
 * ExclusiveLock: an object lock on fence_tokens (pg_locks: locktype
 * "object", classid pg_class, objsubid 17989), which nothing else takes.
 */
static void
announce_locktag(LOCKTAG *tag)
{
	SET_LOCKTAG_OBJECT(*tag, MyDatabaseId, RelationRelationId, tokens_relid(),
					   FENCE_LOCK_CLASS);
}

/*
 * Is fence_tokens' ExclusiveLock announced by another transaction (held,
 * or about to be)? Asked by the same-token path after its resource's lock
 * is granted (see fence_accept's "light" fences).
 *
 * Asked of the lock table: how many hold (or wait for) the announcement
 * lock, our own hold aside (LockWaiterCount() counts every request, granted
 * or not). Not of the holders' transaction ids: a committing announcer has
 * left the proc array before it sends its invalidation messages, and from
 * then on its virtual transaction id reads invalid, which GetLockConflicts()
 * leaves out; but it holds its locks until after the messages are sent.
 * Asked through GetLockConflicts(), a light fence in that window answered
 * from a cache the messages had not reached yet, and a write at the old
 * highest committed after the advance (tests/pg_commit_window.py).
 */
static bool
exclusive_announced(void)
{
	LOCKTAG		tag;
	int			n;

	announce_locktag(&tag);
	n = LockWaiterCount(&tag);
	if (n > 0 && LockHeldByMe(&tag, ShareLock))
		n--;
	return n > 0;
}

/*
 * fence_tokens' ExclusiveLock, the lock that keeps every fence out: taken
 * by an escalated transaction that advances (it then writes rows without
 * their resources' locks) and for a change that bypassed fence. A
 * same-token fence answered from the cache holds its resource's lock alone
 * (fence_accept), which the ExclusiveLock does not see, so first:
 *   1. announce: take the announcement lock (held to the end, like the
 *      ExclusiveLock); from its grant on, every new same-token fence sees
 *      it after its own resource's lock is granted and takes the path that
 *      also locks fence_tokens, which waits for this transaction;
 *   2. wait for every transaction holding a resource's lock (a fence taken
 *      before the announcement was seen) to end: every fence lock in the
 *      lock table, each taken and released in ExclusiveLock mode;
 *   3. take the ExclusiveLock, which waits for every transaction holding
 *      fence_tokens' intention locks, as before.
 * Nothing is then fenced anywhere but in this transaction's favour, as with
 * the ExclusiveLock alone when every fence also held an intention lock.
 * Returns true when it did (and so may have waited), false when this
 * transaction had already.
 */
static bool
lock_tokens_exclusive(void)
{
	LOCKTAG		tokens;
	LOCKTAG		announce;
	LockData   *locks;

	SET_LOCKTAG_RELATION(tokens, MyDatabaseId, tokens_relid());
	announce_locktag(&announce);

	/*
	 * Done once per transaction: announced, and the ExclusiveLock held. The
	 * ExclusiveLock alone is not enough: LOCK TABLE fence_tokens IN EXCLUSIVE
	 * MODE takes it without announcing, and light fences do not conflict
	 * with it.
	 */
	if (LockHeldByMe(&announce, ShareLock) && LockHeldByMe(&tokens, ExclusiveLock))
		return false;
	fence_lock(&announce, ShareLock);
	locks = GetLockStatusData();
	for (int i = 0; i < locks->nelements; i++)
	{
		LockInstanceData *l = &locks->locks[i];

		if (l->locktag.locktag_type != LOCKTAG_ADVISORY ||
			l->locktag.locktag_lockmethodid != USER_LOCKMETHOD ||
			l->locktag.locktag_field1 != MyDatabaseId ||
			l->locktag.locktag_field4 != FENCE_LOCK_CLASS ||
			l->holdMask == 0 || l->pid == MyProcPid)
			continue;
		/* waits for its holders, ours not included */
		fence_lock(&l->locktag, ExclusiveLock);
		fence_unlock(&l->locktag, ExclusiveLock);
	}
	lock_tokens_table(ExclusiveLock);
	return true;
}

/* The trigger on fence_tokens: a write that bypassed fence's C code. */
PG_FUNCTION_INFO_V1(fence_tokens_changed);
Datum
fence_tokens_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("fence_tokens_changed() must be called as a trigger")));

	/*
	 * Attached to any other table it would take fence_tokens' ExclusiveLock
	 * below for every row written there, keeping every fence out: 1.5
	 * revokes EXECUTE from PUBLIC, and this refuses it in an install not
	 * yet updated (and a superuser's mistake).
	 */
	if (RelationGetRelid(trigdata->tg_relation) != tokens_relid())
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("fence_tokens_changed() fires only on fence_tokens, not on \"%s\"",
						RelationGetRelationName(trigdata->tg_relation)),
				 errhint("Drop the trigger: fence installs its own on fence_tokens.")));

	/*
	 * A row changed by anyone but fence's C code (a superuser's DML, COPY, a
	 * restore, logical replication's apply worker) took none of the
	 * resource locks that order fence's own changes. Take the lock that
	 * stands for all of them, fence_tokens' own in EXCLUSIVE mode (the
	 * escalated advance of fence_tokens.c): the change waits for every open
	 * fenced transaction, and no fence is accepted until it has committed
	 * and announced itself, so no backend can be granted a lock, process
	 * the invalidation queue before the announcement, and answer from a
	 * stale cache. Such changes are rare; one lock serves a whole bulk load.
	 * (lock_tokens_exclusive also waits for the same-token fences that hold
	 * only their resource's lock: "Escalation" above.)
	 * TRUNCATE and DELETE only remove rows: any accept after them is an
	 * advance from nothing, which waits for the resource's holders itself.
	 */
	if (TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		(void) lock_tokens_exclusive();
	fence_cache_signal(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}

/*
 * The highest token in any version of r's row that is committed or still
 * being written (an advance in progress, read through a dirty snapshot),
 * or false when there is none. For fence_terminate (fence_terminate.c),
 * which must spare an uncommitted advance to a token at or above its own.
 */
bool
fence_read_uncommitted_highest(const char *resource, size_t len, int64 *highest)
{
	Relation	rel = open_tokens(AccessShareLock);
	SnapshotData dirty;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	text	   *key_text = cstring_to_text_with_len(resource, (int) len);
	bool		found = false;

	InitDirtySnapshot(dirty);
	ScanKeyInit(&key, Anum_fence_tokens_resource, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(key_text));
	/* every version: the old one of an update in progress comes first */
	scan = systable_beginscan(rel, RelationGetPrimaryKeyIndex(rel), true, &dirty, 1, &key);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		bool		isnull;
		int64		token = DatumGetInt64(heap_getattr(tuple, Anum_fence_tokens_token,
													   RelationGetDescr(rel), &isnull));

		if (!found || token > *highest)
			*highest = token;
		found = true;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	pfree(key_text);
	return found;
}

/* The lock that stands for r (for fence_terminate's look at the lock table). */
void
fence_resource_locktag(LOCKTAG *tag, const char *resource, size_t len)
{
	(void) resource_locktag(tag, resource, len);
}

/* The highest accepted token, or false when there is none. */
bool
fence_read_highest(const char *resource, size_t len, int64 *highest)
{
	Relation	rel = open_tokens(AccessShareLock);
	bool		found = read_row(rel, resource, len, highest, NULL);
	int64		pending = fence_pending_token(resource, len);

	table_close(rel, AccessShareLock);
	/* this transaction's own advance, not yet written into the row */
	if (pending >= 0 && (!found || pending > *highest))
	{
		*highest = pending;
		found = true;
	}
	return found;
}

/*
 * The transaction-wide level of fence_tokens' own relation lock (see the
 * file header): NoLock below the escalation threshold, where every fence
 * also has its resource's lock; ShareLock once escalated; ExclusiveLock
 * once an escalated transaction has advanced.
 */
static LOCKMODE
escalation_level(void)
{
	LOCKTAG		tag;

	SET_LOCKTAG_RELATION(tag, MyDatabaseId, tokens_relid());
	if (LockHeldByMe(&tag, ExclusiveLock))
		return ExclusiveLock;
	if (LockHeldByMe(&tag, ShareLock))
		return ShareLock;
	return NoLock;
}

/*
 * Fences beyond which a transaction stops taking a lock per resource: half
 * of max_locks_per_transaction, the share of the lock table each backend is
 * sized for, so that a transaction fenced on a million resources never
 * exhausts the shared lock table other sessions need.
 */
static int
escalation_threshold(void)
{
	return Max(max_locks_per_xact / 2, 1);
}

/*
 * The resource's lock with the matching intention lock on fence_tokens.
 * The intention lock is taken straight from the lock manager, not with
 * LockRelationOid: that one also processes the invalidation queue, for a
 * caller about to open the relation, and fence_accept processes it once
 * after the resource's lock is granted, which is the moment that matters
 * (fence_token_cache.c); opening fence_tokens later goes through
 * LockRelationOid and processes it again, as any open does.
 */
static void
lock_intention(LOCKMODE mode)
{
	LOCKTAG		tokens;

	SET_LOCKTAG_RELATION(tokens, MyDatabaseId, tokens_relid());
	fence_lock(&tokens, mode == ExclusiveLock ? RowExclusiveLock : RowShareLock);
}

static void
lock_resource(const LOCKTAG *tag, LOCKMODE mode)
{
	lock_intention(mode);
	fence_lock(tag, mode);
}

/*
 * Present token for resource in this transaction: accept (and hold the
 * fence until the transaction ends) or report stale. See the file header
 * for the locking protocol.
 */
static FenceOutcome accept_token(const char *resource, size_t len, const uint64 *knownHash,
								 int64 token);

FenceOutcome
fence_accept(const char *resource, size_t len, int64 token)
{
	return fence_accept_hashed(resource, len, NULL, token);
}

/*
 * fence_accept for a caller that knows the resource's fence_resource_hash
 * (a guard's one resource: computed once per guard, not per row); NULL:
 * computed here when needed.
 */
FenceOutcome
fence_accept_hashed(const char *resource, size_t len, const uint64 *knownHash, int64 token)
{
	FenceOutcome outcome = accept_token(resource, len, knownHash, token);

	/* counted as attempts, whatever the transaction does next (fence_stats.c) */
	if (outcome.stale)
		fence_stats_rejected(resource, len, token);
	else
		fence_stats_accepted(resource, len);
	return outcome;
}

static FenceOutcome
accept_token(const char *resource, size_t len, const uint64 *knownHash, int64 token)
{
	FenceOutcome outcome = {false, 0};
	int64		held = fence_held_token(resource, len);
	LOCKTAG		tag;
	uint64		hash;
	LOCKMODE	mode;
	LOCKMODE	level;
	bool		locked = false;
	Relation	rel;
	int64		highest = 0;
	bool		found;
	ItemPointerData tid;
	FenceVerdict verdict;
	uint64		generation;

	/* Held at this token: we keep a lock that nobody can advance past. */
	if (held == token)
		return outcome;

	/*
	 * Below what this transaction holds: stale. Holding r at h means the
	 * highest is h (we accepted it equal or advanced to it, and nobody can
	 * advance past our lock), even when our own advance to h is still only
	 * in memory and the row says less.
	 */
	if (held > token)
	{
		outcome.stale = true;
		outcome.highest = held;
		return outcome;
	}

	/*
	 * Advancing a resource whose row this transaction has already written:
	 * the row is ours and so is the exclusive lock, so nothing can have
	 * changed it; record the new token, the row follows before commit.
	 */
	if (held >= 0 && held < token && fence_written_token(resource, len) >= 0)
	{
		/* SET LOCAL transaction_read_only may have come since the write */
		PreventCommandIfReadOnly("fence_check()");
		fence_hold(resource, len, token);
		return outcome;
	}

	/*
	 * Below the threshold the transaction cannot have escalated: the lock
	 * was taken when it held that many fences, and those entries stay in
	 * the held log as long as the lock does (a rolled-back savepoint takes
	 * both). So the common case asks the lock manager nothing here.
	 */
	if (fence_held_count() < escalation_threshold())
		level = NoLock;
	else if ((level = escalation_level()) == NoLock)
	{
		lock_tokens_table(ShareLock);
		level = ShareLock;
	}

	if (level != NoLock)
	{
		/*
		 * Escalated: the ShareLock on fence_tokens keeps every advance out
		 * until this transaction ends, so the newest committed row cannot
		 * change under us and no resource lock is needed.
		 */
		rel = open_tokens(RowShareLock);
		found = read_row(rel, resource, len, &highest, &tid);
		verdict = fence_decide(found, highest, token);
		if (verdict == FENCE_REJECT_STALE)
		{
			outcome.stale = true;
			outcome.highest = highest;
		}
		else
		{
			if (verdict != FENCE_ACCEPT_EQUAL)
			{
				PreventCommandIfReadOnly("fence_check()");
				/*
				 * Waits for every other fenced transaction to end, unless
				 * this one has announced already (holding the ExclusiveLock
				 * through LOCK TABLE is not announcing).
				 */
				if (lock_tokens_exclusive())
					found = read_row(rel, resource, len, &highest, &tid);
				write_row(rel, resource, len, token, found, &tid);
			}
			fence_hold(resource, len, token);
		}
		table_close(rel, NoLock);
		return outcome;
	}

	if (knownHash)
	{
		hash = *knownHash;
		resource_locktag_hashed(&tag, hash);
	}
	else
		hash = resource_locktag(&tag, resource, len);

	/*
	 * Guess the mode: the shared lock for the common case of presenting the
	 * current highest again, the exclusive one when this transaction
	 * already holds a lower token. The guess is checked once the lock is
	 * ours, and an advance found then is retried in exclusive mode.
	 */
	mode = (held >= 0 && held < token) ? ExclusiveLock : ShareLock;

	/*
	 * The common case, answered from the cache (fence_token_cache.c): with
	 * the lock granted and every invalidation committed before the grant
	 * processed, a remembered highest equal to the token is still the
	 * highest.
	 */
	if (mode == ShareLock && fence_cache_enabled())
	{
		/*
		 * A "light" fence: the resource's lock alone, no intention lock on
		 * fence_tokens. What the intention lock did, make the ExclusiveLock
		 * on fence_tokens wait for this fence, lock_tokens_exclusive() does
		 * by announcing itself first and then waiting for every resource
		 * lock; a fence that sees an announcement (after its lock is
		 * granted, so that one of the two always sees the other) takes the
		 * intention lock as well, which waits for the announcer.
		 */
		fence_lock(&tag, ShareLock);
		AcceptInvalidationMessages();
		if (exclusive_announced())
		{
			/* in lock_resource's order: never wait holding the resource */
			fence_unlock(&tag, ShareLock);
		}
		else
		{
			if (fence_cache_lookup(hash, resource, len, &highest) && highest == token)
			{
				fence_hold(resource, len, token);
				return outcome;
			}
			/* the intention lock too, as lock_resource takes it */
			lock_intention(ShareLock);
			locked = true;
		}
	}

	/*
	 * Read with the intention lock only: RowExclusiveLock here would make a
	 * same-token holder wait for an escalated transaction's ShareLock. An
	 * advance writes under the RowExclusiveLock lock_resource() takes.
	 */
	rel = open_tokens(RowShareLock);
	for (;;)
	{
		if (!locked)
			lock_resource(&tag, mode);
		locked = false;
		generation = fence_cache_generation();
		found = read_row(rel, resource, len, &highest, &tid);
		verdict = fence_decide(found, highest, token);
		if (verdict == FENCE_REJECT_STALE || mode == ExclusiveLock ||
			verdict == FENCE_ACCEPT_EQUAL)
			break;
		/* the highest fell back (an advance rolled back, or a reset) */
		fence_unlock(&tag, mode);
		mode = ExclusiveLock;
	}

	if (verdict == FENCE_REJECT_STALE)
	{
		/* a rejected token holds nothing: fence_try false leaves no wait */
		fence_unlock(&tag, mode);
		outcome.stale = true;
		outcome.highest = highest;
	}
	else
	{
		if (verdict != FENCE_ACCEPT_EQUAL)
		{
			PreventCommandIfReadOnly("fence_check()");
			write_row(rel, resource, len, token, found, &tid);
		}
		else if (mode == ExclusiveLock)
		{
			/* someone else advanced to exactly our token: share it with them */
			lock_resource(&tag, ShareLock);
			fence_unlock(&tag, ExclusiveLock);
		}
		else
		{
			/* read under our ShareLock: nobody can advance past it meanwhile */
			fence_cache_store(hash, resource, len, highest, generation);
		}
		fence_hold(resource, len, token);
	}
	table_close(rel, RowShareLock);
	return outcome;
}

/* Before commit: bring r's row, written earlier by us, up to token. */
void
fence_write_pending(const char *resource, size_t len, int64 token)
{
	Relation	rel = open_tokens(RowExclusiveLock);
	int64		highest;
	ItemPointerData tid;
	bool		found = read_row(rel, resource, len, &highest, &tid);

	/* the row is locked by this transaction since it wrote it */
	if (!found || highest > token)
		elog(ERROR, "fence: the row of a resource this transaction advanced changed under it");
	write_row(rel, resource, len, token, true, &tid);
	table_close(rel, RowExclusiveLock);
}

/* fence_reset: forget the resource's highest (and this transaction's fence). */
void
fence_forget(const char *resource, size_t len)
{
	LOCKTAG		tag;
	Relation	rel;
	int64		highest;
	ItemPointerData tid;

	PreventCommandIfReadOnly("fence_reset()");
	resource_locktag(&tag, resource, len);
	lock_resource(&tag, ExclusiveLock);
	rel = open_tokens(RowExclusiveLock);
	if (read_row(rel, resource, len, &highest, &tid))
	{
		CatalogTupleDelete(rel, &tid);
		fence_cache_signal(rel);
		CommandCounterIncrement();
	}
	table_close(rel, RowExclusiveLock);
	if (fence_held_token(resource, len) >= 0)
		fence_hold(resource, len, -1);
	if (fence_written_token(resource, len) >= 0)
		fence_note_written(resource, len, -1);
}
