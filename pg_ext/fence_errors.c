/*
 * fence_errors.c
 *
 * How the PostgreSQL extension reports errors and validates arguments:
 * the stale (23T01), missing-token (23T02) and invalid-input (class 22)
 * errors, worded by core/fence_core.c as SQLite's are, and the resource
 * and token arguments of the SQL functions checked against core's rules.
 *
 * Provides: fence_report_stale, fence_report_missing, fence_report_invalid,
 * fence_client_text, fence_validate_resource, fence_resource_arg,
 * fence_token_arg. Calls no other file of pg_ext: every other file may
 * call it.
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "fence_pg.h"

/* Can the client encoding represent the server-encoded character at c? */
static bool
client_has(Oid proc, int server, int client, const char *c, int n)
{
	unsigned char converted[MAX_MULTIBYTE_CHAR_LEN * MAX_CONVERSION_GROWTH + 1];

	return !IS_HIGHBIT_SET(*c) ||
		pg_do_encoding_conversion_buf(proc, server, client, (unsigned char *) c, n,
									  converted, sizeof(converted), true) == n;
}

/* The length of the server-encoded character at str[i], within len. */
static int
char_len(int server, const char *str, size_t i, size_t len)
{
	int			n = pg_encoding_mblen(server, str + i);

	return (n < 1 || i + n > len) ? 1 : n;
}

/*
 * str (len bytes, server encoding) as the client can be sent it. A
 * message is converted to the client encoding on its way out, and a
 * character the client encoding lacks (a CJK resource, a LATIN1 client)
 * made PostgreSQL replace the whole error with 22P05. Such characters are
 * written as \uXXXX (\UXXXXXXXX beyond the BMP; \xNN per byte when the
 * server encoding is not UTF8), and then every backslash as \\ so that
 * the escapes read back unambiguously. Text the client can represent comes
 * back unchanged, as does any text without a non-ASCII byte (the common
 * case, decided without a look-up). *outlen is the result's length.
 */
const char *
fence_client_text(const char *str, size_t len, size_t *outlen)
{
	int			server = GetDatabaseEncoding();
	int			client = pg_get_client_encoding();
	Oid			proc;
	StringInfoData buf;
	size_t		i;
	int			n;

	*outlen = len;
	if (server == client || server == PG_SQL_ASCII || client == PG_SQL_ASCII)
		return str;
	for (i = 0; i < len && !IS_HIGHBIT_SET(str[i]); i++)
		;
	if (i == len)
		return str;
	proc = FindDefaultConversionProc(server, client);
	if (!OidIsValid(proc))
		return str;
	for (; i < len; i += n)
	{
		n = char_len(server, str, i, len);
		if (!client_has(proc, server, client, str + i, n))
			break;
	}
	if (i == len)
		return str;

	initStringInfo(&buf);
	for (i = 0; i < len; i += n)
	{
		n = char_len(server, str, i, len);
		if (str[i] == '\\')
			appendStringInfoString(&buf, "\\\\");
		else if (client_has(proc, server, client, str + i, n))
			appendBinaryStringInfo(&buf, str + i, n);
		else if (server == PG_UTF8)
		{
			pg_wchar	c = utf8_to_unicode((const unsigned char *) str + i);

			appendStringInfo(&buf, c > 0xFFFF ? "\\U%08X" : "\\u%04X", (unsigned int) c);
		}
		else
			for (int j = 0; j < n; j++)
				appendStringInfo(&buf, "\\x%02X", (unsigned char) str[i + j]);
	}
	*outlen = buf.len;
	return buf.data;
}

void
fence_report_stale(Relation rel, const char *resource, size_t len, int64 token,
				   int64 highest)
{
	char		msg[FENCE_MSG_MAX];
	char		detail[FENCE_MSG_MAX];

	resource = fence_client_text(resource, len, &len);

	ereport(ERROR,
			(errcode(ERRCODE_FENCE_STALE_TOKEN),
			 errmsg_internal("%s", fence_msg_stale(msg, resource, len, token)),
			 errdetail_internal("%s", fence_detail_stale(detail, resource, len, highest)),
			 errhint("%s", fence_hint_stale()),
			 rel ? errtable(rel) : 0));
	pg_unreachable();
}

void
fence_report_missing(Relation rel, FenceMissing why, const char *resource, size_t len,
					 const char *column)
{
	char		msg[FENCE_MSG_MAX];
	char		detail[FENCE_MSG_MAX];
	size_t		columnLen;

	resource = fence_client_text(resource, len, &len);
	if (column)
		column = fence_client_text(column, strlen(column), &columnLen);

	ereport(ERROR,
			(errcode(ERRCODE_FENCE_TOKEN_REQUIRED),
			 errmsg_internal("%s", fence_msg_missing(msg, resource, len)),
			 errdetail_internal("%s", fence_detail_missing(detail, why, resource, len, column)),
			 errhint("%s", fence_hint_missing(why)),
			 rel ? errtable(rel) : 0));
	pg_unreachable();
}

void
fence_report_invalid(const char *what, FenceProblem problem, size_t len, int64 token)
{
	char		msg[FENCE_MSG_MAX];

	ereport(ERROR,
			(errcode(problem == FENCE_NULL ? ERRCODE_NULL_VALUE_NOT_ALLOWED
					 : ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg_internal("%s", fence_msg_invalid(msg, what, problem, len, token))));
	pg_unreachable();
}

void
fence_validate_resource(const char *resource, size_t len)
{
	FenceProblem problem = fence_check_resource(resource, len);

	if (problem != FENCE_VALID)
		fence_report_invalid("resource", problem, len, 0);
}

/* The resource argument n, validated; *len its length in bytes. */
char *
fence_resource_arg(FunctionCallInfo fcinfo, int n, size_t *len)
{
	text	   *t;

	if (PG_ARGISNULL(n))
		fence_report_invalid("resource", FENCE_NULL, 0, 0);
	t = PG_GETARG_TEXT_PP(n);
	*len = VARSIZE_ANY_EXHDR(t);
	fence_validate_resource(VARDATA_ANY(t), *len);
	return VARDATA_ANY(t);
}

/* The token argument n, validated. */
int64
fence_token_arg(FunctionCallInfo fcinfo, int n)
{
	int64		token;

	if (PG_ARGISNULL(n))
		fence_report_invalid("token", FENCE_NULL, 0, 0);
	token = PG_GETARG_INT64(n);
	if (fence_check_token(token) != FENCE_VALID)
		fence_report_invalid("token", FENCE_NEGATIVE, 0, token);
	return token;
}

