"""The collectives of horovod.tensorflow on tf.Tensors, over the engine of chorus._np.

Every op hands the tensor's values to the NumPy front end (chorus._np), which enqueues them
by name on the process set's engine (negotiation, fusion, the timeline) and waits. Eagerly the
call is direct; inside a tf.function (or a tf.compat.v1 graph) it is a stateful
tf.numpy_function, which tf.function runs in program order with the other stateful ops, so
every rank issues its collectives in the same order. Their gradients are registered with
tf.custom_gradient as Horovod defines them.

Names: an op named by the caller keeps its name; an unnamed one is named, in a graph, after
its input tensor's graph name (the same on every rank that traced the same function) and,
eagerly, by the engine's counter (every rank calls in the same order).
"""

import os
import weakref

import numpy as np
import tensorflow as tf

from .. import _core, _np
from .._core import (Average, Sum, Min, Max, Product, Adasum, ProcessSet, global_process_set,
                     add_process_set, remove_process_set, is_initialized, shutdown)
from .._lib import ChorusError, ChorusMismatchError, ChorusInvalidArgument, lib_path
from .compression import Compression
from .util import no_autograph

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "size_op", "rank_op", "local_size_op", "local_rank_op",
    "process_set_included_op", "allreduce", "grouped_allreduce", "allgather",
    "grouped_allgather", "broadcast", "broadcast_", "alltoall", "reducescatter",
    "grouped_reducescatter", "join", "barrier", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", "Average", "Sum", "Min", "Max", "Product",
    "Adasum", "mpi_built", "gloo_built", "nccl_built", "ccl_built", "ddl_built", "cuda_built",
    "rocm_built", "mpi_enabled", "gloo_enabled", "mpi_threads_supported",
]

init = _np.init
size, rank, local_size, local_rank = _np.size, _np.rank, _np.local_size, _np.local_rank
cross_size, cross_rank = _np.cross_size, _np.cross_rank
mpi_built, gloo_built, nccl_built, ccl_built = (_np.mpi_built, _np.gloo_built, _np.nccl_built,
                                                _np.ccl_built)
ddl_built, cuda_built, rocm_built = _np.ddl_built, _np.cuda_built, _np.rocm_built
mpi_enabled, gloo_enabled = _np.mpi_enabled, _np.gloo_enabled
mpi_threads_supported = _np.mpi_threads_supported


def size_op(process_set_id=0, name=None):
    """The process set's size as an int32 tensor."""
    return tf.constant(_set(process_set_id).size(), dtype=tf.int32, name=name)


def rank_op(name=None):
    return tf.constant(rank(), dtype=tf.int32, name=name)


def local_size_op(name=None):
    return tf.constant(local_size(), dtype=tf.int32, name=name)


def local_rank_op(name=None):
    return tf.constant(local_rank(), dtype=tf.int32, name=name)


def process_set_included_op(process_set_id=0, name=None):
    ps = _core.S.sets.get(process_set_id)
    return tf.constant(1 if ps is not None and ps.included() else 0, dtype=tf.int32, name=name)


def _set(process_set):
    _core.world()
    ps = _core.S.global_set if process_set is None else process_set
    if isinstance(ps, int):
        ps = _core.S.sets.get(ps)
        if ps is None:
            raise ValueError("chorus: unknown process set id %d" % process_set)
    return ps


# ---- the bridge: numpy calls, eagerly or as graph ops ----------------------------------------

def _tf_error(e):
    """The tf.errors exception Horovod's ops raise for a chorus error (the message kept)."""
    msg = str(e)
    if isinstance(e, ChorusMismatchError):
        return tf.errors.FailedPreconditionError(None, None, msg)
    if isinstance(e, (ChorusInvalidArgument, ValueError)):
        return tf.errors.InvalidArgumentError(None, None, msg)
    return None


def _call(fn, arrays):
    try:
        out = fn(*arrays)
    except (ChorusError, ValueError) as e:
        if isinstance(e, ChorusError):
            _LAST_ERROR[0] = e
        err = _tf_error(e)
        if err is None:
            raise
        raise err from e
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


# The last chorus error a collective raised: inside a graph TensorFlow hands it on as one of
# its own exceptions (tf.errors), which chorus_error_of() traces back to it.
_LAST_ERROR = [None]


