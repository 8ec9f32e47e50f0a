/*
 * fence_protect.c
 *
 * fence_protect() and fence_unprotect() for SQLite: the guard of a protected
 * table is a set of ordinary triggers in main that call the guard functions
 * (fence.c) and a row of main.fence_guards that records the guard's random id
 * G, its resource (or prefix) and the table's UNIQUE indexes. Because the
 * triggers live in the database file, every connection that writes the table
 * runs them, and a connection that has not loaded fence fails to prepare the
 * write ("no such function: fence_guard_write"): the guard fails closed.
 * Each call passes G, and the guard admits it only when main.fence_guards
 * holds it (fence_guard.c): through ATTACH, or from a planted view, no call
 * passes.
 *
 * The triggers, for table T with token column C (if any) and resource R or
 * prefix P plus key column K, named "fence:G:<kind>" and found again by the
 * table they are ON (a renamed table keeps its guard; its old name is free):
 *
 *   insert        BEFORE INSERT     the new row's token is checked, or
 *                                   without C the transaction must hold a
 *                                   fence on the row's resource; when K is
 *                                   T's INTEGER PRIMARY KEY, which SQLite
 *                                   assigns after BEFORE triggers run (they
 *                                   see -1), only a key given in the INSERT
 *                                   is checked here, and
 *   insert_after  AFTER INSERT      checks every row once it has its key
 *   update        BEFORE UPDATE     the transaction must hold a fence on the
 *                                   old and new resource
 *   update_token  BEFORE UPDATE OF C  the statement sets C: its new value is
 *                                   checked under the old and new resource
 *   delete        BEFORE DELETE     the transaction must hold a fence on the
 *                                   row's resource
 *
 * SQLite runs a table's triggers of one kind newest first, so update_token
 * is created after update: an UPDATE that sets C takes its fence before the
 * fenced check, and one that leaves C out must already hold one. Every
 * statement meets a BEFORE guard before its first row is written, which is
 * where journal_mode=OFF is refused (fence_guard.c).
 *
 * REPLACE (INSERT OR REPLACE, UPDATE OR REPLACE, ON CONFLICT REPLACE) deletes
 * the rows that conflict with the new one, firing no DELETE trigger unless
 * recursive_triggers is on. With one resource for the table such a row is
 * under the same fence as the write. With a key, insert and update also look
 * up, through every UNIQUE index (and the rowid) that could hold a row of
 * another key, the rows the new one would replace, and check each as an
 * UPDATE of that row: under the statement's token, or fenced. An index on
 * the key column alone with BINARY collation holds only rows of the same
 * key. fence_guards keeps the list of UNIQUE indexes: a write after one was
 * added or dropped is refused until fence_protect runs again.
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

typedef struct ProtectSpec
{
	const char *zTable;			/* the table's name as stored in the schema */
	const char *zTokenColumn;	/* NULL: no token column */
	const char *zResource;		/* the resource, or the prefix with a key */
	const char *zKeyColumn;		/* NULL: one fence for the table */
	int			bKeyIsRowid;	/* the key is the INTEGER PRIMARY KEY */
	sqlite3_int64 id;			/* the guard id G */
	char	   *zUniques;		/* the UNIQUE indexes, as fence_guards keeps them */
	char	   *zConflictIns;	/* keyed: WHERE terms of rows an INSERT replaces */
	char	   *zNotOld;		/* keyed: "this row is not OLD" */
} ProtectSpec;

static const char createGuardsSql[] =
"CREATE TABLE IF NOT EXISTS main.fence_guards" FENCE_GUARDS_COLUMNS;

static void
resultError(sqlite3_context *ctx, int rc, char *zMsg)
{
	if (zMsg == NULL)
	{
		sqlite3_result_error_nomem(ctx);
		return;
	}
	sqlite3_result_error(ctx, zMsg, -1);
	sqlite3_result_error_code(ctx, fenceErrorCode(rc));
	sqlite3_free(zMsg);
}

/*
 * The name of table zName in main as the schema spells it, or NULL with an
 * error set. Only ordinary tables can be protected, and never fence's own.
 */
static char *
lookupTable(sqlite3_context *ctx, const char *zFunc, const char *zName)
{
	sqlite3    *db = sqlite3_context_db_handle(ctx);
	sqlite3_stmt *stmt = NULL;
	char	   *zFound = NULL;
	int			bNull;
	int			rc;

	rc = sqlite3_prepare_v2(db,
							"SELECT name, type FROM main.sqlite_schema "
							"WHERE name = ?1 COLLATE NOCASE AND type IN ('table', 'view')",
							-1, &stmt, NULL);
	if (rc != SQLITE_OK)
	{
		resultError(ctx, rc, sqlite3_mprintf("%s: %s", zFunc, sqlite3_errmsg(db)));
		return NULL;
	}
	sqlite3_bind_text(stmt, 1, zName, -1, SQLITE_STATIC);
	rc = sqlite3_step(stmt);
	/* a NULL name or type: a read an authorizer blinded (SQLITE_IGNORE) */
	bNull = rc == SQLITE_ROW && (sqlite3_column_type(stmt, 0) != SQLITE_TEXT ||
								 sqlite3_column_type(stmt, 1) != SQLITE_TEXT);
	if (bNull)
		resultError(ctx, SQLITE_AUTH,
					sqlite3_mprintf("%s: the schema entry of \"%s\" read back NULL; allow "
									"reads of sqlite_schema", zFunc, zName));
	else if (rc == SQLITE_ROW && strcmp((const char *) sqlite3_column_text(stmt, 1), "table") == 0)
		zFound = sqlite3_mprintf("%s", (const char *) sqlite3_column_text(stmt, 0));
	if (zFound == NULL && !bNull)
	{
		if (rc == SQLITE_ROW)
			resultError(ctx, SQLITE_ERROR,
						sqlite3_mprintf("%s: \"%s\" is a view, not a table", zFunc, zName));
		else if (rc == SQLITE_DONE)
			resultError(ctx, SQLITE_ERROR,
						sqlite3_mprintf("%s: no such table: main.\"%s\"", zFunc, zName));
		else
			resultError(ctx, rc, sqlite3_mprintf("%s: %s", zFunc, sqlite3_errmsg(db)));
	}
	sqlite3_finalize(stmt);
	if (zFound && (sqlite3_stricmp(zFound, "fence_tokens") == 0 ||
				   sqlite3_stricmp(zFound, "fence_guards") == 0 ||
				   sqlite3_strnicmp(zFound, "sqlite_", 7) == 0))
	{
		resultError(ctx, SQLITE_ERROR,
					sqlite3_mprintf("%s: table \"%s\" cannot be protected", zFunc, zFound));
		sqlite3_free(zFound);
		zFound = NULL;
	}
	return zFound;
}

