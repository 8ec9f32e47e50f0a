-- The guard fails closed (SPEC.md "SQLite specifics", STYLE.md C6).
CREATE TABLE w(id INTEGER PRIMARY KEY, tok INTEGER);
SELECT quote(fence_protect('w', 'tok', 'r'));
INSERT INTO w VALUES (1, 5);
-- A connection that has not loaded fence cannot write a protected table,
-- even with a good token, nor bypass it by leaving the token out.
\connect plain noload
INSERT INTO w VALUES (2, 5);
UPDATE w SET tok = 9;
UPDATE w SET id = 3;
DELETE FROM w;
SELECT id, tok FROM w;
\close plain
\connect main
-- Under trusted_schema=OFF the guard may not run from the schema: writes
-- fail closed, and fence_check itself still works.
PRAGMA trusted_schema = OFF;
INSERT INTO w VALUES (2, 5);
DELETE FROM w;
SELECT fence_check('r', 5);
PRAGMA trusted_schema = ON;
INSERT INTO w VALUES (2, 5);
-- A view or trigger planted in the schema cannot move a fence: the
-- functions that change one are DIRECTONLY.
CREATE VIEW planted AS SELECT fence_check('r', 1000);
SELECT * FROM planted;
CREATE VIEW planted_reset AS SELECT fence_reset('r');
SELECT * FROM planted_reset;
CREATE TABLE bait(x);
CREATE TRIGGER planted_trigger AFTER INSERT ON bait BEGIN SELECT fence_try('r', 2000); END;
INSERT INTO bait VALUES (1);
CREATE VIEW planted_held AS SELECT * FROM fence_held;
SELECT * FROM planted_held;
SELECT fence_current('r');
-- fence_current only reads, and may be used from a view.
CREATE VIEW current_r AS SELECT fence_current('r') AS highest;
SELECT highest FROM current_r;
-- Dropping the guard's triggers is the only way past it, and SQLite has no
-- privileges to stop that: README, "Guarantees and limits".
