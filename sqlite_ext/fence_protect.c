/*
 * fence_protect.c
 *
 * fence_protect() and fence_unprotect() for SQLite: the guard of a protected
 * table is a set of ordinary triggers in main that call the guard functions
 * (fence.c) and a row of main.fence_guards that records the guard's random id
 * G, its resource (or prefix) and, for a per-row guard, its key column.
 * Because the triggers live in the database file, every connection that
 * writes the table runs them, and a connection that has not loaded fence
 * fails to prepare the write ("no such function: fence_guard_write"): the
 * guard fails closed. Each call passes G, and the guard admits it only when
 * main.fence_guards holds it (fence_guard.c): through ATTACH no call passes.
 *
 * Provides fenceProtectFunc and fenceUnprotectFunc (registered by
 * fence_init.c). Calls fence_schema_read.c (fenceReadInt, fenceIsRowidAlias,
 * fenceOwnTableShape).
 *
 * The triggers, for table T with token column C (if any) and resource R or
 * prefix P plus key column K, named "fence:G:<kind>" and found again by the
 * table they are ON (a renamed table keeps its guard; its old name is free),
 * each checking what core's row rule (fence_row_rule) says:
 *
 *   insert        BEFORE INSERT     the new row's token is checked, or
 *                                   without C the transaction must hold a
 *                                   fence on the row's resource; a K that is
 *                                   T's INTEGER PRIMARY KEY left for SQLite
 *                                   to assign (BEFORE triggers see -1) is
 *                                   passed as NULL, and refused
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
 * the rows that conflict with the new one, and with recursive_triggers on
 * fires the delete trigger for each, with the real row: a DELETE of that
 * row. With one resource for the table such a row is under the same fence
 * as the write; a per-row table a REPLACE can reach across keys is written
 * only with recursive_triggers on (fence_guard.c).
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
	char	   *zUniques;		/* fence_guards.uniques: the key column, or "*" */
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
	const char *zType;
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
	zType = rc == SQLITE_ROW ? (const char *) sqlite3_column_text(stmt, 1) : NULL;
	if (zType != NULL && strcmp(zType, "table") == 0)
		zFound = sqlite3_mprintf("%s", (const char *) sqlite3_column_text(stmt, 0));
	if (zFound == NULL)
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

/*
 * pragma_table_xinfo's "hidden" of the column: 0 an ordinary column, 2 or 3
 * a generated one, -1 none (a virtual table's hidden columns, and the
 * implicit "rowid" the metadata API knows, are none).
 */
static int
columnHidden(sqlite3 *db, const char *zTable, const char *zColumn)
{
	return fenceReadInt(db, "SELECT hidden FROM pragma_table_xinfo(?1, 'main') "
						"WHERE name = ?2 COLLATE NOCASE AND hidden <> 1", zTable, zColumn);
}

static int
isStrict(sqlite3 *db, const char *zTable)
{
	return fenceReadInt(db, "SELECT strict FROM pragma_table_list WHERE schema = 'main' "
						"AND name = ?1", zTable, NULL) == 1;
}

