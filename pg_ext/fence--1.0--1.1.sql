/* pg_ext/fence--1.0--1.1.sql: fence 1.0 to 1.1 */

\echo Use "ALTER EXTENSION fence UPDATE TO '1.1'" to load this file. \quit

-- What this transaction holds, as SQLite's fence_held table shows it.
CREATE FUNCTION fence_held(OUT resource text, OUT token bigint) RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'fence_held' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_held() IS
	'the fences this transaction holds: resource and token';
