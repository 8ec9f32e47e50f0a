/*
 * fence_guard.c
 *
 * What every guard call must establish before it may accept a token or pass
 * a write, besides the token itself: that the trigger calling it is one that
 * fence_protect() made in this connection's main database, that a write it
 * refuses can be undone, and that a row a REPLACE deletes meets the DELETE
 * guard.
 *
 *   the guard id   Each fence_protect() records a random 62-bit guard id in
 *                  main.fence_guards with the resource (or prefix and key
 *                  column), and writes the id into its triggers' names
 *                  ("fence:<id>:insert") and calls. A call is admitted when
 *                  main.fence_guards holds the id with the same resource,
 *                  every trigger of the guard is of this fence's shape
 *                  (FENCE_GUARD_SHAPE), and no attached database has a
 *                  trigger of the id (a copy of the file or of its schema
 *                  attached beside it: the calling trigger could be the
 *                  copy's). A table in an
 *                  attached file therefore cannot be written through that
 *                  schema name.
 *   the journal    With journal_mode=OFF SQLite cannot undo a failed
 *                  statement, and with MEMORY a killed process leaves its
 *                  rows: a guard refuses in either mode, before the
 *                  statement's first row is written (every insert, update
 *                  and delete has a BEFORE guard trigger).
 *   REPLACE        A per-row table whose rows a REPLACE can delete across
 *                  keys (fenceReplaceReaches, decided at admission) is
 *                  written only with recursive_triggers on, which fires the
 *                  BEFORE DELETE guard for each such row.
 *
 * Provides fenceGuardAdmit (the check above, for fence.c's guard
 * functions) and the hooks fenceGuardTxnEnded, fenceGuardRolledBack and
 * fenceGuardFree. Calls fence_schema_read.c (the reads of the schema) and
 * fence_held.c (fenceHeldConnect, which finalizes cached statements at
 * close; FENCE_CHANGES_GEN and fenceChangesBump, the change detector);
 * fenceGuardMemoForget is inline in fence_sqlite.h.
 *
 * Cost: the admission is checked once per guard id per generation of the
 * change detector (fence_held.c, "What changed"), which moves on any
 * schema or setting change, and kept in FenceConn; after a rollback of a
 * transaction that admitted a guard, admission starts over. The journal
 * check is a C call per row once the journal is open; before that (the
 * first row of a transaction in a rollback-journal mode) a cached PRAGMA.
 * recursive_triggers is read again only in a new generation.
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

static const char journalModeSql[] = "PRAGMA main.journal_mode";

FENCE_COLD static void
refuse(sqlite3_context *ctx, int rc, char *zMsg)
{
	if (zMsg == NULL)
	{
		sqlite3_result_error_nomem(ctx);
		return;
	}
	sqlite3_result_error(ctx, fenceRcMessage(rc, zMsg), -1);
	sqlite3_result_error_code(ctx, fenceErrorCode(rc));	/* never a code <= 0 */
	sqlite3_free(zMsg);
}

static void
forgetAdmitted(FenceConn *conn)
{
	int			i;

	for (i = 0; i < conn->guard.nGuard; i++)
		sqlite3_free(conn->guard.aGuard[i].zResource);
	conn->guard.nGuard = 0;
	fenceGuardMemoForget(conn);
}

void
fenceGuardFinalize(FenceConn *conn)
{
	sqlite3_finalize(conn->guard.pJournalMode);
	conn->guard.pJournalMode = NULL;
}

void
fenceGuardFree(FenceConn *conn)
{
	forgetAdmitted(conn);
	sqlite3_free(conn->guard.aGuard);
	conn->guard.aGuard = NULL;
	conn->guard.nGuardAlloc = 0;
}

/*
 * The first call of guard id in a schema generation: is it fence's? zRes
 * NULL: the call names no resource (a one-resource guard), and the one
 * recorded for id is taken. Returns the entry made, or NULL with an error
 * set.
 */
