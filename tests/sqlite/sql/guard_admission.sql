-- What the guard refuses besides stale and missing tokens, with the full
-- messages (tests/sqlite_attacks_guard.py tries each as an attack and
-- checks what committed): columns fence_protect will not guard, a journal
-- that cannot undo, recursive_triggers off where a REPLACE reaches across
-- keys, a planted caller, a guard made by an older fence.
CREATE TABLE t_text(id INTEGER PRIMARY KEY, tok TEXT);
SELECT fence_protect('t_text', 'tok', 'r');
CREATE TABLE t_real(id INTEGER PRIMARY KEY, tok DOUBLE PRECISION);
SELECT fence_protect('t_real', 'tok', 'r');
CREATE TABLE t_nocase(k TEXT PRIMARY KEY COLLATE NOCASE, tok INTEGER);
SELECT fence_protect('t_nocase', 'tok', 'p:', 'k');
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
-- a REPLACE through u can delete another key's row: only with
-- recursive_triggers on does it meet the DELETE guard (off by default, but
-- on in a build made with SQLITE_DEFAULT_RECURSIVE_TRIGGERS=1)
PRAGMA recursive_triggers = OFF;
INSERT INTO acct VALUES ('a', 'ua', 1, 5), ('b', 'ub', 1, 5);
PRAGMA recursive_triggers = ON;
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
-- REPLACE through the UNIQUE column u deletes row a: a DELETE of acct:a,
-- which needs a fence on acct:a (the new row's token is for acct:d)
SELECT fence_check('acct:a', 9);
INSERT OR REPLACE INTO acct VALUES ('d', 'ua', 1, 6);
BEGIN;
SELECT fence_check('acct:a', 9);
INSERT OR REPLACE INTO acct VALUES ('d', 'ua', 1, 6);
COMMIT;
SELECT k, u, tok FROM acct ORDER BY k;
-- a table whose only UNIQUE key is its INTEGER PRIMARY KEY key needs no setting
CREATE TABLE ipk(id INTEGER PRIMARY KEY, tok INTEGER);
SELECT quote(fence_protect('ipk', 'tok', 'ipk:', 'id'));
PRAGMA recursive_triggers = OFF;
INSERT OR REPLACE INTO ipk VALUES (1, 5);
-- until a UNIQUE index made later lets a REPLACE reach another key's row
ALTER TABLE ipk ADD COLUMN v TEXT;
CREATE UNIQUE INDEX ipk_v_u ON ipk(v);
INSERT OR REPLACE INTO ipk VALUES (2, 5, 'x');
PRAGMA recursive_triggers = ON;
INSERT OR REPLACE INTO ipk VALUES (2, 5, 'x');
SELECT id, v FROM ipk ORDER BY id;
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
