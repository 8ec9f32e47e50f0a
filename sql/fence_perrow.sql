-- One fence per row: the row's resource is the prefix followed by the key
-- column as text (SPEC.md "Protected tables", "Precise points").
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
CREATE TABLE account (id int PRIMARY KEY, name text, balance int, tok bigint);
SELECT fence_protect('account', 'tok', 'pr:account:', 'id');
INSERT INTO account VALUES (17, 'ann', 100, 5), (18, 'bob', 100, 1);
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'pr:%' ORDER BY resource;
-- each row has its own fence
UPDATE account SET balance = 90, tok = 4 WHERE id = 17;
UPDATE account SET balance = 90, tok = 4 WHERE id = 18;
-- UPDATE and DELETE without a token need a fence on the row's resource
BEGIN;
SELECT fence_check('pr:account:17', 5);
UPDATE account SET balance = 1 WHERE id = 17;
SAVEPOINT s;
UPDATE account SET balance = 1 WHERE id = 18;
ROLLBACK TO s;
DELETE FROM account WHERE id = 18;
ROLLBACK TO s;
COMMIT;
SELECT id, balance FROM account ORDER BY id;
-- a key change is checked under the old and the new resource
SELECT fence_check('pr:account:19', 6);
UPDATE account SET id = 19, tok = 5 WHERE id = 17;
UPDATE account SET id = 19, tok = 4 WHERE id = 17;
UPDATE account SET id = 19, tok = 6 WHERE id = 17;
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'pr:%' ORDER BY resource;
BEGIN;
SELECT fence_check('pr:account:19', 6);
UPDATE account SET id = 20 WHERE id = 19;
ROLLBACK;
BEGIN;
SELECT fence_check('pr:account:19', 6), fence_check('pr:account:20', 0);
UPDATE account SET id = 20 WHERE id = 19;
COMMIT;
SELECT id, tok FROM account ORDER BY id;
-- TRUNCATE of a per-row table is refused
BEGIN;
SELECT fence_check('pr:account:20', 6);
TRUNCATE account;
ROLLBACK;
-- a NULL key, or a prefix plus key over 1024 bytes, is invalid
CREATE TABLE doc (path text, body text, tok bigint);
SELECT fence_protect('doc', 'tok', 'pr:doc:', 'path');
INSERT INTO doc VALUES (NULL, 'null key', 1);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO doc VALUES (repeat('p', 1017), 'fits', 1);
INSERT INTO doc VALUES (repeat('p', 1018), 'too long', 1);
-- the key becomes text as ::text does; integer and text keys read the same
INSERT INTO doc VALUES ('42', 'text key', 3);
CREATE TABLE job (id bigint PRIMARY KEY, tok bigint);
SELECT fence_protect('job', 'tok', 'pr:doc:', 'id');
INSERT INTO job VALUES (42, 2);
SELECT fence_current('pr:doc:42');
CREATE TABLE padded (k char(6) PRIMARY KEY, tok bigint);
SELECT fence_protect('padded', 'tok', 'pr:pad:', 'k');
INSERT INTO padded VALUES ('ab', 1);
SELECT resource FROM fence_tokens WHERE resource LIKE 'pr:pad:%';
CREATE TABLE host (addr inet PRIMARY KEY, tok bigint);
SELECT fence_protect('host', 'tok', 'pr:host:', 'addr');
INSERT INTO host VALUES ('10.0.0.1', 1);
SELECT resource FROM fence_tokens WHERE resource LIKE 'pr:host:%';
-- per-row resources without a token column
CREATE TABLE seat (n int PRIMARY KEY, holder text);
INSERT INTO seat VALUES (1, NULL), (2, NULL);
SELECT fence_protect('seat', NULL, 'pr:seat/', 'n');
UPDATE seat SET holder = 'ann' WHERE n = 1;
BEGIN;
SELECT fence_check('pr:seat/1', 1);
UPDATE seat SET holder = 'ann' WHERE n = 1;
COMMIT;
SELECT n, holder FROM seat ORDER BY n;
-- a missing key column
SELECT fence_protect('seat', NULL, 'pr:seat/', 'nope');
SELECT fence_protect('seat', NULL, 'pr:seat/', NULL);
DROP TABLE account, doc, job, padded, host, seat;
