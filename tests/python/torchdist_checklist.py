"""The torch.distributed checklist: every operation below runs on 2 ranks on Gloo and on
"chorus", and each must give on "chorus" exactly what it gives on Gloo (the same values, bit
for bit, or the same exception type).

    PYTHONPATH=python python3 tests/python/torchdist_checklist.py

starts a 2-rank job of this file with the Python running it (the same file serves torch 1.13
and a torch 2.x venv), its ranks meeting through file stores in a temporary folder; they run
every operation on Gloo, then on "chorus", and write what each gave; this process compares
them. An operation the installed torch lacks (FSDP2, DTensor, ... on torch 1.13) is skipped on
both, with the reason. Where Gloo raises (a dtype it does not move, PREMUL_SUM; on torch 1.13
also AVG and all_to_all), what "chorus" gives must be the values this file computes. Prints a
line per operation that differs and ends with "torchdist checklist on torch V: N operations:
... , 0 differ"; exits 1 when any differs. CHECKLIST_VERBOSE=1 prints each operation's time.

    python3 tests/python/torchdist_checklist.py --rank-run gloo,chorus OUTDIR

is one rank of the job (RANK set).
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

RANKS = 2
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool]
CASES = []  # (name, function, reason it is skipped or None)


def case(name, needs=None):
    def add(fn):
        reason = None
        if needs is not None:
            try:
                reason = needs()
            except Exception as e:  # noqa: BLE001  a missing module is a reason to skip
                reason = "%s: %s" % (type(e).__name__, e)
        CASES.append((name, fn, reason))
        return fn
    return add


def rank():
    return dist.get_rank()


def data(dtype, n=6, salt=0, r=None):
    """Rank r's (this rank's) small values, which every dtype holds exactly."""
    r = rank() if r is None else r
    v = torch.tensor([(r + 1 + i * (salt + 1)) % 5 - (0 if dtype == torch.uint8 else 2)
                      for i in range(n)], dtype=torch.int64)
    if dtype == torch.bool:
        return (v + r) % 2 == 0
    if dtype == torch.uint8:
        v = v.abs()
    return v.to(dtype)


def red_op(name):
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(3.0)
    return getattr(dist.ReduceOp, name)


def attempt(fn):
    """fn's value, or its exception type; every rank then agrees whether any raised, and if so
    the group is made anew (Gloo on torch 1.13 fails every call after one that raised)."""
    try:
        v = fn()
        dist.barrier()  # an error the operation left behind shows here
        res = ["ok", v]
    except Exception as e:  # noqa: BLE001  the exception type is the result
        res = ["raises", type(e).__name__, str(e).splitlines()[0][:200] if str(e) else ""]
    JOB.settle(res[0] == "raises")
    return res


def per_dtype(fn):
    """fn(dtype) for every dtype, its value or its exception type."""
    return {str(dt): attempt(lambda: fn(dt))[:2] for dt in DTYPES}


def reference(op, dt, n=6):
    """op over every rank's data, computed here in dtype dt."""
    vs = [data(dt, n, r=r) for r in range(RANKS)]
    if op == "PREMUL_SUM":
        vs = [(v * 3.0).to(dt) for v in vs]
    f = {"SUM": torch.add, "AVG": torch.add, "PREMUL_SUM": torch.add, "PRODUCT": torch.mul,
         "MIN": torch.minimum, "MAX": torch.maximum, "BAND": torch.bitwise_and,
         "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[op]
    total = vs[0]
    for v in vs[1:]:
        total = f(total, v)
    return total / RANKS if op == "AVG" else total


def checked(t, want):
    """A value with whether it is the one computed here: where Gloo raises (a dtype it does not
    move, AVG and all_to_all on torch 1.13, PREMUL_SUM) the value "chorus" gives must be."""
    if isinstance(t, list):
        return [t, all(torch.equal(a, b) for a, b in zip(t, want)) and len(t) == len(want)]
    return [t, bool(torch.equal(t, want))]


# ---- collectives with every op and dtype ---------------------------------------------------

for _op in OPS:
    def _all_reduce(op=_op):
        def one(dt):
            t = data(dt)
            dist.all_reduce(t, op=red_op(op))
            return checked(t, reference(op, dt))
        return per_dtype(one)
    case("all_reduce %s" % _op)(_all_reduce)

for _op in OPS:
    def _reduce(op=_op):
        def one(dt):
            t = data(dt)
            dist.reduce(t, dst=1, op=red_op(op))
            if rank() != 1:
                return "not the root"
            return checked(t, reference(op, dt))
        return per_dtype(one)
    case("reduce %s" % _op)(_reduce)


def _has(name):
    return lambda: None if hasattr(dist, name) else "torch %s has no %s" % (torch.__version__, name)


for _op in OPS:
    def _reduce_scatter_tensor(op=_op):
        def one(dt):
            out = torch.zeros(3, dtype=dt)
            dist.reduce_scatter_tensor(out, data(dt), op=red_op(op))
            return checked(out, reference(op, dt)[3 * rank():3 * rank() + 3])
        return per_dtype(one)
    case("reduce_scatter_tensor %s" % _op, _has("reduce_scatter_tensor"))(_reduce_scatter_tensor)


@case("reduce_scatter (list)")
def _reduce_scatter():
    def one(dt):
        out = torch.zeros(3, dtype=dt)
        dist.reduce_scatter(out, list(data(dt).chunk(RANKS)))
        return checked(out, reference("SUM", dt)[3 * rank():3 * rank() + 3])
    return per_dtype(one)


@case("broadcast")
def _broadcast():
    def one(dt):
        t = data(dt)
        dist.broadcast(t, src=1)
        return checked(t, data(dt, r=1))
    return per_dtype(one)


@case("all_gather")
def _all_gather():
    def one(dt):
        out = [torch.zeros(6, dtype=dt) for _ in range(RANKS)]
        dist.all_gather(out, data(dt))
        return checked(out, [data(dt, r=r) for r in range(RANKS)])
    return per_dtype(one)


@case("all_gather_into_tensor", _has("all_gather_into_tensor"))
def _all_gather_into_tensor():
    def one(dt):
        out = torch.zeros(6 * RANKS, dtype=dt)
        dist.all_gather_into_tensor(out, data(dt))
        return checked(out, torch.cat([data(dt, r=r) for r in range(RANKS)]))
    return per_dtype(one)


@case("all_gather_into_tensor (stacked)", _has("all_gather_into_tensor"))
def _all_gather_into_tensor_stacked():
    out = torch.zeros(RANKS, 2, 3)
    dist.all_gather_into_tensor(out, data(torch.float32).view(2, 3))
    return checked(out, torch.stack([data(torch.float32, r=r).view(2, 3) for r in range(RANKS)]))


@case("gather")
def _gather():
    def one(dt):
        out = [torch.zeros(6, dtype=dt) for _ in range(RANKS)] if rank() == 0 else None
        dist.gather(data(dt), out, dst=0)
        return checked(out, [data(dt, r=r) for r in range(RANKS)]) if rank() == 0 else None
    return per_dtype(one)


@case("scatter")
def _scatter():
    def one(dt):
        out = torch.zeros(3, dtype=dt)
        dist.scatter(out, list(data(dt).chunk(RANKS)) if rank() == 1 else None, src=1)
        return checked(out, data(dt, r=1).chunk(RANKS)[rank()])
    return per_dtype(one)


@case("all_to_all_single")
def _all_to_all_single():
    def one(dt):
        out = torch.zeros(6, dtype=dt)
        dist.all_to_all_single(out, data(dt))
        return checked(out, torch.cat([data(dt, r=r).chunk(RANKS)[rank()] for r in range(RANKS)]))
    return per_dtype(one)


@case("all_to_all_single (uneven splits)")
def _all_to_all_single_uneven():
    ins = [[1, 4], [3, 2]][rank()]
    outs = [[1, 3], [4, 2]][rank()]
    out = torch.zeros(sum(outs))
    dist.all_to_all_single(out, data(torch.float32, n=5), outs, ins)
    return out


@case("all_to_all (lists)")
def _all_to_all():
    out = [torch.zeros(3) for _ in range(RANKS)]
    dist.all_to_all(out, list(data(torch.float32).chunk(RANKS)))
    return checked(out, [data(torch.float32, r=r).chunk(RANKS)[rank()] for r in range(RANKS)])


@case("barrier")
def _barrier():
    dist.barrier()
    return "done"


@case("send / recv")
def _send_recv():
    t = data(torch.float64)
    if rank() == 0:
        dist.send(t, dst=1, tag=5)
        return "sent"
    dist.recv(t, src=0, tag=5)
    return t


@case("isend / irecv")
def _isend_irecv():
    t = data(torch.int32)
    w = dist.isend(t, dst=1) if rank() == 0 else dist.irecv(t, src=0)
    w.wait()
    return t


@case("batch_isend_irecv", _has("batch_isend_irecv"))
def _batch_isend_irecv():
    peer = 1 - rank()
    send, recv = data(torch.float32), torch.zeros(6)
    ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    return recv


@case("all_reduce async_op + future")
def _async():
    t = data(torch.float32)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    return [t, w.get_future().wait()]


@case("all_reduce_coalesced")
def _all_reduce_coalesced():
    ts = [data(torch.float32), data(torch.int64, n=3)]
    dist.all_reduce_coalesced(ts)
    return ts


@case("all_gather_coalesced")
def _all_gather_coalesced():
    ins = [data(torch.float32, n=2), data(torch.float32, n=4)]
    outs = [[torch.zeros(2), torch.zeros(4)] for _ in range(RANKS)]
    dist.all_gather_coalesced(outs, ins)
    return outs


def _coalescing():
    from torch.distributed.distributed_c10d import _coalescing_manager  # noqa: F401
    return None


@case("_coalescing_manager all_reduce", _coalescing)
def _coalesce_all_reduce():
    from torch.distributed.distributed_c10d import _coalescing_manager
    ts = [data(torch.float32), data(torch.float32, salt=1)]
    with _coalescing_manager():
        for t in ts:
            dist.all_reduce(t)
    return ts


@case("_coalescing_manager all_gather_into_tensor", _coalescing)
def _coalesce_all_gather():
    from torch.distributed.distributed_c10d import _coalescing_manager
    outs = [torch.zeros(6 * RANKS), torch.zeros(6 * RANKS)]
    with _coalescing_manager():
        for i, o in enumerate(outs):
            dist.all_gather_into_tensor(o, data(torch.float32, salt=i))
    return outs


@case("_coalescing_manager reduce_scatter_tensor", _coalescing)
def _coalesce_reduce_scatter():
    from torch.distributed.distributed_c10d import _coalescing_manager
    outs = [torch.zeros(3), torch.zeros(3)]
    with _coalescing_manager():
        for i, o in enumerate(outs):
            dist.reduce_scatter_tensor(o, data(torch.float32, salt=i))
    return outs


@case("torch.distributed.nn all_reduce (autograd)")
def _nn_all_reduce():
    import torch.distributed.nn as dnn
    x = data(torch.float32).requires_grad_()
    y = dnn.all_reduce(x * 2)
    (y * torch.arange(6.0)).sum().backward()
    return [y.detach(), x.grad]


# ---- object collectives ----------------------------------------------------------------------

@case("broadcast_object_list")
def _broadcast_object_list():
    objs = [{"rank": rank(), "t": data(torch.float32)}, "x" * rank()]
    dist.broadcast_object_list(objs, src=1)
    return objs


@case("all_gather_object")
def _all_gather_object():
    out = [None] * RANKS
    dist.all_gather_object(out, ("rank", rank(), [1.5] * rank()))
    return out


@case("gather_object")
def _gather_object():
    out = [None] * RANKS if rank() == 0 else None
    dist.gather_object({"r": rank()}, out, dst=0)
    return out


@case("scatter_object_list")
def _scatter_object_list():
    out = [None]
    dist.scatter_object_list(out, [{"to": r} for r in range(RANKS)] if rank() == 0 else None,
                             src=0)
    return out


@case("send_object_list / recv_object_list", _has("send_object_list"))
def _send_object_list():
    objs = [None, None]
    if rank() == 0:
        dist.send_object_list([{"a": 1}, "two"], dst=1)
        return "sent"
    dist.recv_object_list(objs, src=0)
    return objs


# ---- groups ----------------------------------------------------------------------------------

@case("new_group all_reduce")
def _new_group():
    g = dist.new_group([0, 1])
    t = data(torch.float32)
    dist.all_reduce(t, group=g)
    return [t, dist.get_rank(g), dist.get_world_size(g)]


@case("new_group reversed ranks all_gather")
def _new_group_reversed():
    g = dist.new_group([1, 0])
    out = [torch.zeros(6) for _ in range(RANKS)]
    dist.all_gather(out, data(torch.float32), group=g)
    return [out, dist.get_rank(g)]


@case("new_group of one rank")
def _new_group_single():
    gs = [dist.new_group([r]) for r in range(RANKS)]
    t = data(torch.float32)
    dist.all_reduce(t, group=gs[rank()])
    return [t, dist.get_world_size(gs[rank()])]


@case("new_subgroups", _has("new_subgroups"))
def _new_subgroups():
    g, _ = dist.new_subgroups(group_size=1)
    t = data(torch.float32)
    dist.all_reduce(t, group=g)
    return [t, dist.get_world_size(g)]


@case("split_group", _has("split_group"))
def _split_group():
    g = dist.split_group(split_ranks=[[0], [1]])
    t = data(torch.float32)
    dist.all_reduce(t, group=g)
    whole = dist.split_group(split_ranks=[[1, 0]])
    u = [torch.zeros(6) for _ in range(RANKS)]
    dist.all_gather(u, data(torch.float32), group=whole)
    return [t, dist.get_world_size(g), u, dist.get_rank(whole)]


@case("get_process_group_ranks / get_global_rank", _has("get_process_group_ranks"))
def _group_ranks():
    g = dist.new_group([1, 0])
    return [dist.get_process_group_ranks(g), dist.get_global_rank(g, 0)]


# ---- DDP and its comm hooks, ZeroRedundancyOptimizer, FSDP1 ----------------------------------

def mlp(seed=1234):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def batches(steps=4):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(steps, RANKS * 4, 8, generator=g)
    y = torch.randn(steps, RANKS * 4, 4, generator=g)
    mine = slice(4 * rank(), 4 * rank() + 4)
    return [(x[s, mine], y[s, mine]) for s in range(steps)]


def train(model, opt, steps=4):
    for x, y in batches(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def ddp_case(hook=None, state=None):
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(mlp(), bucket_cap_mb=0.0005)
    if hook is not None:
        m.register_comm_hook(state, hook)
    train(m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
    return list(m.parameters())


@case("DDP")
def _ddp():
    return ddp_case()


@case("DDP no_sync + sync step")
def _ddp_no_sync():
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(mlp())
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    (x0, y0), (x1, y1) = batches(2)
    with m.no_sync():
        torch.nn.functional.mse_loss(m(x0), y0).backward()
    torch.nn.functional.mse_loss(m(x1), y1).backward()
    opt.step()
    return list(m.parameters())


@case("DDP Join (uneven inputs)")
def _ddp_join():
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(mlp())
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with Join([m]):
        for x, y in batches(3 + rank()):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
    return list(m.parameters())


def _hooks():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: F401
    return None


@case("DDP comm hook allreduce_hook", _hooks)
def _hook_allreduce():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as d
    return ddp_case(d.allreduce_hook, None)


@case("DDP comm hook fp16_compress_hook", _hooks)
def _hook_fp16():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as d
    return ddp_case(d.fp16_compress_hook, None)


@case("DDP comm hook bf16_compress_hook", _hooks)
def _hook_bf16():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as d
    return ddp_case(d.bf16_compress_hook, None)


@case("DDP comm hook PowerSGD", _hooks)
def _hook_powersgd():
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as p
    state = p.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                            start_powerSGD_iter=2, random_seed=3)
    return ddp_case(p.powerSGD_hook, state)


@case("ZeroRedundancyOptimizer")
def _zero():
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(mlp())
    train(m, ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.Adam, lr=0.01))
    return list(m.parameters())


@case("FSDP1 (FullyShardedDataParallel)")
def _fsdp1():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    m = FSDP(mlp(), device_id=torch.device("cpu"), use_orig_params=True)
    train(m, torch.optim.SGD(m.parameters(), lr=0.1))
    with FSDP.summon_full_params(m):
        return [p.detach().clone() for p in m.parameters()]


# ---- FSDP2, DTensor, functional collectives, tensor parallel, checkpoint ---------------------

def _fsdp2_api():
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def _dtensor_api():
    try:
        import torch.distributed.tensor as dt
        dt.distribute_tensor  # noqa: B018  2.5+
    except (ImportError, AttributeError):
        import torch.distributed._tensor as dt
    return dt


def _needs_dtensor():
    _dtensor_api()
    from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
    return None


def mesh():
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", (RANKS,))


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


@case("FSDP2 fully_shard", lambda: _fsdp2_api() and None)
def _fsdp2():
    fully_shard = _fsdp2_api()
    m = mlp()
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(m)
    train(m, torch.optim.Adam(m.parameters(), lr=0.01))
    return [full(p).detach() for p in m.parameters()]


@case("FSDP2 fully_shard reshard_after_forward=False", lambda: _fsdp2_api() and None)
def _fsdp2_noreshard():
    fully_shard = _fsdp2_api()
    m = mlp()
    fully_shard(m, reshard_after_forward=False)
    train(m, torch.optim.SGD(m.parameters(), lr=0.1))
    return [full(p).detach() for p in m.parameters()]


@case("device_mesh (init_device_mesh)", _needs_dtensor)
def _device_mesh():
    mh = mesh()
    g = mh.get_group()
    t = data(torch.float32)
    dist.all_reduce(t, group=g)
    return [t, mh.get_local_rank(), mh.size()]


@case("DTensor distribute_tensor + full_tensor", _needs_dtensor)
def _dtensor_full():
    dt = _dtensor_api()
    torch.manual_seed(5)
    d = dt.distribute_tensor(torch.randn(4, 6), mesh(), [dt.Shard(0)])
    return [d.to_local(), d.full_tensor()]


@case("DTensor redistribute Shard(0) -> Shard(1) -> Replicate", _needs_dtensor)
def _dtensor_redistribute():
    dt = _dtensor_api()
    torch.manual_seed(5)
    d = dt.distribute_tensor(torch.randn(4, 6), mesh(), [dt.Shard(0)])
    s1 = d.redistribute(d.device_mesh, [dt.Shard(1)])
    rep = s1.redistribute(d.device_mesh, [dt.Replicate()])
    return [s1.to_local(), rep.to_local()]


@case("DTensor Partial -> Replicate / Shard", _needs_dtensor)
def _dtensor_partial():
    dt = _dtensor_api()
    try:
        from torch.distributed.tensor.placement_types import Partial
    except ImportError:
        from torch.distributed._tensor.placement_types import _Partial as Partial
    p = dt.DTensor.from_local(data(torch.float32).view(2, 3), mesh(), [Partial()])
    return [p.redistribute(p.device_mesh, [dt.Replicate()]).to_local(),
            p.redistribute(p.device_mesh, [dt.Shard(0)]).to_local()]


@case("DTensor matmul (sharded)", _needs_dtensor)
def _dtensor_matmul():
    dt = _dtensor_api()
    torch.manual_seed(6)
    a, b = torch.randn(4, 6), torch.randn(6, 2)
    da = dt.distribute_tensor(a, mesh(), [dt.Shard(1)])
    db = dt.distribute_tensor(b, mesh(), [dt.Shard(0)])
    return full(da @ db)


def _needs_funcol():
    import torch.distributed._functional_collectives  # noqa: F401
    return None


@case("funcol all_reduce", _needs_funcol)
def _funcol_all_reduce():
    import torch.distributed._functional_collectives as fc
    return torch.as_tensor(fc.all_reduce(data(torch.float32), "sum", dist.group.WORLD)) + 0


@case("funcol all_gather_tensor", _needs_funcol)
def _funcol_all_gather():
    import torch.distributed._functional_collectives as fc
    return torch.as_tensor(fc.all_gather_tensor(data(torch.float32), 0, dist.group.WORLD)) + 0


@case("funcol reduce_scatter_tensor", _needs_funcol)
def _funcol_reduce_scatter():
    import torch.distributed._functional_collectives as fc
    return torch.as_tensor(fc.reduce_scatter_tensor(data(torch.float32), "sum", 0,
                                                    dist.group.WORLD)) + 0


@case("funcol all_to_all_single", _needs_funcol)
def _funcol_all_to_all():
    import torch.distributed._functional_collectives as fc
    return torch.as_tensor(fc.all_to_all_single(data(torch.float32), None, None,
                                                dist.group.WORLD)) + 0


@case("funcol broadcast", _needs_funcol)
def _funcol_broadcast():
    import torch.distributed._functional_collectives as fc
    return torch.as_tensor(fc.broadcast(data(torch.float32), 1, dist.group.WORLD)) + 0


def _needs_tp():
    from torch.distributed.tensor.parallel import parallelize_module  # noqa: F401
    return _needs_dtensor()


@case("tensor parallel Colwise/Rowwise", _needs_tp)
def _tensor_parallel():
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    m = mlp()
    parallelize_module(m, mesh(), {"0": ColwiseParallel(), "2": RowwiseParallel()})
    train(m, torch.optim.SGD(m.parameters(), lr=0.1))
    return [full(p).detach() for p in m.parameters()]


def _needs_dcp():
    import torch.distributed.checkpoint as dcp
    return None if hasattr(dcp, "save") else "torch %s has no dcp.save" % torch.__version__


@case("distributed checkpoint save/load", _needs_dcp)
def _dcp():
    import torch.distributed.checkpoint as dcp
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(mlp())
    train(m, torch.optim.SGD(m.parameters(), lr=0.1), steps=2)
    path = [tempfile.mkdtemp(prefix="chorus-dcp-") if rank() == 0 else None]
    dist.broadcast_object_list(path, src=0)
    dcp.save({"model": m.state_dict()}, checkpoint_id=path[0])
    fresh = DDP(mlp(seed=99))
    state = {"model": fresh.state_dict()}
    dcp.load(state, checkpoint_id=path[0])
    fresh.load_state_dict(state["model"])
    return list(fresh.parameters())


# ---- results -------------------------------------------------------------------------------

def plain(v):
    """A value as JSON, exact: tensors with dtype, shape and every element (floats in hex)."""
    if isinstance(v, torch.Tensor):
        v = v.detach()
        if hasattr(v, "full_tensor"):
            v = v.full_tensor()
        flat = v.reshape(-1)
        if v.is_floating_point():
            elems = [float(x).hex() for x in flat.double().tolist()]
        else:
            elems = flat.tolist()
        return {"dtype": str(v.dtype), "shape": list(v.shape), "values": elems}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, float):
        return float(v).hex()
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return repr(v)


