/*
 * pg_sql/fence.sql: fence, the SQL edition (SQL and PL/pgSQL, no C).
 *
 * The same SQL names and meaning as the C extension in pg_ext/, for
 * PostgreSQL 13 to 18 and managed services where no C extension can be
 * installed. The one source of truth of this edition: install it with
 *
 *     psql -v ON_ERROR_STOP=1 -c 'CREATE SCHEMA fence' \
 *          -c 'SET search_path = fence' -f pg_sql/fence.sql
 *
 * as the database's owner (no superuser needed), into the schema first on
 * search_path; `make pg-tle` wraps this same file into the pg_tle form
 * (build/pg_tle/fence--VERSION.sql). Every difference from the C edition is
 * listed, with its test, in docs/sql-edition.md.
 *
 * Concurrency contract (docs/sql-edition.md, "How the fence is kept"):
 *  - Each resource r has a lock: a transaction-level advisory lock keyed by
 *    a 64-bit hash of r (pg_locks: locktype advisory, objsubid 2). An accept
 *    holds it in share mode, an advance (or a fence_reset) in exclusive
 *    mode, both until the transaction or savepoint ends. Same-token holders
 *    never wait for each other; an advance waits for every open
 *    transaction fenced on r (or on a resource of the same hash: a wait,
 *    never a wrong answer, because every decision reads r's own row).
 *  - Every fenced transaction also holds ROW SHARE on fence_tokens. Past
 *    max_locks_per_transaction / 2 fences a transaction escalates: SHARE on
 *    fence_tokens instead of a lock per resource (every advance, which
 *    writes fence_tokens, waits for it), EXCLUSIVE once it advances (it
 *    waits for every fenced transaction and every new fence waits for it).
 *  - The highest is read after the lock is held: at READ COMMITTED a new
 *    statement snapshot sees the newest commit; at REPEATABLE READ and
 *    SERIALIZABLE the row is read FOR SHARE (FOR KEY SHARE would not
 *    conflict with the advance's no-key UPDATE, and would lock the old
 *    version without a word) and a first token is written with ON
 *    CONFLICT, so a newer highest committed after the snapshot surfaces as
 *    40001, never as an accepted stale token.
 *  - Locks are taken inside a subtransaction (fence__lock), so that they
 *    belong to the transaction or savepoint, never to a cursor's portal.
 *  - What this transaction holds is kept in the transaction-local setting
 *    fence.held (a jsonb object resource -> token; SET LOCAL semantics, so
 *    a rolled-back savepoint forgets it together with its locks), and past
 *    the escalation point in the temporary table pg_temp.fence_held_more.
 */

-- ---------------------------------------------------------------------
-- Tables
-- ---------------------------------------------------------------------

-- The highest accepted token per resource. Written only by fence's
-- SECURITY DEFINER functions; every role may read it.
CREATE TABLE fence_tokens (
	resource	text PRIMARY KEY CHECK (octet_length(resource) BETWEEN 1 AND 1024),
	token		bigint NOT NULL CHECK (token >= 0),
	updated_at	timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE fence_tokens IS 'fence: the highest accepted fencing token per resource';
REVOKE ALL ON fence_tokens FROM PUBLIC;
GRANT SELECT ON fence_tokens TO PUBLIC;

-- A lease holder: 1 to 256 bytes of text, compared byte for byte.
CREATE DOMAIN fence_lease_holder AS text COLLATE "C"
	CHECK (octet_length(VALUE) BETWEEN 1 AND 256);

-- One row per resource ever leased; its token is the highest ever granted.
-- Never delete rows: a resource's row keeps its next grant above the
-- earlier ones.
CREATE TABLE fence_leases (
	resource	text PRIMARY KEY CHECK (octet_length(resource) BETWEEN 1 AND 1024),
	holder		fence_lease_holder NOT NULL,
	token		bigint NOT NULL CHECK (token >= 0),
	expires_at	timestamptz NOT NULL
);
COMMENT ON TABLE fence_leases IS
	'fence: the lease of each resource leased with fence_acquire, and its highest granted token';
REVOKE ALL ON fence_leases FROM PUBLIC;
GRANT SELECT ON fence_leases TO PUBLIC;

-- pg_dump keeps their rows when this script runs as an extension (pg_tle);
-- installed with psql they are ordinary tables, which pg_dump keeps anyway.
DO $$
BEGIN
	IF EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
				WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = 'fence_tokens'::regclass
				  AND d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.deptype = 'e') THEN
		PERFORM pg_catalog.pg_extension_config_dump('fence_tokens', '');
		PERFORM pg_catalog.pg_extension_config_dump('fence_leases', '');
	END IF;
END
$$;

-- ---------------------------------------------------------------------
-- Internal helpers (not callable by PUBLIC)
-- ---------------------------------------------------------------------

-- The resource as a message shows it: quoted, control bytes as '?', cut at
-- 200 bytes on a character boundary with "..." (core/fence_core.c).
CREATE FUNCTION fence__shown(r text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	s text := r;
BEGIN
	IF octet_length(s) > 200 THEN
		s := left(s, 200);
		WHILE octet_length(s) > 200 LOOP
			s := left(s, -1);
		END LOOP;
		s := s || '...';
	END IF;
	RETURN '"' || translate(s,
		E'\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f',
		'????????????????????????????????') || '"';
END
$$;

-- invalid fencing WHAT: raise class 22 (22004 for NULL), as the C edition.
CREATE FUNCTION fence__check_text(v text, what text, max_bytes integer DEFAULT 1024) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF v IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'invalid fencing ' || what || ': NULL';
	ELSIF v = ('' COLLATE "C") THEN
		RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'invalid fencing ' || what || ': empty string';
	ELSIF octet_length(v) > max_bytes THEN
		RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
			'invalid fencing %s: %s bytes, at most %s allowed', what, octet_length(v), max_bytes);
	END IF;
	RETURN true;
END
$$;

CREATE FUNCTION fence__check_token(t bigint, what text DEFAULT 'token') RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF t IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'invalid fencing ' || what || ': NULL';
	ELSIF t < 0 THEN
		RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('invalid fencing %s: %s is negative', what, t);
	END IF;
	RETURN true;
END
$$;

/*
 * s as the client can be sent it (core of the C edition's
 * fence_client_text, pg_ext/fence.c). A message is converted to the client
 * encoding on its way out, and a character the client encoding lacks (a
 * CJK resource, a LATIN1 client) made PostgreSQL replace the whole error
 * with 22P05. Such characters are written \uXXXX (\UXXXXXXXX beyond the
 * BMP; \xNN per byte when the server encoding is not UTF8), and then every
 * backslash as \\ so that the escapes read back unambiguously. Text without
 * a non-ASCII character (the common case) comes back at once, as does
 * text the client can represent. Called on the error path only.
 */
