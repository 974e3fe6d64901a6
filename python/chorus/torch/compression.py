"""Gradient compression for allreduce, with the horovod.torch.Compression interface.

A compressor has compress(tensor) -> (tensor, ctx) and decompress(tensor, ctx) -> tensor.
A compressor that names one of libchorus's compressors in ``engine_compressor`` is not called
from Python: allreduce, grouped_allreduce and DistributedOptimizer hand that compressor to the
engine, which converts on its own thread. Compression.fp16 is such a one
(chorus_compressor_fp16: float32/float64 travel and are reduced as float16); its
compress/decompress remain for code that calls them directly.

Compression.topk(ratio), Compression.randomk(ratio) and Compression.powersgd(rank) make such
engine compressors with error feedback (chorus_compressor_create): what a step does not send
of a gradient is kept per tensor name and added to that tensor's next gradient, so nothing is
lost over steps, and every rank decompresses the same bits. Each call makes a new compressor
with its own memory: make one per model and keep using it. float32 tensors of at least 1024
elements are compressed; smaller ones, other dtypes and ops other than sum and average travel
dense. PowerSGD views a parameter of shape (out, ...) as an out-row matrix.
"""

import torch


from .._compression import Compressor, NoneCompressor  # noqa: F401 (part of the API)


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes); others unchanged."""

    engine_compressor = "fp16"  # chorus_compressor_fp16()

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx is not None else tensor


class ErrorFeedbackCompressor(Compressor):
    """A libchorus compressor with error feedback, run by the engine on its own thread (see
    the module's text); spec is "topk:R", "randomk:R" or "powersgd:N"."""

    def __init__(self, spec):
        from .. import _engine  # the library, loaded on first use
        self.engine_compressor = spec
        self.engine_ptr = _engine.new_compressor(spec)

    def residual(self, name, count):
        """What this compressor has not sent yet of the tensor enqueued as name (count float32
        values; zeros for a name not seen): a list."""
        from .. import _engine
        return _engine.compressor_residual(self.engine_ptr, name, count)

    def compress(self, tensor):
        raise NotImplementedError("%s runs in the engine: pass it as compression= to allreduce, "
                                  "grouped_allreduce or DistributedOptimizer"
                                  % self.engine_compressor)

    decompress = compress

    def __repr__(self):
        return "Compression(%s)" % self.engine_compressor


class Compression:
    """Optional gradient compression algorithms used during allreduce."""

    none = NoneCompressor
    fp16 = FP16Compressor

    @staticmethod
    def topk(ratio):
        """The ceil(ratio * n) largest-magnitude elements, as (index, value) pairs."""
        return ErrorFeedbackCompressor("topk:%r" % float(ratio))

    @staticmethod
    def randomk(ratio):
        """ceil(ratio * n) elements drawn alike on every rank; only their values travel."""
        return ErrorFeedbackCompressor("randomk:%r" % float(ratio))

    @staticmethod
    def powersgd(rank):
        """Rank-`rank` PowerSGD: two small allreduces of the factors P and Q per tensor."""
        return ErrorFeedbackCompressor("powersgd:%d" % int(rank))
