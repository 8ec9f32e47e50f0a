#!/usr/bin/python3
"""tests/pg_stacks_django.py: fence through the Django ORM (Debian's
python3-django 3.2, over psycopg2), with a minimal settings module made
here (issue 26, item 3).

Naive: a protected table with a token column. `Model.save()` writes every
column back with the value it loaded, the token included: a zombie code
path that changes only `status`, on a row the new holder wrote at 20,
presents 20 and is accepted. DEMONSTRATION (the stack is unsafe with this
pattern; documented): asserted as what happens, so the line fails if it
ever stops happening. FENCE_STACKS_STRICT=1 asserts instead that the
zombie is refused (the reproduction: it fails).

Recommended (docs/stacks-postgresql.md): protect the table without a token
column (one fence per row: fence_protect(job, NULL, 'job:', 'id')) and run
every write in `transaction.atomic()` that begins with fence_check on a
cursor of the same connection. Asserted: the holder's saves commit, the
zombie's transaction is refused 23T01 and leaves nothing, a code path that
forgets the check (save() in autocommit, or atomic() without the check) is
refused 23T02, and a queryset update() and delete() are fenced the same way.

Output: "ok - stacks django ..." lines.
"""
import os
import sys
from contextlib import contextmanager

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stacks"))
from stacks import Database, Report, sqlstate  # noqa: E402

import django  # noqa: E402
from django.conf import settings  # noqa: E402

REPORT = Report("stacks django")
ok = REPORT.ok
DB = "fence_stacks_django"
STRICT = os.environ.get("FENCE_STACKS_STRICT") == "1"

settings.configure(
    DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DB,
        "HOST": os.environ["PGHOST"],
        "PORT": os.environ["PGPORT"],
        "USER": os.environ.get("PGUSER", "postgres"),
    }},
    INSTALLED_APPS=[],
    USE_TZ=True,
)
django.setup()
from django.db import connection, models, transaction  # noqa: E402


class Job(models.Model):        # protected with its token column (naive)
    id = models.IntegerField(primary_key=True)
    status = models.TextField()
    tok = models.BigIntegerField()

    class Meta:
        app_label = "stacks"
        db_table = "job"
        managed = False


class Task(models.Model):       # protected without a token column (the recipe)
    id = models.IntegerField(primary_key=True)
    status = models.TextField()

    class Meta:
        app_label = "stacks"
        db_table = "task"
        managed = False


@contextmanager
def fenced(resource, token):
    """The recipe: a transaction that begins with fence_check."""
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT fence_check(%s, %s)", [resource, token])
        yield


def main():
    db = Database(DB)
    try:
        run(db)
    finally:
        connection.close()
        db.close()
    return REPORT.finish("pg_stacks_django")


def run(db):
    print("# Django %s" % django.get_version())
    db.sql("CREATE TABLE job (id int PRIMARY KEY, status text, tok bigint)")
    db.sql("SELECT fence_protect('job', 'tok', 'job:', 'id')")
    db.sql("CREATE TABLE task (id int PRIMARY KEY, status text)")
    db.sql("SELECT fence_protect('task', NULL, 'task:', 'id')")

    # --- naive: the token column, Model.save() (item 3)
    Job(id=1, status="new", tok=10).save()        # the zombie, while it held the lock
    j = Job.objects.get(id=1)                     # the new holder, at 20
    j.tok, j.status = 20, "holder"
    j.save()

    def zombie_changes_status():
        z = Job.objects.get(id=1)                 # loaded after the holder wrote it
        z.status = "zombie"                       # this code path sets no token
        z.save()
    state = sqlstate(zombie_changes_status)
    rows = db.sql("SELECT status, tok FROM job WHERE id = 1")
    if STRICT:
        ok(state in ("23T01", "23T02") and rows == [("holder", 20)],
           "STRICT: Django save() of a zombie changing only status is refused",
           "state %r, row %r" % (state, rows))
    else:
        ok(state is None and rows == [("zombie", 20)],
           "DEMONSTRATION (unsafe, documented; fails if it stops happening): with a token "
           "column, a zombie's save() changing only status writes back the loaded token 20 "
           "and is accepted", "state %r, row %r" % (state, rows))
    # the zombie's save() with its own token is refused: a token it sets is presented
    z = Job.objects.get(id=1)
    z.status, z.tok = "zombie-own-token", 10
    state = sqlstate(z.save)
    rows = db.sql("SELECT status FROM job WHERE id = 1")
    ok(state == "23T01" and rows[0][0] != "zombie-own-token",
       "with a token column, a zombie's save() that sets tok = 10 is refused 23T01",
       "state %r, row %r" % (state, rows))

    # --- recommended: no token column, fence_check first in transaction.atomic()
    def save(tok, status, pk=1):
        with fenced("task:%d" % pk, tok):
            t = Task.objects.filter(id=pk).first() or Task(id=pk)
            t.status = status
            t.save()
    states = [sqlstate(lambda t=t, w=w: save(t, w))
              for t, w in ((10, "zombie"), (20, "holder"), (10, "zombie-again"),
                           (20, "holder-again"))]
    rows = db.sql("SELECT status FROM task WHERE id = 1")
    ok(states == [None, None, "23T01", None] and rows == [("holder-again",)]
       and db.highest("task:1") == 20,
       "recipe: save() in atomic() after fence_check: the zombie at 10 after the holder's 20 "
       "is refused 23T01 and leaves nothing; the holder's saves commit",
       "states %r, row %r" % (states, rows))

    def zombie_forgets():
        t = Task.objects.get(id=1)
        t.status = "zombie-no-check"
        t.save()                                   # autocommit: its own transaction

    def zombie_atomic_no_check():
        with transaction.atomic():
            t = Task.objects.get(id=1)
            t.status = "zombie-no-check"
            t.save()
    states = [sqlstate(zombie_forgets), sqlstate(zombie_atomic_no_check)]
    rows = db.sql("SELECT status FROM task WHERE id = 1")
    ok(states == ["23T02", "23T02"] and rows == [("holder-again",)],
       "recipe: a code path that forgets the check (save() in autocommit, atomic() without "
       "it) is refused 23T02 and leaves nothing", "states %r, row %r" % (states, rows))

    def qs_update(tok):
        with fenced("task:1", tok):
            Task.objects.filter(id=1).update(status="bulk-%d" % tok)

    def qs_delete(tok):
        with fenced("task:1", tok):
            Task.objects.filter(id=1).delete()
    states = [sqlstate(lambda: qs_update(10)), sqlstate(lambda: qs_update(20)),
              sqlstate(lambda: qs_delete(10))]
    rows = db.sql("SELECT status FROM task WHERE id = 1")
    ok(states == ["23T01", None, "23T01"] and rows == [("bulk-20",)],
       "recipe: queryset update() and delete() in the fenced atomic(): the zombie's refused, "
       "the holder's committed", "states %r, row %r" % (states, rows))
    state = sqlstate(lambda: qs_delete(20))
    rows = db.sql("SELECT status FROM task WHERE id = 1")
    ok(state is None and rows == [], "recipe: the holder's delete() commits", repr(rows))


if __name__ == "__main__":
    sys.exit(main())
