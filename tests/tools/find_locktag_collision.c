/*
 * find_locktag_collision.c
 *
 * Finds two resource names whose fence lock tags collide in PostgreSQL:
 * the same 64-bit hash_bytes_extended() with fence's seed (pg_ext/
 * fence_tokens.c, FENCE_LOCK_SEED). A distinguished-point collision search
 * (van Oorschot and Wiener) over f(x) = hash("collide:" + hex(x)): chains
 * end at values with their low 18 bits zero, and two chains that end at the
 * same point are walked in step to where they first meet. About 2^32
 * hashes, a few minutes on one core. tests/pg_attacks.py uses the pair it
 * printed; this program is kept to show where it came from, not run by
 * make check:
 *
 *   cc -O2 -o /tmp/collide tests/tools/find_locktag_collision.c \
 *      $(pg_config --pkglibdir)/libpgcommon.a $(pg_config --pkglibdir)/libpgport.a
 */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
extern uint64_t hash_bytes_extended(const unsigned char *k, int keylen, uint64_t seed);
#define SEED 0x66656e6365ULL	/* FENCE_LOCK_SEED */
static int name(uint64_t x, char *buf) { return sprintf(buf, "collide:%016llx", (unsigned long long) x); }
static uint64_t f(uint64_t x) { char b[64]; int n = name(x, b); return hash_bytes_extended((unsigned char *) b, n, SEED); }
#define DPBITS 18
#define TAB (1u << 22)
typedef struct { uint64_t dp, start, len; } Ent;
static Ent *tab;
int main(void) {
	tab = calloc(TAB, sizeof(Ent));
	uint64_t seedx = 0x1234567;
	for (;;) {
		uint64_t start = (seedx = seedx * 6364136223846793005ULL + 1442695040888963407ULL), x = start, len = 0;
		while ((x & ((1ULL << DPBITS) - 1)) != 0) { x = f(x); len++; if (len > (40ULL << DPBITS)) break; }
		if (len > (40ULL << DPBITS)) continue;
		uint32_t h = (uint32_t) (x >> 40) & (TAB - 1);
		while (tab[h].len && tab[h].dp != x) h = (h + 1) & (TAB - 1);
		if (!tab[h].len) { tab[h].dp = x; tab[h].start = start; tab[h].len = len; continue; }
		/* two chains reach the same point: walk them to where they meet */
		uint64_t a = tab[h].start, la = tab[h].len, b = start, lb = len;
		while (la > lb) { a = f(a); la--; }
		while (lb > la) { b = f(b); lb--; }
		if (a == b) continue;	/* one chain started on the other */
		while (f(a) != f(b)) { a = f(a); b = f(b); }
		char na[64], nb[64]; name(a, na); name(b, nb);
		printf("%s %s %016llx\n", na, nb, (unsigned long long) f(a));
		return 0;
	}
}
