#!/usr/bin/python3
"""Make the pg_regress and isolation inputs in DIR run against the SQL edition.

tests/run_pg.sh copies sql/, expected/ and specs/ into DIR; with
FENCE_EDITION=sql the SQL edition is already in every database
(tests/pg_cluster.sh installs it into template1), so the one statement that
names the C extension, "CREATE EXTENSION IF NOT EXISTS fence;", becomes a
comment in the inputs and in the expected output (where its "already exists"
NOTICE goes too), and a no-op in the specs' setup. Nothing else is touched:
every other difference of the SQL edition is an alternative expected file
(NAME_1.out) listed in docs/sql-edition.md.

    sql_edition_inputs.py DIR
"""
import pathlib
import re
import sys

STMT = "CREATE EXTENSION IF NOT EXISTS fence;"
NOTE = "-- CREATE EXTENSION IF NOT EXISTS fence; (the SQL edition is installed)"

root = pathlib.Path(sys.argv[1])
for path in (root / "sql").glob("*.sql"):
    path.write_text(path.read_text().replace(STMT, NOTE))
for path in (root / "expected").glob("*.out"):
    text = path.read_text()
    text = re.sub("^" + re.escape(STMT) + r"\n(NOTICE:  extension \"fence\" already exists, skipping\n)?",
                  NOTE + "\n", text, flags=re.M)
    path.write_text(text)
for path in (root / "specs").glob("*.spec"):
    path.write_text(path.read_text().replace(STMT, "SELECT 1;"))
