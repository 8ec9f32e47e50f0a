/*
 * fence_sqlite.h
 *
 * What the SQLite extension's files share: the per-connection state
 * (FenceConn), made of each module's own state, one owner file each: the
 * token table and the undo log (fence_accept.c), the highest-token cache
 * (fence_cache.c), the leases (fence_lease.c), the transaction's held
 * fences, enlisting and the change detector (fence_held.c), the guard
 * admission (fence_guard.c), the guard's memo and the guard call under way
 * (fence.c). Other files read them and change them through the owner's
 * functions (fenceGuardMemoForget, fenceHeldSet: inline below).
 */
#ifndef FENCE_SQLITE_H
#define FENCE_SQLITE_H

#include <sqlite3ext.h>
#include <string.h>
#include "../core/fence_core.h"
#include "../core/fence_held.h"

SQLITE_EXTENSION_INIT3			/* for the inline functions below */

/* A guard id admitted in this schema generation (fence_guard.c). */
typedef struct FenceGuardSeen
{
	sqlite3_int64 id;
	char	   *zResource;		/* the resource, or the prefix when keyed */
	int			nResource;
	int			bKeyed;
	int			bNeedsRecursive;	/* a REPLACE reaches another key's row (fence_guard.c) */
} FenceGuardSeen;

/*
 * The last guard call that passed, per kind (fence.c, "The guard's memo"):
 * the next call with the same arguments passes without doing the work
 * again while nothing that could change its answer has happened
 * (FenceConn.guardEpoch).
 */
typedef struct FenceGuardMemo
{
	unsigned	epoch;			/* FenceConn.guardEpoch when it passed; 0: none */
	int			statsSlot;		/* the resource's fence_stats entry (never moves) */
	sqlite3_int64 id;			/* the guard id */
	sqlite3_int64 token;		/* fence_guard_write's token */
} FenceGuardMemo;

#define FENCE_HELD_FIRST 16		/* a power of two */
#define FENCE_MARKS_FIRST 4		/* savepoint marks kept inside FenceConn */


struct FenceConn;

/* ---------------------------------------------------------------------
 * fence_accept.c: the token table, the undo of a failed statement, the
 * accept path
 * ------------------------------------------------------------------ */

/*
 * What one accept inside another writing statement changed in fence_tokens,
 * so that an error later in that statement can put it back (fence_accept.c,
 * "Undoing a failed statement").
 */
typedef struct FenceUndo
{
	char	   *resource;		/* sqlite3_malloc'd copy */
	int			n;
	int			bHad;			/* the resource had a highest before */
	sqlite3_int64 token;		/* that highest */
	char		zUpdatedAt[64]; /* and its updated_at */
} FenceUndo;

typedef struct FenceUndoLog
{
	sqlite3_stmt *pStmt;		/* the writing statement whose run the log belongs to */
	int			run;			/* its SQLITE_STMTSTATUS_RUN then */
	sqlite3_int64 changes;		/* total_changes after our last own write */
	int			mark;			/* held log length before its first accept */
	FenceUndo  *a;
	int			n;
	int			nAlloc;
	int			bUndoing;		/* fenceUndoOnError is running */
} FenceUndoLog;

#define FENCE_SHARED_UNKNOWN 0
#define FENCE_SHARED_YES 1
#define FENCE_SHARED_NO 2

/* The cached statements on main.fence_tokens, finalized at close. */
typedef struct FenceTokenTable
{
	sqlite3_stmt *pSelect;
	sqlite3_stmt *pAdvance;
	sqlite3_stmt *pDelete;
	int			sharedCache;	/* FENCE_SHARED_*: main in shared-cache mode? */
} FenceTokenTable;

int			fenceAccept(struct FenceConn *conn, const char *z, int n, sqlite3_int64 token,
						int *pStale, sqlite3_int64 *pHighest);
int			fenceReadHighest(struct FenceConn *conn, const char *z, int n, int *pHas,
							 sqlite3_int64 *pHighest);
int			fenceForgetResource(struct FenceConn *conn, const char *z, int n);
void		fenceUndoOnError(struct FenceConn *conn);
sqlite3_stmt *fenceOuterWriter(struct FenceConn *conn);	/* a writing statement runs us */
void		fenceUndoForget(struct FenceConn *conn);
void		fenceTakeSavedError(struct FenceConn *conn, int rc, char *buf);
void		fenceFinalizeStatements(struct FenceConn *conn);

