/*
 * fence_token_cache.c
 *
 * A backend-local memory of the highest accepted token per resource, so that
 * the common case (a transaction presenting the current highest again)
 * costs a lock-manager lock and no read of fence_tokens.
 *
 * Why it is safe. An entry is stored only while this backend holds the
 * resource's lock in ShareLock mode, from a read of the newest committed row
 * taken under that lock, so no advance can commit between the read and the
 * store. Every later change of fence_tokens registers a relcache
 * invalidation of the relation fence_cache_signal (fence's C writers call
 * fence_cache_signal(); any other INSERT, UPDATE, DELETE or TRUNCATE fires
 * the trigger fence_tokens_changed, which does the same). PostgreSQL queues
 * a transaction's invalidations at commit before it releases its locks, so
 * a backend that has just been granted the resource's lock and then calls
 * AcceptInvalidationMessages() has seen every change committed before the
 * grant; any invalidation of the signal relation empties the whole cache.
 * The same rule is how PostgreSQL keeps its own catalog caches true.
 *
 * Why a relation of its own: an invalidation of fence_tokens itself would
 * make every backend rebuild that relation's relcache entry after every
 * advance; nothing opens the composite type fence_cache_signal, so its
 * invalidation costs only the callback.
 *
 * The cache is trusted only while fence_tokens carries both triggers, the
 * statement one (1.2) and the row one (1.3: a logical replication apply
 * worker fires row triggers enabled ALWAYS but no statement triggers), both
 * enabled ALWAYS (so that session_replication_role cannot skip them),
 * checked every time the table's relcache entry changes; an older extension
 * version without them, or a disabled trigger, turns the cache off and
 * every call reads the table, as before. It is never used during recovery: a standby
 * replays advances without taking their locks.
 *
 * The cache is direct-mapped, fixed size and allocation-free: a backend's
 * memory does not grow with the number of resources it has fenced.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "fence_pg.h"

#define CACHE_SLOTS 512			/* a power of two */
#define CACHE_KEY_MAX 120		/* longer resources are never cached */

#define SIGNAL_RELATION "fence_cache_signal"
#define CHANGE_TRIGGER "fence_tokens_changed"
#define CHANGE_ROW_TRIGGER "fence_tokens_changed_row"

typedef struct CacheSlot
{
	uint64		generation;		/* valid only when equal to cacheGeneration */
	uint64		hash;
	int64		highest;
	uint16		len;
	char		resource[CACHE_KEY_MAX];
} CacheSlot;

static CacheSlot slots[CACHE_SLOTS];
static uint64 cacheGeneration = 1;

static Oid	tokensRelid = InvalidOid;	/* the fence_tokens we verified */
static Oid	signalRelid = InvalidOid;
static bool trusted = false;
static bool callbackRegistered = false;

static void
cache_invalidated(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == signalRelid || relid == tokensRelid)
		cacheGeneration++;
	/* the table changed shape or triggers: verify it again before use */
	if (relid == InvalidOid || relid == tokensRelid)
		trusted = false;
}

/*
 * Both triggers of fence_tokens that announce changes, enabled ALWAYS: the
 * statement trigger (1.2; TRUNCATE, and every statement of a session) and
 * the row trigger (1.3; the rows a logical replication apply worker writes,
 * since it fires no statement triggers).
 */
static bool
has_trigger(TriggerDesc *trigdesc, const char *name, bool forRow, int16 wanted)
{
	for (int i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *t = &trigdesc->triggers[i];

		if (strcmp(t->tgname, name) == 0)
			return t->tgenabled == TRIGGER_FIRES_ALWAYS &&
				TRIGGER_FOR_ROW(t->tgtype) == forRow &&
				(t->tgtype & wanted) == wanted;
	}
	return false;
}

static bool
has_change_trigger(Relation tokens)
{
	const int16 dml = TRIGGER_TYPE_INSERT | TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE;

	return tokens->trigdesc != NULL &&
		has_trigger(tokens->trigdesc, CHANGE_TRIGGER, false, dml | TRIGGER_TYPE_TRUNCATE) &&
		has_trigger(tokens->trigdesc, CHANGE_ROW_TRIGGER, true, dml);
}

/*
 * Called with fence_tokens open, on every read of it: (re)decide whether
 * the cache may be used. Cheap once decided.
 */
void
fence_cache_attach(Relation tokens)
{
	if (trusted && RelationGetRelid(tokens) == tokensRelid)
		return;
	if (!callbackRegistered)
	{
		CacheRegisterRelcacheCallback(cache_invalidated, (Datum) 0);
		callbackRegistered = true;
	}
	cacheGeneration++;
	tokensRelid = RelationGetRelid(tokens);
	signalRelid = get_relname_relid(SIGNAL_RELATION, RelationGetNamespace(tokens));
	trusted = OidIsValid(signalRelid) && has_change_trigger(tokens);
}

/* Whether lookups can answer at all; the caller then processes invalidations. */
bool
fence_cache_enabled(void)
{
	return trusted && !RecoveryInProgress();
}

static CacheSlot *
slot_for(uint64 hash)
{
	return &slots[hash & (CACHE_SLOTS - 1)];
}

/*
 * The remembered highest of resource, if any. Only meaningful while holding
 * the resource's lock and after AcceptInvalidationMessages().
 */
bool
fence_cache_lookup(uint64 hash, const char *resource, size_t len, int64 *highest)
{
	CacheSlot  *slot = slot_for(hash);

	if (!fence_cache_enabled() || slot->generation != cacheGeneration ||
		slot->hash != hash || slot->len != len || memcmp(slot->resource, resource, len) != 0)
		return false;
	*highest = slot->highest;
	return true;
}

/*
 * The generation to store a read under: taken before the read's snapshot.
 * An invalidation processed between the snapshot and the store (opening an
 * index processes the queue) announces a change the read may not have
 * seen; storing under the generation current at the store would keep the
 * old value as if it were new, for every later transaction of this backend.
 */
uint64
fence_cache_generation(void)
{
	return cacheGeneration;
}

/* Remember a highest read under the resource's ShareLock. */
void
fence_cache_store(uint64 hash, const char *resource, size_t len, int64 highest,
				  uint64 generation)
{
	CacheSlot  *slot = slot_for(hash);

	if (!fence_cache_enabled() || len > CACHE_KEY_MAX || generation != cacheGeneration)
		return;
	slot->generation = generation;
	slot->hash = hash;
	slot->highest = highest;
	slot->len = (uint16) len;
	memcpy(slot->resource, resource, len);
}

/*
 * Tell every backend (this one at the next command, the others once this
 * transaction commits) that fence_tokens changed. Undone with the
 * transaction: an aborted change is never announced, and this backend
 * forgets what it cached meanwhile.
 */
void
fence_cache_signal(Relation tokens)
{
	Oid			signal = signalRelid;

	if (RelationGetRelid(tokens) != tokensRelid || !OidIsValid(signal))
		signal = get_relname_relid(SIGNAL_RELATION, RelationGetNamespace(tokens));
	if (OidIsValid(signal))
		CacheInvalidateRelcacheByRelid(signal);
}
