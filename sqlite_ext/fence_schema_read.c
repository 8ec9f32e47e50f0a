/*
 * fence_schema_read.c
 *
 * Reading the schema, as fence_protect (fence_protect.c) and admission
 * (fence_guard.c) need it. Each read is one SELECT of a pragma or of
 * sqlite_schema.
 *
 * Provides: fenceReadInt (the one integer a query gives), fenceIsRowidAlias
 * (is a column the INTEGER PRIMARY KEY?), fenceReplaceReaches (can a
 * REPLACE on a per-row table delete a row of another key?),
 * fenceGuardIdIn (does a schema hold a guard's triggers?) and
 * fenceOwnTableShape (is a table of fence's name the one
 * fence makes?). Calls no other file of fence.
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

/* The one integer zSql gives (?1, ?2 bound to the texts), or -1 when it cannot tell. */
int
fenceReadInt(sqlite3 *db, const char *zSql, const char *z1, const char *z2)
{
	sqlite3_stmt *stmt = NULL;
	int			r = -1;

	if (sqlite3_prepare_v2(db, zSql, -1, &stmt, NULL) == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, z1, -1, SQLITE_STATIC);
		sqlite3_bind_text(stmt, 2, z2, -1, SQLITE_STATIC);
		if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_type(stmt, 0) == SQLITE_INTEGER)
			r = sqlite3_column_int(stmt, 0);
	}
	sqlite3_finalize(stmt);
	return r;
}

/*
 * Is zColumn main.zTable's INTEGER PRIMARY KEY, the alias of the rowid? It
 * is when it is the sole primary key column, declared INTEGER, and the
 * table has no separate primary key index (a WITHOUT ROWID table, or the
 * "INTEGER PRIMARY KEY DESC" quirk, has one). 1, 0, or -1 when it cannot
 * tell.
 */
int
fenceIsRowidAlias(sqlite3 *db, const char *zTable, const char *zColumn)
{
	const char *zDeclType = NULL;
	int			bPk = 0;

	if (sqlite3_table_column_metadata(db, "main", zTable, zColumn, &zDeclType, NULL, NULL,
									  &bPk, NULL) != SQLITE_OK)
		return -1;
	if (!bPk || zDeclType == NULL || sqlite3_stricmp(zDeclType, "INTEGER") != 0)
		return 0;
	return fenceReadInt(db, "SELECT (SELECT count(*) FROM pragma_table_info(?1, 'main') WHERE pk > 0) "
				   "= 1 AND NOT EXISTS (SELECT 1 FROM pragma_index_list(?1, 'main') "
				   "WHERE origin = 'pk')", zTable, NULL);
}

/*
 * Can a REPLACE on main.zTable, guarded per row on key column zKey, delete
 * a row of another key? Yes through any UNIQUE index other than one on the
 * key alone with BINARY collation (which holds only rows of the same key),
 * and, in a rowid table, through the rowid unless it is the key. 1, 0, or
 * 1 when it cannot tell (the key column renamed since fence_protect).
 */
int
fenceReplaceReaches(sqlite3 *db, const char *zTable, const char *zKey)
{
	int			bWithoutRowid = fenceReadInt(db, "SELECT wr FROM pragma_table_list "
										"WHERE schema = 'main' AND name = ?1", zTable, NULL);
	int			bOther;

	if (bWithoutRowid < 0 || (bWithoutRowid == 0 && fenceIsRowidAlias(db, zTable, zKey) != 1))
		return 1;
	bOther = fenceReadInt(db, "SELECT EXISTS (SELECT 1 FROM pragma_index_list(?1, 'main') AS l "
					 "WHERE l.\"unique\" AND (SELECT count(*) <> 1 OR max(x.name IS NOT ?2 "
					 "COLLATE NOCASE OR x.coll IS NOT 'BINARY' COLLATE NOCASE) "
					 "FROM pragma_index_xinfo(l.name, 'main') AS x WHERE x.key))",
					 zTable, zKey);
	return bOther != 0;
}

/*
 * Does zSchema hold a trigger of guard id ("fence:<id>:...")? A copy of
 * main's file does, and so does a schema-only clone (the shell's .schema),
 * which has no fence_guards row. SQLITE_OK or an error.
 */
int
fenceGuardIdIn(sqlite3 *db, const char *zSchema, sqlite3_int64 id, int *pbHolds)
{
	sqlite3_stmt *stmt = NULL;
	char	   *zSql = sqlite3_mprintf("SELECT 1 FROM \"%w\".sqlite_schema WHERE type = 'trigger' "
									   "AND name GLOB 'fence:%lld:*'", zSchema, (long long) id);
	int			rc = zSql ? sqlite3_prepare_v2(db, zSql, -1, &stmt, NULL) : SQLITE_NOMEM;

	sqlite3_free(zSql);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(stmt);
	*pbHolds = rc == SQLITE_ROW;
	sqlite3_finalize(stmt);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/*
 * Is main.zTable (fence_tokens or fence_guards) the table fence creates?
 * SQLITE_OK when it is, or when there is none yet; SQLITE_ERROR with
 * *pzErr (sqlite3_malloc'd) saying what is wrong and how to repair it when
 * another definition holds the name: fence never adopts a table it did not
 * make (a CSV import makes every column TEXT, and a TEXT token compares as
 * text). The definition SQLite stores is compared whole: columns, declared
 * types, collations, NOT NULL, CHECK and WITHOUT ROWID. A dump restored by
 * the shell or by iterdump keeps that text, so it stays fence's.
 */
int
fenceOwnTableShape(sqlite3 *db, const char *zTable, char **pzErr)
{
	int			bTokens = sqlite3_stricmp(zTable, "fence_tokens") == 0;
	int			bLeases = sqlite3_stricmp(zTable, "fence_leases") == 0;
	const char *zColumns = bTokens ? FENCE_TOKENS_COLUMNS :
		bLeases ? FENCE_LEASES_COLUMNS : FENCE_GUARDS_COLUMNS;
	char	   *zExpected = sqlite3_mprintf("CREATE TABLE %s%s", zTable, zColumns);
	sqlite3_stmt *stmt = NULL;
	const char *zFound;
	int			rc;

	*pzErr = NULL;
	if (zExpected == NULL)
		return SQLITE_NOMEM;
	rc = sqlite3_prepare_v2(db, "SELECT sql, typeof(sql), type FROM main.sqlite_schema "
							"WHERE name = ?1 COLLATE NOCASE", -1, &stmt, NULL);
	if (rc == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, zTable, -1, SQLITE_STATIC);
		rc = sqlite3_step(stmt);
	}
	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;			/* not there yet: fence creates it */
	else if (rc != SQLITE_ROW)
		*pzErr = sqlite3_mprintf("fence: cannot read the definition of main.%s: %s",
								 zTable, sqlite3_errmsg(db));
	else if ((zFound = (const char *) sqlite3_column_text(stmt, 0)) != NULL &&
			 strcmp(zFound, zExpected) == 0)
		rc = SQLITE_OK;
	else
	{
		rc = SQLITE_ERROR;
		*pzErr = sqlite3_mprintf("fence refused: main.%s is not the table fence makes; "
								 "rename it (docs/sqlite-guarantees.md: a table of that name)",
								 zTable);
		if (*pzErr == NULL)
			rc = SQLITE_NOMEM;
	}
	sqlite3_finalize(stmt);
	sqlite3_free(zExpected);
	return rc;
}
