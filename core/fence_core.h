/*
 * fence_core.h
 *
 * The engine-neutral rules of fence: what a valid resource and token are,
 * when a token is accepted, a row's resource (fence_key_resource) and what
 * a write of a protected table checks (fence_row_rule), the resource hash
 * and counts, the lease rules, and the wording of every message. Both the SQLite
 * extension (sqlite_ext/) and the PostgreSQL extension (pg_ext/) compile
 * core/fence_core.c, so the two engines judge and speak alike. Nothing here
 * knows about either engine: plain C, testable on its own under ASan.
 */
#ifndef FENCE_CORE_H
#define FENCE_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A resource is non-empty text of at most this many bytes. */
#define FENCE_RESOURCE_MAX 1024

/*
 * Room for any message the core formats, whole: a resource is shown at most
 * 200 bytes long, and the longest form (SQLite's one line, which names the
 * resource twice, both tokens and the hint) stays under 700 bytes.
 */
#define FENCE_MSG_MAX 1024

/* The outcome of presenting a token against a resource's highest. */
typedef enum FenceVerdict
{
	FENCE_ACCEPT_FIRST,			/* no highest yet: the token becomes it */
	FENCE_ACCEPT_EQUAL,			/* token == highest: nothing to write */
	FENCE_ACCEPT_ADVANCE,		/* token > highest: the highest rises */
	FENCE_REJECT_STALE			/* token < highest */
} FenceVerdict;

/* Why an input is invalid; FENCE_VALID when it is not. */
typedef enum FenceProblem
{
	FENCE_VALID = 0,
	FENCE_NULL,					/* SQL NULL */
	FENCE_EMPTY,				/* resource of zero bytes */
	FENCE_TOO_LONG,				/* resource over FENCE_RESOURCE_MAX bytes */
	FENCE_NOT_TEXT,				/* resource of another type (SQLite) */
	FENCE_NEGATIVE,				/* token below zero */
	FENCE_NOT_INTEGER,			/* token of another type (SQLite) */
	FENCE_NOT_KEY,				/* per-row key neither INTEGER nor TEXT (SQLite) */
	FENCE_OUT_OF_RANGE			/* lease ttl outside 1..FENCE_TTL_MAX */
} FenceProblem;

static inline int
fence_verdict_accepts(FenceVerdict v)
{
	return v != FENCE_REJECT_STALE;
}

/* The accept rule: accept when there is no highest or token >= highest. */
FenceVerdict fence_decide(int has_highest, int64_t highest, int64_t token);

/*
 * The hash of a resource's bytes (FNV-1a, 32 bits) that the tables keyed by
 * resource use: the held log (fence_held.c), SQLite's hints and counts.
 */
static inline uint32_t
fence_hash(const char *z, size_t n)
{
	uint32_t	h = 2166136261u;
	size_t		i;

	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char) z[i]) * 16777619u;
	return h;
}

/*
 * What fence_stats shows of one resource in either engine: accepts and
 * stale rejections since the counts began, and the last rejection's token
 * and time (in the engine's own clock unit: ms since the Unix epoch in
 * SQLite, a TimestampTz in PostgreSQL), valid once has_rejection.
 */
typedef struct FenceCounts
{
	int64_t		accepted;
	int64_t		rejected;
	int64_t		last_token;
	int64_t		last_at;
	int			has_rejection;
} FenceCounts;

static inline void
fence_counts_reject(FenceCounts *c, int64_t token, int64_t at)
{
	c->rejected++;
	c->last_token = token;
	c->last_at = at;
	c->has_rejection = 1;
}

/* Add from's counts to to's; from's last rejection, if any, is the later. */
static inline void
fence_counts_add(FenceCounts *to, const FenceCounts *from)
{
	to->accepted += from->accepted;
	to->rejected += from->rejected;
	if (from->has_rejection)
	{
		to->last_token = from->last_token;
		to->last_at = from->last_at;
		to->has_rejection = 1;
	}
}

/* Validation of already-typed values (types are the engine's business). */
FenceProblem fence_check_resource(const char *resource, size_t len);
FenceProblem fence_check_token(int64_t token);

