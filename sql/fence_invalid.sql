-- Invalid input raises "invalid fencing ..." with class 22 (22004 for NULL,
-- 22023 otherwise) and changes nothing, in every function (SPEC.md
-- "Precise points").
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
SELECT fence_check('inv:r', 10);
SELECT fence_check(NULL, 11);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check('', 11);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check(repeat('x', 1025), 11);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check(repeat('é', 513), 11);
SELECT fence_check('inv:r', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check('inv:r', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_check('inv:r', -9223372036854775808);
-- a token is a bigint: what does not fit is rejected by PostgreSQL itself
SELECT fence_check('inv:r', 9223372036854775808);
SELECT fence_check('inv:r', 31.5);
SELECT fence_try(NULL, 11);
SELECT fence_try('', 11);
SELECT fence_try('inv:r', NULL);
SELECT fence_try('inv:r', -5);
SELECT fence_current(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_current('');
SELECT fence_current(repeat('x', 1025));
SELECT fence_reset(NULL);
SELECT fence_reset('');
-- nothing changed
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'inv:%';
