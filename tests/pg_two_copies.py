#!/usr/bin/python3
"""tests/pg_two_copies.py: a server that preloads one copy of fence.so and
creates the extension from another (shared_preload_libraries naming a path,
CREATE EXTENSION finding $libdir/fence through extension_destdir, as when a
package and a build are both installed) must refuse with a clear error, not
crash: the second copy's _PG_init called the first copy's init functions
(the first loaded definition of each name wins), and a hook installed twice
called itself until the stack overflowed.

Usage: /usr/bin/python3 tests/pg_two_copies.py
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_faults as faults  # noqa: E402  (its Cluster and build)
from tap import Report  # noqa: E402

R = Report("pg two copies")


def main():
    for k in list(os.environ):
        if k.startswith("PG") and not k.startswith("PG_"):
            del os.environ[k]
    atexit.register(faults.cleanup)
    faults.WORK = tempfile.mkdtemp(prefix="fence-twocopies.", dir="/tmp")
    os.chmod(faults.WORK, 0o755)
    faults.INSTALL = os.path.join(faults.WORK, "install")
    try:
        faults.build()
        libdir = subprocess.check_output(["pg_config", "--pkglibdir"], universal_newlines=True).strip()
        copy = os.path.join(faults.WORK, "preloaded")
        os.makedirs(copy)
        shutil.copy(faults.INSTALL + libdir + "/fence.so", os.path.join(copy, "fence.so"))
        faults.chown_postgres(faults.WORK)
        cl = faults.Cluster("two_copies", "-c shared_preload_libraries=%s/fence.so" % copy)
        cl.initdb()
        cl.start()
        try:
            c = cl.connect()
            try:
                c.execute("CREATE EXTENSION fence")
                err = None
            except psycopg.Error as e:
                err = (e.sqlstate, str(e))
            R.ok(err is not None and err[0] == "55000" and "another copy" in err[1],
                 "CREATE EXTENSION with another copy preloaded is refused (55000), "
                 "with a message that says how to fix the setting", "%r" % (err,))
            alive = c.execute("SELECT 1").fetchone()[0] == 1
            again = None
            try:
                c.execute("CREATE EXTENSION fence")
            except psycopg.Error as e:
                again = e.sqlstate
            R.ok(alive and again == "55000", "the backend lives on and refuses again, "
                 "never half-loaded", "%r %r" % (alive, again))
            c.close()
        except Exception:
            R.ok(False, "the server survives CREATE EXTENSION with another copy preloaded",
                 traceback.format_exc() + faults.tail(cl.log, 15))
        finally:
            cl.stop_quietly()
    except Exception:
        R.ok(False, "setup", traceback.format_exc())
    finally:
        faults.cleanup()
    return R.finish("pg_two_copies")


if __name__ == "__main__":
    sys.exit(main())
