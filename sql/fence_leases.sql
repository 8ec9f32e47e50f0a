-- Leases inside the store: fence_acquire, fence_renew, fence_release.
-- Every rule is checked on what the tables hold afterwards.
\set SHOW_CONTEXT never
\set VERBOSITY default
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS fence;
RESET client_min_messages;
DELETE FROM fence_leases WHERE resource LIKE 'ls:%';
CREATE VIEW ls_state AS
	SELECT l.resource, l.holder, l.token AS granted, t.token AS highest_accepted,
		   l.expires_at > clock_timestamp() AS live
	FROM fence_leases l LEFT JOIN fence_tokens t USING (resource)
	WHERE l.resource LIKE 'ls:%' ORDER BY l.resource;

-- A resource never seen: the first grant is 1, and the highest accepted
-- token does not move (the new holder's first write moves it).
SELECT fence_acquire('ls:a', 'w1', 60000) AS granted;
SELECT fence_current('ls:a') AS highest;
SELECT * FROM ls_state;
-- the same holder asking again gets its live lease back, extended
SELECT expires_at AS before FROM fence_leases WHERE resource = 'ls:a' \gset
SELECT fence_acquire('ls:a', 'w1', 120000) AS same_token;
SELECT expires_at > :'before' AS extended FROM fence_leases WHERE resource = 'ls:a';
-- another holder gets NULL while the lease is live, and changes nothing
SELECT fence_acquire('ls:a', 'w2', 60000) IS NULL AS refused;
SELECT * FROM ls_state;

-- A grant is above every token accepted for the resource, even one from an
-- outside lock service, and above every token granted before.
SELECT fence_check('ls:b', 41);
SELECT fence_acquire('ls:b', 'w1', 60000) AS granted;
SELECT fence_release('ls:b', 'w1', 42) AS released;
SELECT fence_acquire('ls:b', 'w1', 60000) AS granted_again;
SELECT fence_current('ls:b') AS highest_still_41;
-- the holder's first fenced write moves the highest
SELECT fence_check('ls:b', 43);
SELECT * FROM ls_state;
-- and fence_reset does not lower what the next grant will be
SELECT fence_reset('ls:b');
SELECT fence_release('ls:b', 'w1', 43);
SELECT fence_acquire('ls:b', 'w3', 60000) AS after_reset;

-- Renew and release: true only for the live lease's holder and token.
SELECT fence_acquire('ls:c', 'w1', 60000) AS granted;
SELECT fence_renew('ls:c', 'w1', 1, 60000) AS own,
	   fence_renew('ls:c', 'w2', 1, 60000) AS other_holder,
	   fence_renew('ls:c', 'w1', 2, 60000) AS other_token,
	   fence_renew('ls:never', 'w1', 1, 60000) AS never_leased,
	   fence_release('ls:c', 'w2', 1) AS release_other,
	   fence_release('ls:never', 'w1', 1) AS release_never;
SELECT * FROM ls_state WHERE resource = 'ls:c';
SELECT count(*) AS rows_for_never FROM fence_leases WHERE resource = 'ls:never';
SELECT fence_release('ls:c', 'w1', 1) AS released, fence_release('ls:c', 'w1', 1) AS twice,
	   fence_renew('ls:c', 'w1', 1, 60000) AS renew_released;
-- after a release the next grant, even to the same holder, is greater
SELECT fence_acquire('ls:c', 'w1', 60000) AS regranted;

-- Expiry, on the server's clock: a lease of 1 ms is over after 20 ms. The
-- expired holder cannot renew or release, and gets a new, greater token.
SELECT fence_acquire('ls:d', 'w1', 1) AS granted;
SELECT pg_sleep(0.02);
SELECT fence_renew('ls:d', 'w1', 1, 60000) AS renew_expired,
	   fence_release('ls:d', 'w1', 1) AS release_expired;
SELECT fence_acquire('ls:d', 'w1', 60000) AS regranted_same_holder;
SELECT fence_acquire('ls:e', 'w1', 1) AS granted;
SELECT pg_sleep(0.02);
SELECT fence_acquire('ls:e', 'w2', 60000) AS other_after_expiry;
-- the clock is the call's, not the transaction's start: inside one
-- transaction a lease still expires
BEGIN;
SELECT fence_acquire('ls:f', 'w1', 1) AS granted;
SELECT pg_sleep(0.02);
SELECT fence_acquire('ls:f', 'w2', 60000) AS other_in_same_transaction;
COMMIT;

-- Not transactional (like nextval): a grant stays when its transaction
-- rolls back, so that nobody waits for that transaction to end.
BEGIN;
SELECT fence_acquire('ls:g', 'w1', 60000) AS granted;
ROLLBACK;
SELECT fence_acquire('ls:g', 'w2', 60000) IS NULL AS still_held_by_w1;
SELECT * FROM ls_state WHERE resource = 'ls:g';

-- Invalid input raises "invalid fencing ..." (class 22) and changes nothing.
CREATE TABLE ls_before AS SELECT resource, holder::text, token, expires_at FROM fence_leases;
SELECT fence_acquire(NULL, 'w1', 1000);
SELECT fence_acquire('', 'w1', 1000);
SELECT fence_acquire(repeat('x', 1025), 'w1', 1000);
SELECT fence_acquire('ls:a', NULL, 1000);
SELECT fence_acquire('ls:a', '', 1000);
SELECT fence_acquire('ls:a', repeat('h', 257), 1000);
SELECT fence_acquire('ls:a', 'w1', NULL);
SELECT fence_acquire('ls:a', 'w1', 0);
SELECT fence_acquire('ls:a', 'w1', -5);
SELECT fence_acquire('ls:a', 'w1', 2147483648);
SELECT fence_renew('ls:a', 'w1', NULL, 1000);
SELECT fence_renew('ls:a', 'w1', -1, 1000);
SELECT fence_renew('ls:a', 'w1', 1, 0);
SELECT fence_renew('ls:a', NULL, 1, 1000);
SELECT fence_release('ls:a', 'w1', NULL);
SELECT fence_release(NULL, 'w1', 1);
SELECT fence_release('ls:a', '', 1);
\set VERBOSITY sqlstate
SELECT fence_acquire('ls:a', NULL, 1000);
SELECT fence_acquire('ls:a', 'w1', 0);
SELECT fence_renew('ls:a', 'w1', -1, 1000);
\set VERBOSITY default
SELECT count(*) AS changed FROM (
	(SELECT resource, holder::text, token, expires_at FROM fence_leases EXCEPT SELECT * FROM ls_before)
	UNION ALL (SELECT * FROM ls_before EXCEPT SELECT resource, holder::text, token, expires_at FROM fence_leases)) d;
DROP TABLE ls_before;
-- a holder of exactly 256 bytes, multibyte text included
SELECT fence_acquire('ls:h', repeat('é', 128), 60000) AS granted;
SELECT octet_length(holder::text) AS bytes, holder = repeat('é', 128) AS same
	FROM fence_leases WHERE resource = 'ls:h';

-- Tokens run out only at 2^63-1: no grant wraps around.
SELECT fence_check('ls:max', 9223372036854775807);
SELECT fence_acquire('ls:max', 'w1', 1000);

-- Read-only transactions (and hot standbys) cannot take leases.
BEGIN READ ONLY;
SELECT fence_acquire('ls:ro', 'w1', 1000);
ROLLBACK;

-- Application roles may call the lease functions and read fence_leases,
-- but cannot write it: no forged or extended lease by DML.
CREATE ROLE ls_app;
SET ROLE ls_app;
SELECT fence_acquire('ls:app', 'app', 60000) AS granted;
SELECT resource, holder, token FROM fence_leases WHERE resource = 'ls:app';
INSERT INTO fence_leases VALUES ('ls:forged', 'app', 1, now() + interval '1 day');
UPDATE fence_leases SET expires_at = now() + interval '1 day' WHERE resource = 'ls:a';
UPDATE fence_leases SET holder = 'app' WHERE resource = 'ls:a';
DELETE FROM fence_leases WHERE resource = 'ls:a';
TRUNCATE fence_leases;
RESET ROLE;
SELECT resource, holder FROM fence_leases WHERE resource IN ('ls:a', 'ls:forged');
DROP ROLE ls_app;

-- fence_leases must keep the shape fence writes: an index added by hand
-- would miss the rows fence inserts, so fence refuses to write then.
CREATE INDEX ls_extra ON fence_leases (token);
SELECT fence_acquire('ls:i', 'w1', 60000);
DROP INDEX ls_extra;
SELECT fence_acquire('ls:i', 'w1', 60000) AS granted;

-- holder sorts, groups and compares like text in the "C" collation
SELECT holder, count(*) FROM fence_leases WHERE resource LIKE 'ls:%' AND octet_length(holder::text) < 10
	GROUP BY holder ORDER BY holder;
SELECT DISTINCT holder FROM fence_leases WHERE holder IN ('w1', 'w2', 'app') ORDER BY holder DESC;
SELECT 'W1'::fence_lease_holder < 'w1', 'w1'::fence_lease_holder = 'w1', 'w1'::fence_lease_holder <> 'w10';
DROP VIEW ls_state;
DELETE FROM fence_leases WHERE resource LIKE 'ls:%';
