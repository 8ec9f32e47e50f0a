/*
 * fuzz_input.h
 *
 * The byte reader both fuzz targets decode their input with. Reading past
 * the end gives zeros instead of failing, so that every input, however
 * short, is a complete program of operations: libFuzzer's mutations then
 * never waste runs on inputs a stricter decoder would reject.
 */
#ifndef FENCE_FUZZ_INPUT_H
#define FENCE_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * For the harnesses' own bookkeeping (reference models, snapshots): no
 * coverage instrumentation, so that it neither slows runs down nor feeds
 * libFuzzer branches that say nothing about the code under test.
 */
#define NOT_FUZZED __attribute__((no_sanitize("coverage")))

typedef struct FuzzInput
{
	const uint8_t *p;
	size_t		n;
} FuzzInput;

static inline int
in_done(const FuzzInput *in)
{
	return in->n == 0;
}

static inline uint8_t
in_u8(FuzzInput *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

static inline uint16_t
in_u16(FuzzInput *in)
{
	uint16_t	v = in_u8(in);

	return (uint16_t) (v | (uint16_t) in_u8(in) << 8);
}

static inline uint64_t
in_u64(FuzzInput *in)
{
	uint64_t	v = 0;
	int			i;

	for (i = 0; i < 8; i++)
		v |= (uint64_t) in_u8(in) << (8 * i);
	return v;
}

/* The extremes and near-extremes of int64, where off-by-ones live. */
static inline int64_t
in_interesting_i64(FuzzInput *in)
{
	static const int64_t values[] = {
		0, 1, 2, 3, 5, 7, 31, -1, -2, 255, 256, 1024, 1025, 65535,
		2147483647LL, 2147483648LL, -2147483648LL, 4294967295LL, 4294967296LL,
		INT64_MAX, INT64_MAX - 1, INT64_MIN, INT64_MIN + 1,
		(int64_t) 1 << 53, ((int64_t) 1 << 53) + 1,
	};

	return values[in_u8(in) % (sizeof(values) / sizeof(values[0]))];
}

/*
 * Fill out[0..len) from the input: up to 64 bytes taken from it, repeated
 * to the length asked for, so that a few input bytes describe a long string
 * (resources past FENCE_RESOURCE_MAX) without making inputs large.
 */
static inline void
in_fill(FuzzInput *in, uint8_t *out, size_t len)
{
	size_t		k = in_u8(in) % 65;
	size_t		i;

	if (k > in->n)
		k = in->n;
	if (k == 0)
	{
		memset(out, in_u8(in), len);
		return;
	}
	for (i = 0; i < len; i++)
		out[i] = in->p[i % k];
	in->p += k;
	in->n -= k;
}

#endif							/* FENCE_FUZZ_INPUT_H */
