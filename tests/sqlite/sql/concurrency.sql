-- Two connections on one WAL database file (SPEC.md "Transaction scope":
-- in SQLite the single writer lock gives the order). Busy timeouts are 0,
-- so waiting shows as SQLITE_BUSY.
PRAGMA journal_mode = WAL;
CREATE TABLE w(id INTEGER PRIMARY KEY, v TEXT, tok INTEGER);
SELECT quote(fence_protect('w', 'tok', 'r'));
INSERT INTO w VALUES (1, 'a', 5);
-- A transaction fenced at 5 by an equal accept takes no write lock (it
-- writes nothing): a higher token can commit in between, and then the
-- holder's write cannot commit (SQLITE_BUSY_SNAPSHOT: its snapshot is older
-- than the newest commit), so nothing is written at 5 after 6.
BEGIN;
SELECT fence_check('r', 5);
\connect b
SELECT fence_check('r', 6);
SELECT fence_current('r');
\connect main
UPDATE w SET v = 'by 5';
COMMIT;
-- the advance stays ...
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
-- after another connection committed a higher token: its equal accept is
-- judged in that snapshot, and its write ends in SQLITE_BUSY, never in a
-- committed stale write.
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
