-- What SQLite adds to the accept rule of tests/corpus/accept_rule.test:
-- fence_tokens created on first use, the full stale message with its result
-- code, and updated_at moving only when the token rises.
SELECT quote(fence_current('widget-42'));
SELECT count(*) FROM sqlite_schema WHERE name = 'fence_tokens';
SELECT fence_check('widget-42', 31);
SELECT sql FROM sqlite_schema WHERE name = 'fence_tokens';
SELECT fence_check('widget-42', 30);
SELECT fence_try('widget-42', 30), fence_try('widget-42', 31);
-- updated_at changes only when the token rises
UPDATE fence_tokens SET updated_at = 'then' WHERE resource = 'widget-42';
SELECT fence_check('widget-42', 31);
SELECT updated_at FROM fence_tokens WHERE resource = 'widget-42';
SELECT fence_check('widget-42', 41);
SELECT updated_at <> 'then' FROM fence_tokens WHERE resource = 'widget-42';
-- the table's own CHECK refuses what fence never writes
INSERT INTO fence_tokens VALUES ('bad', -1, 'now');
INSERT INTO fence_tokens VALUES ('bad', '7', 'now');
-- a long resource is shortened in the message, control bytes shown as ?
SELECT fence_check(printf('%.*c', 300, 'x'), 5), fence_check(printf('%.*c', 300, 'x'), 4);
SELECT fence_check('tab' || char(9) || 'bed', 5), fence_check('tab' || char(9) || 'bed', 4);
-- fence_tokens created by a transaction that rolls back goes with it, and
-- fence works on (found by tests/fuzz)
DROP TABLE fence_tokens;
BEGIN;
SELECT fence_check('first-use', 1);
ROLLBACK;
SELECT count(*) FROM sqlite_schema WHERE name = 'fence_tokens';
SELECT quote(fence_current('first-use'));
SELECT fence_check('first-use', 2);
SELECT fence_current('first-use');