CREATE FUNCTION fence__client_text(s text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
	client text;
	server text := current_setting('server_encoding');
	c text;
	cp integer;
	b bytea;
	out text := '';
BEGIN
	IF s IS NULL OR (s COLLATE "C") !~ '[^\x01-\x7f]' THEN
		RETURN s;	-- ASCII only
	END IF;
	client := current_setting('client_encoding');
	IF client = server OR client = 'SQL_ASCII' OR server = 'SQL_ASCII' THEN
		RETURN s;
	END IF;
	BEGIN
		PERFORM convert_to(s, client);
		RETURN s;
	EXCEPTION WHEN untranslatable_character OR character_not_in_repertoire THEN
		NULL;
	WHEN OTHERS THEN
		RETURN s;	-- no conversion to this client encoding: as the C edition
	END;
	FOREACH c IN ARRAY regexp_split_to_array(s COLLATE "C", '') LOOP
		IF c = (E'\\' COLLATE "C") THEN
			out := out || E'\\\\';
		ELSIF (c COLLATE "C") !~ '[^\x01-\x7f]' THEN
			out := out || c;
		ELSE
			BEGIN
				PERFORM convert_to(c, client);
				out := out || c;
			EXCEPTION WHEN OTHERS THEN
				IF server = 'UTF8' THEN
					cp := ascii(c);
					out := out || CASE WHEN cp > 65535 THEN E'\\U' || lpad(upper(to_hex(cp)), 8, '0')
									   ELSE E'\\u' || lpad(upper(to_hex(cp)), 4, '0') END;
				ELSE
					b := convert_to(c, server);
					FOR cp IN 0 .. octet_length(b) - 1 LOOP
						out := out || E'\\x' || lpad(upper(to_hex(get_byte(b, cp))), 2, '0');
					END LOOP;
				END IF;
			END;
		END IF;
	END LOOP;
	RETURN out;
END
$$;

CREATE FUNCTION fence__raise_stale(r text, t bigint, h bigint) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
	shown text := fence__shown(fence__client_text(r));
BEGIN
	RAISE EXCEPTION USING ERRCODE = '23T01',
		MESSAGE = format('stale fencing token %s for resource %s', t, shown),
		DETAIL = format('The highest token accepted for resource %s is %s.', shown, h),
		HINT = 'This holder lost the lock: acquire it again for a new token; retrying with the same token fails again.';
END
$$;

-- why: 'null' (the row's token column is NULL) or 'unfenced'
CREATE FUNCTION fence__raise_missing(r text, why text, col text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
	shown text := fence__shown(fence__client_text(r));
BEGIN
	IF why = 'null' THEN
		RAISE EXCEPTION USING ERRCODE = '23T02',
			MESSAGE = format('fencing token required for resource %s', shown),
			DETAIL = CASE WHEN col IS NULL THEN 'The token column of the row is NULL.'
						  ELSE format('The token column "%s" of the row is NULL.', fence__client_text(col)) END,
			HINT = 'Write the token the lock service granted into the token column.';
	END IF;
	RAISE EXCEPTION USING ERRCODE = '23T02',
		MESSAGE = format('fencing token required for resource %s', shown),
		DETAIL = format('This transaction has not accepted a fencing token for resource %s.', shown),
		HINT = 'Call fence_check(resource, token) earlier in the same transaction, or set the table''s token column in this statement.';
END
$$;

/*
 * A token column that fills itself in (a DEFAULT, serial's nextval, an
 * identity) would turn an INSERT that leaves the token out into one that
 * presents a value the lock service never granted. Refused by
 * fence_protect (protecting) and by the guard while one exists (the C
 * edition's event trigger also refuses the DDL that adds one; this edition
 * has none: docs/sql-edition.md).
 */
CREATE FUNCTION fence__raise_default(rel name, col name, ident boolean, protecting boolean)
	RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
	RAISE EXCEPTION USING ERRCODE = '0A000',
		MESSAGE = format('token column "%s" of "%s" %s', col, rel,
			CASE WHEN ident THEN 'is an identity column' ELSE 'has a default' END),
		DETAIL = 'An INSERT that leaves the token out would present the column''s own value as its '
			'fencing token, instead of failing with "fencing token required".',
		HINT = CASE WHEN protecting THEN
			format('Drop it (ALTER TABLE %s ALTER COLUMN %s DROP %s) and write the token the lock service granted.',
				quote_ident(rel), quote_ident(col), CASE WHEN ident THEN 'IDENTITY' ELSE 'DEFAULT' END)
			ELSE format('It was added after fence_protect(): drop it (ALTER TABLE %s ALTER COLUMN %s DROP %s); '
				'until then every write of the table fails.',
				quote_ident(rel), quote_ident(col), CASE WHEN ident THEN 'IDENTITY' ELSE 'DEFAULT' END) END;
END
$$;

/*
 * This transaction raised a highest or changed a lease: it commits with
 * synchronous_commit at least on (remote_apply stays), whatever the session
 * set (issue 26). SET LOCAL now; and, because a later SET, SET LOCAL or
 * RESET in the same transaction would undo that, the deferred constraint
 * trigger fence_sync_commit (on fence_tokens and fence_leases, queued by
 * the write that called for it) sets it again at COMMIT (row 21 of
 * docs/sql-edition.md). fence.sync_pending says that such an event is
 * queued and has not fired yet, so that a transaction queues one, not one
 * per advance (SET LOCAL: a rolled-back savepoint forgets it together with
 * the event it queued); it is set where a row of fence_tokens or
 * fence_leases was written (fence__advance, the lease functions).
 */
-- a row of fence_leases was written: synchronous_commit, and the event
CREATE FUNCTION fence__sync_lease() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	_s text;
BEGIN
	_s := pg_catalog.set_config('fence.sync_pending', 'on', true);
	RETURN fence__sync_on();
END
$$;

CREATE FUNCTION fence__sync_on() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	_s text;
BEGIN
	IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
		_s := pg_catalog.set_config('synchronous_commit', 'on', true);
	END IF;
	RETURN true;
END
$$;

-- A key column of a nondeterministic collation: refused by fence_protect
-- and, once one was given to the column later, by the guard at every write
-- (the C edition's check_key_type, same message).
CREATE FUNCTION fence__raise_nondeterministic(col name, rel name) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
	RAISE EXCEPTION USING ERRCODE = '0A000',
		MESSAGE = format('key column "%s" of "%s" cannot name a fence: its collation is nondeterministic', col, rel),
		DETAIL = 'Keys that the collation treats as equal would be fenced as different resources.',
		HINT = 'Use a deterministic collation for the key column, e.g. an ordinary column the application fills with lower(key).';
END
$$;

-- The token this transaction is fenced at on r, or NULL.
CREATE FUNCTION fence__mine(r text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
	held text := current_setting('fence.held', true);
	t bigint;
BEGIN
	IF held IS NULL OR held = '' THEN
		RETURN NULL;
	END IF;
	t := (held::jsonb ->> r)::bigint;
	IF t IS NULL AND current_setting('fence.escalated', true) IN ('share', 'exclusive') THEN
		SELECT m.token INTO t FROM pg_temp.fence_held_more m WHERE m.resource = (r COLLATE "default");
	END IF;
	RETURN t;
END
$$;

-- Remember that this transaction is fenced on r at t (SET LOCAL: a
-- rolled-back savepoint forgets it, as it releases the lock).
CREATE FUNCTION fence__remember(r text, t bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	_s text;
	held text := current_setting('fence.held', true);
	j jsonb;
BEGIN
	IF held IS NULL OR held = '' THEN
		j := '{}';
	ELSE
		j := held::jsonb;
	END IF;
	IF j ? r OR current_setting('fence.escalated', true) NOT IN ('share', 'exclusive')
	   OR current_setting('fence.escalated', true) IS NULL THEN
		_s := pg_catalog.set_config('fence.held', (j || jsonb_build_object(r, t))::text, true);
	ELSE
		INSERT INTO pg_temp.fence_held_more AS m VALUES (r, t)
			ON CONFLICT (resource) DO UPDATE SET token = excluded.token;
	END IF;
	RETURN true;
END
$$;

-- Take a lock so that it belongs to the (sub)transaction, whatever portal
-- is running: inside a block with an EXCEPTION clause (a subtransaction,
-- whose locks pass to the transaction or savepoint at its end), never to a
-- cursor's portal, which would keep it past a rolled-back savepoint.
-- what: 'share', 'exclusive' (the resource's advisory lock, k1/k2), or
-- 'ROW SHARE', 'SHARE', 'EXCLUSIVE' (fence_tokens' own lock).
CREATE FUNCTION fence__lock(what text, k1 integer DEFAULT 0, k2 integer DEFAULT 0) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
	BEGIN
		IF what = 'share' THEN
			PERFORM pg_advisory_xact_lock_shared(k1, k2);
		ELSIF what = 'exclusive' THEN
			PERFORM pg_advisory_xact_lock(k1, k2);
		ELSIF what = 'ROW SHARE+share' THEN
			LOCK TABLE fence_tokens IN ROW SHARE MODE;
			PERFORM pg_advisory_xact_lock_shared(k1, k2);
		ELSIF what = 'ROW SHARE' THEN
			LOCK TABLE fence_tokens IN ROW SHARE MODE;
		ELSIF what = 'SHARE' THEN
			LOCK TABLE fence_tokens IN SHARE MODE;
		ELSE
			LOCK TABLE fence_tokens IN EXCLUSIVE MODE;
		END IF;
	EXCEPTION WHEN SQLSTATE 'FNC99' THEN
		NULL;	-- never raised: the clause makes the block a subtransaction
	END;
	RETURN true;
END
$$;

-- Escalate: SHARE on fence_tokens instead of one lock per further resource.
CREATE FUNCTION fence__escalate() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	_ok boolean;
	_s text;
BEGIN
	_ok := fence__lock('SHARE');
	IF to_regclass('pg_temp.fence_held_more') IS NULL THEN
		CREATE TEMP TABLE fence_held_more (resource text PRIMARY KEY, token bigint NOT NULL)
			ON COMMIT DELETE ROWS;
	ELSIF (SELECT c.relowner FROM pg_catalog.pg_class c
			WHERE c.oid = 'pg_temp.fence_held_more'::regclass) <> (SELECT r.oid FROM pg_catalog.pg_roles r
			WHERE r.rolname = current_user) THEN
		-- not the table fence made (a session's own of that name): refuse
		RAISE EXCEPTION USING ERRCODE = '55000',
			MESSAGE = 'fence: pg_temp.fence_held_more was not created by fence',
			HINT = 'Drop that temporary table; fence keeps the fences of a large transaction in it.';
	END IF;
	_s := pg_catalog.set_config('fence.escalated', 'share', true);
	RETURN true;
END
$$;

/*
 * An advance of r to t (or r's first token): the exclusive lock (fence_tokens'
 * own once escalated), then the highest read again. Returns NULL once t is
 * accepted (and written), or the highest that makes t stale.
 */
CREATE FUNCTION fence__advance(r text, t bigint, k1 integer, k2 integer, esc text, rc boolean)
	RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	_ok boolean;
	_s text;
	wrote boolean := false;
	h bigint;
BEGIN
	IF esc = 'share' THEN
		_ok := fence__lock('EXCLUSIVE');
	ELSIF esc IS NULL OR esc NOT IN ('share', 'exclusive') THEN
		_ok := fence__lock('exclusive', k1, k2);
	END IF;
	IF rc THEN
		SELECT f.token INTO h FROM fence_tokens f WHERE f.resource = (r COLLATE "default");
	ELSE
		SELECT f.token INTO h FROM fence_tokens f WHERE f.resource = (r COLLATE "default") FOR NO KEY UPDATE;
	END IF;
	IF h IS NOT NULL AND t < h THEN
		RETURN h;
	END IF;
	IF h IS NULL THEN
		INSERT INTO fence_tokens AS f (resource, token) VALUES (r, t)
			ON CONFLICT (resource) DO NOTHING;
		wrote := FOUND;
	ELSIF t > h THEN
		UPDATE fence_tokens f SET token = t, updated_at = now() WHERE f.resource = (r COLLATE "default");
		wrote := FOUND;
	END IF;
	IF wrote THEN
		-- the write queued fence_sync_commit (unless one is pending)
		_s := pg_catalog.set_config('fence.sync_pending', 'on', true);
	END IF;
	RETURN NULL;
END
$$;

/*
 * The accept rule, with its locks. Returns true on accept; on a stale token
 * raises 23T01 (raise_stale) or returns false. Writes fence_tokens on an
 * advance. The caller has validated r and t.
 */
CREATE FUNCTION fence__accept(r text, t bigint, raise_stale boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	mine bigint;
	h bigint;
	adv boolean := false;
BEGIN
	mine := fence__mine(r);
	IF mine IS NOT NULL THEN
		-- already fenced on r at mine: its highest is mine (our lock keeps it)
		IF t = mine THEN
			RETURN true;
		ELSIF t < mine THEN
			IF raise_stale THEN
				PERFORM fence__raise_stale(r, t, mine);
			END IF;
			RETURN false;
		END IF;
	ELSIF current_setting('fence.escalated', true) IS DISTINCT FROM 'share'
		  AND current_setting('fence.escalated', true) IS DISTINCT FROM 'exclusive' THEN
		-- the highest without a lock (at READ COMMITTED the newest commit,
		-- else the snapshot's; an escalated transaction takes no lock of r)
		SELECT f.token INTO h FROM fence_tokens f WHERE f.resource = (r COLLATE "default");
		-- fence_try: a token below the committed highest is stale whatever
		-- is in flight (the highest never falls, except by fence_reset), so
		-- it is refused at once, without taking a lock
		IF NOT raise_stale AND h IS NOT NULL AND t < h THEN
			RETURN false;
		END IF;
		-- above it: most likely an advance (fence__accept_locked takes its
		-- exclusive lock first)
		adv := h IS NULL OR t > h;
	END IF;
	IF raise_stale THEN
		-- fence_check's error ends the statement, and its locks with it: it
		-- takes the lock first and waits for an advance in flight, as the C
		-- edition does
		RETURN fence__accept_locked(r, t, true, mine, adv);
	END IF;
	-- fence_try: the locks are taken in a subtransaction that a false
	-- (found stale after waiting for an advance in flight) rolls back, so
	-- that a transaction that goes on after a false holds no lock of r
	-- (nor ROW SHARE on fence_tokens, nor an escalation) that the next
	-- holder's advance would wait for
	BEGIN
		RETURN fence__accept_locked(r, t, false, mine, adv);
	EXCEPTION WHEN SQLSTATE 'FNC01' THEN
		RETURN false;
	END;
END
$$;

/*
 * fence__accept once the committed highest does not make t stale: lock,
 * read the highest again, accept or advance. A stale t raises 23T01
 * (raise_stale) or FNC01 (fence_try's, caught by fence__accept, which
 * undoes the locks with its subtransaction).
 */
CREATE FUNCTION fence__accept_locked(r text, t bigint, raise_stale boolean, mine bigint, adv boolean)
	RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	_ok boolean;
	_s text;
	h bigint;
	k bigint;
	k1 integer;
	k2 integer;
	esc text;
	rc boolean;
	held text;
	n_held bigint;
	max_held integer := current_setting('max_locks_per_transaction')::integer / 2;
BEGIN
	esc := current_setting('fence.escalated', true);
	-- READ COMMITTED: a plain read sees the newest commit. A read-only
	-- transaction (on a hot standby every one) cannot read FOR SHARE: it
	-- reads its snapshot's highest, refuses a token below it and accepts
	-- one equal to it; it writes nothing, so no fenced write commits from
	-- it (row 25 of docs/sql-edition.md)
	rc := current_setting('transaction_isolation') = 'read committed'
		  OR current_setting('transaction_read_only') = 'on';
	k := hashtextextended(r COLLATE "C", 17989);
	k1 := (k >> 32)::integer;
	k2 := ((k << 32) >> 32)::integer;
	IF mine IS NULL THEN
		held := current_setting('fence.held', true);
		IF held IS NOT NULL AND held <> '' AND (esc IS NULL OR esc = '') THEN
			n_held := (SELECT count(*) FROM jsonb_object_keys(held::jsonb));
		END IF;
		-- An advance (t above the highest read without a lock) takes the
		-- exclusive lock of r first, before the share lock: two
		-- transactions advancing r to the same token (two connections of
		-- one holder) would otherwise both hold the share lock and each
		-- wait for the other's to take the exclusive one (40P01). If the
		-- highest reached t (or passed it) while it waited, the
		-- subtransaction gives the exclusive lock back: a same-token
		-- holder keeps only the share lock (not when it escalates here, nor
		-- read-only, where an advance is refused anyway)
		IF adv AND (esc IS NULL OR esc = '') AND coalesce(n_held, 0) < max_held
		   AND current_setting('transaction_read_only') = 'off' THEN
			BEGIN
				_ok := fence__lock('exclusive', k1, k2);
				SELECT f.token INTO h FROM fence_tokens f WHERE f.resource = (r COLLATE "default");
				IF h IS NOT NULL AND t <= h THEN
					RAISE EXCEPTION USING ERRCODE = 'FNC02', MESSAGE = 'not an advance';
				END IF;
			EXCEPTION WHEN SQLSTATE 'FNC02' THEN
				NULL;
			END;
		END IF;
		IF held IS NULL OR held = '' THEN
			-- the first fence of this transaction: the gate an escalated
			-- advance waits at, and the resource's lock
			_ok := fence__lock('ROW SHARE+share', k1, k2);
		ELSIF esc IS NULL OR esc = '' THEN
			IF n_held >= max_held THEN
				_ok := fence__escalate();
				esc := 'share';
			ELSE
				_ok := fence__lock('share', k1, k2);
			END IF;
		END IF;
		IF rc THEN
			SELECT f.token INTO h FROM fence_tokens f WHERE f.resource = (r COLLATE "default");
		ELSE
			SELECT f.token INTO h FROM fence_tokens f WHERE f.resource = (r COLLATE "default") FOR SHARE;
		END IF;
		IF h IS NOT NULL AND t < h THEN
			IF raise_stale THEN
				PERFORM fence__raise_stale(r, t, h);
			END IF;
			RAISE EXCEPTION USING ERRCODE = 'FNC01', MESSAGE = 'stale after the wait';
		ELSIF h IS NOT NULL AND t = h THEN
			_ok := fence__remember(r, t);
			RETURN true;
		END IF;
	END IF;

	IF current_setting('transaction_read_only') = 'on' THEN
		-- (fence_check() for fence_try too: the C edition's message)
		RAISE EXCEPTION USING ERRCODE = '25006',
			MESSAGE = 'cannot execute fence_check() in a read-only transaction';
	END IF;
	-- An advance (or the first token of r)
	h := fence__advance(r, t, k1, k2, esc, rc);
	IF h IS NOT NULL THEN
		IF raise_stale THEN
			PERFORM fence__raise_stale(r, t, h);
		END IF;
		RAISE EXCEPTION USING ERRCODE = 'FNC01', MESSAGE = 'stale after the wait';
	END IF;
	IF esc = 'share' THEN
		_s := pg_catalog.set_config('fence.escalated', 'exclusive', true);
	END IF;
	-- an acknowledged advance must be durable (issue 26): whatever the
	-- session set, this transaction commits synchronously
	_ok := fence__sync_on();
	_ok := fence__remember(r, t);
	RETURN true;
END
$$;

-- ---------------------------------------------------------------------
-- The functions of the contract
-- ---------------------------------------------------------------------

-- Not STRICT: a NULL argument raises 22004 instead of returning NULL.
CREATE FUNCTION fence_check(resource text, token bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
	_ok boolean;
	-- the resource as its bytes: a parameter takes the collation of its
	-- argument (a column of a nondeterministic collation would make
	-- 'A' and 'a' one resource): row 24 of docs/sql-edition.md
	r text COLLATE "default" := resource;
BEGIN
	_ok := fence__check_text(r, 'resource');
	_ok := fence__check_token(token);
	_ok := fence__accept(r, token, true);
	RETURN token;
END
$$;
COMMENT ON FUNCTION fence_check(text, bigint) IS
	'accept the token for the resource in this transaction, or raise 23T01';

CREATE FUNCTION fence_try(resource text, token bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
	_ok boolean;
	r text COLLATE "default" := resource;	-- its bytes (fence_check)
BEGIN
	_ok := fence__check_text(r, 'resource');
	_ok := fence__check_token(token);
	RETURN fence__accept(r, token, false);
END
$$;
COMMENT ON FUNCTION fence_try(text, bigint) IS
	'accept the token for the resource in this transaction, or return false';

CREATE FUNCTION fence_current(resource text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
	_ok boolean;
	h bigint;
	r text COLLATE "default" := resource;	-- its bytes (fence_check)
BEGIN
	_ok := fence__check_text(r, 'resource');
	SELECT f.token INTO h FROM fence_tokens f WHERE f.resource = r;
	RETURN h;
END
$$;
COMMENT ON FUNCTION fence_current(text) IS
	'the highest accepted token of the resource, or NULL';

CREATE FUNCTION fence_reset(resource text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
	_ok boolean;
	_s text;
	k bigint;
	held text;
	r text COLLATE "default" := resource;	-- its bytes (fence_check)
BEGIN
	_ok := fence__check_text(r, 'resource');
	IF current_setting('fence.escalated', true) IN ('share', 'exclusive') THEN
		_ok := fence__lock('EXCLUSIVE');
		_s := pg_catalog.set_config('fence.escalated', 'exclusive', true);
		DELETE FROM pg_temp.fence_held_more m WHERE m.resource = r;
	ELSE
		k := hashtextextended(r COLLATE "C", 17989);
		_ok := fence__lock('exclusive', (k >> 32)::integer, ((k << 32) >> 32)::integer);
	END IF;
	DELETE FROM fence_tokens f WHERE f.resource = r;
	held := current_setting('fence.held', true);
	IF held IS NOT NULL AND held <> '' THEN
		_s := pg_catalog.set_config('fence.held', (held::jsonb - r)::text, true);
	END IF;
END
$$;
COMMENT ON FUNCTION fence_reset(text) IS
	'forget the highest token of the resource (after the lock service was rebuilt)';

CREATE FUNCTION fence_held(OUT resource text, OUT token bigint) RETURNS SETOF record
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
	held text := current_setting('fence.held', true);
BEGIN
	IF held IS NOT NULL AND held <> '' THEN
		RETURN QUERY SELECT e.key, e.value::bigint FROM jsonb_each_text(held::jsonb) e;
		IF current_setting('fence.escalated', true) IN ('share', 'exclusive') THEN
			RETURN QUERY SELECT m.resource, m.token FROM pg_temp.fence_held_more m;
		END IF;
	END IF;
END
$$;
COMMENT ON FUNCTION fence_held() IS
	'the fences this transaction holds: resource and token';

-- ---------------------------------------------------------------------
-- The guard of a protected table
-- ---------------------------------------------------------------------

-- The key of a row as ::text gives it (the key column's kind decides:
-- '' for types whose JSON text is ::text, bpchar, inet, cidr).
CREATE FUNCTION fence__key_text(v text, kind text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE kind
		WHEN 'bpchar' THEN rtrim(v, ' ')
		WHEN 'inet' THEN v::inet::text
		WHEN 'cidr' THEN v::cidr::text
		ELSE v END
$$;

-- Present a row's token (NULL is 23T02) under the resource.
CREATE FUNCTION fence__present(r text, tok text, col text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	_ok boolean;
	t bigint;
BEGIN
	IF tok IS NULL THEN
		PERFORM fence__raise_missing(r, 'null', col);
	END IF;
	t := tok::bigint;
	_ok := fence__check_token(t);
	_ok := fence__accept(r, t, true);
	RETURN true;
END
$$;

CREATE FUNCTION fence__require(r text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
	IF fence__mine(r) IS NULL THEN
		PERFORM fence__raise_missing(r, 'unfenced', NULL);
	END IF;
	RETURN true;
END
$$;

/*
 * fence_guard(token_column, resource_or_prefix, key_column, key_kind): the
 * triggers fence_protect installs ('' for an absent column):
 *   fence_guard           BEFORE UPDATE OF token_column, FOR EACH ROW: an
 *                         UPDATE whose statement sets the token column
 *                         presents the new token (under the old and the new
 *                         row's resource)
 *   fence_guard_row       BEFORE INSERT OR UPDATE OR DELETE, FOR EACH ROW:
 *                         an INSERT presents its token (or, without a token
 *                         column, needs a fence); every UPDATE and DELETE
 *                         needs a fence on the row's resource(s), which
 *                         fence_guard has just given it when the statement
 *                         set the token
 *   fence_guard_truncate  BEFORE TRUNCATE, FOR EACH STATEMENT
 * BEFORE ROW triggers fire in name order, so fence_guard runs first.
 */
CREATE FUNCTION fence_guard() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
	_ok boolean;
	tokcol text;
	res text;
	keycol text;
	kind text;
	new_r text;
	old_r text;
	j jsonb;
	ddef boolean;
	dtype regtype;
	dident boolean;
	dinh boolean;
	dname name;
	up oid;
	ktype text;
	kcoll oid;
BEGIN
	IF TG_WHEN <> 'BEFORE' OR (TG_LEVEL = 'STATEMENT' AND TG_OP <> 'TRUNCATE') OR TG_NARGS <> 4 THEN
		RAISE EXCEPTION USING ERRCODE = '39P01',
			MESSAGE = 'fence_guard() must be fired BEFORE, for each row or for TRUNCATE',
			HINT = 'Install the guard with fence_protect().';
	END IF;
	tokcol := nullif(TG_ARGV[0], '');
	res := TG_ARGV[1];
	keycol := nullif(TG_ARGV[2], '');
	kind := TG_ARGV[3];
	-- a token column that fills itself in: every write fails while it has
	-- a default or an identity, or (for a partition, which an INSERT
	-- through a parent fills from that parent's default) an ancestor's
	-- column has one. Checked where every write passes (fence_guard_row,
	-- fence_guard_truncate; fence_guard fires first on an UPDATE that sets
	-- the token, and its accept is undone with the statement): one look-up
	-- in pg_attribute per row; the parents only when the column is
	-- inherited, one level at a time (pg_partition_ancestors cost about
	-- 100 us per row).
	IF tokcol IS NOT NULL AND TG_NAME <> 'fence_guard' THEN
		SELECT a.atthasdef OR a.attidentity <> '', a.attidentity <> '', a.attinhcount > 0, a.atttypid
		  INTO ddef, dident, dinh, dtype FROM pg_catalog.pg_attribute a
		 WHERE a.attrelid = TG_RELID AND a.attname = tokcol AND NOT a.attisdropped;
		-- a migration to another type (a domain, whose DEFAULT would fill
		-- the token in): every write fails, as fence_protect would refuse it
		IF dtype NOT IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype) THEN
			RAISE EXCEPTION USING ERRCODE = '42804',
				MESSAGE = format('token column "%s" of "%s" must be bigint, integer or smallint, not %s',
					tokcol, TG_TABLE_NAME, dtype),
				HINT = 'Fencing tokens are 64-bit integers: use a bigint column.';
		END IF;
		up := TG_RELID;
		WHILE dinh AND NOT ddef LOOP
			-- single-table look-ups: a join of them was planned per row
			SELECT k.relispartition INTO dinh FROM pg_catalog.pg_class k WHERE k.oid = up;
			EXIT WHEN NOT dinh;
			SELECT i.inhparent INTO up FROM pg_catalog.pg_inherits i WHERE i.inhrelid = up;
			SELECT a.atthasdef OR a.attidentity <> '', a.attidentity <> '', a.attinhcount > 0
			  INTO ddef, dident, dinh FROM pg_catalog.pg_attribute a
			 WHERE a.attrelid = up AND a.attname = tokcol AND NOT a.attisdropped;
		END LOOP;
		IF ddef THEN
			SELECT k.relname INTO dname FROM pg_catalog.pg_class k WHERE k.oid = up;
			_ok := fence__raise_default(dname, tokcol, dident, false);
		END IF;
	END IF;
	IF TG_OP = 'TRUNCATE' THEN
		IF keycol IS NOT NULL THEN
			RAISE EXCEPTION USING ERRCODE = '0A000',
				MESSAGE = format('cannot truncate "%s": it is fenced per row', TG_TABLE_NAME),
				DETAIL = 'Each row has its own resource, and TRUNCATE sees no rows.',
				HINT = 'DELETE the rows in a transaction fenced on each of them.';
		END IF;
		_ok := fence__require(res);
		RETURN NULL;
	END IF;

	-- the row's resource(s)
	IF keycol IS NULL THEN
		new_r := res;
		old_r := res;
	ELSE
		-- the key's type, checked where every write passes (fence_guard_row;
		-- fence_guard fires first, but its accept is undone with the
		-- statement when fence_guard_row then refuses)
		-- and its collation (row 22): one that became nondeterministic
		-- would make two resources of one key. The collation fence_protect
		-- saw is the third part of kind; another one is looked up.
		IF TG_NAME = 'fence_guard_row' THEN
			SELECT pg_catalog.format_type(a.atttypid, NULL), a.attcollation INTO ktype, kcoll
			  FROM pg_catalog.pg_attribute a
			 WHERE a.attrelid = TG_RELID AND a.attname = keycol AND NOT a.attisdropped;
			IF ktype IS DISTINCT FROM split_part(kind, '/', 2) THEN
				RAISE EXCEPTION USING ERRCODE = '42804',
					MESSAGE = format('key column "%s" of "%s" changed its type after fence_protect()',
						keycol, TG_TABLE_NAME),
					HINT = 'Change it back, or protect the table again with fence_protect().';
			END IF;
			IF kcoll <> 0 AND kcoll::text IS DISTINCT FROM split_part(kind, '/', 3)
			   AND NOT (SELECT co.collisdeterministic FROM pg_catalog.pg_collation co WHERE co.oid = kcoll) THEN
				_ok := fence__raise_nondeterministic(keycol, TG_TABLE_NAME);
			END IF;
		END IF;
		-- the key as ::text gives it (bpchar without its padding; inet and
		-- cidr through their own types); fence_protect allows no other
		-- type whose JSON text differs from ::text
		IF TG_OP <> 'DELETE' THEN
			j := to_jsonb(NEW);
			new_r := j ->> keycol;
		END IF;
		IF TG_OP <> 'INSERT' THEN
			old_r := to_jsonb(OLD) ->> keycol;
		END IF;
		IF (TG_OP <> 'DELETE' AND new_r IS NULL) OR (TG_OP <> 'INSERT' AND old_r IS NULL) THEN
			RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'invalid fencing key: NULL';
		END IF;
		kind := split_part(kind, '/', 1);
		IF kind <> '' THEN
			new_r := CASE kind WHEN 'bpchar' THEN rtrim(new_r, ' ') WHEN 'inet' THEN new_r::inet::text
							   ELSE new_r::cidr::text END;
			old_r := CASE kind WHEN 'bpchar' THEN rtrim(old_r, ' ') WHEN 'inet' THEN old_r::inet::text
							   ELSE old_r::cidr::text END;
		END IF;
		new_r := res || new_r;
		old_r := res || old_r;
		IF octet_length(new_r) > 1024 THEN
			_ok := fence__check_text(new_r, 'resource');
		END IF;
		IF octet_length(old_r) > 1024 THEN
			_ok := fence__check_text(old_r, 'resource');
		END IF;
	END IF;

	IF TG_NAME = 'fence_guard' THEN
		-- BEFORE UPDATE OF the token column: the statement set it
		IF TG_OP <> 'UPDATE' OR tokcol IS NULL THEN
			RAISE EXCEPTION USING ERRCODE = '39P01',
				MESSAGE = 'fence_guard() must be fired BEFORE, for each row or for TRUNCATE',
				HINT = 'Install the guard with fence_protect().';
		END IF;
		IF j IS NULL THEN
			j := to_jsonb(NEW);
		END IF;
		_ok := fence__present(old_r, j ->> tokcol, tokcol);
		IF new_r IS DISTINCT FROM old_r THEN
			_ok := fence__present(new_r, j ->> tokcol, tokcol);
		END IF;
		RETURN NEW;
	END IF;

	IF TG_OP = 'INSERT' THEN
		IF tokcol IS NOT NULL THEN
			IF j IS NULL THEN
				j := to_jsonb(NEW);
			END IF;
			_ok := fence__present(new_r, j ->> tokcol, tokcol);
		ELSE
			_ok := fence__require(new_r);
		END IF;
		RETURN NEW;
	ELSIF TG_OP = 'UPDATE' THEN
		_ok := fence__require(old_r);
		IF new_r IS DISTINCT FROM old_r THEN
			_ok := fence__require(new_r);
		END IF;
		RETURN NEW;
	ELSE
		_ok := fence__require(old_r);
		RETURN OLD;
	END IF;
END
$$;
COMMENT ON FUNCTION fence_guard() IS
	'trigger of fence_protect(): checks every write of a protected table';

-- fence_protect's worker: validate, then (re)install the triggers on the
-- table and on every table below it. Runs as the caller (who must own every
-- table): creating a trigger needs the table's owner.
CREATE FUNCTION fence__protect(tbl regclass, token_column name, resource text, key_column name,
							   per_row boolean) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER AS $$
DECLARE
	_ok boolean;
	func text := 'fence_protect';
	rel record;
	att record;
	kind text := '';
	args text;
	guard text;
	t regclass;
BEGIN
	IF tbl IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'invalid fencing table: NULL';
	END IF;
	_ok := fence__check_text(resource, CASE WHEN per_row THEN 'resource' ELSE 'resource' END);
	IF per_row AND key_column IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'invalid fencing key column: NULL';
	END IF;
	SELECT c.relkind, c.relname, c.relowner INTO rel FROM pg_catalog.pg_class c WHERE c.oid = tbl;
	IF rel.relkind NOT IN ('r', 'p') THEN
		RAISE EXCEPTION USING ERRCODE = '42809', MESSAGE = format('%s: "%s" is not a table', func, rel.relname);
	END IF;
	IF tbl = 'fence_tokens'::regclass OR tbl = 'fence_leases'::regclass THEN
		RAISE EXCEPTION USING ERRCODE = '42809', MESSAGE = format('%s: the fence''s own table cannot be protected', func);
	END IF;
	IF NOT pg_catalog.pg_has_role(rel.relowner, 'USAGE') THEN
		RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('must be owner of table %s', rel.relname);
	END IF;
	IF token_column IS NOT NULL THEN
		SELECT a.atttypid, a.attgenerated, a.attidentity, a.atthasdef,
			   pg_catalog.format_type(a.atttypid, a.atttypmod) AS typ,
			   (SELECT ty.typbasetype FROM pg_catalog.pg_type ty WHERE ty.oid = a.atttypid) AS base
		  INTO att FROM pg_catalog.pg_attribute a
		 WHERE a.attrelid = tbl AND a.attname = token_column AND a.attnum > 0 AND NOT a.attisdropped;
		IF NOT FOUND THEN
			RAISE EXCEPTION USING ERRCODE = '42703',
				MESSAGE = format('column "%s" of relation "%s" does not exist', token_column, rel.relname);
		END IF;
		IF att.attgenerated <> '' THEN
			RAISE EXCEPTION USING ERRCODE = '0A000',
				MESSAGE = format('column "%s" of "%s" is generated and cannot be a fence''s token or key', token_column, rel.relname),
				DETAIL = 'Generated columns are computed after BEFORE triggers, so the guard would judge the old value.',
				HINT = 'Use an ordinary column that the application writes.';
		END IF;
		-- not a domain over one either: a domain's DEFAULT would fill the token in
		IF att.atttypid NOT IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype) THEN
			RAISE EXCEPTION USING ERRCODE = '42804',
				MESSAGE = format('token column "%s" of "%s" must be bigint, integer or smallint, not %s',
					token_column, rel.relname, att.typ),
				HINT = 'Fencing tokens are 64-bit integers: use a bigint column.';
		END IF;
		IF att.attidentity <> '' OR att.atthasdef THEN
			_ok := fence__raise_default(rel.relname, token_column, att.attidentity <> '', true);
		END IF;
	END IF;
	IF key_column IS NOT NULL THEN
		SELECT a.atttypid, a.attgenerated, a.attcollation,
			   pg_catalog.format_type(a.atttypid, a.atttypmod) AS typ,
			   coalesce(nullif((SELECT ty.typbasetype FROM pg_catalog.pg_type ty WHERE ty.oid = a.atttypid), 0),
						a.atttypid) AS base
		  INTO att FROM pg_catalog.pg_attribute a
		 WHERE a.attrelid = tbl AND a.attname = key_column AND a.attnum > 0 AND NOT a.attisdropped;
		IF NOT FOUND THEN
			RAISE EXCEPTION USING ERRCODE = '42703',
				MESSAGE = format('column "%s" of relation "%s" does not exist', key_column, rel.relname);
		END IF;
		IF att.attgenerated <> '' THEN
			RAISE EXCEPTION USING ERRCODE = '0A000',
				MESSAGE = format('column "%s" of "%s" is generated and cannot be a fence''s token or key', key_column, rel.relname),
				DETAIL = 'Generated columns are computed after BEFORE triggers, so the guard would judge the old value.',
				HINT = 'Use an ordinary column that the application writes.';
		END IF;
		IF att.base NOT IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'text'::regtype,
							'varchar'::regtype, 'bpchar'::regtype, 'uuid'::regtype,
							'inet'::regtype, 'cidr'::regtype) THEN
			RAISE EXCEPTION USING ERRCODE = '42804',
				MESSAGE = format('key column "%s" of "%s" cannot name a fence: type %s', key_column, rel.relname, att.typ),
				DETAIL = 'A per-row resource must not depend on session settings or on an equality that differs from its text.',
				HINT = 'Protect with a key of one of these types, e.g. an ordinary column the application writes: smallint, integer, bigint, text, varchar, char(n), uuid, inet, cidr.';
		END IF;
		IF att.attcollation <> 0 AND NOT (SELECT co.collisdeterministic FROM pg_catalog.pg_collation co
										   WHERE co.oid = att.attcollation) THEN
			_ok := fence__raise_nondeterministic(key_column, rel.relname);
		END IF;
		-- how the key becomes text / its type / its collation (checked by
		-- fence_guard_row at every write)
		kind := CASE att.base WHEN 'bpchar'::regtype THEN 'bpchar' WHEN 'inet'::regtype THEN 'inet'
							  WHEN 'cidr'::regtype THEN 'cidr' ELSE '' END
				|| '/' || pg_catalog.format_type(att.atttypid, NULL) || '/' || att.attcollation::oid::text;
	END IF;

	PERFORM fence__unprotect(tbl);
	args := format('%L, %L, %L, %L', coalesce(token_column, ''), resource, coalesce(key_column, ''), kind);
	-- the table and every table below it; a partition gets its row
	-- triggers from its partitioned parent (PostgreSQL clones them)
	FOR t IN
		WITH RECURSIVE below(relid) AS (
			SELECT tbl::oid
			UNION
			SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN below b ON i.inhparent = b.relid)
		SELECT relid::regclass FROM below
	LOOP
		IF NOT pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = t), 'USAGE') THEN
			RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('must be owner of table %s', t);
		END IF;
		IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = t) NOT IN ('r', 'p') THEN
			RAISE EXCEPTION USING ERRCODE = '42809',
				MESSAGE = format('"%s" below the protected table "%s" is not a table', t, rel.relname);
		END IF;
		IF t = tbl OR NOT (SELECT c.relispartition FROM pg_catalog.pg_class c WHERE c.oid = t) THEN
			IF token_column IS NOT NULL THEN
				EXECUTE format('CREATE TRIGGER fence_guard BEFORE UPDATE OF %I ON %s FOR EACH ROW EXECUTE FUNCTION %s(%s)',
					token_column, t, 'fence_guard'::regproc, args);
			END IF;
			EXECUTE format('CREATE TRIGGER fence_guard_row BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION %s(%s)',
				t, 'fence_guard'::regproc, args);
		END IF;
		EXECUTE format('CREATE TRIGGER fence_guard_truncate BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)',
			t, 'fence_guard'::regproc, args);
	END LOOP;
END
$$;

CREATE FUNCTION fence__unprotect(tbl regclass) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER AS $$
DECLARE
	tg record;
BEGIN
	IF tbl IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'invalid fencing table: NULL';
	END IF;
	IF NOT pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = tbl), 'USAGE') THEN
		RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('must be owner of table %s', tbl);
	END IF;
	FOR tg IN
		WITH RECURSIVE below(relid) AS (
			SELECT tbl::oid
			UNION
			SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN below b ON i.inhparent = b.relid)
		SELECT g.tgname, g.tgrelid::regclass AS rel FROM pg_catalog.pg_trigger g JOIN below b ON g.tgrelid = b.relid
		 WHERE g.tgfoid = 'fence_guard'::regproc AND g.tgparentid = 0
		   AND g.tgname IN ('fence_guard', 'fence_guard_row', 'fence_guard_truncate')
	LOOP
		EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', tg.tgname, tg.rel);
	END LOOP;
END
$$;

CREATE FUNCTION fence_protect(tbl regclass, token_column name, resource text) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
	PERFORM fence__protect(tbl, token_column, resource, NULL, false);
END
$$;
COMMENT ON FUNCTION fence_protect(regclass, name, text) IS
	'guard every INSERT, UPDATE, DELETE and TRUNCATE of the table with one fence';

CREATE FUNCTION fence_protect(tbl regclass, token_column name, resource_prefix text,
							  key_column name) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
	PERFORM fence__protect(tbl, token_column, resource_prefix, key_column, true);
END
$$;
COMMENT ON FUNCTION fence_protect(regclass, name, text, name) IS
	'guard every row of the table with the fence resource_prefix || key_column::text';

CREATE FUNCTION fence_unprotect(tbl regclass) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
	PERFORM fence__unprotect(tbl);
END
$$;
COMMENT ON FUNCTION fence_unprotect(regclass) IS 'remove the guard of fence_protect()';

-- ---------------------------------------------------------------------
-- Leases
-- ---------------------------------------------------------------------

CREATE FUNCTION fence__check_lease(resource text, holder text, ttl_ms bigint) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	_ok boolean;
BEGIN
	_ok := fence__check_text(resource, 'resource');
	_ok := fence__check_text(holder, 'lease holder', 256);
	IF ttl_ms IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'invalid fencing lease ttl: NULL';
	ELSIF ttl_ms < 1 OR ttl_ms > 2147483647 THEN
		RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
			'invalid fencing lease ttl: %s ms, it must be from 1 to 2147483647 ms (about 24.8 days)', ttl_ms);
	END IF;
	RETURN true;
END
$$;

-- The lease lock of a resource, tried, never waited for: false when another
-- open transaction changed this resource's lease (it holds the lock until
-- it ends).
CREATE FUNCTION fence__lease_lock(resource text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	k bigint := hashtextextended(resource COLLATE "C", 17990);
BEGIN
	RETURN pg_try_advisory_xact_lock((k >> 32)::integer, ((k << 32) >> 32)::integer);
END
$$;

CREATE FUNCTION fence_acquire(resource text, holder text, ttl_ms bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_variable
DECLARE
	_ok boolean;
	_s text;
	l record;
	h bigint;
	top bigint := 0;
	now_ts timestamptz := clock_timestamp();
	-- the resource and the holder as their bytes (fence_check)
	r text COLLATE "default" := resource;
	hd text COLLATE "C" := holder;
BEGIN
	_ok := fence__check_lease(r, hd, ttl_ms);
	IF current_setting('transaction_read_only') = 'on' THEN
		RAISE EXCEPTION USING ERRCODE = '25006',
			MESSAGE = 'cannot execute fence_acquire() in a read-only transaction';
	END IF;
	IF NOT fence__lease_lock(r) THEN
		RETURN NULL;
	END IF;
	SELECT f.holder, f.token, f.expires_at INTO l FROM fence_leases f
	 WHERE f.resource = r FOR UPDATE;
	IF FOUND AND now_ts < l.expires_at THEN
		IF (l.holder::text COLLATE "C") <> hd THEN
			RETURN NULL;
		END IF;
		UPDATE fence_leases f SET expires_at = now_ts + ttl_ms * interval '1 millisecond'
		 WHERE f.resource = r;
		_ok := fence__sync_lease();
		RETURN l.token;
	END IF;
	IF FOUND THEN
		top := l.token;
	END IF;
	SELECT f.token INTO h FROM fence_tokens f WHERE f.resource = r;
	IF h IS NOT NULL AND h > top THEN
		top := h;
	END IF;
	IF top = 9223372036854775807 THEN
		RAISE EXCEPTION USING ERRCODE = '22003',
			MESSAGE = format('invalid fencing token: every token of resource %s is used', fence__shown(r)),
			DETAIL = 'The highest granted or accepted token is 9223372036854775807.',
			HINT = 'Use another resource name.';
	END IF;
	INSERT INTO fence_leases AS f VALUES (r, hd, top + 1, now_ts + ttl_ms * interval '1 millisecond')
		ON CONFLICT ON CONSTRAINT fence_leases_pkey DO UPDATE SET holder = excluded.holder, token = excluded.token,
			expires_at = excluded.expires_at;
	_ok := fence__sync_lease();
	RETURN top + 1;
END
$$;
COMMENT ON FUNCTION fence_acquire(text, text, bigint) IS
	'grant a lease on the resource and return its token, or NULL while another holder''s lease is live';

CREATE FUNCTION fence__lease_end(resource text, holder text, token bigint, ttl_ms bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
	_ok boolean;
	l record;
	now_ts timestamptz := clock_timestamp();
	-- the resource and the holder as their bytes (fence_check)
	r text COLLATE "default" := resource;
	hd text COLLATE "C" := holder;
BEGIN
	IF NOT fence__lease_lock(r) THEN
		RETURN false;
	END IF;
	SELECT f.holder, f.token, f.expires_at INTO l FROM fence_leases f
	 WHERE f.resource = r FOR UPDATE;
	IF NOT FOUND OR now_ts >= l.expires_at OR l.token <> token OR (l.holder::text COLLATE "C") <> hd THEN
		RETURN false;
	END IF;
	UPDATE fence_leases f SET expires_at = CASE WHEN ttl_ms IS NULL THEN now_ts
		ELSE now_ts + ttl_ms * interval '1 millisecond' END
	 WHERE f.resource = r;
	_ok := fence__sync_lease();
	RETURN true;
END
$$;

CREATE FUNCTION fence_renew(resource text, holder text, token bigint, ttl_ms bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
	_ok boolean;
BEGIN
	_ok := fence__check_lease(resource, holder, ttl_ms);
	_ok := fence__check_token(token);
	RETURN fence__lease_end(resource, holder, token, ttl_ms);
END
$$;
COMMENT ON FUNCTION fence_renew(text, text, bigint, bigint) IS
	'extend a live lease to ttl_ms from now; false once it expired or passed to another holder';

CREATE FUNCTION fence_release(resource text, holder text, token bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
	_ok boolean;
BEGIN
	_ok := fence__check_lease(resource, holder, 1);
	_ok := fence__check_token(token);
	RETURN fence__lease_end(resource, holder, token, NULL);
END
$$;
COMMENT ON FUNCTION fence_release(text, text, bigint) IS
	'end a live lease early; false once it expired or passed to another holder';

-- ---------------------------------------------------------------------
-- Durability at COMMIT (row 21 of docs/sql-edition.md)
-- ---------------------------------------------------------------------

/*
 * The deferred constraint trigger fence_sync_commit fires at COMMIT (and at
 * PREPARE TRANSACTION) of a transaction that raised a highest or changed a
 * lease, after every statement of the transaction: it sets
 * synchronous_commit to at least on again, which a SET, SET LOCAL or RESET
 * after the advance undid. PostgreSQL reads the setting when it writes the
 * commit record, after the deferred triggers.
 *
 * SET CONSTRAINTS ALL IMMEDIATE (or naming it) fires it before the COMMIT.
 * So each firing queues it once more, deferred (SET CONSTRAINTS
 * fence_sync_commit DEFERRED, and a no-op UPDATE of the row), unless it
 * already did so in this statement (statement_timestamp()): at COMMIT the
 * event it queues fires at once, in the same statement, and then stops.
 * Nor when the query string is a lone COMMIT, which is the commit.
 * What that leaves open: SET CONSTRAINTS ... IMMEDIATE twice in one
 * query string (one statement_timestamp()) after the advance, then a
 * weaker synchronous_commit: the second firing does not queue it again.
 * A deferred trigger of the application that fires after it and lowers
 * synchronous_commit is code written around fence.
 */
CREATE FUNCTION fence__sync_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
	_s text;
	stamp text := extract(epoch FROM statement_timestamp())::text;
BEGIN
	-- fence's own tables only (search_path is pinned to fence's schema):
	-- attached to another table (a temporary one named fence_tokens) it
	-- would write a row of the real one as fence's owner. Not PUBLIC's
	-- either (below), as the C edition's fence_tokens_changed()
	IF TG_RELID IS DISTINCT FROM 'fence_tokens'::regclass AND TG_RELID IS DISTINCT FROM 'fence_leases'::regclass THEN
		RAISE EXCEPTION USING ERRCODE = '39P01',
			MESSAGE = format('fence__sync_commit() fires only on fence_tokens and fence_leases, not on "%s"', TG_TABLE_NAME),
			HINT = 'Drop the trigger: fence installs its own on fence_tokens and fence_leases.';
	END IF;
	IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
		_s := pg_catalog.set_config('synchronous_commit', 'on', true);
	END IF;
	-- this event has fired: a later write queues another one
	_s := pg_catalog.set_config('fence.sync_pending', '', true);
	-- a query string that is a lone COMMIT (or END) is the commit itself:
	-- nothing runs after this (the common case, at no further cost)
	IF current_setting('fence.sync_armed', true) IS DISTINCT FROM stamp
	   AND coalesce(current_query(), '') !~* '^\s*(commit|end)(\s+(work|transaction))?(\s+and\s+(no\s+)?chain)?\s*;?\s*$' THEN
		_s := pg_catalog.set_config('fence.sync_armed', stamp, true);
		-- (the first fence_sync_commit on search_path, which is pinned to
		-- fence's schema: both of its triggers)
		SET CONSTRAINTS fence_sync_commit DEFERRED;
		IF TG_RELID = 'fence_tokens'::regclass THEN
			UPDATE fence_tokens f SET resource = f.resource WHERE f.resource = NEW.resource;
		ELSE
			UPDATE fence_leases f SET resource = f.resource WHERE f.resource = NEW.resource;
		END IF;
		IF FOUND THEN
			_s := pg_catalog.set_config('fence.sync_pending', 'on', true);
		END IF;
	END IF;
	RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER fence_sync_commit AFTER INSERT OR UPDATE ON fence_tokens
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
	WHEN (pg_catalog.current_setting('fence.sync_pending', true) IS DISTINCT FROM 'on')
	EXECUTE FUNCTION fence__sync_commit();
CREATE CONSTRAINT TRIGGER fence_sync_commit AFTER INSERT OR UPDATE ON fence_leases
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
	WHEN (pg_catalog.current_setting('fence.sync_pending', true) IS DISTINCT FROM 'on')
	EXECUTE FUNCTION fence__sync_commit();

-- ---------------------------------------------------------------------
-- fence_stats: the shape of the C edition's view. SQL has no memory that a
-- rollback leaves alone (a stale error rolls back its statement), so this
-- edition counts nothing: the view is empty and its scope is 'none'.
-- ---------------------------------------------------------------------

CREATE FUNCTION fence_stats_read(OUT resource text, OUT accepted bigint, OUT rejected bigint,
		OUT last_rejected_token bigint, OUT last_rejected_at timestamptz)
	RETURNS SETOF record
LANGUAGE sql STABLE AS $$
	SELECT NULL::text, NULL::bigint, NULL::bigint, NULL::bigint, NULL::timestamptz WHERE false
$$;
CREATE VIEW fence_stats AS
	SELECT resource, accepted, rejected, last_rejected_token, last_rejected_at
	FROM fence_stats_read();
COMMENT ON VIEW fence_stats IS
	'fence: accepted tokens and stale rejections per resource (the SQL edition counts nothing)';
GRANT SELECT ON fence_stats TO PUBLIC;

CREATE FUNCTION fence_stats_scope() RETURNS text
LANGUAGE sql STABLE AS $$ SELECT 'none'::text $$;
COMMENT ON FUNCTION fence_stats_scope() IS
	'whose counts fence_stats shows: none in the SQL edition';

CREATE FUNCTION fence_edition() RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT 'sql'::text $$;
COMMENT ON FUNCTION fence_edition() IS 'which edition of fence this is: sql';

-- ---------------------------------------------------------------------
-- Privileges and search_path: every function finds fence's objects in
-- this schema (pg_catalog first, pg_temp last, whatever the caller's
-- search_path); internal helpers are not callable by PUBLIC.
-- ---------------------------------------------------------------------

DO $$
DECLARE
	f regprocedure;
	ns regnamespace := (SELECT c.relnamespace FROM pg_catalog.pg_class c
						 WHERE c.oid = 'fence_tokens'::regclass);
BEGIN
	-- SECURITY DEFINER functions, and those that name fence's objects
	-- while running as their caller, pin search_path; the internal helpers
	-- they call run under that pinned path (a function with a SET clause
	-- costs a setting change per call, on the hot path)
	FOR f IN
		SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
		 WHERE p.pronamespace = ns AND p.proname LIKE 'fence%'
		   AND (p.prosecdef OR p.proname IN ('fence_protect', 'fence_unprotect', 'fence__protect',
											 'fence__unprotect'))
	LOOP
		EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', f, ns);
	END LOOP;
	FOR f IN
		SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
		 WHERE p.pronamespace = ns AND p.proname IN
			('fence__accept', 'fence__accept_locked', 'fence__advance', 'fence__remember', 'fence__escalate', 'fence__present',
			 'fence__require', 'fence__lease_lock', 'fence__lease_end', 'fence__lock', 'fence__mine',
			 'fence__sync_commit')
	LOOP
		EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
	END LOOP;
END
$$;
-- only the owner, or roles it grants EXECUTE to
REVOKE ALL ON FUNCTION fence_reset(text) FROM PUBLIC;