static int
isRealColumn(sqlite3 *db, const char *zTable, const char *zColumn)
{
	sqlite3_stmt *stmt = NULL;
	int			bFound = 0;

	/* table_xinfo: generated columns count (hidden 2 and 3), a vtab's hidden do not */
	if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_xinfo(?1, 'main') "
						   "WHERE name = ?2 COLLATE NOCASE AND hidden <> 1", -1, &stmt, NULL) == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, zTable, -1, SQLITE_STATIC);
		sqlite3_bind_text(stmt, 2, zColumn, -1, SQLITE_STATIC);
		bFound = sqlite3_step(stmt) == SQLITE_ROW;
	}
	sqlite3_finalize(stmt);
	return bFound;
}

/* Is zColumn a generated column of zTable (table_xinfo's hidden 2 or 3)? */
static int
isGeneratedColumn(sqlite3 *db, const char *zTable, const char *zColumn)
{
	sqlite3_stmt *stmt = NULL;
	int			bFound = 0;

	if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_xinfo(?1, 'main') "
						   "WHERE name = ?2 COLLATE NOCASE AND hidden IN (2, 3)", -1, &stmt,
						   NULL) == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, zTable, -1, SQLITE_STATIC);
		sqlite3_bind_text(stmt, 2, zColumn, -1, SQLITE_STATIC);
		bFound = sqlite3_step(stmt) == SQLITE_ROW;
	}
	sqlite3_finalize(stmt);
	return bFound;
}

/*
 * Is zColumn zTable's INTEGER PRIMARY KEY, the alias of the rowid? It is
 * when it is the sole primary key column, declared INTEGER, and the table
 * has no separate primary key index (a WITHOUT ROWID table, or the
 * "INTEGER PRIMARY KEY DESC" quirk, has one). 1, 0, or -1 when it cannot
 * tell.
 */
static int
isRowidAlias(sqlite3 *db, const char *zTable, const char *zColumn)
{
	sqlite3_stmt *stmt = NULL;
	const char *zDeclType = NULL;
	int			bPk = 0;
	int			r = -1;

	if (sqlite3_table_column_metadata(db, "main", zTable, zColumn, &zDeclType, NULL, NULL,
									  &bPk, NULL) != SQLITE_OK)
		return -1;
	if (!bPk || zDeclType == NULL || sqlite3_stricmp(zDeclType, "INTEGER") != 0)
		return 0;
	if (sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM pragma_table_info(?1, 'main') "
						   "WHERE pk > 0), (SELECT count(*) FROM pragma_index_list(?1, 'main') "
						   "WHERE origin = 'pk')", -1, &stmt, NULL) == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, zTable, -1, SQLITE_STATIC);
		if (sqlite3_step(stmt) == SQLITE_ROW)
			r = sqlite3_column_int(stmt, 0) == 1 && sqlite3_column_int(stmt, 1) == 0;
	}
	sqlite3_finalize(stmt);
	return r;
}

static int
isWithoutRowid(sqlite3 *db, const char *zTable)
{
	sqlite3_stmt *stmt = NULL;
	int			bWr = 0;

	if (sqlite3_prepare_v2(db, "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?1",
						   -1, &stmt, NULL) == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, zTable, -1, SQLITE_STATIC);
		if (sqlite3_step(stmt) == SQLITE_ROW)
			bWr = sqlite3_column_int(stmt, 0);
	}
	sqlite3_finalize(stmt);
	return bWr;
}

static int
isStrict(sqlite3 *db, const char *zTable)
{
	sqlite3_stmt *stmt = NULL;
	int			bStrict = 0;

	if (sqlite3_prepare_v2(db, "SELECT strict FROM pragma_table_list WHERE schema = 'main' AND name = ?1",
						   -1, &stmt, NULL) == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, zTable, -1, SQLITE_STATIC);
		if (sqlite3_step(stmt) == SQLITE_ROW)
			bStrict = sqlite3_column_int(stmt, 0);
	}
	sqlite3_finalize(stmt);
	return bStrict;
}

/* Does the column exist? *pIsRowid: it is the table's INTEGER PRIMARY KEY. */
static int
lookupColumn(sqlite3_context *ctx, const char *zTable, const char *zColumn,
			 int *pIsRowid)
{
	sqlite3    *db = sqlite3_context_db_handle(ctx);

	/* pragma_table_xinfo, unlike the metadata API, knows no implicit "rowid" */
	if (!isRealColumn(db, zTable, zColumn))
	{
		resultError(ctx, SQLITE_ERROR,
					sqlite3_mprintf("fence_protect: no such column: \"%s\".\"%s\"",
									zTable, zColumn));
		return 0;
	}
	if (pIsRowid)
	{
		*pIsRowid = isRowidAlias(db, zTable, zColumn);
		if (*pIsRowid < 0)
		{
			resultError(ctx, FENCE_RC_INVALID,
						sqlite3_mprintf("fence_protect: cannot tell whether \"%s\".\"%s\" is "
										"the INTEGER PRIMARY KEY: its schema read back NULL or "
										"failed", zTable, zColumn));
			return 0;
		}
	}
	return 1;
}

/*
 * SQLite's affinity of a declared type (datatype3.html, 3.1). The token
 * column must not turn an integer into text or a float: INTEGER, NUMERIC or
 * none (BLOB).
 */
