/*
 * fence_stats.c
 *
 * How many tokens were accepted and how many refused as stale, per
 * resource: the view fence_stats (since 1.4) over fence_stats_read(), and
 * fence_stats_scope(), which says whose counts the view shows.
 *
 * What counts (SPEC.md, Observability): every accept, equal tokens too, of
 * fence_check, fence_try and a guard (one per resource a row presents a
 * token for); every stale rejection (fence_check's error, fence_try's
 * false, a guard's error), with the token and the time of the last one.
 * Counted in fence_accept_hashed, whatever the transaction does afterwards:
 * attempts, not commits. "fencing token required", invalid input and
 * tokenless writes under a fence never reach it and count nowhere.
 *
 * Two scopes:
 *   - fence in shared_preload_libraries: server-wide, since the server
 *     started, in shared memory; the view shows the rows of the current
 *     database. At most fence.stats_max_resources resources (PGC_POSTMASTER)
 *     per server have a row of their own; the counts of every further
 *     resource go to one row per database whose resource is NULL ("all
 *     other resources"), so that the totals stay exact.
 *   - otherwise: this backend's own counts since it loaded fence, in its
 *     memory, with the same bound and the same NULL row.
 *
 * The cost on the hot path. An accept adds one to a counter in backend
 * memory: the entry of the resource counted last is tried first (one
 * length test and a memcmp), then a hash of this backend's resources. No
 * lock is taken there. With shared memory, what a backend counted is added
 * to the shared entries at the end of each transaction that counted
 * (commit, abort or PREPARE: counts survive ROLLBACK) and before the view
 * is read by this backend: one spinlock per resource counted, and the
 * shared LWLock only the first time this backend publishes a resource (to
 * find or create its entry, whose address it then remembers: entries are
 * never removed).
 *
 * Concurrency contract (shared memory). The LWLock "fence_stats" guards
 * the hash table: shared to look up or scan, exclusive to insert. Each
 * entry's counters are guarded by its own spinlock, held for a few stores.
 * A reader sees every transaction that has ended (each publishes before its
 * end is reported to the client), and its own backend's counts so far.
 * Publishing never raises an error: it runs in commit and abort callbacks.
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "../core/fence_held.h"
#include "fence_pg.h"

/* rows of the NULL resource in shared memory: one per database, at most */
#define OVERFLOW_ROWS 64

/* shared memory: one entry per (database, resource); "" is the NULL row */
typedef struct StatsKey
{
	Oid			dbid;
	char		resource[FENCE_RESOURCE_MAX + 1];
} StatsKey;

/* counts: core's FenceCounts, last_at a TimestampTz */
typedef struct SharedStat
{
	StatsKey	key;
	slock_t		mutex;			/* guards counts */
	FenceCounts counts;
} SharedStat;

typedef struct StatsShared
{
	LWLock	   *lock;
	int			nResources;		/* entries with a resource of their own */
	int			nOverflow;		/* NULL rows */
} StatsShared;

/* backend memory: one entry per resource counted, in localIndex's order */
typedef struct LocalStat
{
	FenceCounts counts;			/* totals, or with shared memory what is unpublished */
	SharedStat *shared;			/* where they are published, once looked up */
	bool		dirty;
} LocalStat;

static int	statsMaxResources = 1000;

static shmem_request_hook_type prevShmemRequest = NULL;
static shmem_startup_hook_type prevShmemStartup = NULL;
static StatsShared *shared = NULL;
static HTAB *sharedHash = NULL;

static MemoryContext statsContext = NULL;
static FenceHeld localIndex;	/* resource -> index in localStats (as the "token") */
static LocalStat *localStats = NULL;
static int	nLocal = 0;
static int	nLocalAlloc = 0;
static LocalStat localOverflow; /* without shared memory: resources beyond the bound */
static int *dirtyList = NULL;	/* with shared memory: indexes to publish */
static int	nDirty = 0;
static int	lastIndex = -1;		/* the entry counted last */

static Size
stats_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(StatsShared)),
					hash_estimate_size(statsMaxResources + OVERFLOW_ROWS, sizeof(SharedStat)));
}

static void
stats_shmem_request(void)
{
	if (prevShmemRequest)
		prevShmemRequest();
	RequestAddinShmemSpace(stats_shmem_size());
	RequestNamedLWLockTranche("fence_stats", 1);
}

/*
 * A key's hash covers the database and the resource's bytes, not the
 * padding after them (HASH_BLOBS would hash all 1 kB of every key).
 * Equality stays memcmp of the whole key, which is zero-filled.
 */
static uint32
stats_key_hash(const void *key, Size keysize)
{
	const StatsKey *k = key;

	return hash_combine(hash_bytes((const unsigned char *) &k->dbid, sizeof(Oid)),
						hash_bytes((const unsigned char *) k->resource,
								   (int) strnlen(k->resource, sizeof(k->resource))));
}

