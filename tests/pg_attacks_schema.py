#!/usr/bin/python3
"""tests/pg_attacks_schema.py: ways around a protected table's guard through
the schema (issue 10, items 4 and 5a), tried as an attacker would.

Each attack is made by an ordinary application role (`app`: INSERT, UPDATE,
DELETE, TRUNCATE and TRIGGER on the tables, not their owner) unless it says
otherwise, and each assertion is on what committed: the rows of the tables,
fence_tokens, the triggers in pg_trigger. Classes tried:

  partitions       present, sub-partitions, created after fence_protect
                   (PARTITION OF), attached after (ATTACH PARTITION),
                   detached (the guard stays); TRUNCATE of a partition needs
                   the fence, or is refused when the fence is per row
  inheritance      UPDATE/DELETE through the parent, writes straight into a
                   child, children added later (INHERITS, ALTER TABLE ..
                   INHERIT), NO INHERIT (the guard stays), protect/unprotect
                   of a child refused, a child with a guard of its own refused
  foreign keys     ON DELETE CASCADE, ON DELETE SET NULL and ON UPDATE
                   CASCADE from an unprotected table into a protected one
  RLS, rules       row-level security on the protected table; CREATE RULE ..
                   DO INSTEAD on the app's own table writing the protected one
  views            an INSTEAD OF trigger, and an auto-updatable view
  COPY             COPY FROM, COPY FREEZE, COPY into a partition
  triggers         ALTER TABLE .. DISABLE TRIGGER by a non-owner (refused) and
                   by the owner (allowed: documented), CREATE EVENT TRIGGER by
                   a non-superuser, session_replication_role
  event trigger    fence_guard_hierarchy disabled by a superuser: what still
                   holds (documented)
  pg_dump          pg_dump -Fc / pg_restore of a protected partitioned table
                   and an inheritance tree: the guard on every table
  logical repl.    fence_tokens published in one database, subscribed in
                   another of the same cluster: a subscriber backend that
                   cached 10 refuses 10 and 15 once the apply made the
                   highest 20; an applied DELETE + INSERT is seen too

The script starts its own throwaway cluster (wal_level=logical), with fence
installed into a DESTDIR read through extension_destdir, and stops it on exit.
Output: "ok - schema ..." / "not ok - schema ..." lines; exit status 0 when
every assertion holds.
"""
import atexit
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IS_ROOT = os.geteuid() == 0
STALE = "23T01"
MISSING = "23T02"
NOT_OWNER = "42501"
REFUSED = "0A000"       # TRUNCATE of a per-row protected table

BINDIR = subprocess.check_output(["pg_config", "--bindir"], universal_newlines=True).strip()
WORK = None
SERVER = None
passed = failed = 0


def ok(cond, what, details=()):
    global passed, failed
    print("%s - schema %s" % ("ok" if cond else "not ok", what), flush=True)
    if cond:
        passed += 1
    else:
        failed += 1
        for d in ([details] if isinstance(details, str) else list(details))[:20]:
            for line in str(d).splitlines():
                print("#   " + line, flush=True)
    return cond


def as_postgres(cmd):
    return (["runuser", "-u", "postgres", "--"] if IS_ROOT else []) + cmd


def run(cmd):
    # from a directory the postgres user can enter: CI may clone into /root,
    # and pg_restore run as postgres warns when it cannot enter its cwd
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, cwd="/")


# ---------------------------------------------------------------------------
# the cluster

class Server:
    def __init__(self):
        self.dir = os.path.join(WORK, "pg")
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.port = random.randint(20000, 59999)
        self.running = False

    def start(self, install):
        if IS_ROOT:
            subprocess.run(["chown", "-R", "postgres", WORK], check=True)
        r = run(as_postgres([BINDIR + "/initdb", "-D", self.data, "-A", "trust", "-U", "postgres",
                             "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"]))
        if r.returncode:
            raise RuntimeError("initdb failed:\n" + r.stdout)
        opts = ("-k %s -p %d -c listen_addresses='' -c fsync=off -c extension_destdir=%s "
                "-c wal_level=logical" % (self.dir, self.port, install))
        self.running = True
        r = run(as_postgres([BINDIR + "/pg_ctl", "-D", self.data, "-l", self.log, "-w",
                             "-t", "90", "-o", opts, "start"]))
        if r.returncode:
            raise RuntimeError("pg_ctl start failed:\n%s\n%s" % (r.stdout, self.tail()))

    def stop(self):
        if self.running:
            run(as_postgres([BINDIR + "/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"]))
            self.running = False

    def tail(self, n=25):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no server log)"

    def connect(self, db, user="postgres", autocommit=True):
        return psycopg.connect(host=self.dir, port=self.port, user=user, dbname=db,
                               autocommit=autocommit, connect_timeout=10)

    def dsn(self, db):
        return "host=%s port=%d user=postgres dbname=%s" % (self.dir, self.port, db)


def cleanup():
    if SERVER:
        SERVER.stop()
    if WORK and os.path.isdir(WORK):
        shutil.rmtree(WORK, ignore_errors=True)


def install_dir():
    """fence installed where only our server looks: tests/run_pg.sh's
    install when it is there, else a fresh one."""
    given = os.environ.get("PG_WORK")
    if given and os.path.isdir(os.path.join(given, "install")):
        return os.path.join(given, "install")
    install = os.path.join(WORK, "install")
    for args in (["with_llvm=no"], ["with_llvm=no", "install", "DESTDIR=" + install]):
        r = run(["make", "-s", "-C", os.path.join(ROOT, "pg_ext")] + args)
        if r.returncode:
            raise RuntimeError("building fence failed:\n" + r.stdout)
    return install


