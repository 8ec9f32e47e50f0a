/*
 * core_test.c
 *
 * Unit tests of core/fence_core.c, the rules and messages both engines
 * share, built with AddressSanitizer and UBSan by `make check`. Prints one
 * "ok - " or "not ok - " line per case.
 */
#include "../core/fence_core.h"
#include "../core/fence_held.h"

#include <stdlib.h>

#include <stdio.h>
#include <string.h>

static int	failures;

static void
expect(int cond, const char *name)
{
	printf("%s - core %s\n", cond ? "ok" : "not ok", name);
	if (!cond)
		failures++;
}

static void *
testRealloc(void *p, size_t n)
{
	return realloc(p, n);
}

static const FenceAllocator testAllocator = {malloc, testRealloc, free};

/* Is s valid UTF-8 (no truncated or stray continuation bytes)? */
static int
validUtf8(const char *s)
{
	const unsigned char *p = (const unsigned char *) s;

	while (*p)
	{
		int			n = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2 :
			(*p & 0xF8) == 0xF0 ? 3 : -1;

		if (n < 0)
			return 0;
		for (p++; n > 0; n--, p++)
			if ((*p & 0xC0) != 0x80)
				return 0;
	}
	return 1;
}

/*
 * A message that shortens a long resource never cuts a character in two:
 * every offset of a 2-, 3- and 4-byte character around the cut.
 */
static void
testUtf8Cut(void)
{
	static const char *const chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x94\x92"};
	char		res[400];
	char		buf[FENCE_MSG_MAX];
	char		column[160];
	int			ok = 1;

	for (int c = 0; c < 3; c++)
		for (int pad = 190; pad <= 202; pad++)
		{
			size_t		len;

			memset(res, 'a', (size_t) pad);
			len = (size_t) pad;
			for (int k = 0; k < 20; k++)
			{
				memcpy(res + len, chars[c], strlen(chars[c]));
				len += strlen(chars[c]);
			}
			ok &= validUtf8(fence_msg_stale(buf, res, len, 7));
			ok &= validUtf8(fence_detail_stale(buf, res, len, 9));
			ok &= validUtf8(fence_msg_missing(buf, res, len));
			ok &= validUtf8(fence_line_stale(buf, res, len, 7, 9));
			memset(column, 'c', 99);
			memcpy(column + 99, chars[c], strlen(chars[c]));
			column[99 + strlen(chars[c])] = '\0';
			ok &= validUtf8(fence_detail_missing(buf, FENCE_MISSING_NULL_TOKEN, res, len, column));
		}
	expect(ok, "messages cut a long resource or column on a character boundary");
}

