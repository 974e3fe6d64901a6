"""The NumPy front end: collectives on numpy arrays through their data pointers.

In-place forms (allreduce_, broadcast_) work on the array's own memory, which must be
C-contiguous and writeable; the other forms return new arrays and accept any array. All calls
are blocking and must be made by every rank of the process set in the same order.
"""

import pickle

import numpy as np

from . import _core, _engine
from ._core import (Average, Sum, Min, Max, Product, Adasum, ProcessSet, global_process_set,
                    add_process_set, remove_process_set, is_initialized, shutdown)
from ._lib import DTYPE

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "allreduce", "allreduce_", "grouped_allreduce", "broadcast",
    "broadcast_", "allgather", "alltoall", "reducescatter", "barrier", "join",
    "broadcast_object", "allgather_object", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", "Average", "Sum", "Min", "Max", "Product",
    "Adasum", "mpi_built", "gloo_built", "nccl_built", "ccl_built", "ddl_built",
    "cuda_built", "rocm_built", "mpi_enabled", "gloo_enabled", "mpi_threads_supported",
]

_NP_CODES = {np.dtype(n): DTYPE[n] for n in DTYPE if n != "bfloat16"}


class _Adapter:
    @staticmethod
    def buf(a):
        if not isinstance(a, np.ndarray):
            raise TypeError("chorus: expected a numpy.ndarray, got %s" % type(a).__name__)
        if not a.flags.c_contiguous:
            raise ValueError("chorus: the array must be C-contiguous for an in-place "
                             "collective (use np.ascontiguousarray or the out-of-place form)")
        code = _NP_CODES.get(a.dtype, -1)
        return _engine.Buf(a.ctypes.data, a.size, code, a.shape, a.dtype.itemsize)

    @staticmethod
    def empty(shape, like):
        return np.empty(shape, dtype=like.dtype)

    @staticmethod
    def scale_(a, f):
        np.multiply(a, f, out=a, casting="unsafe")

    @staticmethod
    def copy_(dst, src):
        np.copyto(dst, src)


A = _Adapter()


def init(comm=None, process_sets=None):
    """Joins the job (see chorus._core.init). ``comm`` is accepted for horovod compatibility
    and must be None (the job comes from the environment)."""
    if comm is not None:
        raise ValueError("chorus.init: comm= (an MPI communicator) is not supported; the job "
                         "comes from the environment (chorus-run, mpirun, RANK/WORLD_SIZE)")
    _core.init(process_sets)


def size():
    return _core.membership()[1]


def rank():
    return _core.membership()[0]


def local_size():
    return _core.membership()[3]


def local_rank():
    return _core.membership()[2]


def cross_size():
    return _core.membership()[5]


def cross_rank():
    return _core.membership()[4]


def _writable(a, what):
    if not a.flags.writeable:
        raise ValueError("chorus %s: the array is read-only" % what)


def _reduce_dtype(a, op, what):
    """(array to reduce, op, how to bring the result back) for dtypes libchorus lacks."""
    if a.dtype in _NP_CODES:
        return a, op, None
    if a.dtype == np.int16:
        return a.astype(np.int32), op, np.int16
    if a.dtype == np.bool_:
        if op is Average:
            raise TypeError("chorus %s: op=Average is not defined for bool arrays (use Sum or "
                            "Max for logical or, Min or Product for logical and)" % what)
        return a.astype(np.uint8), (Max if op in (Sum, Max) else Min), np.bool_
    raise TypeError("chorus %s: dtype %s is not supported (supported: int8 uint8 int16 int32 "
                    "int64 float16 float32 float64 bool)" % (what, a.dtype))


def _set(process_set):
    """(ProcessSet, its engine) for process_set= (None: the global one)."""
    ps = _core.resolve_set(process_set)
    return ps, _core.engine_of(ps)


def allreduce_(array, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None, average=None):
    """Reduces ``array`` over the ranks in place and returns it. op: Average (default), Sum,
    Min, Max, Product."""
    op = _core.as_op(op, average)
    ps, eng = _set(process_set)
    A.buf(array)
    _writable(array, "allreduce_")
    work, wop, back = _reduce_dtype(array, op, "allreduce_")
    _engine.allreduce(A, eng, [(work, work)], wop, prescale_factor, postscale_factor, name,
                      "allreduce").wait()
    if back is not None:
        np.copyto(array, work.astype(back))
    return array


def allreduce(array, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=None, average=None):
    """Returns a new array: the reduction of ``array`` over the ranks."""
    out = np.array(array, copy=True, order="C")
    return allreduce_(out, op, name, prescale_factor, postscale_factor, process_set, average)


