#!/usr/bin/env bash
# bench/pg_before_after.sh: the same-token PostgreSQL cells of `make bench`,
# measured for two builds of fence in one run, so that a change to the
# PostgreSQL fence can be judged against the code before it.
#
#   OLD  a commit (default 6d63edf, main before the 1.3 scale work: one lock
#        per resource, no escalation, no ExecutorRun hook)
#   NEW  this working tree's pg_ext/ and core/ (committed or not)
#
# Each build is compiled from a copy of its sources into its own DESTDIR,
# and each gets its own throwaway cluster (same settings as bench/run.sh,
# same bench/pg/setup.sql); the cluster reads its build through
# extension_destdir. Two measurements:
#
# 1. Instructions per transaction, counted by callgrind on a single-user
#    backend (`postgres --single`) that reads N one-line UPDATEs from stdin,
#    each its own transaction: the path pgbench's simple protocol takes
#    (parse, plan, execute, the guard, commit), without the client. Each
#    run starts from the same copy of the data directory; a run of W
#    warm-up statements alone is subtracted from a run of W + N, so start-up,
#    the loading of fence.so and shutdown cancel out. Deterministic to a few
#    instructions, which is why the verdict is taken from it. (perf's
#    hardware counters are not available on this machine's VMs.)
# 2. pgbench throughput, 1 and 8 clients, one resource for every client and
#    one resource per client, fenced and unfenced: for every round and cell
#    the two builds run back to back, in an order that alternates between
#    rounds, so that drift falls on both alike. The unfenced cells are the
#    control: their new/old ratio says how far the two clusters differ when
#    the fence is not involved at all.
#
# Printed: a Markdown report (also in bench/results/before_after.md) with
# new/old ratios of medians and the lowest-highest per-round paired ratio;
# raw rows in bench/results/before_after.tsv. Run as root, from anywhere.
#
# Knobs: BA_OLD (commit), BA_ROUNDS (5; 0 for the instruction counts
# alone, about 2 minutes), BA_SECONDS (3), BA_CG_N (2000), BA_CG_WARM (200),
# BA_PRELOAD (1: the single-user backends of both builds have fence in
# shared_preload_libraries, as a server counting fence_stats in shared
# memory does); --quick = 2 rounds of 1 s and N 500.
set -u

QUICK=0
for arg in "$@"; do
	case $arg in
		--quick) QUICK=1 ;;
		*) echo "usage: bash bench/pg_before_after.sh [--quick]" >&2; exit 2 ;;
	esac
done

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$BENCH_DIR/../tests/lib.sh"		# FENCE_ROOT
cd "$FENCE_ROOT" || exit 1

OLD=${BA_OLD:-6d63edf}
PRELOAD=${BA_PRELOAD:-}
[ "$PRELOAD" = 0 ] && PRELOAD=
if [ $QUICK -eq 1 ]; then
	ROUNDS=${BA_ROUNDS:-2}; SECS=${BA_SECONDS:-1}; CG_N=${BA_CG_N:-500}; CG_WARM=${BA_CG_WARM:-100}
else
	ROUNDS=${BA_ROUNDS:-5}; SECS=${BA_SECONDS:-3}; CG_N=${BA_CG_N:-2000}; CG_WARM=${BA_CG_WARM:-200}
fi
PG_BINDIR=$(pg_config --bindir)
RESULTS=$BENCH_DIR/results
mkdir -p "$RESULTS"
RAW=$RESULTS/before_after.tsv
: >"$RAW"
STARTED=$(date +%s)

