/*
 * fence_guard.c
 *
 * What every guard call must establish before it may accept a token or pass
 * a write, besides the token itself: that the trigger calling it is one that
 * fence_protect() made in this connection's main database, and that a write
 * it refuses can be undone.
 *
 *   the guard id   Each fence_protect() records a random 62-bit guard id in
 *                  main.fence_guards with the resource (or prefix) and the
 *                  table's UNIQUE indexes, and writes the id into its
 *                  triggers' names ("fence:<id>:insert") and calls. A call
 *                  is admitted when main.fence_guards holds the id with the
 *                  same resource, no attached database also holds it (a copy
 *                  of the file attached beside it: the calling trigger could
 *                  be the copy's), the table's UNIQUE indexes are the ones
 *                  the triggers were written for (REPLACE through a newer
 *                  one would delete rows unchecked), and no object in any
 *                  schema other than fence's own guard triggers names a
 *                  guard function (SQL cannot compute a function's name, so
 *                  a view or trigger that could call one must spell it),
 *                  and, for a table checked AFTER INSERT (its key is the
 *                  INTEGER PRIMARY KEY), no other trigger on it in main or
 *                  temp may RAISE(IGNORE) or run AFTER INSERT: either can
 *                  end the statement with the row written before that
 *                  check runs (RAISE(IGNORE), RAISE(FAIL), a conflict of
 *                  its body under INSERT OR FAIL).
 *                  A table in an attached file therefore cannot be written
 *                  through that schema name: its guard id is in the file's
 *                  fence_tokens' neighbour, not in main's.
 *   the journal    With PRAGMA journal_mode=OFF SQLite cannot undo a failed
 *                  statement: the rows it wrote before the refusal stay. A
 *                  guard refuses in that mode, before the statement's first
 *                  row is written (every insert, update and delete has a
 *                  BEFORE guard trigger).
 *
 * Cost: the admission is checked once per guard id per schema generation and
 * kept in FenceConn. A schema change is seen by the statement that enlists
 * each transaction (fenceSchemaCheck): SQLite prepares it again when the
 * schema changed, and only then are the schema cookies of main and temp read
 * (two cached PRAGMA statements). With another database attached the check
 * is made once per transaction; after a rollback of a transaction that
 * admitted a guard, admission starts over. The journal
 * check is a C call per row once the journal is open; before that (the
 * first row of a transaction in a rollback-journal mode) a cached PRAGMA.
 *
 * Concurrency: the cache is per connection. Another connection's schema
 * change moves main's cookie, which the next transaction sees; inside a
 * write transaction nobody else can change main's schema.
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

static const char guardProbeMainSql[] = "PRAGMA main.schema_version";
static const char guardProbeTempSql[] = "PRAGMA temp.schema_version";
static const char journalModeSql[] = "PRAGMA main.journal_mode";
static const char schemaProbeSql[] = "SELECT 1 FROM main.sqlite_schema WHERE 0";

FENCE_COLD static void
refuse(sqlite3_context *ctx, int rc, char *zMsg)
{
	if (zMsg == NULL)
	{
		sqlite3_result_error_nomem(ctx);
		return;
	}
	/* a table of the application's hides fence's: say that, not "not an error" */
	sqlite3_result_error(ctx, rc == FENCE_RC_SHADOWED ? FENCE_SHADOWED_MSG : zMsg, -1);

	/*
	 * A statement of ours that ended without its row (SQLITE_DONE: an
	 * authorizer answered SQLITE_IGNORE to a PRAGMA) must not become the
	 * error code: SQLite ends a statement whose function reports
	 * SQLITE_DONE without an error, and the refused write would look done.
	 * Nor may fence's own negative codes (FENCE_RC_SHADOWED...): SQLite
	 * takes a negative error code for no error at all, and the function's
	 * result would be the message, not NULL, which the guard passes.
	 */
	sqlite3_result_error_code(ctx, fenceErrorCode(rc));
	sqlite3_free(zMsg);
}

/*
 * Refuse for a schema read (fence_schema_read.c) that came back blinded or
 * skipped (FENCE_RC_INVALID), ran out of memory, or failed; zCheck says
 * what fence could not check.
 */
FENCE_COLD static void
refuseSchemaRead(sqlite3_context *ctx, sqlite3 *db, int rc, const char *zSchema,
				 const char *zCheck)
{
	if (rc == SQLITE_NOMEM)
		refuse(ctx, rc, NULL);
	else if (rc == FENCE_RC_INVALID)
		refuse(ctx, rc,
			   sqlite3_mprintf("fence guard refused: the schema of \"%s\" read back NULL, so "
							   "it cannot check %s", zSchema, zCheck));
	else
		refuse(ctx, rc, sqlite3_mprintf("fence guard: cannot read the schema of \"%s\" to check "
										"%s: %s", zSchema, zCheck, sqlite3_errmsg(db)));
}

/* Does zHay hold zNeedle, in any case? */
static int
containsNoCase(const char *zHay, const char *zNeedle)
{
	size_t		n = strlen(zNeedle);

	for (; *zHay; zHay++)
		if (sqlite3_strnicmp(zHay, zNeedle, (int) n) == 0)
			return 1;
	return n == 0;
}

/*
 * The UNIQUE indexes of main.zTable, what identifies each: a comma list,
 * sorted by index name, of "index"("column" "collation", ...), an
 * expression column as <expr>. The columns, not only the name: an index
 * dropped and made again under the same name on other columns would be
 * REPLACEd through unchecked. Every name is quoted as SQL quotes an
 * identifier (a " doubled), since names are free text: unquoted, one index
 * named a(u BINARY),b on v read exactly like an index a on u and an index
 * b on v, and the record could not see the one become the other.
 * fenceUniqueSignature reads them first: NULL on error, with *pbBlind 1
 * when a read came back blinded or was skipped.
 */
