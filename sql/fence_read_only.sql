-- Read-only transactions at every isolation level (and so a hot standby,
-- where every transaction is read-only): the current token is accepted, a
-- lower one is the stale error (23T01), a higher one (an advance, which
-- writes) is refused (25006). Nothing commits from them: fence_tokens is
-- unchanged. The same output for both editions.
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
SELECT fence_check('ro:a', 5);
BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY;
SELECT fence_check('ro:a', 5);
SELECT fence_try('ro:a', 5), fence_try('ro:a', 4);
SELECT resource, token FROM fence_held();
COMMIT;
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
SELECT fence_check('ro:a', 5);
SELECT fence_try('ro:a', 5), fence_try('ro:a', 4);
SELECT resource, token FROM fence_held();
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY;
SELECT fence_try('ro:a', 5), fence_try('ro:a', 4);
SELECT fence_check('ro:a', 5);
SELECT resource, token FROM fence_held();
COMMIT;
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
SELECT fence_check('ro:a', 4);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY;
SELECT fence_check('ro:a', 4);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
SELECT fence_check('ro:a', 6);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY;
SELECT fence_try('ro:a', 6);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
SELECT fence_try('ro:new', 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'ro:%' ORDER BY resource COLLATE "C";
DELETE FROM fence_tokens WHERE resource LIKE 'ro:%';
