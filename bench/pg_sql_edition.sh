#!/usr/bin/env bash
# bench/pg_sql_edition.sh [--quick]: what the SQL edition (pg_sql/fence.sql)
# costs, as ratios to unfenced writes, to the C extension and to a minimal
# hand-written PL/pgSQL trigger, all measured in one run on one throwaway
# cluster (Debian's 15, both editions installed side by side: the C
# extension in public, the SQL edition in the schema fence_sql), the
# variants interleaved (round-robin, the order rotating between rounds):
#
#   same-token   pgbench, 1 and 8 clients, each transaction one UPDATE of a
#                random row of 10000 presenting the current token 5 under one
#                resource: plain, plpgsql, c, sql (transactions per second)
#   bulk         one UPDATE of N rows in one transaction, one fence per row
#                (N resources already at 5, equal tokens): plain, plpgsql,
#                c, sql (milliseconds)
#
# plpgsql is the trigger users write today: read the highest FOR SHARE,
# refuse a lower token, write a higher one (bench/pg/setup.sql's
# bench_rowlock_guard). Settings as bench/run.sh: fsync=off,
# synchronous_commit=off (CPU-bound). Prints a markdown table; raw rows go
# to bench/results/sql_edition.tsv. Knobs: BENCH_SQLED_ROUNDS,
# BENCH_SQLED_SECONDS, BENCH_SQLED_ROWS. Nothing asserts on a timing.
set -u
QUICK=0
[ "${1:-}" = --quick ] && QUICK=1
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$BENCH_DIR/../tests/lib.sh"
cd "$FENCE_ROOT" || exit 1
if [ $QUICK -eq 1 ]; then
	ROUNDS=${BENCH_SQLED_ROUNDS:-3}; SECS=${BENCH_SQLED_SECONDS:-2}; ROWS=${BENCH_SQLED_ROWS:-20000}
else
	ROUNDS=${BENCH_SQLED_ROUNDS:-5}; SECS=${BENCH_SQLED_SECONDS:-5}; ROWS=${BENCH_SQLED_ROWS:-100000}
fi
mkdir -p bench/results
RAW=bench/results/sql_edition.tsv
: >"$RAW"
PG_SERVER_OPTS="-c synchronous_commit=off"
. tests/pg_cluster.sh
pg_cluster_start >/dev/null || { echo "cannot start PostgreSQL" >&2; exit 1; }
WORK=$(mktemp -d)
chmod 755 "$WORK"
trap 'pg_cluster_stop; rm -rf "$WORK"' EXIT

psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<'SQL' || { echo "setup failed" >&2; exit 1; }
SET client_min_messages = warning;
CREATE EXTENSION fence;
CREATE SCHEMA fence_sql;
SQL
psql -X -q -v ON_ERROR_STOP=1 -c 'SET search_path = fence_sql' -f pg_sql/fence.sql >/dev/null ||
	{ echo "SQL edition install failed" >&2; exit 1; }
psql -X -q -v ON_ERROR_STOP=1 -v rows="$ROWS" >/dev/null <<'SQL' || { echo "tables failed" >&2; exit 1; }
SET client_min_messages = warning;
CREATE TABLE bench_tokens (resource text PRIMARY KEY, token bigint NOT NULL);
-- the minimal hand-written trigger (bench/pg/setup.sql, bench_rowlock_guard);
-- TG_ARGV[1] = 'id' makes it per row
CREATE FUNCTION hand_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	res text := TG_ARGV[0];
	h bigint;
BEGIN
	IF TG_NARGS > 1 THEN res := res || NEW.id; END IF;
	IF NEW.tok IS NULL THEN
		RAISE EXCEPTION 'fencing token required' USING ERRCODE = '23T02';
	END IF;
	SELECT token INTO h FROM bench_tokens WHERE resource = res FOR SHARE;
	IF NOT FOUND THEN
		INSERT INTO bench_tokens VALUES (res, NEW.tok);
	ELSIF NEW.tok < h THEN
		RAISE EXCEPTION 'stale fencing token for "%": % < %', res, NEW.tok, h USING ERRCODE = '23T01';
	ELSIF NEW.tok > h THEN
		UPDATE bench_tokens SET token = NEW.tok WHERE resource = res;
	END IF;
	RETURN NEW;
END $$;
DO $$
DECLARE v text;
BEGIN
	FOREACH v IN ARRAY ARRAY['plain', 'plpgsql', 'c', 'sql'] LOOP
		EXECUTE format('CREATE TABLE s_%s (id int PRIMARY KEY, n int NOT NULL, tok bigint)', v);
		EXECUTE format('INSERT INTO s_%s SELECT g, 0, 5 FROM generate_series(1, 10000) g', v);
		EXECUTE format('CREATE TABLE b_%s (id int PRIMARY KEY, n int NOT NULL, tok bigint)', v);
	END LOOP;
