-- A resource argument that carries a nondeterministic collation: built from
-- a column of a case-insensitive ICU collation ('acct:' || email), or passed
-- through an application function's text parameter, which inherits it.
-- A resource is its bytes, whatever the argument's collation: 'rc:BOB@x'
-- and 'rc:bob@x' are two resources, each with its own highest, its own
-- lock and its own lease; a stale token is the stale error (23T01). The
-- same output for both editions. Asserts on what committed: rc_ledger,
-- fence_tokens, fence_leases.
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
CREATE COLLATION rc_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE rc_accounts (id int PRIMARY KEY, email text COLLATE rc_ci);
INSERT INTO rc_accounts VALUES (1, 'BOB@x'), (2, 'bob@x');
SELECT email = 'BOB@X' AS equal_under_rc_ci FROM rc_accounts WHERE id = 1;
CREATE TABLE rc_ledger (note text);
SELECT fence_protect('rc_ledger', NULL, 'rc:BOB@x');
-- another account's highest, then the current holder of rc:BOB@x at 10
SELECT fence_check('rc:bob@x', 3);
SELECT fence_check('rc:BOB@x', 10);
-- the stale holder of rc:BOB@x (token 4) builds the resource from the column
BEGIN;
SELECT fence_check('rc:' || email, 4) FROM rc_accounts WHERE id = 1;
INSERT INTO rc_ledger VALUES ('stale write under token 4');
COMMIT;
\echo :LAST_ERROR_SQLSTATE
SELECT fence_try('rc:' || email, 4) FROM rc_accounts WHERE id = 1;
-- through an application function with a text parameter
CREATE FUNCTION rc_app_write(r text, t bigint, note text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	PERFORM fence_check(r, t);
	INSERT INTO rc_ledger VALUES (note);
END
$$;
SELECT rc_app_write('rc:' || email, 4, 'stale write through a function') FROM rc_accounts WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- the current token through the column: accepted, on rc:BOB@x
BEGIN;
SELECT fence_check('rc:' || email, 10) FROM rc_accounts WHERE id = 1;
SELECT resource, token FROM fence_held();
INSERT INTO rc_ledger VALUES ('write under token 10');
COMMIT;
-- an advance through the column raises rc:bob@x only, never lowers rc:BOB@x
SELECT fence_check('rc:' || email, 5) FROM rc_accounts WHERE id = 2;
SELECT fence_try('rc:' || email, 6) FROM rc_accounts WHERE id = 2;
SELECT fence_current('rc:' || email) FROM rc_accounts ORDER BY id;
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'rc:%' ORDER BY resource COLLATE "C";
SELECT note FROM rc_ledger ORDER BY note COLLATE "C";
-- the lock: a fence through the column takes the lock a fence through a
-- plain argument takes (the same advisory lock keys)
CREATE TABLE rc_locks (via text, classid oid, objid oid, objsubid int2, mode text);
BEGIN;
SELECT fence_check('rc:' || email, 10) FROM rc_accounts WHERE id = 1;
INSERT INTO rc_locks SELECT 'column', classid, objid, objsubid, mode FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory';
COMMIT;
BEGIN;
SELECT fence_check('rc:BOB@x', 10);
INSERT INTO rc_locks SELECT 'plain', classid, objid, objsubid, mode FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory';
COMMIT;
SELECT count(*) > 0 AS locked,
	   (SELECT array_agg(row(classid, objid, objsubid, mode)::text ORDER BY 1) FROM rc_locks WHERE via = 'column')
	 = (SELECT array_agg(row(classid, objid, objsubid, mode)::text ORDER BY 1) FROM rc_locks WHERE via = 'plain') AS same_lock
  FROM rc_locks WHERE via = 'column';
-- fence_reset through the column forgets rc:bob@x only
SELECT fence_reset('rc:' || email) FROM rc_accounts WHERE id = 2;
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'rc:%' ORDER BY resource COLLATE "C";
-- leases: 'rcl:A' and 'rcl:a' are two resources
DELETE FROM fence_leases WHERE resource LIKE 'rcl:%';
CREATE TABLE rc_jobs (id int PRIMARY KEY, name text COLLATE rc_ci);
INSERT INTO rc_jobs VALUES (1, 'a');
SELECT fence_acquire('rcl:A', 'old', 1);
SELECT pg_sleep(0.01);
SELECT fence_acquire('rcl:a', 'X', 600000);
SELECT fence_release('rcl:a', 'X', 1);
SELECT fence_acquire('rcl:a', 'X2', 600000);
-- Y asks for rcl:a (the name from the column) while X2's lease is live
SELECT fence_acquire('rcl:' || name, 'Y', 600000) AS y_token FROM rc_jobs WHERE id = 1;
SELECT fence_renew('rcl:' || name, 'X2', 2, 600000) FROM rc_jobs WHERE id = 1;
SELECT resource, holder, token, expires_at > clock_timestamp() AS live
  FROM fence_leases WHERE resource LIKE 'rcl:%' ORDER BY resource COLLATE "C";
SELECT fence_release('rcl:' || name, 'X2', 2) FROM rc_jobs WHERE id = 1;
SELECT fence_acquire('rcl:' || upper(name), 'Z', 600000) AS z_token FROM rc_jobs WHERE id = 1;
SELECT resource, holder, token, expires_at > clock_timestamp() AS live
  FROM fence_leases WHERE resource LIKE 'rcl:%' ORDER BY resource COLLATE "C";
SELECT fence_unprotect('rc_ledger');
DELETE FROM fence_leases WHERE resource LIKE 'rcl:%';
DROP FUNCTION rc_app_write(text, bigint, text);
DROP TABLE rc_ledger, rc_accounts, rc_locks, rc_jobs;
DROP COLLATION rc_ci;
DELETE FROM fence_tokens WHERE resource LIKE 'rc:%' OR resource LIKE 'rcl:%';
