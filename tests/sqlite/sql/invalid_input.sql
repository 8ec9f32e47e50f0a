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
-- token: NULL, negative, '31' as text, 31.0, a blob, 2^63 as a real
SELECT fence_check('r', NULL);
SELECT fence_check('r', -1);
SELECT fence_check('r', '31');
SELECT fence_check('r', 31.0);
SELECT fence_check('r', x'1f');
SELECT fence_check('r', 9223372036854775808);
SELECT fence_check('r', -9223372036854775808);
-- fence_try raises on invalid input too: false is only for a stale token
SELECT fence_try(NULL, 11);
SELECT fence_try('', 11);
SELECT fence_try('r', '31');
SELECT fence_try('r', -5);
SELECT fence_try('r', 31.0);
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
