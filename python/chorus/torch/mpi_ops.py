"""Collectives on torch tensors with the names and behaviour of horovod.torch.

CPU tensors are used in place through data_ptr(): an in-place op (allreduce_, broadcast_) on
a contiguous tensor copies nothing, and the out-of-place forms write straight into a new
output tensor. In-place ops need contiguous tensors (ValueError otherwise, as Horovod). CUDA
tensors are staged through host memory. dtypes: uint8 int8 int32 int64 float16 bfloat16
float32 float64 natively; int16 is reduced as int32 and bool as uint8 (Sum/Max: logical or,
Min/Product: logical and); data-moving ops (broadcast, allgather, alltoall) take any dtype.

Every op runs on the engine of its process set (chorus._engine, libchorus's training
runtime): enqueued by name from the calling thread, negotiated across ranks, fused and run by
the engine thread. Asynchronous ops return an integer handle for poll()/synchronize()
(chorus._handles).
"""

import torch

from .. import _core, _engine, _handles, _np, _timeline
from .._core import (Average, Sum, Adasum, Min, Max, Product, ProcessSet, global_process_set,
                     add_process_set, remove_process_set, is_initialized)
from .._lib import DTYPE, HorovodInternalError, ChorusMismatchError, ChorusInvalidArgument
from .compression import Compression

_CODES = {torch.int8: DTYPE["int8"], torch.uint8: DTYPE["uint8"], torch.int32: DTYPE["int32"],
          torch.int64: DTYPE["int64"], torch.float16: DTYPE["float16"],
          torch.bfloat16: DTYPE["bfloat16"], torch.float32: DTYPE["float32"],
          torch.float64: DTYPE["float64"]}


def _dname(dtype):
    return str(dtype).replace("torch.", "")


class _Adapter:
    """How chorus._engine sees a CPU tensor."""

    @staticmethod
    def buf(t):
        return _engine.Buf(t.data_ptr(), t.numel(), _CODES.get(t.dtype, -1), t.shape,
                           t.element_size())

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
    def copy_(dst, src):
        dst.copy_(src)


A = _Adapter()

# ---- basics -------------------------------------------------------------------------------


def init(comm=None, process_sets=None):
    """Joins the job described by the environment (chorus-run; RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT as torchrun sets them; mpirun; srun), or a one-rank job when there is none.
    Starts the engine of the global process set. Idempotent."""
    _np.init(comm, process_sets)


def shutdown():
    """Stops the engines (pending operations end with an error) and releases everything;
    init() may be called again."""
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
    """'engine': libchorus's training runtime runs every collective (the only runtime)."""
    return "engine"


def engine_stats(process_set=global_process_set):
    """Counters of the process set's engine (cycles, coordinator rounds, tensors, cache hits,
    fused allreduce calls, bytes reduced, engine thread CPU seconds)."""
    return _set(process_set)[1].stats()


def start_timeline(file_path, mark_cycles=False):
    """Records every operation this process issues (enqueue, start, end) into a Chrome trace
    (chrome://tracing, Perfetto) at file_path; stop_timeline() closes it."""
    _core.world()
    _timeline.start(file_path, _core.world().rank)


def stop_timeline():
    _timeline.stop()


# ---- handles ------------------------------------------------------------------------------

poll = _handles.poll
synchronize = _handles.synchronize


def _issue(o, sync):
    """The result of Op o now (sync), else a handle for synchronize()."""
    return o.wait() if sync else _handles.register(o)


class _Group:
    """Several Ops behind one handle; the result is the list of theirs."""

    def __init__(self, ops):
        self.ops = ops

    def poll(self):
        return all(o.poll() for o in self.ops)

    def wait(self):
        err, out = None, []
        for o in self.ops:
            try:
                out.append(o.wait())
            except BaseException as e:  # every op must end before raising
                err = err or e
        if err is not None:
            raise err
        return out


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
    """(ProcessSet, its engine) for process_set=; raises for non-members."""
    ps = _core.resolve_set(process_set)
    return ps, _core.engine_of(ps)


def _compressor(compression):
    """The engine's compressor for a Python compressor that names one (Compression.fp16), or
    None: such compression happens in the engine, not in Python."""
    ptr = getattr(compression, "engine_ptr", None)
    if ptr is not None:
        return ptr
    name = getattr(compression, "engine_compressor", None)
    return _engine.COMPRESSORS[name] if name else None


# ---- Adasum -------------------------------------------------------------------------------