static char *
uniqueSignatureOf(const FenceUniqueIndexes *ix)
{
	char	   *z = sqlite3_mprintf("%s", "");
	int			i,
				j;

	for (i = 0; z != NULL && i < ix->n; i++)
	{
		char	   *zSig = sqlite3_mprintf("%s%s\"%w\"(", z, i ? "," : "", ix->a[i].zName);

		sqlite3_free(z);
		z = zSig;
		for (j = 0; z != NULL && j < ix->a[i].nCol; j++)
		{
			const FenceIndexColumn *c = &ix->a[i].aCol[j];

			zSig = c->zName ? sqlite3_mprintf("%s%s\"%w\" \"%w\"", z, j ? ", " : "", c->zName,
											  c->zColl) :
				sqlite3_mprintf("%s%s<expr> \"%w\"", z, j ? ", " : "", c->zColl);
			sqlite3_free(z);
			z = zSig;
		}
		zSig = z ? sqlite3_mprintf("%s)", z) : NULL;
		sqlite3_free(z);
		z = zSig;
	}
	return z;
}

char *
fenceUniqueSignature(sqlite3 *db, const char *zTable, int *pbBlind)
{
	FenceUniqueIndexes ix;
	char	   *z;
	int			rc = fenceUniqueIndexesRead(db, zTable, &ix);

	*pbBlind = rc == FENCE_RC_INVALID;
	if (rc != SQLITE_OK)
		return NULL;
	z = uniqueSignatureOf(&ix);
	fenceUniqueIndexesFree(&ix);
	return z;
}

static int
stepInt64(FenceConn *conn, sqlite3_stmt **pp, const char *zSql, sqlite3_int64 *pOut)
{
	int			rc = SQLITE_OK;

	if (*pp == NULL)
	{
		/* the eponymous fence_held finalizes cached statements at close */
		rc = fenceHeldConnect(conn);
		if (rc == SQLITE_OK)
			rc = sqlite3_prepare_v3(conn->db, zSql, -1, SQLITE_PREPARE_PERSISTENT, pp, NULL);
		if (rc != SQLITE_OK)
			return rc;
	}
	rc = sqlite3_step(*pp);
	if (rc == SQLITE_ROW && sqlite3_column_type(*pp, 0) == SQLITE_INTEGER)
	{
		*pOut = sqlite3_column_int64(*pp, 0);
		rc = SQLITE_OK;
	}
	else if (rc == SQLITE_ROW || rc == SQLITE_DONE)
		rc = SQLITE_AUTH;		/* no value: an authorizer ignored the PRAGMA */
	sqlite3_reset(*pp);
	return rc;
}

