/*
 * fence_cache.c
 *
 * What a connection may remember of main.fence_tokens from one of its
 * transactions to the next, so that a transaction presenting the token it
 * presented last time reads nothing: the common case of a lock holder that
 * writes many short transactions at one token.
 *
 * Provides: FenceCache and fenceCacheGet (fence_sqlite.h), fenceCacheSet,
 * fenceCacheForgetOne, fenceCacheTxnBegin, fenceCacheWrote,
 * fenceCacheForget, fenceCacheTxnEnd, fenceCacheRolledBackTo,
 * fenceCacheFree. Calls no other file of sqlite_ext (fenceCacheTxnBegin's
 * caller passes the change detector's generation).
 *
 * The memory is a table of hints (FenceHint, FENCE_HINTS of them, one per
 * hash slot): what this connection last read or wrote as each resource's
 * highest. An entry is a verdict, not only a hint, while its generation is
 * the connection's (FenceCache.gen);
 * raising the generation forgets every entry at once. A transaction uses
 * verdicts only if, at its first accept (fenceCacheTxnBegin), all of these
 * hold, and otherwise raises the generation first:
 *
 *   the data version  SQLITE_FCNTL_DATA_VERSION of main (the pager's change
 *                     counter, which moves on every commit this connection
 *                     makes and whenever it finds, on taking a read lock,
 *                     that another connection or process committed) is
 *                     the value recorded when this connection's last fenced
 *                     transaction committed (fenceCacheTxnEnd). So nothing
 *                     but that transaction has changed the file since; the
 *                     read is made after main's read lock is taken, so the
 *                     snapshot the transaction reads is the one the version
 *                     describes.
 *   that transaction  changed fence_tokens only through fence's own
 *                     advances and resets, whose results the entries hold,
 *                     and undid none of them: fence's own undo of a failed
 *                     statement forgets (fence_accept.c), and so does a ROLLBACK TO
 *                     or a statement's rollback after fence wrote
 *                     fence_tokens (fenceCacheRolledBackTo: fence_held.c
 *                     hears every savepoint). A transaction that rolls back
 *                     is not recorded.
 *   the schema        is the one the cache was filled under: the change
 *                     detector's generation (FenceChanges.gen, fence_held.c)
 *                     is the one recorded (FenceCache.schemaGen); it also
 *                     moves on ATTACH and sqlite3_deserialize, which
 *                     replace main's pager and so restart its data
 *                     version.
 *   nothing else      no other database is attached (fence then takes
 *                     main's write lock for every accept, fence_accept.c) and main
 *                     is not in shared-cache mode.
 *
 * Trust: the application's own writes of fence_tokens (UPDATE, DELETE,
 * INSERT, or a trigger of its own on the table) inside a fenced transaction
 * are not seen: fence trusts them not to happen (docs/trust.md). Such a
 * write made in a transaction of its own moves the data version, and is
 * seen.
 *
 * A transaction that began without verdicts still records the entries it
 * reads: they describe its snapshot plus its own changes, which is what
 * the file holds once it commits, so the next transaction can use them.
 *
 * Concurrency: all of it is per connection. Another connection or process
 * can change fence_tokens only by committing, which moves main's data
 * version before this connection's next transaction reads anything; inside
 * a transaction, what this connection reads is its snapshot (see fence_accept.c's
 * head for why an equal accept's snapshot keeps a later write from
 * committing after a newer token).
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

/*
 * The pager's change counter of main. NULL names main (as documented)
 * without a look-up of the name: a third of the call's cost.
 */
static int
dataVersion(FenceConn *conn, unsigned *pVersion)
{
	*pVersion = 0;
	return sqlite3_file_control(conn->db, NULL, SQLITE_FCNTL_DATA_VERSION, pVersion) ==
		SQLITE_OK;
}

/*
 * The first accept of an enlisted transaction, with main read-locked: may
 * remembered entries be verdicts in it? Not unless the caller says so
 * (bUsable: its schema check passed and main is not in shared-cache mode),
 * nor with another database attached. Entries read from here on carry the
 * generation when it may, 0 (never a verdict) when not.
 */