def _adasum_pair(a, b):
    """Adasum of two gradients (float64, flat): each is scaled down by its projection on the
    other, halved, so that parallel gradients average and orthogonal ones add."""
    dot = torch.dot(a, b)
    na, nb = torch.dot(a, a), torch.dot(b, b)
    ca = 1.0 - dot / (2.0 * na) if float(na) > 0 else 1.0
    cb = 1.0 - dot / (2.0 * nb) if float(nb) > 0 else 1.0
    return ca * a + cb * b


def _adasum_tree(rows):
    """Adasum over the ranks in Horovod's order: neighbours (0,1), (2,3), ... first, then the
    results pairwise at twice the distance, up to the root."""
    level = list(rows)
    while len(level) > 1:
        level = [_adasum_pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def _adasum(eng, tensors, outputs, name, pre, post, what):
    """op=Adasum: every rank's tensors are gathered and combined by the same tree on every
    rank (one tensor at a time: dot products are per tensor, as Horovod's). The Op's result is
    the list of outputs."""
    n = eng.size
    if n & (n - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported "
                                  "yet. (chorus %s: %d ranks)" % (what, n))
    for t in tensors:
        if not t.dtype.is_floating_point:
            raise ChorusInvalidArgument("chorus %s: op=Adasum needs floating point tensors, got "
                                        "%s" % (what, _dname(t.dtype)))
    flats = [(_host(t).reshape(1, -1).double() * pre).contiguous() for t in tensors]
    o = _engine.allgather(A, eng, flats, name, what)
    o.keep.append((tensors, outputs))

    def combine(gathered):
        for t, out, g in zip(tensors, outputs, gathered):
            res = (_adasum_tree(list(g)) * post).reshape(t.shape).to(out.dtype)
            out.copy_(res)
        return outputs
    return o.map(combine)


# ---- allreduce ----------------------------------------------------------------------------


def _allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
               sync, what, compressor=None):
    """Reduces tensor into output (output may be tensor: in place)."""
    _tensor(tensor, what)
    ps, eng = _set(process_set)
    inplace = output is tensor
    if inplace:
        _contiguous(tensor, what)
    if op is Adasum:
        return _issue(_adasum(eng, [tensor], [output], name, prescale_factor, postscale_factor,
                              what).map(lambda outs: outs[0]), sync)
    host = _host(tensor)
    work, wop, back = _reduce_work(host, op, what)
    staged = work is not tensor
    dst = work if (staged or inplace) else output
    o = _engine.allreduce(A, eng, [(work, dst)], wop, prescale_factor, postscale_factor, name,
                          what, compressor)
    o.keep.append((tensor, output))
    o.map(lambda _: _finish(tensor, output, work, back) if staged else output)
    return _issue(o, sync)


def _finish(tensor, output, work, back):
    """Brings a staged result back: dtype, then device, into output."""
    if work is output and back is None:  # reduced in place: nothing to bring back
        return output
    res = work.to(back) if back is not None else work
    if res.data_ptr() != output.data_ptr() or res.device != output.device:
        output.copy_(res)
    return output


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing tensor over the ranks (op: Average by default, Sum, Min, Max, Product,
    Adasum); the input is not modified. Returns a handle; synchronize(handle) gives the
    result."""
    op = _core.as_op(op, average, adasum=True)
    out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce(tensor, out, name, op, prescale_factor, postscale_factor, process_set,
                      False, "allreduce_async")


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing tensor in place; returns a handle."""
    op = _core.as_op(op, average, adasum=True)
    return _allreduce(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set,
                      False, "allreduce_async_")


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces tensor over the ranks in place and returns it."""
    op = _core.as_op(op, average, adasum=True)
    return _allreduce(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set,
                      True, "allreduce_")


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set,
                compressor):
        ctx.args = (op, prescale_factor, postscale_factor, process_set, compressor)
        out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
        return _allreduce(tensor, out, name, op, prescale_factor, postscale_factor,
                          process_set, True, "allreduce", compressor)

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, ps, comp = ctx.args
        return (_AllreduceFn.apply(grad.contiguous(), None, op, pre, post, ps, comp),
                None, None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns the reduction of tensor over the ranks (a new tensor; differentiable)."""
    op = _core.as_op(op, average, adasum=True)
    _tensor(tensor, "allreduce")
    comp = _compressor(compression)
    c, ctx = (tensor, None) if comp else compression.compress(tensor)
    if c.requires_grad and torch.is_grad_enabled():
        out = _AllreduceFn.apply(c, name, op, prescale_factor, postscale_factor, process_set,
                                 comp)
    else:
        out = torch.empty_like(c, memory_format=torch.contiguous_format)
        _allreduce(c, out, name, op, prescale_factor, postscale_factor, process_set, True,
                   "allreduce", comp)
    return out if comp else compression.decompress(out, ctx)


