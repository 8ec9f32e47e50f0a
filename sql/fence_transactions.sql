-- "Fenced on r at t" (SPEC.md "Transaction scope"): a fence lasts until
-- the transaction ends, and a savepoint rolled back undoes what it accepted.
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
CREATE TABLE w (id int PRIMARY KEY, v text);
INSERT INTO w VALUES (1, 'a');
SELECT fence_protect('w', NULL, 'tx:r');
-- an autocommit fence_check ends with its statement
SELECT fence_check('tx:r', 5);
UPDATE w SET v = 'b';
BEGIN;
SELECT fence_check('tx:r', 5);
UPDATE w SET v = 'b';
COMMIT;
UPDATE w SET v = 'c';
-- a savepoint rolled back undoes its accept, the advance included
BEGIN;
SELECT fence_check('tx:r', 5);
SAVEPOINT s1;
SELECT fence_check('tx:r', 7);
SELECT fence_check('tx:q', 1);
ROLLBACK TO s1;
SELECT fence_current('tx:r'), fence_current('tx:q');
UPDATE w SET v = 'd';
COMMIT;
-- a fence taken only inside a rolled-back savepoint is gone
BEGIN;
SAVEPOINT s2;
SELECT fence_check('tx:r', 5);
ROLLBACK TO s2;
UPDATE w SET v = 'e';
ROLLBACK;
-- a released savepoint keeps its fence
BEGIN;
SAVEPOINT s3;
SELECT fence_check('tx:r', 5);
RELEASE s3;
UPDATE w SET v = 'e';
COMMIT;
-- a failed statement inside a savepoint leaves the earlier fence intact
BEGIN;
SELECT fence_check('tx:r', 5);
SAVEPOINT s4;
SELECT fence_check('tx:r', 4);
ROLLBACK TO s4;
UPDATE w SET v = 'f';
COMMIT;
-- fence_reset in a transaction drops its fence; ROLLBACK restores both
BEGIN;
SELECT fence_check('tx:r', 5);
SELECT fence_reset('tx:r');
UPDATE w SET v = 'g';
ROLLBACK;
SELECT fence_current('tx:r');
-- a read-only transaction can hold an equal fence but not advance one
BEGIN READ ONLY;
SELECT fence_check('tx:r', 5);
SELECT fence_check('tx:r', 6);
ROLLBACK;
-- PREPARE TRANSACTION keeps the fence's writes; the prepared transaction
-- holds its lock until COMMIT PREPARED
BEGIN;
SELECT fence_check('tx:r', 8);
UPDATE w SET v = 'h';
PREPARE TRANSACTION 'fence_tx';
SELECT mode, granted FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 17989;
DELETE FROM w WHERE false;
COMMIT PREPARED 'fence_tx';
SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 17989;
SELECT fence_current('tx:r'), v FROM w;
-- the same three statements at every isolation level
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT fence_check('tx:r', 8);
UPDATE w SET v = 'rr';
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT fence_check('tx:r', 9);
UPDATE w SET v = 'ser';
COMMIT;
SELECT fence_current('tx:r'), v FROM w;
DROP TABLE w;
