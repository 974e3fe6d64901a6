"""Gradient compression with horovod.tensorflow.Compression's interface: compress(tensor) ->
(tensor, ctx) before the allreduce, decompress(tensor, ctx) after it."""

import tensorflow as tf


from .._compression import Compressor, NoneCompressor  # noqa: F401 (part of the API)


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes of float32); others unchanged.
    The reduction runs in float16, as Horovod's."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tf.cast(tensor, ctx) if ctx is not None else tensor


class Compression:
    """The compressors: Compression.none, Compression.fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor
