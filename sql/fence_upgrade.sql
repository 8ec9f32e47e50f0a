-- The upgrade path: install 1.0, take fences, then ALTER EXTENSION through
-- every version; data and protections survive each step.
\set SHOW_CONTEXT never
DROP EXTENSION IF EXISTS fence CASCADE;
CREATE EXTENSION fence VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'fence';
CREATE TABLE up (id int PRIMARY KEY, tok bigint);
SELECT fence_protect('up', 'tok', 'up:r');
INSERT INTO up VALUES (1, 5);
SELECT proname FROM pg_proc WHERE proname = 'fence_held';
ALTER EXTENSION fence UPDATE TO '1.1';
SELECT extversion FROM pg_extension WHERE extname = 'fence';
-- 1.1: fence_held() lists what the transaction holds
BEGIN;
SELECT * FROM fence_held();
SELECT fence_check('up:r', 5), fence_check('up:q', 1);
SAVEPOINT s;
SELECT fence_check('up:q', 2);
SELECT * FROM fence_held() ORDER BY resource;
ROLLBACK TO s;
SELECT * FROM fence_held() ORDER BY resource;
COMMIT;
SELECT * FROM fence_held();
-- 1.2: the objects that keep each backend's token cache true
SELECT count(*) FROM pg_trigger WHERE tgname = 'fence_tokens_changed';
ALTER EXTENSION fence UPDATE TO '1.2';
SELECT extversion FROM pg_extension WHERE extname = 'fence';
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'fence_tokens'::regclass;
SELECT typname, typtype FROM pg_type WHERE typname = 'fence_cache_signal';
-- 1.3: partitions and inheritance children of tables protected before 1.3
-- get the guard at the upgrade; fence_tokens gets a row trigger for logical
-- replication; an event trigger guards what is created or attached later
CREATE TABLE up_child () INHERITS (up);
CREATE TABLE up_part (id int, tok bigint) PARTITION BY LIST (id);
SELECT fence_protect('up_part', 'tok', 'up:p');
CREATE TABLE up_part1 PARTITION OF up_part FOR VALUES IN (1);
CREATE VIEW up_guards AS
	SELECT tgrelid::regclass AS tbl, tgname, tgenabled, tgparentid <> 0 AS cloned,
		   encode(tgargs, 'escape') AS args
	FROM pg_trigger WHERE tgname LIKE 'fence_guard%'
	ORDER BY tgrelid::regclass::text, tgname;
SELECT * FROM up_guards;
ALTER EXTENSION fence UPDATE TO '1.3';
SELECT extversion FROM pg_extension WHERE extname = 'fence';
SELECT * FROM up_guards;
SELECT tgname, tgenabled, tgtype FROM pg_trigger WHERE tgrelid = 'fence_tokens'::regclass ORDER BY 1;
SELECT evtname, evtevent, evtenabled, evttags FROM pg_event_trigger;
CREATE TABLE up_child2 () INHERITS (up_child);
CREATE TABLE up_part2 PARTITION OF up_part FOR VALUES IN (2);
SELECT * FROM up_guards WHERE tbl IN ('up_child2'::regclass, 'up_part2'::regclass);
-- 1.4: leases and fence_stats
ALTER EXTENSION fence UPDATE TO '1.4';
SELECT extversion FROM pg_extension WHERE extname = 'fence';
-- the update brings the view fence_stats, readable by every role
SELECT attname FROM pg_attribute WHERE attrelid = 'fence_stats'::regclass AND attnum > 0
	ORDER BY attnum;
SELECT has_table_privilege('public', 'fence_stats', 'SELECT') AS public_reads, fence_stats_scope();
SELECT fence_acquire('up:lease', 'upgraded', 60000) AS granted;
SELECT fence_acquire('up:r', 'upgraded', 60000) AS above_accepted;
SELECT resource, holder, token FROM fence_leases WHERE resource LIKE 'up:%' ORDER BY resource;
-- 1.5: fence's internal trigger functions are no longer executable by
-- PUBLIC (a role could attach fence_tokens_changed to a table of its own
-- and keep every fence out); the triggers that use them still fire
CREATE VIEW up_public_exec AS
	SELECT p.oid::regprocedure AS function
	FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
		AND d.deptype = 'e'
	WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'fence')
	  AND p.proname IN ('fence_tokens_changed', 'fence_guard_hierarchy', 'fence_guard', 'fence_reset')
	  AND has_function_privilege('public', p.oid, 'EXECUTE')
	ORDER BY p.oid::regprocedure::text;
SELECT * FROM up_public_exec;
ALTER EXTENSION fence UPDATE TO '1.5';
SELECT extversion FROM pg_extension WHERE extname = 'fence';
SELECT * FROM up_public_exec;
DROP VIEW up_public_exec;
-- 1.5: fence_terminate ends the sessions holding a fence below a token
-- (tests/pg_terminate.py); nobody holds one here
SELECT fence_terminate('up:r', 7) AS ended, has_function_privilege('public',
	'fence_terminate(text, bigint)', 'EXECUTE') AS public_may_call;
SELECT fence_terminate('up:r', 1);
SELECT fence_terminate(NULL, 1);
SELECT fence_terminate('up:r', -1);
-- the data and the guard came through the upgrades
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'up:%' ORDER BY resource;
INSERT INTO up VALUES (2, 4);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO up_child VALUES (3, 4);
\echo :LAST_ERROR_SQLSTATE
TRUNCATE up_child2;
\echo :LAST_ERROR_SQLSTATE
TRUNCATE up_part1;
\echo :LAST_ERROR_SQLSTATE
DROP VIEW up_guards;
DROP TABLE up_part;
-- a fresh install goes straight to the default version
DROP TABLE up_child2, up_child, up;
DROP EXTENSION fence;
CREATE EXTENSION fence;
SELECT extversion FROM pg_extension WHERE extname = 'fence';
