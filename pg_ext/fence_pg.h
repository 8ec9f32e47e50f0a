/*
 * fence_pg.h
 *
 * What the PostgreSQL extension's files share: the accept protocol on the
 * token table (fence_tokens.c), the transaction's held fences
 * (fence_xact.c), error reporting (fence_errors.c) and the trigger
 * (fence_trigger.c).
 */
#ifndef FENCE_PG_H
#define FENCE_PG_H

#include "postgres.h"

#include "fmgr.h"
#include "storage/lock.h"
#include "utils/rel.h"

#include "../core/fence_core.h"

/* SQLSTATEs of SPEC.md: class 23, integrity; never retried blindly. */
#define ERRCODE_FENCE_STALE_TOKEN		MAKE_SQLSTATE('2','3','T','0','1')
#define ERRCODE_FENCE_TOKEN_REQUIRED	MAKE_SQLSTATE('2','3','T','0','2')

/* The outcome of presenting a token (fence_tokens.c). */
typedef struct FenceOutcome
{
	bool		stale;
	int64		highest;		/* what a stale token lost to */
} FenceOutcome;

/* fence_tokens.c */
extern FenceOutcome fence_accept(const char *resource, size_t len, int64 token);
extern FenceOutcome fence_accept_hashed(const char *resource, size_t len,
										const uint64 *knownHash, int64 token);
extern uint64 fence_resource_hash(const char *resource, size_t len);
extern bool fence_read_highest(const char *resource, size_t len, int64 *highest);
extern bool fence_read_uncommitted_highest(const char *resource, size_t len, int64 *highest);
extern void fence_resource_locktag(LOCKTAG *tag, const char *resource, size_t len);
extern void fence_forget(const char *resource, size_t len);
extern void fence_write_pending(const char *resource, size_t len, int64 token);
extern Oid	fence_extension_relid(const char *relname);

/* fence_token_cache.c: the highest per resource, remembered between reads */
extern void fence_cache_attach(Relation tokens);
extern bool fence_cache_enabled(void);
extern bool fence_cache_lookup(uint64 hash, const char *resource, size_t len, int64 *highest);
extern uint64 fence_cache_generation(void);
extern void fence_cache_store(uint64 hash, const char *resource, size_t len, int64 highest,
							  uint64 generation);
extern void fence_cache_signal(Relation tokens);

/* fence_xact.c: what this transaction holds */
typedef void (*FenceWritePending) (const char *resource, size_t len, int64 token);
extern void fence_xact_init(FenceWritePending writer);
extern int64 fence_held_token(const char *resource, size_t len);
extern void fence_hold(const char *resource, size_t len, int64 token);
extern int	fence_held_count(void);
extern int64 fence_written_token(const char *resource, size_t len);
extern void fence_note_written(const char *resource, size_t len, int64 token);
extern int64 fence_pending_token(const char *resource, size_t len);
extern void fence_xact_flush(void);
extern void fence_commit_synchronously(void);

/* fence_stats.c: accepts and stale rejections per resource */
extern void fence_stats_init(void);
extern void fence_stats_accepted(const char *resource, size_t len);
extern void fence_stats_rejected(const char *resource, size_t len, int64 token);
extern void fence_stats_publish(void);

/* fence_executor.c: which statement fires the guard */
extern void fence_executor_init(void);
extern bool fence_executor_maybe_merge(Relation rel);

/* fence_errors.c: errors, with the relation when a trigger reports them */
extern void fence_report_stale(Relation rel, const char *resource, size_t len,
							   int64 token, int64 highest) pg_attribute_noreturn();
extern void fence_report_missing(Relation rel, FenceMissing why, const char *resource,
								 size_t len, const char *column) pg_attribute_noreturn();
extern void fence_report_invalid(const char *what, FenceProblem problem, size_t len,
								 int64 token) pg_attribute_noreturn();
extern const char *fence_client_text(const char *str, size_t len, size_t *outlen);
extern void fence_validate_resource(const char *resource, size_t len);
extern char *fence_resource_arg(FunctionCallInfo fcinfo, int n, size_t *len);
extern int64 fence_token_arg(FunctionCallInfo fcinfo, int n);

#endif							/* FENCE_PG_H */
