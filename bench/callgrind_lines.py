#!/usr/bin/env python3
"""bench/callgrind_lines.py: how much distinct code a run touched, per object.

For a callgrind profile written with --dump-instr=yes, prints for each object
(libsqlite3, fence.so, libc, ...) the instructions it ran per unit, and how
many distinct instructions and distinct 64-byte lines of code it touched over
the whole run. A one-row SQLite transaction touches more code than the L1
instruction cache holds (32 KiB, 512 lines), so every line is fetched again
in each transaction, and the distinct lines are a cost of their own beside
the instructions (the sixth round, in BENCHMARKS.md's git history).

Usage:
  valgrind --tool=callgrind --dump-instr=yes --toggle-collect=runCell \\
      --callgrind-out-file=cg.out sqlite_bench fence.so DIR 1 0.05 0 fenced/update/1/
  python3 bench/callgrind_lines.py cg.out 1000     # 1000: the transactions run
"""
import collections
import re
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: callgrind_lines.py CALLGRIND_OUT UNITS")
    names = {}
    obj = None
    last = 0
    skip_next = False			# the cost line after calls= is the call's, not the caller's
    addrs = collections.defaultdict(set)
    ran = collections.Counter()
    with open(sys.argv[1]) as f:
        for line in f:
            m = re.match(r"^(c?ob)=\((\d+)\)(?: (.*))?", line.strip())
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                if m.group(1) == "ob":
                    obj = names[m.group(2)]
                continue
            if line.startswith("calls="):
                skip_next = True
                continue
            # positions "instr line": an address (absolute, relative or "*"), a line, costs
            m = re.match(r"^(0x[0-9a-f]+|[+-]\d+|\*)\s+\S+\s+(\d+)", line)
            if not m:
                continue
            a = m.group(1)
            addr = int(a, 16) if a.startswith("0x") else last if a == "*" else last + int(a)
            last = addr
            if skip_next:
                skip_next = False
                continue
            addrs[obj].add(addr)
            ran[obj] += int(m.group(2))
    units = float(sys.argv[2])
    print("%-28s %12s %14s %8s" % ("object", "Ir per unit", "distinct instr", "lines"))
    for o in sorted(addrs, key=lambda o: -ran[o]):
        lines = {a // 64 for a in addrs[o]}
        print("%-28s %12.0f %14d %8d" % (o.split("/")[-1], ran[o] / units, len(addrs[o]), len(lines)))


if __name__ == "__main__":
    main()