/* ---------------------------------------------------------------------
 * Protected tables (SPEC.md "Protected tables", "Precise points"): the
 * resource of a row, and which of a write's row images the guard checks
 * and how. Each engine reads the rows its own way and asks these.
 * ------------------------------------------------------------------ */

/*
 * A per-row resource: the prefix followed by the key as text, the engine's
 * own way (CAST(key AS TEXT) in SQLite, key::text in PostgreSQL). *len is
 * the sum of the lengths, also when it is invalid (for the message). A valid
 * one is written NUL-terminated into buf, which has room for
 * FENCE_RESOURCE_MAX + 1 bytes, or *len + 1 if that is less; an invalid one
 * writes nothing. A NULL key names no resource: the caller refuses it first
 * ("key", FENCE_NULL). Inline: a guard composes one for every row.
 */
static inline FenceProblem
fence_key_resource(char *buf, const char *prefix, size_t prefix_len,
				   const char *key, size_t key_len, size_t *len)
{
	FenceProblem problem;

	*len = prefix_len + key_len;
	problem = fence_check_resource(prefix, *len);
	if (problem == FENCE_VALID)
	{
		memcpy(buf, prefix, prefix_len);
		memcpy(buf + prefix_len, key, key_len);
		buf[*len] = '\0';
	}
	return problem;
}

/* A row write, as a BEFORE ROW guard sees it. */
typedef enum FenceRowOp
{
	FENCE_ROW_INSERT,			/* a new row image only */
	FENCE_ROW_UPDATE,			/* the old and the new row image */
	FENCE_ROW_DELETE			/* the old row image only */
} FenceRowOp;

/* What the guard does with one row image's resource. */
typedef enum FenceRowCheck
{
	FENCE_ROW_SKIP = 0,			/* nothing: the write has no such image */
	FENCE_ROW_PRESENT,			/* present the new row's token under it */
	FENCE_ROW_FENCED			/* the transaction must hold a fence on it */
} FenceRowCheck;

typedef struct FenceRowRule
{
	FenceRowCheck old_row;
	FenceRowCheck new_row;
} FenceRowRule;

/*
 * The row rule. has_token: the table has a token column; token_set: the
 * UPDATE's statement sets it ("SET tok = tok" counts). The token presented
 * is always the new row's (NULL is "fencing token required"), so
 *   INSERT                 presents the new row's token under its resource
 *                          (without a token column: needs a fence on it)
 *   UPDATE setting token   presents it under the old and the new resource
 *   any other UPDATE       needs a fence on the old and the new resource
 *   DELETE                 needs a fence on the old row's resource
 * An UPDATE's new row under the old row's resource is the same check: an
 * engine does it once, or twice at no harm (an accepted token is a fence
 * held, and a second accept of it is equal). A presenting guard may also
 * run the FENCED checks of an UPDATE that does not set the token after it
 * (SQLite's update trigger, the SQL edition's fence_guard_row): they hold.
 */
static inline FenceRowRule
fence_row_rule(FenceRowOp op, int has_token, int token_set)
{
	/* [op][does the write present a token?] = {old row, new row} */
	static const FenceRowRule rules[3][2] = {
		[FENCE_ROW_INSERT] = {{FENCE_ROW_SKIP, FENCE_ROW_FENCED},
							  {FENCE_ROW_SKIP, FENCE_ROW_PRESENT}},
		[FENCE_ROW_UPDATE] = {{FENCE_ROW_FENCED, FENCE_ROW_FENCED},
							  {FENCE_ROW_PRESENT, FENCE_ROW_PRESENT}},
		[FENCE_ROW_DELETE] = {{FENCE_ROW_FENCED, FENCE_ROW_SKIP},
							  {FENCE_ROW_FENCED, FENCE_ROW_SKIP}},
	};

	return rules[op][has_token && (token_set || op == FENCE_ROW_INSERT)];
}

/*
 * Messages. Each writes a NUL-terminated string of at most FENCE_MSG_MAX
 * bytes into buf and returns buf. A resource is passed with its length; it
 * is shown between double quotes, control bytes as '?', and shortened with
 * "..." past 200 bytes so that one message stays readable.
 *
 * PostgreSQL uses the three parts separately (errmsg, errdetail, errhint);
 * SQLite has one message and uses the *_line forms, which join them.
 */

