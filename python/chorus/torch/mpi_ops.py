"""Collectives on torch tensors with the names and behaviour of horovod.torch.

CPU tensors are used in place through data_ptr(): an in-place op (allreduce_, broadcast_) on
a contiguous tensor copies nothing, and the out-of-place forms write straight into a new
output tensor. In-place ops need contiguous tensors (ValueError otherwise, as Horovod). CUDA
tensors are staged through host memory. dtypes: uint8 int8 int32 int64 float16 bfloat16
float32 float64 natively; int16 is reduced as int32 and bool as uint8 (Sum/Max: logical or,
Min/Product: logical and); data-moving ops (broadcast, allgather, alltoall) take any dtype.

Asynchronous ops return an integer handle for poll()/synchronize(). Who runs them:
  * the training runtime (libchorus's engine, include/chorus/engine.h) when the library has
    it: named ops negotiated across ranks, fused, run by the engine thread;
  * otherwise one background thread issuing the blocking C collectives in order (see
    chorus._core). Blocking ops wait for earlier asynchronous ones either way.
chorus.torch.backend() says which one is in use.
"""

import itertools
import threading

import torch

from .. import _core, _ops
from .._core import (Average, Sum, Adasum, Min, Max, Product, ProcessSet, global_process_set,
                     add_process_set, remove_process_set, is_initialized)
from .._lib import (DTYPE, HorovodInternalError, ChorusError, ChorusMismatchError)
from .. import _np
from .. import _timeline
from .compression import Compression

_CODES = {torch.int8: DTYPE["int8"], torch.uint8: DTYPE["uint8"], torch.int32: DTYPE["int32"],
          torch.int64: DTYPE["int64"], torch.float16: DTYPE["float16"],
          torch.bfloat16: DTYPE["bfloat16"], torch.float32: DTYPE["float32"],
          torch.float64: DTYPE["float64"]}


def _dname(dtype):
    return str(dtype).replace("torch.", "")


class _Adapter:
    """How _ops sees a CPU tensor."""

    @staticmethod
    def buf(t):
        return _ops.Buf(t.data_ptr(), t.numel(), _CODES.get(t.dtype, -1), _dname(t.dtype),
                        t.shape, t.element_size())

    @staticmethod
    def empty(shape, like):
        return torch.empty(shape, dtype=like.dtype)

    @staticmethod
    def scale_(t, f):
        if t.dtype.is_floating_point:
            t.mul_(f)
        else:
            t.copy_(t.to(torch.float64).mul_(f))

    @staticmethod
    def floordiv_(t, n):
        t.copy_(torch.div(t, n, rounding_mode="floor"))

    @staticmethod
    def copy_(dst, src):
        dst.copy_(src)


A = _Adapter()

# ---- basics -------------------------------------------------------------------------------


def init(comm=None, process_sets=None):
    """Joins the job described by the environment (chorus-run; RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT as torchrun sets them; mpirun; srun), or a one-rank job when there is none.
    Starts the training runtime when libchorus has it. Idempotent."""
    _np.init(comm, process_sets)
    _reset_names()
    from . import _engine
    _engine.maybe_start()


def _reset_names():
    """Unnamed ops count from 0 in every new job (every generation of an elastic one), so
    that ranks that joined later agree with the others on names."""
    global _names
    _names = itertools.count()


def shutdown():
    """Waits for pending operations and releases everything; init() may be called again."""
    _handles.clear()
    _core.shutdown()


size, rank, local_size, local_rank = _np.size, _np.rank, _np.local_size, _np.local_rank
cross_size, cross_rank = _np.cross_size, _np.cross_rank
mpi_built, mpi_enabled, gloo_built, gloo_enabled = (_np.mpi_built, _np.mpi_enabled,
                                                    _np.gloo_built, _np.gloo_enabled)