say() { echo "before/after: $*" >&2; }
record() { printf '%s\n' "$(IFS=$'\t'; echo "$*")" >>"$RAW"; }
as_postgres() {
	if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

W=$(mktemp -d /tmp/fence-ba.XXXXXX)
chmod 755 "$W"
cleanup() {
	for b in old new; do
		[ -f "$W/$b/data/postmaster.pid" ] &&
			as_postgres "$PG_BINDIR/pg_ctl" -D "$W/$b/data" -m fast -w stop >/dev/null 2>&1
	done
	rm -rf "$W"
}
trap cleanup EXIT

# --- the two builds ----------------------------------------------------------
NEW_DESC="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- pg_ext core || echo ' + uncommitted changes')"
OLD_DESC=$(git rev-parse --short "$OLD") || { say "no commit $OLD"; exit 1; }
mkdir -p "$W/old/src" "$W/new/src"
git archive "$OLD" pg_ext core | tar -x -C "$W/old/src" || exit 1
cp -r pg_ext core "$W/new/src/"
for b in old new; do
	(cd "$W/$b/src" && make -s -C pg_ext with_llvm=no clean >/dev/null 2>&1
	 make -s -C pg_ext with_llvm=no >"$W/$b/build.log" 2>&1 &&
	 make -s -C pg_ext with_llvm=no install DESTDIR="$W/$b/install" >>"$W/$b/build.log" 2>&1) ||
		{ say "cannot build the $b fence"; cat "$W/$b/build.log" >&2; exit 1; }
done
say "built old ($OLD_DESC) and new ($NEW_DESC)"
record info old "$OLD_DESC"
record info new "$NEW_DESC"
record info date "$(date -u '+%Y-%m-%d %H:%M UTC')"
record info loadavg "$(cut -d' ' -f1-3 /proc/loadavg)"
record info rounds "$ROUNDS"
record info seconds "$SECS"
record info cg_n "$CG_N"
record info cg_warm "$CG_WARM"
record info preload "${PRELOAD:-0}"

# --- two clusters, the same settings as bench/run.sh --------------------------
OPTS="-c listen_addresses='' -c fsync=off -c max_prepared_transactions=4 -c track_commit_timestamp=on \
	-c synchronous_commit=off -c shared_buffers=256MB -c autovacuum=off \
	-c max_wal_size=8GB -c checkpoint_timeout=30min -c max_connections=40"
declare -A PORT
chown -R postgres "$W"
start() {	# start BUILD
	as_postgres "$PG_BINDIR/pg_ctl" -D "$W/$1/data" -l "$W/$1/server.log" -w \
		-o "-k $W/$1 -p ${PORT[$1]} $OPTS -c extension_destdir=$W/$1/install" start >/dev/null ||
		{ say "cannot start the $1 cluster"; cat "$W/$1/server.log" >&2; exit 1; }
}
stop() { as_postgres "$PG_BINDIR/pg_ctl" -D "$W/$1/data" -m fast -w stop >/dev/null; }
on() { local b=$1; shift; PGHOST=$W/$b PGPORT=${PORT[$b]} PGUSER=postgres PGDATABASE=postgres "$@"; }

for b in old new; do
	PORT[$b]=$((20000 + RANDOM % 20000))
	as_postgres "$PG_BINDIR/initdb" -D "$W/$b/data" -A trust -U postgres --no-sync \
		-E UTF8 --locale=C.UTF-8 >"$W/$b/initdb.log" 2>&1 || { cat "$W/$b/initdb.log" >&2; exit 1; }
	start $b
	on $b psql -X -q -v ON_ERROR_STOP=1 -f bench/pg/setup.sql >/dev/null 2>"$W/$b/setup.err" ||
		{ say "bench/pg/setup.sql failed on $b"; cat "$W/$b/setup.err" >&2; exit 1; }
	record info "fence_$b" "$(on $b psql -X -At -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'")"
	record info postgres "$(on $b psql -X -At -c 'SHOW server_version')"
	on $b psql -X -q -c CHECKPOINT
	stop $b
	# the state every callgrind run starts from
	cp -a "$W/$b/data" "$W/$b/snap"
done

