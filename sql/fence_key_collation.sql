-- A per-row key column whose collation becomes nondeterministic after
-- fence_protect (ALTER COLUMN ... TYPE text COLLATE a nondeterministic ICU
-- collation): 'A' and 'a' would be one key of the table and two resources.
-- Every write of the table is refused until the column's collation is
-- deterministic again; nothing of a refused write commits. The same
-- output for both editions (docs/sql-edition.md, row 22).
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
CREATE COLLATION kc_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
SELECT 'A' = 'a' COLLATE kc_ci AS equal_under_kc_ci;
-- refused when protecting
CREATE TABLE kc_refused (k text COLLATE kc_ci, tok bigint);
SELECT fence_protect('kc_refused', 'tok', 'kcr:', 'k');
-- protected with a deterministic collation, then changed
CREATE TABLE kc_jobs (k text, tok bigint, body text);
SELECT fence_protect('kc_jobs', 'tok', 'kc:', 'k');
INSERT INTO kc_jobs VALUES ('A', 5, 'first');
ALTER TABLE kc_jobs ALTER COLUMN k TYPE text COLLATE kc_ci;
-- 'a' would be a second resource for the key 'A'
INSERT INTO kc_jobs VALUES ('a', 5, 'second');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO kc_jobs VALUES ('a', 1, 'second');
UPDATE kc_jobs SET body = 'changed', tok = 5 WHERE k = 'A';
BEGIN;
SELECT fence_check('kc:A', 5);
UPDATE kc_jobs SET body = 'changed' WHERE k = 'A';
ROLLBACK;
BEGIN;
SELECT fence_check('kc:A', 5);
DELETE FROM kc_jobs WHERE k = 'a';
ROLLBACK;
-- nothing of them committed
SELECT k, tok, body FROM kc_jobs ORDER BY k COLLATE "C";
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'kc%' ORDER BY resource COLLATE "C";
-- a deterministic collation again: the guard lets writes through
ALTER TABLE kc_jobs ALTER COLUMN k TYPE text COLLATE "C";
INSERT INTO kc_jobs VALUES ('a', 1, 'second');
UPDATE kc_jobs SET body = 'changed', tok = 6 WHERE k = 'A';
SELECT k, tok, body FROM kc_jobs ORDER BY k COLLATE "C";
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'kc%' ORDER BY resource COLLATE "C";
DROP TABLE kc_jobs;
DROP TABLE kc_refused;
DROP COLLATION kc_ci;
DELETE FROM fence_tokens WHERE resource LIKE 'kc%';