static const char *
declaredAffinity(const char *zType)
{
	char		up[256];
	size_t		i;

	if (zType == NULL)
		return "BLOB";
	for (i = 0; zType[i] && i < sizeof(up) - 1; i++)
		up[i] = (char) ((zType[i] >= 'a' && zType[i] <= 'z') ? zType[i] - 32 : zType[i]);
	up[i] = '\0';
	if (strstr(up, "INT"))
		return "INTEGER";
	if (strstr(up, "CHAR") || strstr(up, "CLOB") || strstr(up, "TEXT"))
		return "TEXT";
	if (strstr(up, "BLOB") || up[0] == '\0')
		return "BLOB";
	if (strstr(up, "REAL") || strstr(up, "FLOA") || strstr(up, "DOUB"))
		return "REAL";
	return "NUMERIC";
}

/*
 * The token column's affinity and the key column's collation, checked at
 * protect time (SPEC "No way around the fence"): a TEXT or REAL token column
 * would hand the guard '31' or 31.0, and a key that compares equal to
 * another under NOCASE or RTRIM would be one row under two resources.
 */
static int
checkColumnTypes(sqlite3_context *ctx, const ProtectSpec *spec)
{
	sqlite3    *db = sqlite3_context_db_handle(ctx);
	const char *zType = NULL;
	const char *zColl = NULL;
	int			rc;

	if (spec->zTokenColumn)
	{
		rc = sqlite3_table_column_metadata(db, "main", spec->zTable, spec->zTokenColumn,
										   &zType, &zColl, NULL, NULL, NULL);
		if (rc != SQLITE_OK)
		{
			resultError(ctx, rc, sqlite3_mprintf("fence_protect: %s", sqlite3_errmsg(db)));
			return 0;
		}
		/* a BEFORE trigger sees no generated value: NEW.tok would read NULL */
		if (isGeneratedColumn(db, spec->zTable, spec->zTokenColumn))
		{
			resultError(ctx, SQLITE_ERROR,
						sqlite3_mprintf("fence_protect: token column \"%s\".\"%s\" is "
										"generated; the statement must write the token",
										spec->zTable, spec->zTokenColumn));
			return 0;
		}
		if (strcmp(declaredAffinity(zType), "TEXT") == 0 ||
			strcmp(declaredAffinity(zType), "REAL") == 0)
		{
			resultError(ctx, SQLITE_ERROR,
						sqlite3_mprintf("fence_protect: token column \"%s\".\"%s\" has %s affinity, "
										"not integer; declare it INTEGER, NUMERIC or untyped",
										spec->zTable, spec->zTokenColumn,
										declaredAffinity(zType)));
			return 0;
		}
	}
	if (spec->zKeyColumn)
	{
		rc = sqlite3_table_column_metadata(db, "main", spec->zTable, spec->zKeyColumn,
										   &zType, &zColl, NULL, NULL, NULL);
		if (rc != SQLITE_OK)
		{
			resultError(ctx, rc, sqlite3_mprintf("fence_protect: %s", sqlite3_errmsg(db)));
			return 0;
		}
		/*
		 * SQLite holds 1 and 1.0 as one key in a column with no affinity (or
		 * ANY in a STRICT table) while CAST(... AS TEXT) makes them "1" and
		 * "1.0": one row under two resources. INTEGER affinity turns 1.0
		 * into 1 and TEXT affinity keeps '1' and '1.0' two keys, so only
		 * those two are accepted (and they read alike in PostgreSQL).
		 */
		if (!spec->bKeyIsRowid &&
			((strcmp(declaredAffinity(zType), "INTEGER") != 0 &&
			  strcmp(declaredAffinity(zType), "TEXT") != 0) ||
			 (isStrict(db, spec->zTable) && zType && sqlite3_stricmp(zType, "ANY") == 0)))
		{
			resultError(ctx, SQLITE_ERROR,
						sqlite3_mprintf("fence_protect: key column \"%s\".\"%s\" has %s affinity, "
										"so 1 and 1.0 are two resources; declare it INTEGER or "
										"TEXT", spec->zTable, spec->zKeyColumn,
										zType && sqlite3_stricmp(zType, "ANY") == 0 &&
										isStrict(db, spec->zTable) ? "no" :
										declaredAffinity(zType)));
			return 0;
		}
		if (zColl && sqlite3_stricmp(zColl, "BINARY") != 0)
		{
			resultError(ctx, SQLITE_ERROR,
						sqlite3_mprintf("fence_protect: key column \"%s\" has collation %s, under "
										"which two texts can be one key; use BINARY",
										spec->zKeyColumn, zColl));
			return 0;
		}
	}
	return 1;
}

/*
 * For a keyed guard: the WHERE terms (on alias c) that find the rows an
 * INSERT of NEW would replace through each UNIQUE index and the rowid, one
 * term per index joined by char 1, each followed by char 2 and the test
 * that an UPDATE changed one of the index's columns; and the term saying
 * that c is not OLD.
 * An index on the key column alone, BINARY, holds only the same key: no
 * term. An index on an expression cannot be looked up: refused.
 */
