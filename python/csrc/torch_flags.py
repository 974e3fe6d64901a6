"""torch_flags.py - the compiler and linker flags of the torch.distributed backend
(python/csrc/torchdist.cpp) for the torch this Python imports, on one line; exit status 1 and
the reason on stderr when torch or its C++ headers are missing. Used by mk/torchdist.mk and
python/setup.py."""
import os
import sys
import sysconfig


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
    out = ["-isystem" + i for i in incs + [sysconfig.get_paths()["include"]]]
    out.append("-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):  # torch's pybind11 ABI, as its own
        val = getattr(torch._C, "_PYBIND11_" + name, None)  # extensions are built
        if val:
            out.append('-DPYBIND11_%s=\\"%s\\"' % (name, val))
    for d in cpp_extension.library_paths():
        out += ["-L" + d, "-Wl,-rpath," + d]
    out += ["-ltorch", "-ltorch_cpu", "-ltorch_python", "-lc10"]
    return " ".join(out)


if __name__ == "__main__":
    print(flags())