def _grouped_allreduce(tensors, outputs, name, op, pre, post, process_set, sync, what,
                       compressor=None):
    tensors = list(tensors)
    if not tensors:
        return [] if sync else _handles.register(_handles.Done([]))
    ps, eng = _set(process_set)
    if op is Adasum:
        for t in tensors:
            _tensor(t, what)
        return _issue(_adasum(eng, tensors, list(outputs), name, pre, post, what), sync)
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
    ws = [w[0] for w in works]
    o = _engine.allreduce(A, eng, [(w, w) for w in ws], works[0][1], pre, post, name, what,
                          compressor)
    o.keep.append((tensors, outputs))
    o.map(lambda _: [_finish(t, out, w, back)
                     for t, out, (w, _, back) in zip(tensors, outputs, works)])
    return _issue(o, sync)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors as one fused operation; returns a handle whose
    result is the list of reduced tensors (the inputs are not modified)."""
    op = _core.as_op(op, average, adasum=True)
    outs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce(tensors, outs, name, op, prescale_factor, postscale_factor,
                              process_set, False, "grouped_allreduce_async")


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _core.as_op(op, average, adasum=True)
    return _grouped_allreduce(tensors, list(tensors), name, op, prescale_factor,
                              postscale_factor, process_set, False, "grouped_allreduce_async_")


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, compressor,
                *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set, compressor)
        outs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
        return tuple(_grouped_allreduce(tensors, outs, name, op, prescale_factor,
                                        postscale_factor, process_set, True,
                                        "grouped_allreduce", compressor))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, ps, comp = ctx.args
        gs = _GroupedAllreduceFn.apply(None, op, pre, post, ps, comp,
                                       *[g.contiguous() for g in grads])
        return (None,) * 6 + tuple(gs)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns the reductions of a list of tensors, done as one fused operation
    (differentiable)."""
    op = _core.as_op(op, average, adasum=True)
    engine_comp = _compressor(compression)
    comp = [(t, None) if engine_comp else compression.compress(t) for t in tensors]
    cs = [c for c, _ in comp]
    if torch.is_grad_enabled() and any(c.requires_grad for c in cs):
        res = list(_GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor,
                                             process_set, engine_comp, *cs))
    else:
        outs = [torch.empty_like(c, memory_format=torch.contiguous_format) for c in cs]
        res = _grouped_allreduce(cs, outs, name, op, prescale_factor, postscale_factor,
                                 process_set, True, "grouped_allreduce", engine_comp)
    if engine_comp:
        return res
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(res, comp)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    op = _core.as_op(op, average, adasum=True)
    return _grouped_allreduce(tensors, list(tensors), name, op, prescale_factor,
                              postscale_factor, process_set, True, "grouped_allreduce_")


# ---- broadcast ----------------------------------------------------------------------------


def _broadcast(tensor, output, root_rank, name, process_set, sync, what):
    _tensor(tensor, what)
    ps, eng = _set(process_set)
    if output is tensor:
        _contiguous(tensor, what)
    host = _host(tensor)
    work = host if output is tensor else None
    if work is None:
        work = host.clone() if host is tensor else host

    def finish(_):
        if output.data_ptr() != work.data_ptr():
            output.copy_(work)
        return output

    root = _core.set_root(ps, root_rank, what)
    o = _engine.broadcast(A, eng, work, root, ps.comm.size, name, what)
    o.keep.append((tensor, output))
    return _issue(o.map(finish), sync)


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
        ps = _set(ctx.ps)[0]
        if ps.comm.rank != _core.set_root(ps, ctx.root, "broadcast"):
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
    ps, eng = _set(process_set)
    if tensor.dim() == 0:
        raise ValueError("chorus %s: the tensor needs at least one dimension (got a scalar); "
                         "use tensor.reshape(1)" % what)
    host = _host(tensor)
    dev = tensor.device
    o = _engine.allgather(A, eng, [host], name, what)
    o.keep.append(tensor)
    return _issue(o.map(lambda outs: outs[0] if dev.type == "cpu" else outs[0].to(dev)), sync)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's tensor along dim 0 (dim 0 may differ); returns a
    handle."""
    return _allgather(tensor, name, process_set, False, "allgather_async")


def _allgather_grads(grads, dims, process_set):
    """The gradients of allgathered tensors whose first dimensions on this rank were dims:
    every rank's gradients of the whole output, averaged (as Horovod), then this rank's rows of
    each."""
    ps = _set(process_set)[0]
    gs = grouped_allreduce([g.contiguous() for g in grads], op=Average, process_set=ps)
    every = _allgather(torch.tensor([list(dims)], dtype=torch.int64), None, ps, True,
                       "allgather")
    offs = every[:ps.comm.rank].sum(0).tolist() if ps.comm.rank else [0] * len(dims)
    return [g.narrow(0, int(o), d) for g, o, d in zip(gs, offs, dims)]


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim, ctx.ps = tensor.shape[0], process_set
        return _allgather(tensor, name, process_set, True, "allgather")

    @staticmethod
    def backward(ctx, grad):
        return _allgather_grads([grad], [ctx.dim], ctx.ps)[0], None, None


class _GroupedAllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims, ctx.ps = [t.shape[0] for t in tensors], process_set
        return tuple(_grouped_allgather_async(tensors, name, process_set).wait())

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(_allgather_grads(grads, ctx.dims, ctx.ps))


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns every rank's tensor concatenated along dim 0 (differentiable)."""
    _tensor(tensor, "allgather")
    if tensor.requires_grad and torch.is_grad_enabled():
        return _AllgatherFn.apply(tensor, name, process_set)
    return _allgather(tensor, name, process_set, True, "allgather")


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathering each tensor of a list; the handle's result is the list."""
    return _handles.register(_grouped_allgather_async(tensors, name, process_set))