/* ---------------------------------------------------------------------
 * fence_cache.c: what a connection remembers of fence_tokens
 * ------------------------------------------------------------------ */

/*
 * What this connection last read or wrote as a resource's highest: a
 * verdict while gen is the cache's.
 */
#define FENCE_HINTS 64
typedef struct FenceHint
{
	char	   *z;				/* sqlite3_malloc'd resource, NULL: empty slot */
	int			n;
	int			bHas;
	sqlite3_int64 highest;
	unsigned	gen;			/* 0: a hint only */
} FenceHint;

/* FenceCache.txn: what the open transaction may take from the cache */
#define FENCE_CACHE_TXN_UNKNOWN 0	/* no accept yet (or no transaction) */
#define FENCE_CACHE_TXN_ON 1		/* verdicts used, and recorded at commit */
#define FENCE_CACHE_TXN_OFF 2		/* neither */

typedef struct FenceCache
{
	unsigned	gen;			/* entries of this generation are verdicts */
	int			txn;			/* FENCE_CACHE_TXN_* */
	int			bRecorded;		/* version describes what the entries hold */
	unsigned	version;		/* main's data version after the last recorded commit */
	int			bTxnWrote;		/* fence wrote fence_tokens in this transaction */
	unsigned	schemaGen;		/* FenceChanges.gen the entries were filled in */
	FenceHint	aHint[FENCE_HINTS];
} FenceCache;

void		fenceCacheTxnBegin(struct FenceConn *conn, int bUsable, unsigned schemaGen);
void		fenceCacheSet(struct FenceConn *conn, const char *z, int n, int bHas,
						  sqlite3_int64 highest);
void		fenceCacheForgetOne(struct FenceConn *conn, const char *z, int n);
void		fenceCacheForget(struct FenceConn *conn);
void		fenceCacheWrote(struct FenceConn *conn);
void		fenceCacheTxnEnd(struct FenceConn *conn, int bCommitted);
void		fenceCacheRolledBackTo(struct FenceConn *conn);
void		fenceCacheFree(struct FenceConn *conn);

/* ---------------------------------------------------------------------
 * fence_lease.c: fence_acquire, fence_renew, fence_release
 * ------------------------------------------------------------------ */

typedef struct FenceLeases
{
	sqlite3    *pDb;			/* the connection grants go through in a transaction */
} FenceLeases;

void		fenceAcquireFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void		fenceRenewFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void		fenceReleaseFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void		fenceLeaseFinalize(struct FenceConn *conn);


struct FenceConn;

/*
 * What the transaction table (fence_held.c, the lowest layer that knows
 * where a transaction ends) tells the layers above it; set once by
 * fence_init.c, so that fence_held.c calls no file above it.
 */
typedef struct FenceHooks
{
	void		(*xFinalize) (struct FenceConn *);	/* finalize every cached statement */
	void		(*xFree) (struct FenceConn *);	/* free every module's memory */
	void		(*xTxnStartOver) (struct FenceConn *);	/* a transaction begins or ends */
	void		(*xCacheTxnEnd) (struct FenceConn *, int bCommitted);
	void		(*xRolledBack) (struct FenceConn *);	/* before xTxnStartOver */
	void		(*xRolledBackTo) (struct FenceConn *);
	void		(*xRelease) (struct FenceConn *);	/* drop a reference (fence_stats.c) */
} FenceHooks;

/*
 * The one change detector (fence_held.c, "What changed"): gen moves
 * whenever something fence depends on may have changed: main's or TEMP's
 * schema (DDL by this connection or another), ATTACH/DETACH, a flag
 * pragma such as recursive_triggers. Each consumer (guard admission, the
 * recursive_triggers check, the cache) remembers the gen its knowledge is
 * of, and asks FENCE_CHANGES_GEN.
 */
typedef struct FenceChanges
{
	unsigned	gen;			/* never 0 once polled */
	sqlite3_stmt *pProbe;		/* names main's schema, never returns a row */
	int			nSum;			/* reprepare counts of pProbe, pEnlist, pEnlistMain then */
	int			nDb;			/* and the number of schemas (main, temp, attached) */
	unsigned	nBeginSeen;		/* the transaction a watched statement last ran in */
	sqlite3_uint64 nPlanned;	/* statements planned that read fence's tables */
	sqlite3_uint64 nPlannedSeen;	/* nPlanned when a watched statement last ran */
} FenceChanges;