# ---------------------------------------------------------------------------
# helpers

class Db:
    """One database with fence, an owner role and an application role."""

    def __init__(self, name):
        self.name = name
        with SERVER.connect("postgres") as c:
            c.execute("CREATE DATABASE %s" % name)
        self.su = SERVER.connect(name)
        self.su.execute("CREATE EXTENSION fence")
        for role in ("fowner", "app"):
            if not self.su.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                self.su.execute("CREATE ROLE %s LOGIN" % role)
        self.su.execute("GRANT CREATE ON SCHEMA public TO fowner")
        self.owner = SERVER.connect(name, "fowner")

    def app_grants(self, *tables):
        for t in tables:
            self.owner.execute("GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER ON %s "
                               "TO app" % t)

    def attempt(self, sql, fence=None, user="app", args=()):
        """Run sql as user in a transaction of its own, fenced first on
        fence = (resource, token) if given: commit if it passes, roll back
        if not. Returns the SQLSTATE raised, or None."""
        with SERVER.connect(self.name, user, autocommit=False) as c:
            try:
                if fence:
                    c.execute("SELECT fence_check(%s, %s)", fence)
                c.execute(sql, args)
                c.commit()
                return None
            except psycopg.Error as e:
                c.rollback()
                return e.sqlstate

    def rows(self, sql):
        return self.su.execute(sql).fetchall()

    def one(self, sql):
        return self.su.execute(sql).fetchone()[0]

    def guards(self, *tables):
        """{table: (row trigger args, truncate trigger args, enabled)} of our guard triggers."""
        got = {}
        for rel, name, args, enabled in self.su.execute(
                "SELECT tgrelid::regclass::text, tgname, encode(tgargs, 'escape'), tgenabled "
                "FROM pg_trigger WHERE tgname IN ('fence_guard', 'fence_guard_truncate') "
                "AND tgrelid::regclass::text = ANY(%s)", (list(tables),)).fetchall():
            got.setdefault(rel, {})[name] = (args, enabled)
        return got

    def fully_guarded(self, resource, *tables):
        """Every table carries both guard triggers, enabled, for resource."""
        got = self.guards(*tables)
        bad = []
        for t in tables:
            g = got.get(t, {})
            for name in ("fence_guard", "fence_guard_truncate"):
                if name not in g or g[name][1] != "O" or ("\\000%s\\000" % resource) not in g[name][0]:
                    bad.append("%s.%s: %r" % (t, name, g.get(name)))
        return bad


def count(db, table):
    return db.one("SELECT count(*) FROM %s" % table)


# ---------------------------------------------------------------------------
# partitions

