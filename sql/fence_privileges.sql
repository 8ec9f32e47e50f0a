-- Privileges (SPEC.md "PostgreSQL specifics"): an application role with
-- only DML on a protected table writes with good tokens, and cannot write
-- fence_tokens, lower a token, reset a resource, or remove the guard.
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
CREATE ROLE fence_app LOGIN;
CREATE ROLE fence_ops;
CREATE TABLE orders (id int PRIMARY KEY, state text, tok bigint);
SELECT fence_protect('orders', 'tok', 'pv:orders');
GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO fence_app;
SET ROLE fence_app;
-- good tokens work through the guard and through fence_check
INSERT INTO orders VALUES (1, 'new', 5);
BEGIN;
SELECT fence_check('pv:orders', 5);
UPDATE orders SET state = 'paid' WHERE id = 1;
COMMIT;
-- every role may read the highest tokens
SELECT resource, token FROM fence_tokens WHERE resource = 'pv:orders';
-- the escapes: write fence_tokens directly, lower a token, reset it
UPDATE fence_tokens SET token = 0 WHERE resource = 'pv:orders';
DELETE FROM fence_tokens WHERE resource = 'pv:orders';
INSERT INTO fence_tokens VALUES ('pv:mine', 1, now());
TRUNCATE fence_tokens;
SELECT fence_reset('pv:orders');
SELECT fence_check('pv:orders', 4);
-- ... or take the guard away
SELECT fence_unprotect('orders');
SELECT fence_protect('orders', NULL, 'pv:other');
DROP TRIGGER fence_guard ON orders;
ALTER TABLE orders DISABLE TRIGGER fence_guard;
SET session_replication_role = replica;
-- ... or shadow fence_tokens on the search_path
CREATE TEMP TABLE fence_tokens (resource text, token bigint, updated_at timestamptz);
INSERT INTO fence_tokens VALUES ('pv:orders', 0, now());
SET search_path = pg_temp, public;
INSERT INTO orders VALUES (2, 'new', 4);
SELECT fence_current('pv:orders');
RESET search_path;
DROP TABLE pg_temp.fence_tokens;
RESET ROLE;
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'pv:%';
-- fence_reset: the owner, and roles granted EXECUTE on it
GRANT EXECUTE ON FUNCTION fence_reset(text) TO fence_ops;
SET ROLE fence_ops;
SELECT fence_reset('pv:orders');
RESET ROLE;
SELECT fence_current('pv:orders');
-- no fence function runs as SECURITY DEFINER
SELECT proname, prosecdef FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'fence') ORDER BY 1, 2;
-- which functions PUBLIC may execute (pg_ext/fence--1.4--1.5.sql says why
-- for each): not fence_reset, nor the internal trigger functions
SELECT p.oid::regprocedure AS function, has_function_privilege('public', p.oid, 'EXECUTE') AS public
FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
	AND d.deptype = 'e'
WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'fence')
  AND p.proname NOT LIKE 'fence\_lease\_holder\_%'
ORDER BY 2, 1;
DROP TABLE orders;
DROP OWNED BY fence_app, fence_ops;
DROP ROLE fence_app, fence_ops;
