-- A table guarded by one fence with a token column (SPEC.md "Protected
-- tables"): INSERT takes its token from the column, an UPDATE that sets it
-- is checked with the new value, an UPDATE that does not and every DELETE
-- must run fenced.
CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER, tok INTEGER);
SELECT quote(fence_protect('counter', 'tok', 'counter-lock'));
SELECT name FROM sqlite_schema WHERE type = 'trigger' ORDER BY name;
-- INSERT: the token is checked and accepted
INSERT INTO counter VALUES (1, 0, 5);
SELECT fence_current('counter-lock');
INSERT INTO counter VALUES (2, 0, 5);
INSERT INTO counter VALUES (3, 0, 4);
-- a NULL token is "fencing token required", whatever the transaction holds
INSERT INTO counter VALUES (3, 0, NULL);
BEGIN;
SELECT fence_check('counter-lock', 5);
INSERT INTO counter VALUES (3, 0, NULL);
COMMIT;
-- a token that is not an INTEGER is invalid, never coerced
INSERT INTO counter VALUES (3, 0, 'five');
INSERT INTO counter VALUES (3, 0, 5.5);
INSERT INTO counter VALUES (3, 0, -1);
SELECT id, n, tok FROM counter ORDER BY id;
-- UPDATE that sets the token: checked with the new value
UPDATE counter SET n = n + 1, tok = 5 WHERE id = 1;
UPDATE counter SET n = n + 1, tok = 6 WHERE id = 1;
UPDATE counter SET n = n + 1, tok = 5 WHERE id = 1;
UPDATE counter SET tok = NULL WHERE id = 1;
-- SET tok = tok sets the token column: the (now stale) value is checked
UPDATE counter SET tok = tok WHERE id = 2;
SELECT id, n, tok FROM counter ORDER BY id;
-- UPDATE that leaves the token out must run fenced; it is never a way round
UPDATE counter SET n = 100 WHERE id = 1;
UPDATE counter SET n = 100;
BEGIN;
SELECT fence_check('counter-lock', 5);
ROLLBACK;
BEGIN;
SELECT fence_check('counter-lock', 6);
UPDATE counter SET n = 100 WHERE id = 1;
COMMIT;
-- an UPDATE that touches no row needs no fence
UPDATE counter SET n = 0 WHERE id = 99;
-- DELETE must run fenced
DELETE FROM counter WHERE id = 2;
DELETE FROM counter;
BEGIN;
SELECT fence_check('counter-lock', 6);
DELETE FROM counter WHERE id = 2;
COMMIT;
SELECT id, n, tok FROM counter ORDER BY id;
-- UPSERT: checked as an INSERT and as an UPDATE of the row
INSERT INTO counter VALUES (1, 7, 5) ON CONFLICT(id) DO UPDATE SET n = excluded.n;
INSERT INTO counter VALUES (1, 7, 6) ON CONFLICT(id) DO UPDATE SET n = excluded.n;
INSERT INTO counter VALUES (1, 8, 7) ON CONFLICT(id) DO UPDATE SET n = excluded.n, tok = excluded.tok;
SELECT id, n, tok FROM counter ORDER BY id;
-- INSERT OR REPLACE of an existing row: the new row's token is checked
INSERT OR REPLACE INTO counter VALUES (1, 9, 6);
INSERT OR REPLACE INTO counter VALUES (1, 9, 7);
SELECT id, n, tok FROM counter ORDER BY id;
-- a multi-row statement that fails on its last row leaves nothing
INSERT INTO counter VALUES (10, 0, 7), (11, 0, 8), (12, 0, 6);
SELECT count(*) FROM counter WHERE id >= 10;
SELECT fence_current('counter-lock');
-- protecting again replaces the guard (here: a new resource)
SELECT quote(fence_protect('counter', 'tok', 'counter-lock-v2'));
SELECT count(*) FROM sqlite_schema WHERE type = 'trigger';
INSERT INTO counter VALUES (20, 0, 1);
SELECT fence_current('counter-lock-v2');
-- fence_unprotect removes it; unprotecting again is harmless
SELECT quote(fence_unprotect('counter'));
SELECT count(*) FROM sqlite_schema WHERE type = 'trigger';
INSERT INTO counter VALUES (21, 0, NULL);
SELECT quote(fence_unprotect('counter'));
-- a missing table or column is an error; so are views and fence_tokens
SELECT fence_protect('no_such_table', 'tok', 'r');
SELECT fence_protect('counter', 'no_such_column', 'r');
SELECT fence_protect('counter', 'rowid', 'r');
CREATE VIEW counter_view AS SELECT * FROM counter;
SELECT fence_protect('counter_view', 'tok', 'r');
SELECT fence_protect('fence_tokens', 'token', 'r');
SELECT fence_unprotect('no_such_table');
-- bad arguments to fence_protect are invalid input
SELECT fence_protect(NULL, 'tok', 'r');
SELECT fence_protect('counter', 'tok', '');
SELECT fence_protect('counter', 'tok', NULL);
SELECT fence_protect('counter', 'tok', printf('%.*c', 1025, 'x'));
SELECT fence_protect('counter', 5, 'r');
-- names are matched as SQLite matches them (case-insensitively) and quoted
CREATE TABLE "Odd ""Name"""(id INTEGER PRIMARY KEY, "Tok Col" INTEGER);
SELECT quote(fence_protect('odd "name"', 'tok col', 'odd'));
INSERT INTO "Odd ""Name""" VALUES (1, 3);
INSERT INTO "Odd ""Name""" VALUES (2, 2);
SELECT quote(fence_unprotect('ODD "NAME"'));
SELECT count(*) FROM sqlite_schema WHERE type = 'trigger';