def chorus_error_of(e):
    """The chorus error (ChorusError) behind exception e, raised by a collective eagerly or
    inside a graph, or None when e did not come from one."""
    seen = e
    while seen is not None:
        if isinstance(seen, ChorusError):
            return seen
        seen = seen.__cause__ or seen.__context__
    last = _LAST_ERROR[0]
    if isinstance(e, tf.errors.OpError) and last is not None and str(last).strip() and \
            str(last).splitlines()[0] in str(e.message):
        return last
    return None


_NP_OK = (tf.float16, tf.float32, tf.float64, tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32,
          tf.int64, tf.bool)


# The last collective op of each tf.compat.v1 graph: a session runs ops that do not depend on
# each other in any order, so every collective is made to wait for the one built before it
# (the order of the program, the same on every rank). tf.function orders stateful ops itself.
_LAST = weakref.WeakKeyDictionary()


def _after_previous():
    g = tf.compat.v1.get_default_graph()
    if getattr(g, "_building_function", False):
        return []
    last = _LAST.get(g)
    return [last] if last is not None else []


def _ops():
    """The op library built against this TensorFlow (python/csrc/tf_ops.cpp, beside
    libchorus.so), or None where it was not built."""
    global _OPS
    if _OPS is False:
        path = os.path.join(os.path.dirname(lib_path), "_chorus_tf_ops.so")
        _OPS = tf.load_op_library(path) if os.path.exists(path) else None
    return _OPS


_OPS = False


def _graph_call(fn, tensors, wire):
    """fn as a graph op. With the op library, a chorus error comes back as (code, message)
    outputs that ChorusCheck raises as that tf.errors class; without it the exception
    propagates (TensorFlow makes it an UnknownError carrying the message)."""
    def plain(*a):
        return [o.astype(d.as_numpy_dtype, copy=False) for o, d in zip(_call(fn, a), wire)]

    ops = _ops()
    if ops is None:
        outs = tf.numpy_function(plain, tensors, wire, stateful=True)
        return list(outs) if isinstance(outs, (list, tuple)) else [outs]

    def checked(*a):
        try:
            return plain(*a) + [np.int32(0), b""]
        except tf.errors.OpError as e:
            return [np.zeros(0, d.as_numpy_dtype) for d in wire] + [
                np.int32(e.error_code), str(e.message).encode()]
    outs = tf.numpy_function(checked, tensors, list(wire) + [tf.int32, tf.string],
                             stateful=True)
    return list(ops.chorus_check(outs[-2], outs[-1], outs[:-2]))


