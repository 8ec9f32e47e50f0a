-- Messages a client can read whatever its client_encoding (issue 26,
-- item 8). A stale or missing token is 23T01 or 23T02, never 22P05
-- ("character has no equivalent in encoding"): a character of the
-- resource that the client encoding cannot represent is shown as \uXXXX
-- (\UXXXXXXXX beyond the Basic Multilingual Plane), and a backslash then
-- as \\; what it can represent is shown as itself.
CREATE EXTENSION IF NOT EXISTS fence;
\set SHOW_CONTEXT never
-- (the resources are spelled with U&'' escapes: this file is read in the
-- client encoding, which changes below)
SELECT fence_check(U&'msg:\4E2D\6587\+01F512', 10);
CREATE TABLE msg_jobs (id int, tok bigint);
SELECT fence_protect('msg_jobs', 'tok', U&'msg:\8868');
INSERT INTO msg_jobs VALUES (1, 10);
SET client_encoding = 'LATIN1';
-- stale: 23T01 with the resource escaped in the message and the detail
SELECT fence_check(U&'msg:\4E2D\6587\+01F512', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT fence_try(U&'msg:\4E2D\6587\+01F512', 3);
-- missing and stale through a guard: 23T02, 23T01
INSERT INTO msg_jobs VALUES (2, NULL);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO msg_jobs VALUES (2, 9);
\echo :LAST_ERROR_SQLSTATE
UPDATE msg_jobs SET id = 3;
\echo :LAST_ERROR_SQLSTATE
-- a backslash in a resource that needs escaping reads \\
SELECT fence_check(U&'msg:a\005Cb\4E2D', 10);
SELECT fence_check(U&'msg:a\005Cb\4E2D', 3);
-- ... and as itself where nothing needs escaping
SELECT fence_check(U&'msg:a\005Cb', 10);
SELECT fence_check(U&'msg:a\005Cb', 3);
\echo :LAST_ERROR_SQLSTATE
-- nothing of the refused writes committed
SELECT id, tok FROM msg_jobs;
SELECT count(*) FROM fence_tokens WHERE resource LIKE 'msg:%' AND token < 10;
-- a client that can represent every character sees them as they are
RESET client_encoding;
SELECT fence_check(U&'msg:\8868', 3);
\echo :LAST_ERROR_SQLSTATE
DROP TABLE msg_jobs;