static int
conflictTerms(sqlite3_context *ctx, ProtectSpec *spec, int bWithoutRowid)
{
	sqlite3    *db = sqlite3_context_db_handle(ctx);
	sqlite3_stmt *stmt = NULL;
	char	   *zTerms = sqlite3_mprintf("%s", "");
	char	   *zNotOld = NULL;
	int			bReported = 0;	/* the error is set already (not SQLite's) */
	FenceUniqueIndexes ix;
	int			rc;
	int			i,
				j;

	rc = fenceUniqueIndexesRead(db, spec->zTable, &ix);
	if (rc == FENCE_RC_INVALID)
	{
		resultError(ctx, SQLITE_ERROR,
					sqlite3_mprintf("fence_protect: the UNIQUE indexes of \"%s\" read back "
									"NULL or no rows; the table is left unguarded", spec->zTable));
		bReported = 1;
	}
	for (i = 0; rc == SQLITE_OK && zTerms && i < ix.n; i++)
	{
		const FenceUniqueIndex *x = &ix.a[i];
		char	   *zTerm = NULL;	/* its look-up */
		char	   *zChg = NULL;	/* "one of its columns changed" */

		for (j = 0; j < x->nCol; j++)
			if (x->aCol[j].iCid < 0 || x->aCol[j].zName == NULL)
				break;
		if (j < x->nCol)
		{
			resultError(ctx, SQLITE_ERROR,
						sqlite3_mprintf("fence_protect: UNIQUE index \"%s\" is on an expression: a "
										"REPLACE through it escapes a per-row guard; use one "
										"resource", x->zName));
			rc = SQLITE_ERROR;
			bReported = 1;
			break;
		}
		if (x->bPartial)
		{
			resultError(ctx, SQLITE_ERROR,
						sqlite3_mprintf("fence_protect: UNIQUE index \"%s\" is partial: a REPLACE "
										"through it escapes a per-row guard; make it whole or use "
										"one resource", x->zName));
			rc = SQLITE_ERROR;
			bReported = 1;
			break;
		}
		if (x->nCol == 1 && sqlite3_stricmp(x->aCol[0].zName, spec->zKeyColumn) == 0 &&
			sqlite3_stricmp(x->aCol[0].zColl, "BINARY") == 0)
			continue;
		for (j = 0; rc == SQLITE_OK && j < x->nCol; j++)
		{
			const char *zCol = x->aCol[j].zName;
			char	   *y = sqlite3_mprintf("%s%sNEW.\"%w\" IS NOT OLD.\"%w\"" FENCE_OLD_COLLATE,
											zChg ? zChg : "", zChg ? " OR " : "", zCol, zCol);

			sqlite3_free(zChg);
			zChg = y;
			zTerm = fenceLookupTerm(zTerm, zCol, x->aCol[j].zColl);
			if (zTerm == NULL || zChg == NULL)
				rc = SQLITE_NOMEM;
		}
		if (rc == SQLITE_OK)
		{
			char	   *z = sqlite3_mprintf("%s%s%s\002%s", zTerms, zTerms[0] ? "\001" : "",
											zTerm, zChg);

			sqlite3_free(zTerms);
			zTerms = z;
		}
		sqlite3_free(zTerm);
		sqlite3_free(zChg);
	}
	fenceUniqueIndexesFree(&ix);
	if (rc == SQLITE_OK && zTerms == NULL)
		rc = SQLITE_NOMEM;
	sqlite3_finalize(stmt);
	if (bReported)
	{
		sqlite3_free(zTerms);
		return 0;
	}

	/* the rowid is a unique key of its own unless it is the key column */
	if (rc == SQLITE_OK && zTerms && !bWithoutRowid && !spec->bKeyIsRowid)
	{
		char	   *z = sqlite3_mprintf("%s%sc.rowid = NEW.rowid\002NEW.rowid IS NOT OLD.rowid",
										zTerms, zTerms[0] ? "\001" : "");

		sqlite3_free(zTerms);
		zTerms = z;
	}
	if (rc == SQLITE_OK && zTerms)
	{
		/* the rowid (or primary key) is read too, by "this row is not OLD" */
		if (!bWithoutRowid)
			zNotOld = sqlite3_mprintf("%s", "c.rowid <> OLD.rowid");
		else
		{
			/* a WITHOUT ROWID table's row is its primary key */
			rc = sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info(?1, 'main') "
									"WHERE pk > 0 ORDER BY pk", -1, &stmt, NULL);
			if (rc == SQLITE_OK)
			{
				sqlite3_bind_text(stmt, 1, spec->zTable, -1, SQLITE_STATIC);
				zNotOld = sqlite3_mprintf("%s", "NOT (1");
				while (zNotOld && sqlite3_step(stmt) == SQLITE_ROW)
				{
					if (sqlite3_column_type(stmt, 0) != SQLITE_TEXT)
					{
						rc = SQLITE_AUTH;	/* a primary key column's name blinded */
						break;
					}
					/* only the row itself, not one its collation calls equal */
					char	   *z = sqlite3_mprintf("%s AND c.\"%w\" IS OLD.\"%w\"" FENCE_OLD_COLLATE,
													zNotOld,
													sqlite3_column_text(stmt, 0),
													sqlite3_column_text(stmt, 0));

					sqlite3_free(zNotOld);
					zNotOld = z;
				}
				if (zNotOld)
				{
					char	   *z = sqlite3_mprintf("%s)", zNotOld);

					sqlite3_free(zNotOld);
					zNotOld = z;
				}
			}
			sqlite3_finalize(stmt);
		}
	}
	if (rc != SQLITE_OK || zTerms == NULL || zNotOld == NULL || 0)
	{
		sqlite3_free(zTerms);
		sqlite3_free(zNotOld);
		if (rc == SQLITE_OK || rc == SQLITE_NOMEM)
			sqlite3_result_error_nomem(ctx);
		else
			resultError(ctx, rc, sqlite3_mprintf("fence_protect: %s", sqlite3_errmsg(db)));
		return 0;
	}
	spec->zConflictIns = zTerms;
	spec->zNotOld = zNotOld;
	return 1;
}

/*
 * The guard arguments naming the row's resource: G alone (the guard's one
 * resource is the one main.fence_guards records for G), or G, 'P', ROW."K".
 */
static char *
resourceArgs(const ProtectSpec *spec, const char *zRow)
{
	if (spec->zKeyColumn == NULL)
		return sqlite3_mprintf("%lld", (long long) spec->id);
	return sqlite3_mprintf("%lld, %Q, %s.\"%w\"", (long long) spec->id, spec->zResource,
						   zRow, spec->zKeyColumn);
}

/*
 * The condition a trigger's WHEN tests: the guard on OLD, and on NEW if it
 * differs, each having returned a value (a real call returns the token or
 * 1, or raises; one an authorizer ignored returns NULL).
 */