def partitions():
    db = Db("att_part")
    o = db.owner
    o.execute("CREATE TABLE p (id int, tok bigint, v text) PARTITION BY RANGE (id)")
    o.execute("CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10)")
    o.execute("CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (10) TO (20) PARTITION BY RANGE (id)")
    o.execute("CREATE TABLE p2a PARTITION OF p2 FOR VALUES FROM (10) TO (15)")
    o.execute("SELECT fence_protect('p', 'tok', 'part')")
    db.su.execute("SELECT fence_check('part', 10)")
    o.execute("BEGIN")
    o.execute("INSERT INTO p VALUES (1, 10, 'a'), (11, 10, 'b')")
    o.execute("COMMIT")
    db.app_grants("p", "p1", "p2", "p2a")

    ok(not db.fully_guarded("part", "p", "p1", "p2", "p2a"),
       "partitions present at fence_protect, sub-partitions too, carry both guard triggers",
       db.fully_guarded("part", "p", "p1", "p2", "p2a"))
    got = {t: db.attempt("TRUNCATE %s" % t) for t in ("p1", "p2", "p2a", "p")}
    ok(all(v == MISSING for v in got.values()) and count(db, "p") == 2,
       "TRUNCATE of a partition, a sub-partition or the parent needs the fence (23T02; rows stay)",
       repr(got))
    got = {t: db.attempt("INSERT INTO %s VALUES (%d, 5, 'stale')" % (t, n))
           for t, n in (("p1", 2), ("p2", 12), ("p2a", 13), ("p", 3))}
    ok(all(v == STALE for v in got.values()) and count(db, "p") == 2,
       "a stale INSERT straight into a partition or sub-partition is refused (23T01)", repr(got))
    got = db.attempt("UPDATE p2a SET v = 'x'"), db.attempt("DELETE FROM p1")
    ok(got == (MISSING, MISSING) and db.rows("SELECT v FROM p ORDER BY id") == [("a",), ("b",)],
       "an UPDATE or DELETE straight into a partition needs the fence", repr(got))

    # an UPDATE that moves a row to another partition (DELETE + INSERT inside)
    got = (db.attempt("UPDATE p SET id = 12 WHERE id = 1"),
           db.attempt("UPDATE p SET id = 12, tok = 5 WHERE id = 1"))
    ok(got == (MISSING, STALE) and db.rows("SELECT tableoid::regclass::text, id FROM p ORDER BY id")
       == [("p1", 1), ("p2a", 11)],
       "an UPDATE moving a row to another partition needs the fence, and a stale token is refused",
       repr(got))
    got = db.attempt("UPDATE p SET id = 12 WHERE id = 1", fence=("part", 10))
    ok(got is None and db.rows("SELECT tableoid::regclass::text, id FROM p ORDER BY id")
       == [("p2a", 11), ("p2a", 12)], "a fenced UPDATE moving a row across partitions commits",
       repr(got))
    o.execute("UPDATE p SET id = 1 WHERE id = 12 AND fence_check('part', 10) = 10")

    # created and attached after fence_protect
    o.execute("CREATE TABLE p3 PARTITION OF p FOR VALUES FROM (20) TO (30)")
    o.execute("CREATE TABLE p4 (id int, tok bigint, v text)")
    o.execute("INSERT INTO p4 VALUES (31, 1, 'old')")
    o.execute("ALTER TABLE p ATTACH PARTITION p4 FOR VALUES FROM (30) TO (40)")
    o.execute("CREATE TABLE p5 (id int, tok bigint, v text) PARTITION BY RANGE (id)")
    o.execute("CREATE TABLE p5a PARTITION OF p5 FOR VALUES FROM (40) TO (45)")
    o.execute("ALTER TABLE p ATTACH PARTITION p5 FOR VALUES FROM (40) TO (50)")
    o.execute("CREATE TABLE p5b PARTITION OF p5 FOR VALUES FROM (45) TO (50)")
    later = ("p3", "p4", "p5", "p5a", "p5b")
    ok(not db.fully_guarded("part", *later),
       "partitions created (PARTITION OF) or attached (ATTACH PARTITION) after fence_protect, "
       "and their sub-partitions, carry both guard triggers", db.fully_guarded("part", *later))
    db.app_grants(*later)
    got = {t: db.attempt("TRUNCATE %s" % t) for t in later}
    ok(all(v == MISSING for v in got.values()) and count(db, "p4") == 1,
       "TRUNCATE of a partition created or attached after fence_protect needs the fence",
       repr(got))
    got = {t: db.attempt("INSERT INTO %s VALUES (%d, 5, 'stale')" % (t, n))
           for t, n in (("p3", 21), ("p4", 32), ("p5a", 41), ("p5b", 46))}
    ok(all(v == STALE for v in got.values()) and count(db, "p") == 3,
       "a stale INSERT into a partition created or attached after fence_protect is refused",
       repr(got))
    got = db.attempt("TRUNCATE p4", fence=("part", 10))
    ok(got is None and count(db, "p4") == 0,
       "TRUNCATE of a partition in a transaction fenced on the table's resource commits", repr(got))
    with SERVER.connect(db.name, "app", autocommit=False) as c:
        try:
            with c.cursor().copy("COPY p1 (id, tok, v) FROM STDIN") as cp:
                cp.write_row((4, 5, "copied stale"))
            c.commit()
            state = None
        except psycopg.Error as e:
            c.rollback()
            state = e.sqlstate
    ok(state == STALE and count(db, "p1") == 1, "a stale COPY straight into a partition is refused",
       repr(state))

    # detached partitions keep the guard
    o.execute("ALTER TABLE p DETACH PARTITION p1")
    o.execute("ALTER TABLE p DETACH PARTITION p5")
    ok(not db.fully_guarded("part", "p1", "p5", "p5a", "p5b"),
       "a detached partition keeps the guard (its sub-partitions too)",
       db.fully_guarded("part", "p1", "p5", "p5a", "p5b"))
    o.execute("CREATE TABLE p7 PARTITION OF p FOR VALUES FROM (70) TO (80)")
    o.execute("ALTER TABLE p DETACH PARTITION p7 CONCURRENTLY")
    ok(not db.fully_guarded("part", "p7"),
       "a partition detached CONCURRENTLY keeps the guard", db.fully_guarded("part", "p7"))
    got = db.attempt("INSERT INTO p1 VALUES (5, 4, 'stale')"), db.attempt("TRUNCATE p1")
    ok(got == (STALE, MISSING) and count(db, "p1") == 1,
       "a detached partition still refuses stale and unfenced writes", repr(got))

    # per-row fences: TRUNCATE of any partition is refused, fenced or not
    o.execute("CREATE TABLE q (id int, tok bigint) PARTITION BY LIST (id)")
    o.execute("CREATE TABLE q1 PARTITION OF q FOR VALUES IN (1, 2)")
    o.execute("SELECT fence_protect('q', 'tok', 'acct:', 'id')")
    o.execute("CREATE TABLE q2 PARTITION OF q FOR VALUES IN (3, 4)")
    o.execute("INSERT INTO q VALUES (1, 7), (3, 7)")
    db.app_grants("q", "q1", "q2")
    got = {t: db.attempt("TRUNCATE %s" % t, fence=("acct:1", 7)) for t in ("q", "q1", "q2")}
    ok(all(v == REFUSED for v in got.values()) and count(db, "q") == 2,
       "TRUNCATE of a per-row protected table's partitions is refused, even fenced (0A000)",
       repr(got))

    # the guard is managed at the top
    got = (db.attempt("SELECT fence_unprotect('p3')", user="fowner"),
           db.attempt("SELECT fence_protect('p3', 'tok', 'other')", user="fowner"))
    ok(got == ("55000", "55000") and not db.fully_guarded("part", "p3"),
       "fence_protect and fence_unprotect of a partition are refused (55000)", repr(got))
    o.execute("CREATE TABLE p6 (id int, tok bigint, v text)")
    o.execute("SELECT fence_protect('p6', 'tok', 'other')")
    got = db.attempt("ALTER TABLE p ATTACH PARTITION p6 FOR VALUES FROM (60) TO (70)",
                     user="fowner")
    ok(got is not None and db.one("SELECT count(*) FROM pg_inherits WHERE inhrelid = 'p6'::regclass") == 0,
       "attaching a table that has a different guard of its own is refused", repr(got))

    # protecting again replaces the guard everywhere; unprotect removes it everywhere
    o.execute("SELECT fence_protect('p', NULL, 'part2')")
    tree = ("p", "p2", "p2a", "p3", "p4")
    ok(not db.fully_guarded("part2", *tree),
       "protecting again replaces the guard on every partition", db.fully_guarded("part2", *tree))
    o.execute("SELECT fence_unprotect('p')")
    left = db.guards(*tree)
    ok(not left, "fence_unprotect removes the guard from every partition", repr(left))


