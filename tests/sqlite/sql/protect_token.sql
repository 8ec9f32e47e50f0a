-- What SQLite adds to tests/corpus/protect_token.test: the triggers that
-- make the guard, tokens of the wrong storage class in a row, INSERT OR
-- REPLACE, and how tables and columns are named and refused.
CREATE TABLE counter(id INTEGER PRIMARY KEY, n INTEGER, tok INTEGER);
SELECT quote(fence_protect('counter', 'tok', 'counter-lock'));
SELECT replace(s.name, g.id, 'G'), replace(s.sql, g.id, 'G') FROM sqlite_schema AS s JOIN fence_guards AS g ON s.name GLOB 'fence:' || g.id || ':*'
 WHERE s.tbl_name = 'counter' ORDER BY s.name;
INSERT INTO counter VALUES (1, 0, 5);
-- a token that is not an INTEGER is invalid, never coerced
INSERT INTO counter VALUES (3, 0, 'five');
INSERT INTO counter VALUES (3, 0, 5.5);
INSERT INTO counter VALUES (3, 0, x'05');
SELECT id, n, tok FROM counter ORDER BY id;
-- the full messages, with their result codes
INSERT INTO counter VALUES (3, 0, 4);
INSERT INTO counter VALUES (3, 0, NULL);
UPDATE counter SET n = 1;
-- INSERT OR REPLACE of an existing row: the new row's token is checked
INSERT OR REPLACE INTO counter VALUES (1, 9, 6);
INSERT OR REPLACE INTO counter VALUES (1, 9, 7);
SELECT id, n, tok FROM counter ORDER BY id;
-- protecting again replaces the guard: still four triggers
SELECT quote(fence_protect('counter', 'tok', 'counter-lock-v2'));
SELECT count(*) FROM sqlite_schema WHERE type = 'trigger';
SELECT quote(fence_unprotect('counter'));
SELECT count(*) FROM sqlite_schema WHERE type = 'trigger';
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
