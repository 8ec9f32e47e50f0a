"""packages/python/setup.py: the wheel sqlite-fence, the module `fence` and
the SQLite extension fence.so beside it. The extension is built from this
repository's sources (sqlite_ext/, core/) with its Makefile when the wheel is
built, so that installing the wheel needs no compiler; the wheel is tagged
py3-none-<platform>: any Python 3, this platform only (fence.so is C for
SQLite, not a Python extension module). The version is META.json's.

    /usr/bin/python3 -m build --wheel --no-isolation packages/python
"""
import json
import os
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class BuildPy(build_py):
    """The module, then fence.so made by the repository's Makefile."""

    def run(self):
        super().run()
        subprocess.check_call(["make", "-s", "-C", ROOT, "sqlite_ext/fence.so"])
        dest = os.path.join(self.build_lib, "fence", "fence.so")
        # without its debug sections: a third of the size, the same code
        subprocess.check_call(["objcopy", "--strip-debug", os.path.join(ROOT, "sqlite_ext", "fence.so"), dest])
        self.copy_file(os.path.join(ROOT, "LICENSE"), os.path.join(self.build_lib, "fence", "LICENSE"))


class BinaryDistribution(Distribution):
    """It carries a .so: platform-specific, installed in platlib."""

    def has_ext_modules(self):
        return True


class BdistWheel(bdist_wheel):
    """Any Python 3: fence.so is C for SQLite, not a Python extension module."""

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


with open(os.path.join(ROOT, "META.json")) as f:
    VERSION = json.load(f)["version"]

setup(version=VERSION, distclass=BinaryDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
