/*
 * fence_schema_read.c
 *
 * Reading the schema: the UNIQUE indexes of a protected table, a guard's
 * triggers, a table's columns, as fence_protect (fence_protect.c) and
 * admission (fence_guard.c) need them. Each read is one SELECT of a pragma
 * or of sqlite_schema, filtered in C.
 *
 * Provides: fenceUniqueIndexesRead/Free, fenceGuardTriggersRead,
 * fenceTableTriggersRead, fenceGuardTriggersFree, fenceHasRowidColumn,
 * fenceGeneratedOverRowid, fenceDefaultReplaced, fenceGuardIdRecorded,
 * fenceSqlNextToken, fenceLookupTerm (a REPLACE look-up's term, written by
 * fence_protect.c and looked for by fence_guard.c) and fenceOwnTableShape
 * (is a table of fence's name the one fence makes?). Calls no other file of
 * fence.
 *
 * Errors: SQLITE_OK; FENCE_RC_INVALID when a value the schema always has
 * came back NULL; else SQLite's error.
 */
#include "fence_sqlite.h"

#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

/*
 * Run zRows (one SELECT, ?1 bound to zArg when not NULL), giving each row to
 * xRow, which returns SQLITE_OK or an error.
 */
static int
readWhole(sqlite3 *db, const char *zRows, const char *zArg,
		  int (*xRow) (void *, sqlite3_stmt *), void *pArg)
{
	sqlite3_stmt *stmt = NULL;
	int			rc;

	rc = sqlite3_prepare_v2(db, zRows, -1, &stmt, NULL);
	if (rc == SQLITE_OK && zArg != NULL)
		rc = sqlite3_bind_text(stmt, 1, zArg, -1, SQLITE_STATIC);
	while (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW)
		rc = xRow(pArg, stmt);
	sqlite3_finalize(stmt);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* ---------------------------------------------------------------------
 * The UNIQUE indexes of a table.
 * ------------------------------------------------------------------ */

void
fenceUniqueIndexesFree(FenceUniqueIndexes *p)
{
	int			i,
				j;

	for (i = 0; i < p->n; i++)
	{
		for (j = 0; j < p->a[i].nCol; j++)
		{
			sqlite3_free(p->a[i].aCol[j].zName);
			sqlite3_free(p->a[i].aCol[j].zColl);
		}
		sqlite3_free(p->a[i].aCol);
		sqlite3_free(p->a[i].zName);
	}
	sqlite3_free(p->a);
	p->a = NULL;
	p->n = 0;
}

static char *
dupText(sqlite3_stmt *stmt, int i)
{
	return sqlite3_mprintf("%s", (const char *) sqlite3_column_text(stmt, i));
}

typedef struct IndexListRead
{
	FenceUniqueIndexes *p;
	int			nListed;		/* every index listed, UNIQUE or not */
} IndexListRead;

/* pragma_index_list: name, unique, partial; keeps the UNIQUE ones */
static int
indexListRow(void *pArg, sqlite3_stmt *stmt)
{
	IndexListRead *r = pArg;
	FenceUniqueIndexes *p = r->p;
	FenceUniqueIndex *a;

	r->nListed++;
	if (sqlite3_column_type(stmt, 0) != SQLITE_TEXT ||
		sqlite3_column_type(stmt, 1) != SQLITE_INTEGER ||
		sqlite3_column_type(stmt, 2) != SQLITE_INTEGER)
		return FENCE_RC_INVALID;
	if (!sqlite3_column_int(stmt, 1))
		return SQLITE_OK;
	a = sqlite3_realloc64(p->a, sizeof(*a) * (sqlite3_uint64) (p->n + 1));
	if (a == NULL)
		return SQLITE_NOMEM;
	p->a = a;
	memset(&a[p->n], 0, sizeof(*a));
	if ((a[p->n].zName = dupText(stmt, 0)) == NULL)
		return SQLITE_NOMEM;
	a[p->n].bPartial = sqlite3_column_int(stmt, 2) != 0;
	p->n++;
	return SQLITE_OK;
}

typedef struct IndexColumnsRead
{
	FenceUniqueIndex *pIndex;
	int			nAlloc;
} IndexColumnsRead;

/* pragma_index_xinfo: seqno, cid, name, coll, key; keeps the key columns */
static int
indexColumnRow(void *pArg, sqlite3_stmt *stmt)
{
	IndexColumnsRead *r = pArg;
	FenceUniqueIndex *x = r->pIndex;
	FenceIndexColumn *c;
	int			i;

	if (sqlite3_column_type(stmt, 0) != SQLITE_INTEGER ||
		sqlite3_column_type(stmt, 1) != SQLITE_INTEGER ||
		sqlite3_column_type(stmt, 4) != SQLITE_INTEGER)
		return FENCE_RC_INVALID;
	if (!sqlite3_column_int(stmt, 4))
		return SQLITE_OK;
	/* a key column has a collation, and a name unless an expression (-2) or the rowid (-1) */
	if (sqlite3_column_type(stmt, 3) != SQLITE_TEXT ||
		(sqlite3_column_type(stmt, 2) != SQLITE_TEXT && sqlite3_column_int(stmt, 1) >= 0))
		return FENCE_RC_INVALID;
	if (x->nCol == r->nAlloc)
	{
		int			nAlloc = r->nAlloc * 2 + 4;

		c = sqlite3_realloc64(x->aCol, sizeof(*c) * (sqlite3_uint64) nAlloc);
		if (c == NULL)
			return SQLITE_NOMEM;
		x->aCol = c;
		r->nAlloc = nAlloc;
	}
	c = &x->aCol[x->nCol];
	memset(c, 0, sizeof(*c));
	c->iSeq = sqlite3_column_int(stmt, 0);
	c->iCid = sqlite3_column_int(stmt, 1);
	x->nCol++;
	if (sqlite3_column_type(stmt, 2) == SQLITE_TEXT && (c->zName = dupText(stmt, 2)) == NULL)
		return SQLITE_NOMEM;
	if ((c->zColl = dupText(stmt, 3)) == NULL)
		return SQLITE_NOMEM;
	/* in index order, whatever order the rows came in */
	for (i = x->nCol - 1; i > 0 && x->aCol[i - 1].iSeq > x->aCol[i].iSeq; i--)
	{
		FenceIndexColumn t = x->aCol[i];

		x->aCol[i] = x->aCol[i - 1];
		x->aCol[i - 1] = t;
	}
	return SQLITE_OK;
}

static int
compareIndexNames(const void *a, const void *b)
{
	return strcmp(((const FenceUniqueIndex *) a)->zName, ((const FenceUniqueIndex *) b)->zName);
}


/*
 * The UNIQUE indexes of main.zTable, sorted by name (BINARY), each with its
 * key columns in index order. SQLITE_OK, FENCE_RC_INVALID (blinded or
 * skipped), or an error; *p is empty on any but SQLITE_OK.
 */
int
fenceUniqueIndexesRead(sqlite3 *db, const char *zTable, FenceUniqueIndexes *p)
{
	IndexListRead list = {p, 0};
	int			rc;
	int			i;

	p->a = NULL;
	p->n = 0;
	rc = readWhole(db, "SELECT name, \"unique\", partial FROM pragma_index_list(?1, 'main')", zTable,
				   indexListRow, &list);
	for (i = 0; rc == SQLITE_OK && i < p->n; i++)
	{
		IndexColumnsRead r = {&p->a[i], 0};

		rc = readWhole(db, "SELECT seqno, cid, name, coll, key FROM pragma_index_xinfo(?1, 'main')", p->a[i].zName,
					   indexColumnRow, &r);
		/* a UNIQUE index has a key column: none means the read was cut */
		if (rc == SQLITE_OK && p->a[i].nCol == 0)
			rc = FENCE_RC_INVALID;
	}
	if (rc != SQLITE_OK)
		fenceUniqueIndexesFree(p);
	else if (p->n > 1)
		qsort(p->a, (size_t) p->n, sizeof(p->a[0]), compareIndexNames);
	return rc;
}

/* ---------------------------------------------------------------------
 * A guard's triggers.
 * ------------------------------------------------------------------ */

void
fenceGuardTriggersFree(FenceGuardTriggers *p)
{
	int			i;

	for (i = 0; i < p->n; i++)
	{
		sqlite3_free(p->a[i].zType);
		sqlite3_free(p->a[i].zName);
		sqlite3_free(p->a[i].zTable);
		sqlite3_free(p->a[i].zSql);
	}
	sqlite3_free(p->a);
	sqlite3_free(p->zPrefix);
	p->a = NULL;
	p->n = 0;
	p->zPrefix = NULL;
}

/* sqlite_schema: type, name, tbl_name, sql; keeps the guard's triggers */
static int
guardTriggerRow(void *pArg, sqlite3_stmt *stmt)
{
	FenceGuardTriggers *p = pArg;
	const char *zType = (const char *) sqlite3_column_text(stmt, 0);
	const char *zName = (const char *) sqlite3_column_text(stmt, 1);
	FenceGuardTrigger *a;

	/* every object has a type, a name and a table; all but an index its SQL */
	if (zType == NULL || zName == NULL || sqlite3_column_type(stmt, 2) != SQLITE_TEXT ||
		(sqlite3_column_type(stmt, 3) != SQLITE_TEXT && strcmp(zType, "index") != 0))
		return FENCE_RC_INVALID;
	if (p->bAll)
	{
		if (sqlite3_column_type(stmt, 3) != SQLITE_TEXT)
			return SQLITE_OK;	/* an automatic index: no SQL, nothing it calls */
	}
	else if (strcmp(zType, "trigger") != 0 ||
		(p->zPrefix != NULL && strncmp(zName, p->zPrefix, strlen(p->zPrefix)) != 0) ||
		(p->zOnTable != NULL &&
		 sqlite3_stricmp((const char *) sqlite3_column_text(stmt, 2), p->zOnTable) != 0))
		return SQLITE_OK;
	a = sqlite3_realloc64(p->a, sizeof(*a) * (sqlite3_uint64) (p->n + 1));
	if (a == NULL)
		return SQLITE_NOMEM;
	p->a = a;
	a += p->n++;
	a->zType = dupText(stmt, 0);
	a->zName = dupText(stmt, 1);
	a->zTable = dupText(stmt, 2);
	a->zSql = dupText(stmt, 3);
	return a->zType && a->zName && a->zTable && a->zSql ? SQLITE_OK : SQLITE_NOMEM;
}

/*
 * The triggers of guard id in main ("fence:<id>:..."), in schema order.
 * SQLITE_OK, FENCE_RC_INVALID (blinded or skipped), or an error; *p must be
 * freed with fenceGuardTriggersFree whatever the result.
 */
int
fenceGuardTriggersRead(sqlite3 *db, sqlite3_int64 id, FenceGuardTriggers *p)
{
	p->a = NULL;
	p->n = 0;
	p->zOnTable = NULL;
	p->bAll = 0;
	p->zPrefix = sqlite3_mprintf("fence:%lld:", (long long) id);
	if (p->zPrefix == NULL)
		return SQLITE_NOMEM;
	return readWhole(db, "SELECT type, name, tbl_name, sql FROM main.sqlite_schema", NULL, guardTriggerRow, p);
}

/*
 * Every trigger of schema zSchema on a table named zTable, fence's
 * included, in schema order; zTable NULL: every object of the schema that
 * has SQL (all but automatic indexes). As fenceGuardTriggersRead.
 */
int
fenceTableTriggersRead(sqlite3 *db, const char *zSchema, const char *zTable,
					   FenceGuardTriggers *p)
{
	char	   *zRows = sqlite3_mprintf("SELECT type, name, tbl_name, sql FROM \"%w\".sqlite_schema",
										zSchema);
	int			rc;

	p->a = NULL;
	p->n = 0;
	p->zPrefix = NULL;
	p->zOnTable = zTable;
	p->bAll = zTable == NULL;
	rc = zRows ? readWhole(db, zRows, NULL, guardTriggerRow, p) : SQLITE_NOMEM;
	sqlite3_free(zRows);
	return rc;
}

/* ---------------------------------------------------------------------
 * SQL text, read token by token (the schema's own SQL).
 * ------------------------------------------------------------------ */

/* The token at or after *pz (spaces and comments skipped); *pz moves past it. */
FenceSqlToken
fenceSqlNextToken(const char **pz, const char **pzTok, int *pnTok)
{
	const char *z = *pz;

	for (;;)
	{
		while (*z == ' ' || *z == '\t' || *z == '\n' || *z == '\r' || *z == '\f' || *z == '\v')
			z++;
		if (z[0] == '-' && z[1] == '-')
			while (*z && *z != '\n')
				z++;
		else if (z[0] == '/' && z[1] == '*')
		{
			const char *zEnd = strstr(z + 2, "*/");

			z = zEnd ? zEnd + 2 : z + strlen(z);
		}
		else
			break;
	}
	*pzTok = z;
	if (*z == '\0')
	{
		*pnTok = 0;
		*pz = z;
		return FENCE_SQL_END;
	}
	if (*z == '\'' || *z == '"' || *z == '`' || *z == '[')
	{
		char		q = *z == '[' ? ']' : *z;

		for (z++; *z && !(z[0] == q && (q == ']' || z[1] != q)); z += (z[0] == q) ? 2 : 1)
			;
		if (*z)
			z++;
		*pnTok = (int) (z - *pzTok);
		*pz = z;
		return FENCE_SQL_QUOTED;
	}
	if ((*z >= 'A' && *z <= 'Z') || (*z >= 'a' && *z <= 'z') || (*z >= '0' && *z <= '9') ||
		*z == '_' || *z == '$' || (unsigned char) *z >= 0x80)
	{
		while ((*z >= 'A' && *z <= 'Z') || (*z >= 'a' && *z <= 'z') || (*z >= '0' && *z <= '9') ||
			   *z == '_' || *z == '$' || (unsigned char) *z >= 0x80)
			z++;
		*pnTok = (int) (z - *pzTok);
		*pz = z;
		return FENCE_SQL_WORD;
	}
	*pnTok = 1;
	*pz = z + 1;
	return FENCE_SQL_PUNCT;
}

/* ---------------------------------------------------------------------
 * A table's columns.
 * ------------------------------------------------------------------ */

/* A table's columns, as pragma_table_xinfo gives them. */
typedef struct TableColumns
{
	int			nCol;
	int			nAlloc;
	struct
	{
		char	   *zName;
		int			bGenerated;	/* VIRTUAL or STORED */
		int			bReplaced;	/* NOT NULL with a DEFAULT */
	}		   *a;
	int			nIntegerPk;		/* columns declared INTEGER in the primary key */
	int			nPk;			/* columns in the primary key */
	int			nDefault;		/* columns with a DEFAULT */
} TableColumns;

/* pragma_table_xinfo: name, type, pk, hidden, "notnull", dflt_value */
static int
tableColumnRow(void *pArg, sqlite3_stmt *stmt)
{
	TableColumns *t = pArg;
	int			hidden = sqlite3_column_int(stmt, 3);
	int			bDefault = sqlite3_column_type(stmt, 5) != SQLITE_NULL;

	/*
	 * every column has a name, a type (maybe ''), a pk, a hidden flag and a
	 * NOT NULL flag; its DEFAULT may be NULL (counted in fenceDefaultReplaced)
	 */
	if (sqlite3_column_type(stmt, 0) != SQLITE_TEXT ||
		sqlite3_column_type(stmt, 1) != SQLITE_TEXT ||
		sqlite3_column_type(stmt, 2) != SQLITE_INTEGER ||
		sqlite3_column_type(stmt, 3) != SQLITE_INTEGER ||
		sqlite3_column_type(stmt, 4) != SQLITE_INTEGER)
		return FENCE_RC_INVALID;
	if (sqlite3_column_int(stmt, 2) > 0)
	{
		t->nPk++;
		if (sqlite3_stricmp((const char *) sqlite3_column_text(stmt, 1), "INTEGER") == 0)
			t->nIntegerPk++;
	}
	if (t->nCol == t->nAlloc)
	{
		int			nAlloc = t->nAlloc * 2 + 8;
		void	   *a = sqlite3_realloc64(t->a, sizeof(t->a[0]) * (sqlite3_uint64) nAlloc);

		if (a == NULL)
			return SQLITE_NOMEM;
		t->a = a;
		t->nAlloc = nAlloc;
	}
	if ((t->a[t->nCol].zName = dupText(stmt, 0)) == NULL)
		return SQLITE_NOMEM;
	/* hidden 2: a VIRTUAL generated column, 3: a STORED one */
	t->a[t->nCol].bGenerated = hidden == 2 || hidden == 3;
	t->a[t->nCol].bReplaced = sqlite3_column_int(stmt, 4) != 0 && bDefault;
	t->nDefault += bDefault;
	t->nCol++;
	return SQLITE_OK;
}

/* main.zTable's columns into *t (tableColumnsFree it whatever the result). */
static int
tableColumnsRead(sqlite3 *db, const char *zTable, TableColumns *t)
{
	int			rc;

	memset(t, 0, sizeof(*t));
	rc = readWhole(db, "SELECT name, type, pk, hidden, \"notnull\", dflt_value "
				   "FROM pragma_table_xinfo(?1, 'main')", zTable,
				   tableColumnRow, t);
	if (rc == SQLITE_OK && t->nCol == 0)
		rc = FENCE_RC_INVALID;	/* every table has a column: the pragma was skipped */
	return rc;
}

static void
tableColumnsFree(TableColumns *t)
{
	int			i;

	for (i = 0; i < t->nCol; i++)
		sqlite3_free(t->a[i].zName);
	sqlite3_free(t->a);
}

/* The column named zName (any case), or -1. */
static int
tableColumnIndex(const TableColumns *t, const char *zName)
{
	int			i;

	for (i = 0; i < t->nCol; i++)
		if (sqlite3_stricmp(t->a[i].zName, zName) == 0)
			return i;
	return -1;
}

static int
isGenerated(const TableColumns *t, const char *zName)
{
	int			i = tableColumnIndex(t, zName);

	return i >= 0 && t->a[i].bGenerated;
}

static int
isReplaced(const TableColumns *t, const char *zName)
{
	int			i = tableColumnIndex(t, zName);

	return i >= 0 && t->a[i].bReplaced;
}

/*
 * Does main.zTable have a column named rowid (any case)? A per-row guard's
 * look-ups name the row by "rowid" ("c.rowid = NEW.rowid", "c.rowid <>
 * OLD.rowid"), which a column of that name takes over from the real rowid:
 * a REPLACE onto another row's rowid (through oid or _rowid_) would find
 * nothing to check. 1 or 0 in *pbHas; FENCE_RC_INVALID when the read came
 * back blinded or skipped (every table has a column).
 */
int
fenceHasRowidColumn(sqlite3 *db, const char *zTable, int *pbHas)
{
	TableColumns t;
	int			rc = tableColumnsRead(db, zTable, &t);

	*pbHas = rc == SQLITE_OK && tableColumnIndex(&t, "rowid") >= 0;
	tableColumnsFree(&t);
	return rc;
}

/*
 * A generated column that a per-row guard reads before the row is written
 * (the key, or a column of a UNIQUE index, which its REPLACE look-ups
 * compare), in a table whose rowid has a column alias (its INTEGER PRIMARY
 * KEY): SQLite computes it, for the BEFORE INSERT triggers, from a rowid it
 * has not assigned yet (-1), and the row is written with another value. The
 * guard would check the wrong resource, or look up the wrong victims of a
 * REPLACE. A generated column can reach the rowid only through such an
 * alias (it cannot name rowid), so a table without an INTEGER primary key
 * column is safe. *pzColumn is the first such column (sqlite3_free it), or
 * NULL. SQLITE_OK, FENCE_RC_INVALID (blinded or skipped), or an error.
 */
int
fenceGeneratedOverRowid(sqlite3 *db, const char *zTable, const char *zKey, char **pzColumn)
{
	TableColumns t;
	FenceUniqueIndexes ix = {0, NULL};
	const char *zFound = NULL;
	int			rc;
	int			i,
				j;

	*pzColumn = NULL;
	rc = tableColumnsRead(db, zTable, &t);
	if (rc == SQLITE_OK && t.nPk == 1 && t.nIntegerPk == 1)
	{
		rc = fenceUniqueIndexesRead(db, zTable, &ix);
		if (rc == SQLITE_OK && zKey != NULL && isGenerated(&t, zKey))
			zFound = zKey;
		for (i = 0; rc == SQLITE_OK && zFound == NULL && i < ix.n; i++)
			for (j = 0; zFound == NULL && j < ix.a[i].nCol; j++)
				if (ix.a[i].aCol[j].zName != NULL && isGenerated(&t, ix.a[i].aCol[j].zName))
					zFound = ix.a[i].aCol[j].zName;
		if (zFound != NULL && (*pzColumn = sqlite3_mprintf("%s", zFound)) == NULL)
			rc = SQLITE_NOMEM;
	}
	fenceUniqueIndexesFree(&ix);
	tableColumnsFree(&t);
	return rc;
}

/* How many DEFAULT clauses the SQL of main's table zTable has: -1 if none found. */
static int
countDefaultClauses(const FenceGuardTriggers *objects, const char *zTable)
{
	int			i;

	for (i = 0; i < objects->n; i++)
		if (strcmp(objects->a[i].zType, "table") == 0 &&
			sqlite3_stricmp(objects->a[i].zName, zTable) == 0)
		{
			const char *z = objects->a[i].zSql;
			const char *zTok;
			int			nTok;
			int			n = 0;
			FenceSqlToken k;

			while ((k = fenceSqlNextToken(&z, &zTok, &nTok)) != FENCE_SQL_END)
				if (k == FENCE_SQL_WORD && nTok == 7 && sqlite3_strnicmp(zTok, "DEFAULT", 7) == 0)
					n++;
			return n;
		}
	return -1;
}

/*
 * A column whose NULL SQLite replaces by its DEFAULT where a per-row guard
 * cannot see it. Under REPLACE (the statement's OR REPLACE, or the column's
 * NOT NULL ON CONFLICT REPLACE, or a WITHOUT ROWID primary key's NOT NULL)
 * a NULL written into a NOT NULL column with a DEFAULT becomes the DEFAULT
 * as SQLite checks the constraints, after the BEFORE triggers ran: a
 * REPLACE look-up "c.q = NEW.q" compared a NULL and found no row, while the
 * row written with the DEFAULT replaced another resource's row; and a
 * generated key or UNIQUE column computed from such a column was checked
 * on the NULL and written on the DEFAULT. So, in *pzColumn (sqlite3_free
 * it), with *pWhy:
 *   FENCE_DEFAULT_UNIQUE     a column of a UNIQUE index, NOT NULL with a
 *                            DEFAULT;
 *   FENCE_DEFAULT_GENERATED  when the table has a generated column (which
 *                            this cannot follow to its inputs), any NOT NULL
 *                            column with a DEFAULT;
 *   FENCE_DEFAULT_AFTER      zAfterColumn, the token column of a guard that
 *                            checks rows AFTER INSERT (its key is the
 *                            INTEGER PRIMARY KEY), NOT NULL with a DEFAULT:
 *                            a NULL token was checked as the DEFAULT, a
 *                            token nobody presented (attacker round 19).
 * NULL when there is none. The key is not told apart: admission, which must
 * decide as fence_protect did, does not know which column it is (and the
 * guard refuses a NULL key anyway).
 *
 * dflt_value is NULL for a column without a DEFAULT, so an authorizer
 * blinding it would go unseen: the columns with one are counted against
 * the DEFAULT clauses in the table's SQL. SQLITE_OK, FENCE_RC_INVALID
 * (blinded or skipped), or an error.
 */
int
fenceDefaultReplaced(sqlite3 *db, const char *zTable, const FenceUniqueIndexes *ix,
					 const char *zAfterColumn, char **pzColumn, int *pWhy)
{
	TableColumns t;
	FenceGuardTriggers objects = {0, NULL, NULL, NULL, 0};
	const char *zFound = NULL;
	int			rc;
	int			i,
				j;

	*pzColumn = NULL;
	*pWhy = FENCE_DEFAULT_UNIQUE;
	rc = tableColumnsRead(db, zTable, &t);
	if (rc == SQLITE_OK)
		rc = fenceTableTriggersRead(db, "main", NULL, &objects);
	if (rc == SQLITE_OK && countDefaultClauses(&objects, zTable) != t.nDefault)
		rc = FENCE_RC_INVALID;	/* a DEFAULT the pragma did not show */
	for (i = 0; rc == SQLITE_OK && zFound == NULL && i < ix->n; i++)
		for (j = 0; zFound == NULL && j < ix->a[i].nCol; j++)
			if (ix->a[i].aCol[j].zName != NULL && isReplaced(&t, ix->a[i].aCol[j].zName))
				zFound = ix->a[i].aCol[j].zName;
	/* read AFTER the row is written, with its DEFAULT in place of the NULL */
	if (rc == SQLITE_OK && zFound == NULL && zAfterColumn != NULL && isReplaced(&t, zAfterColumn))
	{
		zFound = zAfterColumn;
		*pWhy = FENCE_DEFAULT_AFTER;
	}
	for (i = 0; rc == SQLITE_OK && zFound == NULL && i < t.nCol; i++)
		if (t.a[i].bGenerated)
			for (j = 0; zFound == NULL && j < t.nCol; j++)
				if (t.a[j].bReplaced)
				{
					zFound = t.a[j].zName;
					*pWhy = FENCE_DEFAULT_GENERATED;
				}
	if (zFound != NULL && (*pzColumn = sqlite3_mprintf("%s", zFound)) == NULL)
		rc = SQLITE_NOMEM;
	fenceGuardTriggersFree(&objects);
	tableColumnsFree(&t);
	return rc;
}

/* ---------------------------------------------------------------------
 * The guard ids a schema records.
 * ------------------------------------------------------------------ */

typedef struct IdSearch
{
	sqlite3_int64 id;
	int			bFound;
} IdSearch;

/* fence_guards: id */
static int
guardIdRow(void *pArg, sqlite3_stmt *stmt)
{
	IdSearch   *p = pArg;

	if (sqlite3_column_type(stmt, 0) != SQLITE_INTEGER)
		return FENCE_RC_INVALID;	/* an id is an INTEGER PRIMARY KEY: never NULL */
	if (sqlite3_column_int64(stmt, 0) == p->id)
		p->bFound = 1;
	return SQLITE_OK;
}

/*
 * Does zSchema's fence_guards record guard id? Every id is read and
 * compared here: a WHERE on id reads nothing when an authorizer blinds it.
 * A schema without fence_guards records none. SQLITE_OK, FENCE_RC_INVALID
 * (blinded or skipped), or an error.
 */
int
fenceGuardIdRecorded(sqlite3 *db, const char *zSchema, sqlite3_int64 id, int *pbRecorded)
{
	IdSearch	search = {id, 0};
	char	   *zRows;
	int			rc;

	*pbRecorded = 0;
	if (sqlite3_table_column_metadata(db, zSchema, "fence_guards", "id",
									  NULL, NULL, NULL, NULL, NULL) != SQLITE_OK)
		return SQLITE_OK;
	zRows = sqlite3_mprintf("SELECT id FROM \"%w\".fence_guards", zSchema);
	rc = zRows ? readWhole(db, zRows, NULL, guardIdRow, &search) : SQLITE_NOMEM;
	sqlite3_free(zRows);
	*pbRecorded = rc == SQLITE_OK && search.bFound;
	return rc;
}

/*
 * A look-up's term for one more column of a UNIQUE index, AND-joined to
 * zPrev (the columns before, or NULL), which it frees: what the guard
 * writes and what admission looks for (fence_guard.c, checkLookupsCover).
 * NULL when out of memory.
 */
char *
fenceLookupTerm(char *zPrev, const char *zCol, const char *zColl)
{
	char	   *z = sqlite3_mprintf("%s%sc.\"%w\" = NEW.\"%w\" COLLATE \"%w\"",
									zPrev ? zPrev : "", zPrev ? " AND " : "", zCol, zCol,
									zColl ? zColl : "BINARY");

	sqlite3_free(zPrev);
	return z;
}

/*
 * Is main.zTable (fence_tokens or fence_guards) the table fence creates?
 * SQLITE_OK when it is, or when there is none yet; FENCE_RC_UNTRUSTED with
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
		rc = FENCE_RC_UNTRUSTED;
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
