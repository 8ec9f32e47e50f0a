-- fence_stats without shared_preload_libraries: this backend's own counts
-- (SPEC.md "Observability"). The server-wide scope, with fence preloaded,
-- is tests/pg_stats.py.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS fence;
RESET client_min_messages;
\set SHOW_CONTEXT never
-- the view's shape, and whose numbers it shows
SELECT attnum, attname, format_type(atttypid, atttypmod) FROM pg_attribute
	WHERE attrelid = 'fence_stats'::regclass AND attnum > 0 ORDER BY attnum;
SELECT fence_stats_scope();
SELECT has_table_privilege('public', 'fence_stats', 'SELECT') AS public_reads;
-- nothing counted yet in this backend
SELECT count(*) FROM fence_stats;
-- accepts, equal tokens too
SELECT fence_check('st:a', 5), fence_check('st:a', 5), fence_try('st:a', 6);
SELECT * FROM fence_stats ORDER BY resource;
-- stale rejections: fence_check's error, fence_try's false
SELECT clock_timestamp() AS t0 \gset
SELECT fence_check('st:a', 2);
SELECT fence_try('st:a', 3);
SELECT resource, accepted, rejected, last_rejected_token,
	last_rejected_at BETWEEN :'t0' AND clock_timestamp() AS at_rejection
	FROM fence_stats ORDER BY resource;
-- counted whether or not the transaction commits
BEGIN;
SELECT fence_check('st:b', 1);
ROLLBACK;
BEGIN;
SELECT fence_try('st:a', 1);
ROLLBACK;
SELECT resource, accepted, rejected, last_rejected_token FROM fence_stats ORDER BY resource;
-- a guard: one accept per row's token, its stale error a rejection
CREATE TABLE st_t (id int PRIMARY KEY, tok bigint);
SELECT fence_protect('st_t', 'tok', 'st:t');
INSERT INTO st_t VALUES (1, 4), (2, 4);
UPDATE st_t SET tok = 4;
INSERT INTO st_t VALUES (3, 3);
CREATE TABLE st_p (id int PRIMARY KEY, tok bigint);
SELECT fence_protect('st_p', 'tok', 'st:p:', 'id');
INSERT INTO st_p VALUES (1, 7), (2, 7);
UPDATE st_p SET tok = 6 WHERE id = 2;
SELECT resource, accepted, rejected, last_rejected_token FROM fence_stats ORDER BY resource;
-- invalid input, a missing token and tokenless writes under a fence count nowhere
SELECT fence_check(NULL, 1);
SELECT fence_check('', 1);
SELECT fence_try('st:a', -1);
INSERT INTO st_t VALUES (4, NULL);
UPDATE st_t SET id = id;
BEGIN;
SELECT fence_check('st:t', 4);
UPDATE st_t SET id = id + 10;
COMMIT;
SELECT resource, accepted, rejected, last_rejected_token FROM fence_stats ORDER BY resource;
DROP TABLE st_t, st_p;
