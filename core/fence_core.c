/*
 * fence_core.c
 *
 * The accept rule, input validation and every message text of fence, shared
 * by both engines. Kept free of any engine header so that it builds and runs
 * under AddressSanitizer, UBSan and libFuzzer on its own (tests/fuzz).
 * Messages begin with the fixed words of SPEC.md ("stale fencing token",
 * "fencing token required", "invalid fencing") because clients match on them.
 */
#include "fence_core.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Longest part of a resource shown in a message before "...". */
#define SHOWN_RESOURCE_MAX 200

FenceVerdict
fence_decide(int has_highest, int64_t highest, int64_t token)
{
	if (!has_highest)
		return FENCE_ACCEPT_FIRST;
	if (token > highest)
		return FENCE_ACCEPT_ADVANCE;
	if (token == highest)
		return FENCE_ACCEPT_EQUAL;
	return FENCE_REJECT_STALE;
}

FenceProblem
fence_check_resource(const char *resource, size_t len)
{
	if (resource == NULL)
		return FENCE_NULL;
	if (len == 0)
		return FENCE_EMPTY;
	if (len > FENCE_RESOURCE_MAX)
		return FENCE_TOO_LONG;
	return FENCE_VALID;
}

FenceProblem
fence_check_token(int64_t token)
{
	return token < 0 ? FENCE_NEGATIVE : FENCE_VALID;
}

/*
 * How many of the first len bytes of s fit in max bytes without splitting a
 * UTF-8 character: a cut never lands before a continuation byte (10xxxxxx).
 * A message cut inside a character is invalid UTF-8, which a client in
 * another encoding cannot convert: it would get an encoding error (22021 in
 * PostgreSQL) instead of the fence's own error. Both engines store text as
 * UTF-8 here (SQLite's text API, a UTF8 PostgreSQL database); in a
 * single-byte encoding this only shortens the cut by a few bytes.
 */
static size_t
clip_utf8(const char *s, size_t len, size_t max)
{
	size_t		n;

	if (len <= max)
		return len;
	n = max;
	while (n > 0 && ((unsigned char) s[n] & 0xC0) == 0x80)
		n--;
	return n;
}

/*
 * Write the resource, quoted and made printable, into out (which has room
 * for SHOWN_RESOURCE_MAX + 6 bytes).
 */
static const char *
shown_resource(char *out, const char *res, size_t len)
{
	size_t		n = clip_utf8(res, len, SHOWN_RESOURCE_MAX);
	size_t		i;
	char	   *p = out;

	*p++ = '"';
	for (i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) res[i];

		*p++ = (c < 0x20 || c == 0x7f) ? '?' : (char) c;
	}
	if (n < len)
	{
		memcpy(p, "...", 3);
		p += 3;
	}
	*p++ = '"';
	*p = '\0';
	return out;
}

#define SHOWN_BUF (SHOWN_RESOURCE_MAX + 8)

char *
fence_msg_stale(char *buf, const char *res, size_t len, int64_t token)
{
	char		shown[SHOWN_BUF];

	snprintf(buf, FENCE_MSG_MAX, "stale fencing token %" PRId64 " for resource %s",
			 token, shown_resource(shown, res, len));
	return buf;
}

char *
fence_detail_stale(char *buf, const char *res, size_t len, int64_t highest)
{
	char		shown[SHOWN_BUF];

	snprintf(buf, FENCE_MSG_MAX,
			 "The highest token accepted for resource %s is %" PRId64 ".",
			 shown_resource(shown, res, len), highest);
	return buf;
}

const char *
fence_hint_stale(void)
{
	return "This holder lost the lock: acquire it again for a new token; "
		"retrying with the same token fails again.";
}

char *
fence_msg_missing(char *buf, const char *res, size_t len)
{
	char		shown[SHOWN_BUF];

	snprintf(buf, FENCE_MSG_MAX, "fencing token required for resource %s",
			 shown_resource(shown, res, len));
	return buf;
}

char *
fence_detail_missing(char *buf, FenceMissing why, const char *res, size_t len,
					 const char *column)
{
	char		shown[SHOWN_BUF];

	if (why == FENCE_MISSING_NULL_TOKEN)
	{
		if (column)
			snprintf(buf, FENCE_MSG_MAX, "The token column \"%.*s\" of the row is NULL.",
					 (int) clip_utf8(column, strlen(column), 100), column);
		else
			snprintf(buf, FENCE_MSG_MAX, "The token column of the row is NULL.");
	}
	else
		snprintf(buf, FENCE_MSG_MAX,
				 "This transaction has not accepted a fencing token for resource %s.",
				 shown_resource(shown, res, len));
	return buf;
}

const char *
fence_hint_missing(FenceMissing why)
{
	if (why == FENCE_MISSING_NULL_TOKEN)
		return "Write the token the lock service granted into the token column.";
	return "Call fence_check(resource, token) earlier in the same transaction, "
		"or set the table's token column in this statement.";
}

/*
 * SQLite's one line: the primary message, then what was observed and the
 * remedy in a clause (PostgreSQL's DETAIL and HINT, shortened): under 200
 * bytes with a 40-byte resource and 19-digit tokens.
 */
char *
fence_line_stale(char *buf, const char *res, size_t len, int64_t token,
				 int64_t highest)
{
	char		shown[SHOWN_BUF];

	snprintf(buf, FENCE_MSG_MAX,
			 "stale fencing token %" PRId64 " for resource %s: the highest accepted is %"
			 PRId64 "; acquire the lock again for a new token",
			 token, shown_resource(shown, res, len), highest);
	return buf;
}

