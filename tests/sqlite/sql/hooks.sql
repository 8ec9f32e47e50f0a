-- fence tracks transactions without commit or rollback hooks: an
-- application's own hooks stay installed and keep firing.
\hooks
CREATE TABLE w(id INTEGER PRIMARY KEY, tok INTEGER);
SELECT fence_protect('w', 'tok', 'r');
BEGIN;
SELECT fence_check('r', 1);
INSERT INTO w VALUES (1, 1);
COMMIT;
BEGIN;
SELECT fence_check('r', 2);
ROLLBACK;
INSERT INTO w VALUES (2, 1);
\hookcount
-- and a transaction that wrote nothing but its fence still ends it
BEGIN;
SELECT fence_check('r', 1);
COMMIT;
SELECT count(*) FROM fence_held;
UPDATE w SET id = id;
\hookcount