# --- 1. instructions per transaction (callgrind, single-user backend) ---------
# Statements: the same pseudo-random ids for both builds. "own" writes the
# rows of client 1 (ids 1251..2500, resource 'o-1'), as pgbench's client 1
# does in bench/run.sh.
stmts() {	# stmts TABLE COUNT SEED -> one UPDATE a line
	local t=$1 lo=1 span=10000
	case $t in o_*) lo=1251; span=1250 ;; esac
	awk -v n="$2" -v seed="$3" -v t="$t" -v lo=$lo -v span=$span 'BEGIN {
		srand(seed)
		for (i = 0; i < n; i++)
			printf "UPDATE %s SET n = n + 1, tok = 5 WHERE id = %d\n", t, lo + int(rand() * span)
	}'
}
cg_run() {	# cg_run BUILD FILE -> total instructions (Ir)
	local b=$1 f=$2
	rm -rf "$W/$b/data"
	cp -a "$W/$b/snap" "$W/$b/data"
	as_postgres valgrind --tool=callgrind --callgrind-out-file="$W/$b/cg.out" \
		"$PG_BINDIR/postgres" --single -D "$W/$b/data" -c fsync=off -c synchronous_commit=off \
		-c shared_buffers=256MB -c autovacuum=off -c extension_destdir="$W/$b/install" \
		${PRELOAD:+-c shared_preload_libraries="$W/$b/install$(pg_config --pkglibdir)/fence"} \
		postgres <"$f" >"$W/$b/cg.stdout" 2>"$W/$b/cg.stderr" ||
		{ say "callgrind run failed on $b ($f)"; tail -5 "$W/$b/cg.stderr" >&2; return 1; }
	if grep -q ERROR "$W/$b/cg.stdout" "$W/$b/cg.stderr"; then
		say "a statement failed in the single-user backend on $b ($f)"
		grep -m3 ERROR "$W/$b/cg.stdout" "$W/$b/cg.stderr" >&2
		return 1
	fi
	sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$W/$b/cg.out" | head -1
}
# "u_plain+loaded": unfenced UPDATEs in a backend that has loaded fence.so
# (one fenced UPDATE first), which pays fence's executor hooks on every
# statement.
CG_TABLES="u_plain u_plain+loaded u_floor u_fenced o_plain o_fenced"
say "callgrind: $CG_WARM + $CG_N single-user UPDATEs per table, tables $CG_TABLES, both builds"
for t in $CG_TABLES; do
	{ case $t in *+loaded) echo "UPDATE u_fenced SET n = n + 1, tok = 5 WHERE id = 1" ;; esac
	  stmts ${t%+loaded} "$CG_WARM" 1; } >"$W/$t.warm.sql"
	{ cat "$W/$t.warm.sql"; stmts ${t%+loaded} "$CG_N" 2; } >"$W/$t.all.sql"
	chmod 644 "$W/$t.warm.sql" "$W/$t.all.sql"
	for b in old new; do
		a=$(cg_run $b "$W/$t.warm.sql") && z=$(cg_run $b "$W/$t.all.sql") || exit 1
		record cg "$b" "$t" "$(( (z - a) / CG_N ))"
		# where a fenced run's instructions go inside fence.so (inclusive,
		# over warm-up and measured statements together)
		case $t in *_fenced)
			callgrind_annotate --inclusive=yes --threshold=100 "$W/$b/cg.out" 2>/dev/null |
				grep -E 'fence[a-z_]*\.c:|fence\.so|\?\?\?:(fence|Fence)' | head -25 \
				>"$RESULTS/before_after.$t.$b.annotate" ;;
		esac
		say "  $b $t: $(( (z - a) / CG_N )) instructions per transaction"
	done
done
for b in old new; do
	rm -rf "$W/$b/data"
	mv "$W/$b/snap" "$W/$b/data"
done

# --- 2. pgbench, both builds interleaved ---------------------------------------
for b in old new; do start $b; done
mkdir -p "$W/scripts"
script() {	# script MODE TABLE -> the file
	local f=$W/scripts/$1_$2.sql
	if [ "$1" = one ]; then
		printf '\\set id random(1, 10000)\nUPDATE %s SET n = n + 1, tok = 5 WHERE id = :id;\n' "$2"
	else
		printf '\\set id :client_id * 1250 + random(1, 1250)\nUPDATE %s SET n = n + 1, tok = 5 WHERE id = :id;\n' "$2"
	fi >"$f"
	echo "$f"
}
pgb() {		# pgb BUILD CLIENTS MODE VARIANT -> tps
	local b=$1 c=$2 m=$3 v=$4 t out
	t=$([ "$m" = one ] && echo u || echo o)_$v
	on $b psql -X -q -c "VACUUM $t" 2>/dev/null
	out=$(on $b "$PG_BINDIR/pgbench" -n -T "$SECS" -c "$c" -j "$([ "$c" -ge 2 ] && echo 2 || echo 1)" \
		-f "$(script "$m" "$t")" 2>>"$W/pgbench.err") || { echo NA; return; }
	echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}