/* Run the schema probe (prepared once, kept): SQLITE_OK when it ran. */
static int
stepSchemaProbe(FenceConn *conn)
{
	int			rc;

	if (conn->pSchemaProbe == NULL)
	{
		rc = fenceHeldConnect(conn);
		if (rc == SQLITE_OK)
			rc = sqlite3_prepare_v3(conn->db, schemaProbeSql, -1, SQLITE_PREPARE_PERSISTENT,
									&conn->pSchemaProbe, NULL);
		if (rc != SQLITE_OK)
			return rc;
	}
	rc = sqlite3_step(conn->pSchemaProbe);
	sqlite3_reset(conn->pSchemaProbe);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static void
forgetAdmitted(FenceConn *conn)
{
	int			i;

	for (i = 0; i < conn->nGuard; i++)
		sqlite3_free(conn->aGuard[i].zResource);
	conn->nGuard = 0;
	conn->pSchemaStmt = NULL;	/* the next check reads the cookies */
	fenceGuardMemoForget(conn);
}

void
fenceGuardFree(FenceConn *conn)
{
	forgetAdmitted(conn);
	sqlite3_free(conn->aGuard);
	conn->aGuard = NULL;
	conn->nGuardAlloc = 0;
}

/* Databases other than main and temp that this connection has attached. */
static int
attachedCount(sqlite3 *db)
{
	int			i;

	for (i = 2; sqlite3_db_name(db, i) != NULL; i++)
		;
	return i - 2;
}

/*
 * Once per transaction, after it enlisted: is what was admitted (and what
 * the highest-token cache holds) still of the schema it was checked
 * against? The enlisting statement answers for free (fence_held.c): it
 * reads main's schema cookie when it starts, and SQLite prepares it again
 * when main's schema changed (by any connection) or when this connection
 * changed TEMP's, which expires every statement. So when the statement
 * the schema was last checked with ran again without being prepared
 * again, nothing changed; otherwise, and whenever another database is
 * attached or a check inside the transaction is asked for, the cookies of
 * main and temp are read (two cached PRAGMAs) and compared.
 */
int
fenceSchemaCheck(FenceConn *conn)
{
	sqlite3_int64 cookieMain = 0;
	sqlite3_int64 cookieTemp = 0;
	int			rc;

	/*
	 * Checked in this transaction, and no statement reading fence's tables
	 * prepared since: SQLite prepares every guarded statement again after a
	 * schema change, the transaction's own included (a rename, an index
	 * made after its first write), so a guard whose statement was prepared
	 * since reads the schema again (fence_guard.c, admittedByCount).
	 */
	if (conn->bGuardTxnChecked && !conn->bSchemaFresh &&
		conn->nJoinPlanned == conn->nJoinPlannedChecked)
		return SQLITE_OK;
	if (conn->bEnlisted && conn->bEnlistSchemaSame && !conn->bSchemaFresh &&
		attachedCount(conn->db) == 0)
	{
		conn->bGuardTxnChecked = 1;
		conn->nJoinPlannedChecked = conn->nJoinPlanned;
		return SQLITE_OK;
	}
	/*
	 * Joined through fence_join (no enlisting statement ran): a statement
	 * that names main's schema and does nothing else. SQLite checks main's
	 * schema cookie as it starts and prepares it again when the cookie
	 * moved, and TEMP's changes expire it: not prepared again since it last
	 * ran means the schema is the one checked then.
	 */
	if (conn->bEnlisted && attachedCount(conn->db) == 0)
	{
		rc = stepSchemaProbe(conn);
		if (rc != SQLITE_OK)
			return rc;
		{
			int			n = sqlite3_stmt_status(conn->pSchemaProbe,
												SQLITE_STMTSTATUS_REPREPARE, 0);
			int			bSame = conn->pProbeSeen == conn->pSchemaProbe &&
				conn->nProbeSeen == n && conn->pSchemaStmt != NULL;

			/*
			 * Changed: forget what was admitted now, not only once the
			 * cookies below are read. A read of them that fails (an
			 * authorizer blinding or refusing PRAGMA schema_version once)
			 * fails this write; with the admissions kept, the probe,
			 * already seen at its new count, would call the next write's
			 * schema the checked one.
			 */
			if (!bSame)
			{
				forgetAdmitted(conn);
				fenceCacheSchemaChanged(conn);
			}
			conn->pProbeSeen = conn->pSchemaProbe;
			conn->nProbeSeen = n;
			if (bSame)
			{
				conn->bGuardTxnChecked = 1;
				conn->nJoinPlannedChecked = conn->nJoinPlanned;
				return SQLITE_OK;
			}
		}
	}
	rc = stepInt64(conn, &conn->pProbeMain, guardProbeMainSql, &cookieMain);
	if (rc != SQLITE_OK)
		return rc;
	rc = stepInt64(conn, &conn->pProbeTemp, guardProbeTempSql, &cookieTemp);
	if (rc != SQLITE_OK)
		return rc;
	if (cookieMain != conn->cookieMain || cookieTemp != conn->cookieTemp ||
		attachedCount(conn->db) > 0)
	{
		forgetAdmitted(conn);
		conn->cookieMain = cookieMain;
		conn->cookieTemp = cookieTemp;
		fenceCacheSchemaChanged(conn);
	}
	/*
	 * The next transaction's enlisting statement answers, if it is this
	 * one; or the probe does (pSchemaStmt only says then that the cookies
	 * were read with nothing forgotten since).
	 */
	if (conn->bEnlisted && attachedCount(conn->db) == 0 &&
		(conn->pEnlistLast != NULL || conn->pSchemaProbe != NULL))
	{
		sqlite3_stmt *p = conn->pEnlistLast ? conn->pEnlistLast : conn->pSchemaProbe;

		conn->pSchemaStmt = p;
		conn->nSchemaReprepare = sqlite3_stmt_status(p, SQLITE_STMTSTATUS_REPREPARE, 0);
	}
	/* kept until the transaction ends, which only an enlisted one reports */
	conn->bGuardTxnChecked = conn->bEnlisted;
	conn->nJoinPlannedChecked = conn->nJoinPlanned;
	return SQLITE_OK;
}

/*
 * A copy of a trigger's SQL with every string literal emptied ('') and
 * every comment dropped: what is left is SQL fence's generator wrote (or
 * SQLite's RENAME rewrote), identifiers included. Free text (an index name
 * in the RAISE message's record, a resource prefix) lives only in literals,
 * so it cannot pose as a look-up. NULL when out of memory.
 */
static char *
sqlWithoutLiterals(const char *zSql)
{
	size_t		n = strlen(zSql);
	char	   *zOut = sqlite3_malloc64(n + 1);
	char	   *o = zOut;
	const char *z = zSql;

	if (zOut == NULL)
		return NULL;
	while (*z)
	{
		if (*z == '\'' || *z == '"')
		{
			char		q = *z;
			int			bKeep = q == '"';	/* identifiers stay, literals go */

			*o++ = *z++;
			while (*z && !(z[0] == q && z[1] != q))
			{
				if (z[0] == q)		/* a doubled quote: one character of the token */
				{
					if (bKeep)
						*o++ = *z;
					z++;
				}
				if (bKeep)
					*o++ = *z;
				z++;
			}
			if (*z)
				*o++ = *z++;
		}
		else if (z[0] == '/' && z[1] == '*')
		{
			const char *zEnd = strstr(z + 2, "*/");

			z = zEnd ? zEnd + 2 : z + strlen(z);
			*o++ = ' ';
		}
		else
			*o++ = *z++;
	}
	*o = '\0';
	return zOut;
}

/*
 * Is zTerm a whole look-up in zSql (literals emptied)? fence_protect writes
 * an INSERT trigger's as "FROM "T" AS c WHERE <term>) IS 0" and an UPDATE
 * trigger's as "WHERE (<changed>) AND <term> AND <not OLD>) IS 0"; matching
 * the text around the term tells a one-column index's look-up from the first
 * or last column of a composite one's.
 */
static int
holdsLookup(const char *zSql, const char *zTerm)
{
	char	   *zIns = sqlite3_mprintf("%s%s) IS 0", FENCE_LOOKUP_ALIAS, zTerm);
	char	   *zUpd = sqlite3_mprintf(") AND %s AND c.rowid <> OLD.rowid) IS 0", zTerm);
	char	   *zUpdNoRowid = sqlite3_mprintf(") AND %s AND NOT (1 AND ", zTerm);
	int			bHolds = zIns && zUpd && zUpdNoRowid &&
		(containsNoCase(zSql, zIns) || containsNoCase(zSql, zUpd) ||
		 containsNoCase(zSql, zUpdNoRowid));

	sqlite3_free(zIns);
	sqlite3_free(zUpd);
	sqlite3_free(zUpdNoRowid);
	return bHolds;
}

/*
 * A per-row guard's REPLACE look-ups (fence_protect.c, conflictTerms): one
 * per UNIQUE index the table had, fenceLookupTerm's "c."col" = NEW."col"
 * COLLATE "coll"" for each of its columns, AND-joined. They name the columns as identifiers,
 * which RENAME COLUMN rewrites; the record of the indexes (fence_guards,
 * the RAISE text) names them in strings, which it does not. So the record
 * can match the indexes there are now while a look-up follows another
 * column: the indexed column renamed away, and another column (renamed,
 * added, the token column) given its name and indexed again under the old
 * index name. Each trigger of the guard that looks up (shape 4) must hold
 * the look-up of every UNIQUE index there is now, over exactly its
 * columns (holdsLookup), in the trigger's text without its literals; an
 * index on one column, BINARY, may instead be on the key, which its
 * look-ups pass to the guard ("(G, 'P', c."K""): such an index holds only
 * the row's own key. Returns 1, or 0 with an error set.
 */
static int
checkLookupsCover(sqlite3_context *ctx, FenceConn *conn, const FenceGuardTriggers *tr,
				  const FenceUniqueIndexes *ix, sqlite3_int64 id, const char *zTable)
{
	char	   *zMissing = NULL;	/* the first index not looked up, and where */
	int			bRowidColumn = 0;
	int			rc;
	int			t,
				i,
				j;

	rc = fenceHasRowidColumn(conn->db, zTable, &bRowidColumn);
	if (rc == SQLITE_OK && bRowidColumn)
	{
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: \"%s\" has a column named rowid, which "
							   "hides the rowid the guard reads; rename the column", zTable));
		return 0;
	}
	/* fence_protect refuses these; a guard made before did not */
	for (i = 0; rc == SQLITE_OK && i < ix->n; i++)
		if (ix->a[i].bPartial)
		{
			refuse(ctx, FENCE_RC_INVALID,
				   sqlite3_mprintf("fence guard refused: UNIQUE index \"%s\" of \"%s\" is "
								   "partial; make it whole or use one resource for the table",
								   ix->a[i].zName, zTable));
			return 0;
		}
	for (t = 0; rc == SQLITE_OK && zMissing == NULL && t < tr->n; t++)
	{
		const char *zName = tr->a[t].zName;
		char	   *zSql;

		/* the triggers of this shape that look up (the alias may be in a literal only) */
		if (strstr(tr->a[t].zSql, FENCE_LOOKUP_ALIAS) == NULL ||
			strstr(tr->a[t].zSql, FENCE_GUARD_SHAPE) == NULL)
			continue;
		zSql = sqlWithoutLiterals(tr->a[t].zSql);
		if (zSql == NULL)
		{
			rc = SQLITE_NOMEM;
			break;
		}
		if (!containsNoCase(zSql, FENCE_LOOKUP_ALIAS))
		{
			sqlite3_free(zSql);
			continue;
		}
		for (i = 0; rc == SQLITE_OK && zMissing == NULL && i < ix->n; i++)
		{
			const FenceUniqueIndex *x = &ix->a[i];
			char	   *zTerm = NULL;
			char	   *zKeyCall = NULL;


			for (j = 0; j < x->nCol; j++)
			{
				if (x->aCol[j].zName == NULL)
					break;		/* an expression: no look-up can be its */
				zTerm = fenceLookupTerm(zTerm, x->aCol[j].zName, x->aCol[j].zColl);
				if (zTerm == NULL)
					break;
			}
			if (j == x->nCol && x->nCol == 1 && sqlite3_stricmp(x->aCol[0].zColl, "BINARY") == 0)
				zKeyCall = sqlite3_mprintf("(%lld, '', c.\"%w\"", (long long) id, x->aCol[0].zName);
			if (j == x->nCol && zTerm == NULL)
				rc = SQLITE_NOMEM;
			else if (j < x->nCol || (!holdsLookup(zSql, zTerm) &&
									 (zKeyCall == NULL || !containsNoCase(zSql, zKeyCall))))
				zMissing = sqlite3_mprintf("index \"%s\" (trigger \"%s\")", x->zName, zName);
			sqlite3_free(zTerm);
			sqlite3_free(zKeyCall);
		}
		sqlite3_free(zSql);
	}
	if (rc != SQLITE_OK)
	{
		sqlite3_free(zMissing);
		refuseSchemaRead(ctx, conn->db, rc, "main", "the columns of the guarded table");
		return 0;
	}
	if (zMissing != NULL)
	{
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: the guard of \"%s\" misses REPLACE "
							   "through %s; run fence_protect again", zTable, zMissing));
		sqlite3_free(zMissing);
		return 0;
	}
	return 1;
}