def _grouped_allgather_async(tensors, name, process_set):
    ps, eng = _set(process_set)
    hosts = [_host(_tensor(t, "grouped_allgather")) for t in tensors]
    devs = [t.device for t in tensors]
    o = _engine.allgather(A, eng, hosts, name, "grouped_allgather")
    o.keep.append(tensors)
    return o.map(lambda outs: [x if d.type == "cpu" else x.to(d) for x, d in zip(outs, devs)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Returns the allgather of each tensor of a list (differentiable)."""
    tensors = list(tensors)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return list(_GroupedAllgatherFn.apply(name, process_set, *tensors))
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
    ps, eng = _set(process_set)
    host = _host(tensor)
    dev = tensor.device

    def post(res):
        out, recv = res
        return (out if dev.type == "cpu" else out.to(dev)), torch.tensor(recv, dtype=torch.int32)
    o = _engine.alltoall(A, eng, host, _splits_list(splits), ps.comm.size, ps.comm.rank, name)
    o.keep.append(tensor)
    return _handles.register(o.map(post))


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


def _reducescatter_one(t, op, pre, post, name, process_set, what):
    """The Op of one reducescatter (its result is this rank's part)."""
    _tensor(t, what)
    ps, eng = _set(process_set)
    if t.dim() == 0:
        # horovod.torch raises a RuntimeError here; this one is a ValueError as well
        raise ChorusInvalidArgument("chorus %s: the tensor needs at least one dimension (got a "
                                    "scalar); use tensor.reshape(1)" % what)
    host = _host(t)
    work, wop, back = _reduce_work(host, op, what)
    dev = t.device

    def fin(out):
        if back is not None:
            out = out.to(back)
        return out if dev.type == "cpu" else out.to(dev)
    o = _engine.reducescatter(A, eng, work, wop, ps.comm.size, ps.comm.rank, pre, post, name,
                              what)
    o.keep.append(t)
    return o.map(fin)


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, pre, post, process_set):
        ctx.op, ctx.ps, ctx.scale = op, process_set, pre * post
        return _reducescatter_one(tensor, op, pre, post, name, process_set,
                                  "reducescatter").wait()

    @staticmethod
    def backward(ctx, grad):
        # Every rank's rows of the gradient, gathered; summed over the ranks for op=Sum
        # (the gathered gradient is the same on every rank), as horovod.torch.
        g = _allgather(grad.contiguous(), None, ctx.ps, True, "reducescatter gradient")
        if ctx.op is Sum:
            g = g * _set(ctx.ps)[0].comm.size
        if ctx.scale != 1.0:
            g = g * ctx.scale
        return g, None, None, None, None, None


def _rs_compressed(tensor, name, compression, op, process_set, pre, post):
    """The reducescatter of one tensor through a Python compressor, differentiable."""
    c, cctx = compression.compress(tensor)
    if c.requires_grad and torch.is_grad_enabled():
        out = _ReducescatterFn.apply(c, name, op, pre, post, process_set)
    else:
        out = _reducescatter_one(c, op, pre, post, name, process_set, "reducescatter").wait()
    return compression.decompress(out, cctx)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reduce-scatter over dim 0: rank r gets rows of the reduction (dim0 // size,
    one more for the first dim0 % size ranks). Returns a handle."""
    op = _core.as_op(op)
    return _handles.register(_reducescatter_one(tensor, op, prescale_factor, postscale_factor,
                                                name, process_set, "reducescatter"))


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Returns this rank's part of the reduction of tensor (see reducescatter_async);
    differentiable. compression: Compression.none or Compression.fp16 (the tensor travels
    and is reduced as float16)."""
    op = _core.as_op(op)
    _tensor(tensor, "reducescatter")
    return _rs_compressed(tensor, name, compression, op, process_set, prescale_factor,
                          postscale_factor)


def _grouped_rs_ops(tensors, op, name, process_set, pre, post):
    ops = []
    try:
        for i, t in enumerate(tensors):
            ops.append(_reducescatter_one(t, op, pre, post, name and "%s.%d" % (name, i),
                                          process_set, "grouped_reducescatter"))
    except BaseException:
        # The ops already enqueued end before their buffers go; the argument error is raised.
        for o in ops:
            try:
                o.wait()
            except BaseException:  # noqa: B902
                pass
        raise
    return _Group(ops)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of each tensor of a list; the handle's result is the list."""
    op = _core.as_op(op)
    return _handles.register(_grouped_rs_ops(list(tensors), op, name, process_set,
                                             prescale_factor, postscale_factor))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Returns the reducescatter of each tensor of a list (differentiable)."""
    op = _core.as_op(op)
    tensors = list(tensors)
    if compression is Compression.none and not (
            torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return _grouped_rs_ops(tensors, op, name, process_set, prescale_factor,
                               postscale_factor).wait()
    return [_rs_compressed(t, name and "%s.%d" % (name, i), compression, op, process_set,
                           prescale_factor, postscale_factor) for i, t in enumerate(tensors)]


# ---- sparse allreduce ---------------------------------------------------------------------


class _SparseResult:
    """The handle of sparse_allreduce_async: the allgathers of indices and values. Calling it
    waits and returns the sparse result (as Horovod's handle, a function); poll() says
    whether that will block."""

    def __init__(self, t, idx_op, val_op, op, size):
        self.t, self.idx_op, self.val_op, self.op, self.size = t, idx_op, val_op, op, size

    def poll(self):
        return self.idx_op.poll() and self.val_op.poll()

    def wait(self):
        err = None
        try:
            values = self.val_op.wait()[0]
        except BaseException as e:  # noqa: B902 - both must end before raising
            err = e
        try:
            indices = self.idx_op.wait()[0]
        except BaseException as e:  # noqa: B902
            err = err or e
        if err is not None:
            raise err
        if self.op is Average:
            values = values / self.size
        return torch.sparse_coo_tensor(indices.t(), values, self.t.shape)

    __call__ = wait


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=global_process_set):
    """Starts reducing a torch.sparse (COO) tensor: every rank's indices and values are
    allgathered and form one uncoalesced sparse tensor (duplicate indices add up when it is
    coalesced or used), divided by the number of ranks for op=Average. Returns a callable:
    handle() waits and gives that tensor (as Horovod)."""
    op = _core.as_op(op)
    if op not in (Average, Sum):
        raise ValueError("chorus sparse_allreduce_async: op must be Average or Sum, got %s"
                         % op)
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise ValueError("chorus sparse_allreduce_async: expected a sparse COO tensor")
    ps, eng = _set(process_set)
    name = eng.auto_name(name)
    idx = tensor._indices().t().contiguous()
    vals = tensor._values().contiguous()
    io = _engine.allgather(A, eng, [idx], name + ".indices", "sparse_allreduce")
    vo = _engine.allgather(A, eng, [_host(vals)], name + ".values", "sparse_allreduce")
    io.keep.append(tensor)
    return _SparseResult(tensor, io, vo, op, ps.comm.size)


# ---- synchronisation ----------------------------------------------------------------------


def join(device=-1):
    """This rank has run out of data: it takes part with zeros in the other ranks'
    allreduces (and barriers) until every rank has joined; an Average divides by every rank,
    the joined ones counted with their zeros (as Horovod). An allgather, broadcast, alltoall or
    reducescatter while a rank has joined raises (RuntimeError, as Horovod). Returns the last
    rank to join (the same on every rank)."""
    return _set(None)[1].join()


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called it."""
    _set(process_set)[1].barrier()


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
    "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "sparse_allreduce_async", "join",
    "barrier", "Average", "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet",
    "global_process_set", "add_process_set", "remove_process_set", "Compression",
    "HorovodInternalError", "ChorusMismatchError",
]
