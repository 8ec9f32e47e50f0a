-- fence_check, fence_try, fence_current, fence_reset: the accept rule
-- (SPEC.md "Words", "Functions").
-- A resource never fenced has no highest token, and no table yet.
SELECT quote(fence_current('widget-42'));
SELECT count(*) FROM sqlite_schema WHERE name = 'fence_tokens';
-- The first token is accepted and becomes the highest; the table appears.
SELECT fence_check('widget-42', 31);
SELECT count(*) FROM sqlite_schema WHERE name = 'fence_tokens';
SELECT fence_current('widget-42');
-- Equal tokens are accepted: one holder writes many times.
SELECT fence_check('widget-42', 31);
-- A greater token is accepted and raises the highest.
SELECT fence_check('widget-42', 32);
SELECT fence_current('widget-42');
-- A lower token is stale: the error names the resource, both tokens.
SELECT fence_check('widget-42', 31);
SELECT fence_current('widget-42');
-- fence_try says the same with 1 and 0; invalid input still raises.
SELECT fence_try('widget-42', 31);
SELECT fence_try('widget-42', 32);
SELECT fence_try('widget-42', 40);
SELECT fence_current('widget-42');
-- Resources are independent of each other.
SELECT fence_check('account:17', 0);
SELECT resource, token FROM fence_tokens ORDER BY resource;
-- The extremes of a token.
SELECT fence_check('max', 9223372036854775807);
SELECT fence_check('max', 9223372036854775806);
-- updated_at changes only when the token rises.
UPDATE fence_tokens SET updated_at = 'then' WHERE resource = 'widget-42';
SELECT fence_check('widget-42', 40);
SELECT updated_at FROM fence_tokens WHERE resource = 'widget-42';
SELECT fence_check('widget-42', 41);
SELECT updated_at <> 'then' FROM fence_tokens WHERE resource = 'widget-42';
-- fence_reset forgets the highest: any token is accepted again.
SELECT quote(fence_reset('widget-42'));
SELECT quote(fence_current('widget-42'));
SELECT fence_check('widget-42', 1);
-- Resetting what was never fenced is harmless.
SELECT quote(fence_reset('never-fenced'));
-- Resources are compared byte for byte.
SELECT fence_check('Widget-42', 0), fence_check('widget-42 ', 0);
SELECT count(*) FROM fence_tokens;
-- A resource of exactly 1024 bytes is valid.
SELECT fence_check(printf('%.*c', 1024, 'x'), 3);
SELECT fence_current(printf('%.*c', 1024, 'x'));
