/*
 * fuzz_sqlite.c
 *
 * libFuzzer target for the SQLite extension. The extension's sources are
 * linked in unchanged and registered with sqlite3_auto_extension, so SQLite
 * hands them its real API table just as load_extension would. Inputs run
 * against one in-memory database with three protected tables, brought back
 * to the same state before each (one input in eight gets a fresh bare
 * connection instead, where fence_tokens does not exist yet), and each is
 * decoded into a sequence of SQL calls: every fence function with values of
 * every storage class and length (NULL, int64 and double extremes, text and
 * blobs of arbitrary bytes up to ~2100 bytes, UTF-16, zeroblobs), writes to
 * the protected tables (every form of REPLACE included), transactions and
 * savepoints, fuzzed fence_protect calls, ATTACH and tables named like
 * fence's own in TEMP and attached databases, and savepoints that take
 * fences while one allocation fails (a counting allocator under SQLite).
 *
 * After every call the database is read back and held to what SPEC.md
 * promises: the result or error the accept rule predicts from the state
 * before the call, errors only of the documented kinds, an error changes
 * nothing, ROLLBACK and ROLLBACK TO restore exactly what was there, the
 * committed highest token never drops except through fence_reset, and the
 * transaction's fences agree with fence_tokens. A broken promise aborts, so
 * libFuzzer keeps the input that shows it.
 */
#include <sqlite3.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz_input.h"

/* The extension's entry point (sqlite_ext/fence.c). */
int			sqlite3_fence_init(sqlite3 *db, char **pzErrMsg,
							   const sqlite3_api_routines *pApi);

#define FAIL(...) \
	do { \
		fprintf(stderr, "fuzz_sqlite: invariant broken at %s:%d (op %d: %s): ", \
				__FILE__, __LINE__, opIndex, opSql ? opSql : "-"); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
		abort(); \
	} while (0)
#define CHECK(cond, ...) do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)

static int	opIndex;
static const char *opSql;

/* Longest generated text or blob: past FENCE_RESOURCE_MAX twice over. */
#define LONGEST 2100
#define RESOURCE_MAX 1024
#define MAX_OPS 48
#define MAX_ARGS 4
#define MAX_ROWS 8

/* ---------------------------------------------------------------------
 * Connections, and statements prepared once per connection
 * ------------------------------------------------------------------ */

#define N_CACHE 224

typedef struct Conn
{
	sqlite3    *db;
	int			bare;			/* no tables: fence_tokens not yet created */
	const char *sql[N_CACHE];	/* compared by address: the texts are static */
	sqlite3_stmt *stmt[N_CACHE];
} Conn;

/*
 * The shared connection lives as long as the process and is reset between
 * inputs (opening one with its protected tables costs milliseconds); a bare
 * one is opened per input, to reach the first-use paths.
 */
static Conn shared,
			bare;
static Conn *cur;

static const char *const snapTokensSql =
"SELECT resource, token, updated_at, typeof(resource), typeof(token) "
"FROM main.fence_tokens ORDER BY resource";
static const char *const snapHeldSql =
"SELECT resource, token FROM main.fence_held ORDER BY resource";
static const char *const snapTablesSql =
"SELECT 1, id, tok, v FROM main.t UNION ALL SELECT 2, id, tok, v FROM main.k "
"UNION ALL SELECT 3, id, tok, v FROM main.u UNION ALL SELECT 4, id, tok, v FROM main.x";
static const char *const probeSql = "SELECT CAST(?1 AS BLOB), ?1";

/* The statement for sql, prepared on first use; NULL with *prc on error. */
static sqlite3_stmt *
stmtFor(const char *sql, int *prc)
{
	int			i;

	*prc = SQLITE_OK;
	for (i = 0; i < N_CACHE && cur->sql[i]; i++)
		if (cur->sql[i] == sql)
			return cur->stmt[i];
	if (i == N_CACHE)
		abort();
	*prc = sqlite3_prepare_v3(cur->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &cur->stmt[i], NULL);
	if (*prc != SQLITE_OK)
		return NULL;
	cur->sql[i] = sql;
	return cur->stmt[i];
}