static char *
guardCalls(const ProtectSpec *spec, const char *zFunc, const char *zTail,
		   int bOld, int bNew)
{
	char	   *zOld = bOld ? resourceArgs(spec, "OLD") : NULL;
	char	   *zNew = bNew ? resourceArgs(spec, "NEW") : NULL;
	char	   *zSql = NULL;

	/* one resource for the table: OLD and NEW are the same fence */
	if (zOld && zNew && spec->zKeyColumn == NULL)
	{
		sqlite3_free(zNew);
		zNew = NULL;
	}
	if (zOld && zNew)
		zSql = sqlite3_mprintf("%s(%s%s) IS NOT NULL AND %s(%s%s) IS NOT NULL",
							   zFunc, zOld, zTail, zFunc, zNew, zTail);
	else if (zOld || zNew)
		zSql = sqlite3_mprintf("%s(%s%s) IS NOT NULL", zFunc, zOld ? zOld : zNew, zTail);
	sqlite3_free(zOld);
	sqlite3_free(zNew);
	return zSql;
}

/*
 * " AND (SELECT count(*) - count(<guard on c>) FROM T AS c WHERE <term>
 * [AND <not OLD>]) IS 0" for each conflict term: the rows this write would
 * replace, each checked as an UPDATE of that row. The difference is 0 only
 * when the look-up ran and every call returned a value: an authorizer that
 * ignores the SELECT (NULL) or the call (not counted) fails it. "" without
 * a key.
 */
static char *
conflictChecks(const ProtectSpec *spec, const char *zFunc, const char *zTail, int bUpdate)
{
	const char *zTerm = spec->zConflictIns;
	char	   *zSql;

	if (spec->zKeyColumn == NULL || zTerm == NULL || *zTerm == '\0')
		return sqlite3_mprintf("%s", "");
	zSql = sqlite3_mprintf("%s", "");
	while (zSql && *zTerm)
	{
		const char *zEnd = strchr(zTerm, '\001');
		int			nTerm = zEnd ? (int) (zEnd - zTerm) : (int) strlen(zTerm);
		const char *zChg = memchr(zTerm, '\002', (size_t) nTerm);
		int			nLook = (int) (zChg - zTerm);
		int			nChg = nTerm - nLook - 1;
		char	   *z;

		/*
		 * An UPDATE can collide through an index only when it changes one
		 * of the index's columns: that test does not depend on c, so SQLite
		 * makes it once, before any look-up.
		 */
		if (bUpdate)
			z = sqlite3_mprintf("%s AND (SELECT count(*) - count(%s(%lld, %Q, c.\"%w\"%s)) "
								"FROM \"%w\" AS c WHERE (%.*s) AND %.*s AND %s) IS 0", zSql, zFunc,
								(long long) spec->id, spec->zResource, spec->zKeyColumn, zTail,
								spec->zTable, nChg, zChg + 1, nLook, zTerm, spec->zNotOld);
		else
			z = sqlite3_mprintf("%s AND (SELECT count(*) - count(%s(%lld, %Q, c.\"%w\"%s)) "
								"FROM \"%w\" AS c WHERE %.*s) IS 0", zSql, zFunc, (long long) spec->id,
								spec->zResource, spec->zKeyColumn, zTail, spec->zTable,
								nLook, zTerm);

		sqlite3_free(zSql);
		zSql = z;
		zTerm = zEnd ? zEnd + 1 : zTerm + nTerm;
	}
	return zSql;
}

/*
 * A guard trigger's check is its WHEN clause, "NOT (<checks>)", not a
 * SELECT in its body: every check is an IS [NOT] test, true or false and
 * never NULL, and each call raises when it refuses; when all hold the WHEN
 * is one jump and the body is never reached. No RAISE sits in the WHEN (the
 * form "NOT (<checks>) AND RAISE(...)" fired that RAISE for every row from
 * SQLite 3.51, which may evaluate the right operand of an AND first when
 * the left holds a subquery), and none in the body: a call that returns
 * NULL without raising would be one an authorizer ignored, which fence
 * trusts (docs/trust.md), and a second statement in the body costs every
 * row a larger frame. The body writes fence_join, which makes SQLite join
 * that table to the transaction when a statement that fires the trigger
 * starts (fence_held.c), so that the guard need not run a statement of its
 * own to learn where the transaction ends; and it reads it (a DELETE finds
 * its rows first), so that SQLite plans a read of fence_join whenever it
 * prepares such a statement, which fence_guard.c counts to know when it
 * must read the schema again (admittedByCount). Of the forms that do both,
 * DELETE ... WHERE 0 costs the trigger's frame least (callgrind: 17
 * instructions a row more than an INSERT that only joins, against 66 for
 * that INSERT and a SELECT). The comment FENCE_GUARD_SHAPE marks the
 * triggers of this shape, whose statements admission may count.
 */
#define GUARD_WHEN_HEAD "/* " FENCE_GUARD_SHAPE " */ NOT ("
#define GUARD_WHEN_TAIL ") BEGIN DELETE FROM fence_join WHERE 0; END"

/*
 * The triggers that fire only with another of the guard's (insert_after
 * with insert, update_token with update) need not name fence_join: the
 * statement joins it, and is counted, through the other. Their body is the
 * smallest.
 */
#define GUARD_WHEN_TAIL_SECOND ") BEGIN SELECT 0; END"