def _run(fn, tensors, touts, shapes):
    """fn(*numpy arrays) -> list of arrays, as tensors of dtypes touts (static shapes where
    known). bfloat16 travels as float32 (NumPy has no such dtype)."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    back = [t.dtype for t in tensors]
    tensors = [tf.cast(t, tf.float32) if t.dtype == tf.bfloat16 else t for t in tensors]
    wire = [tf.float32 if d == tf.bfloat16 else d for d in touts]
    for t in tensors:
        if t.dtype not in _NP_OK:
            raise TypeError("chorus: dtype %s is not supported (supported: %s)"
                            % (t.dtype.name, " ".join(d.name for d in _NP_OK + (tf.bfloat16,))))
    if tf.executing_eagerly():
        outs = _call(fn, [t.numpy() for t in tensors])
        outs = [tf.convert_to_tensor(o.astype(d.as_numpy_dtype, copy=False))
                for o, d in zip(outs, wire)]
    else:
        with tf.control_dependencies(_after_previous()):
            outs = _graph_call(fn, tensors, wire)
        _LAST[tf.compat.v1.get_default_graph()] = outs[0].op
        for o, s in zip(outs, shapes):
            if s is not None:
                o.set_shape(s)
    del back
    return [tf.cast(o, tf.bfloat16) if d == tf.bfloat16 else o for o, d in zip(outs, touts)]


def _name(name, kind, tensor, ignore_name_scope=False):
    """The engine name of an op: the caller's, or its input's graph name in a graph, or None
    (the engine's counter) eagerly."""
    if name is not None:
        if not ignore_name_scope and not tf.executing_eagerly():
            scope = tf.compat.v1.get_default_graph().get_name_scope()
            if scope:
                return "%s/%s" % (scope, name)
        return name
    if tf.executing_eagerly() or not hasattr(tensor, "name"):
        return None
    try:
        return "tf.%s.%s" % (kind, tensor.name)
    except (AttributeError, ValueError):
        return None


def _as_op(op, average=None):
    o = _core.as_op(op, average, adasum=True)
    if o is Adasum:
        raise NotImplementedError("chorus.tensorflow: op=Adasum is not supported; use "
                                  "op=Average (the default) or op=Sum")
    return o


# ---- allreduce ---------------------------------------------------------------------------

def _grouped(tensors, op, pre, post, name, ps):
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if any(t.dtype == tf.uint16 for t in tensors):  # reduced as int32 (libchorus has no uint16)
        outs = _grouped([tf.cast(t, tf.int32) if t.dtype == tf.uint16 else t for t in tensors],
                        op, pre, post, name, ps)
        return [tf.cast(o, tf.uint16) if t.dtype == tf.uint16 else o
                for o, t in zip(outs, tensors)]
    if not tensors:
        return []
    dts = {t.dtype for t in tensors}
    if len(dts) > 1:  # one engine call per dtype, each fused
        out = [None] * len(tensors)
        for j, d in enumerate(sorted(dts, key=lambda d: d.name)):
            idx = [i for i, t in enumerate(tensors) if t.dtype == d]
            res = _grouped([tensors[i] for i in idx], op, pre, post,
                           None if name is None else "%s.%d" % (name, j), ps)
            for i, r in zip(idx, res):
                out[i] = r
        return out

    def fn(*arrays):
        return _np.grouped_allreduce(list(arrays), op=op, name=name, prescale_factor=pre,
                                     postscale_factor=post, process_set=ps)
    return _run(fn, tensors, [t.dtype for t in tensors], [t.shape for t in tensors])


def _check_grad_op(op, what):
    if op not in (Average, Sum):
        raise NotImplementedError("chorus %s: the gradient is defined for op=Average and op=Sum "
                                  "only (as Horovod)" % what)


def _reduce_with_grad(tensors, op, pre, post, name, ps):
    """grouped allreduce whose gradient is the same allreduce of the gradients."""
    @tf.custom_gradient
    def f(*xs):
        ys = _grouped(list(xs), op, pre, post, name, ps)

        def grad(*dys):
            _check_grad_op(op, "allreduce")
            return _grouped([tf.convert_to_tensor(d) for d in dys], op, pre, post,
                            None if name is None else name + ".grad", ps)
        return ys, grad
    return list(f(*tensors))


def _sparse_allreduce(slices, op, pre, post, name, ps):
    """Horovod's IndexedSlices allreduce: the values and indices of every rank gathered (an
    average divides the values by the size)."""
    if op not in (Average, Sum):
        raise NotImplementedError("chorus allreduce: IndexedSlices support op=Average and "
                                  "op=Sum only (as Horovod)")
    if pre != 1.0 or post != 1.0:
        raise NotImplementedError("chorus allreduce: prescale_factor and postscale_factor are "
                                  "not supported with IndexedSlices (as Horovod)")
    values = allgather(slices.values, name=None if name is None else name + ".values",
                       process_set=ps)
    indices = allgather(slices.indices, name=None if name is None else name + ".indices",
                        process_set=ps)
    if op is Average:
        values = values / tf.cast(_set(ps).size(), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=None,
              op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=global_process_set, ignore_name_scope=False):
    """The reduction of ``tensor`` over the ranks of the process set (op: Average by default,
    Sum, Min, Max, Product). tf.IndexedSlices are gathered instead (Average or Sum)."""
    op = _as_op(op, average)
    compression = compression or Compression.none
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, op, prescale_factor, postscale_factor,
                                 _name(name, "allreduce", tensor.values, ignore_name_scope),
                                 process_set)
    tensor = tf.convert_to_tensor(tensor)
    n = _name(name, "allreduce", tensor, ignore_name_scope)
    comp, ctx = compression.compress(tensor)
    out = _reduce_with_grad([comp], op, prescale_factor, postscale_factor, n, process_set)[0]
    return compression.decompress(out, ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set, name=None, ignore_name_scope=False):
    """Reduces a list of tensors as one operation (fused by the engine)."""
    op = _as_op(op, average)
    compression = compression or Compression.none
    if not tensors:
        return []
    sparse = [isinstance(t, tf.IndexedSlices) for t in tensors]
    if any(sparse):
        if op not in (Average, Sum):
            raise NotImplementedError("chorus grouped_allreduce: IndexedSlices support "
                                      "op=Average and op=Sum only (as Horovod)")
        out = list(tensors)
        for i, t in enumerate(tensors):
            if sparse[i]:
                out[i] = allreduce(t, op=op, prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor,
                                   name=None if name is None else "%s.s%d" % (name, i),
                                   process_set=process_set)
        dense = [i for i in range(len(tensors)) if not sparse[i]]
        res = grouped_allreduce([tensors[i] for i in dense], op=op, compression=compression,
                                prescale_factor=prescale_factor,
                                postscale_factor=postscale_factor, process_set=process_set,
                                name=name, ignore_name_scope=ignore_name_scope)
        for i, r in zip(dense, res):
            out[i] = r
        return out
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    n = _name(name, "grouped_allreduce", tensors[0], ignore_name_scope)
    comp = [compression.compress(t) for t in tensors]
    outs = _reduce_with_grad([c for c, _ in comp], op, prescale_factor, postscale_factor, n,
                             process_set)
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, comp)]


