#!/usr/bin/python3
"""tests/pg_lease_bench.py: the smoke form of bench/lease_bench.py in make
check (a few seconds: its own etcd, two PostgreSQL clusters and two SQLite
files, 2 rounds of 5 calls per cell).

Asserts on what the benchmark checked had committed, never on a timing:
per cell, every grant above the previous one, every cycle's write
committed with its token (the table's counter, fence_current), the lock
free at the end, every renew successful; and that every cell was measured
and the report shows each of them with the in-database / etcd ratios.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench"))
from tap import Report  # noqa: E402
import report  # noqa: E402  (bench/report.py: the raw rows and the lease table)

ROUNDS, CALLS = 2, 5
CYCLES = [("cycle", lock, store) for store in ("pg-fsync", "pg-nofsync", "sqlite-full", "sqlite-normal")
          for lock in ("etcd", "fence")]
RENEWS = [("renew", "etcd-stream", "-"), ("renew", "etcd-call", "-")] + \
    [("renew", "fence", store) for store in ("pg-fsync", "pg-nofsync", "sqlite-full", "sqlite-normal")]


def main():
    R = Report("lease bench")
    fd, raw = tempfile.mkstemp(prefix="fence-lease-bench-", suffix=".tsv")
    os.close(fd)
    try:
        r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "lease_bench.py"), "--quick",
                            "--rounds", str(ROUNDS), "--calls", str(CALLS), "--raw", raw],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        R.ok(r.returncode == 0, "--quick ran to the end (exit status 0)",
             "exit status %d:\n%s" % (r.returncode, r.stdout[-3000:]))
        info, cells, checks = report.load_lease(raw)
        for key in CYCLES + RENEWS:
            name = "/".join(key)
            mine = [c for c in checks if c[1].startswith(name + ":")]
            bad = [c for c in mine if c[0] != "ok"]
            R.ok(mine and not bad, "%s: what committed checks out (%d checks)" % (name, len(mine)),
                 "; ".join("%s (%s)" % (what, d) for _, what, d in bad) or "no checks reported")
        missing = [k for k in CYCLES + RENEWS if k not in cells or cells[k]["n"] != ROUNDS * CALLS
                   or not cells[k]["per_s"] or cells[k]["p50"] is None]
        R.ok(not missing, "every cell timed %d calls" % (ROUNDS * CALLS),
             "missing or short: %s" % ", ".join("/".join(k) for k in missing))
        md = report.lease_markdown(raw)
        rows = [l for l in md.splitlines() if l.startswith("| ") and not l.startswith("| store")
                and not l.startswith("| lease |")]
        ratios = [l for l in rows if "fence (in the database)" in l and l.rstrip("| ").endswith("**")]
        R.ok(len(rows) == len(CYCLES) + len(RENEWS) and len(ratios) == 4,
             "the report shows every cell and an in-database / etcd ratio per store", md)
    finally:
        os.unlink(raw)
    return R.finish("pg_lease_bench")


if __name__ == "__main__":
    sys.exit(main())
