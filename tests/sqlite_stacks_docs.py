#!/usr/bin/python3
"""tests/sqlite_stacks_docs.py: every code block of docs/stacks-sqlite.md runs.

Each fenced code block of the page must be a run of whole lines of one of
the programs examples/stacks_* (which examples/run.py runs in make check),
so that the patterns the page shows are the ones that are tested; and
every example the page's table names must exist and be run by
examples/run.py.

Usage: /usr/bin/python3 tests/sqlite_stacks_docs.py
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stacklib import ROOT, Report  # noqa: E402

report = Report("stacks docs:")
DOC = os.path.join(ROOT, "docs", "stacks-sqlite.md")
EXAMPLES = os.path.join(ROOT, "examples")


def main():
    text = open(DOC).read()
    sources = {}
    for name in sorted(os.listdir(EXAMPLES)):
        if name.startswith("stacks_"):
            sources[name] = open(os.path.join(EXAMPLES, name)).read()
    blocks = re.findall(r"^```(\w+)\n(.*?)^```$", text, re.M | re.S)
    report.ok(len(blocks) >= 10, "docs/stacks-sqlite.md has its code blocks (%d)" % len(blocks))
    for lang, block in blocks:
        first = block.splitlines()[0].strip()
        where = [n for n, src in sources.items() if ("\n" + block) in ("\n" + src)]
        report.ok(bool(where), "the %s block that begins %r is copied from an example%s" % (
            lang, first[:60], " (%s)" % where[0] if where else ""),
            "not found, line for line, in any of %s" % ", ".join(sources))
    run = open(os.path.join(EXAMPLES, "run.py")).read()
    for name in sorted(set(re.findall(r"`(stacks_\w+)`", text))):
        report.ok(any(n.startswith(name + ".") for n in sources) and ('"%s":' % name) in run,
                  "the example %s exists and examples/run.py runs it" % name)
    return report.finish("sqlite_stacks_docs")


if __name__ == "__main__":
    sys.exit(main())