# ---- allgather ---------------------------------------------------------------------------

def _allgather_raw(tensor, name, ps):
    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else None
    return _run(lambda a: _np.allgather(a, name=name, process_set=ps), [tensor],
                [tensor.dtype], [shape])[0]


def allgather(tensor, name=None, process_set=global_process_set, ignore_name_scope=False):
    """Every rank's tensor concatenated along dim 0 (dim 0 may differ between ranks). Its
    gradient is this rank's rows of the average of every rank's gradient (as Horovod)."""
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        tensor = tf.reshape(tensor, [1])
    n = _name(name, "allgather", tensor, ignore_name_scope)

    @tf.custom_gradient
    def f(x):
        y = _allgather_raw(x, n, process_set)

        def grad(dy):
            dy = _reduce_with_grad([tf.convert_to_tensor(dy)], Average, 1.0, 1.0,
                                   None if n is None else n + ".grad", process_set)[0]
            rows = _allgather_raw(tf.reshape(tf.shape(x, out_type=tf.int64)[0], [1]),
                                  None if n is None else n + ".rows", process_set)
            me = _set(process_set).rank()
            start = tf.reduce_sum(rows[:me])
            return dy[start:start + rows[me]]
        return y, grad
    return f(tensor)


def grouped_allgather(tensors, name=None, process_set=global_process_set,
                      ignore_name_scope=False):
    return [allgather(t, name=None if name is None else "%s.%d" % (name, i),
                      process_set=process_set, ignore_name_scope=ignore_name_scope)
            for i, t in enumerate(tensors)]


# ---- broadcast ---------------------------------------------------------------------------