/*
 * The guard's memo (fence.c, "The guard's memo"): FenceConn's first cache
 * line. guardEpoch moves on any change (fenceGuardMemoForget).
 */
typedef struct FenceMemo
{
	unsigned	guardEpoch;
	sqlite3_uint64 nMemoAccepts;	/* accepts the memo answered, not yet in fence_stats */
	FenceGuardMemo memoWrite;
	FenceGuardMemo memoFenced;
} FenceMemo;

/*
 * What the open transaction holds (fence_held.c, its one writer): the
 * second cache line, read by SQLite's statement savepoint (heldSavepoint).
 */
typedef struct FenceTxn
{
	sqlite3_vtab *pJoined;		/* fence_txn joined the transaction through this table */
	int			nMark;
	int			nMarkAlloc;
	int		   *aMark;			/* aMark[k]: log length when savepoint k opened */
	int			aMarkFirst[FENCE_MARKS_FIRST];	/* aMark's first array, never freed */
	FenceHeld	held;			/* what the open transaction holds */
	int			bEnlisted;		/* fence_held is part of the open transaction */
	int			bBroken;		/* out of memory: what is held is unknown */
} FenceTxn;

/* How fence joins transactions (fence_held.c). */
typedef struct FenceEnlist
{
	int			nRef;			/* the module and each connected table */
	int			bVtabConnected; /* the eponymous fence_held is connected */
	unsigned	nBegin;			/* transactions fence_txn has joined */
	sqlite3_stmt *pEnlist;		/* through temp.fence_enlist (or main, see fence_held.c) */
	sqlite3_stmt *pEnlistMain;	/* through main.fence_txn, once main is being written */
} FenceEnlist;

/* Guard admission (fence_guard.c). */
typedef struct FenceAdmission
{
	FenceGuardSeen *aGuard;		/* ids admitted in generation admittedGen */
	int			nGuard;
	int			nGuardAlloc;
	unsigned	admittedGen;	/* FenceChanges.gen aGuard holds for */
	int			bAdmittedInTxn; /* a guard was admitted in this transaction */
	unsigned	recursiveGen;	/* FenceChanges.gen bRecursive was read in */
	unsigned	recursiveTxn;	/* and FenceEnlist.nBegin then */
	int			bRecursive;		/* PRAGMA recursive_triggers then */
	int			bJournalChecked;	/* this transaction's journal can undo a refusal */
	sqlite3_stmt *pJournalMode;
} FenceAdmission;

typedef struct FenceConn
{
	/*
	 * What every statement of a transaction with many one-row statements
	 * reads, in the first two cache lines (FenceConn is allocated aligned to
	 * a line, fenceConnAlloc): a guard call the memo answers reads the
	 * first; SQLite's statement savepoint (heldSavepoint) the second. Spread
	 * over more lines they were fetched again at every statement, the
	 * statement's page copies having evicted them (BENCHMARKS.md).
	 */
	FenceMemo	memo;			/* fence.c */
	FenceTxn	txn;			/* fence_held.c */

	/* fence_init.c */
	sqlite3    *db;
	void	   *pAlloc;			/* what fenceConnAlloc allocated, for sqlite3_free */
	FenceEnlist enlist;			/* fence_held.c */
	FenceUndoLog undo;			/* fence_accept.c */
	FenceTokenTable tokens;		/* fence_accept.c */
	/* fence.c: the guard call under way */
	int			bInGuard;		/* its accept is a guard's (no undo log) */
	FenceChanges changes;		/* the change detector (fence_held.c) */
	FenceAdmission guard;		/* fence_guard.c */
	FenceLeases lease;			/* fence_lease.c */
	/* fence_stats (fence_stats.c): this connection's counts since it opened */
	struct FenceStats *pStats;

	/*
	 * The arrays last, so that the fields every transaction reads above
	 * share a few cache lines.
	 */
	FenceHeldEntry aHeldFirst[FENCE_HELD_FIRST];	/* held's first entries, */
	int			aHeldBuckets[FENCE_HELD_FIRST]; /* buckets */
	char		zHeldNames[FENCE_HELD_FIRST * 32];	/* and resources' copies (fence_held.c) */
	FenceCache	cache;			/* fence_cache.c */
	const FenceHooks *pHooks;	/* fence_init.c's */
	int			savedRc;		/* the error zSavedErr describes (fence_accept.c) */
	char		zSavedErr[1536];
} FenceConn;