FENCE_COLD static const FenceGuardSeen *
admitNew(sqlite3_context *ctx, FenceConn *conn, sqlite3_int64 id,
		 const char *zRes, int nRes, int bKeyed)
{
	sqlite3    *db = conn->db;
	sqlite3_stmt *stmt = NULL;
	int			ok = 0;
	int			rc;
	int			i;
	char	   *zShape = NULL;
	char	   *zOwn = NULL;
	int			bNeedsRecursive = 0;
	FenceGuardSeen *g;

	rc = fenceOwnTableShape(db, "fence_guards", &zShape);
	if (rc != SQLITE_OK)
	{
		/* a fence_guards fence did not make cannot vouch for a guard */
		refuse(ctx, rc, zShape);
		return NULL;
	}
	if (sqlite3_table_column_metadata(db, "main", "fence_guards", "id",
									  NULL, NULL, NULL, NULL, NULL) != SQLITE_OK)
		rc = SQLITE_DONE;
	else
	{
		/* the record, the table, and how many of the guard's triggers are of this shape */
		rc = sqlite3_prepare_v2(db,
								"SELECT g.resource, g.keyed, g.uniques, s.tbl_name, "
								"(SELECT count(*) - sum(instr(t.sql, ?2) > 0) "
								"FROM main.sqlite_schema AS t WHERE t.type = 'trigger' AND "
								"substr(t.name, 1, length(g.id) + 7) = 'fence:' || g.id || ':'), "
								"instr(s.sql, 'OLD.\"' || replace(g.uniques, '\"', '\"\"') || '\"') > 0 "
								"FROM main.fence_guards AS g "
								"JOIN main.sqlite_schema AS s ON s.type = 'trigger' "
								"AND s.name = 'fence:' || g.id || ':delete' WHERE g.id = ?1",
								-1, &stmt, NULL);
		if (rc == SQLITE_OK)
		{
			sqlite3_bind_int64(stmt, 1, id);
			sqlite3_bind_text(stmt, 2, FENCE_GUARD_SHAPE, -1, SQLITE_STATIC);
			rc = sqlite3_step(stmt);
		}
	}
	if (rc == SQLITE_DONE)
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: guard %lld is not in main.fence_guards; "
							   "write the table with its file opened as main, and protect it "
							   "there if its schema was copied", (long long) id));
	else if (rc != SQLITE_ROW)
		refuse(ctx, rc, sqlite3_mprintf("fence guard %lld: cannot read main.fence_guards: %s",
										(long long) id, sqlite3_errmsg(db)));
	else if (sqlite3_column_int(stmt, 1) != bKeyed ||
			 (zRes != NULL && (sqlite3_column_bytes(stmt, 0) != nRes ||
							   memcmp(sqlite3_column_text(stmt, 0), zRes, (size_t) nRes) != 0)))
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: guard %lld was made for %s \"%s\", not "
							   "the one this call names; run fence_protect again", (long long) id,
							   sqlite3_column_int(stmt, 1) ? "resource prefix" : "resource",
							   (const char *) sqlite3_column_text(stmt, 0)));
	else if (sqlite3_column_int(stmt, 4) != 0)
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: the guard of \"%s\" was made by an "
							   "earlier fence; run fence_protect on it again",
							   (const char *) sqlite3_column_text(stmt, 3)));
	else if ((zOwn = sqlite3_mprintf("%s", (const char *) sqlite3_column_text(stmt, 0))) == NULL)
		sqlite3_result_error_nomem(ctx);
	else
	{
		/*
		 * A per-row guard: fence_guards.uniques names the key column as
		 * fence_protect found it. A RENAME COLUMN rewrites the triggers but
		 * not that record, and another column may take the old name (a
		 * migration that renames the key, then the primary key to the key's
		 * old name): unless the delete trigger still names the recorded
		 * column, take the table as one a REPLACE can reach across keys.
		 */
		ok = 1;
		bNeedsRecursive = bKeyed &&
			(sqlite3_column_int(stmt, 5) == 0 ||
			 fenceReplaceReaches(db, (const char *) sqlite3_column_text(stmt, 3),
								 (const char *) sqlite3_column_text(stmt, 2)));
	}
	sqlite3_finalize(stmt);
	if (!ok)
		goto fail;
	zRes = zOwn;
	nRes = (int) strlen(zOwn);

	/* a copy of this file (or of its schema) attached beside it carries the same id */
	for (i = 2; sqlite3_db_name(db, i) != NULL; i++)
	{
		int			bHolds;

		rc = fenceGuardIdIn(db, sqlite3_db_name(db, i), id, &bHolds);
		if (rc != SQLITE_OK)
		{
			refuse(ctx, rc, sqlite3_mprintf("fence guard %lld: cannot read \"%s\".sqlite_schema: %s",
											(long long) id, sqlite3_db_name(db, i),
											sqlite3_errmsg(db)));
			goto fail;
		}
		if (bHolds)
		{
			refuse(ctx, FENCE_RC_INVALID,
				   sqlite3_mprintf("fence guard refused: guard %lld is in both main and "
								   "attached \"%s\", so the table written may be the attached "
								   "one; detach it", (long long) id, sqlite3_db_name(db, i)));
			goto fail;
		}
	}

	if (conn->guard.nGuard == conn->guard.nGuardAlloc)
	{
		int			nAlloc = conn->guard.nGuardAlloc ? conn->guard.nGuardAlloc * 2 : 8;
		FenceGuardSeen *a = sqlite3_realloc64(conn->guard.aGuard,
											  sizeof(*a) * (sqlite3_uint64) nAlloc);

		if (a == NULL)
		{
			sqlite3_result_error_nomem(ctx);
			goto fail;
		}
		conn->guard.aGuard = a;
		conn->guard.nGuardAlloc = nAlloc;
	}
	g = &conn->guard.aGuard[conn->guard.nGuard];
	g->zResource = zOwn;
	g->id = id;
	g->nResource = nRes;
	g->bKeyed = bKeyed;
	g->bNeedsRecursive = bNeedsRecursive;
	conn->guard.nGuard++;
	conn->guard.bAdmittedInTxn = 1;
	return g;

