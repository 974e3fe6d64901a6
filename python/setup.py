"""Builds the chorus package; copies libchorus.so into it so the installed package is
self-contained. The library comes from $CHORUS_LIB, else from the build tree next to this
directory (../$BUILD/lib or ../build/lib). Without one the package still installs and looks
for the library at run time (see chorus/_lib.py).

    make && pip install --no-build-isolation --no-index ./python
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def find_lib():
    env = os.environ.get("CHORUS_LIB")
    if env:
        return env
    for b in (os.environ.get("BUILD", "build"), "build"):
        p = os.path.join(HERE, "..", b, "lib", "libchorus.so")
        if os.path.exists(p):
            return p
    return None


class BuildPyWithLib(build_py):
    def run(self):
        super().run()
        lib = find_lib()
        if lib:
            dst = os.path.join(self.build_lib, "chorus", "libchorus.so")
            shutil.copyfile(lib, dst)
            print("chorus: bundled %s" % os.path.realpath(lib))
        else:
            print("chorus: no libchorus.so found (run make first, or set CHORUS_LIB); the "
                  "package will look for it at run time")


setup(cmdclass={"build_py": BuildPyWithLib})