nccl_built, ddl_built, ccl_built, cuda_built, rocm_built = (_np.nccl_built, _np.ddl_built,
                                                            _np.ccl_built, _np.cuda_built,
                                                            _np.rocm_built)
mpi_threads_supported = _np.mpi_threads_supported


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return size() == local_size() * cross_size()


def backend():
    """'engine' when the training runtime runs the asynchronous ops, else 'thread'."""
    return "engine" if _core.S.engine is not None else "thread"


def engine_stats():
    """Counters of the training runtime (cycles, coordinator rounds, tensors, cache hits,
    fused allreduce calls, bytes reduced, engine thread CPU seconds), or None without it."""
    eng = _core.S.engine
    return eng.stats() if eng is not None else None


def start_timeline(file_path, mark_cycles=False):
    """Records every operation this process issues (enqueue, start, end) into a Chrome trace
    (chrome://tracing, Perfetto) at file_path; stop_timeline() closes it."""
    _core.world()
    _timeline.start(file_path, _core.world().rank)


def stop_timeline():
    _timeline.stop()


# ---- handles ------------------------------------------------------------------------------

_handles = {}
_next_handle = itertools.count(1)
_names = itertools.count()
_handles_lock = threading.Lock()


class _Pending:
    """One operation in flight: its waitable, the tensors it uses (kept alive), and what to
    return once it is done."""

    __slots__ = ("wait_fn", "poll_fn", "keep", "result", "tl")

    def __init__(self, wait_fn, poll_fn, keep, tl=None):
        self.wait_fn, self.poll_fn, self.keep, self.tl = wait_fn, poll_fn, keep, tl


def _register(p):
    with _handles_lock:
        h = next(_next_handle)
        _handles[h] = p
    return h


def poll(handle):
    """True when the operation of handle has finished (synchronize() will not block)."""
    p = _handles.get(handle)
    if p is None:
        raise ValueError("chorus poll: unknown handle %r (already synchronized?)" % (handle,))
    return p.poll_fn()


def synchronize(handle):
    """Waits for the operation of handle and returns its output. Raises HorovodInternalError
    (or a subclass: ChorusMismatchError, ChorusPeerLostError, ChorusTimeoutError) when it
    failed, on every rank."""
    with _handles_lock:
        p = _handles.pop(handle, None)
    if p is None:
        return None
    try:
        out = p.wait_fn()
    except ChorusError:
        raise
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from e
    finally:
        if p.tl is not None:
            _timeline.end(p.tl)
    return out


def _launch(kind, name, run, post, sync, keep=()):
    """Runs run() (on the executor, in issue order), then post(result) on the waiting thread.
    sync: run now and return post's value; else return a handle."""
    tl = _timeline.begin(kind, name)
    ex = _core.S.executor
    if sync:
        try:
            return post(ex.run(run))
        finally:
            if tl is not None:
                _timeline.end(tl)
    h = ex.submit(run, post)
    return _register(_Pending(h.wait, h.done, keep, tl))


def _engine():
    """The engine backend for ops on process_set when it handles them, else None."""
    return _core.S.engine


# ---- argument checks and tensor staging ---------------------------------------------------


def _tensor(t, what):
    if not isinstance(t, torch.Tensor):
        raise TypeError("chorus %s: expected a torch.Tensor, got %s" % (what, type(t).__name__))
    if t.is_sparse:
        raise ValueError("chorus %s: sparse tensors are not supported; use "
                         "sparse_as_dense=True or .to_dense()" % what)
    return t


def _contiguous(t, what):
    if not t.is_contiguous():
        raise ValueError("chorus %s: the tensor must be contiguous (call .contiguous())" % what)


def _host(t):
    """A CPU contiguous tensor with t's data: t itself when it already is one."""
    if t.device.type == "cpu" and t.is_contiguous():
        return t
    return t.detach().to("cpu").contiguous()


_REDUCE_DTYPES = ", ".join(_dname(d) for d in _CODES) + ", int16, bool"


