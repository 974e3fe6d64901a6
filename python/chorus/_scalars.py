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
    r = lib.chorus_log_scalar(w.ptr, str(tag).encode(), int(step), float(value))
    if r != 0:
        w.check(r, "log_scalar(%r)" % tag)


class StepScalars:
    """Per-step scalars of a DistributedOptimizer, logged with log_scalar (so only under
    CHORUS_TENSORBOARD): comm/time_s (seconds synchronize() waited), comm/bytes_sent (bytes
    the engine gave to its allreduces since the last step, after compression) and
    comm/compression_ratio (the gradients' own bytes over those), at steps 1, 2, ..."""

    def __init__(self, engine_stats):
        self._stats = engine_stats
        self._step = 0
        self._bytes = None

    def step(self, wait_s, dense_bytes):
        sent = self._stats()["bytes_reduced"]
        # the whole count when the engine is new (first step, or restarted by an elastic job)
        delta = sent - self._bytes if self._bytes is not None and sent >= self._bytes else sent
        self._bytes = sent
        self._step += 1
        log_scalar("comm/time_s", wait_s, self._step)
        log_scalar("comm/bytes_sent", delta, self._step)
        log_scalar("comm/compression_ratio", dense_bytes / delta if delta else 1.0, self._step)
