"""tests/tap.py: the "ok - " / "not ok - " lines every Python test prints.

    from tap import Report
    report = Report("pg attacks")
    report.ok(cond, "what holds", "detail shown when it does not")
    ...
    return report.finish("pg_attacks")    # prints the counts, gives the exit status

Not named tests/pg_*.py: tests/run_pg.sh runs every file that is.
"""


class Report:
    def __init__(self, label):
        self.label = label
        self.passed = 0
        self.failed = 0

    def ok(self, cond, what, detail=""):
        print("%s - %s %s" % ("ok" if cond else "not ok", self.label, what), flush=True)
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            if detail:
                print("#   %s" % detail, flush=True)
        return cond

    def finish(self, name):
        print("# %s: %d passed, %d failed" % (name, self.passed, self.failed))
        return 1 if self.failed else 0