static char *
protectSql(const ProtectSpec *spec)
{
	const char *T = spec->zTable;
	const char *zWrite = spec->zTokenColumn ? "fence_guard_write" : "fence_guard_fenced";
	char	   *zTokenTail = spec->zTokenColumn ?
		sqlite3_mprintf(", NEW.\"%w\"", spec->zTokenColumn) : sqlite3_mprintf("%s", "");
	char	   *zInsert = zTokenTail ? guardCalls(spec, zWrite, zTokenTail, 0, 1) : NULL;
	char	   *zInsertConflicts = zTokenTail ? conflictChecks(spec, zWrite, zTokenTail, 0) : NULL;
	char	   *zUpdateToken = spec->zTokenColumn && zTokenTail ?
		guardCalls(spec, "fence_guard_write", zTokenTail, 1, 1) : NULL;
	char	   *zUpdateTokenConflicts = spec->zTokenColumn && zTokenTail ?
		conflictChecks(spec, "fence_guard_write", zTokenTail, 1) : NULL;
	char	   *zUpdate = guardCalls(spec, "fence_guard_fenced", "", 1, 1);
	char	   *zUpdateConflicts = conflictChecks(spec, "fence_guard_fenced", "", 1);
	char	   *zDelete = guardCalls(spec, "fence_guard_fenced", "", 1, 0);
	char	   *zInsertTriggers = NULL;
	char	   *zTokenTrigger = NULL;
	char	   *zSql = NULL;
	long long	G = (long long) spec->id;

	if (!zTokenTail || !zInsert || !zInsertConflicts || !zUpdate || !zUpdateConflicts ||
		!zDelete || (spec->zTokenColumn && (!zUpdateToken || !zUpdateTokenConflicts)))
		goto done;

	/*
	 * A key given in the INSERT is checked BEFORE too, so that an upsert's
	 * proposed row is checked as an INSERT even when DO UPDATE runs instead.
	 */
	if (spec->bKeyIsRowid)
		zInsertTriggers = sqlite3_mprintf(
			"CREATE TRIGGER main.\"fence:%lld:insert\" BEFORE INSERT ON \"%w\" "
			"WHEN " GUARD_WHEN_HEAD "fence_guard_ready(%lld, %Q, 1) IS NOT NULL AND "
			"CASE WHEN NEW.\"%w\" <> -1 THEN %s ELSE 1 END%s" GUARD_WHEN_TAIL ";\n"
			"CREATE TRIGGER main.\"fence:%lld:insert_after\" AFTER INSERT ON \"%w\" "
			"WHEN " GUARD_WHEN_HEAD "%s" GUARD_WHEN_TAIL_SECOND ";\n",
			G, T, G, spec->zResource, spec->zKeyColumn, zInsert, zInsertConflicts, G, T,
			zInsert);
	else
		zInsertTriggers = sqlite3_mprintf(
			"CREATE TRIGGER main.\"fence:%lld:insert\" BEFORE INSERT ON \"%w\" "
			"WHEN " GUARD_WHEN_HEAD "%s%s" GUARD_WHEN_TAIL ";\n",
			G, T, zInsert, zInsertConflicts);
	/* created after "update" so that it runs first */
	zTokenTrigger = spec->zTokenColumn ?
		sqlite3_mprintf("CREATE TRIGGER main.\"fence:%lld:update_token\" "
						"BEFORE UPDATE OF \"%w\" ON \"%w\" "
						"WHEN " GUARD_WHEN_HEAD "%s%s" GUARD_WHEN_TAIL_SECOND ";\n",
						G, spec->zTokenColumn, T, zUpdateToken, zUpdateTokenConflicts) :
		sqlite3_mprintf("%s", "");
	if (zInsertTriggers && zTokenTrigger)
		zSql = sqlite3_mprintf(
			"%s"
			"CREATE TRIGGER main.\"fence:%lld:update\" BEFORE UPDATE ON \"%w\" "
			"WHEN " GUARD_WHEN_HEAD "%s%s" GUARD_WHEN_TAIL ";\n"
			"%s"
			"CREATE TRIGGER main.\"fence:%lld:delete\" BEFORE DELETE ON \"%w\" "
			"WHEN " GUARD_WHEN_HEAD "%s" GUARD_WHEN_TAIL ";\n",
			zInsertTriggers,
			G, T, zUpdate, zUpdateConflicts,
			zTokenTrigger,
			G, T, zDelete);
done:
	sqlite3_free(zInsertTriggers);
	sqlite3_free(zTokenTrigger);
	sqlite3_free(zTokenTail);
	sqlite3_free(zInsert);
	sqlite3_free(zInsertConflicts);
	sqlite3_free(zUpdateToken);
	sqlite3_free(zUpdateTokenConflicts);
	sqlite3_free(zUpdate);
	sqlite3_free(zUpdateConflicts);
	sqlite3_free(zDelete);
	return zSql;
}

/*
 * The SQL that removes table zTable's guard: its triggers are found by the
 * table they are ON, whatever the table was called when it was protected
 * (and the names older versions of fence gave them), and their guard ids
 * leave fence_guards. NULL with an error set on failure.
 */
static char *
unprotectSql(sqlite3_context *ctx, const char *zFunc, const char *zTable)
{
	sqlite3    *db = sqlite3_context_db_handle(ctx);
	sqlite3_stmt *stmt = NULL;
	char	   *zSql = sqlite3_mprintf("%s", "");
	int			bGuards = sqlite3_table_column_metadata(db, "main", "fence_guards", "id",
														NULL, NULL, NULL, NULL, NULL) == SQLITE_OK;
	int			rc;

	rc = sqlite3_prepare_v2(db,
							"SELECT name, CASE WHEN name GLOB 'fence:[0-9]*:*' THEN "
							"CAST(substr(name, 7, instr(substr(name, 7), ':') - 1) AS INTEGER) END "
							"FROM main.sqlite_schema WHERE type = 'trigger' "
							"AND tbl_name = ?1 COLLATE NOCASE AND (name GLOB 'fence:[0-9]*:*' "
							"OR name GLOB 'fence_insert:*' OR name GLOB 'fence_update:*' "
							"OR name GLOB 'fence_update_token:*' OR name GLOB 'fence_delete:*')",
							-1, &stmt, NULL);
	if (rc == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, zTable, -1, SQLITE_STATIC);
		while (zSql && (rc = sqlite3_step(stmt)) == SQLITE_ROW)
		{
			char	   *z = sqlite3_mprintf("%sDROP TRIGGER main.\"%w\";\n", zSql,
											sqlite3_column_text(stmt, 0));

			sqlite3_free(zSql);
			zSql = z;
			if (zSql && bGuards && sqlite3_column_type(stmt, 1) == SQLITE_INTEGER)
			{
				z = sqlite3_mprintf("%sDELETE FROM main.fence_guards WHERE id = %lld;\n",
									zSql, (long long) sqlite3_column_int64(stmt, 1));
				sqlite3_free(zSql);
				zSql = z;
			}
		}
	}
	sqlite3_finalize(stmt);
	if (zSql == NULL)
		sqlite3_result_error_nomem(ctx);
	else if (rc != SQLITE_DONE)
	{
		resultError(ctx, rc, sqlite3_mprintf("%s: %s", zFunc, sqlite3_errmsg(db)));
		sqlite3_free(zSql);
		zSql = NULL;
	}
	return zSql;
}

