"""Builds the chorus package with the native parts of the C build bundled, so the installed
package is self-contained:

  * libchorus.so, copied into the package (chorus/libchorus.so), loaded through ctypes;
  * the launcher chorus-run, installed as a script (pip puts it in the environment's bin/);
  * the torch.distributed backend (chorus/_chorus_torchdist.so, python/csrc/torchdist.cpp):
    the one `make` built, or built here with the torch this Python imports when its C++
    headers are there (else skipped, saying why). It ties the wheel to this CPython and torch.

They come from $CHORUS_LIB and $CHORUS_RUN, else from the build tree next to this directory
(../$BUILD or ../build). Without them the package still installs, as pure Python, and looks for
the library at run time (see chorus/_lib.py). With them the wheel is tagged for this platform
(py3-none-linux_x86_64, say): the native code is not tied to a Python ABI, since ctypes loads
it, but it is tied to the machine; with the torch.distributed backend inside, also to this
CPython (cp311-cp311-linux_x86_64, say). Both link the system's libsodium (Debian: libsodium23).

    make && pip install --no-build-isolation --no-index ./python
    make wheel          # build/dist/chorus-<version>-<tags>-<platform>.whl
"""

import os
import shutil


from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from distutils.command.build_scripts import build_scripts  # setuptools provides distutils

try:  # setuptools 70.1 and later carry bdist_wheel; before, the wheel package does
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:  # no wheel support: pip install from the tree still works
        bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))


def find_built(env, subdir, name):
    """The file $env names, else <repo>/<build>/<subdir>/<name> of a build tree, else None."""
    path = os.environ.get(env)
    if path:
        return path
    for b in (os.environ.get("BUILD", "build"), "build"):
        p = os.path.join(HERE, "..", b, subdir, name)
        if os.path.exists(p):
            return p
    return None


LIB = find_built("CHORUS_LIB", "lib", "libchorus.so")
LAUNCHER = find_built("CHORUS_RUN", "bin", "chorus-run")
TORCHDIST = find_built("CHORUS_TORCHDIST", "lib", "_chorus_torchdist.so")
TORCHDIST_NAME = "_chorus_torchdist.so"


def build_torchdist(dst):
    """Compiles python/csrc/torchdist.cpp into dst against LIB; False (and why) when torch's
    headers or the library are missing or the compiler fails."""
    import subprocess
    import sys
    if not LIB:
        print("chorus: torch.distributed backend skipped: no libchorus.so to link")
        return False
    flags = subprocess.run([sys.executable, os.path.join(HERE, "csrc", "torch_flags.py")],
                           capture_output=True, text=True)
    if flags.returncode != 0:
        print("chorus: torch.distributed backend skipped: %s" % flags.stderr.strip().split("\n")[-1])
        return False
    libdir = os.path.dirname(os.path.realpath(LIB))
    cmd = ("g++ -std=c++17 -O2 -fPIC -shared -I%s -o %s %s %s -L%s -lchorus -Wl,-rpath,'$ORIGIN'"
           % (os.path.join(HERE, "..", "include"), dst, os.path.join(HERE, "csrc", "torchdist.cpp"),
              flags.stdout.strip(), libdir))
    print("chorus: building the torch.distributed backend: " + cmd)
    return subprocess.run(cmd, shell=True).returncode == 0
# setuptools takes scripts by a path relative to this directory: the launcher is staged here.
LAUNCHER_STAGED = os.path.join("build", "launcher", "chorus-run")


class BuildPyWithLib(build_py):
    def run(self):
        super().run()
        if LIB:
            dst = os.path.join(self.build_lib, "chorus", "libchorus.so")
            shutil.copyfile(LIB, dst)
            print("chorus: bundled %s" % os.path.realpath(LIB))
        else:
            print("chorus: no libchorus.so found (run make first, or set CHORUS_LIB); the "
                  "package will look for it at run time")
        dst = os.path.join(self.build_lib, "chorus", TORCHDIST_NAME)
        if TORCHDIST:
            shutil.copyfile(TORCHDIST, dst)
            print("chorus: bundled %s" % os.path.realpath(TORCHDIST))
        else:
            build_torchdist(dst)


class BuildLauncher(build_scripts):
    """The one script is the compiled chorus-run: copied as it is (build_scripts would read it
    as text to rewrite a #! line), executable."""

    def run(self):
        self.mkpath(self.build_dir)
        for script in self.scripts or []:
            out = os.path.join(self.build_dir, os.path.basename(script))
            shutil.copyfile(os.path.join(HERE, script), out)
            os.chmod(out, 0o755)


cmdclass = {"build_py": BuildPyWithLib, "build_scripts": BuildLauncher}
scripts = []
if LAUNCHER:
    os.makedirs(os.path.dirname(os.path.join(HERE, LAUNCHER_STAGED)), exist_ok=True)
    shutil.copyfile(LAUNCHER, os.path.join(HERE, LAUNCHER_STAGED))
    scripts = [LAUNCHER_STAGED]
    print("chorus: bundled %s as the chorus-run script" % os.path.realpath(LAUNCHER))
else:
    print("chorus: no chorus-run found (run make first, or set CHORUS_RUN); pip installs no "
          "launcher")

class NativeDistribution(Distribution):
    """A distribution that carries machine code: installed into platlib, wheel not pure."""

    def has_ext_modules(self):
        return True


distclass = Distribution
if LIB or LAUNCHER:
    distclass = NativeDistribution
    if bdist_wheel:

        class PlatformWheel(bdist_wheel):
            """Tags the wheel py3-none-<platform>: machine code, but no CPython extension."""

            def get_tag(self):
                tag = super().get_tag()
                if os.path.exists(os.path.join(self.bdist_dir or "", "chorus", TORCHDIST_NAME)):
                    return tag  # a CPython extension: this interpreter's tag
                return ("py3", "none") + tuple(tag[2:])

        cmdclass["bdist_wheel"] = PlatformWheel

setup(distclass=distclass, cmdclass=cmdclass, scripts=scripts)