/* fence_cache.c: the slot of resource z in FenceCache.aHint */
static inline unsigned
fenceCacheSlot(const char *z, int n)
{
	return fence_hash(z, (size_t) n) % FENCE_HINTS;
}

/*
 * The cache's verdict on z: its highest, if this transaction may take it
 * and it is at least token (an equal or a stale token; an advance reads,
 * for the undo log wants the row's updated_at). NULL: read.
 */
static inline const FenceHint *
fenceCacheGet(const FenceConn *conn, const char *z, int n, sqlite3_int64 token)
{
	const FenceHint *h = &conn->cache.aHint[fenceCacheSlot(z, n)];

	if (conn->cache.txn == FENCE_CACHE_TXN_ON && h->gen == conn->cache.gen &&
		conn->cache.schemaGen == conn->changes.gen && h->z != NULL && h->bHas && h->highest >= token && h->n == n &&
		memcmp(h->z, z, (size_t) n) == 0)
		return h;
	return NULL;
}

/*
 * The code a function's error is raised with. SQLite takes a code <= 0 for
 * no error at all (the function's result is then its message, which no
 * guard may take for a pass), and SQLITE_ROW/SQLITE_DONE end a statement
 * as if nothing failed: those, and fence's own negative codes, become
 * SQLITE_ERROR.
 */
static inline int
fenceErrorCode(int rc)
{
	return rc <= SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_ERROR : rc;
}

/*
 * Step a statement of fence's own to its end: under PRAGMA count_changes
 * an INSERT, UPDATE or DELETE first returns a row with its count.
 */
static inline int
fenceStepToEnd(sqlite3_stmt *p)
{
	int			rc;

	while ((rc = sqlite3_step(p)) == SQLITE_ROW)
		;
	return rc;
}

/*
 * An integer argument (SPEC "Words"): the INTEGER storage class, or a REAL
 * holding an exact integer of magnitude at most 2^53 (what JavaScript
 * drivers bind a number as), taken as that integer. 0: any other value.
 */
int			fenceValueInt64(sqlite3_value *v, sqlite3_int64 *p);

/* Anything that could change a guard call's answer happened: no memo holds. */
static inline void
fenceGuardMemoForget(FenceConn *conn)
{
	if (++conn->memo.guardEpoch == 0)
		conn->memo.guardEpoch = 1;
}

/*
 * fence_held.c is the one writer of what the transaction holds (held,
 * bBroken); the files above change it through these.
 */
int			fenceHeldBreak(FenceConn *conn);
void		fenceHeldTruncate(FenceConn *conn, int n);
void		fenceConnRetain(FenceConn *conn);

/*
 * The open transaction holds z at token (-1: no longer holds it); nonzero
 * when that could not be recorded, and the caller must fenceHeldBreak.
 */
static inline int
fenceHeldSet(FenceConn *conn, const char *z, int n, sqlite3_int64 token)
{
	fenceGuardMemoForget(conn);
	return fence_held_set(&conn->txn.held, z, (size_t) n, token, 0);
}

/* A scan of one of fence's virtual tables (fence_held.c) */
typedef struct FenceCursor
{
	sqlite3_vtab_cursor base;
	int			i;				/* the current entry */
	int			nEnd;			/* entries when the scan began */
} FenceCursor;
int			fenceCursorOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor);
int			fenceCursorClose(sqlite3_vtab_cursor *cur);
int			fenceCursorEof(sqlite3_vtab_cursor *cur);
int			fenceCursorRowid(sqlite3_vtab_cursor *cur, sqlite_int64 *pRowid);

/* fence_held.c */
int			fenceHeldRegister(sqlite3 *db, FenceConn *conn);
void		fenceConnRelease(FenceConn *conn);
void		fenceHeldUnregister(sqlite3 *db);
int			fenceHeldConnect(FenceConn *conn);
int			fenceHeldEnlist(FenceConn *conn, int bLockMain);
int			fenceHeldCreateEnlist(FenceConn *conn);
/* FENCE_CHANGES_GEN's callers */
#define FENCE_POLL_ANY 0		/* any caller */
#define FENCE_POLL_GUARD 1		/* a guard call (fence_held.c, "What changed") */
unsigned	fenceChangesRun(FenceConn *conn, int *pRc);

