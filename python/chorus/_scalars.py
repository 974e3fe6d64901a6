"""TensorBoard scalars through the runtime (chorus/tensorboard.h).

With CHORUS_TENSORBOARD=DIR set for the job, log_scalar(tag, value, step) appends the scalar to
this rank's event file, DIR/rank<k>/events.out.tfevents.*, the same files chorus-train and C
programs write (``tensorboard --logdir DIR`` shows one run per rank); without it, it does
nothing.
"""

import ctypes

from . import _core
from ._lib import _proto, lib

_proto("chorus_log_scalar", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64,
       ctypes.c_double)


def log_scalar(tag, value, step):
    """Logs scalar ``value`` (a number, or a one-element tensor or array) of ``tag`` at
    ``step`` for this rank; raises ChorusError when the event file cannot be written."""
    if hasattr(value, "item"):
        value = value.item()
    w = _core.world()
    w.check(lib.chorus_log_scalar(w.ptr, str(tag).encode(), int(step), float(value)),
            "log_scalar(%r)" % tag)