/* The held-fence log: shadowing, undo by truncation, growth, tags. */
static void
testHeld(void)
{
	FenceHeld	held;
	char		name[32];
	int			i,
				ok = 1;

	fence_held_init(&held, &testAllocator);
	expect(fence_held_get(&held, "r", 1) == -1, "held: nothing held at first");
	fence_held_set(&held, "r", 1, 5, 1);
	fence_held_set(&held, "q", 1, 1, 2);
	fence_held_set(&held, "r", 1, 7, 3);
	expect(fence_held_get(&held, "r", 1) == 7 && fence_held_get(&held, "q", 1) == 1,
		   "held: the newest entry of a resource wins");
	expect(!fence_held_is_current(&held, 0) && fence_held_is_current(&held, 2),
		   "held: a shadowed entry is not current");
	expect(fence_held_first_tagged(&held, 2) == 1, "held: first entry of a subtransaction");
	fence_held_truncate(&held, 1);
	expect(fence_held_get(&held, "r", 1) == 5 && fence_held_get(&held, "q", 1) == -1,
		   "held: truncation undoes newest first");
	fence_held_set(&held, "r", 1, -1, 4);
	expect(fence_held_get(&held, "r", 1) == -1, "held: a reset entry is not held");
	for (i = 0; i < 5000; i++)
	{
		snprintf(name, sizeof(name), "res-%d", i);
		fence_held_set(&held, name, strlen(name), i, 5);
	}
	for (i = 0; i < 5000; i++)
	{
		snprintf(name, sizeof(name), "res-%d", i);
		ok &= fence_held_get(&held, name, strlen(name)) == i;
	}
	expect(ok, "held: 5000 resources survive rehashing");
	fence_held_truncate(&held, 2);
	expect(fence_held_get(&held, "res-17", 6) == -1 && fence_held_get(&held, "r", 1) == -1,
		   "held: truncation after rehashing");
	fence_held_clear(&held);
	expect(held.n_entries == 0 && held.n_buckets == 0, "held: clear gives large tables back");
	fence_held_free(&held);

	{
		FenceHeldEntry first[4];
		int			firstBuckets[4];

		fence_held_init_buffers(&held, &testAllocator, first, 4, firstBuckets, 4);
		fence_held_set(&held, "r", 1, 5, 1);
		expect(held.entries == first && fence_held_get(&held, "r", 1) == 5,
			   "held: the first entries go into the caller's arrays");
		for (i = 0; i < 100; i++)
		{
			snprintf(name, sizeof(name), "res-%d", i);
			fence_held_set(&held, name, strlen(name), i, 2);
		}
		ok = held.entries != first && held.buckets != firstBuckets &&
			fence_held_get(&held, "r", 1) == 5;
		for (i = 0; i < 100; i++)
		{
			snprintf(name, sizeof(name), "res-%d", i);
			ok &= fence_held_get(&held, name, strlen(name)) == i;
		}
		expect(ok, "held: growing out of the caller's arrays keeps every entry");
		expect(fence_held_restart(&held) == -1, "held: a log grown out of its first arrays is not restarted");
		fence_held_free(&held);
	}

	{
		FenceHeldEntry first[4];
		int			firstBuckets[4];
		char		names[16];
		int			b;

		fence_held_init_buffers(&held, &testAllocator, first, 4, firstBuckets, 4);
		fence_held_use_names(&held, names, sizeof(names));
		fence_held_set(&held, "r", 1, 5, 1);
		fence_held_set(&held, "qq", 2, 6, 1);
		expect(fence_held_restart(&held) == 0 && held.n_entries == 0 && held.names_used == 0 &&
			   fence_held_get(&held, "r", 1) == -1 && fence_held_get(&held, "qq", 2) == -1,
			   "held: a restarted log holds nothing");
		ok = 1;
		for (b = 0; b < 4; b++)
			ok &= firstBuckets[b] == -1;
		expect(ok, "held: restarting resets every bucket the old entries used");
		fence_held_set(&held, "qq", 2, 7, 1);
		expect(fence_held_get(&held, "qq", 2) == 7 && held.entries == first &&
			   held.entries[0].resource == names, "held: a restarted log reuses the first arrays and names");
	}

	{
		/* names: 8 bytes hold "r" and "abc" with their NULs, then no more */
		char		names[8];

		fence_held_init(&held, &testAllocator);
		fence_held_use_names(&held, names, sizeof(names));
		fence_held_set(&held, "r", 1, 5, 1);
		fence_held_set(&held, "abc", 3, 6, 1);
		fence_held_set(&held, "defg", 4, 7, 2);
		expect(held.entries[0].resource == names && held.entries[1].resource == names + 2 &&
			   held.entries[2].resource != names + 6 && held.names_used == 6 &&
			   strcmp(held.entries[2].resource, "defg") == 0,
			   "held: names go into the caller's buffer while they fit, then to mem");
		expect(fence_held_get(&held, "abc", 3) == 6 && fence_held_get(&held, "defg", 4) == 7,
			   "held: buffered and allocated names are both found");
		/* ASan reports a free() of a buffered name */
		fence_held_truncate(&held, 1);
		expect(held.names_used == 2 && fence_held_get(&held, "abc", 3) == -1,
			   "held: truncation gives the buffer's space back");
		fence_held_set(&held, "xy", 2, 8, 3);
		expect(held.entries[1].resource == names + 2 && fence_held_get(&held, "xy", 2) == 8 &&
			   fence_held_get(&held, "r", 1) == 5, "held: the space given back is reused");
		fence_held_replace(&held, "xy", 2, 9, 3);
		expect(held.n_entries == 2 && fence_held_get(&held, "xy", 2) == 9,
			   "held: replace in the same tag keeps one entry");
		fence_held_free(&held);
	}
}

