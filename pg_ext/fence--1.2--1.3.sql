/* pg_ext/fence--1.2--1.3.sql: fence 1.2 to 1.3 */

\echo Use "ALTER EXTENSION fence UPDATE TO '1.3'" to load this file. \quit

-- 1. Logical replication. The apply worker of a subscription fires row
-- triggers that are ENABLE ALWAYS (or REPLICA) but never statement
-- triggers, so fence_tokens_changed (1.2) missed rows it applied, and a
-- subscriber backend kept a highest it had cached. This row trigger
-- announces each applied (or any other) INSERT, UPDATE and DELETE. fence's
-- own C writers do not fire triggers; they announce their writes directly.
-- The token cache is used only while both triggers are there, ENABLE ALWAYS.
CREATE TRIGGER fence_tokens_changed_row
	AFTER INSERT OR UPDATE OR DELETE ON fence_tokens
	FOR EACH ROW EXECUTE FUNCTION fence_tokens_changed();
ALTER TABLE fence_tokens ENABLE ALWAYS TRIGGER fence_tokens_changed_row;

-- 2. Partitions and inheritance children. fence_protect guards every table
-- below the protected one; this event trigger guards those created,
-- attached, inherited or detached later with the same arguments
-- (pg_ext/fence_trigger.c), including tables created by CREATE SCHEMA ...
-- CREATE TABLE; and it undoes a CREATE [OR REPLACE] TRIGGER of the guard's
-- names by anyone but fence_protect (the TRIGGER privilege is enough for
-- it). An error in it undoes the DDL command.
-- ENABLE ALWAYS: session_replication_role must not silence it.
CREATE FUNCTION fence_guard_hierarchy() RETURNS event_trigger
	AS 'MODULE_PATHNAME', 'fence_guard_hierarchy' LANGUAGE C;
COMMENT ON FUNCTION fence_guard_hierarchy() IS
	'event trigger of fence: guards new partitions and children of protected tables';
CREATE EVENT TRIGGER fence_guard_hierarchy ON ddl_command_end
	WHEN TAG IN ('CREATE TABLE', 'CREATE FOREIGN TABLE', 'ALTER TABLE',
				 'ALTER FOREIGN TABLE', 'CREATE SCHEMA', 'CREATE TRIGGER')
	EXECUTE FUNCTION fence_guard_hierarchy();
ALTER EVENT TRIGGER fence_guard_hierarchy ENABLE ALWAYS;

-- Tables protected before 1.3: give their partitions and children the guard
-- now, as fence_protect does in 1.3.
DO $$
DECLARE
	t regclass;
BEGIN
	FOR t IN
		SELECT tg.tgrelid::regclass
		FROM pg_catalog.pg_trigger tg
		WHERE tg.tgname = 'fence_guard' AND tg.tgparentid = 0
		  AND tg.tgfoid = 'fence_guard()'::regprocedure
		  AND EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhparent = tg.tgrelid)
		  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhrelid = tg.tgrelid)
	LOOP
		-- ALTER TABLE fires the event trigger, which guards what is below
		EXECUTE pg_catalog.format('ALTER TABLE %s OWNER TO %I', t,
			(SELECT pg_catalog.pg_get_userbyid(relowner) FROM pg_catalog.pg_class WHERE oid = t));
	END LOOP;
END
$$;