static void
stats_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	if (prevShmemStartup)
		prevShmemStartup();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("fence_stats", sizeof(StatsShared), &found);
	if (!found)
	{
		shared->lock = &(GetNamedLWLockTranche("fence_stats"))->lock;
		shared->nResources = 0;
		shared->nOverflow = 0;
	}
	info.keysize = sizeof(StatsKey);
	info.entrysize = sizeof(SharedStat);
	info.hash = stats_key_hash;
	sharedHash = ShmemInitHash("fence_stats hash", statsMaxResources + OVERFLOW_ROWS,
							   statsMaxResources + OVERFLOW_ROWS, &info,
							   HASH_ELEM | HASH_FUNCTION);
	LWLockRelease(AddinShmemInitLock);
}

static void
stats_at_xact_end(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			if (nDirty > 0)
				fence_stats_publish();
			break;
		default:
			break;
	}
}

/*
 * From _PG_init. A PGC_POSTMASTER setting can only be defined while the
 * libraries of shared_preload_libraries load; without them, the backend
 * reads the setting's text (a placeholder, if postgresql.conf or the
 * command line gave one) when it loads fence, and bounds its own table the
 * same way.
 */
void
fence_stats_init(void)
{
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("fence.stats_max_resources",
								"Resources that fence_stats counts one by one.",
								"Beyond them, counts go to one row whose resource is NULL.",
								&statsMaxResources,
								1000, 1, 100000,
								PGC_POSTMASTER, 0,
								NULL, NULL, NULL);
		MarkGUCPrefixReserved("fence");
		prevShmemRequest = shmem_request_hook;
		shmem_request_hook = stats_shmem_request;
		prevShmemStartup = shmem_startup_hook;
		shmem_startup_hook = stats_shmem_startup;
	}
	else
	{
		const char *text = GetConfigOption("fence.stats_max_resources", true, false);
		char	   *end;
		long		n;

		if (text != NULL)
		{
			errno = 0;
			n = strtol(text, &end, 10);
			if (errno == 0 && end != text && *end == '\0' && n >= 1 && n <= 100000)
				statsMaxResources = (int) n;
		}
	}
	RegisterXactCallback(stats_at_xact_end, NULL);
}

static void *
stats_alloc(size_t size)
{
	return MemoryContextAlloc(statsContext, size);
}

static void *
stats_realloc(void *ptr, size_t size)
{
	return repalloc(ptr, size);
}

static const FenceAllocator statsAllocator = {stats_alloc, stats_realloc, pfree};

/* Forget every local entry (with shared memory, after publishing them). */
static void
local_reset(void)
{
	fence_held_free(&localIndex);
	nLocal = 0;
	nDirty = 0;
	lastIndex = -1;
}

static void
mark_dirty(int i)
{
	if (!localStats[i].dirty)
	{
		localStats[i].dirty = true;
		dirtyList[nDirty++] = i;
	}
}

/* The counts of resource in this backend, created when new. */
static LocalStat *
local_stat_slow(const char *resource, size_t len)
{
	int64		i;

	if (statsContext == NULL)
	{
		statsContext = AllocSetContextCreate(TopMemoryContext, "fence stats",
											 ALLOCSET_DEFAULT_SIZES);
		fence_held_init(&localIndex, &statsAllocator);
	}
	i = fence_held_get(&localIndex, resource, len);
	if (i < 0)
	{
		if (nLocal >= statsMaxResources)
		{
			/* shared memory takes the counts, and the bound is its own */
			if (shared == NULL)
				return &localOverflow;
			fence_stats_publish();
			local_reset();
		}
		if (nLocal >= nLocalAlloc)
		{
			int			n = nLocalAlloc ? Min(nLocalAlloc * 2, statsMaxResources) : 16;

			localStats = localStats ? repalloc(localStats, sizeof(LocalStat) * n) :
				MemoryContextAlloc(statsContext, sizeof(LocalStat) * n);
			dirtyList = dirtyList ? repalloc(dirtyList, sizeof(int) * n) :
				MemoryContextAlloc(statsContext, sizeof(int) * n);
			nLocalAlloc = n;
		}
		memset(&localStats[nLocal], 0, sizeof(LocalStat));
		(void) fence_held_set(&localIndex, resource, len, nLocal, 0);
		i = nLocal++;
	}
	lastIndex = (int) i;
	if (shared)
		mark_dirty(lastIndex);
	return &localStats[i];
}

static inline LocalStat *
local_stat(const char *resource, size_t len)
{
	if (lastIndex >= 0)
	{
		const FenceHeldEntry *e = &localIndex.entries[lastIndex];

		if (e->len == len && memcmp(e->resource, resource, len) == 0)
		{
			if (shared && !localStats[lastIndex].dirty)
				mark_dirty(lastIndex);
			return &localStats[lastIndex];
		}
	}
	return local_stat_slow(resource, len);
}

