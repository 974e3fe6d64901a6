"""Weight divergence across ranks, for chorus.torch and the torch.distributed backend.

Every rank hashes each of its tensors (64-bit, over the bytes: a NaN with another payload,
or -0.0 against 0.0, counts as a difference), one allgather of those hashes (8 bytes a tensor,
plus a signature of the names and sizes) lets every rank see every rank's, and libchorus
(chorus_divergence_compare, include/chorus.h) names the first tensor whose hashes differ and
the ranks outside the reference group: the largest group of ranks with equal hashes, or, on a
tie (as with two ranks), the group of the lowest rank. Every rank raises the same
DivergenceError.
"""

import ctypes

import torch

from .._lib import lib, ChorusError

__all__ = ["DivergenceError", "check_divergence", "named_tensors", "divergence_row",
           "raise_if_diverged"]

_c = ctypes
_u64p = _c.POINTER(_c.c_uint64)
lib.chorus_divergence_row.restype = None
lib.chorus_divergence_row.argtypes = [_c.c_size_t, _c.POINTER(_c.c_void_p),
                                      _c.POINTER(_c.c_size_t), _c.POINTER(_c.c_char_p),
                                      _c.c_longlong, _u64p]
lib.chorus_divergence_compare.restype = _c.c_int
lib.chorus_divergence_compare.argtypes = [_u64p, _c.c_int, _c.c_size_t, _c.POINTER(_c.c_char_p),
                                          _c.c_longlong, _c.POINTER(_c.c_long),
                                          _c.POINTER(_c.c_int), _c.c_char_p, _c.c_size_t]


class DivergenceError(ChorusError):
    """The ranks hold different values of a tensor that should be equal on all of them.
    ``tensor`` is the name of the first divergent tensor (None when the ranks passed different
    tensor lists), ``ranks`` the (global) ranks outside the reference group, ``step`` the step
    it was found at."""

    def __init__(self, message, tensor, ranks, step):
        super().__init__(message, None, "CHORUS_ERR_MISMATCH")
        self.tensor = tensor
        self.ranks = ranks
        self.step = step


def named_tensors(obj, what):
    """[(name, tensor)] of a module (its parameters, then its buffers), a dict, or an iterable
    of (name, tensor) pairs."""
    if isinstance(obj, torch.nn.Module):
        seen, out = set(), []
        for name, t in list(obj.named_parameters()) + list(obj.named_buffers()):
            if id(t) not in seen:
                seen.add(id(t))
                out.append((name, t))
        return out
    items = obj.items() if isinstance(obj, dict) else obj
    out = []
    for pair in items:
        if (not isinstance(pair, tuple) or len(pair) != 2 or not isinstance(pair[0], str)
                or not isinstance(pair[1], torch.Tensor)):
            raise TypeError("%s: expected a torch.nn.Module, a dict of tensors or (name, "
                            "tensor) pairs, got %r" % (what, type(pair).__name__))
        out.append(pair)
    return out


def divergence_row(named, label):
    """This rank's row, an int64 tensor of shape (1, 2 + len(named)): the signature of the
    names and sizes, label (the rank the message calls this one), each tensor's hash."""
    n = len(named)
    # the bytes as they are: contiguous CPU tensors are read in place
    hosts = [t.detach().cpu().contiguous() for _, t in named]
    bufs = (_c.c_void_p * max(n, 1))(*[h.data_ptr() for h in hosts])
    sizes = (_c.c_size_t * max(n, 1))(*[h.numel() * h.element_size() for h in hosts])
    names = (_c.c_char_p * max(n, 1))(*[k.encode() for k, _ in named])
    row = torch.zeros(1, n + 2, dtype=torch.int64)
    lib.chorus_divergence_row(n, bufs, sizes, names, int(label),
                              _c.cast(row.data_ptr(), _u64p))
    return row


def raise_if_diverged(rows, named, step):
    """rows: every rank's row, (ranks, 2 + len(named)) int64, in rank order. Returns when they
    agree; raises DivergenceError otherwise."""
    rows = rows.contiguous()
    nranks, n = rows.shape[0], len(named)
    if rows.shape[1] != n + 2:
        raise ChorusError("check_divergence: rows of %d words for %d tensors"
                          % (rows.shape[1], n))
    names = (_c.c_char_p * max(n, 1))(*[k.encode() for k, _ in named])
    tensor = _c.c_long(-1)
    differ = (_c.c_int * nranks)()
    msg = _c.create_string_buffer(1024)
    v = lib.chorus_divergence_compare(_c.cast(rows.data_ptr(), _u64p), nranks, n, names,
                                      int(step), _c.byref(tensor), differ, msg, len(msg))
    if v == 0:
        return
    if v < 0:
        raise MemoryError("check_divergence: out of memory")
    ranks = [int(rows[r, 1]) for r in range(nranks) if differ[r]]
    name = named[tensor.value][0] if v == 1 else None
    raise DivergenceError(msg.value.decode("utf-8", "replace"), name, ranks, int(step))


_calls = [0]


def next_step(step):
    """step, or, when None, how many times this process checked so far (this call included)."""
    _calls[0] += 1
    return _calls[0] if step is None else int(step)


def check_divergence(model_or_named_tensors, step=None, process_set=None, name=None):
    """Compares every tensor of ``model_or_named_tensors`` (a module's parameters and buffers,
    a dict of tensors, or (name, tensor) pairs) across the ranks of ``process_set`` (default:
    all) in one allgather of 64-bit hashes. Returns when every rank holds the same bytes;
    otherwise every rank raises the same DivergenceError naming the first divergent tensor,
    the ranks outside the reference group (global ranks) and ``step`` (default: how many times
    this process called check_divergence). A collective: every rank of the set calls it with
    the same tensor names and sizes (else it raises saying the lists differ)."""
    from . import mpi_ops
    from .._core import global_process_set
    ps = global_process_set if process_set is None else process_set
    named = named_tensors(model_or_named_tensors, "check_divergence")
    step = next_step(step)
    row = divergence_row(named, mpi_ops.rank())
    rows = mpi_ops.allgather(row, name=name or "check_divergence", process_set=ps)
    raise_if_diverged(rows, named, step)
