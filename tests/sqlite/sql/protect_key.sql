-- What SQLite adds to tests/corpus/protect_key.test: the triggers of a
-- per-row guard, keys that are the INTEGER PRIMARY KEY (which SQLite may
-- assign), an empty prefix, and the full messages. A rowid table keyed on
-- another column can lose a row to a REPLACE through its rowid, so it is
-- written with recursive_triggers on (docs/sqlite-guarantees.md).
PRAGMA recursive_triggers = ON;
CREATE TABLE account(id TEXT PRIMARY KEY, balance INTEGER, tok INTEGER);
SELECT quote(fence_protect('account', 'tok', 'account:', 'id'));
SELECT replace(s.name, g.id, 'G'), replace(s.sql, g.id, 'G') FROM sqlite_schema AS s JOIN fence_guards AS g ON s.name GLOB 'fence:' || g.id || ':*'
 WHERE s.tbl_name = 'account' ORDER BY s.name;
INSERT INTO account VALUES ('17', 100, 5);
UPDATE account SET balance = 90, tok = 4 WHERE id = '17';
UPDATE account SET balance = 90 WHERE id = '17';
INSERT INTO account VALUES (NULL, 0, 1);
INSERT INTO account VALUES (printf('%.*c', 1017, 'k'), 0, 1);
-- a key that is the INTEGER PRIMARY KEY: an INSERT must give it (a BEFORE
-- trigger cannot see the id SQLite assigns, so a NULL key is refused)
CREATE TABLE job(id INTEGER PRIMARY KEY, state TEXT, tok INTEGER);
SELECT quote(fence_protect('job', 'tok', 'job-', 'id'));
SELECT replace(s.sql, g.id, 'G') FROM sqlite_schema AS s JOIN fence_guards AS g ON s.name GLOB 'fence:' || g.id || ':*'
 WHERE s.tbl_name = 'job' AND s.name GLOB '*:insert*' ORDER BY s.name;
INSERT INTO job(state, tok) VALUES ('new', 7);
INSERT INTO job(id, state, tok) VALUES (5, 'new', 2);
INSERT INTO job(id, state, tok) VALUES (5, 'again', 1);
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'job-%' ORDER BY resource;
SELECT id, state FROM job ORDER BY id;
-- "INTEGER PRIMARY KEY" spelled as a table constraint is the rowid too;
-- a WITHOUT ROWID table's integer key is an ordinary column
CREATE TABLE job2(id INTEGER, tok INTEGER, PRIMARY KEY (id));
SELECT quote(fence_protect('job2', 'tok', 'job2-', 'id'));
CREATE TABLE job3(id INTEGER PRIMARY KEY, tok INTEGER) WITHOUT ROWID;
SELECT quote(fence_protect('job3', 'tok', 'job3-', 'id'));
SELECT s.tbl_name, replace(substr(s.sql, 1, instr(s.sql, ' INSERT') - 1), g.id, 'G')
 FROM sqlite_schema AS s JOIN fence_guards AS g ON s.name GLOB 'fence:' || g.id || ':insert*'
 WHERE s.tbl_name IN ('job2', 'job3') ORDER BY s.tbl_name, replace(s.name, g.id, 'G');
-- an empty prefix is allowed: the key alone is the resource
CREATE TABLE bare(k TEXT PRIMARY KEY, tok INTEGER);
SELECT quote(fence_protect('bare', 'tok', '', 'k'));
INSERT INTO bare VALUES ('bare-key', 1);
SELECT fence_current('bare-key');
INSERT INTO bare VALUES ('', 1);
-- a missing key column is an error
SELECT fence_protect('bare', 'tok', 'p', 'nope');
SELECT fence_protect('bare', 'tok', 'p', NULL);
