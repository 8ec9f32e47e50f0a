-- Two connections on one WAL database file (SPEC.md "Transaction scope":
-- in SQLite the single writer lock gives the order). Busy timeouts are 0,
-- so waiting shows as SQLITE_BUSY.
PRAGMA journal_mode = WAL;
CREATE TABLE w(id INTEGER PRIMARY KEY, v TEXT, tok INTEGER);
SELECT quote(fence_protect('w', 'tok', 'r'));
INSERT INTO w VALUES (1, 'a', 5);
-- A transaction fenced at 5 holds the write lock: no higher token can
-- commit in between, and the advance is told to wait.
BEGIN;
SELECT fence_check('r', 5);
\connect b
SELECT fence_check('r', 6);
SELECT fence_current('r');
\connect main
UPDATE w SET v = 'by 5';
COMMIT;
-- now the advance goes through ...
\connect b
SELECT fence_check('r', 6);
-- ... and the old holder's writes are stale
\connect main
UPDATE w SET v = 'zombie', tok = 5;
BEGIN;
SELECT fence_check('r', 5);
ROLLBACK;
SELECT id, v, tok FROM w;
-- A transaction that read an older snapshot cannot take the write lock
-- after another connection committed a higher token: SQLITE_BUSY, never an
-- accepted stale token.
BEGIN;
SELECT fence_current('r');
\connect b
UPDATE w SET v = 'by 7', tok = 7;
\connect main
SELECT fence_check('r', 6);
UPDATE w SET v = 'zombie', tok = 6;
ROLLBACK;
SELECT fence_check('r', 6);
SELECT id, v, tok FROM w;
