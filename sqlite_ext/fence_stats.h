/*
 * fence_stats.h
 *
 * fence_stats (fence_stats.c): the counts of one connection, and the inline
 * part of counting that the accept path (fence.c) runs for every accept.
 */
#ifndef FENCE_STATS_H
#define FENCE_STATS_H

#include "fence_sqlite.h"

/* fence_stats.c: this connection's counts per resource */
typedef struct FenceStatEntry
{
	char	   *resource;		/* sqlite3_malloc'd, NUL-terminated */
	int			n;
	FenceCounts counts;			/* core's; last_at in ms since the Unix epoch */
} FenceStatEntry;

struct FenceStats
{
	FenceStatEntry *a;			/* in order of first use; an index never moves */
	int			nEntry;
	int			nAlloc;
	FenceHeld	index;			/* resource -> index into a (core's table) */
	int			iLast;			/* the entry last asked for */
	const char *zLast;			/* its resource and length (-1: none yet) */
	int			nLast;
};

int			fenceStatsSlot(FenceConn *conn, const char *z, int n);
void		fenceStatsReject(FenceConn *conn, int slot, sqlite3_int64 token);

/*
 * The entry of resource z for fence_stats, made if new: its index, or -1
 * when memory ran out. Inline for the accept path: the resource of the
 * previous call is compared eight bytes at a time, no call made.
 */
static inline int
fenceStatsFind(FenceConn *conn, const char *z, int n)
{
	const struct FenceStats *s = conn->pStats;

	if (s != NULL && s->nLast == n)
	{
		const char *a = s->zLast;
		int			i = 0;

		for (; i + 8 <= n; i += 8)
		{
			sqlite3_uint64 x;
			sqlite3_uint64 y;

			memcpy(&x, a + i, 8);
			memcpy(&y, z + i, 8);
			if (x != y)
				break;
		}
		while (i < n && a[i] == z[i])
			i++;
		if (i == n)
			return s->iLast;
	}
	return fenceStatsSlot(conn, z, n);
}

/* Count an accept (bStale 0) or a stale rejection of token at entry slot. */
static inline void
fenceStatsCount(FenceConn *conn, int slot, int bStale, sqlite3_int64 token)
{
	if (!bStale)
		conn->pStats->a[slot].counts.accepted++;
	else
		fenceStatsReject(conn, slot, token);
}

/*
 * The accepts the guard's memo answered are counted in FenceConn's first
 * cache line (nMemoAccepts), not in the resource's fence_stats entry, which
 * would be one more line for every row; they go to the entry of
 * memoWrite.statsSlot before that changes and before fence_stats is read.
 */
static inline void
fenceStatsSettleMemo(FenceConn *conn)
{
	if (conn->memo.nMemoAccepts > 0)
	{
		conn->pStats->a[conn->memo.memoWrite.statsSlot].counts.accepted +=
			(sqlite3_int64) conn->memo.nMemoAccepts;
		conn->memo.nMemoAccepts = 0;
	}
}

#endif							/* FENCE_STATS_H */
