/*
 * fence_stats.c
 *
 * fence_stats: what this connection's fence accepted and refused, per
 * resource, since the connection opened, as an eponymous, read-only
 * virtual table (fenceStatsRegister; the accept path's part is
 * fence_stats.h: fenceStatsFind, fenceStatsCount, fenceStatsSettleMemo;
 * fenceStatsFree), and fenceNowMs, the clock fence_lease.c reads too. Its
 * counts are core's FenceCounts, indexed by core's FenceHeld table.
 *
 *   SELECT * FROM fence_stats;
 *   resource | accepted | rejected | last_rejected_token | last_rejected_at
 *
 * accepted counts every accept (fence_check, fence_try, and each token a
 * guard accepts for a row; equal tokens too); rejected counts every stale
 * rejection (fence_check's error, fence_try's 0, a guard's stale error).
 * They are attempts, counted whether or not the transaction later commits;
 * "fencing token required", invalid input and lease calls count nowhere.
 * last_rejected_token and last_rejected_at (UTC text in fence_tokens'
 * updated_at format, 'YYYY-MM-DD HH:MM:SS.SSS', read from the default VFS's
 * clock) are NULL until the resource's first rejection. A resource appears
 * once it has an accept or a rejection.
 *
 * The counts live in memory of the connection (FenceConn), never in a
 * table: counting writes nothing, takes no lock, and cannot be rolled back.
 * The accept path pays one lookup: a slot is found (or made) before the
 * token is judged, so that running out of memory refuses the call before it
 * changes anything rather than leaving an accept uncounted. The resource of
 * the previous call is remembered, and the lookup of it is inline
 * (fenceStatsFind in fence_sqlite.h), so that the common case (one holder
 * writing many rows of one resource) costs a compare of the resource's
 * bytes, eight at a time, and an increment: no call, no hash.
 */
#include "fence_stats.h"

#include <string.h>
#include <time.h>
#ifdef _WIN32
#define gmtime_r(t, tm) (gmtime_s((tm), (t)) == 0 ? (tm) : NULL)
#endif

SQLITE_EXTENSION_INIT3

/* The entry the next call most likely asks for: this one. */
static int
statsRemember(struct FenceStats *s, int i)
{
	s->iLast = i;
	s->zLast = s->a[i].resource;
	s->nLast = s->a[i].n;
	return i;
}

/*
 * The entry of resource z, made if it has none: its index, or -1 when
 * memory ran out (nothing is then changed). Entries never move their index,
 * so a caller may keep it across a call that adds others.
 */
int
fenceStatsSlot(FenceConn *conn, const char *z, int n)
{
	struct FenceStats *s = conn->pStats;
	FenceStatEntry *e;
	int64_t		i;

	if (s == NULL)
	{
		s = sqlite3_malloc(sizeof(*s));
		if (s == NULL)
			return -1;
		memset(s, 0, sizeof(*s));
		fence_held_init(&s->index, &fenceSqliteAllocator);
		s->nLast = -1;
		conn->pStats = s;
	}
	i = fence_held_get(&s->index, z, (size_t) n);
	if (i >= 0)
		return statsRemember(s, (int) i);
	if (s->nEntry == s->nAlloc)
	{
		int			nAlloc = s->nAlloc ? s->nAlloc * 2 : 8;
		FenceStatEntry *a = sqlite3_realloc64(s->a, sizeof(*a) * (sqlite3_uint64) nAlloc);

		if (a == NULL)
			return -1;
		s->a = a;
		s->nAlloc = nAlloc;
	}
	e = &s->a[s->nEntry];
	memset(e, 0, sizeof(*e));
	e->resource = sqlite3_malloc(n + 1);
	if (e->resource == NULL)
		return -1;
	memcpy(e->resource, z, (size_t) n);
	e->resource[n] = '\0';
	e->n = n;
	if (fence_held_set(&s->index, z, (size_t) n, s->nEntry, 0) != 0)
	{
		sqlite3_free(e->resource);
		return -1;
	}
	return statsRemember(s, s->nEntry++);
}

/*
 * The default VFS's clock, in ms since the Unix epoch (fence_stats'
 * last_rejected_at, and the leases' clock, fence_lease.c); an error of the
 * VFS's, *pNow then unspecified.
 */
int
fenceNowMs(sqlite3_int64 *pNow)
{
	sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
	sqlite3_int64 jd = 0;
	int			rc = SQLITE_ERROR;

	if (vfs && vfs->iVersion >= 2 && vfs->xCurrentTimeInt64)
		rc = vfs->xCurrentTimeInt64(vfs, &jd);
	else if (vfs && vfs->xCurrentTime)
	{
		double		d = 0;

		rc = vfs->xCurrentTime(vfs, &d);
		jd = (sqlite3_int64) (d * 86400000.0);
	}
	*pNow = jd - (sqlite3_int64) 210866760000000;	/* the Julian day epoch, in ms */
	return rc;
}

/* A stale rejection of token for the resource of slot. */
void
fenceStatsReject(FenceConn *conn, int slot, sqlite3_int64 token)
{
	sqlite3_int64 now;

	if (fenceNowMs(&now) != SQLITE_OK)
		now = 0;
	fence_counts_reject(&conn->pStats->a[slot].counts, token, now);
}