class Job:
    """The default group of this rank's job. Gloo's is made anew (through a file store each
    time) when an operation raised on any rank, the ranks agreeing on that through a store of
    their own: after an error Gloo fails or desynchronises the calls that follow."""

    def __init__(self, backend, rank_, size, dirname):
        self.backend, self.rank, self.size, self.dir = backend, rank_, size, dirname
        self.control = dist.FileStore(os.path.join(dirname, "control"), size)
        self.step = self.generation = 0
        self.init()

    def init(self):
        dist.init_process_group(self.backend, timeout=datetime.timedelta(seconds=60),
                                init_method="file://" + os.path.join(
                                    self.dir, "store.%d" % self.generation),
                                rank=self.rank, world_size=self.size)

    def settle(self, raised):
        if self.backend != "gloo":  # "chorus" checks its arguments before it sends anything
            return
        self.step += 1
        self.control.set("%d.%d" % (self.step, self.rank), "1" if raised else "0")
        keys = ["%d.%d" % (self.step, r) for r in range(self.size)]
        self.control.wait(keys, datetime.timedelta(seconds=120))
        if any(self.control.get(k) == b"1" for k in keys):
            dist.destroy_process_group()
            self.generation += 1
            self.init()


JOB = None


def rank_run(backends, outdir):
    """This rank's part: the checklist on each backend in turn, its results in outdir."""
    global JOB
    import chorus.torch.distributed  # noqa: F401  registers "chorus"
    for backend in backends.split(","):
        jobdir = os.path.join(outdir, backend)
        os.makedirs(jobdir, exist_ok=True)
        JOB = Job(backend, int(os.environ["RANK"]), RANKS, jobdir)
        results = {}
        for name, fn, reason in CASES:
            if reason:
                results[name] = ["skipped", reason]
                continue
            start = time.monotonic()
            res = attempt(fn)
            if os.environ.get("CHECKLIST_VERBOSE"):
                print("rank %d: %s: %s: %.2f s" % (rank(), backend, name,
                                                   time.monotonic() - start), flush=True)
            results[name] = ["ok", plain(res[1])] if res[0] == "ok" else res
        with open(os.path.join(outdir, "%s.%s.json" % (backend, os.environ["RANK"])), "w") as f:
            json.dump(results, f)
        dist.destroy_process_group()


