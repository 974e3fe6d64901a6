"""Gradient compression for allreduce, with the horovod.torch.Compression interface.

A compressor has compress(tensor) -> (tensor, ctx) and decompress(tensor, ctx) -> tensor.
A compressor that names one of libchorus's compressors in ``engine_compressor`` is not called
from Python: allreduce, grouped_allreduce and DistributedOptimizer hand that compressor to the
engine, which converts on its own thread. Compression.fp16 is such a one
(chorus_compressor_fp16: float32/float64 travel and are reduced as float16); its
compress/decompress remain for code that calls them directly.
"""

import torch


class Compressor:
    """Interface for compressing and decompressing a tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


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


class Compression:
    """Optional gradient compression algorithms used during allreduce."""

    none = NoneCompressor
    fp16 = FP16Compressor