/* Run zSql, then zThen (if any), as one unit: all of it or none. */
static int
execAtomically(sqlite3_context *ctx, const char *zFunc, const char *zSql, const char *zThen)
{
	sqlite3    *db = sqlite3_context_db_handle(ctx);
	int			rc = sqlite3_exec(db, "SAVEPOINT fence_protect", NULL, NULL, NULL);

	if (rc == SQLITE_OK)
	{
		rc = sqlite3_exec(db, zSql, NULL, NULL, NULL);
		if (rc == SQLITE_OK && zThen != NULL)
			rc = sqlite3_exec(db, zThen, NULL, NULL, NULL);
		if (rc != SQLITE_OK)
		{
			char	   *zMsg = sqlite3_mprintf("%s: %s", zFunc, sqlite3_errmsg(db));

			sqlite3_exec(db, "ROLLBACK TO fence_protect; RELEASE fence_protect", NULL, NULL, NULL);
			resultError(ctx, rc, zMsg);
			return 0;
		}
		rc = sqlite3_exec(db, "RELEASE fence_protect", NULL, NULL, NULL);
	}
	if (rc != SQLITE_OK)
	{
		resultError(ctx, rc, sqlite3_mprintf("%s: %s", zFunc, sqlite3_errmsg(db)));
		return 0;
	}
	return 1;
}

static int
argName(sqlite3_context *ctx, sqlite3_value *v, const char *zWhat, int bNullable,
		const char **pz)
{
	*pz = NULL;
	if (sqlite3_value_type(v) == SQLITE_NULL && bNullable)
		return 1;
	if (sqlite3_value_type(v) != SQLITE_TEXT || sqlite3_value_bytes(v) == 0)
	{
		resultError(ctx, FENCE_RC_INVALID,
					sqlite3_mprintf("invalid fencing %s: %s", zWhat,
									sqlite3_value_type(v) == SQLITE_NULL ? "NULL" :
									sqlite3_value_type(v) != SQLITE_TEXT ? "not TEXT" :
									"empty string"));
		return 0;
	}
	*pz = (const char *) sqlite3_value_text(v);
	return 1;
}

/*
 * fence_protect(table, token_column, resource)
 * fence_protect(table, token_column, resource_prefix, key_column)
 */
