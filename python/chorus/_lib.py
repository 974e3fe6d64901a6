"""Loading libchorus with ctypes, its prototypes, and the mapping of C results to exceptions.

The library is looked for, in order, at:
  1. $CHORUS_LIB (a path to libchorus.so),
  2. next to this package (chorus/libchorus.so, put there by ``pip install ./python``),
  3. the build tree this package sits in (<repo>/build/lib/libchorus.so when run in place
     with PYTHONPATH=python),
  4. the install prefix (<sys.prefix>/lib, /usr/local/lib, /usr/lib) and the dynamic
     loader's search path (ctypes.util.find_library).
The first one that loads wins; if none does, ImportError lists every place tried.
"""

import ctypes
import ctypes.util
import os
import sys

__all__ = [
    "lib", "lib_path", "check", "raise_for", "ChorusError", "HorovodInternalError",
    "ChorusInvalidArgument", "ChorusMismatchError", "ChorusPeerLostError", "ChorusTimeoutError",
    "ChorusEnvError", "HostsUpdatedInterrupt", "DTYPE", "OP", "RESULT_NAMES",
]

# ---- exceptions ------------------------------------------------------------------------


class ChorusError(RuntimeError):
    """A call into libchorus failed. ``code`` is the chorus_result number, ``code_name`` its
    name (``CHORUS_ERR_PEER_LOST``...), and the message carries chorus_last_error's detail."""

    def __init__(self, message, code=None, code_name=None):
        super().__init__(message)
        self.code = code
        self.code_name = code_name


class HorovodInternalError(ChorusError):
    """A collective failed and the job cannot go on as it is: a peer died or timed out, the
    communicator was aborted, or the ranks disagreed on a collective. Raised where
    horovod.torch raises its HorovodInternalError, so elastic code that catches it works."""


class ChorusMismatchError(HorovodInternalError):
    """The ranks called a collective with different names, shapes, dtypes or operations."""


class ChorusPeerLostError(HorovodInternalError):
    """A peer process died or closed its connection."""


class ChorusTimeoutError(HorovodInternalError):
    """A peer did not answer within CHORUS_TIMEOUT_S seconds."""


class ChorusInvalidArgument(ChorusError, ValueError):
    """An argument was rejected before anything was sent."""


class ChorusEnvError(ChorusError):
    """The job environment (CHORUS_RANK, RANK/WORLD_SIZE, MASTER_ADDR...) is missing or
    inconsistent."""


class HostsUpdatedInterrupt(RuntimeError):
    """Raised in elastic training when the set of hosts changed (as in Horovod)."""

    def __init__(self, skip_sync=False):
        super().__init__("the set of hosts changed")
        self.skip_sync = skip_sync


# Exception class of each chorus_result name (the numbers come from the library, below);
# a name not listed raises ChorusError.
_RESULT_CLASS = {
    "CHORUS_ERR_INVALID_ARG": ChorusInvalidArgument,
    "CHORUS_ERR_SYSTEM": HorovodInternalError,
    "CHORUS_ERR_TIMEOUT": ChorusTimeoutError,
    "CHORUS_ERR_PEER_LOST": ChorusPeerLostError,
    "CHORUS_ERR_MISMATCH": ChorusMismatchError,
    "CHORUS_ERR_AUTH": ChorusError,
    "CHORUS_ERR_NOMEM": ChorusError,
    "CHORUS_ERR_INTERNAL": HorovodInternalError,
    "CHORUS_ERR_PROTOCOL": HorovodInternalError,
    "CHORUS_ERR_ABORTED": HorovodInternalError,
    "CHORUS_ERR_ENV": ChorusEnvError,
    "CHORUS_ERR_MEMBERSHIP": HorovodInternalError,
}