void
fenceCacheTxnBegin(FenceConn *conn, int bUsable, unsigned schemaGen)
{
	FenceCache *c = &conn->cache;
	unsigned	version;
	int			bOn;

	if (c->txn != FENCE_CACHE_TXN_UNKNOWN)
		return;
	bOn = bUsable && sqlite3_db_name(conn->db, 2) == NULL;
	if (!(bOn && c->bRecorded && schemaGen == c->schemaGen &&
		  dataVersion(conn, &version) && version == c->version))
		fenceCacheForget(conn);
	c->schemaGen = schemaGen;
	c->bRecorded = 0;			/* until this transaction commits */
	c->txn = bOn ? FENCE_CACHE_TXN_ON : FENCE_CACHE_TXN_OFF;
}

/* Nothing remembered is a verdict any more. */
void
fenceCacheForget(FenceConn *conn)
{
	conn->cache.gen++;
	if (conn->cache.gen == 0)
		conn->cache.gen = 1;	/* 0 marks an entry that is never a verdict */
	conn->cache.bRecorded = 0;
}

/*
 * fence wrote fence_tokens in this transaction (an advance, a reset): a
 * ROLLBACK TO from now on may undo what an entry holds.
 */
void
fenceCacheWrote(FenceConn *conn)
{
	conn->cache.bTxnWrote = 1;
}

/*
 * The transaction ended (bCommitted: it committed, fence tracking all it
 * held). One that took verdicts and committed makes its entries true of
 * the file as it now is: record main's data version after the commit
 * (xCommit comes after the pager's commit). Anything else forgets.
 */
void
fenceCacheTxnEnd(FenceConn *conn, int bCommitted)
{
	FenceCache *c = &conn->cache;
	unsigned	version;

	if (c->txn != FENCE_CACHE_TXN_UNKNOWN)
	{
		if (bCommitted && c->txn == FENCE_CACHE_TXN_ON && dataVersion(conn, &version))
		{
			c->version = version;
			c->bRecorded = 1;
		}
		else
			fenceCacheForget(conn);
	}
	c->txn = FENCE_CACHE_TXN_UNKNOWN;
	c->bTxnWrote = 0;
}

/*
 * ROLLBACK TO (or a failed statement's rollback): if fence wrote
 * fence_tokens in this transaction, an entry may hold what was just undone.
 */
void
fenceCacheRolledBackTo(FenceConn *conn)
{
	if (conn->cache.bTxnWrote)
		fenceCacheForget(conn);
}

/*
 * Remember what was read of z (out of memory: remember nothing, it is a
 * hint), as a verdict for later transactions when this one may take them.
 */
void
fenceCacheSet(FenceConn *conn, const char *z, int n, int bHas, sqlite3_int64 highest)
{
	FenceHint  *h = &conn->cache.aHint[fenceCacheSlot(z, n)];

	h->gen = 0;
	if (h->z == NULL || h->n != n || memcmp(h->z, z, (size_t) n) != 0)
	{
		sqlite3_free(h->z);
		h->z = sqlite3_malloc(n > 0 ? n : 1);
		if (h->z == NULL)
			return;
		memcpy(h->z, z, (size_t) n);
		h->n = n;
	}
	h->bHas = bHas;
	h->highest = highest;
	h->gen = conn->cache.txn == FENCE_CACHE_TXN_ON ? conn->cache.gen : 0;
}

/* Forget what was remembered of z (fence_reset). */
void
fenceCacheForgetOne(FenceConn *conn, const char *z, int n)
{
	FenceHint  *h = &conn->cache.aHint[fenceCacheSlot(z, n)];

	if (h->z != NULL && h->n == n && memcmp(h->z, z, (size_t) n) == 0)
		h->gen = 0;
}

void
fenceCacheFree(FenceConn *conn)
{
	int			i;

	for (i = 0; i < FENCE_HINTS; i++)
	{
		sqlite3_free(conn->cache.aHint[i].z);
		conn->cache.aHint[i].z = NULL;
	}
}