void
fenceStatsFree(FenceConn *conn)
{
	struct FenceStats *s = conn->pStats;
	int			i;

	if (s == NULL)
		return;
	for (i = 0; i < s->nEntry; i++)
		sqlite3_free(s->a[i].resource);
	sqlite3_free(s->a);
	fence_held_free(&s->index);
	sqlite3_free(s);
	conn->pStats = NULL;
}

/* 'YYYY-MM-DD HH:MM:SS.SSS' (UTC) of ms since the Unix epoch (>= 0). */
static void
statsFormatTime(sqlite3_int64 ms, char *buf, int nBuf)
{
	time_t		t = (time_t) (ms / 1000);
	struct tm	tm;

	if (gmtime_r(&t, &tm) == NULL)
		memset(&tm, 0, sizeof(tm));
	sqlite3_snprintf(nBuf, buf, "%04d-%02d-%02d %02d:%02d:%02d.%03d", tm.tm_year + 1900,
					 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
					 (int) (ms % 1000));
}

/* ---------------------------------------------------------------------
 * The fence_stats virtual table
 * ------------------------------------------------------------------ */

typedef struct StatsVtab
{
	sqlite3_vtab base;
	FenceConn  *conn;
} StatsVtab;


static FenceConn *
statsConn(sqlite3_vtab_cursor *cur)
{
	return ((StatsVtab *) cur->pVtab)->conn;
}

static int
statsConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
			 sqlite3_vtab **ppVtab, char **pzErr)
{
	StatsVtab  *vtab;
	int			rc;

	(void) argc;
	(void) argv;
	(void) pzErr;
	rc = sqlite3_declare_vtab(db, "CREATE TABLE x(resource TEXT, accepted INTEGER, "
							  "rejected INTEGER, last_rejected_token INTEGER, "
							  "last_rejected_at TEXT)");
	if (rc != SQLITE_OK)
		return rc;
	/* reading this connection's own counts is harmless from a view */
	sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
	vtab = sqlite3_malloc(sizeof(*vtab));
	if (vtab == NULL)
		return SQLITE_NOMEM;
	memset(vtab, 0, sizeof(*vtab));
	vtab->conn = pAux;
	fenceConnRetain(vtab->conn);
	*ppVtab = &vtab->base;
	return SQLITE_OK;
}

static int
statsDisconnect(sqlite3_vtab *pVtab)
{
	((StatsVtab *) pVtab)->conn->pHooks->xRelease(((StatsVtab *) pVtab)->conn);
	sqlite3_free(pVtab);
	return SQLITE_OK;
}

static int
statsBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info)
{
	(void) pVtab;
	info->estimatedCost = 100.0;
	info->estimatedRows = 100;
	return SQLITE_OK;
}

/* Skip resources with neither an accept nor a rejection (a failed call's slot). */
static void
statsSettle(FenceCursor *cur)
{
	struct FenceStats *s = statsConn(&cur->base)->pStats;

	while (cur->i < cur->nEnd && s->a[cur->i].counts.accepted == 0 &&
		   s->a[cur->i].counts.rejected == 0)
		cur->i++;
}

static int
statsFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr,
			int argc, sqlite3_value **argv)
{
	FenceCursor *cur = (FenceCursor *) pCur;
	struct FenceStats *s = statsConn(pCur)->pStats;

	(void) idxNum;
	(void) idxStr;
	(void) argc;
	(void) argv;
	cur->i = 0;
	if (s)
		fenceStatsSettleMemo(statsConn(pCur));
	/* a scan that takes fences adds resources: it stops where it began */
	cur->nEnd = s ? s->nEntry : 0;
	statsSettle(cur);
	return SQLITE_OK;
}

static int
statsNext(sqlite3_vtab_cursor *pCur)
{
	FenceCursor *cur = (FenceCursor *) pCur;

	cur->i++;
	statsSettle(cur);
	return SQLITE_OK;
}

static int
statsColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int col)
{
	FenceStatEntry *e = &statsConn(pCur)->pStats->a[((FenceCursor *) pCur)->i];
	char		buf[40];

	switch (col)
	{
		case 0:
			sqlite3_result_text(ctx, e->resource, e->n, SQLITE_TRANSIENT);
			break;
		case 1:
			fenceStatsSettleMemo(statsConn(pCur));	/* guards ran since the scan began */
			sqlite3_result_int64(ctx, e->counts.accepted);
			break;
		case 2:
			sqlite3_result_int64(ctx, e->counts.rejected);
			break;
		case 3:
			if (e->counts.has_rejection)
				sqlite3_result_int64(ctx, e->counts.last_token);
			break;
		default:
			if (e->counts.has_rejection)
			{
				statsFormatTime(e->counts.last_at, buf, (int) sizeof(buf));
				sqlite3_result_text(ctx, buf, -1, SQLITE_TRANSIENT);
			}
			break;
	}
	return SQLITE_OK;
}

static const sqlite3_module statsModule = {
	1,							/* iVersion */
	NULL,						/* xCreate: eponymous only */
	statsConnect,
	statsBestIndex,
	statsDisconnect,
	NULL,						/* xDestroy */
	fenceCursorOpen,
	fenceCursorClose,
	statsFilter,
	statsNext,
	fenceCursorEof,
	statsColumn,
	fenceCursorRowid,
	NULL,						/* xUpdate: read-only */
	NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};

int
fenceStatsRegister(sqlite3 *db, FenceConn *conn)
{
	return sqlite3_create_module_v2(db, "fence_stats", &statsModule, conn, NULL);
}