# ---------------------------------------------------------------------------
# inheritance

def inheritance():
    db = Db("att_inh")
    o = db.owner
    o.execute("CREATE TABLE h (id int, tok bigint, v text)")
    o.execute("CREATE TABLE hc (extra int) INHERITS (h)")
    o.execute("SELECT fence_protect('h', 'tok', 'inh')")
    db.su.execute("SELECT fence_check('inh', 10)")
    o.execute("INSERT INTO h VALUES (1, 10, 'parent')")
    o.execute("INSERT INTO hc VALUES (2, 10, 'child', 0)")
    o.execute("CREATE TABLE hc2 () INHERITS (hc)")
    o.execute("INSERT INTO hc2 VALUES (3, 10, 'grandchild', 0)")
    o.execute("CREATE TABLE hx (id int, tok bigint, v text)")
    o.execute("INSERT INTO hx VALUES (4, 10, 'adopted')")
    o.execute("ALTER TABLE hx INHERIT h")
    db.app_grants("h", "hc", "hc2", "hx")
    everything = ("h", "hc", "hc2", "hx")
    ok(not db.fully_guarded("inh", *everything),
       "inheritance children (present, INHERITS after, ALTER TABLE .. INHERIT after, "
       "grandchildren) carry both guard triggers", db.fully_guarded("inh", *everything))
    snapshot = db.rows("SELECT id, tok, v FROM h ORDER BY id")
    got = {"UPDATE h": db.attempt("UPDATE h SET v = 'unfenced'"),
           "DELETE FROM h": db.attempt("DELETE FROM h"),
           "UPDATE h SET tok = 5": db.attempt("UPDATE h SET tok = 5 WHERE id = 3")}
    ok(got == {"UPDATE h": MISSING, "DELETE FROM h": MISSING, "UPDATE h SET tok = 5": STALE}
       and db.rows("SELECT id, tok, v FROM h ORDER BY id") == snapshot,
       "UPDATE and DELETE through the parent reach the children's guards", repr(got))
    got = {t: db.attempt("INSERT INTO %s (id, tok, v) VALUES (9, 5, 'stale')" % t)
           for t in ("hc", "hc2", "hx")}
    ok(all(v == STALE for v in got.values()) and db.rows("SELECT id, tok, v FROM h ORDER BY id") == snapshot,
       "a stale INSERT straight into a child is refused", repr(got))
    got = {t: db.attempt("TRUNCATE %s" % t) for t in ("hc", "hc2", "hx")}
    ok(all(v == MISSING for v in got.values()) and count(db, "h") == 4,
       "TRUNCATE of a child needs the fence", repr(got))
    got = db.attempt("UPDATE h SET v = 'fenced' WHERE id >= 2", fence=("inh", 10))
    ok(got is None and db.one("SELECT count(*) FROM h WHERE v = 'fenced'") == 3,
       "a fenced UPDATE through the parent commits (positive control)", repr(got))
    o.execute("ALTER TABLE hx NO INHERIT h")
    ok(not db.fully_guarded("inh", "hx") and db.attempt("INSERT INTO hx VALUES (8, 5, 's')") == STALE,
       "NO INHERIT keeps the guard on the former child", db.fully_guarded("inh", "hx"))
    got = (db.attempt("SELECT fence_unprotect('hc')", user="fowner"),
           db.attempt("SELECT fence_protect('hc2', NULL, 'other')", user="fowner"))
    ok(got == ("55000", "55000") and not db.fully_guarded("inh", "hc", "hc2"),
       "fence_protect and fence_unprotect of an inheritance child are refused", repr(got))
    o.execute("CREATE TABLE hy (id int, tok bigint, v text)")
    o.execute("SELECT fence_protect('hy', 'tok', 'other')")
    got = db.attempt("ALTER TABLE hy INHERIT h", user="fowner")
    ok(got == "55000" and not db.rows("SELECT 1 FROM pg_inherits WHERE inhrelid = 'hy'::regclass"),
       "inheriting from a protected table with a different guard of its own is refused",
       repr(got))
    o.execute("CREATE TABLE h2 (id int, tok bigint, v text)")
    o.execute("SELECT fence_protect('h2', 'tok', 'inh-two')")
    got = db.attempt("CREATE TABLE hz () INHERITS (h, h2)", user="fowner")
    ok(got == "55000" and db.one("SELECT to_regclass('hz') IS NULL"),
       "a child of two parents with different fences is refused", repr(got))
    # a protected child below an unprotected parent: writes through the parent
    o.execute("CREATE TABLE top (id int, tok bigint, v text)")
    o.execute("CREATE TABLE low () INHERITS (top)")
    o.execute("SELECT fence_protect('low', 'tok', 'low')")
    o.execute("INSERT INTO low VALUES (1, 3, 'x') ")
    db.app_grants("top", "low")
    got = (db.attempt("UPDATE top SET v = 'y'"), db.attempt("DELETE FROM top"),
           db.attempt("TRUNCATE top"))
    ok(got == (MISSING, MISSING, MISSING) and db.rows("SELECT v FROM low") == [("x",)],
       "a protected child of an unprotected parent: UPDATE, DELETE, TRUNCATE of the parent "
       "need the child's fence", repr(got))
    # foreign tables cannot carry a TRUNCATE trigger: refused below a protected table
    db.su.execute("CREATE FOREIGN DATA WRAPPER dummy_fdw")
    db.su.execute("CREATE SERVER dummy FOREIGN DATA WRAPPER dummy_fdw")
    got = db.attempt("CREATE FOREIGN TABLE hf () INHERITS (h) SERVER dummy", user="postgres")
    ok(got == "42809" and db.one("SELECT to_regclass('hf') IS NULL"),
       "a foreign table below a protected table is refused", repr(got))
    o.execute("SELECT fence_unprotect('h')")
    left = db.guards("h", "hc", "hc2")
    ok(not left, "fence_unprotect removes the guard from every child", repr(left))