say "pgbench: $ROUNDS rounds of 4 cells x 2 variants x 2 builds, $SECS s each"
for r in $(seq 1 "$ROUNDS"); do
	order="old new"
	[ $((r % 2)) -eq 0 ] && order="new old"
	for c in 1 8; do
		for m in one own; do
			for v in fenced plain; do
				for b in $order; do
					record pg "$r" "$b" "$c" "$m" "$v" "$(pgb $b "$c" "$m" "$v")"
				done
			done
		done
	done
	say "  round $r of $ROUNDS done ($(($(date +%s) - STARTED)) s)"
done
record info seconds_total "$(($(date +%s) - STARTED))"

# --- the report -----------------------------------------------------------------
/usr/bin/python3 - "$RAW" <<'PY' | tee "$RESULTS/before_after.md"
import collections, statistics, sys
info, cg, pg = {}, {}, collections.defaultdict(dict)
for line in open(sys.argv[1]):
    p = line.rstrip("\n").split("\t")
    if p[0] == "info":
        info[p[1]] = p[2]
    elif p[0] == "cg":
        cg[(p[1], p[2])] = int(p[3])
    elif p[0] == "pg" and p[6] not in ("", "NA"):
        pg[(int(p[3]), p[4], p[5], p[2])][int(p[1])] = float(p[6])
print(f"old = {info['old']} (fence {info.get('fence_old')}), new = {info['new']} (fence {info.get('fence_new')}); "
      f"PostgreSQL {info.get('postgres')}; {info['date']}, load average at start {info['loadavg']}, "
      f"{info.get('seconds_total')} s in all")
print()
print(f"Instructions per transaction (callgrind, single-user backend"
      f"{', fence in shared_preload_libraries' if info.get('preload', '0') != '0' else ''}, "
      f"{info['cg_n']} one-row UPDATEs after {info['cg_warm']} of warm-up, each its own transaction, "
      f"same token):")
print()
print("| table | old | new | new - old | new / old | fence's cost over unfenced, old -> new |")
print("|---|---|---|---|---|---|")
label = {"u_plain": "unfenced (one-resource table)", "u_floor": "floor: C trigger",
         "u_plain+loaded": "unfenced, in a backend that has loaded fence",
         "u_fenced": "fenced, one resource", "o_plain": "unfenced (per-row table)",
         "o_fenced": "fenced per row, one resource per client"}
for t in ("u_plain", "u_plain+loaded", "u_floor", "u_fenced", "o_plain", "o_fenced"):
    o, n = cg.get(("old", t)), cg.get(("new", t))
    if o is None or n is None:
        continue
    base = "u_plain" if t.startswith("u_") else "o_plain"
    extra = ""
    if t != base:
        extra = f"{o - cg[('old', base)]:+,} -> {n - cg[('new', base)]:+,}"
    print(f"| {label[t]} | {o:,} | {n:,} | {n - o:+,} | {n / o:.4f} | {extra} |")
print()
if not pg:
    sys.exit(0)
print(f"pgbench, transactions per second, median of {info['rounds']} rounds x {info['seconds']} s, "
      "the builds back to back in alternating order; new/old ratio of the medians, "
      "and the lowest-highest paired per-round ratio:")
print()
print("| cell | variant | old | new | new / old | per-round new / old |")
print("|---|---|---|---|---|---|")
for c in (1, 8):
    for m in ("one", "own"):
        for v in ("fenced", "plain"):
            o, n = pg.get((c, m, v, "old"), {}), pg.get((c, m, v, "new"), {})
            if not o or not n:
                continue
            mo, mn = statistics.median(o.values()), statistics.median(n.values())
            rs = [n[r] / o[r] for r in n if r in o and o[r]]
            cell = f"{c} client{'s' if c > 1 else ''}, {'one resource' if m == 'one' else 'one resource each'}"
            print(f"| {cell} | {'**fenced**' if v == 'fenced' else 'unfenced (control)'} | {mo:,.0f} | {mn:,.0f} | "
                  f"{mn / mo:.3f} | {min(rs):.2f}-{max(rs):.2f} |")
PY