static int
isWord(FenceSqlToken k, const char *zTok, int nTok, const char *zWord)
{
	return k == FENCE_SQL_WORD && (int) strlen(zWord) == nTok && sqlite3_strnicmp(zTok, zWord, nTok) == 0;
}

/*
 * Can trigger zSql change the row an UPDATE is writing, after the guard
 * looked it up? SQLite runs every BEFORE UPDATE trigger, then reads the
 * row's columns the UPDATE does not set back from the table: a trigger that
 * writes that row (its body an UPDATE, or any write, which can reach it
 * through another table's triggers) changes what is written after the
 * guard's REPLACE look-ups compared NEW, and a REPLACE deletes the row of a
 * resource the guard never checked. So: a BEFORE UPDATE trigger (the
 * default timing) with a statement of its body that writes. A header this
 * cannot read counts as BEFORE UPDATE. Statements are found where they
 * begin (after BEGIN or ';'); a function that writes through the
 * connection is not seen (docs: a limit).
 */
static int
triggerMayRewriteRow(const char *zSql)
{
	static const char *const azWrite[] = {"UPDATE", "INSERT", "REPLACE", "DELETE", "WITH"};
	const char *z = zSql;
	const char *zTok;
	int			nTok;
	FenceSqlToken k;
	int			bBefore = 1;
	int			bUpdate = 1;	/* until the header says otherwise */
	int			bStart = 0;
	int			i;

	k = fenceSqlNextToken(&z, &zTok, &nTok);
	if (isWord(k, zTok, nTok, "CREATE"))
	{
		k = fenceSqlNextToken(&z, &zTok, &nTok);
		if (isWord(k, zTok, nTok, "TEMP") || isWord(k, zTok, nTok, "TEMPORARY"))
			k = fenceSqlNextToken(&z, &zTok, &nTok);
		if (isWord(k, zTok, nTok, "TRIGGER"))
		{
			k = fenceSqlNextToken(&z, &zTok, &nTok);
			if (isWord(k, zTok, nTok, "IF"))
			{
				fenceSqlNextToken(&z, &zTok, &nTok);		/* NOT */
				fenceSqlNextToken(&z, &zTok, &nTok);		/* EXISTS */
				k = fenceSqlNextToken(&z, &zTok, &nTok);
			}
			/* past the name (k), and a schema.name's second part */
			k = fenceSqlNextToken(&z, &zTok, &nTok);
			if (k == FENCE_SQL_PUNCT && *zTok == '.')
			{
				fenceSqlNextToken(&z, &zTok, &nTok);
				k = fenceSqlNextToken(&z, &zTok, &nTok);
			}
			if (isWord(k, zTok, nTok, "AFTER") || isWord(k, zTok, nTok, "INSTEAD"))
				bBefore = 0;
			if (isWord(k, zTok, nTok, "INSTEAD"))
				fenceSqlNextToken(&z, &zTok, &nTok);		/* OF */
			if (isWord(k, zTok, nTok, "BEFORE") || isWord(k, zTok, nTok, "AFTER") ||
				isWord(k, zTok, nTok, "INSTEAD"))
				k = fenceSqlNextToken(&z, &zTok, &nTok);
			if (isWord(k, zTok, nTok, "INSERT") || isWord(k, zTok, nTok, "DELETE"))
				bUpdate = 0;
		}
	}
	if (!bBefore || !bUpdate)
		return 0;
	while ((k = fenceSqlNextToken(&z, &zTok, &nTok)) != FENCE_SQL_END)
	{
		if (bStart && k == FENCE_SQL_WORD)
			for (i = 0; i < (int) (sizeof(azWrite) / sizeof(azWrite[0])); i++)
				if (isWord(k, zTok, nTok, azWrite[i]))
					return 1;
		bStart = isWord(k, zTok, nTok, "BEGIN") || (k == FENCE_SQL_PUNCT && *zTok == ';');
	}
	return 0;
}