/* The lease rules of the semantics, one case each. */
static void
testLease(void)
{
	char		buf[FENCE_MSG_MAX];
	char		big[FENCE_HOLDER_MAX + 1];
	FenceLease	row = {"a", 1, 7, 1000};
	int64_t		t;

	memset(big, 'h', sizeof(big));
	expect(fence_check_holder(NULL, 0) == FENCE_NULL && fence_check_holder("", 0) == FENCE_EMPTY &&
		   fence_check_holder(big, 256) == FENCE_VALID &&
		   fence_check_holder(big, 257) == FENCE_TOO_LONG, "lease holder: NULL, empty, 256, 257 bytes");
	expect(fence_check_ttl(0) == FENCE_OUT_OF_RANGE && fence_check_ttl(-1) == FENCE_OUT_OF_RANGE &&
		   fence_check_ttl(1) == FENCE_VALID && fence_check_ttl(2147483647) == FENCE_VALID &&
		   fence_check_ttl(2147483648) == FENCE_OUT_OF_RANGE, "lease ttl: 1 .. 2^31-1 ms");

	expect(fence_lease_grant(NULL, 0, 0, "a", 1, 0, &t) == FENCE_GRANT_NEW && t == 1,
		   "lease: a resource never seen gets token 1");
	expect(fence_lease_grant(NULL, 1, 41, "a", 1, 0, &t) == FENCE_GRANT_NEW && t == 42,
		   "lease: the first grant exceeds the highest accepted");
	expect(fence_lease_grant(&row, 1, 3, "a", 1, 999, &t) == FENCE_GRANT_EXTEND && t == 7,
		   "lease: the same holder's live lease comes back with its token");
	expect(fence_lease_grant(&row, 1, 3, "b", 1, 999, &t) == FENCE_GRANT_BUSY,
		   "lease: another holder's live lease is busy");
	expect(fence_lease_grant(&row, 1, 3, "b", 1, 1000, &t) == FENCE_GRANT_NEW && t == 8,
		   "lease: expired at now == expires_at, the next token is granted");
	expect(fence_lease_grant(&row, 1, 3, "a", 1, 1000, &t) == FENCE_GRANT_NEW && t == 8,
		   "lease: the same holder after expiry gets a greater token");
	expect(fence_lease_grant(&row, 1, 20, "b", 1, 5000, &t) == FENCE_GRANT_NEW && t == 21,
		   "lease: a grant exceeds an accepted token above the last grant");
	expect(fence_lease_grant(NULL, 1, INT64_MAX, "a", 1, 0, &t) == FENCE_GRANT_EXHAUSTED,
		   "lease: no token past 2^63-1");
	expect(fence_lease_owned(&row, "a", 1, 7, 999) && !fence_lease_owned(&row, "a", 1, 7, 1000) &&
		   !fence_lease_owned(&row, "b", 1, 7, 999) && !fence_lease_owned(&row, "a", 1, 6, 999) &&
		   !fence_lease_owned(NULL, "a", 1, 7, 0), "lease: owned only while live, same holder and token");

	fence_msg_invalid_holder(buf, FENCE_NULL, 0);
	expect(strcmp(buf, "invalid fencing lease holder: NULL") == 0, "lease holder NULL message");
	fence_msg_invalid_holder(buf, FENCE_TOO_LONG, 257);
	expect(strcmp(buf, "invalid fencing lease holder: 257 bytes, at most 256 allowed") == 0,
		   "lease holder too long message");
	fence_msg_invalid_ttl(buf, FENCE_NULL, 0);
	expect(strcmp(buf, "invalid fencing lease ttl: NULL") == 0, "lease ttl NULL message");
	fence_msg_invalid_ttl(buf, FENCE_OUT_OF_RANGE, 0);
	expect(strncmp(buf, "invalid fencing lease ttl: 0 ms", 31) == 0, "lease ttl range message");
	fence_msg_exhausted(buf, "r", 1);
	expect(strcmp(buf, "invalid fencing token: every token of resource \"r\" is used") == 0,
		   "token space exhausted message");
}