# ---------------------------------------------------------------------------
# foreign keys, RLS, rules, views, COPY

def writes_from_elsewhere():
    db = Db("att_misc")
    o = db.owner
    o.execute("CREATE TABLE acct (id int PRIMARY KEY, code int UNIQUE)")
    o.execute("CREATE TABLE entry (id int PRIMARY KEY, tok bigint, "
              "acct int REFERENCES acct ON DELETE CASCADE, "
              "code int REFERENCES acct (code) ON UPDATE CASCADE, "
              "acct2 int REFERENCES acct ON DELETE SET NULL)")
    o.execute("SELECT fence_protect('entry', 'tok', 'led')")
    db.su.execute("SELECT fence_check('led', 10)")
    o.execute("INSERT INTO acct VALUES (1, 100), (2, 200), (3, 300)")
    o.execute("INSERT INTO entry VALUES (1, 10, 1, NULL, NULL), (2, 10, NULL, 200, NULL), "
              "(3, 10, NULL, NULL, 3)")
    db.app_grants("acct", "entry")
    before = db.rows("SELECT * FROM entry ORDER BY id"), db.rows("SELECT * FROM acct ORDER BY id")
    got = {"ON DELETE CASCADE": db.attempt("DELETE FROM acct WHERE id = 1"),
           "ON UPDATE CASCADE": db.attempt("UPDATE acct SET code = 201 WHERE id = 2"),
           "ON DELETE SET NULL": db.attempt("DELETE FROM acct WHERE id = 3")}
    after = db.rows("SELECT * FROM entry ORDER BY id"), db.rows("SELECT * FROM acct ORDER BY id")
    ok(all(v == MISSING for v in got.values()) and after == before,
       "foreign-key actions into a protected table need the fence; nothing of them commits",
       [repr(got), repr(after)])
    got = db.attempt("DELETE FROM acct WHERE id = 1", fence=("led", 10))
    ok(got is None and db.one("SELECT count(*) FROM entry WHERE id = 1") == 0,
       "a fenced ON DELETE CASCADE commits (positive control)", repr(got))

    # row-level security on the protected table does not skip the guard
    o.execute("CREATE TABLE secret (id int, tok bigint, owner_name text)")
    o.execute("SELECT fence_protect('secret', 'tok', 'led')")
    o.execute("ALTER TABLE secret ENABLE ROW LEVEL SECURITY")
    o.execute("CREATE POLICY mine ON secret USING (owner_name = current_user) "
              "WITH CHECK (owner_name = current_user)")
    db.app_grants("secret")
    got = db.attempt("INSERT INTO secret VALUES (1, 5, 'app')")
    ok(got == STALE and count(db, "secret") == 0,
       "row-level security: a stale INSERT the policy allows is still refused", repr(got))

    # a rule on the application's own table that writes the protected table
    db.su.execute("GRANT CREATE ON SCHEMA public TO app")
    a = SERVER.connect(db.name, "app")
    a.execute("CREATE TABLE inbox (id int, tok bigint)")
    a.execute("CREATE RULE forward AS ON INSERT TO inbox DO INSTEAD "
              "INSERT INTO entry (id, tok) VALUES (NEW.id, NEW.tok)")
    got = db.attempt("INSERT INTO inbox VALUES (50, 5)")
    ok(got == STALE and not db.rows("SELECT 1 FROM entry WHERE id = 50"),
       "a DO INSTEAD rule writing the protected table is guarded", repr(got))
    # a view with an INSTEAD OF trigger, and an auto-updatable view
    a.execute("CREATE VIEW ev AS SELECT id, tok FROM entry")
    a.execute("CREATE FUNCTION ev_ins() RETURNS trigger LANGUAGE plpgsql AS "
              "$$BEGIN INSERT INTO entry (id, tok) VALUES (NEW.id, NEW.tok); RETURN NEW; END$$")
    a.execute("CREATE TRIGGER ev_ins INSTEAD OF INSERT ON ev FOR EACH ROW EXECUTE FUNCTION ev_ins()")
    a.execute("CREATE VIEW ev2 AS SELECT id, tok FROM entry")
    got = (db.attempt("INSERT INTO ev VALUES (51, 5)"), db.attempt("INSERT INTO ev2 VALUES (52, 5)"),
           db.attempt("DELETE FROM ev2"))
    ok(got == (STALE, STALE, MISSING) and not db.rows("SELECT 1 FROM entry WHERE id > 50")
       and count(db, "entry") == 2,
       "views (INSTEAD OF trigger, auto-updatable) writing the protected table are guarded",
       repr(got))
    a.close()

    # COPY FROM and COPY FREEZE
    def copy(sql, rows, fence=None, user="app", before_sql=None):
        with SERVER.connect(db.name, user, autocommit=False) as c:
            try:
                if fence:
                    c.execute("SELECT fence_check(%s, %s)", fence)
                if before_sql:
                    c.execute(before_sql)
                with c.cursor().copy(sql) as cp:
                    for r in rows:
                        cp.write_row(r)
                c.commit()
                return None
            except psycopg.Error as e:
                c.rollback()
                return e.sqlstate
    n = count(db, "entry")
    got = copy("COPY entry (id, tok) FROM STDIN", [(60, 10), (61, 5)])
    ok(got == STALE and count(db, "entry") == n, "COPY FROM with one stale row commits no row",
       repr(got))
    got = copy("COPY entry (id, tok) FROM STDIN (FREEZE)", [(62, 5)], fence=("led", 10),
               user="fowner", before_sql="TRUNCATE entry")
    ok(got == STALE and count(db, "entry") == n,
       "COPY FREEZE after a fenced TRUNCATE in the same transaction still checks each row",
       repr(got))
    got = copy("COPY fresh (id, tok) FROM STDIN (FREEZE)", [(1, 5)], user="fowner",
               before_sql="CREATE TABLE fresh (id int, tok bigint); "
                          "SELECT fence_protect('fresh', 'tok', 'led')")
    ok(got == STALE and db.one("SELECT to_regclass('fresh') IS NULL"),
       "COPY FREEZE into a table created and protected in the same transaction is checked",
       repr(got))