def run_job(backends, outdir):
    """One 2-rank job (the ranks run every backend in turn, which spares a second start of
    torch); a rank that fails ends the other (never a hang on a dead peer)."""
    env = dict(os.environ, WORLD_SIZE=str(RANKS))
    env.pop("CHORUS_RANK", None)
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank-run",
                               ",".join(backends), outdir], env=dict(env, RANK=str(r)))
             for r in range(RANKS)]
    failed = None
    while failed is None and any(p.poll() is None for p in procs):
        for r, p in enumerate(procs):
            try:
                if p.wait(timeout=0.5) != 0:
                    failed = r
            except subprocess.TimeoutExpired:
                pass
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    bad = [r for r, p in enumerate(procs) if p.returncode != 0]
    if bad:
        raise SystemExit("torchdist checklist: rank %d exited with status %d"
                         % (bad[0], procs[bad[0]].returncode))
    out = {}
    for b in backends:
        out[b] = []
        for r in range(RANKS):
            with open(os.path.join(outdir, "%s.%d.json" % (b, r))) as f:
                out[b].append(json.load(f))
    return out


def beyond_ok(g, c):
    """Whether "chorus" does what Gloo does, or gives the value computed here where Gloo
    raises; with the parts that differ (per dtype) for the report."""
    if g[:2] == c[:2]:
        return True, []
    if g[0] == "ok" and c[0] == "ok" and isinstance(g[1], dict) and isinstance(c[1], dict):
        ok, why = True, []
        for k in sorted(set(g[1]) | set(c[1])):
            o, w = beyond_ok(g[1].get(k, ["missing"]), c[1].get(k, ["missing"]))
            ok, why = ok and o, why + ["%s: %s" % (k, x) for x in w]
        return ok, why
    if g[0] == "raises" and c[0] == "ok" and (c[1] in ("not the root", None) or (
            isinstance(c[1], list) and len(c[1]) == 2 and c[1][1] is True)):
        return True, []
    brief = [json.dumps(x)[:300] for x in (g, c)]
    return False, ["gloo %s, chorus %s" % tuple(brief)]