/* fence_hash (FNV-1a) and a resource's counts, which both engines use */
static void
testCounts(void)
{
	FenceCounts a = {0};
	FenceCounts b = {0};

	expect(fence_hash("", 0) == 2166136261u && fence_hash("a", 1) == 0xe40c292cu &&
		   fence_hash("foobar", 6) == 0xbf9cf968u, "fence_hash is FNV-1a");
	a.accepted = 3;
	fence_counts_reject(&b, 7, 100);
	fence_counts_reject(&b, 5, 200);
	expect(b.rejected == 2 && b.last_token == 5 && b.last_at == 200 && b.has_rejection,
		   "a rejection counts and becomes the last");
	fence_counts_add(&a, &b);
	expect(a.accepted == 3 && a.rejected == 2 && a.last_token == 5 && a.has_rejection,
		   "adding counts keeps the later last rejection");
	b = (FenceCounts) {1, 0, 0, 0, 0};
	fence_counts_add(&a, &b);
	expect(a.accepted == 4 && a.last_token == 5 && a.last_at == 200,
		   "counts without a rejection leave the last one");
}

/* A row's resource (fence_key_resource) and the row rule, which both engines use */
static void
testRows(void)
{
	char		buf[FENCE_RESOURCE_MAX + 1];
	char		big[FENCE_RESOURCE_MAX + 1];
	size_t		len = 0;
	FenceRowRule r;

	memset(big, 'k', sizeof(big));
	memset(buf, '#', sizeof(buf));
	expect(fence_key_resource(buf, "order-", 6, "42", 2, &len) == FENCE_VALID && len == 8 &&
		   strcmp(buf, "order-42") == 0, "key resource is prefix then key");
	expect(fence_key_resource(buf, "", 0, "x", 1, &len) == FENCE_VALID && strcmp(buf, "x") == 0,
		   "key resource with an empty prefix");
	memset(buf, '#', sizeof(buf));
	expect(fence_key_resource(buf, "", 0, "", 0, &len) == FENCE_EMPTY && len == 0 &&
		   buf[0] == '#', "empty key resource is refused, nothing written");
	expect(fence_key_resource(buf, "p", 1, big, FENCE_RESOURCE_MAX - 1, &len) == FENCE_VALID &&
		   len == FENCE_RESOURCE_MAX && buf[FENCE_RESOURCE_MAX] == '\0',
		   "key resource of exactly the longest length fits the buffer");
	memset(buf, '#', sizeof(buf));
	expect(fence_key_resource(buf, "pp", 2, big, FENCE_RESOURCE_MAX - 1, &len) == FENCE_TOO_LONG &&
		   len == FENCE_RESOURCE_MAX + 1 && buf[0] == '#',
		   "key resource one byte too long is refused with its length");

	r = fence_row_rule(FENCE_ROW_INSERT, 1, 0);
	expect(r.old_row == FENCE_ROW_SKIP && r.new_row == FENCE_ROW_PRESENT,
		   "row rule: INSERT presents the new row's token");
	r = fence_row_rule(FENCE_ROW_INSERT, 0, 0);
	expect(r.old_row == FENCE_ROW_SKIP && r.new_row == FENCE_ROW_FENCED,
		   "row rule: INSERT without a token column needs a fence");
	r = fence_row_rule(FENCE_ROW_UPDATE, 1, 1);
	expect(r.old_row == FENCE_ROW_PRESENT && r.new_row == FENCE_ROW_PRESENT,
		   "row rule: UPDATE setting the token presents it under old and new");
	r = fence_row_rule(FENCE_ROW_UPDATE, 1, 0);
	expect(r.old_row == FENCE_ROW_FENCED && r.new_row == FENCE_ROW_FENCED,
		   "row rule: UPDATE not setting the token needs fences on old and new");
	r = fence_row_rule(FENCE_ROW_UPDATE, 0, 1);
	expect(r.old_row == FENCE_ROW_FENCED && r.new_row == FENCE_ROW_FENCED,
		   "row rule: UPDATE without a token column needs fences");
	r = fence_row_rule(FENCE_ROW_DELETE, 1, 0);
	expect(r.old_row == FENCE_ROW_FENCED && r.new_row == FENCE_ROW_SKIP,
		   "row rule: DELETE needs a fence on the old row");
}