def broadcast(tensor, root_rank, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """root_rank's tensor on every rank (root_rank is a global rank). Its gradient is the
    average of every rank's gradient on the root and zero elsewhere (as Horovod)."""
    tensor = tf.convert_to_tensor(tensor)
    n = _name(name, "broadcast", tensor, ignore_name_scope)
    ps = _set(process_set)
    _core.set_root(ps, root_rank, "broadcast")

    @tf.custom_gradient
    def f(x):
        y = _run(lambda a: _np.broadcast(a, root_rank, name=n, process_set=process_set), [x],
                 [x.dtype], [x.shape])[0]

        def grad(dy):
            dy = _reduce_with_grad([tf.convert_to_tensor(dy)], Average, 1.0, 1.0,
                                   None if n is None else n + ".grad", process_set)[0]
            if rank() == int(root_rank):
                return dy
            with tf.control_dependencies([dy]):  # the allreduce runs on every rank
                return tf.zeros_like(dy)
        return y, grad
    return f(tensor)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrites each variable with root_rank's value. Returns the variables eagerly and, in
    a graph, the values of the assignments (evaluating them does the broadcast)."""
    out = []
    for i, v in enumerate(variables):
        val = broadcast(tf.convert_to_tensor(v), root_rank,
                        name=None if name is None else "%s.%d" % (name, i),
                        process_set=process_set)
        assigned = v.assign(val)
        out.append(v if tf.executing_eagerly() else assigned)
    return out


# ---- alltoall and reducescatter ----------------------------------------------------------

def alltoall(tensor, splits=None, name=None, process_set=global_process_set,
             ignore_name_scope=False):
    """Sends splits[j] rows of tensor to rank j of the process set (equal parts when splits is
    None). Returns the received tensor, and with splits given (received tensor, received
    splits), as Horovod."""
    tensor = tf.convert_to_tensor(tensor)
    n = _name(name, "alltoall", tensor, ignore_name_scope)
    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else None
    if splits is None:
        splits_t = None
    else:
        splits_t = tf.convert_to_tensor(splits)
        if splits_t.dtype not in (tf.int32, tf.int64):
            raise tf.errors.InvalidArgumentError(None, None, "chorus alltoall: splits must be "
                                                 "int32 or int64, got %s" % splits_t.dtype.name)
        splits_t = tf.cast(splits_t, tf.int32)

    def raw(x, sp):
        if sp is None:
            return _run(lambda a: list(_np.alltoall(a, None, name=n, process_set=process_set)),
                        [x], [x.dtype, tf.int32], [shape, [_set(process_set).size()]])
        return _run(lambda a, s: list(_np.alltoall(a, s, name=n, process_set=process_set)),
                    [x, sp], [x.dtype, tf.int32], [shape, [_set(process_set).size()]])

    @tf.custom_gradient
    def f(x):
        y, recv = raw(x, splits_t)

        def grad(dy, _drecv=None):
            g, _ = alltoall(tf.convert_to_tensor(dy), splits=recv,
                            name=None if n is None else n + ".grad", process_set=process_set)
            return g
        return (y, recv), grad
    y, recv = f(tensor)
    return y if splits is None else (y, tf.stop_gradient(recv))


def reducescatter(tensor, device_dense="", compression=None, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over the ranks and returns this rank's rows of dim 0 (the first dim0 % size
    ranks get one row more). Its gradient is the allgather of the gradients (times the size
    for Sum, as Horovod)."""
    op = _core.as_op(op)
    if op not in (Average, Sum):
        raise NotImplementedError("chorus reducescatter: op=Average and op=Sum only (as "
                                  "Horovod)")
    compression = compression or Compression.none
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise tf.errors.InvalidArgumentError(None, None, "chorus reducescatter: a scalar has "
                                             "no rows to scatter; pass a tensor of rank >= 1")
    n = _name(name, "reducescatter", tensor, ignore_name_scope)
    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:])
    comp, ctx = compression.compress(tensor)

    @tf.custom_gradient
    def f(x):
        y = _run(lambda a: _np.reducescatter(a, op=op, name=n, prescale_factor=prescale_factor,
                                             postscale_factor=postscale_factor,
                                             process_set=process_set),
                 [x], [x.dtype], [shape])[0]

        def grad(dy):
            g = allgather(tf.convert_to_tensor(dy), name=None if n is None else n + ".grad",
                          process_set=process_set)
            if op is Sum:  # the gathered gradient is the same on every rank (as Horovod)
                g = g * tf.cast(_set(process_set).size(), g.dtype)
            return g * tf.cast(prescale_factor * postscale_factor, g.dtype)
        return y, grad
    return compression.decompress(f(comp), ctx)


def grouped_reducescatter(tensors, device_dense="", compression=None, op=Average, name=None,
                          process_set=global_process_set, ignore_name_scope=False,
                          prescale_factor=1.0, postscale_factor=1.0):
    return [reducescatter(t, compression=compression, op=op,
                          name=None if name is None else "%s.%d" % (name, i),
                          process_set=process_set, ignore_name_scope=ignore_name_scope,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor)
            for i, t in enumerate(tensors)]


# ---- join and barrier --------------------------------------------------------------------

def join():
    """This rank has no more data: it takes part with zeros in the others' allreduces until
    every rank has joined. Returns the last rank to join (an int32 tensor)."""
    if tf.executing_eagerly():
        return tf.constant(_np.join(), dtype=tf.int32)
    with tf.control_dependencies(_after_previous()):
        out = tf.numpy_function(lambda: np.int32(_np.join()), [], tf.int32, stateful=True)
    _LAST[tf.compat.v1.get_default_graph()] = out.op
    return out


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called it."""
    if tf.executing_eagerly():
        _np.barrier(process_set)
        return None
    with tf.control_dependencies(_after_previous()):
        out = tf.numpy_function(lambda: np.int32(_np.barrier(process_set) or 0), [], tf.int32,
                                stateful=True)
    _LAST[tf.compat.v1.get_default_graph()] = out.op
    return out


no_autograph(globals())