def _reduce_work(host, op, what):
    """(tensor to reduce in a libchorus dtype, op to use, dtype to convert back to or None)."""
    if host.dtype in _CODES:
        return host, op, None
    if host.dtype == torch.int16:
        return host.to(torch.int32), op, torch.int16
    if host.dtype == torch.bool:
        if op is Average:
            raise TypeError("chorus %s: op=Average is not defined for bool tensors (Sum or Max "
                            "give logical or, Min or Product logical and)" % what)
        return host.to(torch.uint8), (Max if op in (Sum, Max) else Min), torch.bool
    raise TypeError("chorus %s: dtype %s cannot be reduced (supported: %s)"
                    % (what, _dname(host.dtype), _REDUCE_DTYPES))


def _set(process_set):
    return _core.resolve_set(process_set)


def _auto(prefix, name):
    """The engine keys ops by name. Unnamed ops share one counter whatever their kind, so
    ranks that issue different collectives at the same point collide on a name and get a
    mismatch error (kind differs) instead of waiting for each other forever."""
    return name if name else "noname.%d" % next(_names)


# ---- allreduce ----------------------------------------------------------------------------


def _allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
               sync, what):
    """Reduces tensor into output (output may be tensor: in place)."""
    _tensor(tensor, what)
    ps = _set(process_set)
    inplace = output is tensor
    if inplace:
        _contiguous(tensor, what)
    host = _host(tensor)
    work, wop, back = _reduce_work(host, op, what)
    staged = work is not tensor
    eng = _engine()
    if eng is not None and eng.handles(ps):
        dst = work if (staged or inplace) else output
        return eng.allreduce(work, dst, wop, prescale_factor, postscale_factor,
                             _auto("allreduce", name), sync,
                             finish=(lambda: _finish(tensor, output, work, back)) if staged
                             else (lambda: output))
    if staged or inplace:
        def run():
            _ops.allreduce(A, ps.comm, work, work, wop, prescale_factor, postscale_factor, name)

        def post(_):
            return _finish(tensor, output, work, back)
    else:
        def run():
            _ops.allreduce(A, ps.comm, tensor, output, wop, prescale_factor, postscale_factor,
                           name)

        def post(_):
            return output
    return _launch("allreduce", name, run, post, sync, (tensor, output, work))


def _finish(tensor, output, work, back):
    """Brings a staged result back: dtype, then device, into output."""
    res = work.to(back) if back is not None else work
    if res.data_ptr() != output.data_ptr() or res.device != output.device:
        output.copy_(res)
    return output


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing tensor over the ranks (op: Average by default, Sum, Min, Max, Product);
    the input is not modified. Returns a handle; synchronize(handle) gives the result."""
    op = _core.as_op(op, average)
    out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce(tensor, out, name, op, prescale_factor, postscale_factor, process_set,
                      False, "allreduce_async")


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing tensor in place; returns a handle."""
    op = _core.as_op(op, average)
    return _allreduce(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set,
                      False, "allreduce_async_")


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces tensor over the ranks in place and returns it."""
    op = _core.as_op(op, average)
    return _allreduce(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set,
                      True, "allreduce_")


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
        return _allreduce(tensor, out, name, op, prescale_factor, postscale_factor,
                          process_set, True, "allreduce")

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, ps = ctx.args
        return (_AllreduceFn.apply(grad.contiguous(), None, op, pre, post, ps),
                None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns the reduction of tensor over the ranks (a new tensor; differentiable)."""
    op = _core.as_op(op, average)
    _tensor(tensor, "allreduce")
    c, ctx = compression.compress(tensor)
    if c.requires_grad and torch.is_grad_enabled():
        out = _AllreduceFn.apply(c, name, op, prescale_factor, postscale_factor, process_set)
    else:
        out = torch.empty_like(c, memory_format=torch.contiguous_format)
        _allreduce(c, out, name, op, prescale_factor, postscale_factor, process_set, True,
                   "allreduce")
    return compression.decompress(out, ctx)


