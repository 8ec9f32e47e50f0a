#!/usr/bin/env bash
# bench/run.sh: `make bench` and `make bench-quick` (bash bench/run.sh [--quick]).
#
# Measures what the fence costs against the baselines a user would otherwise
# pick, every variant interleaved with the others in one run (round-robin over
# the cells, the variant order rotating between runs) so that machine drift
# falls on all of them alike:
#   PostgreSQL  pgbench against a throwaway cluster (tests/pg_cluster.sh),
#               CPU-bound: fsync=off, synchronous_commit=off; tables, the
#               baselines and the floor in bench/pg/setup.sql
#   SQLite      bench/sqlite_bench.c on file databases (WAL,
#               synchronous=NORMAL)
#   memory      a PostgreSQL backend's peak RSS over many fenced writes, and
#               sqlite3_memory_used() over many fenced transactions
#   lease       the database's own lease (fence_acquire, fence_renew,
#               fence_release) against a real etcd lease on loopback:
#               bench/lease_bench.py, with its own etcd, clusters (fsync on
#               and off) and SQLite files, interleaved within its own run
# Raw results go to bench/results/raw.tsv; bench/report.py turns them into
# tables. The full run rewrites the generated part of BENCHMARKS.md (between
# its two "bench/run.sh" markers); --quick, the smoke form (under a minute),
# writes bench/results/quick.md only and leaves BENCHMARKS.md alone.
#
# Neither is part of `make check`; nothing here asserts on a timing. Runs from
# any directory, as root (the server itself runs as postgres).
#
# Knobs (environment): BENCH_RUNS, BENCH_SECONDS (PostgreSQL seconds per
# cell), BENCH_SQLITE_RUNS, BENCH_SQLITE_SCALE, BENCH_MEM_WRITES,
# BENCH_SQLITE_MEM_TXNS, BENCH_BULK_ROWS (the sizes of the PostgreSQL bulk
# cells), BENCH_BULK_RUNS, BENCH_LEASE_ROUNDS and BENCH_LEASE_SECONDS (the
# lease part's rounds and seconds per cell per round), and BENCH_PARTS (a
# subset of "sqlite pg bulk mem lease sqled"; a full run of fewer parts writes
# bench/results/report.md only and leaves BENCHMARKS.md alone).
#
# The before/after comparisons of two builds of the fence are scripts of
# their own: bench/pg_before_after.sh and bench/sqlite_before_after.sh.
set -u

QUICK=0
for arg in "$@"; do
	case $arg in
		--quick) QUICK=1 ;;
		*) echo "usage: bash bench/run.sh [--quick]" >&2; exit 2 ;;
	esac
done

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$BENCH_DIR/../tests/lib.sh"		# FENCE_ROOT, PYTHON
cd "$FENCE_ROOT" || exit 1

if [ $QUICK -eq 1 ]; then
	RUNS=${BENCH_RUNS:-3}
	SECONDS_PER_CELL=${BENCH_SECONDS:-1}
	SQLITE_RUNS=${BENCH_SQLITE_RUNS:-3}
	SQLITE_SCALE=${BENCH_SQLITE_SCALE:-0.2}
	MEM_WRITES=${BENCH_MEM_WRITES:-30000}
	SQLITE_MEM_TXNS=${BENCH_SQLITE_MEM_TXNS:-20000}
	CLIENTS="1 8"
	MODES="one"
	BULK_ROWS=${BENCH_BULK_ROWS:-20000}
	BULK_RUNS=${BENCH_BULK_RUNS:-2}
	LEASE_ROUNDS=${BENCH_LEASE_ROUNDS:-2}
	LEASE_SECONDS=${BENCH_LEASE_SECONDS:-0.6}	# unused: --quick counts calls
else
	RUNS=${BENCH_RUNS:-5}
	SECONDS_PER_CELL=${BENCH_SECONDS:-3}
	SQLITE_RUNS=${BENCH_SQLITE_RUNS:-5}
	SQLITE_SCALE=${BENCH_SQLITE_SCALE:-2}
	MEM_WRITES=${BENCH_MEM_WRITES:-1000000}
	SQLITE_MEM_TXNS=${BENCH_SQLITE_MEM_TXNS:-200000}
	CLIENTS="1 4 8"
	MODES="one own"
	BULK_ROWS=${BENCH_BULK_ROWS:-100000 1000000}
	BULK_RUNS=${BENCH_BULK_RUNS:-3}
	LEASE_ROUNDS=${BENCH_LEASE_ROUNDS:-8}
	LEASE_SECONDS=${BENCH_LEASE_SECONDS:-0.6}
