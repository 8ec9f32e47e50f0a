-- What the guard refuses besides stale and missing tokens, with the full
-- messages (tests/sqlite_attacks_guard.py tries each as an attack and
-- checks what committed): columns fence_protect will not guard, a journal
-- that cannot undo, a planted caller, a UNIQUE index added later, a guard
-- made by an older fence.
CREATE TABLE t_text(id INTEGER PRIMARY KEY, tok TEXT);
SELECT fence_protect('t_text', 'tok', 'r');
CREATE TABLE t_real(id INTEGER PRIMARY KEY, tok DOUBLE PRECISION);
SELECT fence_protect('t_real', 'tok', 'r');
CREATE TABLE t_nocase(k TEXT PRIMARY KEY COLLATE NOCASE, tok INTEGER);
SELECT fence_protect('t_nocase', 'tok', 'p:', 'k');
CREATE TABLE t_expr(k TEXT PRIMARY KEY, u TEXT, tok INTEGER);
CREATE UNIQUE INDEX t_expr_lower ON t_expr(lower(u));
SELECT fence_protect('t_expr', 'tok', 'p:', 'k');
SELECT count(*) FROM sqlite_schema WHERE type = 'trigger';
-- the numeric affinities and no type are tokens
CREATE TABLE t_num(id INTEGER PRIMARY KEY, tok NUMERIC);
SELECT quote(fence_protect('t_num', 'tok', 'num'));
INSERT INTO t_num VALUES (1, '7');
SELECT fence_current('num');
-- a generated token column is refused at fence_protect (issue 27 item 3)
CREATE TABLE t_gen(id INTEGER PRIMARY KEY, base INTEGER, tok INTEGER AS (base + 1));
SELECT fence_protect('t_gen', 'tok', 'gen');
CREATE TABLE t_gens(id INTEGER PRIMARY KEY, base INTEGER, tok INTEGER AS (base + 1) STORED);
SELECT fence_protect('t_gens', 'tok', 'gen');
SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND tbl_name LIKE 't_gen%';
-- journal_mode=OFF: refused before the first row is written
CREATE TABLE acct(k TEXT PRIMARY KEY, u TEXT UNIQUE, v INTEGER, tok INTEGER);
SELECT quote(fence_protect('acct', 'tok', 'acct:', 'k'));
INSERT INTO acct VALUES ('a', 'ua', 1, 5), ('b', 'ub', 1, 5);
PRAGMA journal_mode = OFF;
INSERT INTO acct VALUES ('c', 'uc', 1, 5);
-- journal_mode=MEMORY too: a holder killed mid-transaction would leave its
-- rows in the file (issue 27 item 2)
PRAGMA journal_mode = MEMORY;
INSERT INTO acct VALUES ('c', 'uc', 1, 5);
CREATE TABLE scratch(x);
BEGIN;
INSERT INTO scratch VALUES (1);
INSERT INTO acct VALUES ('c', 'uc', 1, 5);
ROLLBACK;
SELECT count(*) FROM acct WHERE k = 'c';
PRAGMA journal_mode = DELETE;
INSERT INTO acct VALUES ('c', 'uc', 1, 5);
-- REPLACE through the UNIQUE column u is checked as an UPDATE of row a
SELECT fence_check('acct:a', 9);
INSERT OR REPLACE INTO acct VALUES ('d', 'ua', 1, 6);
SELECT k, u, tok FROM acct ORDER BY k;
INSERT INTO acct VALUES ('e', 'ue', 1, 5);
-- a UNIQUE index created after fence_protect
CREATE UNIQUE INDEX acct_v ON acct(v, k);
INSERT INTO acct VALUES ('f', 'uf', 1, 5);
SELECT quote(fence_protect('acct', 'tok', 'acct:', 'k'));
INSERT INTO acct VALUES ('f', 'uf', 1, 5);
-- a guard trigger of fence 1.2 passes no guard id
CREATE TABLE legacy(id INTEGER PRIMARY KEY, tok INTEGER);
CREATE TRIGGER "fence_insert:legacy" BEFORE INSERT ON legacy
  BEGIN SELECT fence_guard_write('legacy', NEW.tok); END;
INSERT INTO legacy VALUES (1, 5);
SELECT quote(fence_protect('legacy', 'tok', 'legacy'));
INSERT INTO legacy VALUES (1, 5);
SELECT name FROM sqlite_schema WHERE name = 'fence_insert:legacy';
-- a guard function called from SQL with an id fence never recorded
BEGIN;
SELECT fence_check('acct:a', 9);
SELECT fence_guard_fenced(42, 'acct:', 'a');
SELECT fence_guard_write(42, 'acct:', 'a', 10);
ROLLBACK;
SELECT fence_current('acct:a');