def compare():
    with tempfile.TemporaryDirectory(prefix="chorus-checklist-") as d:
        res = run_job(["gloo", "chorus"], d)
        gloo, chorus = res["gloo"], res["chorus"]
    same = skipped = beyond = 0
    differ = []
    for name, _, _ in CASES:
        g, c = [gloo[r][name] for r in range(RANKS)], [chorus[r][name] for r in range(RANKS)]
        if g[0][0] == "skipped":
            skipped += 1
            print("skipped: %s (%s)" % (name, g[0][1]))
            continue
        if all(x[:2] == y[:2] for x, y in zip(g, c)):
            same += 1
            continue
        verdicts = [beyond_ok(x, y) for x, y in zip(g, c)]
        if all(v[0] for v in verdicts):
            beyond += 1
            print("beyond gloo: %s (where gloo raises, chorus gives the values computed here)"
                  % name)
            continue
        differ.append(name)
        for r, (_, why) in enumerate(verdicts):
            for line in why:
                print("DIFFERS: %s on rank %d: %s" % (name, r, line))
    raised = sum(1 for name, _, _ in CASES
                 if gloo[0][name][0] == "raises" and gloo[0][name] == chorus[0][name])
    print("torchdist checklist on torch %s: %d operations: %d same as gloo (%d of them raise on "
          "both), %d beyond gloo, %d skipped, %d differ"
          % (torch.__version__, len(CASES), same, raised, beyond, skipped, len(differ)))
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--rank-run":  # BACKEND[,BACKEND...] OUTDIR
        rank_run(sys.argv[2], sys.argv[3])
    else:
        sys.exit(compare())
