"""The compressor interface both frameworks' Compression classes share (Horovod's): compress
(tensor) -> (tensor, ctx) before the allreduce, decompress(tensor, ctx) after it. Framework-free:
chorus.torch.compression and chorus.tensorflow.compression add their own casts."""


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