/*
 * Nothing can have changed since a watched statement last ran (fence_held.c,
 * "What changed"). A library built without deprecated APIs has no
 * sqlite3_expired: the probe runs then.
 */
static inline int
fenceChangesNone(const FenceConn *conn, int mode)
{
	const FenceChanges *c = &conn->changes;

	return c->pProbe != NULL && conn->txn.bEnlisted &&
		(mode == FENCE_POLL_GUARD || c->nBeginSeen == conn->enlist.nBegin) &&
		c->nPlannedSeen == c->nPlanned &&
		sqlite3_api->expired != NULL && !sqlite3_expired(c->pProbe);
}

/*
 * The change detector's generation now (what a caller learnt in an earlier
 * one no longer holds): fenceChangesNone's shortcut, else fenceChangesRun,
 * whose *pRc is SQLITE_OK or says the probe could not run (the caller
 * refuses).
 */
#define FENCE_CHANGES_GEN(conn, mode, pRc) \
	(fenceChangesNone((conn), (mode)) ? (*(pRc) = SQLITE_OK, (conn)->changes.gen) : \
	 fenceChangesRun((conn), (pRc)))
void		fenceChangesBump(FenceConn *conn);
extern const FenceAllocator fenceSqliteAllocator;

/* fence_loaded()'s pointer type: only C code can make such a value (fence_init.c) */
#define FENCE_CONN_POINTER "fence.FenceConn"
/* An SQL function and its flags, for sqlite3_create_function_v2 (fence_init.c). */
typedef struct FenceFunction
{
	const char *name;
	int			nArg;
	int			flags;
	void		(*xFunc) (sqlite3_context *, int, sqlite3_value **);
} FenceFunction;

/*
 * Flags by role (STYLE.md C6): functions that applications call and that
 * change the fence are DIRECTONLY, so a view or trigger in the schema cannot
 * move a fence; fence_current only reads and is INNOCUOUS; the guards must
 * be reachable from our schema triggers and so carry neither, which means
 * they refuse to run under PRAGMA trusted_schema=OFF: protected tables then
 * fail closed ("unsafe use of fence_guard_write()").
 */
#define FENCE_APP_WRITES   (SQLITE_UTF8 | SQLITE_DIRECTONLY)
#define FENCE_APP_READS    (SQLITE_UTF8 | SQLITE_INNOCUOUS)
#define FENCE_FROM_TRIGGER (SQLITE_UTF8)

/* fence.c: its SQL functions, in the order they are registered; their count */
int			fenceCoreFunctions(const FenceFunction **pa);
/* fence.c, for fence_lease.c: fence_check's validation and errors */
int			fenceArgText(sqlite3_context *ctx, sqlite3_value *v, const char **pz, int *pn,
						 int bHolder);
int			fenceArgToken(sqlite3_context *ctx, sqlite3_value *v, sqlite3_int64 *pToken);
void		fenceResultError(sqlite3_context *ctx, const char *zMsg, int rc);

/*
 * fence's own tables, as SQLite stores their definitions in sqlite_schema
 * (fence creates them with these columns; fenceOwnTableShape compares).
 */
#define FENCE_TOKENS_COLUMNS \
	"(resource TEXT PRIMARY KEY NOT NULL, " \
	"token INTEGER NOT NULL CHECK (typeof(token) = 'integer' AND token >= 0), " \
	"updated_at TEXT NOT NULL) WITHOUT ROWID"
#define FENCE_LEASES_COLUMNS \
	"(resource TEXT PRIMARY KEY NOT NULL, " \
	"holder TEXT NOT NULL CHECK (typeof(holder) = 'text' AND holder <> ''), " \
	"token INTEGER NOT NULL CHECK (typeof(token) = 'integer' AND token >= 1), " \
	"expires_at INTEGER NOT NULL CHECK (typeof(expires_at) = 'integer')) WITHOUT ROWID"
/* uniques: "*" for one resource, else the key column (the name is older) */
#define FENCE_GUARDS_COLUMNS \
	"(id INTEGER PRIMARY KEY, resource TEXT NOT NULL, keyed INTEGER NOT NULL, " \
	"uniques TEXT NOT NULL)"
int			fenceOwnTableShape(sqlite3 *db, const char *zTable, char **pzErr);

/*
 * A function kept out of its caller, so that the caller's fast path stays
 * small; FENCE_COLD also says it runs rarely (errors, refusals, a first
 * look at a schema), which moves it and the branches that call it away
 * from the code every transaction runs. At one row per transaction what
 * costs time is less the instructions than how many cache lines of code
 * they are spread over (BENCHMARKS.md).
 */
