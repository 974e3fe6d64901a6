"""torch_flags.py - the compiler and linker flags of the torch.distributed backend
(python/csrc/torchdist.cpp) for the torch this Python imports, on one line, as torch's own
extension builder (torch.utils.cpp_extension) would give them: its include directories, its
C++ standard ABI (_GLIBCXX_USE_CXX11_ABI), the pybind11 ABI it was built with, the C++
standard its headers require, and its libraries. Exit status 1 and the reason on stderr when
torch or its C++ headers are missing. Used by mk/torchdist.mk and python/setup.py.

    python3 torch_flags.py              every flag, for the torch this Python imports
    python3 torch_flags.py --std DIR    only -std=c++NN, for the headers under DIR (a torch
                                        include directory, torch itself not imported)

The standard: ATen/ATen.h stops the compiler below the one it needs (`#if __cplusplus <
201402L` in torch 1.13, 201703L in 2.x, 202002L from the release that moved to C++20); the
backend itself needs C++17. So the flag is the newer of the two, read from the headers the
build compiles against rather than guessed from a version number."""
import os
import re
import sys
import sysconfig

OWN_STD = 17  # python/csrc/torchdist.cpp uses C++17
STANDARDS = {"201402": 14, "201703": 17, "202002": 20, "202302": 23}


def cxx_std(include_dir):
    """-std=c++NN for torch's headers under include_dir."""
    need = OWN_STD
    try:
        with open(os.path.join(include_dir, "ATen", "ATen.h")) as f:
            text = f.read()
    except OSError:
        return "-std=c++%d" % need
    for value in re.findall(r"__cplusplus\s*<\s*(\d{6})L", text):
        need = max(need, STANDARDS.get(value, need))
    return "-std=c++%d" % need


def flags():
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError as e:
        raise SystemExit("torch is not importable by %s (%s)" % (sys.executable, e))
    incs = cpp_extension.include_paths()
    if not os.path.exists(os.path.join(incs[0], "torch", "csrc", "distributed", "c10d",
                                       "ProcessGroup.hpp")):
        raise SystemExit("torch %s has no C++ headers under %s (Debian: libtorch-dev)"
                         % (torch.__version__, incs[0]))
    out = [cxx_std(incs[0])]
    out += ["-isystem" + i for i in incs + [sysconfig.get_paths()["include"]]]
    out.append("-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):  # torch's pybind11 ABI, as its own
        val = getattr(torch._C, "_PYBIND11_" + name, None)  # extensions are built
        if val:
            out.append('-DPYBIND11_%s=\\"%s\\"' % (name, val))
    # Not read by the source: it makes the flags, hence the build, change with the version.
    out.append('-DCHORUS_TORCH_VERSION=\\"%s\\"' % torch.__version__)
    for d in cpp_extension.library_paths():
        out += ["-L" + d, "-Wl,-rpath," + d]
    out += ["-ltorch", "-ltorch_cpu", "-ltorch_python", "-lc10"]
    return " ".join(out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--std":
        print(cxx_std(sys.argv[2]))
    elif len(sys.argv) == 1:
        print(flags())
    else:
        raise SystemExit("usage: torch_flags.py [--std TORCH_INCLUDE_DIR]")
