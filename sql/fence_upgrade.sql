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
-- the data and the guard came through the upgrades
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'up:%' ORDER BY resource;
INSERT INTO up VALUES (2, 4);
\echo :LAST_ERROR_SQLSTATE
-- a fresh install goes straight to the default version
DROP TABLE up;
DROP EXTENSION fence;
CREATE EXTENSION fence;
SELECT extversion FROM pg_extension WHERE extname = 'fence';