#if defined(__GNUC__)
#define FENCE_NOINLINE __attribute__((noinline))
#define FENCE_COLD __attribute__((cold, noinline))
#else
#define FENCE_NOINLINE
#define FENCE_COLD
#endif

/*
 * Written into every guard trigger fence_protect makes (as a comment in its
 * WHEN clause); a guard whose triggers lack it was made by an older fence
 * (with REPLACE look-ups, or passing other arguments to the guard
 * functions), and is refused until protected again.
 */
#define FENCE_GUARD_SHAPE "fence guard shape 5"

/* fence_stats.c (the accept path's inline part: fence_stats.h) */
int			fenceStatsRegister(sqlite3 *db, FenceConn *conn);
int			fenceNowMs(sqlite3_int64 *pNow);
void		fenceStatsFree(FenceConn *conn);

/* fence_schema_read.c */
int			fenceReadInt(sqlite3 *db, const char *zSql, const char *z1, const char *z2);
int			fenceIsRowidAlias(sqlite3 *db, const char *zTable, const char *zColumn);
int			fenceReplaceReaches(sqlite3 *db, const char *zTable, const char *zKey);
int			fenceGuardIdIn(sqlite3 *db, const char *zSchema, sqlite3_int64 id, int *pbHolds);

/* fence_guard.c */
int			fenceGuardAdmit(sqlite3_context *ctx, FenceConn *conn, sqlite3_value *idArg,
							const char **pzRes, int *pnRes, int bKeyed);
void		fenceGuardTxnEnded(FenceConn *conn);
void		fenceGuardRolledBack(FenceConn *conn);
void		fenceGuardFree(FenceConn *conn);
void		fenceGuardFinalize(FenceConn *conn);


/* fence_protect.c */
void		fenceProtectFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void		fenceUnprotectFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv);

/*
 * The entry point (the file name fence.so gives its name), the one symbol
 * fence.so exports: the Makefile builds with -fvisibility=hidden, so that
 * fence's internal calls go direct rather than through the PLT, and no name
 * of fence's can clash with another extension's in the same process.
 */
#ifdef _WIN32
#define FENCE_EXPORT __declspec(dllexport)
#else
#define FENCE_EXPORT __attribute__((visibility("default")))
#endif
FENCE_EXPORT int sqlite3_fence_init(sqlite3 *db, char **pzErrMsg,
							   const sqlite3_api_routines *pApi);

/*
 * Out of memory while fence tracked the transaction's fences: it fails
 * closed, refusing every accept and guard and its commit until it ends
 * (SQLITE_ERROR with this message: Python's MemoryError would drop it).
 */
#define FENCE_BROKEN_MSG \
	"fence: out of memory tracking this transaction's fences; roll it back and retry"

/*
 * A guard ran from inside fence's own write of fence_tokens (a trigger on
 * fence_tokens that writes a protected table): refused, never recursed.
 */
#define FENCE_REENTERED_MSG \
	"fence refused to re-enter itself: a trigger on fence_tokens wrote a protected " \
	"table; drop that trigger"

/* A table of the user's hides fence's own virtual tables in main. */
#define FENCE_SHADOWED_MSG \
	"fence refused: a table main.fence_held or temp.fence_enlist hides fence's own; " \
	"rename or drop it"

/* Internal return codes of fence_accept.c and fence.c, turned into the messages above. */
#define FENCE_RC_BROKEN    (-1)
#define FENCE_RC_REENTERED (-2)
#define FENCE_RC_SHADOWED  (-3)

/* The message of fence's own code rc, else zMsg. */
static inline const char *
fenceRcMessage(int rc, const char *zMsg)
{
	return rc == FENCE_RC_BROKEN ? FENCE_BROKEN_MSG : rc == FENCE_RC_REENTERED ?
		FENCE_REENTERED_MSG : rc == FENCE_RC_SHADOWED ? FENCE_SHADOWED_MSG : zMsg;
}

/* Result codes, documented in README.md. */
#define FENCE_RC_STALE   SQLITE_CONSTRAINT_FUNCTION
#define FENCE_RC_MISSING SQLITE_CONSTRAINT_FUNCTION
#define FENCE_RC_INVALID SQLITE_ERROR

#endif							/* FENCE_SQLITE_H */
