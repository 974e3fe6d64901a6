"""Gradient compression for allreduce, with the horovod.torch.Compression interface.

A compressor has compress(tensor) -> (tensor, ctx) and decompress(tensor, ctx) -> tensor.
Compression.fp16 sends float tensors as float16; when the training runtime (engine) is
running and the tensor is float32 or float64, DistributedOptimizer hands the conversion to the
engine's built-in fp16 compressor instead, which does it without Python copies.
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

    engine_name = "fp16"

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