/*
 * A per-row guard's REPLACE look-ups compare NEW before the row is written;
 * no other trigger on its table (main or temp) may rewrite the row in
 * between (triggerMayRewriteRow). Returns 1, or 0 with an error set.
 */
static int
checkRewritingTriggers(sqlite3_context *ctx, FenceConn *conn, sqlite3_int64 id,
					   const char *zTable)
{
	static const char *const azSchema[] = {"main", "temp"};
	char	   *zOwn = sqlite3_mprintf("fence:%lld:", (long long) id);
	int			rc = zOwn ? SQLITE_OK : SQLITE_NOMEM;
	int			s,
				t;

	for (s = 0; rc == SQLITE_OK && s < 2; s++)
	{
		FenceGuardTriggers tr = {0, NULL, NULL, NULL, 0};

		rc = fenceTableTriggersRead(conn->db, azSchema[s], zTable, &tr);
		for (t = 0; rc == SQLITE_OK && t < tr.n; t++)
		{
			/* the guard's own, which admission checked for its shape */
			if (s == 0 && strncmp(tr.a[t].zName, zOwn, strlen(zOwn)) == 0)
				continue;
			if (triggerMayRewriteRow(tr.a[t].zSql))
			{
				refuse(ctx, FENCE_RC_INVALID,
					   sqlite3_mprintf("fence guard refused: BEFORE UPDATE trigger %s.\"%s\" "
									   "may rewrite rows after the guard's check; make it "
									   "AFTER UPDATE", azSchema[s], tr.a[t].zName));
				fenceGuardTriggersFree(&tr);
				sqlite3_free(zOwn);
				return 0;
			}
		}
		fenceGuardTriggersFree(&tr);
	}
	sqlite3_free(zOwn);
	if (rc == SQLITE_OK)
		return 1;
	/* (the loop stepped past the schema whose read failed) */
	refuseSchemaRead(ctx, conn->db, rc, azSchema[s > 0 ? s - 1 : 0],
					 "the triggers on the guarded table");
	return 0;
}

/*
 * The guard's token column, as the header of its update_token trigger names
 * it ("BEFORE UPDATE OF "tok" ON ..."): as written there (a quoted
 * identifier, fence_protect's), or bare (the name). NULL in *pz when the
 * guard has no token column. SQLITE_OK or SQLITE_NOMEM.
 */
static int
guardTokenColumn(const FenceGuardTriggers *tr, sqlite3_int64 id, int bQuoted, char **pz)
{
	char	   *zName = sqlite3_mprintf("fence:%lld:update_token", (long long) id);
	int			t;

	*pz = NULL;
	if (zName == NULL)
		return SQLITE_NOMEM;
	for (t = 0; t < tr->n && *pz == NULL; t++)
	{
		const char *z = tr->a[t].zSql;
		const char *zTok;
		int			nTok;
		FenceSqlToken k;

		if (strcmp(tr->a[t].zName, zName) != 0)
			continue;
		while ((k = fenceSqlNextToken(&z, &zTok, &nTok)) != FENCE_SQL_END &&
			   !isWord(k, zTok, nTok, "OF"))
			;
		if (k == FENCE_SQL_END || (k = fenceSqlNextToken(&z, &zTok, &nTok)) == FENCE_SQL_END)
			continue;
		if (bQuoted || k != FENCE_SQL_QUOTED || nTok < 2)
			*pz = sqlite3_mprintf("%.*s", nTok, zTok);
		else
		{
			/* "..." with "" for each " inside */
			char	   *zOut = sqlite3_malloc(nTok);
			int			i,
						j = 0;

			for (i = 1; zOut != NULL && i < nTok - 1; i++)
			{
				zOut[j++] = zTok[i];
				if (zTok[i] == zTok[0] && i + 1 < nTok - 1 && zTok[i + 1] == zTok[0])
					i++;
			}
			if (zOut != NULL)
				zOut[j] = '\0';
			*pz = zOut;
		}
		if (*pz == NULL)
		{
			sqlite3_free(zName);
			return SQLITE_NOMEM;
		}
	}
	sqlite3_free(zName);
	return SQLITE_OK;
}

/* Does the guard check rows AFTER INSERT (its key is the INTEGER PRIMARY KEY)? */
static int
guardChecksAfterInsert(const FenceGuardTriggers *tr, sqlite3_int64 id)
{
	char		zName[64];
	int			t;

	sqlite3_snprintf(sizeof(zName), zName, "fence:%lld:insert_after", (long long) id);
	for (t = 0; t < tr->n; t++)
		if (strcmp(tr->a[t].zName, zName) == 0)
			return 1;
	return 0;
}

/*
 * A per-row guard made before fence_protect refused a NULL that becomes a
 * DEFAULT behind the guard's look-ups (fence_schema_read.c,
 * fenceDefaultReplaced): refused here too. Returns 1, or 0 with an error set.
 */
static int
checkDefaultsSeen(sqlite3_context *ctx, FenceConn *conn, const FenceGuardTriggers *tr,
				  sqlite3_int64 id, const FenceUniqueIndexes *ix, const char *zTable)
{
	char	   *zReplaced = NULL;
	char	   *zToken = NULL;
	int			why = FENCE_DEFAULT_UNIQUE;
	int			rc = guardChecksAfterInsert(tr, id) ? guardTokenColumn(tr, id, 0, &zToken) :
		SQLITE_OK;

	if (rc == SQLITE_OK)
		rc = fenceDefaultReplaced(conn->db, zTable, ix, zToken, &zReplaced, &why);
	sqlite3_free(zToken);

	if (rc != SQLITE_OK)
	{
		refuseSchemaRead(ctx, conn->db, rc, "main", "the columns of the guarded table");
		return 0;
	}
	if (zReplaced != NULL)
	{
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: NOT NULL DEFAULT column \"%s\" (%s) gets "
							   "its DEFAULT after the guard; drop the DEFAULT or make NOT "
							   "NULL a CHECK", zReplaced,
							   why == FENCE_DEFAULT_AFTER ? "the token, checked after INSERT" :
							   why == FENCE_DEFAULT_GENERATED ? "beside a generated column" :
							   "in a UNIQUE index"));
		sqlite3_free(zReplaced);
		return 0;
	}
	return 1;
}