def _grouped_allreduce(tensors, outputs, name, op, pre, post, process_set, sync, what):
    tensors = list(tensors)
    if not tensors:
        return [] if sync else _register(_Pending(lambda: [], lambda: True, ()))
    ps = _set(process_set)
    works = []
    for t, o in zip(tensors, outputs):
        _tensor(t, what)
        if o is t:
            _contiguous(t, what)
        host = _host(t)
        w, wop, back = _reduce_work(host, op, what)
        if w is host and o is not t:
            w = host.clone()
        works.append((w, wop, back))
    if len({w[1] for w in works}) > 1:
        raise TypeError("chorus %s: bool tensors cannot be grouped with other dtypes" % what)
    wop = works[0][1]
    ws = [w[0] for w in works]

    def finish():
        return [_finish(t, o, w, back) for t, o, (w, _, back) in zip(tensors, outputs, works)]

    eng = _engine()
    if eng is not None and eng.handles(ps):
        return eng.grouped_allreduce(ws, wop, pre, post, _auto("grouped_allreduce", name),
                                     sync, finish)

    def run():
        _ops.allreduce_fused(A, ps.comm, ws, wop, pre, post, name)
    return _launch("grouped_allreduce", name, run, lambda _: finish(), sync,
                   (tensors, outputs, ws))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors as one fused operation; returns a handle whose
    result is the list of reduced tensors (the inputs are not modified)."""
    op = _core.as_op(op, average)
    outs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce(tensors, outs, name, op, prescale_factor, postscale_factor,
                              process_set, False, "grouped_allreduce_async")


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _core.as_op(op, average)
    return _grouped_allreduce(tensors, list(tensors), name, op, prescale_factor,
                              postscale_factor, process_set, False, "grouped_allreduce_async_")


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns the reductions of a list of tensors, done as one fused operation."""
    op = _core.as_op(op, average)
    comp = [compression.compress(t) for t in tensors]
    cs = [c for c, _ in comp]
    outs = [torch.empty_like(c, memory_format=torch.contiguous_format) for c in cs]
    res = _grouped_allreduce(cs, outs, name, op, prescale_factor, postscale_factor,
                             process_set, True, "grouped_allreduce")
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(res, comp)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    op = _core.as_op(op, average)
    return _grouped_allreduce(tensors, list(tensors), name, op, prescale_factor,
                              postscale_factor, process_set, True, "grouped_allreduce_")


# ---- broadcast ----------------------------------------------------------------------------


def _broadcast(tensor, output, root_rank, name, process_set, sync, what):
    _tensor(tensor, what)
    ps = _set(process_set)
    if output is tensor:
        _contiguous(tensor, what)
    host = _host(tensor)
    work = host if output is tensor else None
    if work is None:
        work = host.clone() if host is tensor else host
    if not 0 <= int(root_rank) < ps.comm.size:
        raise ValueError("chorus %s: root_rank %d is out of range for %d ranks"
                         % (what, root_rank, ps.comm.size))

    def finish():
        if output.data_ptr() != work.data_ptr():
            output.copy_(work)
        return output

    eng = _engine()
    if eng is not None and eng.handles(ps):
        return eng.broadcast(work, int(root_rank), _auto("broadcast", name), sync, finish)
    return _launch("broadcast", name,
                   lambda: _ops.broadcast(A, ps.comm, work, int(root_rank), name),
                   lambda _: finish(), sync, (tensor, output, work))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root_rank's tensor to every rank into a new tensor; returns a handle."""
    out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _broadcast(tensor, out, root_rank, name, process_set, False, "broadcast_async")


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting tensor (in place) with root_rank's; returns a handle."""
    return _broadcast(tensor, tensor, root_rank, name, process_set, False, "broadcast_async_")


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites tensor with root_rank's, in place; returns it."""
    return _broadcast(tensor, tensor, root_rank, name, process_set, True, "broadcast_")


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root, ctx.ps = root_rank, process_set
        out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
        return _broadcast(tensor, out, root_rank, name, process_set, True, "broadcast")

    @staticmethod
    def backward(ctx, grad):
        g = allreduce(grad.contiguous(), op=Average, process_set=ctx.ps)
        if _set(ctx.ps).comm.rank != ctx.root:
            g = g * 0
        return g, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's tensor on every rank (a new tensor; differentiable)."""
    _tensor(tensor, "broadcast")
    if tensor.requires_grad and torch.is_grad_enabled():
        return _BroadcastFn.apply(tensor, root_rank, name, process_set)
    out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _broadcast(tensor, out, root_rank, name, process_set, True, "broadcast")


