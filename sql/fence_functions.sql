-- fence_check, fence_try, fence_current, fence_reset: the accept rule
-- (SPEC.md "Words", "Functions"), with every error pinned.
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
-- a resource never fenced has no highest token
SELECT fence_current('fn:widget-42');
-- the first token is accepted and becomes the highest
SELECT fence_check('fn:widget-42', 31);
SELECT fence_current('fn:widget-42');
-- equal tokens are accepted: one holder writes many times
SELECT fence_check('fn:widget-42', 31);
-- a greater token raises the highest
SELECT fence_check('fn:widget-42', 32);
-- a lower token is stale: 23T01, the highest in DETAIL, what to do in HINT
SELECT fence_check('fn:widget-42', 31);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_current('fn:widget-42');
-- fence_try answers the same with true and false
SELECT fence_try('fn:widget-42', 31), fence_try('fn:widget-42', 32),
       fence_try('fn:widget-42', 40), fence_current('fn:widget-42');
-- resources are independent and compared byte for byte
SELECT fence_check('fn:Widget-42', 0), fence_check('fn:widget-42/', 0);
-- the extremes of a token
SELECT fence_check('fn:max', 9223372036854775807);
SELECT fence_check('fn:max', 9223372036854775806);
SELECT fence_check('fn:zero', 0);
-- a resource of 1024 bytes is valid, non-ASCII counts in bytes
SELECT fence_check(repeat('x', 1024), 1);
SELECT fence_check(repeat('é', 512), 1);
-- updated_at changes only when the token rises
CREATE TEMP TABLE seen AS
  SELECT updated_at FROM fence_tokens WHERE resource = 'fn:widget-42';
SELECT fence_check('fn:widget-42', 40);
SELECT t.updated_at = s.updated_at AS unchanged
  FROM fence_tokens t, seen s WHERE t.resource = 'fn:widget-42';
SELECT fence_check('fn:widget-42', 41);
SELECT t.updated_at > s.updated_at AS moved
  FROM fence_tokens t, seen s WHERE t.resource = 'fn:widget-42';
-- fence_reset forgets the highest: any token is accepted again
SELECT fence_reset('fn:widget-42');
SELECT fence_current('fn:widget-42');
SELECT fence_check('fn:widget-42', 1);
SELECT fence_reset('fn:never-fenced');
SELECT resource, token FROM fence_tokens WHERE resource LIKE 'fn:%' ORDER BY resource;
-- a stale check aborts the transaction; nothing it did stays
BEGIN;
SELECT fence_check('fn:abort', 10);
SELECT fence_check('fn:widget-42', 0);
COMMIT;
SELECT fence_current('fn:abort');
-- fence_tokens (and fence_leases) are kept by pg_dump
SELECT c.relname, e.extconfig IS NOT NULL AS dumped
  FROM pg_extension e JOIN pg_class c ON c.oid = ANY (e.extconfig)
 WHERE e.extname = 'fence' ORDER BY 1;
-- and WAL-logged (not UNLOGGED, not TEMP)
SELECT relpersistence FROM pg_class WHERE oid = 'fence_tokens'::regclass;
