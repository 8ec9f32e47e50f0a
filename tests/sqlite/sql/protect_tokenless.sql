-- A table guarded without a token column (token_column NULL): every
-- INSERT, UPDATE and DELETE must run in a transaction fenced on the resource.
CREATE TABLE ledger(id INTEGER PRIMARY KEY, amount INTEGER);
SELECT quote(fence_protect('ledger', NULL, 'ledger-lock'));
SELECT name FROM sqlite_schema WHERE type = 'trigger' ORDER BY name;
INSERT INTO ledger VALUES (1, 10);
BEGIN;
SELECT fence_check('ledger-lock', 3);
INSERT INTO ledger VALUES (1, 10);
INSERT INTO ledger VALUES (2, 20);
UPDATE ledger SET amount = amount + 1;
DELETE FROM ledger WHERE id = 2;
COMMIT;
SELECT id, amount FROM ledger;
UPDATE ledger SET amount = 0;
DELETE FROM ledger;
-- a fence on another resource does not count
BEGIN;
SELECT fence_check('other-lock', 3);
UPDATE ledger SET amount = 0;
ROLLBACK;
-- fence_try that returned 0 holds nothing
SELECT fence_check('ledger-lock', 4);
BEGIN;
SELECT fence_try('ledger-lock', 3);
DELETE FROM ledger;
ROLLBACK;
-- fence_try that returned 1 is a fence
BEGIN;
SELECT fence_try('ledger-lock', 4);
DELETE FROM ledger;
COMMIT;
SELECT count(*) FROM ledger;
