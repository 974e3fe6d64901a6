"""Broadcasting a model's parameters and an optimizer's state, and collectives on Python
objects, as horovod.torch.functions."""

import io
import pickle

import torch

from .. import _core
from .._core import global_process_set
from . import mpi_ops


def _named(params):
    if isinstance(params, dict):
        return sorted(params.items())
    if isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        out = []
        for i, p in enumerate(params):
            out.append(p if isinstance(p, tuple) else ("param.%d" % i, p))
        return out
    raise ValueError("chorus broadcast_parameters: params must be a dict (state_dict) or a "
                     "list of tensors or (name, tensor) pairs, got %s" % type(params).__name__)


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every tensor of params (model.state_dict(), model.named_parameters(), or a
    list of tensors) with root_rank's values, in place."""
    items = [(n, p) for n, p in _named(params) if p is not None]
    for n, p in items:
        if not isinstance(p, torch.Tensor):
            raise ValueError("chorus broadcast_parameters: %s is a %s, not a tensor"
                             % (n, type(p).__name__))
    ps = _core.resolve_set(process_set)
    handles = []
    try:
        for n, p in items:
            handles.append(mpi_ops.broadcast_async_(p.data, root_rank, "broadcast." + str(n),
                                                    ps))
    finally:
        # Every broadcast enqueued ends before an error (a bad root, say) is raised.
        for h in handles:
            mpi_ops.synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state (per-parameter state such as momentum buffers, and
    the hyper-parameters of each parameter group) equal to root_rank's. The whole state_dict
    travels. An optimizer without state yet (before its first step) gets it as Horovod does:
    every parameter that requires a gradient is given a zero gradient and the (local, not
    distributed) step runs once. model (as horovod.torch's argument) is accepted and, when
    given, must be a torch.nn.Module; the state does not depend on it."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("chorus broadcast_optimizer_state: LBFGS is not supported")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise ValueError("chorus broadcast_optimizer_state: model must be a torch.nn.Module, "
                         "got %s" % type(model).__name__)
    ps = _core.resolve_set(process_set)
    mine = ps.comm.rank == _core.set_root(ps, root_rank, "broadcast_optimizer_state")
    if not optimizer.state_dict()["state"]:
        _init_state(optimizer)
    state = optimizer.state_dict() if mine else None
    state = broadcast_object(state, root_rank, "optimizer_state", process_set)
    if not mine:
        optimizer.load_state_dict(state)


def _init_state(optimizer):
    """Creates a new optimizer's state: zero gradients, then one step of the wrapped torch
    optimizer only (a DistributedOptimizer's own step would allreduce)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    if getattr(optimizer, "_chorus_distributed", False):  # a DistributedOptimizer
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


def _dumps(obj):
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    return buf.getvalue()


def _loads(data):
    # Any picklable object travels, as with Horovod: torch 2.6 and later load only tensors
    # and plain containers unless told otherwise (torch 1.13 has the flag, defaulting to False).
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's obj on every rank (serialised with torch.save, so tensors inside
    travel too; they arrive on the CPU)."""
    ps = _core.resolve_set(process_set)
    root = _core.set_root(ps, root_rank, "broadcast_object")  # root_rank is a global rank
    if not 0 <= root < ps.comm.size:
        raise ValueError("chorus broadcast_object: root_rank %d is out of range for %d rank%s"
                         % (root_rank, ps.comm.size, "" if ps.comm.size == 1 else "s"))
    me = ps.comm.rank
    data = _dumps(obj) if me == root else b""
    n = torch.tensor([len(data)], dtype=torch.int64)
    mpi_ops.broadcast_(n, root_rank, name and name + ".size", ps)
    if me == root:
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
            torch.empty(0, dtype=torch.uint8)
    else:
        buf = torch.empty(int(n.item()), dtype=torch.uint8)
    if buf.numel():
        mpi_ops.broadcast_(buf, root_rank, name and name + ".data", ps)
    return obj if me == root else _loads(buf.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's obj, in rank order."""
    ps = _core.resolve_set(process_set)
    data = _dumps(obj)
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    sizes = mpi_ops.allgather(torch.tensor([t.numel()], dtype=torch.int64),
                              name and name + ".sizes", ps)
    allb = mpi_ops.allgather(t, name and name + ".data", ps).numpy()
    out, off = [], 0
    for s in sizes.tolist():
        out.append(_loads(allb[off:off + s].tobytes()))
        off += s
    return out
