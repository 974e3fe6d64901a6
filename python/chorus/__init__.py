"""Chorus: distributed deep-learning collectives in C, with a Horovod-compatible front end.

``import chorus`` gives the NumPy API (also ``chorus.numpy``): init, rank, size, allreduce,
broadcast, allgather, alltoall, reducescatter, ... on numpy arrays. ``import chorus.torch as
hvd`` gives the horovod.torch API. The C library is found as described in chorus._lib.
"""

from ._lib import (ChorusError, HorovodInternalError, ChorusMismatchError, ChorusPeerLostError,
                   ChorusTimeoutError, ChorusInvalidArgument, ChorusEnvError,
                   HostsUpdatedInterrupt, lib_path)
from ._np import *  # noqa: F401,F403
from ._np import __all__ as _np_all
from ._scalars import log_scalar

__version__ = "0.1.0"
__all__ = list(_np_all) + [
    "ChorusError", "HorovodInternalError", "ChorusMismatchError", "ChorusPeerLostError",
    "ChorusTimeoutError", "ChorusInvalidArgument", "ChorusEnvError", "HostsUpdatedInterrupt",
    "lib_path", "__version__", "log_scalar",
]