/* stale: errmsg, errdetail, errhint */
char	   *fence_msg_stale(char *buf, const char *res, size_t len, int64_t token);
char	   *fence_detail_stale(char *buf, const char *res, size_t len, int64_t highest);
const char *fence_hint_stale(void);
char	   *fence_line_stale(char *buf, const char *res, size_t len,
							 int64_t token, int64_t highest);

/* missing token: the row's token is NULL, or the transaction holds no fence */
typedef enum FenceMissing
{
	FENCE_MISSING_NULL_TOKEN,	/* a row's token column is NULL */
	FENCE_MISSING_NOT_FENCED	/* UPDATE/DELETE/token-less write, no fence */
} FenceMissing;

char	   *fence_msg_missing(char *buf, const char *res, size_t len);
char	   *fence_detail_missing(char *buf, FenceMissing why, const char *res,
								 size_t len, const char *column);
const char *fence_hint_missing(FenceMissing why);
char	   *fence_line_missing(char *buf, FenceMissing why, const char *res,
							   size_t len, const char *column);

/*
 * invalid input: what is the part that is wrong ("resource", "token",
 * "key"), problem says how; len is the resource length for FENCE_TOO_LONG,
 * token the value for FENCE_NEGATIVE.
 */
char	   *fence_msg_invalid(char *buf, const char *what, FenceProblem problem,
							  size_t len, int64_t token);

/* ---------------------------------------------------------------------
 * Leases (fence_acquire, fence_renew, fence_release): the lock service
 * inside the store. The rules below are the whole decision; each engine
 * reads the lease row, the resource's highest accepted token and its own
 * clock, asks these, and writes what they say.
 * ------------------------------------------------------------------ */

/* A lease holder is non-empty text of at most this many bytes. */
#define FENCE_HOLDER_MAX 256
/* A lease lasts 1 .. FENCE_TTL_MAX milliseconds (about 24.8 days). */
#define FENCE_TTL_MAX INT64_C(2147483647)

/* A lease row: its holder, token, and when it ends (ms since the epoch). */
typedef struct FenceLease
{
	const char *holder;
	size_t		holder_len;
	int64_t		token;
	int64_t		expires_at;
} FenceLease;

/* What fence_acquire does. */
typedef enum FenceGrant
{
	FENCE_GRANT_NEW,			/* free or expired: a new, greater token */
	FENCE_GRANT_EXTEND,			/* the same holder's live lease, extended */
	FENCE_GRANT_BUSY,			/* another holder's live lease: NULL */
	FENCE_GRANT_EXHAUSTED		/* the new token would pass 2^63-1 */
} FenceGrant;

FenceProblem fence_check_holder(const char *holder, size_t len);
FenceProblem fence_check_ttl(int64_t ttl_ms);

/* Live while now < expires_at. */
static inline int
fence_lease_live(const FenceLease *row, int64_t now_ms)
{
	return now_ms < row->expires_at;
}

/*
 * fence_acquire's rule. row is NULL when the resource was never leased;
 * has_highest/highest are its highest accepted token (fence_tokens). On
 * FENCE_GRANT_NEW *token is max(row token, highest) + 1; on EXTEND it is
 * the row's token. The caller writes expires_at = now + ttl for both.
 */
FenceGrant	fence_lease_grant(const FenceLease *row, int has_highest, int64_t highest,
							  const char *holder, size_t holder_len, int64_t now_ms,
							  int64_t *token);

/*
 * fence_renew's and fence_release's condition: a live lease of this holder
 * at this token.
 */
int			fence_lease_owned(const FenceLease *row, const char *holder,
							  size_t holder_len, int64_t token, int64_t now_ms);

/*
 * "invalid fencing lease holder: ..." and "invalid fencing lease ttl: ...";
 * len is the holder's length (FENCE_TOO_LONG), ttl the value given
 * (FENCE_OUT_OF_RANGE).
 */
char	   *fence_msg_invalid_holder(char *buf, FenceProblem problem, size_t len);
char	   *fence_msg_invalid_ttl(char *buf, FenceProblem problem, int64_t ttl_ms);

/* "invalid fencing token: every token of resource "r" is used" */
char	   *fence_msg_exhausted(char *buf, const char *res, size_t len);

#endif							/* FENCE_CORE_H */
