-- bench/pg/setup.sql: the tables, baselines and tokens of the PostgreSQL
-- benchmark (bench/run.sh). Every variant has a table of its own, of the same
-- shape, so that one variant's dead tuples never slow another down.
--
-- Two modes:
--   one  every client writes under one resource: fence_protect(t, 'tok', 'r')
--   own  each client writes under its own resource: a per-row fence on the
--        column grp, resource 'o-' || grp; client c writes only rows with
--        grp = c (ids c*1250+1 .. c*1250+1250)
-- Every row starts with token 5, and every same-token write presents 5.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
CREATE EXTENSION fence;

-- The baselines' own token table: what users keep today.
CREATE TABLE bench_tokens (resource text PRIMARY KEY, token bigint NOT NULL);
INSERT INTO bench_tokens VALUES ('r', 5);
INSERT INTO bench_tokens SELECT 'o-' || g, 5 FROM generate_series(0, 7) g;

-- The hand-written baseline, what users write today: a PL/pgSQL trigger that
-- checks the row's token against the highest, takes a row lock on the token
-- row (FOR SHARE: writers at the same token share it, an advance waits for
-- them) and advances the highest. Its arguments: the resource, or the prefix
-- and 'grp' for one resource per client.
CREATE FUNCTION bench_rowlock_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	res text := TG_ARGV[0];
	h bigint;
BEGIN
	IF TG_NARGS > 1 THEN res := res || NEW.grp; END IF;
	IF NEW.tok IS NULL THEN
		RAISE EXCEPTION 'fencing token required' USING ERRCODE = '23T02';
	END IF;
	SELECT token INTO h FROM bench_tokens WHERE resource = res FOR SHARE;
	IF NOT FOUND THEN
		INSERT INTO bench_tokens VALUES (res, NEW.tok);
	ELSIF NEW.tok < h THEN
		RAISE EXCEPTION 'stale fencing token for "%": % < %', res, NEW.tok, h
			USING ERRCODE = '23T01';
	ELSIF NEW.tok > h THEN
		UPDATE bench_tokens SET token = NEW.tok WHERE resource = res;
	END IF;
	RETURN NEW;
END $$;

-- The same PL/pgSQL trigger with fence's mechanism instead of the row lock: a
-- shared advisory lock in the lock manager, then a plain read. Only the
-- same-token path is exercised (an advance would need the exclusive lock).
-- It separates the cost of the mechanism from the cost of PL/pgSQL.
CREATE FUNCTION bench_advisory_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	res text := TG_ARGV[0];
	h bigint;
BEGIN
	IF TG_NARGS > 1 THEN res := res || NEW.grp; END IF;
	IF NEW.tok IS NULL THEN
		RAISE EXCEPTION 'fencing token required' USING ERRCODE = '23T02';
	END IF;
	PERFORM pg_advisory_xact_lock_shared(hashtext(res));
	SELECT token INTO h FROM bench_tokens WHERE resource = res;
	IF NEW.tok < h THEN
		RAISE EXCEPTION 'stale fencing token for "%": % < %', res, NEW.tok, h
			USING ERRCODE = '23T01';
	ELSIF NEW.tok > h THEN
		RAISE EXCEPTION 'bench_advisory_guard: advance not measured';
	END IF;
	RETURN NEW;
END $$;

CREATE SEQUENCE adv_seq START 1000;

-- UPDATE tables: 10000 rows each; grp = the client that owns the row in mode own.
DO $$
DECLARE
	m text;
	v text;
BEGIN
	FOREACH m IN ARRAY ARRAY['u', 'o'] LOOP
		FOREACH v IN ARRAY ARRAY['plain', 'floor', 'fenced', 'plpgsql', 'advlock',
								 'optimistic', 'txn', 'advance'] LOOP
			EXECUTE format('CREATE TABLE %I (id int PRIMARY KEY, grp int NOT NULL, '
						   'n int NOT NULL, tok bigint, version int NOT NULL)', m || '_' || v);
			EXECUTE format('INSERT INTO %I SELECT g, (g - 1) / 1250, 0, 5, 5 '
						   'FROM generate_series(1, 10000) g', m || '_' || v);
		END LOOP;
		-- INSERT tables
		FOREACH v IN ARRAY ARRAY['plain', 'fenced', 'plpgsql'] LOOP
			EXECUTE format('CREATE TABLE %I (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, '
						   'grp int NOT NULL, n int NOT NULL, tok bigint, version int NOT NULL)',
						   m || 'i_' || v);
		END LOOP;
	END LOOP;
END $$;

-- the floor: the built-in C trigger that does (almost) nothing here
CREATE TRIGGER floor BEFORE UPDATE ON u_floor
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER floor BEFORE UPDATE ON o_floor
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();

-- the fence
SELECT fence_protect('u_fenced', 'tok', 'r');
SELECT fence_protect('u_txn', 'tok', 'r');
SELECT fence_protect('ui_fenced', 'tok', 'r');
SELECT fence_protect('u_advance', 'tok', 'adv');
SELECT fence_protect('o_fenced', 'tok', 'o-', 'grp');
SELECT fence_protect('o_txn', 'tok', 'o-', 'grp');
SELECT fence_protect('oi_fenced', 'tok', 'o-', 'grp');
SELECT fence_protect('o_advance', 'tok', 'oadv-', 'grp');
SELECT fence_check('r', 5);
SELECT fence_check('o-' || g, 5) FROM generate_series(0, 7) g;

-- the baselines
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON u_plpgsql
	FOR EACH ROW EXECUTE FUNCTION bench_rowlock_guard('r');
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON ui_plpgsql
	FOR EACH ROW EXECUTE FUNCTION bench_rowlock_guard('r');
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON o_plpgsql
	FOR EACH ROW EXECUTE FUNCTION bench_rowlock_guard('o-', 'grp');
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON oi_plpgsql
	FOR EACH ROW EXECUTE FUNCTION bench_rowlock_guard('o-', 'grp');
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON u_advlock
	FOR EACH ROW EXECUTE FUNCTION bench_advisory_guard('r');
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON o_advlock
	FOR EACH ROW EXECUTE FUNCTION bench_advisory_guard('o-', 'grp');


-- Memory: 1M single-row writes, each its own transaction, over 10000 rows and
-- (fenced) 10000 resources 'm-' || id, in one backend (bench/run.sh reads
-- its /proc/PID/status). A procedure, so that no client round trip slows it.
CREATE TABLE mem_plain (id int PRIMARY KEY, n int NOT NULL, tok bigint);
CREATE TABLE mem_fenced (id int PRIMARY KEY, n int NOT NULL, tok bigint);
INSERT INTO mem_plain SELECT g, 0, 5 FROM generate_series(1, 10000) g;
INSERT INTO mem_fenced SELECT g, 0, 5 FROM generate_series(1, 10000) g;
SELECT fence_protect('mem_fenced', 'tok', 'm-', 'id');

CREATE PROCEDURE bench_mem_plain(writes int) LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 0 .. writes - 1 LOOP
		UPDATE mem_plain SET n = n + 1, tok = 5 WHERE id = i % 10000 + 1;
		COMMIT;
	END LOOP;
END $$;

CREATE PROCEDURE bench_mem_fenced(writes int) LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 0 .. writes - 1 LOOP
		UPDATE mem_fenced SET n = n + 1, tok = 5 WHERE id = i % 10000 + 1;
		COMMIT;
	END LOOP;
END $$;

VACUUM ANALYZE;