# ---------------------------------------------------------------------------
# triggers switched off, event triggers, session_replication_role

def switches():
    db = Db("att_switch")
    o = db.owner
    o.execute("CREATE TABLE t (id int, tok bigint)")
    o.execute("SELECT fence_protect('t', 'tok', 'sw')")
    db.su.execute("SELECT fence_check('sw', 10)")
    db.app_grants("t")
    got = {s: db.attempt(s) for s in ("ALTER TABLE t DISABLE TRIGGER fence_guard",
                                      "ALTER TABLE t DISABLE TRIGGER ALL",
                                      "ALTER TABLE t ENABLE REPLICA TRIGGER fence_guard",
                                      "DROP TRIGGER fence_guard ON t",
                                      "SELECT fence_unprotect('t')")}
    ok(all(v == NOT_OWNER for v in got.values()) and not db.fully_guarded("sw", "t"),
       "a non-owner cannot disable, drop or unprotect the guard (42501)", repr(got))
    got = db.attempt("SET session_replication_role = replica")
    ok(got == NOT_OWNER, "an application role cannot set session_replication_role (42501)",
       repr(got))
    got = db.attempt("CREATE EVENT TRIGGER evil ON ddl_command_end EXECUTE FUNCTION fence_guard_hierarchy()")
    ok(got == NOT_OWNER, "an application role cannot create an event trigger (42501)", repr(got))
    ok(db.attempt("INSERT INTO t VALUES (1, 5)") == STALE and count(db, "t") == 0,
       "after those attempts the guard still refuses a stale write")

    # documented: the owner can switch the guard off, as fence_unprotect does
    got = db.attempt("ALTER TABLE t DISABLE TRIGGER fence_guard", user="fowner")
    stale = db.attempt("INSERT INTO t VALUES (2, 5)")
    ok(got is None and stale is None and count(db, "t") == 1,
       "documented limit: the table's owner can disable the guard (then a stale write commits)",
       repr((got, stale)))
    o.execute("ALTER TABLE t ENABLE TRIGGER fence_guard")
    o.execute("DELETE FROM t WHERE id = 2 AND fence_check('sw', 10) = 10")

    # documented: a superuser's session_replication_role = replica skips the
    # guard (ENABLE ORIGIN triggers) but not fence_tokens' own triggers
    with SERVER.connect(db.name, "postgres", autocommit=False) as c:
        c.execute("SET session_replication_role = replica")
        state = None
        try:
            c.execute("INSERT INTO t VALUES (3, 4)")
        except psycopg.Error as e:
            state = e.sqlstate
        c.rollback()
    ok(state is None and count(db, "t") == 0,
       "documented limit: a superuser's session_replication_role = replica skips the guard "
       "(this stale INSERT passed, and was rolled back)", repr(state))

    # the event trigger still works with session_replication_role = replica
    o.execute("CREATE TABLE h (id int, tok bigint)")
    o.execute("SELECT fence_protect('h', 'tok', 'sw')")
    with SERVER.connect(db.name, "postgres") as c:
        c.execute("SET session_replication_role = replica")
        c.execute("SET ROLE fowner")
        c.execute("CREATE TABLE hr () INHERITS (h)")
    ok(not db.fully_guarded("sw", "hr"),
       "the event trigger guards a new child under session_replication_role = replica too",
       db.fully_guarded("sw", "hr"))

    # documented: a superuser who disables the event trigger loses the guard
    # of new inheritance children and new partitions' TRUNCATE
    o.execute("CREATE TABLE p (id int, tok bigint) PARTITION BY LIST (id)")
    o.execute("SELECT fence_protect('p', 'tok', 'sw')")
    db.su.execute("ALTER EVENT TRIGGER fence_guard_hierarchy DISABLE")
    o.execute("CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1)")
    o.execute("CREATE TABLE hn () INHERITS (h)")
    db.su.execute("ALTER EVENT TRIGGER fence_guard_hierarchy ENABLE ALWAYS")
    g = db.guards("p1", "hn")
    ok(set(g.get("p1", {})) == {"fence_guard"} and "hn" not in g,
       "documented limit: with the event trigger disabled a new partition gets only the cloned "
       "row guard and a new child none", repr(g))
    o.execute("SELECT fence_protect('h', 'tok', 'sw')")
    o.execute("SELECT fence_protect('p', 'tok', 'sw')")
    ok(not db.fully_guarded("sw", "p1", "hn"),
       "fence_protect again repairs what was created while the event trigger was disabled",
       db.fully_guarded("sw", "p1", "hn"))