/* Run a statement of the harness's own; SQLITE_OK or the error. */
static int
execCached(const char *sql)
{
	int			rc;
	sqlite3_stmt *stmt = stmtFor(sql, &rc);

	if (stmt == NULL)
		return rc;
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
		;
	sqlite3_reset(stmt);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* ---------------------------------------------------------------------
 * Values an input describes, and what SQLite makes of them
 * ------------------------------------------------------------------ */

enum
{
	V_NULL, V_INT, V_DOUBLE, V_TEXT, V_BLOB, V_ZEROBLOB, V_TEXT16
};

typedef struct Val
{
	int			kind;
	int64_t		i;
	double		d;
	int			n;
	uint8_t		z[LONGEST + 2];
} Val;

/* What a function sees: its storage class and CAST(x AS TEXT) bytes. */
typedef struct Seen
{
	int			type;			/* SQLITE_NULL ... SQLITE_BLOB */
	int64_t		i;				/* for SQLITE_INTEGER, and an integral REAL */
	int			bInt;			/* an integer: INTEGER, or a REAL holding one up to 2^53 */
	int			n;
	uint8_t	   *z;				/* malloc'd, n bytes */
} Seen;

/* Names that collide with the tables' resources, columns and each other. */
static const struct
{
	const char *z;
	int			n;				/* explicit: some hold a NUL */
}			words[] = {
	{"r", 1}, {"p:", 2}, {"p:1", 3}, {"p:2", 3}, {"u:1", 3}, {"u:2", 3}, {"1", 1},
	{"2", 1}, {"31", 2}, {"", 0}, {"x", 1}, {"R", 1}, {"tok", 3}, {"id", 2},
	{"v", 1}, {"TOK", 3}, {"rowid", 5}, {"nosuch", 6}, {"r\0x", 3}, {"p:1\0", 4},
	{"u:", 2}, {"\xff\xfe", 2}, {"widget-42", 9},
};

static int
takeLength(FuzzInput *in)
{
	switch (in_u8(in) % 6)
	{
		case 0:
			return RESOURCE_MAX - 3 + in_u8(in) % 5;	/* with "p:" and keys */
		case 1:
			return 198 + in_u8(in) % 5;
		case 2:
			return in_u16(in) % (LONGEST + 1);
		default:
			return in_u8(in) % 9;
	}
}

static void
takeVal(FuzzInput *in, Val *v)
{
	static const double doubles[] = {
		0.0, -0.0, 1.0, 5.0, 31.0, 1.5, -1.0, 9223372036854775807.0,
		9223372036854775808.0, -9223372036854775808.0, 1e308, -1e308, 5e-324,
		1.0 / 0.0, -1.0 / 0.0, 0.0 / 0.0, 4503599627370496.5, 1e19,
	};
	uint8_t		kind = in_u8(in) % 16;

	v->n = 0;
	switch (kind)
	{
		case 0:
			v->kind = V_NULL;
			break;
		case 1:
			v->kind = V_INT;
			v->i = in_interesting_i64(in);
			break;
		case 2:
			v->kind = V_INT;
			v->i = (int64_t) in_u64(in);
			break;
		case 3:
		case 4:
			/* small tokens, so that inputs race each other's highest */
			v->kind = V_INT;
			v->i = in_u8(in) % 10;
			break;
		case 5:
			v->kind = V_DOUBLE;
			v->d = doubles[in_u8(in) % (sizeof(doubles) / sizeof(doubles[0]))];
			break;
		case 6:
			{
				uint64_t	bits = in_u64(in);

				v->kind = V_DOUBLE;
				memcpy(&v->d, &bits, sizeof(bits));
			}
			break;
		case 7:
		case 8:
		case 9:
		case 10:
			{
				int			w = in_u8(in) % (int) (sizeof(words) / sizeof(words[0]));

				v->kind = V_TEXT;
				v->n = words[w].n;
				memcpy(v->z, words[w].z, (size_t) v->n);
			}
			break;
		case 11:
		case 12:
			v->kind = V_TEXT;
			v->n = takeLength(in);
			in_fill(in, v->z, (size_t) v->n);
			break;
		case 13:
			v->kind = V_BLOB;
			v->n = takeLength(in);
			in_fill(in, v->z, (size_t) v->n);
			break;
		case 14:
			v->kind = V_ZEROBLOB;
			v->n = takeLength(in);
			break;
		case 15:
			v->kind = V_TEXT16;
			v->n = takeLength(in) & ~1;
			in_fill(in, v->z, (size_t) v->n);
			break;
	}
}

static void
bindVal(sqlite3_stmt *stmt, int i, const Val *v)
{
	int			rc = SQLITE_OK;

	switch (v->kind)
	{
		case V_NULL:
			rc = sqlite3_bind_null(stmt, i);
			break;
		case V_INT:
			rc = sqlite3_bind_int64(stmt, i, v->i);
			break;
		case V_DOUBLE:
			rc = sqlite3_bind_double(stmt, i, v->d);
			break;
		case V_TEXT:
			rc = sqlite3_bind_text(stmt, i, (const char *) v->z, v->n, SQLITE_TRANSIENT);
			break;
		case V_BLOB:
			rc = sqlite3_bind_blob(stmt, i, v->z, v->n, SQLITE_TRANSIENT);
			break;
		case V_ZEROBLOB:
			rc = sqlite3_bind_zeroblob(stmt, i, v->n);
			break;
		case V_TEXT16:
			rc = sqlite3_bind_text16(stmt, i, v->z, v->n, SQLITE_TRANSIENT);
			break;
	}
	if (rc != SQLITE_OK)
	{
		fprintf(stderr, "fuzz_sqlite: bind failed: %d\n", rc);
		abort();
	}
}

/* SPEC "Words": a REAL holding an exact integer up to 2^53 is that integer. */
static void
seenInt(Seen *s, double d)
{
	s->bInt = s->type == SQLITE_INTEGER;
	if (s->type == SQLITE_FLOAT && d >= -9007199254740992.0 && d <= 9007199254740992.0 &&
		d == (double) (int64_t) d)
	{
		s->bInt = 1;
		s->i = (int64_t) d;
	}
}

/*
 * Ask SQLite what a function will see for v: NaN binds as NULL, UTF-16 is
 * converted, and value_text() of any value is CAST(x AS TEXT), whose bytes
 * CAST(x AS BLOB) gives without stopping at a NUL.
 */
static void
probe(const Val *v, Seen *s)
{
	int			rc;
	sqlite3_stmt *stmt = stmtFor(probeSql, &rc);
	const void *p;

	if (stmt == NULL || (bindVal(stmt, 1, v), sqlite3_step(stmt)) != SQLITE_ROW)
		FAIL("probe failed: %s", sqlite3_errmsg(cur->db));
	s->type = sqlite3_column_type(stmt, 1);
	s->i = sqlite3_column_int64(stmt, 1);
	seenInt(s, sqlite3_column_double(stmt, 1));
	p = sqlite3_column_blob(stmt, 0);
	s->n = sqlite3_column_bytes(stmt, 0);
	s->z = malloc((size_t) s->n + 1);
	if (s->z == NULL)
		abort();
	if (s->n)
		memcpy(s->z, p, (size_t) s->n);
	sqlite3_reset(stmt);
	sqlite3_clear_bindings(stmt);
}

/* ---------------------------------------------------------------------
 * Snapshots of everything a call may change
 * ------------------------------------------------------------------ */

typedef struct Row
{
	uint8_t    *z;				/* resource bytes */
	int			n;
	int64_t		token;
	char		at[40];			/* updated_at; empty for held rows */
} Row;

typedef struct Rows
{
	Row		   *r;
	int			n;
	int			alloc;
	int			sorted;			/* read ORDER BY resource: binary search */
} Rows;

typedef struct Snap
{
	Rows		tokens;			/* fence_tokens */
	Rows		held;			/* fence_held */
	uint64_t	tables;			/* the multiset of rows of t, k, u */
	int			autocommit;
} Snap;

NOT_FUZZED static void
rowsClear(Rows *rows)
{
	int			i;

	for (i = 0; i < rows->n; i++)
		free(rows->r[i].z);
	rows->n = 0;
}

NOT_FUZZED static void
rowsAdd(Rows *rows, const void *z, int n, int64_t token, const char *at)
{
	Row		   *row;

	if (rows->n == rows->alloc)
	{
		rows->alloc = rows->alloc ? rows->alloc * 2 : 16;
		rows->r = realloc(rows->r, sizeof(Row) * (size_t) rows->alloc);
		if (rows->r == NULL)
			abort();
	}
	row = &rows->r[rows->n++];
	row->z = malloc((size_t) n + 1);
	if (row->z == NULL)
		abort();
	if (n)
		memcpy(row->z, z, (size_t) n);
	row->n = n;
	row->token = token;
	snprintf(row->at, sizeof(row->at), "%s", at ? at : "");
}

NOT_FUZZED static void
rowsCopy(Rows *dst, const Rows *src)
{
	int			i;

	rowsClear(dst);
	dst->sorted = src->sorted;
	for (i = 0; i < src->n; i++)
		rowsAdd(dst, src->r[i].z, src->r[i].n, src->r[i].token, src->r[i].at);
}

/* SQLite's BINARY collation, the order the snapshots are read in. */
NOT_FUZZED static int
compareBytes(const void *a, int na, const void *b, int nb)
{
	int			rc = memcmp(a, b, (size_t) (na < nb ? na : nb));

	return rc ? rc : na - nb;
}

NOT_FUZZED static int
rowsFind(const Rows *rows, const void *z, int n)
{
	int			lo = 0;
	int			hi = rows->n - 1;
	int			i;

	if (!rows->sorted)
	{
		for (i = 0; i < rows->n; i++)
			if (rows->r[i].n == n && memcmp(rows->r[i].z, z, (size_t) n) == 0)
				return i;
		return -1;
	}
	/* inputs can hold a thousand fences: stay off quadratic time */
	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;
		int			c = compareBytes(rows->r[mid].z, rows->r[mid].n, z, n);

		if (c == 0)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

NOT_FUZZED static int
rowEqual(const Row *a, const Row *b)
{
	return a->n == b->n && memcmp(a->z, b->z, (size_t) a->n) == 0 &&
		a->token == b->token && strcmp(a->at, b->at) == 0;
}

/* Equal but for resource z, which may differ, appear or disappear. */
NOT_FUZZED static int
rowsEqualExcept(const Rows *a, const Rows *b, const void *z, int n)
{
	int			i;
	int			j;

	for (i = 0; i < a->n; i++)
	{
		if (z && a->r[i].n == n && memcmp(a->r[i].z, z, (size_t) n) == 0)
			continue;
		j = rowsFind(b, a->r[i].z, a->r[i].n);
		if (j < 0 || !rowEqual(&a->r[i], &b->r[j]))
			return 0;
	}
	for (j = 0; j < b->n; j++)
	{
		if (z && b->r[j].n == n && memcmp(b->r[j].z, z, (size_t) n) == 0)
			continue;
		if (rowsFind(a, b->r[j].z, b->r[j].n) < 0)
			return 0;
	}
	return 1;
}

NOT_FUZZED static uint64_t
fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t		i;

	for (i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ULL;
	return h;
}

NOT_FUZZED static uint64_t
columnHash(uint64_t h, sqlite3_stmt *stmt, int col)
{
	int			type = sqlite3_column_type(stmt, col);

	h = fnv(h, &type, sizeof(type));
	if (type == SQLITE_INTEGER)
	{
		int64_t		i = sqlite3_column_int64(stmt, col);

		h = fnv(h, &i, sizeof(i));
	}
	else if (type == SQLITE_FLOAT)
	{
		double		d = sqlite3_column_double(stmt, col);

		h = fnv(h, &d, sizeof(d));
	}
	else if (type != SQLITE_NULL)
	{
		const void *p = sqlite3_column_blob(stmt, col);
		int			n = sqlite3_column_bytes(stmt, col);

		h = fnv(h, &n, sizeof(n));
		if (n)
			h = fnv(h, p, (size_t) n);
	}
	return h;
}

static void
takeSnap(Snap *s)
{
	sqlite3_stmt *stmt;
	int			rc;
	int			col;

	rowsClear(&s->tokens);
	rowsClear(&s->held);
	s->tokens.sorted = s->held.sorted = 1;
	s->autocommit = sqlite3_get_autocommit(cur->db);

	/* created on first use, and gone again if that transaction rolls back */
	if (sqlite3_table_column_metadata(cur->db, "main", "fence_tokens", "token",
									  NULL, NULL, NULL, NULL, NULL) != SQLITE_OK)
		stmt = NULL;
	else if ((stmt = stmtFor(snapTokensSql, &rc)) == NULL)
		FAIL("cannot read fence_tokens: %s", sqlite3_errmsg(cur->db));
	while (stmt && (rc = sqlite3_step(stmt)) == SQLITE_ROW)
	{
		const void *z = sqlite3_column_blob(stmt, 0);
		int			n = sqlite3_column_bytes(stmt, 0);

		CHECK(strcmp((const char *) sqlite3_column_text(stmt, 3), "text") == 0 &&
			  strcmp((const char *) sqlite3_column_text(stmt, 4), "integer") == 0,
			  "fence_tokens holds a %s resource or a %s token",
			  sqlite3_column_text(stmt, 3), sqlite3_column_text(stmt, 4));
		rowsAdd(&s->tokens, z, n, sqlite3_column_int64(stmt, 1),
				(const char *) sqlite3_column_text(stmt, 2));
	}
	if (stmt)
	{
		CHECK(rc == SQLITE_DONE, "reading fence_tokens: %s", sqlite3_errmsg(cur->db));
		sqlite3_reset(stmt);
	}

	stmt = stmtFor(snapHeldSql, &rc);
	if (stmt == NULL)
		FAIL("cannot read fence_held: %s", sqlite3_errmsg(cur->db));
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
	{
		CHECK(sqlite3_column_type(stmt, 0) == SQLITE_TEXT &&
			  sqlite3_column_type(stmt, 1) == SQLITE_INTEGER,
			  "fence_held gives a non-text resource or non-integer token");
		rowsAdd(&s->held, sqlite3_column_blob(stmt, 0), sqlite3_column_bytes(stmt, 0),
				sqlite3_column_int64(stmt, 1), NULL);
	}
	CHECK(rc == SQLITE_DONE, "reading fence_held: %s", sqlite3_errmsg(cur->db));
	sqlite3_reset(stmt);

	/* a sum of row hashes: the same rows in any order hash alike */
	s->tables = 0;
	if (cur->bare)
		return;
	stmt = stmtFor(snapTablesSql, &rc);
	if (stmt == NULL)
		FAIL("cannot read the tables: %s", sqlite3_errmsg(cur->db));
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
	{
		uint64_t	h = 1469598103934665603ULL;

		for (col = 0; col < 4; col++)
			h = columnHash(h, stmt, col);
		s->tables += h * 0x9E3779B97F4A7C15ULL + (h >> 29);
	}
	CHECK(rc == SQLITE_DONE, "reading the tables: %s", sqlite3_errmsg(cur->db));
	sqlite3_reset(stmt);
}

NOT_FUZZED static uint64_t
rowsHash(const Rows *rows)
{
	uint64_t	sum = 0;
	int			i;

	for (i = 0; i < rows->n; i++)
	{
		uint64_t	h = fnv(1469598103934665603ULL, rows->r[i].z, (size_t) rows->r[i].n);

		h = fnv(h, &rows->r[i].token, sizeof(int64_t));
		h = fnv(h, rows->r[i].at, strlen(rows->r[i].at));
		sum += h * 0x9E3779B97F4A7C15ULL + (h >> 29);
	}
	return sum;
}

/* Everything a rollback restores: tokens, fences and table rows. */
static uint64_t
snapHash(const Snap *s)
{
	return rowsHash(&s->tokens) * 3 + rowsHash(&s->held) * 5 + s->tables * 7;
}

static void
checkUnchanged(const Snap *pre, const Snap *post, const char *why)
{
	CHECK(rowsEqualExcept(&pre->tokens, &post->tokens, NULL, 0), "%s changed fence_tokens", why);
	CHECK(rowsEqualExcept(&pre->held, &post->held, NULL, 0), "%s changed fence_held", why);
	CHECK(pre->tables == post->tables, "%s changed a protected table", why);
}

/*
 * What holds after every call: no fence outside a transaction, only valid
 * resources, and a fence held at t on r means r's highest is t (one
 * connection: nothing else can have moved it).
 */
static void
checkAlways(const Snap *s)
{
	int			i;

	if (s->autocommit)
		CHECK(s->held.n == 0, "fence_held lists %d fences outside a transaction", s->held.n);
	for (i = 0; i < s->tokens.n; i++)
		CHECK(s->tokens.r[i].n >= 1 && s->tokens.r[i].n <= RESOURCE_MAX &&
			  s->tokens.r[i].token >= 0,
			  "fence_tokens holds a resource of %d bytes at %" PRId64,
			  s->tokens.r[i].n, s->tokens.r[i].token);
	for (i = 0; i < s->held.n; i++)
	{
		int			j = rowsFind(&s->tokens, s->held.r[i].z, s->held.r[i].n);

		CHECK(s->held.r[i].token >= 0, "fence_held lists token %" PRId64,
			  s->held.r[i].token);
		CHECK(j >= 0 && s->tokens.r[j].token == s->held.r[i].token,
			  "held at %" PRId64 " but the highest is %s %" PRId64, s->held.r[i].token,
			  j < 0 ? "absent" : "", j < 0 ? 0 : s->tokens.r[j].token);
	}
}

/* ---------------------------------------------------------------------
 * Running one statement
 * ------------------------------------------------------------------ */

typedef struct Outcome
{
	int			rc;				/* extended code: SQLITE_OK, or the error */
	char		msg[1024];
	int			nRows;
	Seen		rows[MAX_ROWS]; /* column 0 of the first rows */
} Outcome;

static void
outcomeFree(Outcome *o)
{
	int			i;

	for (i = 0; i < o->nRows && i < MAX_ROWS; i++)
		free(o->rows[i].z);
	o->nRows = 0;
}

/* FUZZ_TRACE=1 in the environment: print each statement an input runs. */
static int
tracing(void)
{
	static int	trace = -1;

	if (trace < 0)
		trace = getenv("FUZZ_TRACE") != NULL;
	return trace;
}

static void
traceRun(sqlite3_stmt *stmt, const Outcome *o)
{
	char	   *expanded = sqlite3_expanded_sql(stmt);
	const char *text = expanded ? expanded : sqlite3_sql(stmt);

	fprintf(stderr, "[%d] %.300s%s -> ", opIndex, text, strlen(text) > 300 ? "..." : "");
	if (o->rc != SQLITE_OK)
		fprintf(stderr, "error %d: %.200s\n", o->rc, o->msg);
	else if (o->nRows == 0)
		fprintf(stderr, "ok\n");
	else if (o->rows[0].type == SQLITE_INTEGER)
		fprintf(stderr, "ok, %d rows, first %" PRId64 "\n", o->nRows, o->rows[0].i);
	else
		fprintf(stderr, "ok, %d rows, first of type %d\n", o->nRows, o->rows[0].type);
	sqlite3_free(expanded);
}

static void
run(const char *sql, const Val *args, int nArgs, Outcome *o)
{
	sqlite3_stmt *stmt;
	int			rc;
	int			i;

	opSql = sql;
	o->nRows = 0;
	o->msg[0] = '\0';
	stmt = stmtFor(sql, &rc);
	if (stmt == NULL)
	{
		o->rc = rc;
		snprintf(o->msg, sizeof(o->msg), "%s", sqlite3_errmsg(cur->db));
		return;
	}
	for (i = 0; i < nArgs && i < sqlite3_bind_parameter_count(stmt); i++)
		bindVal(stmt, i + 1, &args[i]);
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
	{
		if (o->nRows < MAX_ROWS)
		{
			Seen	   *s = &o->rows[o->nRows];
			const void *p = sqlite3_column_blob(stmt, 0);

			s->type = sqlite3_column_type(stmt, 0);
			s->i = sqlite3_column_int64(stmt, 0);
			seenInt(s, sqlite3_column_double(stmt, 0));
			s->n = sqlite3_column_bytes(stmt, 0);
			s->z = malloc((size_t) s->n + 1);
			if (s->z == NULL)
				abort();
			if (s->n)
				memcpy(s->z, p, (size_t) s->n);
		}
		o->nRows++;
	}
	o->rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	if (o->rc != SQLITE_OK)
		snprintf(o->msg, sizeof(o->msg), "%s", sqlite3_errmsg(cur->db));
	if (tracing())
		traceRun(stmt, o);
	sqlite3_reset(stmt);
	sqlite3_clear_bindings(stmt);
}

static int
startsWith(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The documented errors of fence (SPEC.md "Errors", README result codes). */
/* A guard function called other than from a guard fence_protect made. */
static int
isGuardRefused(const Outcome *o)
{
	return o->rc == SQLITE_ERROR && startsWith(o->msg, "fence guard refused: ");
}

static int
isFenceError(const Outcome *o)
{
	if (o->rc == SQLITE_CONSTRAINT_FUNCTION)
		return startsWith(o->msg, "stale fencing token ") ||
			startsWith(o->msg, "fencing token required ");
	if (o->rc == SQLITE_ERROR)
		return startsWith(o->msg, "invalid fencing ") || isGuardRefused(o);
	return 0;
}

/* What a call should give, predicted from the state before it. */
enum
{
	WANT_OK, WANT_STALE, WANT_REQUIRED, WANT_INVALID
};

typedef struct Want
{
	int			kind;
	const char *invalid;		/* for WANT_INVALID: "resource", "token", ... */
	uint8_t    *z;				/* the resource, when valid */
	int			n;
	uint8_t		buf[2 * LONGEST + 8];
} Want;

static void
checkAgainst(const Outcome *o, const Want *w, const char *what)
{
	char		prefix[64];

	switch (w->kind)
	{
		case WANT_OK:
			CHECK(o->rc == SQLITE_OK, "%s: want success, got %d %s", what, o->rc, o->msg);
			break;
		case WANT_STALE:
			CHECK(o->rc == SQLITE_CONSTRAINT_FUNCTION && startsWith(o->msg, "stale fencing token "),
				  "%s: want a stale-token error, got %d %s", what, o->rc, o->msg);
			break;
		case WANT_REQUIRED:
			CHECK(o->rc == SQLITE_CONSTRAINT_FUNCTION &&
				  startsWith(o->msg, "fencing token required "),
				  "%s: want a token-required error, got %d %s", what, o->rc, o->msg);
			break;
		case WANT_INVALID:
			snprintf(prefix, sizeof(prefix), "invalid fencing %s:", w->invalid);
			CHECK(o->rc == SQLITE_ERROR && startsWith(o->msg, prefix),
				  "%s: want \"%s\", got %d %s", what, prefix, o->rc, o->msg);
			break;
	}
}

/* A resource argument: TEXT of 1 to 1024 bytes. */
static int
wantResource(Want *w, const Seen *s)
{
	if (s->type != SQLITE_TEXT || s->n == 0 || s->n > RESOURCE_MAX)
	{
		w->kind = WANT_INVALID;
		w->invalid = "resource";
		return 0;
	}
	memcpy(w->buf, s->z, (size_t) s->n);
	w->z = w->buf;
	w->n = s->n;
	return 1;
}

/* A per-row resource: TEXT prefix, non-NULL key, together 1 to 1024 bytes. */
static int
wantKeyResource(Want *w, const Seen *prefix, const Seen *key)
{
	w->kind = WANT_INVALID;
	if (prefix->type != SQLITE_TEXT)
		w->invalid = "resource prefix";
	else if (key->type == SQLITE_NULL)
		w->invalid = "key";
	else if (prefix->n + key->n == 0 || prefix->n + key->n > RESOURCE_MAX)
		w->invalid = "resource";
	else
	{
		memcpy(w->buf, prefix->z, (size_t) prefix->n);
		memcpy(w->buf + prefix->n, key->z, (size_t) key->n);
		w->z = w->buf;
		w->n = prefix->n + key->n;
		return 1;
	}
	return 0;
}

/* A token argument: an integer >= 0 (seenInt), never coerced. */
static int
wantToken(Want *w, const Seen *s)
{
	if (!s->bInt || s->i < 0)
	{
		w->kind = WANT_INVALID;
		w->invalid = "token";
		return 0;
	}
	return 1;
}

/* ---------------------------------------------------------------------
 * The state one input runs against
 * ------------------------------------------------------------------ */

typedef struct Savepoint
{
	const char *name;
	uint64_t	hash;
} Savepoint;

static Snap pre,
			post;
static Snap committed;			/* as of the last moment outside a transaction */
static Rows resetSince;			/* resources fence_reset since then */
static Savepoint savepoints[64];
static int	nSavepoints;
static int	xTouched;			/* fence_protect ran on x: undo before the next input */
static int	shadowed;			/* opShadow ran: drop what it made before the next input */

static void
execOrDie(const char *sql)
{
	char	   *err = NULL;

	if (sqlite3_exec(cur->db, sql, NULL, NULL, &err) != SQLITE_OK)
	{
		fprintf(stderr, "fuzz_sqlite: setup failed: %s: %s\n", sql, err ? err : "?");
		abort();
	}
}

static void
openConn(Conn *c, int isBare)
{
	memset(c, 0, sizeof(*c));
	c->bare = isBare;
	if (sqlite3_open_v2(":memory:", &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
						NULL) != SQLITE_OK)
		abort();
	sqlite3_extended_result_codes(c->db, 1);
	if (isBare)
		return;
	cur = c;

	/*
	 * t: one fence "r". k: one per row, "p:" || id, a TEXT key (fence_protect
	 * refuses a key without INTEGER or TEXT affinity: 1 and 1.0 would be one key).
	 * u: one per row on the INTEGER PRIMARY KEY (an INSERT must give it).
	 * x: unprotected, for fuzzed fence_protect calls to guard as they like.
	 * recursive_triggers on: k's rows can be replaced through the rowid.
	 */
	execOrDie("PRAGMA recursive_triggers=ON;"
			  "CREATE TABLE t(id INTEGER PRIMARY KEY, tok, v);"
			  "CREATE TABLE k(id TEXT PRIMARY KEY, tok, v);"
			  "CREATE TABLE u(id INTEGER PRIMARY KEY, tok, v);"
			  "CREATE TABLE x(id PRIMARY KEY, tok, v);"
			  "CREATE VIEW w AS SELECT * FROM t;"
			  "SELECT fence_protect('t', 'tok', 'r');"
			  "SELECT fence_protect('k', 'tok', 'p:', 'id');"
			  "SELECT fence_protect('u', 'tok', 'u:', 'id');"
	/* every statement the extension caches, prepared before the first input */
			  "SELECT fence_current('warm'), fence_check('warm', 0), fence_reset('warm');"
			  "BEGIN; SELECT fence_check('warm', 1); COMMIT;"
			  "SELECT fence_reset('warm');");
}

static void
closeConn(Conn *c)
{
	int			i;
	int			rc;

	for (i = 0; i < N_CACHE && c->sql[i]; i++)
		sqlite3_finalize(c->stmt[i]);
	rc = sqlite3_close(c->db);
	/* the extension must finalize what it caches, or close fails */
	CHECK(rc == SQLITE_OK, "sqlite3_close: %s", sqlite3_errstr(rc));
	memset(c, 0, sizeof(*c));
}

/* Undo what opShadow made: an attached aux, TEMP tables named like fence's. */
static void
dropShadows(void)
{
	if (!shadowed)
		return;
	sqlite3_exec(cur->db, "DETACH DATABASE aux", NULL, NULL, NULL);
	sqlite3_exec(cur->db, "DROP TABLE IF EXISTS temp.fence_tokens", NULL, NULL, NULL);
	sqlite3_exec(cur->db, "DROP TABLE IF EXISTS temp.fence_txn", NULL, NULL, NULL);
	sqlite3_exec(cur->db, "DROP TABLE IF EXISTS temp.fence_held", NULL, NULL, NULL);
	shadowed = 0;
}

/*
 * Bring the shared connection back to how setup left it: no transaction,
 * no rows, x unguarded. The guarded rows are deleted the way an application
 * would, under fences taken at token 0 once fence_tokens is empty. Should
 * that fail (a bug the input's own checks missed), start over from scratch.
 */
static void
resetShared(void)
{
	/*
	 * fence_reset, not a DELETE of fence_tokens: a hand edit of fence's
	 * table is outside the threat model, and the connection's cache of
	 * highest tokens (fence_cache.c) trusts fence's own writes only.
	 */
#define RESET_ALL "SELECT fence_reset(r) FROM (SELECT resource AS r FROM main.fence_tokens ORDER BY 1)"
	static const char *const steps[] = {
		RESET_ALL,
		"BEGIN",
		"SELECT fence_check('r', 0)",
		"SELECT fence_check('p:' || CAST(id AS TEXT), 0) FROM main.k",
		"SELECT fence_check('u:' || CAST(id AS TEXT), 0) FROM main.u",
		"DELETE FROM main.t", "DELETE FROM main.k", "DELETE FROM main.u", "DELETE FROM main.x",
		"COMMIT",
		RESET_ALL,
	};
	static const char *const anyRows =
	"SELECT 1 WHERE EXISTS (SELECT 1 FROM main.t) OR EXISTS (SELECT 1 FROM main.k) "
	"OR EXISTS (SELECT 1 FROM main.u) OR EXISTS (SELECT 1 FROM main.x) "
	"OR EXISTS (SELECT 1 FROM main.fence_tokens)";
	static const char *const unprotectX = "SELECT fence_unprotect('x')";
	int			rc = SQLITE_OK;
	size_t		i;
	sqlite3_stmt *stmt;

	if (shared.db == NULL)
	{
		openConn(&shared, 0);
		return;
	}
	cur = &shared;
	if (!sqlite3_get_autocommit(shared.db))
		rc = execCached("ROLLBACK");
	dropShadows();
	if (rc == SQLITE_OK && xTouched)
		rc = execCached(unprotectX);
	xTouched = 0;
	if (rc == SQLITE_OK && (stmt = stmtFor(anyRows, &rc)) != NULL)
	{
		int			dirty = sqlite3_step(stmt) == SQLITE_ROW;

		sqlite3_reset(stmt);
		for (i = 0; dirty && rc == SQLITE_OK && i < sizeof(steps) / sizeof(steps[0]); i++)
			rc = execCached(steps[i]);
	}
	if (rc != SQLITE_OK)
	{
		closeConn(&shared);
		openConn(&shared, 0);
	}
}

static int
findSavepoint(const char *name)
{
	int			i;

	for (i = nSavepoints - 1; i >= 0; i--)
		if (strcasecmp(savepoints[i].name, name) == 0)
			return i;
	return -1;
}

/* ---------------------------------------------------------------------
 * Operations
 * ------------------------------------------------------------------ */

static void
takeSeen(FuzzInput *in, Val *vals, Seen *seen, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		takeVal(in, &vals[i]);
		probe(&vals[i], &seen[i]);
	}
}

static void
freeSeen(Seen *seen, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		free(seen[i].z);
}

/* The highest before the call: its index in pre.tokens, or -1. */
static int
highestBefore(const Want *w)
{
	return rowsFind(&pre.tokens, w->z, w->n);
}

/*
 * The accept rule (SPEC.md "Words"), checked from both sides: the answer
 * against the highest before, and the state after against the answer.
 */
static void
checkAccept(const Outcome *o, Want *w, int64_t token, int bTry, const char *what)
{
	int			j = highestBefore(w);
	int			stale = j >= 0 && token < pre.tokens.r[j].token;
	int			k;

	if (bTry)
	{
		CHECK(o->rc == SQLITE_OK && o->nRows == 1 && o->rows[0].type == SQLITE_INTEGER &&
			  o->rows[0].i == !stale, "%s: want %d, got %" PRId64 " (rc %d %s)", what, !stale,
			  o->nRows ? o->rows[0].i : -1, o->rc, o->msg);
	}
	else
	{
		w->kind = stale ? WANT_STALE : WANT_OK;
		checkAgainst(o, w, what);
		if (!stale)
			CHECK(o->nRows == 1 && o->rows[0].type == SQLITE_INTEGER && o->rows[0].i == token,
				  "%s: accepted, but does not return the token", what);
	}
	if (stale)
	{
		checkUnchanged(&pre, &post, "a stale token");
		return;
	}
	k = rowsFind(&post.tokens, w->z, w->n);
	CHECK(k >= 0 && post.tokens.r[k].token == token,
		  "%s accepted %" PRId64 " but the highest is now %" PRId64, what, token,
		  k < 0 ? -1 : post.tokens.r[k].token);
	/* updated_at moves only when the token rises */
	if (j >= 0 && pre.tokens.r[j].token == token)
		CHECK(strcmp(pre.tokens.r[j].at, post.tokens.r[k].at) == 0,
			  "an equal token moved updated_at");
	CHECK(rowsEqualExcept(&pre.tokens, &post.tokens, w->z, w->n),
		  "%s changed another resource's highest", what);
	CHECK(pre.tables == post.tables, "%s changed a table", what);
	if (!post.autocommit && !pre.autocommit)
	{
		k = rowsFind(&post.held, w->z, w->n);
		CHECK(k >= 0 && post.held.r[k].token == token,
			  "%s accepted %" PRId64 " in a transaction that does not hold it", what, token);
		CHECK(rowsEqualExcept(&pre.held, &post.held, w->z, w->n),
			  "%s changed another fence", what);
	}
}

/* fence_check, fence_try, fence_guard_write with two or three arguments */
static void
opAccept(FuzzInput *in, int which)
{
	static const char *const sqls[] = {
		"SELECT fence_check(?1, ?2)",
		"SELECT fence_try(?1, ?2)",
		/* called directly, with no guard id fence_protect recorded */
		"SELECT fence_guard_write(?1, ?2)",
		"SELECT fence_guard_write(0, ?1, ?2, ?3)",
	};
	int			nArgs = which == 3 ? 3 : 2;
	Val			vals[3];
	Seen		seen[3];
	Outcome		o;
	Want		w;
	const Seen *tok = &seen[nArgs - 1];

	takeSeen(in, vals, seen, nArgs);
	run(sqls[which], vals, nArgs, &o);
	takeSnap(&post);
	if (o.rc != SQLITE_OK)
	{
		CHECK(isFenceError(&o), "undocumented error %d: %s", o.rc, o.msg);
		checkUnchanged(&pre, &post, "an error");
	}
	if (which >= 2)
	{
		/* a guard function admits only its own triggers' guard ids */
		CHECK(o.rc != SQLITE_OK, "%s passed without a guard id", sqls[which]);
		goto done;
	}

	if (nArgs == 3 ? wantKeyResource(&w, &seen[0], &seen[1]) : wantResource(&w, &seen[0]))
	{
		if (which >= 2 && tok->type == SQLITE_NULL)
			w.kind = WANT_REQUIRED;
		else if (wantToken(&w, tok))
		{
			checkAccept(&o, &w, tok->i, which == 1, sqls[which]);
			goto done;
		}
	}
	checkAgainst(&o, &w, sqls[which]);
done:
	outcomeFree(&o);
	freeSeen(seen, nArgs);
}

/* fence_current, fence_reset, fence_guard_fenced with one or two arguments */
static void
opResource(FuzzInput *in, int which)
{
	static const char *const sqls[] = {
		"SELECT fence_current(?1)",
		"SELECT fence_reset(?1)",
		"SELECT fence_guard_fenced(?1)",
		"SELECT fence_guard_fenced(0, ?1, ?2)",
	};
	int			nArgs = which == 3 ? 2 : 1;
	Val			vals[2];
	Seen		seen[2];
	Outcome		o;
	Want		w;
	int			valid;

	takeSeen(in, vals, seen, nArgs);
	run(sqls[which], vals, nArgs, &o);
	takeSnap(&post);
	if (o.rc != SQLITE_OK)
		CHECK(isFenceError(&o), "undocumented error %d: %s", o.rc, o.msg);
	if (which >= 2)
	{
		/* a guard function admits only its own triggers' guard ids */
		CHECK(o.rc != SQLITE_OK, "%s passed without a guard id", sqls[which]);
		checkUnchanged(&pre, &post, sqls[which]);
		goto done;
	}
	valid = nArgs == 2 ? wantKeyResource(&w, &seen[0], &seen[1]) : wantResource(&w, &seen[0]);
	if (!valid || which != 1)
		checkUnchanged(&pre, &post, sqls[which]);
	if (!valid)
		checkAgainst(&o, &w, sqls[which]);
	else if (which == 0)
	{
		int			j = highestBefore(&w);

		w.kind = WANT_OK;
		checkAgainst(&o, &w, sqls[which]);
		CHECK(o.nRows == 1 && (j < 0 ? o.rows[0].type == SQLITE_NULL :
							   o.rows[0].type == SQLITE_INTEGER &&
							   o.rows[0].i == pre.tokens.r[j].token),
			  "fence_current disagrees with fence_tokens");
	}
	else if (which == 1)
	{
		w.kind = WANT_OK;
		checkAgainst(&o, &w, sqls[which]);
		CHECK(rowsFind(&post.tokens, w.z, w.n) < 0 && rowsFind(&post.held, w.z, w.n) < 0,
			  "fence_reset left the resource behind");
		CHECK(rowsEqualExcept(&pre.tokens, &post.tokens, w.z, w.n) &&
			  rowsEqualExcept(&pre.held, &post.held, w.z, w.n) &&
			  pre.tables == post.tables, "fence_reset changed something else");
		rowsAdd(&resetSince, w.z, w.n, 0, NULL);
	}
	else
	{
		w.kind = !pre.autocommit && rowsFind(&pre.held, w.z, w.n) >= 0 ?
			WANT_OK : WANT_REQUIRED;
		checkAgainst(&o, &w, sqls[which]);
	}
done:
	outcomeFree(&o);
	freeSeen(seen, nArgs);
}

/*
 * Writes to the tables. t has one fence "r"; k one per row, "p:" || id; u
 * one per row on its INTEGER PRIMARY KEY (an AFTER INSERT guard),
 * "u:" || id; x whatever guard fuzzed fence_protect calls gave it, so
 * writes to x are held only to the rules that hold for any guard.
 */
enum
{
	W_INSERT, W_INSERT_OR, W_UPSERT, W_UPDATE_TOKEN, W_UPDATE, W_DELETE, W_MULTI
};

typedef struct WriteSql
{
	int			kind;
	const char *sql;			/* %s: the table */
	int			nArgs;
	int			setsToken;		/* ?2 is the new token */
} WriteSql;

static const WriteSql writeSqls[] = {
	{W_INSERT, "INSERT INTO %s(id, tok, v) VALUES (?1, ?2, ?3) RETURNING CAST(id AS BLOB)", 3, 1},
	{W_INSERT, "INSERT INTO %s(tok, v) VALUES (?2, ?3) RETURNING CAST(id AS BLOB)", 3, 1},
	{W_INSERT_OR, "INSERT OR REPLACE INTO %s(id, tok, v) VALUES (?1, ?2, ?3) RETURNING CAST(id AS BLOB)", 3, 1},
	{W_INSERT_OR, "INSERT OR IGNORE INTO %s(id, tok, v) VALUES (?1, ?2, ?3) RETURNING CAST(id AS BLOB)", 3, 1},
	{W_UPSERT, "INSERT INTO %s(id, tok, v) VALUES (?1, ?2, ?3) ON CONFLICT(id) DO UPDATE SET tok = excluded.tok RETURNING CAST(id AS BLOB)", 3, 0},
	{W_UPSERT, "INSERT INTO %s(id, tok, v) VALUES (?1, ?2, ?3) ON CONFLICT(id) DO UPDATE SET v = excluded.v RETURNING CAST(id AS BLOB)", 3, 0},
	{W_UPSERT, "INSERT INTO %s(id, tok, v) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING RETURNING CAST(id AS BLOB)", 3, 0},
	{W_UPDATE_TOKEN, "UPDATE %s SET tok = ?2 WHERE id = ?1 RETURNING CAST(id AS BLOB)", 2, 1},
	{W_UPDATE_TOKEN, "UPDATE %s SET tok = ?2, id = ?3 WHERE id = ?1 RETURNING CAST(id AS BLOB)", 3, 1},
	{W_UPDATE, "UPDATE %s SET tok = tok WHERE id = ?1 RETURNING CAST(id AS BLOB)", 1, 0},
	{W_UPDATE, "UPDATE %s SET v = ?2 WHERE id = ?1 RETURNING CAST(id AS BLOB)", 2, 0},
	{W_UPDATE, "UPDATE %s SET id = ?2 WHERE id = ?1 RETURNING CAST(id AS BLOB)", 2, 0},
	{W_DELETE, "DELETE FROM %s WHERE id = ?1 RETURNING CAST(id AS BLOB)", 1, 0},
	{W_MULTI, "INSERT INTO %s(id, tok, v) VALUES (?1, ?2, 'a'), (?3, ?4, 'b')", 4, 0},
	{W_MULTI, "UPDATE %s SET tok = ?1", 1, 0},
	{W_MULTI, "UPDATE %s SET id = id + ?1", 1, 0},
	{W_MULTI, "DELETE FROM %s", 0, 0},
	{W_MULTI, "REPLACE INTO %s SELECT id, ?1, v FROM %s", 1, 0},
	/* every other form of REPLACE (issue 11) */
	{W_INSERT_OR, "REPLACE INTO %s(id, tok, v) VALUES (?1, ?2, ?3) RETURNING CAST(id AS BLOB)", 3, 1},
	{W_UPDATE, "UPDATE OR REPLACE %s SET id = ?2 WHERE id = ?1 RETURNING CAST(id AS BLOB)", 2, 0},
	{W_UPDATE_TOKEN, "UPDATE OR REPLACE %s SET tok = ?2, id = ?3 WHERE id = ?1 RETURNING CAST(id AS BLOB)", 3, 1},
	{W_UPSERT, "INSERT INTO %s(id, tok, v) VALUES (?1, ?2, ?3) ON CONFLICT(id) DO UPDATE SET id = excluded.id + 1 RETURNING CAST(id AS BLOB)", 3, 0},
};

#define N_WRITES (sizeof(writeSqls) / sizeof(writeSqls[0]))
static char writeText[N_WRITES][4][200];

static const char *
writeSqlFor(int i, int table)
{
	static const char *const tables[] = {"t", "k", "u", "x"};

	if (writeText[i][table][0] == '\0')
		snprintf(writeText[i][table], sizeof(writeText[i][table]), writeSqls[i].sql,
				 tables[table], tables[table]);
	return writeText[i][table];
}

/* The resource a row of table has for the key bytes in s (CAST id AS TEXT). */
static int
rowResource(int table, const Seen *key, uint8_t *out)
{
	const char *prefix = table == 1 ? "p:" : "u:";

	if (table == 0)
	{
		out[0] = 'r';
		return 1;
	}
	memcpy(out, prefix, 2);
	memcpy(out + 2, key->z, (size_t) key->n);
	return 2 + key->n;
}

static int
isOrdinaryDataError(const Outcome *o)
{
	/* what SQLite itself says of the values: keys clash, ids are not integers */
	return o->rc == SQLITE_CONSTRAINT_PRIMARYKEY || o->rc == SQLITE_CONSTRAINT_UNIQUE ||
		o->rc == SQLITE_MISMATCH;
}

static void
checkHeldAfterWrite(int table, const Seen *keys, int nKeys, const char *what)
{
	uint8_t		res[2 * LONGEST + 8];
	int			i;

	if (pre.autocommit || post.autocommit || table == 3)
		return;
	for (i = 0; i < nKeys && i < MAX_ROWS; i++)
	{
		int			n;

		if (keys[i].type == SQLITE_NULL)
			continue;
		n = rowResource(table, &keys[i], res);
		CHECK(rowsFind(&post.held, res, n) >= 0,
			  "%s succeeded without the transaction holding a fence on its row", what);
	}
}

static void
checkTokenAfterWrite(int table, const Seen *keys, int nKeys, const Seen *tok,
					 const char *what)
{
	uint8_t		res[2 * LONGEST + 8];
	int			i;

	if (table == 3)
		return;
	for (i = 0; i < nKeys && i < MAX_ROWS; i++)
	{
		int			n = rowResource(table, &keys[i], res);
		int			j = rowsFind(&post.tokens, res, n);

		CHECK(tok->bInt && tok->i >= 0,
			  "%s wrote a row with a token of type %d", what, tok->type);
		CHECK(j >= 0 && post.tokens.r[j].token == tok->i,
			  "%s wrote token %" PRId64 " but the highest is %" PRId64, what, tok->i,
			  j < 0 ? -1 : post.tokens.r[j].token);
	}
}

static void
opWrite(FuzzInput *in)
{
	int			i = in_u8(in) % N_WRITES;
	int			table = in_u8(in) % 4;
	const WriteSql *ws = &writeSqls[i];
	const char *sql = writeSqlFor(i, table);
	Val			vals[MAX_ARGS];
	Seen		seen[MAX_ARGS];
	Outcome		before;
	Outcome		o;
	static char selectOld[4][80];

	takeSeen(in, vals, seen, ws->nArgs);

	/* the rows an UPDATE is about to change, for their old resources */
	before.nRows = 0;
	if (ws->kind == W_UPDATE || ws->kind == W_UPDATE_TOKEN)
	{
		if (selectOld[table][0] == '\0')
			snprintf(selectOld[table], sizeof(selectOld[table]),
					 "SELECT CAST(id AS BLOB) FROM %c WHERE id = ?1", "tkux"[table]);
		run(selectOld[table], vals, 1, &before);
		CHECK(before.rc == SQLITE_OK, "reading old rows: %s", before.msg);
	}

	run(sql, vals, ws->nArgs, &o);
	takeSnap(&post);
	if (o.rc != SQLITE_OK)
	{
		CHECK(isFenceError(&o) || isOrdinaryDataError(&o), "undocumented error %d: %s",
			  o.rc, o.msg);
		/* SPEC.md "Errors": nothing of a failed write stays, fences included */
		checkUnchanged(&pre, &post, "a failed write");
	}
	else if (ws->kind != W_MULTI)
	{
		checkHeldAfterWrite(table, o.rows, o.nRows, sql);
		checkHeldAfterWrite(table, before.rows, before.nRows, sql);
		if (ws->setsToken && (ws->kind != W_UPDATE_TOKEN || before.nRows > 0))
		{
			checkTokenAfterWrite(table, o.rows, o.nRows, &seen[1], sql);
			checkTokenAfterWrite(table, before.rows, before.nRows, &seen[1], sql);
		}
	}
	outcomeFree(&before);
	outcomeFree(&o);
	freeSeen(seen, ws->nArgs);
}

/* BEGIN, COMMIT, ROLLBACK and savepoints, mirrored on a stack of hashes. */
static void
opTransaction(FuzzInput *in)
{
	static const char *const names[] = {"s0", "s1", "s2", "fence_protect"};
	static const char *const sqls[] = {
		"BEGIN", "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK",
		"SAVEPOINT s0", "SAVEPOINT s1", "SAVEPOINT s2", "SAVEPOINT fence_protect",
		"RELEASE s0", "RELEASE s1", "RELEASE s2", "RELEASE fence_protect",
		"ROLLBACK TO s0", "ROLLBACK TO s1", "ROLLBACK TO s2", "ROLLBACK TO fence_protect",
	};
	int			which = in_u8(in) % 16;
	const char *name = names[which % 4];
	Outcome		o;
	int			sp = findSavepoint(name);

	run(sqls[which], NULL, 0, &o);
	takeSnap(&post);
	if (o.rc != SQLITE_OK)
	{
		CHECK(o.rc == SQLITE_ERROR, "%d %s", o.rc, o.msg);
		checkUnchanged(&pre, &post, "a failed transaction statement");
		if (which >= 8)
			CHECK(sp < 0, "savepoint %s exists but: %s", name, o.msg);
	}
	else if (which == 3)
	{
		CHECK(rowsEqualExcept(&committed.tokens, &post.tokens, NULL, 0) &&
			  committed.tables == post.tables,
			  "ROLLBACK did not restore the committed state");
		nSavepoints = 0;
	}
	else if (which >= 4 && which < 8)
	{
		if (nSavepoints == 64)
			abort();
		savepoints[nSavepoints].name = name;
		savepoints[nSavepoints].hash = snapHash(&pre);
		nSavepoints++;
	}
	else if (which >= 8)
	{
		CHECK(sp >= 0, "%s succeeded with no such savepoint", sqls[which]);
		if (which >= 12)
		{
			/* SPEC.md: a savepoint rolled back undoes what it accepted */
			CHECK(snapHash(&post) == savepoints[sp].hash,
				  "%s did not restore the state the savepoint began with", sqls[which]);
			nSavepoints = sp + 1;
		}
		else
			nSavepoints = sp;
	}
	outcomeFree(&o);
}

/*
 * fence_protect and fence_unprotect with fuzzed arguments, on x only: t, k
 * and u keep the guards the other checks rely on.
 */
static void
opProtect(FuzzInput *in)
{
	static const char *const sqls[] = {
		"SELECT fence_protect(?1, ?2, ?3)",
		"SELECT fence_protect(?1, ?2, ?3, ?4)",
		"SELECT fence_unprotect(?1)",
	};
	static const char *const tables[] = {
		"x", "X", "w", "fence_tokens", "sqlite_schema", "sqlite_master", "nosuch", "",
		"x\0t",
	};
	int			which = in_u8(in) % 3;
	int			t = in_u8(in) % 10;
	Val			vals[4];
	Outcome		o;
	int			i;

	if (t == 9)
		vals[0].kind = V_NULL;
	else
	{
		vals[0].kind = V_TEXT;
		vals[0].n = t == 8 ? 3 : (int) strlen(tables[t]);
		memcpy(vals[0].z, tables[t], (size_t) vals[0].n);
	}
	for (i = 1; i < 4; i++)
		takeVal(in, &vals[i]);
	xTouched = 1;
	run(sqls[which], vals, which == 1 ? 4 : which == 0 ? 3 : 1, &o);
	takeSnap(&post);
	if (o.rc != SQLITE_OK)
	{
		CHECK(isFenceError(&o) || (o.rc == SQLITE_ERROR &&
								   (startsWith(o.msg, "fence_protect: ") ||
									startsWith(o.msg, "fence_unprotect: "))),
			  "undocumented error %d: %s", o.rc, o.msg);
		checkUnchanged(&pre, &post, "a failed fence_protect");
	}
	else
		CHECK(pre.tables == post.tables && rowsEqualExcept(&pre.tokens, &post.tokens, NULL, 0),
			  "fence_protect changed data");
	outcomeFree(&o);
}

/* Odd shapes: wrong arity, two fences in one SELECT, scans of fence_held. */
static void
opOther(FuzzInput *in)
{
	static const char *const sqls[] = {
		"SELECT fence_check(?1)",
		"SELECT fence_check(?1, ?2, ?3)",
		"SELECT fence_current()",
		"SELECT fence_reset(?1, ?2)",
		"SELECT fence_check(?1, ?2), fence_check(?3, ?4)",
		"SELECT fence_try(?1, ?2), fence_reset(?3), fence_try(?1, ?4)",
		"SELECT resource, token, fence_current(resource) FROM main.fence_held",
		/* a scan sees the fences it takes: LIMIT keeps it finite */
		"SELECT fence_check(resource, token + ?1) FROM main.fence_held LIMIT 20",
		"SELECT fence_reset(resource) FROM main.fence_held",
		"SELECT count(*) FROM (SELECT 1 FROM main.fence_held WHERE fence_try(resource || ?1, ?2) LIMIT 20)",
		"SELECT fence_guard_fenced(resource) FROM main.fence_held",
	};
	int			which = in_u8(in) % (sizeof(sqls) / sizeof(sqls[0]));
	Val			vals[4];
	Outcome		o;
	int			i;

	for (i = 0; i < 4; i++)
		takeVal(in, &vals[i]);
	run(sqls[which], vals, 4, &o);
	takeSnap(&post);
	if (which < 4)
		CHECK(o.rc == SQLITE_ERROR && strstr(o.msg, "wrong number of arguments"),
			  "a call with the wrong number of arguments gave %d %s", o.rc, o.msg);
	else if (o.rc != SQLITE_OK)
		CHECK(isFenceError(&o), "undocumented error %d: %s", o.rc, o.msg);
	if (which == 6 && o.rc == SQLITE_OK)
		CHECK(o.nRows == pre.held.n, "fence_held listed %d rows, want %d", o.nRows, pre.held.n);
	if (which == 10)
		CHECK(o.rc == SQLITE_OK ? pre.held.n == 0 : isGuardRefused(&o),
			  "a guard called from a scan of fence_held without its id gave %d %s", o.rc, o.msg);
	if (which == 5 || which == 8)
		rowsAdd(&resetSince, "", 0, 0, NULL);	/* any resource may have been reset */
	outcomeFree(&o);
}

/*
 * ATTACH and tables named like fence's own in TEMP and in an attached
 * database: fence reads and writes only main's (SPEC.md "No way around the
 * fence"), so none of this may change main's fences, rows or held set.
 */
static void
opShadow(FuzzInput *in)
{
	static const char *const sqls[] = {
		"ATTACH ':memory:' AS aux",
		"DETACH DATABASE aux",
		"CREATE TABLE IF NOT EXISTS aux.fence_tokens(resource TEXT PRIMARY KEY, token, updated_at)",
		"INSERT OR REPLACE INTO aux.fence_tokens VALUES (?1, ?2, 'aux')",
		"CREATE TEMP TABLE IF NOT EXISTS fence_tokens(resource, token, updated_at)",
		"INSERT INTO temp.fence_tokens VALUES (?1, ?2, 'temp')",
		"CREATE TEMP TABLE IF NOT EXISTS fence_txn(x)",
		"CREATE TEMP TABLE IF NOT EXISTS fence_held(resource, token)",
		"INSERT INTO temp.fence_held VALUES (?1, ?2)",
		"CREATE TABLE IF NOT EXISTS aux.fence_txn(x)",
		"CREATE TABLE IF NOT EXISTS aux.t(id INTEGER PRIMARY KEY, tok, v)",
		"INSERT INTO aux.t(tok, v) VALUES (?2, ?1)",
	};
	int			which = in_u8(in) % (sizeof(sqls) / sizeof(sqls[0]));
	Val			vals[2];
	Outcome		o;

	takeVal(in, &vals[0]);
	takeVal(in, &vals[1]);
	shadowed = 1;
	run(sqls[which], vals, strchr(sqls[which], '?') ? 2 : 0, &o);
	takeSnap(&post);
	checkUnchanged(&pre, &post, sqls[which]);
	outcomeFree(&o);
}

/* ---------------------------------------------------------------------
 * Savepoints under allocation failure
 * ------------------------------------------------------------------ */

static sqlite3_mem_methods defaultMem;
static long allocCount;
static long failAt;				/* 0: never */

static void *
countingMalloc(int n)
{
	if (failAt && ++allocCount == failAt)
		return NULL;
	return defaultMem.xMalloc(n);
}

static void *
countingRealloc(void *p, int n)
{
	if (failAt && ++allocCount == failAt)
		return NULL;
	return defaultMem.xRealloc(p, n);
}

static void
installAllocator(void)
{
	sqlite3_mem_methods m;

	sqlite3_config(SQLITE_CONFIG_GETMALLOC, &defaultMem);
	m = defaultMem;
	m.xMalloc = countingMalloc;
	m.xRealloc = countingRealloc;
	sqlite3_config(SQLITE_CONFIG_MALLOC, &m);
}

/*
 * A savepoint that takes fences, by a guard and by fence_check, with one
 * allocation failing somewhere in it. Whatever failed, once the savepoint
 * was opened and rolled back to, the state is what it was before (SPEC:
 * "a savepoint rolled back undoes what it accepted"); out of memory must
 * never leave the transaction believing it holds what ROLLBACK TO undid.
 * Then the transaction is ended, so that a transaction fence gave up on
 * (it refuses everything until it ends) does not trouble the next ops.
 */
static void
opOutOfMemory(FuzzInput *in)
{
	static const char *const script[] = {
		"SAVEPOINT oom1",
		"SELECT fence_check('r', ?1)",
		"SAVEPOINT oom2",
		"INSERT INTO main.t(tok, v) VALUES (?1, 'oom')",
		"SELECT fence_check('oom', ?2)",
		"SELECT fence_check('p:' || ?2, ?1)",
		"ROLLBACK TO oom1",
		"RELEASE oom1",
	};
	long		at = 1 + (long) in_u8(in) * 4 + in_u8(in) % 4;
	sqlite3_int64 t1 = in_u8(in) % 8;
	sqlite3_int64 t2 = in_u8(in) % 8;
	int			rc[8];
	size_t		i;
	int			wasAutocommit = pre.autocommit;

	opSql = "savepoints under allocation failure";
	allocCount = 0;
	failAt = at;
	for (i = 0; i < sizeof(script) / sizeof(script[0]); i++)
	{
		sqlite3_stmt *stmt = NULL;

		rc[i] = sqlite3_prepare_v2(cur->db, script[i], -1, &stmt, NULL);
		if (rc[i] == SQLITE_OK)
		{
			if (sqlite3_bind_parameter_count(stmt) >= 1)
				sqlite3_bind_int64(stmt, 1, t1);
			if (sqlite3_bind_parameter_count(stmt) >= 2)
				sqlite3_bind_int64(stmt, 2, t2);
			while ((rc[i] = sqlite3_step(stmt)) == SQLITE_ROW)
				;
			if (rc[i] == SQLITE_DONE)
				rc[i] = SQLITE_OK;
		}
		if (tracing())
			fprintf(stderr, "[%d] %s (allocation %ld of %ld fails) -> %s\n", opIndex, script[i],
					at, allocCount, rc[i] == SQLITE_OK ? "ok" : sqlite3_errmsg(cur->db));
		sqlite3_finalize(stmt);
	}
	failAt = 0;
	takeSnap(&post);
	if (rc[0] == SQLITE_OK && rc[6] == SQLITE_OK)
	{
		CHECK(rowsEqualExcept(&pre.tokens, &post.tokens, NULL, 0) && pre.tables == post.tables,
			  "ROLLBACK TO after allocation %ld failed did not restore fence_tokens or the tables", at);
		CHECK(rowsEqualExcept(&pre.held, &post.held, NULL, 0),
			  "ROLLBACK TO after allocation %ld failed left the transaction holding other fences", at);
	}
	if (!sqlite3_get_autocommit(cur->db))
	{
		sqlite3_exec(cur->db, "ROLLBACK", NULL, NULL, NULL);
		takeSnap(&post);
		if (rc[0] == SQLITE_OK && rc[6] == SQLITE_OK && wasAutocommit)
			CHECK(rowsEqualExcept(&pre.tokens, &post.tokens, NULL, 0) && pre.tables == post.tables,
				  "ROLLBACK after allocation %ld failed did not restore the state", at);
	}
	nSavepoints = 0;
	opSql = NULL;
}

/* The committed highest never decreases, except through fence_reset. */
static void
checkCommitted(void)
{
	int			i;
	int			anyReset = rowsFind(&resetSince, "", 0) >= 0;

	if (!post.autocommit)
		return;
	nSavepoints = 0;
	for (i = 0; i < committed.tokens.n; i++)
	{
		const Row  *was = &committed.tokens.r[i];
		int			j = rowsFind(&post.tokens, was->z, was->n);

		if (anyReset || rowsFind(&resetSince, was->z, was->n) >= 0)
			continue;
		CHECK(j >= 0 && post.tokens.r[j].token >= was->token,
			  "the committed highest went from %" PRId64 " to %s%" PRId64 " without fence_reset",
			  was->token, j < 0 ? "none " : "", j < 0 ? 0 : post.tokens.r[j].token);
	}
	rowsCopy(&committed.tokens, &post.tokens);
	committed.tables = post.tables;
	rowsClear(&resetSince);
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int	registered;
	FuzzInput	in = {data, size};
	Snap		swap;

	if (!registered)
	{
		/*
		 * No bulk page-cache allocation per pager: every RETURNING opens an
		 * ephemeral one, and ASan's quarantine made those 86 KB blocks the
		 * main cost of a run (3x fewer execs/s). Must precede initialization.
		 */
		sqlite3_config(SQLITE_CONFIG_PAGECACHE, NULL, 0, 0);
		installAllocator();
		/* as load_extension would: SQLite passes its API table to the entry point */
		sqlite3_auto_extension((void (*) (void)) sqlite3_fence_init);
		registered = 1;
	}

	/* one input in eight runs where fence_tokens does not exist yet */
	opSql = NULL;
	opIndex = -1;
	if (in_u8(&in) % 8 == 0)
		openConn(&bare, 1);
	else
		resetShared();
	cur = bare.db ? &bare : &shared;
	nSavepoints = 0;
	rowsClear(&resetSince);
	takeSnap(&pre);
	rowsCopy(&committed.tokens, &pre.tokens);
	committed.tables = pre.tables;

	for (opIndex = 0; opIndex < MAX_OPS && !in_done(&in); opIndex++)
	{
		uint8_t		op = in_u8(&in) % 32;

		/* a bare connection has no tables to write */
		if (cur->bare && op >= 8 && op < 18)
			op &= 7;
		if (op < 4)
			opAccept(&in, op);
		else if (op < 8)
			opResource(&in, op - 4);
		else if (op < 17)
			opWrite(&in);
		else if (op < 18)
			opProtect(&in);
		else if (op < 26)
			opTransaction(&in);
		else if (op < 30)
			opOther(&in);
		else if (op == 30)
			opShadow(&in);
		else
			opOutOfMemory(&in);
		checkAlways(&post);
		checkCommitted();
		swap = pre;
		pre = post;
		post = swap;
	}
	if (cur->bare)
		closeConn(&bare);

	/*
	 * libFuzzer reruns under LeakSanitizer any input that ends with more
	 * allocations than frees: leave none of ours behind.
	 */
	rowsClear(&pre.tokens);
	rowsClear(&pre.held);
	rowsClear(&post.tokens);
	rowsClear(&post.held);
	rowsClear(&committed.tokens);
	rowsClear(&resetSince);
	return 0;
}
