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
#include "../core/fence_held.h"

typedef struct FenceConn
{
	sqlite3    *db;
	int			bEnlisted;		/* fence_held is part of the open transaction */
	int			bVtabConnected; /* the eponymous fence_held is connected */
	FenceHeld	held;			/* what the open transaction holds */
	int		   *aMark;			/* aMark[k]: log length when savepoint k opened */
	int			nMark;
	int			nMarkAlloc;
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
extern const FenceAllocator fenceSqliteAllocator;

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
