-- MERGE reaches the guard (PostgreSQL 15 and later; 13 and 14 have no
-- MERGE: fence_merge_1.out there). Each action is checked as the INSERT,
-- UPDATE or DELETE it is.
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
CREATE TABLE m_t (id int PRIMARY KEY, n int, tok bigint);
SELECT fence_protect('m_t', 'tok', 'mg:t');
INSERT INTO m_t VALUES (1, 0, 5);
-- a stale token in the source: refused, nothing stays
MERGE INTO m_t USING (VALUES (1, 4), (2, 4)) v(id, tok) ON m_t.id = v.id
  WHEN MATCHED THEN UPDATE SET n = n + 1, tok = v.tok
  WHEN NOT MATCHED THEN INSERT VALUES (v.id, 0, v.tok);
\echo :LAST_ERROR_SQLSTATE
-- an action that leaves the token out needs a fence
MERGE INTO m_t USING (VALUES (1)) v(id) ON m_t.id = v.id
  WHEN MATCHED THEN UPDATE SET n = n + 1;
\echo :LAST_ERROR_SQLSTATE
MERGE INTO m_t USING (VALUES (1)) v(id) ON m_t.id = v.id
  WHEN MATCHED THEN DELETE;
\echo :LAST_ERROR_SQLSTATE
-- the current token
MERGE INTO m_t USING (VALUES (1, 6), (2, 6)) v(id, tok) ON m_t.id = v.id
  WHEN MATCHED THEN UPDATE SET n = n + 1, tok = v.tok
  WHEN NOT MATCHED THEN INSERT VALUES (v.id, 0, v.tok);
BEGIN;
SELECT fence_check('mg:t', 6);
MERGE INTO m_t USING (VALUES (2)) v(id) ON m_t.id = v.id
  WHEN MATCHED THEN DELETE;
COMMIT;
SELECT id, n, tok, fence_current('mg:t') AS highest FROM m_t ORDER BY id;
-- an UPDATE action that leaves the token out, in a MERGE whose other
-- action sets it: PostgreSQL tells triggers the SET columns of all actions.
-- The C edition treats the unchanged token as not set (a fence is needed:
-- 23T02); the SQL edition presents the row's own token (docs/sql-edition.md)
MERGE INTO m_t USING (VALUES (1, 6, false)) v(id, tok, settok) ON m_t.id = v.id
  WHEN MATCHED AND v.settok THEN UPDATE SET tok = v.tok
  WHEN MATCHED THEN UPDATE SET n = n + 10;
SELECT id, n, tok FROM m_t ORDER BY id;
DROP TABLE m_t;
