-- A table guarded without a token column: every INSERT, UPDATE, DELETE and
-- TRUNCATE must run in a transaction fenced on the resource.
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
CREATE TABLE ledger (id int PRIMARY KEY, amount int);
SELECT fence_protect('ledger', NULL, 'tl:ledger');
INSERT INTO ledger VALUES (1, 10);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT fence_check('tl:ledger', 3);
INSERT INTO ledger VALUES (1, 10), (2, 20);
UPDATE ledger SET amount = amount + 1;
DELETE FROM ledger WHERE id = 2;
COMMIT;
SELECT id, amount FROM ledger;
UPDATE ledger SET amount = 0;
DELETE FROM ledger;
-- a fence on another resource does not count
BEGIN;
SELECT fence_check('tl:other', 3);
UPDATE ledger SET amount = 0;
ROLLBACK;
-- fence_try that returned false holds nothing; true is a fence
SELECT fence_check('tl:ledger', 4);
BEGIN;
SELECT fence_try('tl:ledger', 3);
DELETE FROM ledger;
ROLLBACK;
BEGIN;
SELECT fence_try('tl:ledger', 4);
DELETE FROM ledger;
TRUNCATE ledger;
COMMIT;
SELECT count(*) FROM ledger;
DROP TABLE ledger;