fail:
	sqlite3_free(zOwn);
	return NULL;
}

/*
 * With journal_mode=OFF a refused statement's earlier rows would stay, and
 * with MEMORY a process killed in the middle of a transaction leaves what
 * it wrote in the file (no journal survives it to roll back): both are
 * refused for a database in a file. The journal file being open (a real
 * file: an in-memory journal has no xLock) means a journalling mode on
 * disk (or WAL) is in force and this transaction has written a page; then
 * the mode can no longer change until it ends. Otherwise ask.
 */
/* Is main no file (":memory:", a temporary or a deserialized database)? */
static int
mainInMemory(sqlite3 *db)
{
	const char *zFile = sqlite3_db_filename(db, "main");
	sqlite3_vfs *pVfs = NULL;

	sqlite3_file_control(db, "main", SQLITE_FCNTL_VFS_POINTER, &pVfs);
	return zFile == NULL || zFile[0] == '\0' || (pVfs && strcmp(pVfs->zName, "memdb") == 0);
}

static int
journalWorks(sqlite3_context *ctx, FenceConn *conn)
{
	sqlite3_file *pJournal = NULL;
	const unsigned char *zMode;
	int			rc;

	/* once seen open in this transaction, the mode cannot change until it ends */
	if (conn->guard.bJournalChecked)
		return 1;
	/* NULL: main, without a look-up by name */
	if (sqlite3_file_control(conn->db, NULL, SQLITE_FCNTL_JOURNAL_POINTER,
							 &pJournal) == SQLITE_OK &&
		pJournal != NULL && pJournal->pMethods != NULL && pJournal->pMethods->xLock != NULL)
	{
		conn->guard.bJournalChecked = conn->txn.bEnlisted;	/* reset when it ends */
		return 1;
	}
	if (conn->guard.pJournalMode == NULL)
	{
		rc = fenceHeldConnect(conn);
		if (rc == SQLITE_OK)
			rc = sqlite3_prepare_v3(conn->db, journalModeSql, -1, SQLITE_PREPARE_PERSISTENT,
									&conn->guard.pJournalMode, NULL);
		if (rc != SQLITE_OK)
		{
			refuse(ctx, rc, sqlite3_mprintf("fence guard: cannot read PRAGMA journal_mode: %s",
											sqlite3_errmsg(conn->db)));
			return 0;
		}
	}
	rc = sqlite3_step(conn->guard.pJournalMode);
	zMode = rc == SQLITE_ROW ? sqlite3_column_text(conn->guard.pJournalMode, 0) : NULL;
	if (rc == SQLITE_ROW && zMode != NULL && sqlite3_stricmp((const char *) zMode, "off") != 0 &&
		(sqlite3_stricmp((const char *) zMode, "memory") != 0 || mainInMemory(conn->db)))
	{
		sqlite3_reset(conn->guard.pJournalMode);
		return 1;
	}
	if (rc == SQLITE_ROW && zMode != NULL)
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: journal_mode=%s cannot undo a refused "
							   "or interrupted write; use DELETE, TRUNCATE, PERSIST or WAL",
							   zMode));
	else
		refuse(ctx, rc == SQLITE_ROW ? SQLITE_NOMEM : rc,
			   sqlite3_mprintf("fence guard: cannot read PRAGMA journal_mode: %s",
							   sqlite3_errmsg(conn->db)));
	sqlite3_reset(conn->guard.pJournalMode);
	return 0;
}