char *
fence_line_missing(char *buf, FenceMissing why, const char *res, size_t len,
				   const char *column)
{
	char		shown[SHOWN_BUF];

	if (why == FENCE_MISSING_NULL_TOKEN && column)
		snprintf(buf, FENCE_MSG_MAX,
				 "fencing token required for resource %s: the token column \"%.*s\" is NULL; "
				 "write the granted token into it", shown_resource(shown, res, len),
				 (int) clip_utf8(column, strlen(column), 100), column);
	else if (why == FENCE_MISSING_NULL_TOKEN)
		snprintf(buf, FENCE_MSG_MAX,
				 "fencing token required for resource %s: the token column is NULL; "
				 "write the granted token into it", shown_resource(shown, res, len));
	else
		snprintf(buf, FENCE_MSG_MAX,
				 "fencing token required for resource %s: no token accepted in this transaction; "
				 "call fence_check first or set the token column", shown_resource(shown, res, len));
	return buf;
}

char *
fence_msg_invalid(char *buf, const char *what, FenceProblem problem,
				  size_t len, int64_t token)
{
	switch (problem)
	{
		case FENCE_NULL:
			snprintf(buf, FENCE_MSG_MAX, "invalid fencing %s: NULL", what);
			break;
		case FENCE_EMPTY:
			snprintf(buf, FENCE_MSG_MAX, "invalid fencing %s: empty string", what);
			break;
		case FENCE_TOO_LONG:
			snprintf(buf, FENCE_MSG_MAX,
					 "invalid fencing %s: %zu bytes, at most %d allowed",
					 what, len, FENCE_RESOURCE_MAX);
			break;
		case FENCE_NOT_TEXT:
			snprintf(buf, FENCE_MSG_MAX, "invalid fencing %s: not TEXT", what);
			break;
		case FENCE_NEGATIVE:
			snprintf(buf, FENCE_MSG_MAX,
					 "invalid fencing %s: %" PRId64 " is negative", what, token);
			break;
		case FENCE_NOT_INTEGER:
			snprintf(buf, FENCE_MSG_MAX,
					 "invalid fencing %s: not an integer (text, blobs and inexact REALs are never coerced)",
					 what);
			break;
		case FENCE_NOT_KEY:
			snprintf(buf, FENCE_MSG_MAX,
					 "invalid fencing %s: a REAL or BLOB, whose text differs between SQLite "
					 "versions; store keys as INTEGER or TEXT", what);
			break;
		case FENCE_VALID:
		default:
			snprintf(buf, FENCE_MSG_MAX, "invalid fencing %s", what);
			break;
	}
	return buf;
}

/* ---------------------------------------------------------------------
 * Leases
 * ------------------------------------------------------------------ */

FenceProblem
fence_check_holder(const char *holder, size_t len)
{
	if (holder == NULL)
		return FENCE_NULL;
	if (len == 0)
		return FENCE_EMPTY;
	if (len > FENCE_HOLDER_MAX)
		return FENCE_TOO_LONG;
	return FENCE_VALID;
}

FenceProblem
fence_check_ttl(int64_t ttl_ms)
{
	return ttl_ms < 1 || ttl_ms > FENCE_TTL_MAX ? FENCE_OUT_OF_RANGE : FENCE_VALID;
}

static int
same_holder(const FenceLease *row, const char *holder, size_t holder_len)
{
	return row->holder_len == holder_len &&
		memcmp(row->holder, holder, holder_len) == 0;
}

FenceGrant
fence_lease_grant(const FenceLease *row, int has_highest, int64_t highest,
				  const char *holder, size_t holder_len, int64_t now_ms,
				  int64_t *token)
{
	int64_t		top = 0;

	*token = 0;
	if (row != NULL && fence_lease_live(row, now_ms))
	{
		if (!same_holder(row, holder, holder_len))
			return FENCE_GRANT_BUSY;
		*token = row->token;
		return FENCE_GRANT_EXTEND;
	}

	/*
	 * Above every token ever granted (the row keeps the last one: rows are
	 * never deleted) and every token ever accepted (fence_tokens).
	 */
	if (row != NULL)
		top = row->token;
	if (has_highest && highest > top)
		top = highest;
	if (top == INT64_MAX)
		return FENCE_GRANT_EXHAUSTED;
	*token = top + 1;
	return FENCE_GRANT_NEW;
}

int
fence_lease_owned(const FenceLease *row, const char *holder, size_t holder_len,
				  int64_t token, int64_t now_ms)
{
	return row != NULL && fence_lease_live(row, now_ms) && row->token == token &&
		same_holder(row, holder, holder_len);
}

char *
fence_msg_invalid_holder(char *buf, FenceProblem problem, size_t len)
{
	if (problem == FENCE_TOO_LONG)
		snprintf(buf, FENCE_MSG_MAX,
				 "invalid fencing lease holder: %zu bytes, at most %d allowed",
				 len, FENCE_HOLDER_MAX);
	else
		fence_msg_invalid(buf, "lease holder", problem, len, 0);
	return buf;
}

char *
fence_msg_invalid_ttl(char *buf, FenceProblem problem, int64_t ttl_ms)
{
	if (problem == FENCE_OUT_OF_RANGE)
		snprintf(buf, FENCE_MSG_MAX,
				 "invalid fencing lease ttl: %" PRId64 " ms, it must be from 1 to %" PRId64
				 " ms (about 24.8 days)", ttl_ms, FENCE_TTL_MAX);
	else
		fence_msg_invalid(buf, "lease ttl", problem, 0, ttl_ms);
	return buf;
}

char *
fence_msg_exhausted(char *buf, const char *res, size_t len)
{
	char		shown[SHOWN_BUF];

	snprintf(buf, FENCE_MSG_MAX,
			 "invalid fencing token: every token of resource %s is used",
			 shown_resource(shown, res, len));
	return buf;
}
