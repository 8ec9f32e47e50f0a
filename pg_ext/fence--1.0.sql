/* pg_ext/fence--1.0.sql: the objects of fence 1.0 */

\echo Use "CREATE EXTENSION fence" to load this file. \quit

-- The highest accepted token per resource. Written only by fence's C code
-- (which needs no table privilege); every role may read it.
CREATE TABLE fence_tokens (
	resource	text PRIMARY KEY CHECK (octet_length(resource) BETWEEN 1 AND 1024),
	token		bigint NOT NULL CHECK (token >= 0),
	updated_at	timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE fence_tokens IS 'fence: the highest accepted fencing token per resource';
-- pg_dump keeps its rows
SELECT pg_catalog.pg_extension_config_dump('fence_tokens', '');
REVOKE ALL ON fence_tokens FROM PUBLIC;
GRANT SELECT ON fence_tokens TO PUBLIC;

-- Not STRICT: a NULL argument raises 22004 instead of returning NULL.
CREATE FUNCTION fence_check(resource text, token bigint) RETURNS bigint
	AS 'MODULE_PATHNAME', 'fence_check' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_check(text, bigint) IS
	'accept the token for the resource in this transaction, or raise 23T01';

CREATE FUNCTION fence_try(resource text, token bigint) RETURNS boolean
	AS 'MODULE_PATHNAME', 'fence_try' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_try(text, bigint) IS
	'accept the token for the resource in this transaction, or return false';

CREATE FUNCTION fence_current(resource text) RETURNS bigint
	AS 'MODULE_PATHNAME', 'fence_current' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_current(text) IS
	'the highest accepted token of the resource, or NULL';

CREATE FUNCTION fence_reset(resource text) RETURNS void
	AS 'MODULE_PATHNAME', 'fence_reset' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_reset(text) IS
	'forget the highest token of the resource (after the lock service was rebuilt)';
-- only the extension's owner, or roles it grants EXECUTE to
REVOKE ALL ON FUNCTION fence_reset(text) FROM PUBLIC;

CREATE FUNCTION fence_guard() RETURNS trigger
	AS 'MODULE_PATHNAME', 'fence_guard' LANGUAGE C;
COMMENT ON FUNCTION fence_guard() IS
	'trigger of fence_protect(): checks every write of a protected table';

CREATE FUNCTION fence_protect(tbl regclass, token_column name, resource text) RETURNS void
	AS 'MODULE_PATHNAME', 'fence_protect' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_protect(regclass, name, text) IS
	'guard every INSERT, UPDATE, DELETE and TRUNCATE of the table with one fence';

CREATE FUNCTION fence_protect(tbl regclass, token_column name, resource_prefix text,
							  key_column name) RETURNS void
	AS 'MODULE_PATHNAME', 'fence_protect' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_protect(regclass, name, text, name) IS
	'guard every row of the table with the fence resource_prefix || key_column::text';

CREATE FUNCTION fence_unprotect(tbl regclass) RETURNS void
	AS 'MODULE_PATHNAME', 'fence_unprotect' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_unprotect(regclass) IS 'remove the guard of fence_protect()';
