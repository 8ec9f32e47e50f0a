-- One fence per row (SPEC.md "Protected tables", "Precise points"): the
-- row's resource is the prefix followed by the key column as text.
CREATE TABLE account(id INTEGER, name TEXT, balance INTEGER, tok INTEGER,
                     PRIMARY KEY (id));
SELECT quote(fence_protect('account', 'tok', 'account:', 'id'));
SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' ORDER BY name;
INSERT INTO account VALUES (17, 'ann', 100, 5);
INSERT INTO account VALUES (18, 'bob', 100, 1);
SELECT resource, token FROM fence_tokens ORDER BY resource;
-- each row has its own fence
UPDATE account SET balance = 90, tok = 4 WHERE id = 17;
UPDATE account SET balance = 90, tok = 4 WHERE id = 18;
SELECT resource, token FROM fence_tokens ORDER BY resource;
-- UPDATE and DELETE without a token need a fence on that row's resource
BEGIN;
SELECT fence_check('account:17', 5);
UPDATE account SET balance = 1 WHERE id = 17;
UPDATE account SET balance = 1 WHERE id = 18;
DELETE FROM account WHERE id = 18;
UPDATE account SET balance = 2;
COMMIT;
SELECT id, balance FROM account ORDER BY id;
-- an UPDATE that changes the key is checked under the old and new resource:
-- with a token, that token under both
SELECT fence_check('account:19', 6);
UPDATE account SET id = 19, tok = 5 WHERE id = 17;
UPDATE account SET id = 19, tok = 4 WHERE id = 17;
UPDATE account SET id = 19, tok = 6 WHERE id = 17;
SELECT resource, token FROM fence_tokens ORDER BY resource;
SELECT id, tok FROM account ORDER BY id;
-- without a token, the transaction must hold both fences
BEGIN;
SELECT fence_check('account:19', 6);
UPDATE account SET id = 20 WHERE id = 19;
SELECT fence_check('account:20', 0);
UPDATE account SET id = 20 WHERE id = 19;
COMMIT;
SELECT id FROM account ORDER BY id;
-- a NULL key, or a prefix plus key over 1024 bytes, is invalid
CREATE TABLE doc(path TEXT PRIMARY KEY, body TEXT, tok INTEGER);
SELECT quote(fence_protect('doc', 'tok', 'doc:', 'path'));
INSERT INTO doc VALUES (printf('%.*c', 1020, 'p'), 'ok', 1);
INSERT INTO doc VALUES (printf('%.*c', 1021, 'p'), 'long', 1);
INSERT INTO doc VALUES (NULL, 'null key', 1);
-- text and integer keys read as CAST(key AS TEXT)
INSERT INTO doc VALUES (42, 'integer key', 3);
INSERT INTO doc VALUES ('42', 'text key', 2);
SELECT fence_current('doc:42');
-- a key that is the INTEGER PRIMARY KEY: SQLite may assign it, so the
-- insert is checked after the row has its id
CREATE TABLE job(id INTEGER PRIMARY KEY, state TEXT, tok INTEGER);
SELECT quote(fence_protect('job', 'tok', 'job-', 'id'));
SELECT sql FROM sqlite_schema WHERE name = 'fence_insert:job';
INSERT INTO job(state, tok) VALUES ('new', 7);
INSERT INTO job(id, state, tok) VALUES (5, 'new', 2);
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'job-%' ORDER BY resource;
-- an empty prefix is allowed: the key alone is the resource
CREATE TABLE bare(k TEXT PRIMARY KEY, tok INTEGER);
SELECT quote(fence_protect('bare', 'tok', '', 'k'));
INSERT INTO bare VALUES ('bare-key', 1);
SELECT fence_current('bare-key');
INSERT INTO bare VALUES ('', 1);
-- per-row resources without a token column
CREATE TABLE seat(n INTEGER PRIMARY KEY, holder TEXT);
INSERT INTO seat VALUES (1, NULL), (2, NULL);
SELECT quote(fence_protect('seat', NULL, 'seat/', 'n'));
UPDATE seat SET holder = 'ann' WHERE n = 1;
BEGIN;
SELECT fence_check('seat/1', 1);
UPDATE seat SET holder = 'ann' WHERE n = 1;
UPDATE seat SET holder = 'ann' WHERE n = 2;
INSERT INTO seat VALUES (3, 'x');
COMMIT;
SELECT n, holder FROM seat ORDER BY n;
-- a missing key column is an error
SELECT fence_protect('seat', NULL, 'seat/', 'nope');
SELECT fence_protect('seat', NULL, 'seat/', NULL);