void
fence_stats_accepted(const char *resource, size_t len)
{
	local_stat(resource, len)->counts.accepted++;
}

void
fence_stats_rejected(const char *resource, size_t len, int64 token)
{
	LocalStat  *s = local_stat(resource, len);

	fence_counts_reject(&s->counts, token, GetCurrentTimestamp());
}

/*
 * The shared entry of resource in this database, created if there is room:
 * its own, else the database's NULL row; NULL when even those are all
 * taken (the counts are then lost, never an error).
 */
static SharedStat *
shared_entry(const char *resource, size_t len)
{
	StatsKey	key;
	SharedStat *e;
	bool		found;

	memset(&key, 0, sizeof(key));
	key.dbid = MyDatabaseId;
	memcpy(key.resource, resource, Min(len, FENCE_RESOURCE_MAX));
	LWLockAcquire(shared->lock, LW_SHARED);
	e = hash_search(sharedHash, &key, HASH_FIND, NULL);
	LWLockRelease(shared->lock);
	if (e)
		return e;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	e = hash_search(sharedHash, &key, HASH_FIND, NULL);
	if (e == NULL && shared->nResources < statsMaxResources)
	{
		e = hash_search(sharedHash, &key, HASH_ENTER_NULL, &found);
		if (e && !found)
		{
			SpinLockInit(&e->mutex);
			memset(&e->counts, 0, sizeof(FenceCounts));
			shared->nResources++;
		}
	}
	if (e == NULL)
	{
		/* full: the database's row for all other resources */
		memset(key.resource, 0, sizeof(key.resource));
		e = hash_search(sharedHash, &key, HASH_FIND, NULL);
		if (e == NULL && shared->nOverflow < OVERFLOW_ROWS)
		{
			e = hash_search(sharedHash, &key, HASH_ENTER_NULL, &found);
			if (e && !found)
			{
				SpinLockInit(&e->mutex);
				memset(&e->counts, 0, sizeof(FenceCounts));
				shared->nOverflow++;
			}
		}
	}
	LWLockRelease(shared->lock);
	return e;
}

/*
 * Add what this backend counted since it last published to shared memory.
 * Raises no error (called from commit and abort callbacks); allocates
 * nothing.
 */
void
fence_stats_publish(void)
{
	if (shared == NULL)
		return;
	for (int k = 0; k < nDirty; k++)
	{
		int			i = dirtyList[k];
		LocalStat  *s = &localStats[i];

		if (s->shared == NULL)
			s->shared = shared_entry(localIndex.entries[i].resource, localIndex.entries[i].len);
		if (s->shared)
		{
			SpinLockAcquire(&s->shared->mutex);
			fence_counts_add(&s->shared->counts, &s->counts);
			SpinLockRelease(&s->shared->mutex);
		}
		memset(&s->counts, 0, sizeof(FenceCounts));
		s->dirty = false;
	}
	nDirty = 0;
}

static void
put_row(ReturnSetInfo *rsinfo, const char *resource, size_t len, const FenceCounts *c)
{
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};

	if (resource)
		values[0] = PointerGetDatum(cstring_to_text_with_len(resource, (int) len));
	else
		nulls[0] = true;
	values[1] = Int64GetDatum(c->accepted);
	values[2] = Int64GetDatum(c->rejected);
	values[3] = Int64GetDatum(c->last_token);
	values[4] = TimestampTzGetDatum(c->last_at);
	nulls[3] = nulls[4] = !c->has_rejection;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * fence_stats_read() (1.4): the rows of the view fence_stats, in no
 * particular order.
 */
PG_FUNCTION_INFO_V1(fence_stats_read);
Datum
fence_stats_read(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (shared)
	{
		HASH_SEQ_STATUS status;
		SharedStat *e;

		fence_stats_publish();
		LWLockAcquire(shared->lock, LW_SHARED);
		hash_seq_init(&status, sharedHash);
		while ((e = hash_seq_search(&status)) != NULL)
		{
			FenceCounts c;

			if (e->key.dbid != MyDatabaseId)
				continue;
			SpinLockAcquire(&e->mutex);
			c = e->counts;
			SpinLockRelease(&e->mutex);
			put_row(rsinfo, e->key.resource[0] ? e->key.resource : NULL,
					strlen(e->key.resource), &c);
		}
		LWLockRelease(shared->lock);
	}
	else
	{
		for (int i = 0; i < nLocal; i++)
			put_row(rsinfo, localIndex.entries[i].resource, localIndex.entries[i].len,
					&localStats[i].counts);
		if (localOverflow.counts.accepted > 0 || localOverflow.counts.rejected > 0)
			put_row(rsinfo, NULL, 0, &localOverflow.counts);
	}
	return (Datum) 0;
}

/* fence_stats_scope() (1.4): 'server' or 'backend', whose counts the view shows. */
PG_FUNCTION_INFO_V1(fence_stats_scope);
Datum
fence_stats_scope(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(shared ? "server" : "backend"));
}
