#!/usr/bin/python3
"""tests/pg_stacks_node.py: fence through node-postgres (npm `pg` 8 on
Node 20) (issue 26): the pattern docs/stacks-postgresql.md gives (a client
from the pool, BEGIN, fence_check, the writes, COMMIT), with the token as
a JavaScript number, a string and a BigInt (and one above 2^53), and with
named (server-side prepared) statements; a protected row carrying the
token; the pool.query() pitfall as the documented refusal. The assertions
are in tests/stacks/node_pg.js; this script makes the database, installs
`pg` with npm into build/npm-pg (once; kept for the next run) and runs it.

Output: "ok - stacks node ..." lines.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stacks"))
from stacks import HERE, ROOT, Database, Report  # noqa: E402

REPORT = Report("stacks node")
DB = "fence_stacks_node"
NODE = shutil.which("node") or "/usr/bin/node"
MODULES = os.path.join(ROOT, "build", "npm-pg")


def install_pg():
    if os.path.exists(os.path.join(MODULES, "node_modules", "pg", "package.json")):
        return True
    os.makedirs(MODULES, exist_ok=True)
    npm = shutil.which("npm") or "/usr/bin/npm"
    r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--no-save", "pg@8"],
                       cwd=MODULES, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print("#   " + (r.stdout + r.stderr).strip().replace("\n", "\n#   ")[-2000:])
    return r.returncode == 0


def main():
    if not REPORT.ok(os.path.exists(NODE), "node is installed (%s)" % NODE):
        return REPORT.finish("pg_stacks_node")
    if not REPORT.ok(install_pg(), "npm install pg@8 into build/npm-pg"):
        return REPORT.finish("pg_stacks_node")
    db = Database(DB)
    try:
        db.sql("CREATE TABLE ledger (seq serial PRIMARY KEY, resource text, who text)")
        db.sql("CREATE TABLE acct (id int PRIMARY KEY, who text, tok bigint)")
        db.sql("SELECT fence_protect('acct', 'tok', 'acct:', 'id')")
        db.fenced("acct:1", 10, "INSERT INTO acct VALUES (1, 'first', 10)")
        db.sql("CREATE TABLE plain (seq serial PRIMARY KEY, who text)")
        db.sql("SELECT fence_protect('plain', NULL, 'plain')")
        env = dict(os.environ, NODE_PATH=os.path.join(MODULES, "node_modules"), FENCE_DB=DB)
        version = subprocess.run([NODE, "-e", "console.log(process.version, require('pg/package.json').version)"],
                                 env=env, capture_output=True, text=True).stdout.strip()
        print("# node, pg: %s" % version)
        r = subprocess.run([NODE, os.path.join(HERE, "node_pg.js")], env=env,
                           capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        for line in out.splitlines():
            if line.startswith("ok - "):
                REPORT.passed += 1
            elif line.startswith("not ok - "):
                REPORT.failed += 1
            print(line, flush=True)
        REPORT.ok(r.returncode == 0 and "ok - " in out, "node_pg.js ran to its end (exit %d)"
                  % r.returncode)
    finally:
        db.close()
    return REPORT.finish("pg_stacks_node")


if __name__ == "__main__":
    sys.exit(main())