/* Does the column exist? *pIsRowid: it is the table's INTEGER PRIMARY KEY. */
static int
lookupColumn(sqlite3_context *ctx, const char *zTable, const char *zColumn,
			 int *pIsRowid)
{
	sqlite3    *db = sqlite3_context_db_handle(ctx);

	if (columnHidden(db, zTable, zColumn) < 0)
	{
		resultError(ctx, SQLITE_ERROR,
					sqlite3_mprintf("fence_protect: no such column: \"%s\".\"%s\"",
									zTable, zColumn));
		return 0;
	}
	if (pIsRowid)
	{
		*pIsRowid = fenceIsRowidAlias(db, zTable, zColumn);
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
		if (columnHidden(db, spec->zTable, spec->zTokenColumn) >= 2)
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
		/* one computed from a rowid not yet assigned would name another resource */
		if (columnHidden(db, spec->zTable, spec->zKeyColumn) >= 2)
		{
			resultError(ctx, SQLITE_ERROR,
						sqlite3_mprintf("fence_protect: key column \"%s\".\"%s\" is generated; "
										"use a plain column; the table is left unguarded",
										spec->zTable, spec->zKeyColumn));
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
 * zSql (freed; NULL when out of memory), then (after an AND) the guard call
 * that makes check on row zRow ("OLD", "NEW"): an IS NOT NULL test (a call
 * returns the token or 1, or raises). Its arguments name the row's resource:
 * G alone (the guard's one resource is the one main.fence_guards records for
 * G), or G, 'P', ROW."K"; FENCE_ROW_PRESENT adds zToken, NEW's token. An
 * INSERT's key that is the INTEGER PRIMARY KEY reads -1 in a BEFORE trigger
 * when SQLite is to assign it: passed as NULL, which the guard refuses as
 * every NULL key (one SQLite assigns later cannot name the resource held).
 */
static char *
guardCall(const ProtectSpec *spec, char *zSql, FenceRowCheck check, const char *zRow,
		  FenceRowOp op, const char *zToken)
{
	const char *zFunc = check == FENCE_ROW_PRESENT ? "fence_guard_write" : "fence_guard_fenced";
	char	   *zOut;

	if (zSql == NULL || check == FENCE_ROW_SKIP)
		return zSql;
	if (check != FENCE_ROW_PRESENT)
		zToken = "";
	if (spec->zKeyColumn == NULL)
		zOut = sqlite3_mprintf("%s%s%s(%lld%s) IS NOT NULL", zSql, *zSql ? " AND " : "",
							   zFunc, (long long) spec->id, zToken);
	else
		zOut = sqlite3_mprintf(op == FENCE_ROW_INSERT && spec->bKeyIsRowid ?
							   "%s%s%s(%lld, %Q, nullif(%s.\"%w\", -1)%s) IS NOT NULL" :
							   "%s%s%s(%lld, %Q, %s.\"%w\"%s) IS NOT NULL",
							   zSql, *zSql ? " AND " : "", zFunc, (long long) spec->id,
							   spec->zResource, zRow, spec->zKeyColumn, zToken);
	sqlite3_free(zSql);
	return zOut;
}

/*
 * The condition a trigger's WHEN tests for a write of kind op: the checks
 * the row rule (fence_row_rule, core) gives OLD and NEW, NEW's only where
 * it can name another resource than OLD's.
 */
static char *
guardCalls(const ProtectSpec *spec, FenceRowOp op, int bTokenSet, const char *zToken)
{
	FenceRowRule rule = fence_row_rule(op, spec->zTokenColumn != NULL, bTokenSet);
	char	   *zSql = guardCall(spec, sqlite3_mprintf("%s", ""), rule.old_row, "OLD", op, zToken);

	/* one resource for the table: OLD and NEW are the same fence */
	return guardCall(spec, zSql, rule.old_row && spec->zKeyColumn == NULL ?
					 FENCE_ROW_SKIP : rule.new_row, "NEW", op, zToken);
}

/*
 * A guard trigger's check is its WHEN clause, "NOT (<checks>)", not a
 * SELECT in its body: every check is an IS NOT NULL test, and each call
 * raises when it refuses; when all hold the WHEN is one jump and the body
 * is never reached. The body writes fence_join, which makes SQLite join
 * that table to the transaction when a statement that fires the trigger
 * starts (fence_held.c), so that the guard need not run a statement of its
 * own to learn where the transaction ends; and it reads it (a DELETE finds
 * its rows first), so that SQLite plans a read of fence_join whenever it
 * prepares such a statement, which the change detector counts to know
 * when it must look at the schema again (fence_held.c, "What changed").
 * Of the forms that do both,
 * DELETE ... WHERE 0 costs the trigger's frame least. The comment
 * FENCE_GUARD_SHAPE marks the triggers of this shape; admission refuses a
 * guard whose triggers are of another (an older fence's).
 */
#define GUARD_WHEN_HEAD "/* " FENCE_GUARD_SHAPE " */ NOT ("
#define GUARD_WHEN_TAIL ") BEGIN DELETE FROM fence_join WHERE 0; END"

/* update_token fires only with update, which joins fence_join: the smallest body */
#define GUARD_WHEN_TAIL_SECOND ") BEGIN SELECT 0; END"

static char *
protectSql(const ProtectSpec *spec)
{
	const char *T = spec->zTable;
	char	   *zTokenTail = spec->zTokenColumn ?
		sqlite3_mprintf(", NEW.\"%w\"", spec->zTokenColumn) : sqlite3_mprintf("%s", "");
	char	   *zInsert = zTokenTail ? guardCalls(spec, FENCE_ROW_INSERT, 0, zTokenTail) : NULL;
	char	   *zUpdateToken = spec->zTokenColumn && zTokenTail ?
		guardCalls(spec, FENCE_ROW_UPDATE, 1, zTokenTail) : NULL;
	char	   *zUpdate = guardCalls(spec, FENCE_ROW_UPDATE, 0, "");
	char	   *zDelete = guardCalls(spec, FENCE_ROW_DELETE, 0, "");
	char	   *zTokenTrigger = NULL;
	char	   *zSql = NULL;
	long long	G = (long long) spec->id;

	if (!zTokenTail || !zInsert || !zUpdate || !zDelete || (spec->zTokenColumn && !zUpdateToken))
		goto done;
	/* created after "update" so that it runs first */
	zTokenTrigger = spec->zTokenColumn ?
		sqlite3_mprintf("CREATE TRIGGER main.\"fence:%lld:update_token\" "
						"BEFORE UPDATE OF \"%w\" ON \"%w\" "
						"WHEN " GUARD_WHEN_HEAD "%s" GUARD_WHEN_TAIL_SECOND ";\n",
						G, spec->zTokenColumn, T, zUpdateToken) :
		sqlite3_mprintf("%s", "");
	if (zTokenTrigger)
		zSql = sqlite3_mprintf(
			"CREATE TRIGGER main.\"fence:%lld:insert\" BEFORE INSERT ON \"%w\" "
			"WHEN " GUARD_WHEN_HEAD "%s" GUARD_WHEN_TAIL ";\n"
			"CREATE TRIGGER main.\"fence:%lld:update\" BEFORE UPDATE ON \"%w\" "
			"WHEN " GUARD_WHEN_HEAD "%s" GUARD_WHEN_TAIL ";\n"
			"%s"
			"CREATE TRIGGER main.\"fence:%lld:delete\" BEFORE DELETE ON \"%w\" "
			"WHEN " GUARD_WHEN_HEAD "%s" GUARD_WHEN_TAIL ";\n",
			G, T, zInsert, G, T, zUpdate, zTokenTrigger, G, T, zDelete);
done:
	sqlite3_free(zTokenTrigger);
	sqlite3_free(zTokenTail);
	sqlite3_free(zInsert);
	sqlite3_free(zUpdateToken);
	sqlite3_free(zUpdate);
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
			resultError(ctx, rc, zShape);
			return;
		}
	}
	zCanonical = lookupTable(ctx, "fence_protect", zTable);
	if (zCanonical == NULL)
		return;
	spec.zTable = zCanonical;

	if ((spec.zTokenColumn && !lookupColumn(ctx, zCanonical, spec.zTokenColumn, NULL)) ||
		(spec.zKeyColumn && !lookupColumn(ctx, zCanonical, spec.zKeyColumn, &spec.bKeyIsRowid)) ||
		!checkColumnTypes(ctx, &spec))
		goto done;

	/* a random id: a copy of this file attached beside it is told apart */
	sqlite3_randomness(sizeof(spec.id), &spec.id);
	spec.id &= (sqlite3_int64) 0x3fffffffffffffffLL;
	if (spec.id == 0)
		spec.id = 1;
	/* admission reads the key column back (fenceReplaceReaches) */
	spec.zUniques = spec.zKeyColumn ? sqlite3_mprintf("%s", spec.zKeyColumn) : sqlite3_mprintf("*");
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