def grouped_allreduce(arrays, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=None):
    """Reduces a list of arrays as one operation (the engine fuses them); returns new arrays."""
    op = _core.as_op(op)
    ps, eng = _set(process_set)
    outs = [np.array(a, copy=True, order="C") for a in arrays]
    works = [_reduce_dtype(a, op, "grouped_allreduce") for a in outs]
    if len({w[1] for w in works}) > 1:
        raise TypeError("chorus grouped_allreduce: bool arrays cannot be grouped with others")
    if not works:
        return []
    _engine.allreduce(A, eng, [(w[0], w[0]) for w in works], works[0][1], prescale_factor,
                      postscale_factor, name, "grouped allreduce").wait()
    for o, (w, _, back) in zip(outs, works):
        if back is not None:
            np.copyto(o, w.astype(back))
    return outs


def broadcast_(array, root_rank=0, name=None, process_set=None):
    """Overwrites ``array`` with root_rank's, in place; returns it."""
    ps, eng = _set(process_set)
    A.buf(array)
    _writable(array, "broadcast_")
    root = _core.set_root(ps, root_rank, "broadcast")
    return _engine.broadcast(A, eng, array, root, ps.comm.size, name).wait()


def broadcast(array, root_rank=0, name=None, process_set=None):
    """Returns root_rank's ``array`` (a new array on every rank)."""
    return broadcast_(np.array(array, copy=True, order="C"), root_rank, name, process_set)


def allgather(array, name=None, process_set=None):
    """Concatenates every rank's array along dim 0 (dim 0 may differ between ranks)."""
    ps, eng = _set(process_set)
    a = np.ascontiguousarray(array)
    return _engine.allgather(A, eng, [a], name).wait()[0]


def alltoall(array, splits=None, name=None, process_set=None):
    """Sends splits[j] rows to rank j (equal parts when splits is None). Returns (received
    array, received splits)."""
    ps, eng = _set(process_set)
    a = np.ascontiguousarray(array)
    if splits is not None:
        splits = [int(s) for s in (splits.tolist() if hasattr(splits, "tolist") else splits)]
    out, recv = _engine.alltoall(A, eng, a, splits, ps.comm.size, ps.comm.rank, name).wait()
    return out, np.asarray(recv, dtype=np.int32)


def reducescatter(array, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=None):
    """Reduces over ranks and returns this rank's part of dim 0 (the first dim0 % size ranks
    get one row more)."""
    op = _core.as_op(op)
    ps, eng = _set(process_set)
    a = np.ascontiguousarray(array)
    work, wop, back = _reduce_dtype(a, op, "reducescatter")
    out = _engine.reducescatter(A, eng, work, wop, ps.comm.size, ps.comm.rank, prescale_factor,
                                postscale_factor, name).wait()
    return out.astype(back) if back is not None else out


def barrier(process_set=None):
    """Returns once every rank of the process set has called it."""
    _set(process_set)[1].barrier()


def join():
    """This rank has no more data: it takes part with zeros in the others' allreduces until
    all ranks have joined (an Average still divides by every rank, as Horovod). Allgather,
    broadcast, alltoall and reducescatter raise while a rank has joined. Returns the last rank
    to join."""
    return _set(None)[1].join()


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Returns root_rank's ``obj`` (pickled) on every rank."""
    ps = _core.resolve_set(process_set)
    mine = ps.comm.rank == _core.set_root(ps, root_rank, "broadcast_object")
    data = pickle.dumps(obj) if mine else b""
    n = broadcast_(np.array([len(data)], dtype=np.int64), root_rank, name, process_set)
    buf = np.frombuffer(data, dtype=np.uint8).copy() if mine else \
        np.empty(int(n[0]), dtype=np.uint8)
    broadcast_(buf, root_rank, name, process_set)
    return obj if mine else pickle.loads(buf.tobytes())


def allgather_object(obj, name=None, process_set=None):
    """Returns the list of every rank's ``obj`` (pickled), in rank order."""
    ps = _core.resolve_set(process_set)
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = allgather(np.array([data.size], dtype=np.int64), name, process_set)
    allb = allgather(data, name, process_set)
    out, off = [], 0
    for s in sizes:
        out.append(pickle.loads(allb[off:off + int(s)].tobytes()))
        off += int(s)
    assert len(out) == ps.comm.size
    return out


# ---- what this build has (honest answers) -------------------------------------------------

def mpi_built():
    """False: libchorus has its own TCP transport and does not link MPI (mpirun can still
    launch a job; ranks are read from its environment)."""
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def gloo_built():
    """False: collectives are libchorus's own, not Gloo's."""
    return False


def gloo_enabled():
    return False


def nccl_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """False: no CUDA kernels; CUDA tensors are staged through host memory."""
    return False


def rocm_built():
    return False
