/*
 * fence_sqlite.h
 *
 * What the SQLite extension's files share: the per-connection state
 * (FenceConn), the transaction's held fences (FenceHeld, fence_held.c), the
 * token table (fence.c) and the trigger DDL (fence_protect.c).
 */
#ifndef FENCE_SQLITE_H
#define FENCE_SQLITE_H

#include <sqlite3ext.h>
#include "../core/fence_core.h"

/*
 * One fence this transaction holds: resource zResource accepted at iToken.
 * A later entry for the same resource shadows an earlier one; iToken < 0
 * marks "no longer held" (fence_reset). Entries are only appended, so a
 * savepoint is an index into the log and rolling back is truncating it.
 */
typedef struct HeldEntry
{
	char	   *zResource;
	int			nResource;
	unsigned	hash;
	sqlite3_int64 iToken;
	int			iNextInBucket;	/* index of the next entry in the bucket, or -1 */
} HeldEntry;

typedef struct FenceHeld
{
	HeldEntry  *aEntry;			/* the log, oldest first */
	int			nEntry;
	int			nEntryAlloc;
	int		   *aBucket;		/* newest entry of each hash bucket, or -1 */
	int			nBucket;		/* a power of two, or 0 */
	int		   *aMark;			/* aMark[k]: nEntry when savepoint k opened */
	int			nMark;
	int			nMarkAlloc;
} FenceHeld;

typedef struct FenceConn
{
	sqlite3    *db;
	int			bEnlisted;		/* fence_held is part of the open transaction */
	int			bVtabConnected; /* the eponymous fence_held is connected */
	FenceHeld	held;
	/* cached statements, finalized when fence_held disconnects (at close) */
	sqlite3_stmt *pSelectToken;
	sqlite3_stmt *pAdvanceToken;
	sqlite3_stmt *pDeleteToken;
	sqlite3_stmt *pEnlist;
} FenceConn;

/* fence_held.c */
int			fenceHeldRegister(sqlite3 *db, FenceConn *conn);
int			fenceHeldConnect(FenceConn *conn);
int			fenceHeldEnlist(FenceConn *conn);
sqlite3_int64 fenceHeldGet(const FenceHeld *held, const char *z, int n);
int			fenceHeldSet(FenceHeld *held, const char *z, int n, sqlite3_int64 token);
void		fenceHeldClear(FenceHeld *held);

/* fence.c */
void		fenceFinalizeStatements(FenceConn *conn);

/* fence_protect.c */
void		fenceProtectFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void		fenceUnprotectFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv);

/* The entry point (the file name fence.so gives its name). */
int			sqlite3_fence_init(sqlite3 *db, char **pzErrMsg,
							   const sqlite3_api_routines *pApi);

/* Result codes, documented in README.md. */
#define FENCE_RC_STALE   SQLITE_CONSTRAINT_FUNCTION
#define FENCE_RC_MISSING SQLITE_CONSTRAINT_FUNCTION
#define FENCE_RC_INVALID SQLITE_ERROR

#endif							/* FENCE_SQLITE_H */