/* Guard id admitted (with this resource or prefix, when the call names one), or NULL. */
static inline const FenceGuardSeen *
findAdmitted(const FenceConn *conn, sqlite3_int64 id, const char *zRes, int nRes, int bKeyed)
{
	int			i;

	for (i = 0; i < conn->guard.nGuard; i++)
	{
		const FenceGuardSeen *g = &conn->guard.aGuard[i];

		if (g->id == id && g->bKeyed == bKeyed &&
			(zRes == NULL || (g->nResource == nRes &&
							  memcmp(g->zResource, zRes, (size_t) nRes) == 0)))
			return g;
	}
	return NULL;
}

/*
 * Is PRAGMA recursive_triggers on? Only then does a REPLACE fire the BEFORE
 * DELETE guard for each row it deletes. SQLite compiles that choice into
 * each statement as it prepares it, and setting the pragma (like every
 * flag pragma) expires every prepared statement of the connection, which
 * moves the change detector's generation. But SQLite applies the setting
 * when it prepares the pragma and expires the statements only when it runs
 * it: a pragma cancelled at its first step (a progress handler's timeout,
 * sqlite3_interrupt) changes the setting unseen. So the value is also read
 * again in each transaction (tests/sqlite_replace.py, "cancelled"); a
 * cancel inside a transaction after its first guarded write stays unseen
 * (docs/sqlite-guarantees.md). Reading costs a prepare, about 9,000
 * instructions, once per transaction of a table that needs the setting.
 */
