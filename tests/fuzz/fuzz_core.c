/*
 * fuzz_core.c
 *
 * libFuzzer target for the engine-neutral core (core/fence_core.c and
 * core/fence_held.c), which both extensions trust with raw bytes from SQL.
 * Each input is decoded into a sequence of operations: validating resources
 * and tokens, composing a per-row resource, the accept rule, formatting
 * every message, and driving the held-fence log. Every answer is compared with a reference written here in
 * the plainest possible way, so a wrong answer aborts as surely as a memory
 * error does under ASan and UBSan.
 */
#include "../../core/fence_core.h"
#include "../../core/fence_held.h"
#include "fuzz_input.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) \
	do { \
		fprintf(stderr, "fuzz_core: invariant broken at %s:%d: ", __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
		abort(); \
	} while (0)
#define CHECK(cond, ...) do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)

/* Longest resource the decoder builds: well past FENCE_RESOURCE_MAX. */
#define LONGEST 3100

/* ---------------------------------------------------------------------
 * An allocator that can be told to fail, and counts what is live, so that
 * the log's out-of-memory paths run and a leak is caught per input.
 * ------------------------------------------------------------------ */

static int	failIn;				/* fail the failIn-th next allocation; 0: never */
static int	failed;				/* an allocation failed since last asked */
static long live;

static int
shouldFail(void)
{
	if (failIn > 0 && --failIn == 0)
	{
		failed = 1;
		return 1;
	}
	return 0;
}

static void *
fuzzAlloc(size_t n)
{
	void	   *p;

	if (shouldFail())
		return NULL;
	p = malloc(n);
	if (p)
		live++;
	return p;
}

static void *
fuzzRealloc(void *old, size_t n)
{
	if (shouldFail())
		return NULL;
	return realloc(old, n);
}

static void
fuzzFree(void *p)
{
	if (p)
		live--;
	free(p);
}

static const FenceAllocator fuzzAllocator = {fuzzAlloc, fuzzRealloc, fuzzFree};

/* ---------------------------------------------------------------------
 * Resources: an exact-size heap copy, so that reading one byte past the
 * length the caller passed is an ASan report.
 * ------------------------------------------------------------------ */

typedef struct Bytes
{
	uint8_t    *z;
	size_t		n;
} Bytes;

static Bytes
takeResource(FuzzInput *in)
{
	static uint8_t scratch[LONGEST];
	Bytes		b;
	uint8_t		how = in_u8(in);

	switch (how % 8)
	{
		case 0:					/* the boundaries of FENCE_RESOURCE_MAX */
			b.n = FENCE_RESOURCE_MAX - 1 + (size_t) (in_u8(in) % 3);
			break;
		case 1:					/* and of the 200 bytes a message shows */
			b.n = 199 + (size_t) (in_u8(in) % 3);
			break;
		case 2:
			b.n = in_u16(in) % (LONGEST + 1);
			break;
		default:				/* short: names collide, as real ones do */
			b.n = in_u8(in) % 5;
			break;
	}
	in_fill(in, scratch, b.n);
	b.z = malloc(b.n ? b.n : 1);
	if (b.z == NULL)
		abort();
	memcpy(b.z, scratch, b.n);
	return b;
}

static int64_t
takeToken(FuzzInput *in)
{
	return in_u8(in) & 1 ? (int64_t) in_u64(in) : in_interesting_i64(in);
}

/* ---------------------------------------------------------------------
 * Messages
 * ------------------------------------------------------------------ */

static char msgBuf[FENCE_MSG_MAX];

static char *
freshBuf(void)
{
	/* no NUL anywhere, so a missing terminator is seen */
	memset(msgBuf, 0xA5, sizeof(msgBuf));
	return msgBuf;
}

/* What the SPEC's readers rely on: one terminated line with the fixed words. */
static void
checkMessage(const char *got, const char *prefix, const char *which)
{
	CHECK(got == msgBuf, "%s did not return its buffer", which);
	CHECK(memchr(msgBuf, '\0', FENCE_MSG_MAX) != NULL, "%s: no NUL in %d bytes",
		  which, FENCE_MSG_MAX);
	CHECK(strncmp(msgBuf, prefix, strlen(prefix)) == 0,
		  "%s does not start with \"%s\": %s", which, prefix, msgBuf);
}

/*
 * The resource as messages show it: quoted, control bytes as '?', cut with
 * "..." past 200 bytes. Computed independently of shown_resource().
 */
NOT_FUZZED static void
expectShown(char *out, const Bytes *r)
{
	size_t		n = r->n > 200 ? 200 : r->n;
	size_t		i;
	char	   *p = out;

	/* a cut never splits a UTF-8 character: it backs off continuation bytes */
	while (n < r->n && n > 0 && (r->z[n] & 0xC0) == 0x80)
		n--;

	*p++ = '"';
	for (i = 0; i < n; i++)
		*p++ = (r->z[i] < 0x20 || r->z[i] == 0x7f) ? '?' : (char) r->z[i];
	if (r->n > 200)
	{
		memcpy(p, "...", 3);
		p += 3;
	}
	*p++ = '"';
	*p = '\0';
}

static void
checkContains(const char *which, const char *needle)
{
	CHECK(strstr(msgBuf, needle) != NULL, "%s lacks %s: %s", which, needle, msgBuf);
}

static void
fuzzMessages(FuzzInput *in)
{
	Bytes		r = takeResource(in);

	/* a stale message is only ever written for valid tokens */
	int64_t		token = takeToken(in) & INT64_MAX;
	int64_t		highest = takeToken(in) & INT64_MAX;
	int64_t		negative = takeToken(in) | INT64_MIN;
	char		shown[256];
	char		tokenText[32];
	char		highestText[32];
	char		negativeText[32];
	char		column[160];
	const char *col = NULL;
	FenceMissing why = in_u8(in) & 1 ? FENCE_MISSING_NOT_FENCED : FENCE_MISSING_NULL_TOKEN;

	expectShown(shown, &r);
	snprintf(tokenText, sizeof(tokenText), "%" PRId64, token);
	snprintf(highestText, sizeof(highestText), "%" PRId64, highest);
	snprintf(negativeText, sizeof(negativeText), "%" PRId64, negative);
	if (in_u8(in) & 1)
	{
		/* a column name may be anything the schema allows, up to its limit */
		size_t		n = in_u8(in) % sizeof(column);

		in_fill(in, (uint8_t *) column, n);
		column[n] = '\0';
		col = column;
	}

	switch (in_u8(in) % 7)
	{
		case 0:
			checkMessage(fence_msg_stale(freshBuf(), (char *) r.z, r.n, token),
						 "stale fencing token ", "fence_msg_stale");
			checkContains("fence_msg_stale", shown);
			checkContains("fence_msg_stale", tokenText);
			break;
		case 1:
			checkMessage(fence_detail_stale(freshBuf(), (char *) r.z, r.n, highest),
						 "The highest token accepted for resource ", "fence_detail_stale");
			checkContains("fence_detail_stale", shown);
			checkContains("fence_detail_stale", highestText);
			break;
		case 2:
			/*
			 * SQLite's only message: SPEC.md "Errors" says it holds the
			 * resource, the presented token and the highest.
			 */
			checkMessage(fence_line_stale(freshBuf(), (char *) r.z, r.n, token, highest),
						 "stale fencing token ", "fence_line_stale");
			checkContains("fence_line_stale", shown);
			checkContains("fence_line_stale", tokenText);
			checkContains("fence_line_stale", highestText);
			break;
		case 3:
			checkMessage(fence_msg_missing(freshBuf(), (char *) r.z, r.n),
						 "fencing token required ", "fence_msg_missing");
			checkContains("fence_msg_missing", shown);
			break;
		case 4:
			checkMessage(fence_detail_missing(freshBuf(), why, (char *) r.z, r.n, col),
						 "Th", "fence_detail_missing");
			if (why == FENCE_MISSING_NOT_FENCED)
				checkContains("fence_detail_missing", shown);
			CHECK(fence_hint_missing(why) != NULL, "no hint");
			break;
		case 5:
			checkMessage(fence_line_missing(freshBuf(), why, (char *) r.z, r.n, col),
						 "fencing token required ", "fence_line_missing");
			checkContains("fence_line_missing", shown);
			break;
		case 6:
			{
				static const char *const whats[] = {"resource", "token", "key",
				"resource prefix"};
				static const FenceProblem problems[] = {FENCE_VALID, FENCE_NULL,
					FENCE_EMPTY, FENCE_TOO_LONG, FENCE_NOT_TEXT, FENCE_NEGATIVE,
				FENCE_NOT_INTEGER};
				const char *what = whats[in_u8(in) % 4];
				FenceProblem problem = problems[in_u8(in) % 7];
				size_t		len = in_u8(in) & 1 ? (size_t) in_u64(in) : r.n;
				char		prefix[64];
				char		lenText[32];

				snprintf(prefix, sizeof(prefix), "invalid fencing %s", what);
				checkMessage(fence_msg_invalid(freshBuf(), what, problem, len, negative),
							 prefix, "fence_msg_invalid");
				if (problem == FENCE_TOO_LONG)
				{
					snprintf(lenText, sizeof(lenText), ": %zu bytes", len);
					checkContains("fence_msg_invalid", lenText);
				}
				if (problem == FENCE_NEGATIVE)
					checkContains("fence_msg_invalid", negativeText);
			}
			break;
	}
	free(r.z);
}

/* ---------------------------------------------------------------------
 * Validation and the accept rule
 * ------------------------------------------------------------------ */

static void
fuzzValidation(FuzzInput *in)
{
	switch (in_u8(in) % 4)
	{
		case 0:
			{
				Bytes		r = takeResource(in);
				FenceProblem want = r.n == 0 ? FENCE_EMPTY :
					r.n > FENCE_RESOURCE_MAX ? FENCE_TOO_LONG : FENCE_VALID;

				CHECK(fence_check_resource((char *) r.z, r.n) == want,
					  "fence_check_resource(len %zu) = %d, want %d", r.n,
					  fence_check_resource((char *) r.z, r.n), want);
				CHECK(fence_check_resource(NULL, r.n) == FENCE_NULL,
					  "fence_check_resource(NULL, %zu) is not FENCE_NULL", r.n);
				free(r.z);
			}
			break;
		case 1:
			{
				int64_t		t = takeToken(in);

				CHECK(fence_check_token(t) == (t < 0 ? FENCE_NEGATIVE : FENCE_VALID),
					  "fence_check_token(%" PRId64 ")", t);
			}
			break;
		case 2:
			{
				int			has = in_u8(in) & 1;
				int64_t		highest = takeToken(in);
				int64_t		token = takeToken(in);
				FenceVerdict v = fence_decide(has, highest, token);
				FenceVerdict want = !has ? FENCE_ACCEPT_FIRST :
					token > highest ? FENCE_ACCEPT_ADVANCE :
					token == highest ? FENCE_ACCEPT_EQUAL : FENCE_REJECT_STALE;

				CHECK(v == want, "fence_decide(%d, %" PRId64 ", %" PRId64 ") = %d, want %d",
					  has, highest, token, v, want);
				CHECK(fence_verdict_accepts(v) == (!has || token >= highest),
					  "fence_verdict_accepts disagrees with the accept rule");
			}
			break;
		case 3:
			{
				/* a per-row resource, into a buffer of exactly the room promised */
				Bytes		p = takeResource(in);
				Bytes		k = takeResource(in);
				size_t		total = p.n + k.n;
				size_t		room = (total < FENCE_RESOURCE_MAX ? total : FENCE_RESOURCE_MAX) + 1;
				char	   *buf = malloc(room);
				size_t		len = 0;
				FenceProblem want = total == 0 ? FENCE_EMPTY :
					total > FENCE_RESOURCE_MAX ? FENCE_TOO_LONG : FENCE_VALID;
				FenceProblem got;

				if (buf == NULL)
					abort();
				memset(buf, 0xA5, room);
				got = fence_key_resource(buf, (char *) p.z, p.n, (char *) k.z, k.n, &len);
				CHECK(got == want && len == total, "fence_key_resource(%zu + %zu) = %d, len %zu",
					  p.n, k.n, got, len);
				CHECK(got != FENCE_VALID ||
					  (memcmp(buf, p.z, p.n) == 0 && memcmp(buf + p.n, k.z, k.n) == 0 &&
					   buf[total] == '\0'), "fence_key_resource composed the wrong bytes");
				CHECK(got == FENCE_VALID || (unsigned char) buf[0] == 0xA5,
					  "fence_key_resource wrote an invalid resource");
				free(buf);
				free(p.z);
				free(k.z);
			}
			break;
	}
}

/* ---------------------------------------------------------------------
 * The held-fence log against a reference: an array searched from the end.
 * ------------------------------------------------------------------ */

typedef struct ModelEntry
{
	uint8_t    *z;
	size_t		n;
	int64_t		token;
	uint32_t	tag;
} ModelEntry;

typedef struct Model
{
	ModelEntry *e;
	int			n;
	int			alloc;
	uint32_t	tag;			/* tags handed to set never decrease */
} Model;

NOT_FUZZED static int
modelFind(const Model *m, const uint8_t *z, size_t n)
{
	int			i;

	for (i = m->n - 1; i >= 0; i--)
		if (m->e[i].n == n && memcmp(m->e[i].z, z, n) == 0)
			return i;
	return -1;
}

NOT_FUZZED static int64_t
modelGet(const Model *m, const uint8_t *z, size_t n)
{
	int			i = modelFind(m, z, n);

	return i < 0 ? -1 : m->e[i].token;
}

NOT_FUZZED static void
modelAppend(Model *m, const uint8_t *z, size_t n, int64_t token)
{
	if (m->n == m->alloc)
	{
		m->alloc = m->alloc ? m->alloc * 2 : 64;
		m->e = realloc(m->e, sizeof(ModelEntry) * (size_t) m->alloc);
		if (m->e == NULL)
			abort();
	}
	m->e[m->n].z = malloc(n ? n : 1);
	if (m->e[m->n].z == NULL)
		abort();
	memcpy(m->e[m->n].z, z, n);
	m->e[m->n].n = n;
	m->e[m->n].token = token;
	m->e[m->n].tag = m->tag;
	m->n++;
}

NOT_FUZZED static void
modelTruncate(Model *m, int n)
{
	while (m->n > n)
		free(m->e[--m->n].z);
}

NOT_FUZZED static void
checkEntry(const FenceHeld *held, const Model *m, int i)
{
	const FenceHeldEntry *e = &held->entries[i];
	const ModelEntry *w = &m->e[i];
	int			current = w->token >= 0 && modelFind(m, w->z, w->n) == i;

	CHECK(e->len == w->n && memcmp(e->resource, w->z, w->n) == 0 &&
		  e->resource[e->len] == '\0',
		  "entry %d holds other bytes than were set", i);
	CHECK(e->token == w->token && e->tag == w->tag, "entry %d: token %" PRId64
		  " tag %u, want %" PRId64 " tag %u", i, e->token, e->tag, w->token, w->tag);
	CHECK(fence_held_get(held, (char *) w->z, w->n) == modelGet(m, w->z, w->n),
		  "get of entry %d's resource: %" PRId64 ", want %" PRId64, i,
		  fence_held_get(held, (char *) w->z, w->n), modelGet(m, w->z, w->n));
	CHECK(fence_held_is_current(held, i) == current, "is_current(%d) = %d, want %d",
		  i, fence_held_is_current(held, i), current);
}

/* Small logs entirely; large ones at both ends and at input-chosen places. */
static void
checkLog(const FenceHeld *held, const Model *m, FuzzInput *in)
{
	int			i;

	CHECK(held->n_entries == m->n, "log has %d entries, want %d", held->n_entries, m->n);
	if (m->n <= 64)
	{
		for (i = 0; i < m->n; i++)
			checkEntry(held, m, i);
		return;
	}
	for (i = 0; i < 16; i++)
	{
		checkEntry(held, m, i);
		checkEntry(held, m, m->n - 1 - i);
		checkEntry(held, m, in_u16(in) % m->n);
	}
}

NOT_FUZZED static void
heldSet(FenceHeld *held, Model *m, const uint8_t *z, size_t n, int64_t token)
{
	int			rc;

	failed = 0;
	rc = fence_held_set(held, (const char *) z, n, token, m->tag);
	CHECK(rc == (failed ? -1 : 0), "fence_held_set returned %d, allocation %s",
		  rc, failed ? "failed" : "succeeded");
	if (rc == 0)
		modelAppend(m, z, n, token);
	/* a failed append leaves the log as it was */
	CHECK(held->n_entries == m->n, "set: %d entries, want %d", held->n_entries, m->n);
	CHECK(fence_held_get(held, (const char *) z, n) == modelGet(m, z, n),
		  "get after set disagrees");
}

static void
fuzzHeld(FuzzInput *in)
{
	FenceHeld	held;
	Model		m;
	int			ops = 0;

	memset(&m, 0, sizeof(m));
	fence_held_init(&held, &fuzzAllocator);
	failIn = 0;

	while (!in_done(in) && ops++ < 200)
	{
		switch (in_u8(in) % 10)
		{
			case 0:
			case 1:
			case 2:
				{
					Bytes		r = takeResource(in);
					/* -1 is how a reset is written; other negatives are not held */
					int64_t		token = in_u8(in) & 3 ? (int64_t) (in_u8(in) % 8) : takeToken(in);

					heldSet(&held, &m, r.z, r.n, token);
					free(r.z);
				}
				break;
			case 3:
				{
					Bytes		r = takeResource(in);

					CHECK(fence_held_get(&held, (char *) r.z, r.n) == modelGet(&m, r.z, r.n),
						  "get(len %zu) disagrees", r.n);
					free(r.z);
				}
				break;
			case 4:
				{
					int			n = m.n ? (int) (in_u16(in) % (unsigned) (m.n + 2)) : 0;

					fence_held_truncate(&held, n);
					modelTruncate(&m, n);
					checkLog(&held, &m, in);
				}
				break;
			case 5:
				{
					/* tags rise as subtransactions nest; ask about any of them */
					uint32_t	t = m.tag + 1 - (uint32_t) (in_u8(in) % 4);
					int			want = m.n;

					if (in_u8(in) & 1)
						m.tag += in_u8(in) % 3;
					while (want > 0 && m.e[want - 1].tag >= t)
						want--;
					CHECK(fence_held_first_tagged(&held, t) == want,
						  "first_tagged(%u) = %d, want %d", t,
						  fence_held_first_tagged(&held, t), want);
				}
				break;
			case 6:
				fence_held_clear(&held);
				modelTruncate(&m, 0);
				CHECK(held.n_entries == 0 && held.mem == &fuzzAllocator,
					  "clear left entries or lost the allocator");
				CHECK(fence_held_get(&held, "", 0) == -1, "get after clear");
				break;
			case 7:
				{
					/*
					 * many resources at once, sometimes just past the 1024
					 * buckets (HELD_KEEP_BUCKETS) that clear() keeps
					 */
					int			k = (in_u8(in) & 7) == 7 ? 1025 + in_u8(in) % 64 : in_u8(in) % 64;
					int			i;
					char		name[32];

					/* a few thousand entries show all there is; more only cost time */
					if (m.n > 2048)
						k = 0;
					for (i = 0; i < k; i++)
					{
						int			len = snprintf(name, sizeof(name), "b%d", i);

						heldSet(&held, &m, (uint8_t *) name, (size_t) len, i);
					}
				}
				break;
			case 8:
				/* the next allocation, or one a little later, fails */
				failIn = 1 + in_u8(in) % 3;
				break;
			case 9:
				checkLog(&held, &m, in);
				break;
		}
	}
	failIn = 0;
	checkLog(&held, &m, in);
	fence_held_free(&held);
	CHECK(held.n_entries == 0 && held.n_buckets == 0 && held.mem == &fuzzAllocator,
		  "free left state behind");
	CHECK(live == 0, "%ld allocations of the log outlive fence_held_free", live);
	modelTruncate(&m, 0);
	free(m.e);
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FuzzInput	in = {data, size};
	int			ops = 0;

	/* the first byte picks the log or the stateless functions */
	if (in_u8(&in) % 4 == 0)
	{
		fuzzHeld(&in);
		return 0;
	}
	while (!in_done(&in) && ops++ < 64)
	{
		if (in_u8(&in) % 3 == 0)
			fuzzValidation(&in);
		else
			fuzzMessages(&in);
	}
	return 0;
}
