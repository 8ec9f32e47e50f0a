-- Partitions, inheritance children and TRUNCATE reach the guard (SPEC.md
-- "No way around the fence"), in both editions. A partition created later
-- is guarded by the C edition's event trigger; the SQL edition cannot
-- create event triggers (superuser only): PostgreSQL gives the new
-- partition the row guard, and fence_protect again adds the TRUNCATE
-- guard (docs/sql-edition.md).
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
CREATE TABLE h_part (id int, region text, tok bigint) PARTITION BY LIST (region);
CREATE TABLE h_part_eu PARTITION OF h_part FOR VALUES IN ('eu');
SELECT fence_protect('h_part', 'tok', 'hi:part');
INSERT INTO h_part VALUES (1, 'eu', 5);
-- straight into the partition: the same fence
INSERT INTO h_part_eu VALUES (2, 'eu', 4);
UPDATE h_part SET id = 3 WHERE id = 1;
DELETE FROM h_part_eu;
TRUNCATE h_part_eu;
\echo :LAST_ERROR_SQLSTATE
TRUNCATE h_part;
BEGIN;
SELECT fence_check('hi:part', 5);
UPDATE h_part SET id = 3 WHERE id = 1;
TRUNCATE h_part_eu;
ROLLBACK;
SELECT id, region, tok FROM h_part ORDER BY id;
-- inheritance children
CREATE TABLE h_parent (id int, tok bigint);
CREATE TABLE h_child () INHERITS (h_parent);
SELECT fence_protect('h_parent', 'tok', 'hi:inh');
INSERT INTO h_child VALUES (1, 5);
INSERT INTO h_child VALUES (2, 4);
DELETE FROM h_parent;
UPDATE h_parent SET id = 7;
TRUNCATE h_child;
BEGIN;
SELECT fence_check('hi:inh', 5);
UPDATE h_parent SET id = 7;
COMMIT;
SELECT id, tok FROM h_parent ORDER BY id;
-- a partition created after fence_protect
CREATE TABLE h_part_us PARTITION OF h_part FOR VALUES IN ('us');
INSERT INTO h_part_us VALUES (3, 'us', 4);
INSERT INTO h_part_us VALUES (3, 'us', 5);
TRUNCATE h_part_us;
SELECT fence_protect('h_part', 'tok', 'hi:part');
TRUNCATE h_part_us;
SELECT id, region, tok FROM h_part ORDER BY id;
-- an inheritance child created after fence_protect (the SQL edition guards
-- it once fence_protect runs again)
CREATE TABLE h_child2 () INHERITS (h_parent);
INSERT INTO h_child2 VALUES (9, 1);
SELECT fence_protect('h_parent', 'tok', 'hi:inh');
INSERT INTO h_child2 VALUES (10, 1);
SELECT id, tok FROM h_parent ORDER BY id;
-- fence_unprotect removes the guard from the whole hierarchy
SELECT fence_unprotect('h_part');
SELECT fence_unprotect('h_parent');
SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relname LIKE 'h\_%' AND t.tgname LIKE 'fence%';
DROP TABLE h_part, h_parent, h_child, h_child2;
