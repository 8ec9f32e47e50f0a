-- ROLLBACK TO the savepoint that opened the transaction (a SAVEPOINT in
-- autocommit mode, for which SQLite calls fence_held's xRollbackTo with -1)
-- undoes every accept made since it (found by tests/fuzz: fence read the
-- mark before its array and kept them): nothing is held after it, and
-- nothing of it is in fence_tokens when the transaction commits.
SELECT fence_check('x', 1);
SAVEPOINT s1;
SELECT fence_check('r', 2);
ROLLBACK TO s1;
SELECT count(*) FROM fence_held;
RELEASE s1;
SELECT resource, token FROM fence_tokens ORDER BY resource;
-- the same after a write in the savepoint
SAVEPOINT s1;
SELECT fence_reset('x');
SELECT fence_check('r', 3);
ROLLBACK TO s1;
SELECT count(*) FROM fence_held;
RELEASE s1;
SELECT resource, token FROM fence_tokens ORDER BY resource;
-- a nested savepoint rolled back keeps what the outer one accepted
SAVEPOINT s1;
SELECT fence_check('r', 4);
SAVEPOINT s2;
SELECT fence_check('q', 5);
ROLLBACK TO s2;
SELECT resource, token FROM fence_held ORDER BY resource;
ROLLBACK TO s1;
SELECT count(*) FROM fence_held;
RELEASE s1;
SELECT resource, token FROM fence_tokens ORDER BY resource;