# ---------------------------------------------------------------------------
# the event trigger runs for every role's DDL: it must not get in the way

def unrelated_ddl():
    with SERVER.connect("postgres") as c:
        c.execute("CREATE DATABASE att_ddl")
        c.execute("CREATE ROLE stranger LOGIN")
    su = SERVER.connect("att_ddl")
    su.execute("CREATE SCHEMA fencing")
    su.execute("CREATE EXTENSION fence SCHEMA fencing")   # no USAGE for stranger
    su.execute("GRANT CREATE ON SCHEMA public TO stranger")
    errors = []
    with SERVER.connect("att_ddl", "stranger") as s:
        for sql in ("CREATE TABLE mine (id int)", "CREATE TABLE mine_child () INHERITS (mine)",
                    "CREATE TABLE mine_p (id int) PARTITION BY LIST (id)",
                    "CREATE TABLE mine_p1 PARTITION OF mine_p FOR VALUES IN (1)",
                    "ALTER TABLE mine ADD COLUMN x int", "CREATE TEMP TABLE tmp (id int)"):
            try:
                s.execute(sql)
            except psycopg.Error as e:
                errors.append("%s: %s" % (sql, e))
    ok(not errors and su.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'fence_guard%'")
       .fetchone()[0] == 0,
       "a role without USAGE on fence's schema creates, inherits, partitions and alters its own "
       "tables as before (the event trigger does nothing to unprotected tables)", errors)
    su.close()


# ---------------------------------------------------------------------------
# pg_dump / pg_restore

def dump_restore():
    db = Db("att_dump")
    o = db.owner
    o.execute("CREATE TABLE p (id int, tok bigint) PARTITION BY RANGE (id)")
    o.execute("CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10)")
    o.execute("CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (10) TO (20) PARTITION BY RANGE (id)")
    o.execute("CREATE TABLE p2a PARTITION OF p2 FOR VALUES FROM (10) TO (20)")
    o.execute("SELECT fence_protect('p', 'tok', 'dump')")
    o.execute("CREATE TABLE p3 PARTITION OF p FOR VALUES FROM (20) TO (30)")
    o.execute("CREATE TABLE h (id int, tok bigint)")
    o.execute("SELECT fence_protect('h', 'tok', 'dump')")
    o.execute("CREATE TABLE hc () INHERITS (h)")
    o.execute("INSERT INTO p VALUES (1, 10), (11, 10), (21, 10)")
    o.execute("INSERT INTO hc VALUES (1, 10)")
    tables = ("p", "p1", "p2", "p2a", "p3", "h", "hc")
    src = db.guards(*tables)
    path = os.path.join(WORK, "pg", "att.dump")
    r = run(as_postgres([BINDIR + "/pg_dump", "-h", SERVER.dir, "-p", str(SERVER.port),
                         "-U", "postgres", "-Fc", "-f", path, db.name]))
    ok(r.returncode == 0, "pg_dump -Fc of protected partitioned and inherited tables", r.stdout)
    with SERVER.connect("postgres") as c:
        c.execute("CREATE DATABASE att_restored")
    r = run(as_postgres([BINDIR + "/pg_restore", "-h", SERVER.dir, "-p", str(SERVER.port),
                         "-U", "postgres", "--exit-on-error", "-d", "att_restored", path]))
    ok(r.returncode == 0 and not r.stdout.strip(), "pg_restore succeeds without errors", r.stdout)
    restored = Db.__new__(Db)
    restored.name = "att_restored"
    restored.su = SERVER.connect("att_restored")
    got = restored.guards(*tables)
    ok(got == src and not restored.fully_guarded("dump", *tables),
       "after pg_restore every partition, sub-partition and child carries the guard",
       ["source %r" % src, "restored %r" % got])
    restored.owner = SERVER.connect("att_restored", "fowner")
    restored.app_grants(*tables)
    got = {t: restored.attempt("TRUNCATE %s" % t) for t in ("p1", "p2a", "p3", "hc")}
    got["stale insert"] = restored.attempt("INSERT INTO p VALUES (2, 5)")
    got["update via h"] = restored.attempt("UPDATE h SET tok = tok")
    ok(got == {"p1": MISSING, "p2a": MISSING, "p3": MISSING, "hc": MISSING,
               "stale insert": STALE,
               "update via h": None}
       and restored.one("SELECT count(*) FROM p") == 3,
       "the restored guards refuse unfenced TRUNCATE of every partition and child, and stale writes", repr(got))


