-- A table guarded by one fence with a token column (SPEC.md "Protected
-- tables"): INSERT takes its token from the column, an UPDATE that sets it
-- is checked with the new value, an UPDATE that does not and every DELETE
-- and TRUNCATE must run fenced.
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
CREATE TABLE counter (id int PRIMARY KEY, n int, tok bigint);
SELECT fence_protect('counter', 'tok', 'pt:counter');
SELECT tgname, tgtype, pg_get_triggerdef(oid) FROM pg_trigger
 WHERE tgrelid = 'counter'::regclass ORDER BY tgname;
INSERT INTO counter VALUES (1, 0, 5);
INSERT INTO counter VALUES (2, 0, 5);
INSERT INTO counter VALUES (3, 0, 4);
\echo :LAST_ERROR_SQLSTATE
-- a NULL token is "fencing token required" (23T02), whatever is held
INSERT INTO counter VALUES (3, 0, NULL);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT fence_check('pt:counter', 5);
INSERT INTO counter VALUES (3, 0, NULL);
ROLLBACK;
INSERT INTO counter VALUES (3, 0, -1);
SELECT id, n, tok FROM counter ORDER BY id;
-- UPDATE that sets the token: checked with the new value
UPDATE counter SET n = n + 1, tok = 5 WHERE id = 1;
UPDATE counter SET n = n + 1, tok = 6 WHERE id = 1;
UPDATE counter SET n = n + 1, tok = 5 WHERE id = 1;
UPDATE counter SET tok = NULL WHERE id = 1;
-- SET tok = tok sets the token column: the stale value is checked
UPDATE counter SET tok = tok WHERE id = 2;
SELECT id, n, tok FROM counter ORDER BY id;
-- UPDATE that leaves the token out must run fenced
UPDATE counter SET n = 100 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
UPDATE counter SET n = 100;
BEGIN;
SELECT fence_check('pt:counter', 6);
UPDATE counter SET n = 100 WHERE id = 1;
COMMIT;
-- an UPDATE that touches no row needs no fence
UPDATE counter SET n = 0 WHERE id = 99;
-- DELETE must run fenced
DELETE FROM counter WHERE id = 2;
BEGIN;
SELECT fence_check('pt:counter', 6);
DELETE FROM counter WHERE id = 2;
COMMIT;
-- UPSERT: checked as an INSERT and as an UPDATE of the row
INSERT INTO counter VALUES (1, 7, 5) ON CONFLICT (id) DO UPDATE SET n = excluded.n;
INSERT INTO counter VALUES (1, 7, 6) ON CONFLICT (id) DO UPDATE SET n = excluded.n;
INSERT INTO counter VALUES (1, 8, 7) ON CONFLICT (id) DO UPDATE SET n = excluded.n, tok = excluded.tok;
SELECT id, n, tok FROM counter ORDER BY id;
-- a multi-row statement that fails on its last row leaves nothing
INSERT INTO counter VALUES (10, 0, 7), (11, 0, 8), (12, 0, 6);
SELECT count(*) FROM counter WHERE id >= 10;
SELECT fence_current('pt:counter');
-- TRUNCATE needs a fence on the table's resource
TRUNCATE counter;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT fence_check('pt:counter', 7);
TRUNCATE counter;
ROLLBACK;
SELECT count(*) FROM counter;
-- a token column of integer or smallint works as well
CREATE TABLE small (id int PRIMARY KEY, tok smallint);
SELECT fence_protect('small', 'tok', 'pt:small');
INSERT INTO small VALUES (1, 3);
INSERT INTO small VALUES (2, 2);
-- protecting again replaces the guard (here: a new resource)
SELECT fence_protect('counter', 'tok', 'pt:counter-v2');
SELECT count(*) FROM pg_trigger WHERE tgrelid = 'counter'::regclass;
INSERT INTO counter VALUES (20, 0, 1);
SELECT fence_current('pt:counter-v2');
-- fence_unprotect removes it; unprotecting again is harmless
SELECT fence_unprotect('counter');
SELECT count(*) FROM pg_trigger WHERE tgrelid = 'counter'::regclass;
INSERT INTO counter VALUES (21, 0, NULL);
SELECT fence_unprotect('counter');
-- a missing table or column is an error; so are views and the wrong type
SELECT fence_protect('no_such_table', 'tok', 'pt:x');
SELECT fence_protect('counter', 'no_such_column', 'pt:x');
SELECT fence_protect('counter', 'n', NULL);
SELECT fence_protect('counter', 'n', '');
SELECT fence_protect('counter', 'n', repeat('x', 1025));
CREATE TABLE texttok (id int, tok text);
SELECT fence_protect('texttok', 'tok', 'pt:x');
CREATE VIEW counter_view AS SELECT * FROM counter;
SELECT fence_protect('counter_view', 'tok', 'pt:x');
SELECT fence_protect('fence_tokens', 'token', 'pt:x');
SELECT fence_protect(NULL, 'tok', 'pt:x');
-- the trigger function cannot be misused
CREATE TABLE misuse (id int);
CREATE TRIGGER misuse AFTER INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION fence_guard('', 'r', '');
INSERT INTO misuse VALUES (1);
SELECT fence_guard();
DROP TABLE counter, small, texttok, misuse CASCADE;