fi
PARTS=${BENCH_PARTS:-sqlite pg bulk mem lease sqled}
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
ALL_PARTS=1
for p in sqlite pg bulk mem lease; do part $p || ALL_PARTS=0; done

if [ -n "${MAKELEVEL:-}" ]; then
	COMMAND="make bench$([ $QUICK -eq 1 ] && echo -quick)"
else
	COMMAND="bash bench/run.sh$([ $QUICK -eq 1 ] && echo ' --quick')"
fi
for knob in BENCH_RUNS BENCH_SECONDS BENCH_SQLITE_RUNS BENCH_SQLITE_SCALE \
	BENCH_MEM_WRITES BENCH_SQLITE_MEM_TXNS BENCH_BULK_ROWS BENCH_BULK_RUNS \
	BENCH_LEASE_ROUNDS BENCH_LEASE_SECONDS BENCH_PARTS; do
	[ -n "${!knob:-}" ] && COMMAND="$knob='${!knob}' $COMMAND"
done

RESULTS=$BENCH_DIR/results
mkdir -p "$RESULTS"
RAW=$RESULTS/raw$([ $QUICK -eq 1 ] && echo -quick).tsv
LOG=$RESULTS/run$([ $QUICK -eq 1 ] && echo -quick).log
: >"$RAW"
: >"$LOG"
STARTED=$(date +%s)

say() { echo "bench: $*"; echo "bench: $*" >>"$LOG"; }
record() { printf '%s\n' "$(IFS=$'\t'; echo "$*")" >>"$RAW"; }

bash tests/install_deps.sh || exit 1

# ---------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------
record info command "$COMMAND"
record info date "$(date -u '+%Y-%m-%d %H:%M UTC')"
record info commit "$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- pg_ext sqlite_ext core 2>/dev/null || echo ' (extension sources modified)')"
record info nproc "$(nproc)"
record info cpu "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
record info memory "$(free -m | awk '/^Mem:/ {printf "%.1f GiB", $2 / 1024}')"
record info kernel "$(uname -r)"
record info loadavg "$(cut -d' ' -f1-3 /proc/loadavg)"
record info mode "$([ $QUICK -eq 1 ] && echo quick || echo full)"
record info pg_runs "$RUNS"
record info pg_seconds "$SECONDS_PER_CELL"
record info sqlite_runs "$SQLITE_RUNS"
record info sqlite_scale "$SQLITE_SCALE"
record info mem_writes "$MEM_WRITES"
record info sqlite_mem_txns "$SQLITE_MEM_TXNS"
record info bulk_rows "$BULK_ROWS"
record info bulk_runs "$BULK_RUNS"
record info parts "$PARTS"

