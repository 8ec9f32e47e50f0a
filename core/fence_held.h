/*
 * fence_held.h
 *
 * The fences one transaction holds ("fenced on r at t", SPEC.md Transaction
 * scope), as an append-only log that both engines keep: SQLite in
 * sqlite_ext/fence_held.c, PostgreSQL in pg_ext/fence_xact.c. Each entry
 * says "from here on, resource r is held at token t" (t < 0: no longer
 * held); a later entry for the same resource shadows an earlier one. Because
 * entries are only appended, undoing a savepoint is truncating the log to
 * the length it had when the savepoint began. A hash over the log finds the
 * newest entry of a resource; buckets list the newest entry first, so
 * truncating from the end only ever unlinks bucket heads.
 *
 * Memory comes from the engine through FenceAllocator; alloc returns NULL
 * on failure (SQLite) or never returns on failure (PostgreSQL's palloc).
 */
#ifndef FENCE_HELD_H
#define FENCE_HELD_H

#include <stddef.h>
#include <stdint.h>

typedef struct FenceAllocator
{
	void	   *(*alloc) (size_t size);
	void	   *(*realloc) (void *ptr, size_t size);
	void		(*free) (void *ptr);
} FenceAllocator;

typedef struct FenceHeldEntry
{
	char	   *resource;		/* NUL-terminated copy */
	size_t		len;
	uint32_t	hash;
	int64_t		token;			/* < 0: no longer held */
	uint32_t	tag;			/* the engine's: PostgreSQL's subtransaction */
	int			next_in_bucket; /* index, or -1 */
} FenceHeldEntry;

typedef struct FenceHeld
{
	const FenceAllocator *mem;
	FenceHeldEntry *entries;	/* oldest first */
	int			n_entries;
	int			n_alloc;
	int		   *buckets;		/* newest entry of each bucket, or -1 */
	int			n_buckets;		/* a power of two, or 0 */
	/* the caller's first arrays (fence_held_init_buffers): never freed */
	FenceHeldEntry *first_entries;
	int		   *first_buckets;
	/* the caller's buffer for resources' copies (fence_held_use_names) */
	char	   *names;
	size_t		names_size;
	size_t		names_used;		/* copies in names, in entry order */
} FenceHeld;

void		fence_held_init(FenceHeld *held, const FenceAllocator *mem);

/*
 * fence_held_init with first arrays the caller owns (n_buckets a power of
 * two): a log that stays within them allocates nothing but its resources'
 * copies. Larger arrays come from mem; the first ones are never freed or
 * reallocated through it.
 */
void		fence_held_init_buffers(FenceHeld *held, const FenceAllocator *mem,
									FenceHeldEntry *entries, int n_entries,
									int *buckets, int n_buckets);

/*
 * Copy resources' names into the caller's buffer while they fit (in entry
 * order, so that truncation gives the space back newest first), and through
 * mem after that: a log of a few short resources then allocates nothing.
 * Call right after fence_held_init or fence_held_init_buffers.
 */
void		fence_held_use_names(FenceHeld *held, char *names, size_t size);

/*
 * Start an empty log in place of one whose engine memory is gone (the
 * transaction's, in PostgreSQL), freeing nothing: when every entry still
 * lies in the caller's first arrays, only the buckets they used are reset
 * and 0 is returned; -1 when the log had grown out of them, and the caller
 * must call fence_held_init_buffers again.
 */
int			fence_held_restart(FenceHeld *held);

/* The token held for the resource, or -1 when it is not held. */
int64_t		fence_held_get(const FenceHeld *held, const char *resource, size_t len);

/* Append "resource held at token"; 0 on success, -1 when out of memory. */
int			fence_held_set(FenceHeld *held, const char *resource, size_t len,
						   int64_t token, uint32_t tag);

/*
 * Like fence_held_set, but when the resource's newest entry carries the same
 * tag, change its token in place: for an engine whose tags are undo scopes
 * (PostgreSQL's subtransactions), no undo point lies between the two, and a
 * transaction that advances one resource a million times keeps one entry.
 */
int			fence_held_replace(FenceHeld *held, const char *resource, size_t len,
							   int64_t token, uint32_t tag);

/* Undo every entry from index n on. */
void		fence_held_truncate(FenceHeld *held, int n);

/* The first entry whose tag is >= tag (entries' tags never decrease). */
int			fence_held_first_tagged(const FenceHeld *held, uint32_t tag);

/* Is entry i the newest for its resource and held (for listing)? */
int			fence_held_is_current(const FenceHeld *held, int i);

/* The transaction ended: forget all, keep small allocations for reuse. */
void		fence_held_clear(FenceHeld *held);

/* Give everything back. */
void		fence_held_free(FenceHeld *held);

#endif							/* FENCE_HELD_H */
