-- Every bad input raises "invalid fencing ..." (SQLITE_ERROR) and changes
-- nothing (SPEC.md "Precise points"), in every function.
SELECT fence_check('r', 10);
-- resource: NULL, empty, 1025 bytes, not TEXT
SELECT fence_check(NULL, 11);
SELECT fence_check('', 11);
SELECT fence_check(printf('%.*c', 1025, 'x'), 11);
SELECT fence_check(42, 11);
SELECT fence_check(x'72', 11);
SELECT fence_check(4.2, 11);
-- token: NULL, negative, '31' as text, 31.5, a blob, 2^63 as a real
SELECT fence_check('r', NULL);
SELECT fence_check('r', -1);
SELECT fence_check('r', '31');
SELECT fence_check('r', 31.5);
SELECT fence_check('r', x'1f');
SELECT fence_check('r', 9223372036854775808);
SELECT fence_check('r', -9223372036854775808);
-- fence_try raises on invalid input too: false is only for a stale token
SELECT fence_try(NULL, 11);
SELECT fence_try('', 11);
SELECT fence_try('r', '31');
SELECT fence_try('r', -5);
SELECT fence_try('r', 31.5);
-- fence_current and fence_reset check their resource as well
SELECT fence_current(NULL);
SELECT fence_current('');
SELECT fence_current(printf('%.*c', 1025, 'x'));
SELECT fence_current(7);
SELECT fence_reset(NULL);
SELECT fence_reset('');
SELECT fence_reset(x'00');
-- Nothing changed: the one resource still stands at 10, nothing held.
SELECT resource, token FROM fence_tokens;
BEGIN;
SELECT fence_check('r', '12');
SELECT count(*) FROM fence_held;
COMMIT;
-- wrong number of arguments
SELECT fence_check('r');
SELECT fence_current('r', 1);
-- a REAL holding an exact integer up to 2^53 is that integer (JavaScript
-- numbers); other REALs stay invalid
SELECT fence_check('js', 7.0);
SELECT fence_check('js', 7);
SELECT fence_try('js', 6.0);
SELECT fence_current('js');
SELECT fence_check('js', 9007199254740992.0);
SELECT fence_check('js', 9007199254740994.0);
SELECT fence_check('js', 1e19);
SELECT fence_check('js', -1.0);
CREATE TABLE jsw(id INTEGER PRIMARY KEY, tok);
SELECT fence_protect('jsw', 'tok', 'jsw-lock');
INSERT INTO jsw VALUES (1, 3.0);
INSERT INTO jsw VALUES (2, 3.5);
SELECT id, tok, typeof(tok) FROM jsw;
SELECT fence_current('jsw-lock');