# ---------------------------------------------------------------------------
# SQLite
# ---------------------------------------------------------------------------
WORK=$(mktemp -d /tmp/fence-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

if part sqlite; then
	say "building sqlite_ext/fence.so and the SQLite driver"
	make -s sqlite_ext/fence.so >>"$LOG" 2>&1 || { say "cannot build sqlite_ext/fence.so (see $LOG)"; exit 1; }
	${CC:-cc} -O2 -g -Wall -Wextra -o "$WORK/sqlite_bench" bench/sqlite_bench.c -lsqlite3 >>"$LOG" 2>&1 ||
		{ say "cannot build bench/sqlite_bench.c (see $LOG)"; exit 1; }
	mkdir -p "$WORK/sqlite"
	say "SQLite: $SQLITE_RUNS runs of 4 cells x 4 variants, then memory over $SQLITE_MEM_TXNS transactions"
	# one process per variant and run, the variants alternating and their
	# order rotating between runs: in one process, which connection was set
	# up first moved the one-row ratios by up to 5% (bench/sqlite_bench.c);
	# and each run in another heap layout, the same for its variants
	# (SQLITE_BENCH_HEAP_PAD, bench/sqlite_bench.c)
	: >"$WORK/sqlite.out"
	SQLITE_VARIANTS=(plain floor fenced sqltrig)
	for ((run = 1; run <= SQLITE_RUNS; run++)); do
		for ((k = 0; k < ${#SQLITE_VARIANTS[@]}; k++)); do
			v=${SQLITE_VARIANTS[$(((k + run) % ${#SQLITE_VARIANTS[@]}))]}
			if ! SQLITE_BENCH_HEAP_PAD=$(((run - 1) * 1552 % 4096)) "$WORK/sqlite_bench" "$FENCE_ROOT/sqlite_ext/fence.so" "$WORK/sqlite" "$run-$run" \
				"$SQLITE_SCALE" 0 "$v/" >"$WORK/sqlite.one" 2>>"$LOG"; then
				say "the SQLite benchmark failed (see $LOG)"
				exit 1
			fi
			grep -v '^sqliteversion' "$WORK/sqlite.one" >>"$WORK/sqlite.out"
		done
	done
	if ! "$WORK/sqlite_bench" "$FENCE_ROOT/sqlite_ext/fence.so" "$WORK/sqlite" 0 \
		"$SQLITE_SCALE" "$SQLITE_MEM_TXNS" >>"$WORK/sqlite.out" 2>>"$LOG"; then
		say "the SQLite benchmark failed (see $LOG)"
		exit 1
	fi
	sed 's/^sqliteversion\t/info\tsqlite\t/' "$WORK/sqlite.out" >>"$RAW"
	rm -rf "$WORK/sqlite"
	# instructions per row (deterministic), and where the fence's go: the
	# profile that explains a missed SQLite target, and the L1 cache misses
	# that explain a timed miss where the instructions are fewer
	if command -v valgrind >/dev/null 2>&1 && command -v callgrind_annotate >/dev/null 2>&1; then
		say "SQLite: instructions per row under callgrind (bench/sqlite_profile.sh)"
		PROFILE_SCALE=$([ $QUICK -eq 1 ] && echo 0.02 || echo 0.2) \
			bash bench/sqlite_profile.sh --raw >>"$RAW" 2>>"$LOG" ||
			say "bench/sqlite_profile.sh failed (see $LOG); the instruction targets stay unmeasured"
	else
		say "valgrind is not installed: the SQLite instruction counts are skipped"
	fi
fi

# ---------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------
PG_SERVER_OPTS="-c synchronous_commit=off -c shared_buffers=256MB -c autovacuum=off \
	-c max_wal_size=8GB -c checkpoint_timeout=30min -c max_connections=40"
. tests/pg_cluster.sh
say "starting a throwaway PostgreSQL cluster"
pg_cluster_start >>"$LOG" 2>&1 || { say "cannot start PostgreSQL (see $LOG)"; exit 1; }
trap 'pg_cluster_stop; rm -rf "$WORK"' EXIT
PGB=$PG_BINDIR/pgbench
psql -X -q -v ON_ERROR_STOP=1 -f bench/pg/setup.sql >/dev/null 2>>"$LOG" ||
	{ say "bench/pg/setup.sql failed (see $LOG)"; exit 1; }
record info postgres "$(psql -X -At -c 'SHOW server_version')"
record info pg_settings "$(psql -X -At -c "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' ORDER BY name) FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers', 'autovacuum', 'track_commit_timestamp', 'wal_level')")"

# The pgbench scripts: one per mode, operation and variant.
mkdir -p "$WORK/scripts"
script() {	# script MODE OP VARIANT -> prints the file name
	local mode=$1 op=$2 v=$3 t idline res f
	if [ "$mode" = one ]; then
		idline='\set id random(1, 10000)'
		res="'r'"
		t=u
	else
		idline='\set id :client_id * 1250 + random(1, 1250)'
		res="'o-' || :client_id"
		t=o
	fi
	[ "$op" = insert ] && t=${t}i
	t=${t}_$v
	f=$WORK/scripts/${mode}_${op}_$v.sql
	if [ "$op" = insert ]; then
		echo "INSERT INTO $t (grp, n, tok, version) VALUES (:client_id, 0, 5, 5);" >"$f"
	else
		case $v in
			optimistic) printf '%s\nUPDATE %s SET n = n + 1 WHERE id = :id AND version = 5;\n' "$idline" "$t" ;;
			txn) printf '%s\nBEGIN;\nSELECT fence_check(%s, 5);\nUPDATE %s SET n = n + 1 WHERE id = :id;\nEND;\n' "$idline" "$res" "$t" ;;
			advance) printf "%s\nUPDATE %s SET n = n + 1, tok = nextval('adv_seq') WHERE id = :id;\n" "$idline" "$t" ;;
			*) printf '%s\nUPDATE %s SET n = n + 1, tok = 5 WHERE id = :id;\n' "$idline" "$t" ;;
		esac >"$f"
	fi
	echo "$f"
}

# Before each cell: the cell's table vacuumed (UPDATE) or emptied (INSERT;
# a protected table is unprotected, truncated and protected again).
prepare_cell() {	# prepare_cell MODE OP VARIANT
	local mode=$1 op=$2 v=$3 t
	t=$([ "$mode" = one ] && echo u || echo o)
	if [ "$op" = insert ]; then
		t=${t}i_$v
		if [ "$v" = fenced ]; then
			local again
			again=$([ "$mode" = one ] && echo "'tok', 'r'" || echo "'tok', 'o-', 'grp'")
			echo "SELECT fence_unprotect('$t'); TRUNCATE $t; SELECT fence_protect('$t', $again);"
		else
			echo "TRUNCATE $t;"
		fi
	else
		echo "VACUUM ${t}_$v;"
		[ "$v" = advance ] && echo "VACUUM fence_tokens;"
		[ "$v" = plpgsql ] && echo "VACUUM bench_tokens;"
	fi
}

cell() {	# cell RUN CLIENTS MODE OP VARIANT
	local run=$1 c=$2 mode=$3 op=$4 v=$5 f j out tps ntx lsn0 lsn1 wal
	f=$(script "$mode" "$op" "$v")
	j=$([ "$c" -ge 2 ] && echo 2 || echo 1)
	lsn0=$(prepare_cell "$mode" "$op" "$v" | psql -X -q -At -f - -c 'SELECT pg_current_wal_insert_lsn()' 2>>"$LOG" | tail -1)
	if out=$("$PGB" -n -T "$SECONDS_PER_CELL" -c "$c" -j "$j" -f "$f" 2>>"$LOG"); then
		tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
		ntx=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
	else
		tps=NA
		ntx=0
		say "pgbench failed: $c clients, $mode, $op, $v (see $LOG)"
		echo "$out" >>"$LOG"
	fi
	lsn1=$(psql -X -At -c 'SELECT pg_current_wal_insert_lsn()' 2>>"$LOG")
	wal=$(psql -X -At -c "SELECT CASE WHEN $ntx > 0 THEN round(pg_wal_lsn_diff('$lsn1', '$lsn0') / $ntx) END" 2>>"$LOG")
	record pg "$run" "$c" "$mode" "$op" "$v" "${tps:-NA}" "${wal:-NA}"
}

UPDATE_VARIANTS="plain floor fenced plpgsql advlock optimistic txn advance"
INSERT_VARIANTS="plain fenced plpgsql"
[ $QUICK -eq 1 ] && UPDATE_VARIANTS="plain floor fenced plpgsql" && INSERT_VARIANTS=""

rotate() {	# rotate N WORDS...: the words, starting with the (N mod count)-th
	local n=$1
	shift
	local words=("$@") i k=${#words[@]}
	for ((i = 0; i < k; i++)); do echo "${words[$(((i + n) % k))]}"; done
}

ncells=0
for c in $CLIENTS; do
	for mode in $MODES; do
		for op in update insert; do
			vs=$([ $op = update ] && echo "$UPDATE_VARIANTS" || echo "$INSERT_VARIANTS")
			for v in $vs; do
				# several clients advancing one resource would reject each other
				[ $v = advance ] && [ $mode = one ] && [ "$c" -gt 1 ] && continue
				ncells=$((ncells + 1))
			done
		done
	done
done
part pg && say "PostgreSQL: $RUNS runs of $ncells cells, ${SECONDS_PER_CELL} s each (about $((RUNS * ncells * (SECONDS_PER_CELL + 1) / 60 + 1)) min)"
part pg &&
for run in $(seq 1 "$RUNS"); do
	psql -X -q -c CHECKPOINT 2>>"$LOG"
	for c in $CLIENTS; do
		for mode in $MODES; do
			for op in update insert; do
				vs=$([ $op = update ] && echo "$UPDATE_VARIANTS" || echo "$INSERT_VARIANTS")
				[ -z "$vs" ] && continue
				for v in $(rotate "$run" $vs); do
					[ $v = advance ] && [ $mode = one ] && [ "$c" -gt 1 ] && continue
					cell "$run" "$c" "$mode" "$op" "$v"
				done
			done
		done
	done
	say "run $run of $RUNS done ($(($(date +%s) - STARTED)) s)"
done

# ---------------------------------------------------------------------------
# Memory: one backend, MEM_WRITES single-row writes over 10000 rows, each its
# own transaction; fenced per row (10000 resources). Both backends first run
# the same warm-up (20000 writes of each kind, so that both have touched the
# same shared buffers and lock table), then their peak RSS (VmHWM) is reset
# and the measured run is of one kind only.
# ---------------------------------------------------------------------------
part mem && say "PostgreSQL memory: $MEM_WRITES writes per backend"
part mem &&
for v in plain fenced; do
	psql -X -q -At 2>>"$LOG" <<SQL | sed "s/^/pgmem\t$v\t/" >>"$RAW"
SELECT pg_backend_pid() AS pid \gset
\setenv BPID :pid
CALL bench_mem_plain(20000);
CALL bench_mem_fenced(20000);
\! sh -c 'echo 5 > /proc/\$BPID/clear_refs; sed -n "s/^\\(VmHWM\\|VmRSS\\|RssAnon\\|RssFile\\|RssShmem\\):[[:space:]]*\\([0-9]*\\) kB/warm\t\\1\t\\2/p" /proc/\$BPID/status'
CALL bench_mem_$v($MEM_WRITES);
\! sh -c 'sed -n "s/^\\(VmHWM\\|VmRSS\\|RssAnon\\|RssFile\\|RssShmem\\):[[:space:]]*\\([0-9]*\\) kB/end\t\\1\t\\2/p" /proc/\$BPID/status'
SQL
done

# ---------------------------------------------------------------------------
# Bulk: one transaction fenced on many per-row resources, under
# the server's default max_locks_per_transaction. For each size N, the
# tables of bench/pg/bulk.sql, then BULK_RUNS runs of:
#   update   UPDATE of all N rows, equal tokens: unfenced, the C-trigger
#            floor, fenced per row (N resources already at 5)
#   insert   INSERT of N new rows, each a new per-row resource (an advance
#            per row): unfenced, fenced
#   check    a PL/pgSQL loop of N fence_check calls on N resources at their
#            highest; "loop" is the same loop with fence_check replaced by
#            the same expression without it
#   advance1 one resource advanced N times in one transaction (fence_check
#            in a PL/pgSQL loop), written once before commit
# The variants of a cell run back to back, their order rotating between runs.
# Each time is one autocommit statement, COMMIT included (psql \timing).
# After the memory cells: the bulk cells leave millions of rows in
# fence_tokens, whose pages a fenced backend then maps (RssShmem).
# ---------------------------------------------------------------------------
bulk_sql() {	# bulk_sql CELL VARIANT N -> the statement measured
	case $1/$2 in
		update/*) echo "UPDATE bu_$2 SET n = n + 1, tok = 5" ;;
		insert/*) echo "INSERT INTO bi_$2 SELECT g, 0, 5 FROM generate_series(1, $3) g" ;;
		check/fenced) echo "DO \$\$ BEGIN FOR i IN 1 .. $3 LOOP PERFORM fence_check('c-' || i, 5); END LOOP; END \$\$" ;;
		check/loop) echo "DO \$\$ BEGIN FOR i IN 1 .. $3 LOOP PERFORM ('c-' || i, 5); END LOOP; END \$\$" ;;
		advance1/fenced) echo "DO \$\$ DECLARE h bigint := fence_current('a1'); BEGIN FOR i IN 1 .. $3 LOOP PERFORM fence_check('a1', h + i); END LOOP; END \$\$" ;;
	esac
}
bulk_prepare() {	# bulk_prepare CELL VARIANT: what runs, untimed, before the cell
	case $1/$2 in
		update/*) echo "VACUUM bu_$2;" ;;
		insert/plain) echo "TRUNCATE bi_plain;" ;;
		insert/fenced) echo "SELECT fence_unprotect('bi_fenced'); TRUNCATE bi_fenced;
			DELETE FROM fence_tokens WHERE resource LIKE 'bi-%'; VACUUM fence_tokens;
			SELECT fence_protect('bi_fenced', 'tok', 'bi-', 'id');" ;;
		advance1/*) echo "VACUUM fence_tokens;" ;;
	esac
}
bulk_cell() {	# bulk_cell RUN N CELL VARIANT
	local run=$1 n=$2 cell=$3 v=$4 out ms
	bulk_prepare "$cell" "$v" | psql -X -q -f - >/dev/null 2>>"$LOG"
	psql -X -q -c CHECKPOINT 2>>"$LOG"
	out=$(printf '\\timing on\n%s;\n' "$(bulk_sql "$cell" "$v" "$n")" | psql -X -q -v ON_ERROR_STOP=1 -f - 2>&1)
	ms=$(echo "$out" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1)
	if [ -z "$ms" ] || echo "$out" | grep -q ERROR; then
		say "bulk cell failed: $n rows, $cell, $v: $(echo "$out" | grep -m1 ERROR)"
		echo "$out" >>"$LOG"
		ms=NA
	fi
	record bulk "$run" "$n" "$cell" "$v" "$ms"
}
if part bulk; then
	record info max_locks_per_transaction "$(psql -X -At -c 'SHOW max_locks_per_transaction')"
	for n in $BULK_ROWS; do
		say "PostgreSQL bulk: $n rows, creating the tables"
		psql -X -q -v rows="$n" -f bench/pg/bulk.sql >/dev/null 2>>"$LOG" ||
			{ say "bench/pg/bulk.sql failed for $n rows (see $LOG)"; exit 1; }
		for run in $(seq 1 "$BULK_RUNS"); do
			for v in $(rotate "$run" plain floor fenced); do bulk_cell "$run" "$n" update "$v"; done
			for v in $(rotate "$run" plain fenced); do bulk_cell "$run" "$n" insert "$v"; done
			for v in $(rotate "$run" loop fenced); do bulk_cell "$run" "$n" check "$v"; done
			bulk_cell "$run" "$n" advance1 fenced
			say "bulk $n rows: run $run of $BULK_RUNS done ($(($(date +%s) - STARTED)) s)"
		done
	done
fi

# ---------------------------------------------------------------------------
# Leases: bench/lease_bench.py starts its own etcd, two clusters (fsync on
# and off; run.sh's own cluster above is CPU-bound and not used) and SQLite
# files, and interleaves its cells within its own run. It appends its rows
# (info lease_*, lease, leasecheck) to the raw file; report.py renders them.
# It checks what committed and fails the part when that does not hold.
# ---------------------------------------------------------------------------
if part lease; then
	say "leases: the database's own against etcd, $LEASE_ROUNDS interleaved rounds"
	if [ $QUICK -eq 1 ]; then
		lease_args=(--quick --rounds "$LEASE_ROUNDS")
	else
		lease_args=(--rounds "$LEASE_ROUNDS" --seconds "$LEASE_SECONDS")
	fi
	"$PYTHON" bench/lease_bench.py "${lease_args[@]}" --raw "$RAW" --no-report >>"$LOG" 2>&1 ||
		{ say "the lease benchmark failed (see $LOG)"; exit 1; }
fi

# ---------------------------------------------------------------------------
# The SQL edition (pg_sql/fence.sql): bench/pg_sql_edition.sh runs its own
# cluster with both editions side by side and interleaves its cells (same
# token at 1 and 8 clients, a per-row bulk UPDATE) against unfenced, the C
# edition and a hand-written PL/pgSQL trigger; its table goes to
# bench/results/sql_edition.md.
# ---------------------------------------------------------------------------
if part sqled; then
	say "the SQL edition against unfenced, the C edition and a PL/pgSQL trigger"
	bash bench/pg_sql_edition.sh $([ $QUICK -eq 1 ] && echo --quick) >"$RESULTS/sql_edition.md" 2>>"$LOG" ||
		{ say "the SQL edition benchmark failed (see $LOG)"; exit 1; }
	cat "$RESULTS/sql_edition.md"
fi

record info seconds "$(($(date +%s) - STARTED))"
say "done in $(($(date +%s) - STARTED)) s; raw results in ${RAW#$FENCE_ROOT/}"

# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------
if [ $QUICK -eq 1 ]; then
	"$PYTHON" bench/report.py "$RAW" >"$RESULTS/quick.md" || exit 1
	cat "$RESULTS/quick.md"
elif [ $ALL_PARTS -eq 0 ]; then
	"$PYTHON" bench/report.py "$RAW" >"$RESULTS/report.md" || exit 1
	cat "$RESULTS/report.md"
	say "BENCHMARKS.md left alone: BENCH_PARTS is not every part"
else
	"$PYTHON" bench/report.py "$RAW" >"$RESULTS/report.md" || exit 1
	"$PYTHON" bench/report.py --splice BENCHMARKS.md "$RESULTS/report.md" || exit 1
	cat "$RESULTS/report.md"
	say "BENCHMARKS.md updated"
fi
