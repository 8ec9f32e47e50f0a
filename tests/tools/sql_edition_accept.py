#!/usr/bin/python3
"""Write the SQL edition's outputs of failing topics as expected/NAME_1.out.

After FENCE_EDITION=sql bash tests/run_pg.sh failed on a shared topic or
spec whose input changed (a new query in sql/NAME.sql, a new permutation),
read tests/results/sql-pg15/pg_regression.diffs (and pg_isolation.diffs)
first: every difference must be a row of docs/sql-edition.md. Then

    /usr/bin/python3 tests/tools/sql_edition_accept.py NAME...

copies tests/results/sql-pg15/pg_regress/NAME.out (or pg_isolation/) to
expected/NAME_1.out, with the comment tests/tools/sql_edition_inputs.py
put in place of "CREATE EXTENSION IF NOT EXISTS fence;" turned back.
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
RESULTS = ROOT / "tests" / "results" / "sql-pg15"
NOTE = "-- CREATE EXTENSION IF NOT EXISTS fence; (the SQL edition is installed)"
for name in sys.argv[1:]:
    for sub in ("pg_regress", "pg_isolation"):
        src = RESULTS / sub / f"{name}.out"
        if src.exists():
            text = src.read_text().replace(NOTE, "CREATE EXTENSION IF NOT EXISTS fence;")
            (ROOT / "expected" / f"{name}_1.out").write_text(text)
            print(f"expected/{name}_1.out from {src.relative_to(ROOT)}")
            break
    else:
        print(f"no result for {name} in {RESULTS.relative_to(ROOT)}", file=sys.stderr)