/* Does zHay hold zFirst and, after it, zThen (in any case)? */
static int
containsInOrder(const char *zHay, const char *zFirst, const char *zThen)
{
	size_t		n = strlen(zFirst);

	for (; *zHay; zHay++)
		if (sqlite3_strnicmp(zHay, zFirst, (int) n) == 0)
			return containsNoCase(zHay + n, zThen);
	return 0;
}

/*
 * A table whose per-row key is its INTEGER PRIMARY KEY is checked AFTER
 * INSERT, once SQLite has assigned the key. RAISE(IGNORE) in another AFTER
 * INSERT trigger on it that fires first (a TEMP one, or one made later)
 * abandons the triggers still to run with the row already written: fence's
 * check would be skipped. Such a guard is admitted only while no trigger on
 * the table but fence's own, in main or temp, could RAISE(IGNORE) (the text
 * "raise" followed by "ignore"; a BEFORE one is refused too, which is
 * harmless but spares parsing) or run AFTER INSERT (the text "after"
 * followed by "insert"). The triggers are read whole (fence_schema_read.c)
 * and searched here. Returns 1, or 0 with an error set.
 */
static int
checkIgnoringTriggers(sqlite3_context *ctx, FenceConn *conn, sqlite3_int64 id,
					  const char *zTable)
{
	static const char *const azSchema[] = {"main", "temp"};
	static const char *const azOwn[] = {"insert", "insert_after", "update", "update_token", "delete"};
	char	   *zInsertAfter = sqlite3_mprintf("fence:%lld:insert_after", (long long) id);
	int			bInsertAfter = 0;
	int			s;

	if (zInsertAfter == NULL)
	{
		sqlite3_result_error_nomem(ctx);
		return 0;
	}
	for (s = 0; s < 2; s++)
	{
		FenceGuardTriggers tr = {0, NULL, NULL, NULL, 0};
		const char *zBad = NULL;
		int			rc = fenceTableTriggersRead(conn->db, azSchema[s], zTable, &tr);
		int			t,
					k;

		/* fence's insert_after: only then is the key checked after the insert */
		for (t = 0; rc == SQLITE_OK && s == 0 && t < tr.n; t++)
			bInsertAfter |= strcmp(tr.a[t].zName, zInsertAfter) == 0;
		for (t = 0; rc == SQLITE_OK && bInsertAfter && zBad == NULL && t < tr.n; t++)
		{
			int			bOwn = 0;

			for (k = 0; s == 0 && k < 5; k++)
			{
				char	   *zOwn = sqlite3_mprintf("fence:%lld:%s", (long long) id, azOwn[k]);

				if (zOwn == NULL)
				{
					rc = SQLITE_NOMEM;
					break;
				}
				bOwn |= strcmp(tr.a[t].zName, zOwn) == 0;
				sqlite3_free(zOwn);
			}
			if (rc == SQLITE_OK && !bOwn &&
				(containsInOrder(tr.a[t].zSql, "raise", "ignore") ||
				 containsInOrder(tr.a[t].zSql, "after", "insert")))
				zBad = tr.a[t].zName;
		}
		if (rc != SQLITE_OK)
			refuseSchemaRead(ctx, conn->db, rc, azSchema[s],
							 "the triggers on the guarded table");
		else if (zBad != NULL)
			refuse(ctx, FENCE_RC_INVALID,
				   sqlite3_mprintf("fence guard refused: trigger %s.\"%s\" can skip the check "
								   "of an assigned key (RAISE(IGNORE), AFTER INSERT); use "
								   "BEFORE INSERT", azSchema[s], zBad));
		fenceGuardTriggersFree(&tr);
		if (rc != SQLITE_OK || zBad != NULL)
		{
			sqlite3_free(zInsertAfter);
			return 0;
		}
	}
	sqlite3_free(zInsertAfter);
	return 1;
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
	char	   *zNow = NULL;
	int			ok = 0;
	int			rc;
	int			i;
	char	   *zShape = NULL;
	char	   *zOwn = NULL;
	FenceUniqueIndexes ix = {0, NULL};	/* read when the record names indexes */
	FenceGuardTriggers tr = {0, NULL, NULL, NULL, 0};
	int			bCounted = 0;
	int			nShape = 0;
	FenceGuardSeen *g;

	rc = fenceOwnTableShape(db, "fence_guards", &zShape);
	if (rc != SQLITE_OK)
	{
		/* a fence_guards fence did not make cannot vouch for a guard */
		refuse(ctx, rc == FENCE_RC_UNTRUSTED ? FENCE_RC_INVALID : rc, zShape);
		return NULL;
	}
	if (sqlite3_table_column_metadata(db, "main", "fence_guards", "id",
									  NULL, NULL, NULL, NULL, NULL) != SQLITE_OK)
		rc = SQLITE_DONE;
	else
	{
		rc = sqlite3_prepare_v2(db,
								"SELECT g.resource, g.keyed, g.uniques, s.tbl_name "
								"FROM main.fence_guards AS g "
								"JOIN main.sqlite_schema AS s ON s.type = 'trigger' "
								"AND s.name = 'fence:' || g.id || ':delete' WHERE g.id = ?1",
								-1, &stmt, NULL);
		if (rc == SQLITE_OK)
		{
			sqlite3_bind_int64(stmt, 1, id);
			rc = sqlite3_step(stmt);
		}
	}
	if (rc == SQLITE_DONE)
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: guard %lld is not in main.fence_guards; "
							   "write the table with its file opened as main, not attached",
							   (long long) id));
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
	else if (strcmp((const char *) sqlite3_column_text(stmt, 2), "*") == 0)
		ok = 1;					/* one resource: a replaced row is under it too */
	else if ((rc = fenceUniqueIndexesRead(db, (const char *) sqlite3_column_text(stmt, 3),
										  &ix)) != SQLITE_OK ||
			 (zNow = uniqueSignatureOf(&ix)) == NULL)
	{
		if (rc == SQLITE_OK)
			sqlite3_result_error_nomem(ctx);
		else if (rc == FENCE_RC_INVALID)
			refuse(ctx, FENCE_RC_INVALID,
				   sqlite3_mprintf("fence guard refused: the UNIQUE indexes of \"%s\" read "
								   "back NULL", (const char *) sqlite3_column_text(stmt, 3)));
		else
			refuseSchemaRead(ctx, db, rc, "main", "the UNIQUE indexes of the guarded table");
	}
	else if (strcmp(zNow, (const char *) sqlite3_column_text(stmt, 2)) != 0)
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: the UNIQUE indexes of \"%s\" changed "
							   "since fence_protect; run fence_protect again",
							   (const char *) sqlite3_column_text(stmt, 3)));
	else
		ok = 1;
	if (ok && zRes == NULL)
	{
		/* copied before stmt is finalized: the recorded resource is the one */
		zOwn = sqlite3_mprintf("%s", (const char *) sqlite3_column_text(stmt, 0));
		if (zOwn == NULL)
		{
			sqlite3_result_error_nomem(ctx);
			ok = 0;
		}
	}
	/* counted (admittedByCount): every trigger of the guard is of this shape */
	if (ok && (rc = fenceGuardTriggersRead(db, id, &tr)) != SQLITE_OK)
	{
		refuseSchemaRead(ctx, db, rc, "main", "the triggers of the guarded table");
		ok = 0;
	}
	for (i = 0; ok && i < tr.n; i++)
		nShape += strstr(tr.a[i].zSql, FENCE_GUARD_SHAPE) != NULL;
	bCounted = tr.n > 0 && nShape == tr.n;
	if (ok && bKeyed && strcmp((const char *) sqlite3_column_text(stmt, 2), "*") != 0 &&
		(!checkLookupsCover(ctx, conn, &tr, &ix, id, (const char *) sqlite3_column_text(stmt, 3)) ||
		 !checkRewritingTriggers(ctx, conn, id, (const char *) sqlite3_column_text(stmt, 3)) ||
		 !checkDefaultsSeen(ctx, conn, &tr, id, &ix, (const char *) sqlite3_column_text(stmt, 3))))
		ok = 0;
	if (ok && !checkIgnoringTriggers(ctx, conn, id, (const char *) sqlite3_column_text(stmt, 3)))
		ok = 0;
	sqlite3_free(zNow);
	fenceUniqueIndexesFree(&ix);
	fenceGuardTriggersFree(&tr);
	sqlite3_finalize(stmt);
	if (!ok)
		goto fail;
	if (zOwn != NULL)
	{
		zRes = zOwn;
		nRes = (int) strlen(zOwn);
	}

	/* a copy of this file attached beside it carries the same id */
	for (i = 2; sqlite3_db_name(db, i) != NULL; i++)
	{
		int			bHolds;

		rc = fenceGuardIdRecorded(db, sqlite3_db_name(db, i), id, &bHolds);
		if (rc != SQLITE_OK)
		{
			refuse(ctx, rc, sqlite3_mprintf("fence guard %lld: cannot read \"%s\".fence_guards: %s",
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

	if (conn->nGuard == conn->nGuardAlloc)
	{
		int			nAlloc = conn->nGuardAlloc ? conn->nGuardAlloc * 2 : 8;
		FenceGuardSeen *a = sqlite3_realloc64(conn->aGuard,
											  sizeof(*a) * (sqlite3_uint64) nAlloc);

		if (a == NULL)
		{
			sqlite3_result_error_nomem(ctx);
			goto fail;
		}
		conn->aGuard = a;
		conn->nGuardAlloc = nAlloc;
	}
	g = &conn->aGuard[conn->nGuard];
	g->zResource = zOwn ? zOwn : sqlite3_mprintf("%.*s", nRes, zRes);
	if (g->zResource == NULL)
	{
		sqlite3_result_error_nomem(ctx);
		return NULL;
	}
	g->id = id;
	g->nResource = nRes;
	g->bKeyed = bKeyed;
	g->bCounted = bCounted;
	conn->nGuard++;
	conn->bAdmittedInTxn = 1;
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
	if (conn->bJournalChecked)
		return 1;
	/* NULL: main, without a look-up by name */
	if (sqlite3_file_control(conn->db, NULL, SQLITE_FCNTL_JOURNAL_POINTER,
							 &pJournal) == SQLITE_OK &&
		pJournal != NULL && pJournal->pMethods != NULL && pJournal->pMethods->xLock != NULL)
	{
		conn->bJournalChecked = conn->bEnlisted;	/* reset when it ends (fence_held.c) */
		return 1;
	}
	if (conn->pJournalMode == NULL)
	{
		rc = fenceHeldConnect(conn);
		if (rc == SQLITE_OK)
			rc = sqlite3_prepare_v3(conn->db, journalModeSql, -1, SQLITE_PREPARE_PERSISTENT,
									&conn->pJournalMode, NULL);
		if (rc != SQLITE_OK)
		{
			refuse(ctx, rc, sqlite3_mprintf("fence guard: cannot read PRAGMA journal_mode: %s",
											sqlite3_errmsg(conn->db)));
			return 0;
		}
	}
	rc = sqlite3_step(conn->pJournalMode);
	zMode = rc == SQLITE_ROW ? sqlite3_column_text(conn->pJournalMode, 0) : NULL;
	if (rc == SQLITE_ROW && zMode != NULL && sqlite3_stricmp((const char *) zMode, "off") != 0 &&
		(sqlite3_stricmp((const char *) zMode, "memory") != 0 || mainInMemory(conn->db)))
	{
		sqlite3_reset(conn->pJournalMode);
		return 1;
	}
	if (rc == SQLITE_ROW && zMode != NULL)
		refuse(ctx, FENCE_RC_INVALID,
			   sqlite3_mprintf("fence guard refused: journal_mode=%s cannot undo a refused "
							   "or interrupted write; use DELETE, TRUNCATE, PERSIST or WAL",
							   zMode));
	else if (rc == SQLITE_DONE)
		refuse(ctx, SQLITE_AUTH,
			   sqlite3_mprintf("fence guard refused: PRAGMA main.journal_mode returned no "
							   "row, so it cannot tell whether a refused write can be undone"));
	else
		refuse(ctx, rc == SQLITE_ROW ? SQLITE_NOMEM : rc,
			   sqlite3_mprintf("fence guard: cannot read PRAGMA journal_mode: %s",
							   sqlite3_errmsg(conn->db)));
	sqlite3_reset(conn->pJournalMode);
	return 0;
}

/* Guard id admitted (with this resource or prefix, when the call names one), or NULL. */
static inline const FenceGuardSeen *
findAdmitted(const FenceConn *conn, sqlite3_int64 id, const char *zRes, int nRes, int bKeyed)
{
	int			i;

	for (i = 0; i < conn->nGuard; i++)
	{
		const FenceGuardSeen *g = &conn->aGuard[i];

		if (g->id == id && g->bKeyed == bKeyed &&
			(zRes == NULL || (g->nResource == nRes &&
							  memcmp(g->zResource, zRes, (size_t) nRes) == 0)))
			return g;
	}
	return NULL;
}

/*
 * May this call of admitted guard g skip reading the schema? Yes when no
 * statement that reads one of fence's tables has been prepared since the
 * schema was last read, that read found the admissions still good
 * (pSchemaStmt), and no other database is attached (then the schema is
 * read in every transaction, as before).
 *
 * Why that suffices for a call from a statement that fires one of g's own
 * triggers (g->bCounted: all of them of this shape): each of them reads
 * fence_join in its body, so SQLite plans such a read (fence_held.c counts
 * it) whenever it prepares the statement; and SQLite prepares a statement
 * again, before it runs, whenever main's schema changed after it was
 * prepared (by this connection or another, committed or not; a rollback of
 * a change resets the schema, which counts too) or TEMP's did (which
 * expires every statement). That statement was therefore prepared before
 * the last read of the schema, and the schema it runs on is the one it was
 * prepared on: the one read then.
 *
 * A call from anywhere else (a view, a trigger of the application's,
 * top-level SQL passing g's id) proves nothing by this. What it can get so
 * is an accept at the token already highest, which fence_check gives
 * anyone: a write of fence_tokens reads the schema first (fence.c,
 * FENCE_RC_READ_SCHEMA), and the highest-token cache keeps its own watch
 * (fence_cache.c, fenceWatchIntact).
 */
static inline int
admittedByCount(const FenceConn *conn, const FenceGuardSeen *g)
{
	return g->bCounted && conn->bEnlisted && !conn->bNoCountTxn &&
		conn->nJoinPlanned == conn->nJoinPlannedChecked && conn->pSchemaStmt != NULL &&
		sqlite3_db_name(conn->db, 2) == NULL;
}

/*
 * The checks every guard call makes before looking at tokens: the id
 * argument is a guard fence_protect recorded in main for this resource (or
 * prefix), and a refusal can be undone. *pzRes NULL: the call names no
 * resource (a one-resource guard's), and *pzRes, *pnRes are set to the one
 * recorded for the guard; they stay valid until admission is forgotten.
 * Returns 1, or 0 with an error set.
 */
int
fenceGuardAdmit(sqlite3_context *ctx, FenceConn *conn, sqlite3_value *idArg,
				const char **pzRes, int *pnRes, int bKeyed)
{
	const FenceGuardSeen *g;
	const char *zRes = *pzRes;
	int			nRes = *pnRes;
	sqlite3_int64 id;
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
	conn->bByCount = 0;
	if (!conn->bGuardTxnChecked && !conn->bSchemaFresh)
	{
		g = findAdmitted(conn, id, zRes, nRes, bKeyed);
		if (g != NULL && admittedByCount(conn, g))
		{
			conn->bByCount = 1;
			*pzRes = g->zResource;
			*pnRes = g->nResource;
			return 1;
		}
	}
	rc = fenceSchemaCheck(conn);
	if (rc != SQLITE_OK)
	{
		refuse(ctx, rc, sqlite3_mprintf("fence guard: cannot read the schema version: %s",
										rc == SQLITE_AUTH ? "PRAGMA schema_version returned no row" :
										sqlite3_errmsg(conn->db)));
		return 0;
	}
	g = findAdmitted(conn, id, zRes, nRes, bKeyed);
	if (g == NULL)
		g = admitNew(ctx, conn, id, zRes, nRes, bKeyed);
	if (g == NULL)
		return 0;
	*pzRes = g->zResource;
	*pnRes = g->nResource;
	return 1;
}

/*
 * fence_guard_ready, the BEFORE INSERT call of a table checked AFTER INSERT:
 * read the schema cookies again now, not once per transaction. A trigger
 * that may RAISE(IGNORE) (checkIgnoringTriggers), created by this connection
 * after the transaction's first write, would otherwise go unseen until the
 * next transaction while it skips the AFTER check. Two cached PRAGMA steps
 * per row of such a table; with a database attached, admission per row.
 */
void
fenceGuardRecheckSchema(FenceConn *conn)
{
	fenceGuardMemoForget(conn);
	conn->bGuardTxnChecked = 0;
	conn->bEnlistSchemaSame = 0;
	conn->bNoCountTxn = 1;
}

/* A transaction ended: check the schema generation again at the next one. */
void
fenceGuardTxnEnded(FenceConn *conn)
{
	fenceGuardMemoForget(conn);
	conn->bGuardTxnChecked = 0;
	conn->bEnlistSchemaSame = 0;
	conn->bAdmittedInTxn = 0;
	conn->bNoCountTxn = 0;
}

/*
 * A transaction, or part of one, rolled back. A guard admitted in it was
 * checked against a schema that may have just been rolled back too (a
 * trigger dropped and then restored), and the cookies cannot tell: a
 * rollback puts the old cookie back. Forget what was admitted.
 */
void
fenceGuardRolledBack(FenceConn *conn)
{
	if (!conn->bAdmittedInTxn)
		return;
	forgetAdmitted(conn);
	conn->bGuardTxnChecked = 0;
	conn->bEnlistSchemaSame = 0;
	fenceCacheSchemaChanged(conn);
}