# ---- allgather ----------------------------------------------------------------------------


def _allgather(tensor, name, process_set, sync, what):
    _tensor(tensor, what)
    ps = _set(process_set)
    if tensor.dim() == 0:
        raise ValueError("chorus %s: the tensor needs at least one dimension (got a scalar); "
                         "use tensor.reshape(1)" % what)
    host = _host(tensor)
    dev = tensor.device

    def post(out):
        return out if dev.type == "cpu" else out.to(dev)

    eng = _engine()
    if eng is not None and eng.handles(ps):
        return eng.allgather(host, _auto("allgather", name), sync, post)
    return _launch("allgather", name, lambda: _ops.allgather(A, ps.comm, host, name), post,
                   sync, (tensor, host))


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's tensor along dim 0 (dim 0 may differ); returns a
    handle."""
    return _allgather(tensor, name, process_set, False, "allgather_async")


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim, ctx.ps = tensor.shape[0], process_set
        return _allgather(tensor, name, process_set, True, "allgather")

    @staticmethod
    def backward(ctx, grad):
        g = allreduce(grad.contiguous(), op=Sum, process_set=ctx.ps)
        dims = _allgather(torch.tensor([ctx.dim], dtype=torch.int64), None, ctx.ps, True,
                          "allgather")
        r = _set(ctx.ps).comm.rank
        off = int(dims[:r].sum())
        return g.narrow(0, off, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns every rank's tensor concatenated along dim 0 (differentiable)."""
    _tensor(tensor, "allgather")
    if tensor.requires_grad and torch.is_grad_enabled():
        return _AllgatherFn.apply(tensor, name, process_set)
    return _allgather(tensor, name, process_set, True, "allgather")


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathering each tensor of a list; the handle's result is the list."""
    ps = _set(process_set)
    hosts = [_host(_tensor(t, "grouped_allgather")) for t in tensors]
    devs = [t.device for t in tensors]

    def run():
        return [_ops.allgather(A, ps.comm, h, name) for h in hosts]

    def post(outs):
        return [o if d.type == "cpu" else o.to(d) for o, d in zip(outs, devs)]
    return _launch("grouped_allgather", name, run, post, False, (tensors, hosts))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# ---- alltoall and reducescatter -----------------------------------------------------------


def _splits_list(splits):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        return [int(s) for s in splits.tolist()]
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: splits[j] rows of tensor go to rank j (equal parts when splits is
    None). The handle's result is (output, received_splits)."""
    _tensor(tensor, "alltoall")
    ps = _set(process_set)
    host = _host(tensor)
    sp = _splits_list(splits)
    dev = tensor.device

    def post(res):
        out, recv = res
        return (out if dev.type == "cpu" else out.to(dev)), torch.tensor(recv, dtype=torch.int32)
    return _launch("alltoall", name, lambda: _ops.alltoall(A, ps.comm, host, sp, name), post,
                   False, (tensor, host))