static int
recursiveTriggersOn(FenceConn *conn, int *pbOn)
{
	sqlite3_stmt *p = NULL;
	int			rc;
	unsigned	gen = FENCE_CHANGES_GEN(conn, FENCE_POLL_GUARD, &rc);

	if (rc == SQLITE_OK && (gen != conn->guard.recursiveGen || !conn->txn.bEnlisted ||
							conn->enlist.nBegin != conn->guard.recursiveTxn))
	{
		conn->guard.recursiveTxn = conn->enlist.nBegin;
		rc = sqlite3_prepare_v2(conn->db, "PRAGMA recursive_triggers", -1, &p, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_step(p) == SQLITE_ROW ? SQLITE_OK : sqlite3_errcode(conn->db);
		conn->guard.bRecursive = rc == SQLITE_OK && sqlite3_column_int(p, 0) != 0;
		conn->guard.recursiveGen = rc == SQLITE_OK ? gen : 0;
		sqlite3_finalize(p);
	}
	*pbOn = conn->guard.bRecursive;
	return rc;
}

/*
 * A per-row table whose rows a REPLACE can delete across keys
 * (fenceReplaceReaches) is written only with recursive_triggers on, which
 * routes every such row through the BEFORE DELETE guard: that row's
 * resource needs a fence of its own (SPEC.md, "Precise points"). Returns 1,
 * or 0 with an error set.
 */
static FENCE_NOINLINE int
recursiveRequired(sqlite3_context *ctx, FenceConn *conn)
{
	int			bOn = 0;
	int			rc = recursiveTriggersOn(conn, &bOn);

	if (rc != SQLITE_OK)
		refuse(ctx, rc, sqlite3_mprintf("fence guard: cannot read PRAGMA recursive_triggers: %s",
										sqlite3_errmsg(conn->db)));
	else if (!bOn)
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: a REPLACE on this table can delete another "
							   "key's row; run PRAGMA recursive_triggers=ON on the connection"));
	return rc == SQLITE_OK && bOn;
}

/* Admitted guard g: the call goes on, with g's resource or prefix. */
static inline int
admitted(sqlite3_context *ctx, FenceConn *conn, const FenceGuardSeen *g,
		 const char **pzRes, int *pnRes)
{
	if (g->bNeedsRecursive && !recursiveRequired(ctx, conn))
		return 0;
	*pzRes = g->zResource;
	*pnRes = g->nResource;
	return 1;
}

/*
 * The checks every guard call makes before looking at tokens: the id
 * argument is a guard fence_protect recorded in main for this resource (or
 * prefix), a refusal can be undone, and a row a REPLACE deletes meets the
 * DELETE guard. *pzRes NULL: the call names no resource (a one-resource
 * guard's), and *pzRes, *pnRes are set to the one recorded for the guard;
 * they stay valid until admission is forgotten. Returns 1, or 0 with an
 * error set.
 */
int
fenceGuardAdmit(sqlite3_context *ctx, FenceConn *conn, sqlite3_value *idArg,
				const char **pzRes, int *pnRes, int bKeyed)
{
	const FenceGuardSeen *g;
	const char *zRes = *pzRes;
	int			nRes = *pnRes;
	sqlite3_int64 id;
	unsigned	gen;
	int			rc;

	if (sqlite3_value_type(idArg) != SQLITE_INTEGER)
	{
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: the trigger passed no guard id; run "
							   "fence_protect on the table again"));
		return 0;
	}
	if (!journalWorks(ctx, conn))
		return 0;
	id = sqlite3_value_int64(idArg);
	gen = FENCE_CHANGES_GEN(conn, FENCE_POLL_GUARD, &rc);
	if (rc != SQLITE_OK)
	{
		refuse(ctx, rc, sqlite3_mprintf("fence guard: cannot read the schema: %s",
										sqlite3_errmsg(conn->db)));
		return 0;
	}
	if (gen != conn->guard.admittedGen)
	{
		forgetAdmitted(conn);
		conn->guard.admittedGen = gen;
	}
	g = findAdmitted(conn, id, zRes, nRes, bKeyed);
	if (g == NULL)
		g = admitNew(ctx, conn, id, zRes, nRes, bKeyed);
	return g != NULL && admitted(ctx, conn, g, pzRes, pnRes);
}

/* A transaction ended. */
void
fenceGuardTxnEnded(FenceConn *conn)
{
	fenceGuardMemoForget(conn);
	conn->guard.bAdmittedInTxn = 0;
	conn->guard.bJournalChecked = 0;
}

/*
 * A transaction, or part of one, rolled back. A guard admitted in it was
 * checked against a schema that may have just been rolled back too (a
 * trigger dropped and then restored), which the probe's count need not
 * show: a new generation.
 */
void
fenceGuardRolledBack(FenceConn *conn)
{
	if (conn->guard.bAdmittedInTxn)
		fenceChangesBump(conn);
}
