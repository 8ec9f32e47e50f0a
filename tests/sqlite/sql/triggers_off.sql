-- A connection remembers fence_tokens from one of its transactions to the
-- next, watched by TEMP triggers. An application that turns triggers off
-- (sqlite3_db_config SQLITE_DBCONFIG_ENABLE_TRIGGER) and raises a highest
-- token by hand must still have every later stale write refused: the
-- assertions are on what committed (w and fence_tokens).
CREATE TABLE w(id INTEGER PRIMARY KEY, tok INTEGER, n INTEGER NOT NULL);
SELECT fence_protect('w', 'tok', 'r');
INSERT INTO w VALUES (1, 10, 0);
-- a connection that loads fence once fence_tokens exists makes the watch
\connect app
SELECT count(*) FROM temp.sqlite_master WHERE name GLOB 'fence:watch:*';
BEGIN;
UPDATE w SET tok = 10, n = n + 1 WHERE id = 1;
COMMIT;
BEGIN;
UPDATE w SET tok = 10, n = n + 1 WHERE id = 1;
COMMIT;
-- 1. between two transactions at token 10: off, the highest raised to 20, on
\triggers off
UPDATE fence_tokens SET token = 20 WHERE resource = 'r';
\triggers on
BEGIN;
UPDATE w SET tok = 15, n = n + 1 WHERE id = 1;
SELECT fence_check('r', 15);
COMMIT;
SELECT tok, n FROM w;
SELECT resource, token FROM fence_tokens;
-- 2. raised by hand in a transaction that commits with triggers still off
BEGIN;
UPDATE w SET tok = 20, n = n + 1 WHERE id = 1;
COMMIT;
\triggers off
BEGIN;
UPDATE fence_tokens SET token = 30 WHERE resource = 'r';
COMMIT;
\triggers on
BEGIN;
UPDATE w SET tok = 25, n = n + 1 WHERE id = 1;
COMMIT;
SELECT tok, n FROM w;
SELECT resource, token FROM fence_tokens;
-- 3. off, raised and on again inside a transaction that took the
-- connection's memory: the next transaction reads fence_tokens again
BEGIN;
UPDATE w SET tok = 30, n = n + 1 WHERE id = 1;
\triggers off
UPDATE fence_tokens SET token = 40 WHERE resource = 'r';
\triggers on
COMMIT;
BEGIN;
UPDATE w SET tok = 35, n = n + 1 WHERE id = 1;
COMMIT;
SELECT tok, n FROM w;
SELECT resource, token FROM fence_tokens;
-- 4. with triggers off the guard does not run at all, but fence_check still
-- judges by fence_tokens, not by what the connection remembers
BEGIN;
UPDATE w SET tok = 40, n = n + 1 WHERE id = 1;
COMMIT;
\triggers off
UPDATE fence_tokens SET token = 50 WHERE resource = 'r';
BEGIN;
SELECT fence_check('r', 45);
COMMIT;
\triggers on
SELECT resource, token FROM fence_tokens;
SELECT tok, n FROM w;
-- 5. off for three transactions in a row, the second raising the highest
-- by hand after its own accept: the third, at the token the second
-- accepted, must not take the second's word for it
\triggers off
BEGIN;
SELECT fence_check('r', 50);
COMMIT;
BEGIN;
SELECT fence_check('r', 50);
UPDATE fence_tokens SET token = 60 WHERE resource = 'r';
COMMIT;
BEGIN;
SELECT fence_check('r', 50);
COMMIT;
\triggers on
SELECT resource, token FROM fence_tokens;