# ---------------------------------------------------------------------------
# logical replication of fence_tokens and the token cache

def logical_replication():
    with SERVER.connect("postgres") as c:
        c.execute("CREATE DATABASE lr_pub")
        c.execute("CREATE DATABASE lr_sub")
    pub = SERVER.connect("lr_pub")
    sub = SERVER.connect("lr_sub")
    pub.execute("CREATE EXTENSION fence")
    sub.execute("CREATE EXTENSION fence")
    pub.execute("CREATE PUBLICATION fence_pub FOR TABLE fence_tokens")
    # a subscription to the same cluster hangs creating its slot: make it here
    pub.execute("SELECT pg_create_logical_replication_slot('fence_sub', 'pgoutput')")
    sub.execute("CREATE SUBSCRIPTION fence_sub CONNECTION '%s' PUBLICATION fence_pub "
                "WITH (create_slot = false, slot_name = 'fence_sub', copy_data = false)"
                % SERVER.dsn("lr_pub"))
    try:
        def wait_for(want, what):
            probe = SERVER.connect("lr_sub")
            deadline = time.monotonic() + 60
            got = None
            while time.monotonic() < deadline:
                got = probe.execute("SELECT token FROM fence_tokens WHERE resource = 'lr'").fetchone()
                if got and got[0] == want:
                    break
                time.sleep(0.05)
            probe.close()
            if not (got and got[0] == want):
                raise RuntimeError("the subscriber did not apply %s: %r" % (what, got))

        pub.execute("SELECT fence_check('lr', 10)")
        wait_for(10, "token 10")
        # this subscriber backend reads 10 and caches it
        sub.execute("BEGIN")
        sub.execute("SELECT fence_check('lr', 10)")
        sub.execute("COMMIT")
        pub.execute("SELECT fence_check('lr', 20)")
        wait_for(20, "token 20")

        def present(token):
            try:
                sub.execute("BEGIN")
                sub.execute("SELECT fence_check('lr', %s)", (token,))
                sub.execute("COMMIT")
                return None
            except psycopg.Error as e:
                sub.execute("ROLLBACK")
                return e.sqlstate
        # 10 is what the cache remembers: answered from it unless invalidated
        got = present(10), present(15)
        ok(got == (STALE, STALE) and sub.execute("SELECT fence_current('lr')").fetchone()[0] == 20,
           "logical replication: a subscriber backend that cached 10 refuses 10 and 15 once the "
           "apply made the highest 20 (an applied UPDATE)", "fence_check 10, 15 raised %r" % (got,))
        # the backend caches 20; the publisher resets and advances to 30:
        # the apply DELETEs the row and INSERTs it again
        ok(present(20) is None, "logical replication: the subscriber accepts the current 20")
        pub.execute("SELECT fence_reset('lr')")
        pub.execute("SELECT fence_check('lr', 30)")
        wait_for(30, "token 30 after a reset")
        got = present(20)
        ok(got == STALE, "logical replication: an applied DELETE and INSERT are seen by a backend "
           "that cached 20 (20 refused once the highest is 30)", repr(got))
        trig = sub.execute("SELECT tgname, tgenabled FROM pg_trigger "
                           "WHERE tgrelid = 'fence_tokens'::regclass ORDER BY 1").fetchall()
        ok(trig == [("fence_tokens_changed", "A"), ("fence_tokens_changed_row", "A")],
           "fence_tokens carries the statement and the row change triggers, enabled ALWAYS",
           repr(trig))
    finally:
        sub.execute("ALTER SUBSCRIPTION fence_sub DISABLE")
        sub.execute("ALTER SUBSCRIPTION fence_sub SET (slot_name = NONE)")
        sub.execute("DROP SUBSCRIPTION fence_sub")
        pub.execute("SELECT pg_drop_replication_slot('fence_sub') FROM pg_replication_slots "
                    "WHERE slot_name = 'fence_sub' AND NOT active")
        pub.close()
        sub.close()


# ---------------------------------------------------------------------------

def scenario(name, fn):
    before = failed
    try:
        fn()
    except Exception:
        ok(False, "%s ran to the end" % name, traceback.format_exc())
    if failed > before and SERVER:
        print("# server log (tail):")
        for line in SERVER.tail().splitlines():
            print("#   " + line)


def main():
    global WORK, SERVER
    started = time.monotonic()
    atexit.register(cleanup)
    for k in list(os.environ):
        if k.startswith("PG") and not k.startswith("PG_"):
            del os.environ[k]
    WORK = tempfile.mkdtemp(prefix="fence-schema.", dir="/tmp")
    os.chmod(WORK, 0o755)
    try:
        SERVER = Server()
        SERVER.start(install_dir())
    except Exception:
        ok(False, "start a cluster with wal_level=logical", traceback.format_exc())
        return 1
    scenario("partitions", partitions)
    scenario("inheritance", inheritance)
    scenario("foreign keys, RLS, rules, views, COPY", writes_from_elsewhere)
    scenario("switches", switches)
    scenario("unrelated DDL", unrelated_ddl)
    scenario("pg_dump/pg_restore", dump_restore)
    scenario("logical replication", logical_replication)
    print("# pg_attacks_schema: %d passed, %d failed in %.1f s"
          % (passed, failed, time.monotonic() - started))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
