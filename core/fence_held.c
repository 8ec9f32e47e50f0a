/*
 * fence_held.c
 *
 * The held-fence log both engines share; see fence_held.h for the design.
 * Plain C with the engine's allocator, so it runs standalone under ASan.
 */
#include "fence_core.h"
#include "fence_held.h"

#include <string.h>

#define HELD_MIN_BUCKETS 16
#define HELD_KEEP_BUCKETS 1024	/* larger tables are freed at transaction end */

void
fence_held_init(FenceHeld *held, const FenceAllocator *mem)
{
	memset(held, 0, sizeof(*held));
	held->mem = mem;
}

void
fence_held_init_buffers(FenceHeld *held, const FenceAllocator *mem, FenceHeldEntry *entries,
						int n_entries, int *buckets, int n_buckets)
{
	int			i;

	fence_held_init(held, mem);
	held->entries = held->first_entries = entries;
	held->n_alloc = n_entries;
	held->buckets = held->first_buckets = buckets;
	held->n_buckets = n_buckets;
	for (i = 0; i < n_buckets; i++)
		buckets[i] = -1;
}

void
fence_held_use_names(FenceHeld *held, char *names, size_t size)
{
	held->names = names;
	held->names_size = size;
	held->names_used = 0;
}

int
fence_held_restart(FenceHeld *held)
{
	int			i;

	if (held->first_entries == NULL || held->entries != held->first_entries ||
		held->buckets != held->first_buckets)
		return -1;
	/* bucket heads only ever point at live entries */
	for (i = 0; i < held->n_entries; i++)
		held->buckets[held->entries[i].hash & (uint32_t) (held->n_buckets - 1)] = -1;
	held->n_entries = 0;
	held->names_used = 0;
	return 0;
}

/* Is this resource's copy in the caller's name buffer? */
static int
held_name_buffered(const FenceHeld *held, const char *p)
{
	return held->names != NULL && p >= held->names && p < held->names + held->names_size;
}

static int
held_find(const FenceHeld *held, const char *z, size_t n, uint32_t h)
{
	int			i;

	if (held->n_buckets == 0)
		return -1;
	for (i = held->buckets[h & (uint32_t) (held->n_buckets - 1)]; i >= 0;
		 i = held->entries[i].next_in_bucket)
	{
		const FenceHeldEntry *e = &held->entries[i];

		if (e->hash == h && e->len == n && memcmp(e->resource, z, n) == 0)
			return i;
	}
	return -1;
}

int64_t
fence_held_get(const FenceHeld *held, const char *resource, size_t len)
{
	int			i = held_find(held, resource, len, fence_hash(resource, len));

	return i < 0 ? -1 : held->entries[i].token;
}

static int
held_rehash(FenceHeld *held, int n_buckets)
{
	int		   *buckets = held->mem->alloc(sizeof(int) * (size_t) n_buckets);
	int			i;

	if (buckets == NULL)
		return -1;
	for (i = 0; i < n_buckets; i++)
		buckets[i] = -1;
	/* oldest first, each pushed on its bucket's head: newest ends up first */
	for (i = 0; i < held->n_entries; i++)
	{
		FenceHeldEntry *e = &held->entries[i];
		int			b = (int) (e->hash & (uint32_t) (n_buckets - 1));

		e->next_in_bucket = buckets[b];
		buckets[b] = i;
	}
	if (held->buckets && held->buckets != held->first_buckets)
		held->mem->free(held->buckets);
	held->buckets = buckets;
	held->n_buckets = n_buckets;
	return 0;
}

static int
held_set_hashed(FenceHeld *held, const char *resource, size_t len, uint32_t h,
				int64_t token, uint32_t tag)
{
	FenceHeldEntry *e;
	int			b;

	if (held->n_entries >= held->n_alloc)
	{
		int			n_alloc = held->n_alloc ? held->n_alloc * 2 : 16;
		FenceHeldEntry *a;

		if (held->entries && held->entries != held->first_entries)
			a = held->mem->realloc(held->entries, sizeof(FenceHeldEntry) * (size_t) n_alloc);
		else
		{
			a = held->mem->alloc(sizeof(FenceHeldEntry) * (size_t) n_alloc);
			if (a != NULL && held->entries)
				memcpy(a, held->entries, sizeof(FenceHeldEntry) * (size_t) held->n_entries);
		}
		if (a == NULL)
			return -1;
		held->entries = a;
		held->n_alloc = n_alloc;
	}
	if (held->n_entries >= held->n_buckets &&
		held_rehash(held, held->n_buckets ? held->n_buckets * 2 : HELD_MIN_BUCKETS) != 0)
		return -1;

	e = &held->entries[held->n_entries];
	if (held->names != NULL && len < held->names_size - held->names_used)
	{
		e->resource = held->names + held->names_used;
		held->names_used += len + 1;
	}
	else if ((e->resource = held->mem->alloc(len + 1)) == NULL)
		return -1;
	memcpy(e->resource, resource, len);
	e->resource[len] = '\0';
	e->len = len;
	e->hash = h;
	e->token = token;
	e->tag = tag;
	b = (int) (h & (uint32_t) (held->n_buckets - 1));
	e->next_in_bucket = held->buckets[b];
	held->buckets[b] = held->n_entries;
	held->n_entries++;
	return 0;
}

int
fence_held_set(FenceHeld *held, const char *resource, size_t len, int64_t token,
			   uint32_t tag)
{
	return held_set_hashed(held, resource, len, fence_hash(resource, len), token, tag);
}

void
fence_held_truncate(FenceHeld *held, int n)
{
	while (held->n_entries > n)
	{
		FenceHeldEntry *e = &held->entries[held->n_entries - 1];
		int			b = (int) (e->hash & (uint32_t) (held->n_buckets - 1));

		/* appended last, so it heads its bucket */
		held->buckets[b] = e->next_in_bucket;
		if (held_name_buffered(held, e->resource))
			held->names_used = (size_t) (e->resource - held->names);
		else
			held->mem->free(e->resource);
		held->n_entries--;
	}
}

int
fence_held_first_tagged(const FenceHeld *held, uint32_t tag)
{
	int			i = held->n_entries;

	while (i > 0 && held->entries[i - 1].tag >= tag)
		i--;
	return i;
}

int
fence_held_is_current(const FenceHeld *held, int i)
{
	const FenceHeldEntry *e = &held->entries[i];

	return e->token >= 0 && held_find(held, e->resource, e->len, e->hash) == i;
}

void
fence_held_clear(FenceHeld *held)
{
	fence_held_truncate(held, 0);
	if (held->n_buckets > HELD_KEEP_BUCKETS)
	{
		const FenceAllocator *mem = held->mem;

		fence_held_free(held);
		held->mem = mem;
	}
}

void
fence_held_free(FenceHeld *held)
{
	const FenceAllocator *mem = held->mem;

	fence_held_truncate(held, 0);
	if (held->buckets && held->buckets != held->first_buckets)
		mem->free(held->buckets);
	if (held->entries && held->entries != held->first_entries)
		mem->free(held->entries);
	memset(held, 0, sizeof(*held));
	held->mem = mem;
}

int
fence_held_replace(FenceHeld *held, const char *resource, size_t len, int64_t token,
				   uint32_t tag)
{
	uint32_t	h = fence_hash(resource, len);
	int			i = held_find(held, resource, len, h);

	/* no undo point lies between an entry and a later one of the same tag */
	if (i >= 0 && held->entries[i].tag == tag)
	{
		held->entries[i].token = token;
		return 0;
	}
	return held_set_hashed(held, resource, len, h, token, tag);
}
