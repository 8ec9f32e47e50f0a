/* pg_ext/fence--1.1--1.2.sql: fence 1.1 to 1.2 */

\echo Use "ALTER EXTENSION fence UPDATE TO '1.2'" to load this file. \quit

-- 1.2 lets each backend remember the highest token of the resources it
-- fences (pg_ext/fence_token_cache.c). These two objects tell every backend
-- when fence_tokens changes; without them the cache stays off.

-- Carries the news: a relcache invalidation of this relation empties every
-- backend's cache. Nothing else uses it.
CREATE TYPE fence_cache_signal AS (unused boolean);
COMMENT ON TYPE fence_cache_signal IS
	'fence: invalidated whenever fence_tokens changes; never used as a type';

-- fence's C code announces its own writes; this trigger announces any other
-- (a superuser's INSERT, UPDATE, DELETE, TRUNCATE or COPY, a restore).
-- ENABLE ALWAYS: session_replication_role must not silence it.
CREATE FUNCTION fence_tokens_changed() RETURNS trigger
	AS 'MODULE_PATHNAME', 'fence_tokens_changed' LANGUAGE C;
CREATE TRIGGER fence_tokens_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON fence_tokens
	FOR EACH STATEMENT EXECUTE FUNCTION fence_tokens_changed();
ALTER TABLE fence_tokens ENABLE ALWAYS TRIGGER fence_tokens_changed;
