/* pg_ext/fence--1.4--1.5.sql: fence 1.4 to 1.5 */

\echo Use "ALTER EXTENSION fence UPDATE TO '1.5'" to load this file. \quit

-- ---------------------------------------------------------------------
-- Internal functions: no EXECUTE for PUBLIC where it can do harm
-- ---------------------------------------------------------------------
--
-- Every function of the extension, and who may call it:
--   fence_check, fence_try, fence_current, fence_held,
--   fence_acquire, fence_renew, fence_release,
--   fence_stats_read (the view fence_stats), fence_stats_scope:
--       PUBLIC; each does only what the contract lets any role do.
--   fence_protect, fence_unprotect: PUBLIC; each checks that the caller
--       owns the table.
--   fence_guard(): PUBLIC. fence_protect creates the guard as the calling
--       table owner, and CREATE TRIGGER needs EXECUTE on the function; a
--       role that attaches it to a table of its own by hand gets nothing
--       fence_check does not give it (the guard validates its arguments as
--       fence_protect does, and its trigger names are reserved).
--   fence_lease_holder_* (the type's I/O, comparison and operators):
--       PUBLIC, as for any type.
--   fence_reset: revoked in 1.0 (the extension's owner, or roles it grants).
--   fence_tokens_changed(), fence_guard_hierarchy(): revoked here. They are
--       fence's own triggers on fence_tokens and on DDL; a trigger's
--       function needs EXECUTE only when the trigger is created, so the
--       ones the extension created keep firing. fence_tokens_changed()
--       attached to a table of one's own took fence_tokens' ExclusiveLock
--       on every INSERT and kept every fence in the database out until the
--       transaction ended (the C code now also refuses any table but
--       fence_tokens).
REVOKE ALL ON FUNCTION fence_tokens_changed() FROM PUBLIC;
REVOKE ALL ON FUNCTION fence_guard_hierarchy() FROM PUBLIC;

-- ---------------------------------------------------------------------
-- fence_terminate: a way out for the next holder (pg_ext/fence_terminate.c)
-- ---------------------------------------------------------------------
--
-- Ends the sessions whose open transactions hold the resource's fence
-- below the token (and so keep its advance to the token waiting): a stale
-- holder paused inside a statement, where no timeout ends it. PUBLIC: it
-- checks pg_terminate_backend's rules for every session it would end, so
-- it gives no new right; a token below the highest is refused (23T01).
-- Not STRICT: a NULL argument raises 22004.
CREATE FUNCTION fence_terminate(resource text, token bigint) RETURNS integer
	AS 'MODULE_PATHNAME', 'fence_terminate' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_terminate(text, bigint) IS
	'end the sessions whose transactions hold the resource''s fence below the token; returns how many';
