-- "Fenced on r at t" (SPEC.md "Transaction scope"): what a transaction holds
-- is listed by fence_held, undone with a savepoint or a failed statement,
-- and gone when the transaction ends.
CREATE TABLE w(id INTEGER PRIMARY KEY, v TEXT, tok INTEGER);
INSERT INTO w VALUES (1, 'a', NULL);
SELECT fence_protect('w', NULL, 'r');
SELECT fence_check('r', 5);
-- An autocommit fence_check ended with its statement: nothing is held.
SELECT count(*) FROM fence_held;
UPDATE w SET v = 'b';
-- Inside a transaction the fence lasts until COMMIT.
BEGIN;
SELECT fence_check('r', 5);
SELECT * FROM fence_held;
UPDATE w SET v = 'b';
DELETE FROM w WHERE 0;
COMMIT;
SELECT * FROM fence_held;
UPDATE w SET v = 'c';
-- ... and until ROLLBACK.
BEGIN;
SELECT fence_check('r', 6);
ROLLBACK;
SELECT fence_current('r');
UPDATE w SET v = 'c';
-- A savepoint rolled back undoes what it accepted, the advance included.
BEGIN;
SELECT fence_check('r', 5);
SAVEPOINT s1;
SELECT fence_check('r', 7);
SELECT fence_check('q', 1);
SELECT * FROM fence_held ORDER BY resource;
ROLLBACK TO s1;
SELECT * FROM fence_held ORDER BY resource;
SELECT fence_current('r'), quote(fence_current('q'));
RELEASE s1;
-- what came before the savepoint is still held
UPDATE w SET v = 'd';
COMMIT;
-- A savepoint taken before the first fence of the transaction.
BEGIN;
SAVEPOINT outer_sp;
SAVEPOINT inner_sp;
SELECT fence_check('r', 5);
ROLLBACK TO outer_sp;
SELECT count(*) FROM fence_held;
UPDATE w SET v = 'e';
ROLLBACK;
-- Released savepoints keep what they accepted.
BEGIN;
SAVEPOINT s2;
SELECT fence_check('r', 5);
RELEASE s2;
SELECT * FROM fence_held;
UPDATE w SET v = 'e';
COMMIT;
-- Savepoints nested deeper than fence keeps marks for without allocating
-- (four): each level fences a resource of its own, and rolling back to a
-- level undoes exactly what came after it, the deep levels first.
BEGIN;
SELECT fence_check('d0', 1);
SAVEPOINT d1; SELECT fence_check('d1', 1);
SAVEPOINT d2; SELECT fence_check('d2', 1);
SAVEPOINT d3; SELECT fence_check('d3', 1);
SAVEPOINT d4; SELECT fence_check('d4', 1);
SAVEPOINT d5; SELECT fence_check('d5', 1);
SAVEPOINT d6; SELECT fence_check('d6', 1);
SAVEPOINT d7; SELECT fence_check('d7', 1);
SAVEPOINT d8; SELECT fence_check('d8', 1);
SELECT group_concat(resource, ' ') FROM fence_held;
ROLLBACK TO d7;
SELECT group_concat(resource, ' ') FROM fence_held;
ROLLBACK TO d5;
SELECT group_concat(resource, ' ') FROM fence_held;
SAVEPOINT d6b; SELECT fence_check('d6b', 1);
ROLLBACK TO d2;
SELECT group_concat(resource, ' ') FROM fence_held;
COMMIT;
SELECT group_concat(resource, ' ') FROM fence_tokens WHERE resource LIKE 'd%';
-- SAVEPOINT outside BEGIN opens the transaction; RELEASE commits it.
SAVEPOINT lone;
SELECT fence_check('r', 5);
UPDATE w SET v = 'f';
RELEASE lone;
SELECT count(*) FROM fence_held;
UPDATE w SET v = 'g';
-- A failed statement undoes what it accepted (the statement journal):
-- the first row's fence on 'k' goes with the statement.
CREATE TABLE multi(id INTEGER PRIMARY KEY, tok INTEGER);
SELECT fence_protect('multi', 'tok', 'k');
BEGIN;
INSERT INTO multi VALUES (1, 3);
INSERT INTO multi VALUES (2, 9), (3, NULL);
SELECT * FROM fence_held ORDER BY resource;
SELECT fence_current('k');
SELECT id, tok FROM multi;
COMMIT;
-- A plain SELECT has no statement journal: a SELECT that calls fence_check
-- twice and fails on the second keeps the first (SPEC.md "Errors").
BEGIN;
SELECT fence_check('p1', 1), fence_check('p2', -1);
SELECT * FROM fence_held ORDER BY resource;
COMMIT;
SELECT fence_current('p1');
-- fence_reset in a transaction drops the fence it held; ROLLBACK brings
-- both back.
BEGIN;
SELECT fence_check('r', 5);
SELECT quote(fence_reset('r'));
SELECT count(*) FROM fence_held;
UPDATE w SET v = 'h';
ROLLBACK;
SELECT fence_current('r');
-- Many resources in one transaction, and the state is empty after it.
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
SELECT count(fence_check('many-' || i, i)) FROM n;
SELECT count(*) FROM fence_held;
COMMIT;
SELECT count(*) FROM fence_held;
SELECT count(*) FROM fence_tokens WHERE resource LIKE 'many-%';
-- fence_held is maintained by fence alone.
INSERT INTO fence_held VALUES ('r', 99);
DELETE FROM fence_held;
-- a scan of fence_held that takes fences ends (found by tests/fuzz): it
-- reads what was held when it began
BEGIN;
SELECT fence_check('scan', 1);
SELECT max(fence_check(resource, token + 1)) FROM fence_held;
SELECT * FROM fence_held WHERE resource = 'scan';
COMMIT;