int
main(void)
{
	char		buf[FENCE_MSG_MAX];
	char		big[4096];

	expect(fence_decide(0, 0, 0) == FENCE_ACCEPT_FIRST, "first token is accepted");
	expect(fence_decide(1, 5, 5) == FENCE_ACCEPT_EQUAL, "equal token is accepted");
	expect(fence_decide(1, 5, 6) == FENCE_ACCEPT_ADVANCE, "greater token advances");
	expect(fence_decide(1, 5, 4) == FENCE_REJECT_STALE, "lower token is stale");
	expect(fence_decide(1, INT64_MAX, INT64_MAX - 1) == FENCE_REJECT_STALE,
		   "stale just below the largest token");
	expect(!fence_verdict_accepts(FENCE_REJECT_STALE) &&
		   fence_verdict_accepts(FENCE_ACCEPT_EQUAL), "verdict accepts");

	expect(fence_check_resource(NULL, 0) == FENCE_NULL, "NULL resource");
	expect(fence_check_resource("", 0) == FENCE_EMPTY, "empty resource");
	memset(big, 'x', sizeof(big));
	expect(fence_check_resource(big, 1024) == FENCE_VALID, "1024-byte resource is valid");
	expect(fence_check_resource(big, 1025) == FENCE_TOO_LONG, "1025-byte resource is too long");
	expect(fence_check_token(0) == FENCE_VALID && fence_check_token(INT64_MAX) == FENCE_VALID,
		   "tokens 0 and 2^63-1 are valid");
	expect(fence_check_token(-1) == FENCE_NEGATIVE && fence_check_token(INT64_MIN) == FENCE_NEGATIVE,
		   "negative tokens are invalid");

	fence_msg_stale(buf, "widget-42", 9, 3);
	expect(strcmp(buf, "stale fencing token 3 for resource \"widget-42\"") == 0, "stale errmsg");
	fence_detail_stale(buf, "widget-42", 9, 5);
	expect(strstr(buf, "is 5.") != NULL, "stale errdetail holds the highest");
	fence_line_stale(buf, "widget-42", 9, 3, 5);
	expect(strcmp(buf, "stale fencing token 3 for resource \"widget-42\": the highest accepted "
				  "is 5; acquire the lock again for a new token") == 0, "stale one-line form");
	fence_line_missing(buf, FENCE_MISSING_NOT_FENCED, "r", 1, NULL);
	expect(strncmp(buf, "fencing token required for resource \"r\"", 39) == 0, "missing one-line form");
	fence_detail_missing(buf, FENCE_MISSING_NULL_TOKEN, "r", 1, "tok");
	expect(strstr(buf, "\"tok\"") != NULL, "missing detail names the column");

	fence_msg_stale(buf, big, 1024, 1);
	expect(strlen(buf) < FENCE_MSG_MAX && strstr(buf, "...\"") != NULL,
		   "a long resource is shortened");
	fence_msg_stale(buf, "a\nb\0c", 5, 1);
	expect(strstr(buf, "\"a?b?c\"") != NULL, "control bytes are shown as ?");
	fence_line_stale(buf, big, 1024, INT64_MAX - 1, INT64_MAX);
	expect(strlen(buf) < FENCE_MSG_MAX && strstr(buf, "is 9223372036854775807;") &&
		   strstr(buf, "for a new token"), "the longest line is whole, highest and hint included");

	fence_msg_invalid(buf, "token", FENCE_NEGATIVE, 0, -7);
	expect(strcmp(buf, "invalid fencing token: -7 is negative") == 0, "invalid token message");
	fence_msg_invalid(buf, "resource", FENCE_TOO_LONG, 1025, 0);
	expect(strcmp(buf, "invalid fencing resource: 1025 bytes, at most 1024 allowed") == 0,
		   "invalid resource message");
	fence_msg_invalid(buf, "resource", FENCE_NULL, 0, 0);
	expect(strcmp(buf, "invalid fencing resource: NULL") == 0, "NULL resource message");
	testHeld();
	testUtf8Cut();
	testLease();
	testCounts();
	testRows();
	return failures ? 1 : 0;
}