void
fenceProtectFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	sqlite3    *db = sqlite3_context_db_handle(ctx);
	ProtectSpec spec;
	const char *zTable;
	char	   *zCanonical = NULL;
	char	   *zSql = NULL;
	char	   *zDrop = NULL;
	FenceProblem problem;
	size_t		nResource;

	memset(&spec, 0, sizeof(spec));
	if (!argName(ctx, argv[0], "table", 0, &zTable) ||
		!argName(ctx, argv[1], "token column", 1, &spec.zTokenColumn) ||
		(argc == 4 && !argName(ctx, argv[3], "key column", 0, &spec.zKeyColumn)))
		return;

	/* a resource must be valid; a prefix may be empty (the key alone) */
	if (sqlite3_value_type(argv[2]) != SQLITE_TEXT)
		problem = sqlite3_value_type(argv[2]) == SQLITE_NULL ? FENCE_NULL : FENCE_NOT_TEXT;
	else
	{
		spec.zResource = (const char *) sqlite3_value_text(argv[2]);
		nResource = (size_t) sqlite3_value_bytes(argv[2]);
		problem = fence_check_resource(spec.zResource, nResource);
		if (argc == 4 && problem == FENCE_EMPTY)
			problem = FENCE_VALID;
	}
	if (problem != FENCE_VALID)
	{
		char		buf[FENCE_MSG_MAX];

		resultError(ctx, FENCE_RC_INVALID, sqlite3_mprintf("%s",
					fence_msg_invalid(buf, argc == 4 ? "resource prefix" : "resource",
									  problem, (size_t) sqlite3_value_bytes(argv[2]), 0)));
		return;
	}

	{
		/* refused now, not at the first write: fence adopts no table it did not make */
		char	   *zShape = NULL;
		int			rc = fenceOwnTableShape(db, "fence_guards", &zShape);

		if (rc == SQLITE_OK)
			rc = fenceOwnTableShape(db, "fence_tokens", &zShape);
		if (rc != SQLITE_OK)
		{
			resultError(ctx, rc == FENCE_RC_UNTRUSTED ? FENCE_RC_INVALID : rc, zShape);
			return;
		}
	}
	zCanonical = lookupTable(ctx, "fence_protect", zTable);
	if (zCanonical == NULL)
		return;
	spec.zTable = zCanonical;

	/*
	 * Admission counts the guard's look-ups by this text ("FROM "T" AS c
	 * WHERE ", fence_guard.c): in the table's own name it would be taken
	 * for a look-up of another table, and every write refused.
	 */
	if (strstr(zCanonical, FENCE_LOOKUP_ALIAS) != NULL)
	{
		resultError(ctx, SQLITE_ERROR,
					sqlite3_mprintf("fence_protect: cannot guard \"%s\": its name contains \"%s\", "
									"which fence's triggers use; rename the table first",
									zCanonical, FENCE_LOOKUP_ALIAS));
		goto done;
	}
	/* a per-row guard's look-ups name the row by rowid (fence_guard.c) */
	if (spec.zKeyColumn)
	{
		int			bRowidColumn = 0;
		int			rc = fenceHasRowidColumn(db, zCanonical, &bRowidColumn);

		if (rc != SQLITE_OK || bRowidColumn)
		{
			resultError(ctx, rc == SQLITE_OK ? SQLITE_ERROR : fenceErrorCode(rc),
						rc == SQLITE_OK ?
						sqlite3_mprintf("fence_protect: \"%s\" has a column named rowid, which "
										"hides the rowid a per-row guard reads; rename the column",
										zCanonical) :
						sqlite3_mprintf("fence_protect: cannot read the columns of \"%s\"; the "
										"table is left unguarded", zCanonical));
			goto done;
		}
	}
	/* a per-row guard reads its key and UNIQUE columns before SQLite assigns the rowid */
	if (spec.zKeyColumn)
	{
		char	   *zGenerated = NULL;
		int			rc = fenceGeneratedOverRowid(db, zCanonical, spec.zKeyColumn, &zGenerated);

		if (rc != SQLITE_OK || zGenerated != NULL)
		{
			resultError(ctx, rc == SQLITE_OK ? SQLITE_ERROR : fenceErrorCode(rc),
						rc == SQLITE_OK ?
						sqlite3_mprintf("fence_protect: generated column \"%s\" is computed before "
										"the rowid is assigned, so the guard would check the wrong "
										"%s; use a plain column", zGenerated,
										sqlite3_stricmp(zGenerated, spec.zKeyColumn) == 0 ?
										"resource" : "rows for a REPLACE") :
						sqlite3_mprintf("fence_protect: cannot read the columns of \"%s\"; the "
										"table is left unguarded", zCanonical));
			sqlite3_free(zGenerated);
			goto done;
		}
	}
	if ((spec.zTokenColumn && !lookupColumn(ctx, zCanonical, spec.zTokenColumn, NULL)) ||
		(spec.zKeyColumn && !lookupColumn(ctx, zCanonical, spec.zKeyColumn, &spec.bKeyIsRowid)) ||
		!checkColumnTypes(ctx, &spec) ||
		(spec.zKeyColumn && !conflictTerms(ctx, &spec, isWithoutRowid(db, zCanonical))))
		goto done;
	/* nor a NULL SQLite replaces by a DEFAULT after its look-ups ran */
	if (spec.zKeyColumn)
	{
		FenceUniqueIndexes ix = {0, NULL};
		char	   *zReplaced = NULL;
		int			why = FENCE_DEFAULT_UNIQUE;
		int			rc = fenceUniqueIndexesRead(db, zCanonical, &ix);

		if (rc == SQLITE_OK)
			rc = fenceDefaultReplaced(db, zCanonical, &ix,
									  spec.bKeyIsRowid ? spec.zTokenColumn : NULL,
									  &zReplaced, &why);
		fenceUniqueIndexesFree(&ix);
		if (rc != SQLITE_OK || zReplaced != NULL)
		{
			resultError(ctx, rc == SQLITE_OK ? SQLITE_ERROR : fenceErrorCode(rc),
						rc == SQLITE_OK ?
						sqlite3_mprintf("fence_protect: NOT NULL DEFAULT column \"%s\" (%s) gets its "
										"DEFAULT after the guard under REPLACE; drop the DEFAULT or "
										"make NOT NULL a CHECK", zReplaced,
										why == FENCE_DEFAULT_AFTER ? "the token column" :
										why == FENCE_DEFAULT_GENERATED ? "beside a generated column" :
										"in a UNIQUE index") :
						sqlite3_mprintf("fence_protect: cannot read the columns of \"%s\"; the "
										"table is left unguarded", zCanonical));
			sqlite3_free(zReplaced);
			goto done;
		}
	}

	/* a random id: a copy of this file attached beside it is told apart */
	sqlite3_randomness(sizeof(spec.id), &spec.id);
	spec.id &= (sqlite3_int64) 0x3fffffffffffffffLL;
	if (spec.id == 0)
		spec.id = 1;
	if (spec.zKeyColumn)
	{
		int			bBlind;

		spec.zUniques = fenceUniqueSignature(db, zCanonical, &bBlind);
		if (spec.zUniques == NULL)
		{
			resultError(ctx, bBlind ? FENCE_RC_INVALID : sqlite3_errcode(db),
						bBlind ? sqlite3_mprintf("fence_protect: the UNIQUE indexes of \"%s\" "
												 "read back NULL or no rows; the table is "
												 "left as it was", zCanonical) :
						sqlite3_mprintf("fence_protect: %s", sqlite3_errmsg(db)));
			goto done;
		}
	}
	else
		spec.zUniques = sqlite3_mprintf("*");
	zDrop = unprotectSql(ctx, "fence_protect", zCanonical);
	if (zDrop == NULL)
		goto done;
	zSql = protectSql(&spec);
	if (zSql == NULL || spec.zUniques == NULL)
	{
		sqlite3_result_error_nomem(ctx);
		goto done;
	}
	{
		/* protecting again replaces the guard, in one step */
		char	   *zAll = sqlite3_mprintf("%s;\n%s"
										   "INSERT INTO main.fence_guards(id, resource, keyed, uniques) "
										   "VALUES (%lld, %Q, %d, %Q);\n",
										   createGuardsSql, zSql, (long long) spec.id,
										   spec.zResource, spec.zKeyColumn != NULL, spec.zUniques);

		if (zAll == NULL)
			sqlite3_result_error_nomem(ctx);
		else if (execAtomically(ctx, "fence_protect", zAll, zDrop))
			sqlite3_result_null(ctx);
		sqlite3_free(zAll);
	}
done:
	sqlite3_free(zDrop);
	sqlite3_free(zSql);
	sqlite3_free(zCanonical);
	sqlite3_free(spec.zUniques);
	sqlite3_free(spec.zConflictIns);
	sqlite3_free(spec.zNotOld);
}

/* fence_unprotect(table): drop the guard; a table without one is left as is. */
void
fenceUnprotectFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	const char *zTable;
	char	   *zCanonical;
	char	   *zDrop;

	(void) argc;
	if (!argName(ctx, argv[0], "table", 0, &zTable))
		return;
	zCanonical = lookupTable(ctx, "fence_unprotect", zTable);
	if (zCanonical == NULL)
		return;
	zDrop = unprotectSql(ctx, "fence_unprotect", zCanonical);
	if (zDrop != NULL && execAtomically(ctx, "fence_unprotect", zDrop, NULL))
		sqlite3_result_null(ctx);
	sqlite3_free(zDrop);
	sqlite3_free(zCanonical);
}