# ---- finding and loading the library ----------------------------------------------------

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("CHORUS_LIB")
    if env:
        # An explicit choice is the only one tried: silently loading another library would
        # hide a mistake.
        return [env]
    out = [os.path.join(_HERE, "libchorus.so"), os.path.join(_HERE, "lib", "libchorus.so")]
    repo = os.path.dirname(os.path.dirname(_HERE))  # <repo>/python/chorus -> <repo>
    build = os.environ.get("BUILD", "build")
    for b in dict.fromkeys([build, "build"]):
        out.append(os.path.join(repo, b, "lib", "libchorus.so"))
    for prefix in dict.fromkeys([sys.prefix, sys.base_prefix, "/usr/local", "/usr"]):
        out.append(os.path.join(prefix, "lib", "libchorus.so"))
    found = ctypes.util.find_library("chorus")
    if found:
        out.append(found)
    return out


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append("%s (not there)" % path)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "chorus: cannot load libchorus.so; build it with `make` in the Chorus tree or set "
        "CHORUS_LIB=/path/to/libchorus.so. Tried:\n  " + "\n  ".join(tried))


lib, lib_path = _load()

_c = ctypes
_P = _c.c_void_p
_comm_pp = _c.POINTER(_c.c_void_p)


def _proto(name, res, *args):
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


_proto("chorus_init", _c.c_int, _comm_pp)
_proto("chorus_finalize", _c.c_int, _P)
_proto("chorus_comm_abort", _c.c_int, _P)
for _n in ("chorus_rank", "chorus_size", "chorus_local_rank", "chorus_local_size"):
    _proto(_n, _c.c_int, _P)
_proto("chorus_comm_split", _c.c_int, _P, _c.c_int, _c.c_int, _comm_pp)
_proto("chorus_dtype_size", _c.c_size_t, _c.c_int)
_proto("chorus_strerror", _c.c_char_p, _c.c_int)
_proto("chorus_last_error", _c.c_char_p, _P)
_proto("chorus_config_set", _c.c_int, _c.c_char_p, _c.c_char_p)
_proto("chorus_config_is_set", _c.c_int, _c.c_char_p)
_proto("chorus_config_get", _c.c_char_p, _c.c_char_p)


_proto("chorus_result_name", _c.c_char_p, _c.c_int)
_proto("chorus_dtype_name", _c.c_char_p, _c.c_int)
_proto("chorus_op_name", _c.c_char_p, _c.c_int)


def _names(fn):
    """[fn(0), fn(1), ...] up to the first NULL: an enumeration as libchorus names it."""
    out = []
    while True:
        n = fn(len(out))
        if n is None:
            return out
        out.append(n.decode())


# chorus_result, chorus_dtype and chorus_op, read from the library (include/chorus.h).
RESULT_NAMES = _names(lib.chorus_result_name)
DTYPE = {n: i for i, n in enumerate(_names(lib.chorus_dtype_name))}
OP = {n: i for i, n in enumerate(_names(lib.chorus_op_name))}


def _decode(b):
    return b.decode("utf-8", "replace") if b else ""


def raise_for(code, comm=None, what=None, detail=None):
    """Raises the exception for chorus_result ``code``: the class follows the code, the message
    is ``detail`` or chorus_last_error(comm) (or chorus_strerror when there is no detail),
    prefixed by ``what`` when given."""
    name = RESULT_NAMES[code] if 0 <= code < len(RESULT_NAMES) else "CHORUS_ERR_%d" % code
    detail = detail or _decode(lib.chorus_last_error(comm)) or _decode(lib.chorus_strerror(code))
    msg = "%s: %s" % (what, detail) if what else detail
    if detail and name not in detail:
        msg += " [%s]" % name
    raise _RESULT_CLASS.get(name, ChorusError)(msg, code, name)


def config_is_set(name):
    """True when the library sees ``name`` set: by config_set in this process, or in the
    environment (chorus_config_is_set)."""
    return bool(lib.chorus_config_is_set(name.encode()))


def config_get(name):
    """The value of ``name`` as the library sees it (chorus_config_get), or None when unset."""
    v = lib.chorus_config_get(name.encode())
    return None if v is None else v.decode()


def config_set(name, value):
    """Sets a variable for the library in this process only, checked as the environment's
    value would be (chorus_config_set); None removes the setting. Raises ChorusInvalidArgument
    naming the variable for a bad value or an unknown name."""
    code = lib.chorus_config_set(name.encode(), None if value is None else str(value).encode())
    check(code, None, "chorus: setting %s" % name)


def check(code, comm=None, what=None):
    """Returns when ``code`` is CHORUS_OK, else raises as raise_for()."""
    if code != 0:
        raise_for(code, comm, what)
