#!/usr/bin/env bash
# bench/mechanism.sh: the same-token case under the lock-manager fence
# (fence_protect) against the row-lock alternative (a PL/pgSQL trigger taking
# FOR SHARE on a token row) and no fence, pgbench, 3 interleaved rounds of
# 5 s, 1 and 8 clients, synchronous_commit=off. Prints "round clients variant tps".
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
PG_SERVER_OPTS="-c synchronous_commit=off -c shared_buffers=128MB"
. tests/pg_cluster.sh
pg_cluster_start || exit 1
psql -X -q <<'SQL'
CREATE EXTENSION fence;
CREATE TABLE plain (id int PRIMARY KEY, n int, tok bigint);
CREATE TABLE fenced (id int PRIMARY KEY, n int, tok bigint);
CREATE TABLE rowlock (id int PRIMARY KEY, n int, tok bigint);
INSERT INTO plain SELECT g, 0, 5 FROM generate_series(1,1000) g;
INSERT INTO fenced SELECT * FROM plain; INSERT INTO rowlock SELECT * FROM plain;
SELECT fence_protect('fenced', 'tok', 'r');
SELECT fence_check('r', 5);
CREATE TABLE alt_tokens (resource text PRIMARY KEY, token bigint);
INSERT INTO alt_tokens VALUES ('r', 5);
CREATE FUNCTION rowlock_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE h bigint;
BEGIN
  SELECT token INTO h FROM alt_tokens WHERE resource = 'r' FOR SHARE;
  IF NEW.tok < h THEN RAISE EXCEPTION 'stale' USING ERRCODE = '23T01'; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER g BEFORE UPDATE ON rowlock FOR EACH ROW EXECUTE FUNCTION rowlock_guard();
SQL
for t in plain fenced rowlock; do echo "\\set id random(1, 1000)
UPDATE $t SET n = n + 1, tok = 5 WHERE id = :id;" > $PG_WORK/$t.sql; done
PGB=$PG_BINDIR/pgbench
for round in 1 2 3; do
 for c in 1 8; do
  for t in plain fenced rowlock; do
   tps=$($PGB -n -T 5 -c $c -j 2 -f $PG_WORK/$t.sql postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
   echo "$round $c $t $tps"
  done
 done
done