END $$;
INSERT INTO b_plain SELECT g, 0, 5 FROM generate_series(1, :rows) g;
INSERT INTO b_plpgsql SELECT * FROM b_plain;
INSERT INTO b_c SELECT * FROM b_plain;
INSERT INTO b_sql SELECT * FROM b_plain;
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON s_plpgsql FOR EACH ROW EXECUTE FUNCTION hand_guard('r');
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON b_plpgsql FOR EACH ROW EXECUTE FUNCTION hand_guard('b-', 'id');
INSERT INTO bench_tokens VALUES ('r', 5);
INSERT INTO bench_tokens SELECT 'b-' || g, 5 FROM generate_series(1, :rows) g;
SELECT public.fence_protect('s_c', 'tok', 'r');
SELECT public.fence_check('r', 5);
SELECT public.fence_protect('b_c', 'tok', 'b-', 'id');
UPDATE b_c SET tok = 5;
SELECT fence_sql.fence_protect('s_sql', 'tok', 'r');
SELECT fence_sql.fence_check('r', 5);
SELECT fence_sql.fence_protect('b_sql', 'tok', 'b-', 'id');
UPDATE b_sql SET tok = 5;
VACUUM ANALYZE;
SQL

rotate() {	# rotate N WORD...: the words, starting at the N-th
	local n=$1; shift
	local a=("$@") i
	for ((i = 0; i < ${#a[@]}; i++)); do echo "${a[$(((i + n) % ${#a[@]}))]}"; done
}
VARIANTS="plain plpgsql c sql"
for round in $(seq 1 "$ROUNDS"); do
	for c in 1 8; do
		for v in $(rotate "$round" $VARIANTS); do
			printf '\\set id random(1, 10000)\nUPDATE s_%s SET n = n + 1, tok = 5 WHERE id = :id;\n' "$v" >"$WORK/s_$v.sql"
			psql -X -q -c "VACUUM s_$v" >/dev/null
			tps=$("$PG_BINDIR/pgbench" -n -T "$SECS" -c "$c" -j "$([ $c -ge 2 ] && echo 2 || echo 1)" -f "$WORK/s_$v.sql" 2>/dev/null |
				sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
			printf 'same\t%s\t%s\t%s\t%s\n' "$round" "$c" "$v" "${tps:-NA}" >>"$RAW"
		done
	done
	for v in $(rotate "$round" $VARIANTS); do
		psql -X -q -c "VACUUM b_$v" -c CHECKPOINT >/dev/null
		ms=$(printf '\\timing on\nUPDATE b_%s SET n = n + 1, tok = 5;\n' "$v" | psql -X -q -v ON_ERROR_STOP=1 -f - 2>&1 |
			sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1)
		printf 'bulk\t%s\t%s\t%s\t%s\n' "$round" "$ROWS" "$v" "${ms:-NA}" >>"$RAW"
	done
done

"$PYTHON" - "$RAW" "$ROUNDS" "$SECS" "$ROWS" <<'PY'
import statistics, sys
raw, rounds, secs, rows = sys.argv[1:]
data = {}
for line in open(raw):
    kind, rnd, size, v, val = line.rstrip("\n").split("\t")
    if val != "NA":
        data.setdefault((kind, size, v), []).append(float(val))
med = {k: statistics.median(v) for k, v in data.items()}
def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "NA"
print(f"SQL edition ({rounds} interleaved rounds; same-token cells {secs} s each; bulk {rows} rows; medians)\n")
print("| cell | unfenced | hand-written PL/pgSQL | C edition | SQL edition | SQL / unfenced | SQL / C | SQL / PL/pgSQL |")
print("|---|---|---|---|---|---|---|---|")
for c in ("1", "8"):
    p, h, cc, s = (med.get(("same", c, v)) for v in ("plain", "plpgsql", "c", "sql"))
    # throughput: the cost ratio is the inverse of the tps ratio
    print(f"| same token, {c} client{'s' if c != '1' else ''} (tps) | {p:.0f} | {h:.0f} | {cc:.0f} | {s:.0f} | "
          f"{ratio(p, s)} | {ratio(cc, s)} | {ratio(h, s)} |")
p, h, cc, s = (med.get(("bulk", rows, v)) for v in ("plain", "plpgsql", "c", "sql"))
print(f"| per-row bulk UPDATE of {rows} rows (ms) | {p:.0f} | {h:.0f} | {cc:.0f} | {s:.0f} | "
      f"{ratio(s, p)} | {ratio(s, cc)} | {ratio(s, h)} |")
print("\nRatios are costs (time per write): SQL edition / other; above 1 the SQL edition is slower.")
PY
