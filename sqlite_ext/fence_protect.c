/*
 * fence_protect.c
 *
 * fence_protect() and fence_unprotect() for SQLite: the guard of a protected
 * table is a set of ordinary triggers in main that call fence_guard_write()
 * and fence_guard_fenced() (fence.c). Because the triggers live in the
 * database file, every connection that writes the table runs them, and a
 * connection that has not loaded fence fails to prepare the write ("no such
 * function: fence_guard_write"): the guard fails closed.
 *
 * The triggers, for table T with token column C (if any) and resource R or
 * prefix P plus key column K:
 *
 *   fence_insert:T        BEFORE INSERT     the new row's token is checked
 *                         (AFTER INSERT when K is T's INTEGER PRIMARY KEY,
 *                         whose value a BEFORE trigger sees as -1 when SQLite
 *                         assigns it), or without C the transaction must hold
 *                         a fence on the row's resource
 *   fence_update_token:T  BEFORE UPDATE OF C   the statement sets C: its new
 *                         value is checked under the old and new resource
 *   fence_update:T        AFTER UPDATE      every UPDATE: the transaction
 *                         must hold a fence on the old and new resource
 *   fence_delete:T        BEFORE DELETE     the transaction must hold a fence
 *                         on the row's resource
 *
 * "BEFORE UPDATE OF C" fires only when C is in the SET list, and SQLite runs
 * every BEFORE row trigger before any AFTER row trigger, so the AFTER UPDATE
 * check sees the fence that a token in the statement has just taken, and an
 * UPDATE that leaves C out must already hold one: leaving the token column
 * out is never a way around the fence.
 */
#include "fence_sqlite.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

static const char *const triggerKinds[] = {
	"insert", "update_token", "update", "delete"
};

typedef struct ProtectSpec
{
	const char *zTable;			/* the table's name as stored in the schema */
	const char *zTokenColumn;	/* NULL: no token column */
	const char *zResource;		/* the resource, or the prefix with a key */
	const char *zKeyColumn;		/* NULL: one fence for the table */
	int			bKeyIsRowid;	/* the key is the INTEGER PRIMARY KEY */
} ProtectSpec;

static void
resultError(sqlite3_context *ctx, int rc, char *zMsg)
{
	if (zMsg == NULL)
	{
		sqlite3_result_error_nomem(ctx);
		return;
	}
	sqlite3_result_error(ctx, zMsg, -1);
	sqlite3_result_error_code(ctx, rc);
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
	if (rc == SQLITE_ROW && strcmp((const char *) sqlite3_column_text(stmt, 1), "table") == 0)
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

	if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?1, 'main') "
						   "WHERE name = ?2 COLLATE NOCASE", -1, &stmt, NULL) == SQLITE_OK)
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
 * "INTEGER PRIMARY KEY DESC" quirk, has one).
 */
static int
isRowidAlias(sqlite3 *db, const char *zTable, const char *zColumn)
{
	sqlite3_stmt *stmt = NULL;
	int			bAlias = 0;

	if (sqlite3_prepare_v2(db,
						   "SELECT (SELECT count(*) FROM pragma_table_info(?1, 'main') WHERE pk > 0) = 1"
						   " AND EXISTS (SELECT 1 FROM pragma_table_info(?1, 'main')"
						   "   WHERE pk = 1 AND name = ?2 COLLATE NOCASE AND upper(type) = 'INTEGER')"
						   " AND NOT EXISTS (SELECT 1 FROM pragma_index_list(?1, 'main') WHERE origin = 'pk')",
						   -1, &stmt, NULL) == SQLITE_OK)
	{
		sqlite3_bind_text(stmt, 1, zTable, -1, SQLITE_STATIC);
		sqlite3_bind_text(stmt, 2, zColumn, -1, SQLITE_STATIC);
		if (sqlite3_step(stmt) == SQLITE_ROW)
			bAlias = sqlite3_column_int(stmt, 0);
	}
	sqlite3_finalize(stmt);
	return bAlias;
}

/* Does the column exist? *pIsRowid: it is the table's INTEGER PRIMARY KEY. */
static int
lookupColumn(sqlite3_context *ctx, const char *zTable, const char *zColumn,
			 int *pIsRowid)
{
	sqlite3    *db = sqlite3_context_db_handle(ctx);

	/* pragma_table_info, unlike the metadata API, knows no implicit "rowid" */
	if (!isRealColumn(db, zTable, zColumn))
	{
		resultError(ctx, SQLITE_ERROR,
					sqlite3_mprintf("fence_protect: no such column: \"%s\".\"%s\"",
									zTable, zColumn));
		return 0;
	}
	if (pIsRowid)
		*pIsRowid = isRowidAlias(db, zTable, zColumn);
	return 1;
}

/* The guard arguments naming the row's resource: 'R' or 'P', ROW."K". */
static char *
resourceArgs(const ProtectSpec *spec, const char *zRow)
{
	if (spec->zKeyColumn == NULL)
		return sqlite3_mprintf("%Q", spec->zResource);
	return sqlite3_mprintf("%Q, %s.\"%w\"", spec->zResource, zRow, spec->zKeyColumn);
}