class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, recv = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.recv, ctx.ps = recv, process_set
        ctx.mark_non_differentiable(recv)
        return out, recv

    @staticmethod
    def backward(ctx, grad, _unused):
        g, _ = synchronize(alltoall_async(grad.contiguous(), ctx.recv, None, ctx.ps))
        return g, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters rows of tensor to the ranks (splits[j] to rank j, or equal parts) and
    gathers what they send. Returns the output, and also received_splits when splits was
    given (as horovod.torch)."""
    _tensor(tensor, "alltoall")
    if tensor.requires_grad and torch.is_grad_enabled():
        out, recv = _AlltoallFn.apply(tensor, splits, name, process_set)
    else:
        out, recv = synchronize(alltoall_async(tensor, splits, name, process_set))
    return out if splits is None else (out, recv)


def _reducescatter_one(ps, t, op, pre, post, name, what):
    _tensor(t, what)
    if t.dim() == 0:
        raise ValueError("chorus %s: the tensor needs at least one dimension" % what)
    host = _host(t)
    work, wop, back = _reduce_work(host, op, what)
    dev = t.device

    def run():
        return _ops.reducescatter(A, ps.comm, work, wop, pre, post, name)

    def fin(out):
        if back is not None:
            out = out.to(back)
        return out if dev.type == "cpu" else out.to(dev)
    return run, fin, (t, host, work)


def reducescatter_async(tensor, op=Average, name=None, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reduce-scatter over dim 0: rank r gets rows of the reduction (dim0 // size,
    one more for the first dim0 % size ranks). Returns a handle."""
    op = _core.as_op(op)
    ps = _set(process_set)
    run, fin, keep = _reducescatter_one(ps, tensor, op, prescale_factor, postscale_factor,
                                        name, "reducescatter")
    return _launch("reducescatter", name, run, fin, False, keep)


def reducescatter(tensor, op=Average, name=None, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Returns this rank's part of the reduction of tensor (see reducescatter_async)."""
    op = _core.as_op(op)
    ps = _set(process_set)
    run, fin, keep = _reducescatter_one(ps, tensor, op, prescale_factor, postscale_factor,
                                        name, "reducescatter")
    return _launch("reducescatter", name, run, fin, True, keep)


def grouped_reducescatter_async(tensors, op=Average, name=None, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    op = _core.as_op(op)
    ps = _set(process_set)
    parts = [_reducescatter_one(ps, t, op, prescale_factor, postscale_factor, name,
                                "grouped_reducescatter") for t in tensors]
    return _launch("grouped_reducescatter", name, lambda: [p[0]() for p in parts],
                   lambda outs: [p[1](o) for p, o in zip(parts, outs)], False,
                   [p[2] for p in parts])


def grouped_reducescatter(tensors, op=Average, name=None, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(grouped_reducescatter_async(tensors, op, name, process_set,
                                                   prescale_factor, postscale_factor))


# ---- synchronisation ----------------------------------------------------------------------


def join(device=-1):
    """This rank has run out of data: it takes part with zeros in the other ranks'
    allreduces (and allgathers, broadcasts, barriers) until every rank has joined. An Average
    then divides by the ranks that contributed. Returns the last rank to join."""
    _core.world()
    eng = _engine()
    if eng is not None:
        return eng.join()
    ps = _set(None)
    return _launch("join", None, lambda: _ops.join(ps.comm), lambda r: r, True)


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called it."""
    ps = _set(process_set)
    eng = _engine()
    if eng is not None and eng.handles(ps):
        return eng.barrier()
    _launch("barrier", None, lambda: _ops.barrier(ps.comm), lambda _: None, True)


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "is_homogeneous", "backend", "engine_stats", "mpi_built", "mpi_enabled",
    "gloo_built", "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built", "mpi_threads_supported", "start_timeline", "stop_timeline", "poll",
    "synchronize", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async", "join",
    "barrier", "Average", "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet",
    "global_process_set", "add_process_set", "remove_process_set", "Compression",
    "HorovodInternalError", "ChorusMismatchError",
]
