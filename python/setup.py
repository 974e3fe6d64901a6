"""Builds the chorus package with the native parts of the C build bundled, so the installed
package is self-contained:

  * libchorus.so, copied into the package (chorus/libchorus.so), loaded through ctypes;
  * the launcher chorus-run, installed as a script (pip puts it in the environment's bin/);
  * the torch.distributed backend (chorus/_chorus_torchdist.so, python/csrc/torchdist.cpp),
    built against the torch of the environment being installed into, with the C++ standard,
    ABI and include directories that torch asks for (csrc/torch_flags.py); the one `make`
    built is reused when it was built for that same torch. It ties the wheel to this CPython
    and torch, and registers "chorus" in the entry point group torch.distributed.backends.
    Without torch the package installs without it, saying so; with torch, a backend that
    cannot be built (no headers, no libchorus.so, a compiler error) fails the install with the
    reason. CHORUS_WITHOUT_TORCH=1 installs without it anyway; CHORUS_WITH_TORCH=1 makes a
    missing torch an error; CHORUS_TORCHDIST=file bundles that build as it is.

They come from $CHORUS_LIB and $CHORUS_RUN, else from the build tree next to this directory
(../$BUILD or ../build). Without them (and without torch, or with CHORUS_WITHOUT_TORCH=1) the
package still installs, as pure Python, and looks for the library at run time (see chorus/_lib.py). With them the wheel is tagged for this platform
(py3-none-linux_x86_64, say): the native code is not tied to a Python ABI, since ctypes loads
it, but it is tied to the machine; with the torch.distributed backend inside, also to this
CPython (cp311-cp311-linux_x86_64, say). Both link the system's libsodium (Debian: libsodium23).

    make && pip install ./python
    make && pip install --no-build-isolation --no-index ./python    # offline
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
TORCHDIST_NAME = "_chorus_torchdist.so"
NO_TORCH = "set CHORUS_WITHOUT_TORCH=1 to install the package without it"


def torch_flags():
    """(flags, None) for the torch of the environment being installed into, or (None, why).
    Under pip's build isolation (plain `pip install ./python`) the build runs in a separate
    environment without torch; the installing interpreter without that environment's
    PYTHONPATH still sees its own site-packages, where torch is. pip runs this file three
    times per install: the flags are kept in build/torch-flags for the same interpreter and
    torch (its path and modification time), since importing torch takes seconds."""
    import subprocess
    import sys
    script = os.path.join(HERE, "csrc", "torch_flags.py")
    envs = [dict(os.environ)]
    if "PYTHONPATH" in os.environ or "PYTHONNOUSERSITE" in os.environ:
        envs.append({k: v for k, v in os.environ.items()
                     if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")})
    cache = os.path.join(HERE, "build", "torch-flags")
    for env in envs:
        where = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                                "s = u.find_spec('torch'); print(s.origin if s else '')"],
                               capture_output=True, text=True, env=env).stdout.strip()
        key = ""
        if where:
            key = "%s %s %d" % (sys.executable, where, os.stat(where).st_mtime_ns)
            try:
                with open(cache) as f:
                    seen, flags = f.read().split("\n", 1)
                if seen == key:
                    return flags.strip(), None
            except (OSError, ValueError):
                pass
        r = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env)
        if r.returncode == 0:
            if key:
                os.makedirs(os.path.dirname(cache), exist_ok=True)
                with open(cache, "w") as f:
                    f.write(key + "\n" + r.stdout.strip() + "\n")
            return r.stdout.strip(), None
        lines = r.stderr.strip().split("\n")
        why = lines[-1] if lines else "exit status %d" % r.returncode
        if "torch is not importable" not in why:
            break
    return None, why


def torchdist_plan():
    """What to do about the torch.distributed backend: ("file", path) to bundle a given build,
    ("build", flags) to compile it, or ("none", why) to install without it. Torch installed
    but no way to build the backend is an error, never a package silently without it:
    CHORUS_WITHOUT_TORCH=1 opts out; CHORUS_WITH_TORCH=1 makes a missing torch an error too
    (as Horovod's HOROVOD_WITH_PYTORCH / HOROVOD_WITHOUT_PYTORCH)."""
    if os.environ.get("CHORUS_WITHOUT_TORCH", "0") not in ("", "0"):
        return "none", "CHORUS_WITHOUT_TORCH is set"
    given = os.environ.get("CHORUS_TORCHDIST")
    if given:
        return "file", given
    flags, why = torch_flags()
    if flags is None:
        if "torch is not importable" in why and \
                os.environ.get("CHORUS_WITH_TORCH", "0") in ("", "0"):
            return "none", why + "; install torch first to have the backend"
        raise SystemExit("chorus: cannot build the torch.distributed backend: %s; %s"
                         % (why, NO_TORCH))
    if not LIB:
        raise SystemExit("chorus: cannot build the torch.distributed backend: it links "
                         "libchorus.so, and none was found (run make first, or set "
                         "CHORUS_LIB); " + NO_TORCH)
    # The one `make` built, when it was built with these very flags (the same torch).
    for b in (os.environ.get("BUILD", "build"), "build"):
        so = os.path.join(HERE, "..", b, "lib", TORCHDIST_NAME)
        try:
            with open(os.path.join(HERE, "..", b, "torchdist.flags")) as f:
                if f.read().strip() == flags and os.path.exists(so):
                    return "file", so
        except OSError:
            pass
    return "build", flags


def build_torchdist(dst, flags):
    """Compiles python/csrc/torchdist.cpp into dst against LIB with $CXX (default g++); a
    compiler failure ends the install with the compiler's error."""
    import subprocess
    libdir = os.path.dirname(os.path.realpath(LIB))
    cmd = ("%s -O2 -fPIC -shared -I%s -o %s %s %s -L%s -lchorus -Wl,-rpath,'$ORIGIN'"
           % (os.environ.get("CXX", "g++"), os.path.join(HERE, "..", "include"), dst,
              os.path.join(HERE, "csrc", "torchdist.cpp"), flags, libdir))
    print("chorus: building the torch.distributed backend: " + cmd, flush=True)
    rc = subprocess.run(cmd, shell=True).returncode
    if rc != 0:
        raise SystemExit("chorus: the torch.distributed backend failed to compile (exit status "
                         "%d, the compiler's error is above); %s" % (rc, NO_TORCH))


TORCHDIST = torchdist_plan()
if TORCHDIST[0] == "none":
    print("chorus: no torch.distributed backend: " + TORCHDIST[1])
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
        if TORCHDIST[0] == "file":
            shutil.copyfile(TORCHDIST[1], dst)
            print("chorus: bundled %s" % os.path.realpath(TORCHDIST[1]))
        elif TORCHDIST[0] == "build":
            build_torchdist(dst, TORCHDIST[1])


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

# torch 2.x finds backends by this entry point group: init_process_group("chorus") then works
# without importing chorus.torch.distributed first.
entry_points = {}
if TORCHDIST[0] != "none":
    entry_points["torch.distributed.backends"] = ["chorus = chorus.torch.distributed:_register"]

setup(distclass=distclass, cmdclass=cmdclass, scripts=scripts, entry_points=entry_points)