/* The SELECT list a trigger runs: the guard on OLD, and on NEW if it differs. */
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
		zSql = sqlite3_mprintf("%s(%s%s), %s(%s%s)", zFunc, zOld, zTail, zFunc, zNew, zTail);
	else if (zOld || zNew)
		zSql = sqlite3_mprintf("%s(%s%s)", zFunc, zOld ? zOld : zNew, zTail);
	sqlite3_free(zOld);
	sqlite3_free(zNew);
	return zSql;
}

static char *
protectSql(const ProtectSpec *spec)
{
	const char *T = spec->zTable;
	char	   *zTokenTail = spec->zTokenColumn ?
		sqlite3_mprintf(", NEW.\"%w\"", spec->zTokenColumn) : NULL;
	char	   *zInsert = spec->zTokenColumn ?
		guardCalls(spec, "fence_guard_write", zTokenTail, 0, 1) :
		guardCalls(spec, "fence_guard_fenced", "", 0, 1);
	char	   *zUpdateToken = spec->zTokenColumn ?
		guardCalls(spec, "fence_guard_write", zTokenTail, 1, 1) : NULL;
	char	   *zUpdate = guardCalls(spec, "fence_guard_fenced", "", 1, 1);
	char	   *zDelete = guardCalls(spec, "fence_guard_fenced", "", 1, 0);
	char	   *zSql = NULL;

	if (zInsert && zUpdate && zDelete && (zUpdateToken || !spec->zTokenColumn))
	{
		char	   *zTokenTrigger = zUpdateToken ?
			sqlite3_mprintf("CREATE TRIGGER main.\"fence_update_token:%w\" "
							"BEFORE UPDATE OF \"%w\" ON \"%w\" BEGIN SELECT %s; END;\n",
							T, spec->zTokenColumn, T, zUpdateToken) :
			sqlite3_mprintf("%s", "");

		if (zTokenTrigger)
			zSql = sqlite3_mprintf(
				"CREATE TRIGGER main.\"fence_insert:%w\" %s INSERT ON \"%w\" "
				"BEGIN SELECT %s; END;\n"
				"%s"
				"CREATE TRIGGER main.\"fence_update:%w\" AFTER UPDATE ON \"%w\" "
				"BEGIN SELECT %s; END;\n"
				"CREATE TRIGGER main.\"fence_delete:%w\" BEFORE DELETE ON \"%w\" "
				"BEGIN SELECT %s; END;\n",
				T, spec->bKeyIsRowid ? "AFTER" : "BEFORE", T, zInsert,
				zTokenTrigger,
				T, T, zUpdate,
				T, T, zDelete);
		sqlite3_free(zTokenTrigger);
	}
	sqlite3_free(zTokenTail);
	sqlite3_free(zInsert);
	sqlite3_free(zUpdateToken);
	sqlite3_free(zUpdate);
	sqlite3_free(zDelete);
	return zSql;
}

static char *
unprotectSql(const char *zTable)
{
	char	   *zSql = sqlite3_mprintf("%s", "");
	size_t		i;

	for (i = 0; zSql && i < sizeof(triggerKinds) / sizeof(triggerKinds[0]); i++)
	{
		char	   *zNext = sqlite3_mprintf("%sDROP TRIGGER IF EXISTS main.\"fence_%s:%w\";\n",
											zSql, triggerKinds[i], zTable);

		sqlite3_free(zSql);
		zSql = zNext;
	}
	return zSql;
}

/* Run zSql as one unit: all of it or none. */
static int
execAtomically(sqlite3_context *ctx, const char *zFunc, const char *zSql)
{
	sqlite3    *db = sqlite3_context_db_handle(ctx);
	int			rc = sqlite3_exec(db, "SAVEPOINT fence_protect", NULL, NULL, NULL);

	if (rc == SQLITE_OK)
	{
		rc = sqlite3_exec(db, zSql, NULL, NULL, NULL);
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

	zCanonical = lookupTable(ctx, "fence_protect", zTable);
	if (zCanonical == NULL)
		return;
	spec.zTable = zCanonical;
	if ((spec.zTokenColumn && !lookupColumn(ctx, zCanonical, spec.zTokenColumn, NULL)) ||
		(spec.zKeyColumn && !lookupColumn(ctx, zCanonical, spec.zKeyColumn, &spec.bKeyIsRowid)))
		goto done;

	zDrop = unprotectSql(zCanonical);
	zSql = protectSql(&spec);
	if (zDrop == NULL || zSql == NULL)
	{
		sqlite3_result_error_nomem(ctx);
		goto done;
	}
	{
		/* protecting again replaces the guard, in one step */
		char	   *zAll = sqlite3_mprintf("%s%s", zDrop, zSql);

		if (zAll == NULL)
			sqlite3_result_error_nomem(ctx);
		else if (execAtomically(ctx, "fence_protect", zAll))
			sqlite3_result_null(ctx);
		sqlite3_free(zAll);
	}
done:
	sqlite3_free(zDrop);
	sqlite3_free(zSql);
	sqlite3_free(zCanonical);
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
	zDrop = unprotectSql(zCanonical);
	if (zDrop == NULL)
		sqlite3_result_error_nomem(ctx);
	else if (execAtomically(ctx, "fence_unprotect", zDrop))
		sqlite3_result_null(ctx);
	sqlite3_free(zDrop);
	sqlite3_free(zCanonical);
}
