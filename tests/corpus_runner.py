#!/usr/bin/python3
"""The shared scenario corpus: tests/corpus/*.test, run on both engines.

One file, one list of expected outcomes, two engines. The runner only
translates what the engines' drivers spell differently (SQLite's 1/0 for
PostgreSQL's true/false, the way an error is classified); it never
translates an outcome. Each file runs on a fresh database: a new SQLite file
with fence loaded, or a new PostgreSQL database with CREATE EXTENSION fence
(PGHOST/PGPORT/PGUSER from the environment, as tests/pg_cluster.sh sets them).

Format (after sqllogictest):

    # comment
    statement ok
    <SQL>

    statement error stale|missing|invalid
    <SQL>

    query
    <SQL>
    ----
    <row: columns separated by |, NULL for null>

    onlyif sqlite|pg        (before a record: run on that engine only)
    skipif sqlite|pg        (before a record: not on that engine)

Records are separated by blank lines. An error is classified by what both
engines promise (SPEC.md "Errors"): stale = SQLSTATE 23T01 / SQLite
constraint error "stale fencing token ..."; missing = 23T02 / constraint
error "fencing token required ..."; invalid = class 22 / SQLITE_ERROR, both
"invalid fencing ...". The message prefix is checked on both engines.

    corpus_runner.py --engine sqlite|pg [FILE.test ...]

prints "ok - corpus ENGINE FILE" or "not ok - ..." per file, with the
failing records as "# " lines.
"""
import argparse
import os
import pathlib
import re
import sqlite3
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PREFIX = {"stale": "stale fencing token", "missing": "fencing token required",
          "invalid": "invalid fencing"}


def parse(path):
    records, lines = [], path.read_text().split("\n")
    i, cond = 0, None
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0] in ("onlyif", "skipif"):
            cond = (words[0], words[1])
            continue
        start = i
        sql = []
        while i < len(lines) and lines[i].strip() and lines[i].strip() != "----":
            sql.append(lines[i])
            i += 1
        rows = None
        if words[0] == "query":
            rows = []
            if i < len(lines) and lines[i].strip() == "----":
                i += 1
                while i < len(lines) and lines[i].strip():
                    rows.append(lines[i].rstrip())
                    i += 1
        records.append({"kind": words, "sql": "\n".join(sql), "rows": rows,
                        "cond": cond, "line": start})
        cond = None
    return records


def applies(record, engine):
    if record["cond"] is None:
        return True
    verb, which = record["cond"]
    return (which == engine) == (verb == "onlyif")


def show(value):
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


class SqliteEngine:
    name = "sqlite"

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory()
        self.con = sqlite3.connect(os.path.join(self.dir.name, "db"), isolation_level=None)
        self.con.enable_load_extension(True)
        self.con.load_extension(str(ROOT / "sqlite_ext" / "fence"))
        self.con.enable_load_extension(False)

    @staticmethod
    def translate(sql):
        """The corpus speaks PostgreSQL's repeat(); SQLite spells it printf."""
        return re.sub(r"repeat\('(.)', (\d+)\)", r"printf('%.*c', \2, '\1')", sql)

    def run(self, sql):
        """(rows, None) or (None, (class, message))."""
        sql = self.translate(sql)
        try:
            return [tuple(r) for r in self.con.execute(sql).fetchall()], None
        except sqlite3.IntegrityError as e:
            msg = str(e)
            cls = "stale" if msg.startswith(PREFIX["stale"]) else \
                "missing" if msg.startswith(PREFIX["missing"]) else "integrity"
            return None, (cls, msg)
        except sqlite3.Error as e:
            msg = str(e)
            code = getattr(e, "sqlite_errorname", "")
            cls = "invalid" if code == "SQLITE_ERROR" and msg.startswith(PREFIX["invalid"]) \
                else "other"
            return None, (cls, f"{code}: {msg}")

    def close(self):
        self.con.close()
        self.dir.cleanup()


class PgEngine:
    name = "pg"


    def __init__(self, label):
        import psycopg
        self.psycopg = psycopg
        self.dbname = "corpus_" + "".join(c if c.isalnum() else "_" for c in label)
        with psycopg.connect(dbname="postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {self.dbname}")
            admin.execute(f"CREATE DATABASE {self.dbname}")
        self.con = psycopg.connect(dbname=self.dbname, autocommit=True)
        self.con.execute("SET client_min_messages = warning")
        # FENCE_EDITION=sql: the SQL edition is in template1 already
        # (tests/pg_cluster.sh), so the new database has it
        if os.environ.get("FENCE_EDITION", "c") != "sql":
            self.con.execute("CREATE EXTENSION fence")

    def run(self, sql):
        try:
            cur = self.con.execute(sql)
            return ([tuple(r) for r in cur.fetchall()] if cur.description else []), None
        except self.psycopg.Error as e:
            state = e.sqlstate or ""
            msg = e.diag.message_primary or str(e)
            cls = {"23T01": "stale", "23T02": "missing"}.get(state)
            if cls is None:
                cls = "invalid" if state.startswith("22") and msg.startswith(PREFIX["invalid"]) \
                    else "other"
            return None, (cls, f"{state}: {msg}")

    def close(self):
        self.con.close()
        with self.psycopg.connect(dbname="postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {self.dbname}")


def check(record, engine):
    """None when the record's outcome is the expected one, else a reason."""
    rows, error = engine.run(record["sql"])
    kind = record["kind"]
    if kind[0] == "statement" and kind[1] == "ok":
        return None if error is None else f"expected ok, got error {error}"
    if kind[0] == "statement" and kind[1] == "error":
        want = kind[2]
        if error is None:
            return f"expected error {want}, got success"
        cls, msg = error
        if cls != want:
            return f"expected error {want}, got {cls}: {msg}"
        return None
    if kind[0] == "query":
        if error is not None:
            return f"expected rows, got error {error}"
        got = ["|".join(show(v) for v in row) for row in rows]
        return None if got == record["rows"] else f"expected {record['rows']}, got {got}"
    return f"unknown record kind {' '.join(kind)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("sqlite", "pg"), required=True)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    files = [pathlib.Path(f) for f in args.files] or sorted((ROOT / "tests" / "corpus").glob("*.test"))
    failed_any = False
    for path in files:
        engine = SqliteEngine() if args.engine == "sqlite" else PgEngine(path.stem)
        failures, ran = [], 0
        try:
            for record in parse(path):
                if not applies(record, args.engine):
                    continue
                ran += 1
                reason = check(record, engine)
                if reason:
                    failures.append(f"{path.name}:{record['line']}: {reason}\n#     {record['sql']}")
        finally:
            engine.close()
        ok = not failures and ran > 0
        failed_any |= not ok
        label = args.engine
        if args.engine == "pg" and os.environ.get("FENCE_EDITION", "c") == "sql":
            label = f"pg sql-edition pg{os.environ.get('FENCE_PG_MAJOR', '15')}"
        print(f"{'ok' if ok else 'not ok'} - corpus {label} {path.stem} ({ran} records)")
        for f in failures:
            print("#   " + f)
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
