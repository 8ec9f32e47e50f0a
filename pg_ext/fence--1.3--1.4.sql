/* pg_ext/fence--1.3--1.4.sql: fence 1.3 to 1.4 */

\echo Use "ALTER EXTENSION fence UPDATE TO '1.4'" to load this file. \quit

-- ---------------------------------------------------------------------
-- Leases inside the store (pg_ext/fence_lease.c)
-- ---------------------------------------------------------------------

-- Who holds a lease: 1 to 256 bytes of text, stored fixed-width so that a
-- grant to a new holder rewrites the row in place (see fence_lease.c).
CREATE TYPE fence_lease_holder;
CREATE FUNCTION fence_lease_holder_in(cstring) RETURNS fence_lease_holder
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION fence_lease_holder_out(fence_lease_holder) RETURNS cstring
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION fence_lease_holder_recv(internal) RETURNS fence_lease_holder
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION fence_lease_holder_send(fence_lease_holder) RETURNS bytea
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE TYPE fence_lease_holder (
	INPUT = fence_lease_holder_in,
	OUTPUT = fence_lease_holder_out,
	RECEIVE = fence_lease_holder_recv,
	SEND = fence_lease_holder_send,
	INTERNALLENGTH = 258,
	ALIGNMENT = int2,
	STORAGE = plain
);
-- read it as text: holder = 'worker-1' and holder::text both work
CREATE CAST (fence_lease_holder AS text) WITH INOUT AS IMPLICIT;
-- and sort, group and compare it by its bytes (the "C" collation's order);
-- the SQL wrappers name what they call by schema, whatever the caller's
-- search_path
CREATE FUNCTION fence_lease_holder_cmp(fence_lease_holder, fence_lease_holder) RETURNS integer
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION fence_lease_holder_eq(fence_lease_holder, fence_lease_holder) RETURNS boolean
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION fence_lease_holder_ne(fence_lease_holder, fence_lease_holder) RETURNS boolean
	AS 'SELECT NOT @extschema@.fence_lease_holder_eq($1, $2)' LANGUAGE SQL IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION fence_lease_holder_lt(fence_lease_holder, fence_lease_holder) RETURNS boolean
	AS 'SELECT @extschema@.fence_lease_holder_cmp($1, $2) OPERATOR(pg_catalog.<) 0' LANGUAGE SQL IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION fence_lease_holder_le(fence_lease_holder, fence_lease_holder) RETURNS boolean
	AS 'SELECT @extschema@.fence_lease_holder_cmp($1, $2) OPERATOR(pg_catalog.<=) 0' LANGUAGE SQL IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION fence_lease_holder_gt(fence_lease_holder, fence_lease_holder) RETURNS boolean
	AS 'SELECT @extschema@.fence_lease_holder_cmp($1, $2) OPERATOR(pg_catalog.>) 0' LANGUAGE SQL IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION fence_lease_holder_ge(fence_lease_holder, fence_lease_holder) RETURNS boolean
	AS 'SELECT @extschema@.fence_lease_holder_cmp($1, $2) OPERATOR(pg_catalog.>=) 0' LANGUAGE SQL IMMUTABLE STRICT PARALLEL SAFE;
CREATE OPERATOR = (LEFTARG = fence_lease_holder, RIGHTARG = fence_lease_holder,
	FUNCTION = fence_lease_holder_eq, COMMUTATOR = =, NEGATOR = <>,
	RESTRICT = eqsel, JOIN = eqjoinsel, MERGES);
CREATE OPERATOR <> (LEFTARG = fence_lease_holder, RIGHTARG = fence_lease_holder,
	FUNCTION = fence_lease_holder_ne, COMMUTATOR = <>, NEGATOR = =,
	RESTRICT = neqsel, JOIN = neqjoinsel);
CREATE OPERATOR < (LEFTARG = fence_lease_holder, RIGHTARG = fence_lease_holder,
	FUNCTION = fence_lease_holder_lt, COMMUTATOR = >, NEGATOR = >=,
	RESTRICT = scalarltsel, JOIN = scalarltjoinsel);
CREATE OPERATOR <= (LEFTARG = fence_lease_holder, RIGHTARG = fence_lease_holder,
	FUNCTION = fence_lease_holder_le, COMMUTATOR = >=, NEGATOR = >,
	RESTRICT = scalarlesel, JOIN = scalarlejoinsel);
CREATE OPERATOR > (LEFTARG = fence_lease_holder, RIGHTARG = fence_lease_holder,
	FUNCTION = fence_lease_holder_gt, COMMUTATOR = <, NEGATOR = <=,
	RESTRICT = scalargtsel, JOIN = scalargtjoinsel);
CREATE OPERATOR >= (LEFTARG = fence_lease_holder, RIGHTARG = fence_lease_holder,
	FUNCTION = fence_lease_holder_ge, COMMUTATOR = <=, NEGATOR = <,
	RESTRICT = scalargesel, JOIN = scalargejoinsel);
CREATE OPERATOR CLASS fence_lease_holder_ops DEFAULT FOR TYPE fence_lease_holder USING btree AS
	OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >,
	FUNCTION 1 fence_lease_holder_cmp(fence_lease_holder, fence_lease_holder);

-- One row per resource ever leased; the row's token is the highest ever
-- granted for it. Written only by fence's C code, in place and at once
-- (not undone by ROLLBACK); every role may read it. Never delete rows:
-- a resource's row is what keeps its next grant above the earlier ones.
CREATE TABLE fence_leases (
	resource	text PRIMARY KEY CHECK (octet_length(resource) BETWEEN 1 AND 1024),
	holder		fence_lease_holder NOT NULL,
	token		bigint NOT NULL CHECK (token >= 0),
	expires_at	timestamptz NOT NULL
);
COMMENT ON TABLE fence_leases IS
	'fence: the lease of each resource leased with fence_acquire, and its highest granted token';
SELECT pg_catalog.pg_extension_config_dump('fence_leases', '');
REVOKE ALL ON fence_leases FROM PUBLIC;
GRANT SELECT ON fence_leases TO PUBLIC;

-- Not STRICT: a NULL argument raises 22004 instead of returning NULL.
CREATE FUNCTION fence_acquire(resource text, holder text, ttl_ms bigint) RETURNS bigint
	AS 'MODULE_PATHNAME', 'fence_acquire' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_acquire(text, text, bigint) IS
	'grant a lease on the resource and return its token, or NULL while another holder''s lease is live';
CREATE FUNCTION fence_renew(resource text, holder text, token bigint, ttl_ms bigint) RETURNS boolean
	AS 'MODULE_PATHNAME', 'fence_renew' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_renew(text, text, bigint, bigint) IS
	'extend a live lease to ttl_ms from now; false once it expired or passed to another holder';
CREATE FUNCTION fence_release(resource text, holder text, token bigint) RETURNS boolean
	AS 'MODULE_PATHNAME', 'fence_release' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_release(text, text, bigint) IS
	'end a live lease early; false once it expired or passed to another holder';

-- ---------------------------------------------------------------------
-- fence_stats: accepts and stale rejections per resource
-- (pg_ext/fence_stats.c)
-- ---------------------------------------------------------------------

CREATE FUNCTION fence_stats_read(OUT resource text, OUT accepted bigint, OUT rejected bigint,
		OUT last_rejected_token bigint, OUT last_rejected_at timestamptz)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'fence_stats_read' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION fence_stats_read() IS
	'the rows of the view fence_stats';

-- Server-wide (this database's rows) when fence is in
-- shared_preload_libraries, else this backend's own: fence_stats_scope()
-- says which. A NULL resource is the row of every resource beyond
-- fence.stats_max_resources.
CREATE VIEW fence_stats AS
	SELECT resource, accepted, rejected, last_rejected_token, last_rejected_at
	FROM fence_stats_read();
COMMENT ON VIEW fence_stats IS
	'fence: accepted tokens and stale rejections per resource, attempts whether or not they committed';
GRANT SELECT ON fence_stats TO PUBLIC;

CREATE FUNCTION fence_stats_scope() RETURNS text
	AS 'MODULE_PATHNAME', 'fence_stats_scope' LANGUAGE C STABLE;
COMMENT ON FUNCTION fence_stats_scope() IS
	'whose counts fence_stats shows: server (fence in shared_preload_libraries) or backend';
