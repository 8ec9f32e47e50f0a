-- bench/pg/bulk.sql: the tables of the PostgreSQL bulk cells of bench/run.sh
-- (fences on many per-row resources in one transaction), for :rows rows
-- (psql -v rows=N). Run after setup.sql, once per size; it drops what an
-- earlier size made.
--
--   bu_plain, bu_floor, bu_fenced   :rows rows, every token 5; bu_fenced is
--       protected per row ('bu-' || id), and every resource's highest is
--       already 5, so the measured UPDATE presents equal tokens
--   bi_plain, bi_fenced             empty; the measured INSERT adds :rows
--       rows with new per-row resources ('bi-' || id): one advance per row
--   resources 'c-1' .. 'c-:rows' at 5, for fence_check in a loop
--   resource 'a1', advanced :rows times in one transaction
-- Default settings: max_locks_per_transaction stays at what the server has.
\set ON_ERROR_STOP on
SET client_min_messages = warning;

DROP TABLE IF EXISTS bu_plain, bu_floor, bu_fenced, bi_plain, bi_fenced;
DELETE FROM fence_tokens WHERE resource LIKE 'bu-%' OR resource LIKE 'bi-%' OR resource LIKE 'c-%';

CREATE TABLE bu_plain (id int PRIMARY KEY, n int NOT NULL, tok bigint);
CREATE TABLE bu_floor (id int PRIMARY KEY, n int NOT NULL, tok bigint);
CREATE TABLE bu_fenced (id int PRIMARY KEY, n int NOT NULL, tok bigint);
INSERT INTO bu_plain SELECT g, 0, 5 FROM generate_series(1, :rows) g;
INSERT INTO bu_floor SELECT g, 0, 5 FROM generate_series(1, :rows) g;
INSERT INTO bu_fenced SELECT g, 0, 5 FROM generate_series(1, :rows) g;
CREATE TRIGGER floor BEFORE UPDATE ON bu_floor
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
SELECT fence_protect('bu_fenced', 'tok', 'bu-', 'id');
-- every row's resource created at 5 (itself :rows advances in one transaction)
UPDATE bu_fenced SET tok = 5;

CREATE TABLE bi_plain (id int PRIMARY KEY, n int NOT NULL, tok bigint);
CREATE TABLE bi_fenced (id int PRIMARY KEY, n int NOT NULL, tok bigint);
SELECT fence_protect('bi_fenced', 'tok', 'bi-', 'id');

SELECT count(fence_check('c-' || g, 5)) FROM generate_series(1, :rows) g;
SELECT fence_check('a1', 1) WHERE fence_current('a1') IS NULL;

VACUUM ANALYZE bu_plain, bu_floor, bu_fenced, bi_plain, bi_fenced, fence_tokens;
