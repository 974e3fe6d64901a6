"""A long Horovod-style sequence on 2 ranks: the cases a horovod.torch user's own suite runs
(the kind of test_torch.py Horovod keeps), one after another in one process per rank, so a
case that leaves the ranks out of step shows up as an error in a later one. Each case checks
the result or the exception horovod.torch documents for it."""

import re
import time

import pytest
import torch

import chorus.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()


def ones(*shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype)


# ---- allgather of uneven first dimensions, with gradients ----------------------------------

def test_allgather_uneven_grad():
    # Each rank gathers a different number of rows, then backward(): the gradient of each
    # rank's rows is the average of every rank's gradient for them (as Horovod).
    sizes = [3, 2, 7, 4][:N]
    for dim in (1, 2, 3):
        t = ones(*([sizes[R]] + [5] * (dim - 1))).mul_(R).requires_grad_()
        g = hvd.allgather(t)
        assert g.shape[0] == sum(sizes)
        grad = torch.cat([ones(*([sizes[r]] + [5] * (dim - 1))) * r for r in range(N)])
        g.backward(grad)
        assert torch.allclose(t.grad, ones(*t.shape) * R), t.grad
    # and the ranks are still in step
    assert hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item() == N


def test_grouped_allgather_grad():
    ts = [ones(R + 1 + i, 3).requires_grad_() for i in range(3)]
    outs = hvd.grouped_allgather(ts)
    for i, o in enumerate(outs):
        assert o.shape[0] == sum(r + 1 + i for r in range(N))
        # rank r's gradient of every row is r + 1: the average over ranks is (N + 1) / 2
        o.backward(torch.full_like(o, float(R + 1)))
    for t in ts:
        assert torch.allclose(t.grad, torch.full(t.shape, (N + 1) / 2)), t.grad


def test_grouped_allreduce_grad():
    ts = [ones(4, 3).mul(R + i).requires_grad_() for i in range(3)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
    for o in outs:
        o.backward(torch.ones_like(o))
    for t in ts:
        assert torch.allclose(t.grad, torch.full(t.shape, float(N)))


# ---- shapes with equal element counts -----------------------------------------------------

def test_allreduce_shape_mismatch_same_count():
    shape = (17, 23 * 57) if R == 0 else (17, 23, 57)
    with pytest.raises(RuntimeError, match="shape"):
        hvd.allreduce(torch.zeros(shape), name="shape.same.count")
    # the mismatch ended the op on every rank: the next one runs
    assert hvd.allreduce(torch.tensor([2.0]), op=hvd.Sum).item() == 2 * N


def test_broadcast_shape_mismatch_same_count():
    shape = (4, 6) if R == 0 else (6, 4)
    with pytest.raises(RuntimeError, match="shape"):
        hvd.broadcast(torch.zeros(shape), 0, name="bcast.same.count")


# ---- reducescatter ------------------------------------------------------------------------

def _rs_input(dim, dtype=torch.float32):
    torch.manual_seed(1234)
    return torch.empty(*([N * 4] * dim)).random_(-100, 100).to(dtype)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64,
                                   torch.float16], ids=str)
def test_reducescatter_sum_average(dtype):
    for dim in (1, 2, 3):
        t = _rs_input(dim, dtype)
        s = hvd.reducescatter(t, op=hvd.Sum)
        assert s.dtype == dtype and list(s.shape) == [4] + [N * 4] * (dim - 1)
        assert torch.allclose(s.double(), t[R * 4:(R + 1) * 4].double() * N)
        a = hvd.reducescatter(t)  # op=Average is the default
        assert torch.allclose(a.double(), t[R * 4:(R + 1) * 4].double())


def test_reducescatter_name_positional_and_compression():
    t = _rs_input(2)
    s = hvd.reducescatter(t, "rs.positional", op=hvd.Sum)
    assert torch.allclose(s, t[R * 4:(R + 1) * 4] * N)
    s = hvd.reducescatter(t, name="rs.fp16", compression=hvd.Compression.fp16, op=hvd.Sum)
    assert s.dtype == torch.float32
    assert torch.allclose(s, t[R * 4:(R + 1) * 4] * N, rtol=1e-2)
    h = hvd.reducescatter_async(t, "rs.async", hvd.Sum)
    assert torch.allclose(hvd.synchronize(h), t[R * 4:(R + 1) * 4] * N)


def test_reducescatter_prescale_postscale():
    t = _rs_input(2, torch.float64)
    s = hvd.reducescatter(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert torch.allclose(s, t[R * 4:(R + 1) * 4] * N * 1.5)
    ti = _rs_input(1, torch.int32)
    s = hvd.reducescatter(ti, op=hvd.Sum, prescale_factor=2, postscale_factor=3)
    assert torch.equal(s, ti[R * 4:(R + 1) * 4] * N * 6)


def test_grouped_reducescatter():
    ts = [_rs_input(2) + i for i in range(5)]
    outs = hvd.grouped_reducescatter(ts, op=hvd.Sum)
    for t, o in zip(ts, outs):
        assert torch.allclose(o, t[R * 4:(R + 1) * 4] * N)
    outs = hvd.grouped_reducescatter(ts, "grs", hvd.Compression.none, op=hvd.Average)
    for t, o in zip(ts, outs):
        assert torch.allclose(o, t[R * 4:(R + 1) * 4])
    h = hvd.grouped_reducescatter_async(ts, "grs.async", hvd.Sum)
    for t, o in zip(ts, hvd.synchronize(h)):
        assert torch.allclose(o, t[R * 4:(R + 1) * 4] * N)


def test_reducescatter_process_set():
    ps = hvd.add_process_set([0, 1])
    try:
        t = _rs_input(1)
        s = hvd.reducescatter(t, op=hvd.Sum, process_set=ps)
        if R in (0, 1):
            rows = N * 4 // 2
            assert torch.allclose(s, t[R * rows:(R + 1) * rows] * 2)
    except ValueError:
        assert R not in (0, 1)
    finally:
        hvd.remove_process_set(ps)


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter_grad(op):
    for dim in (1, 2, 3):
        t = _rs_input(dim).requires_grad_()
        s = hvd.reducescatter(t, op=getattr(hvd, op))
        s.backward(torch.ones([4] + [N * 4] * (dim - 1)))
        want = float(N) if op == "Sum" else 1.0
        assert torch.allclose(t.grad, torch.full(t.shape, want)), t.grad


def test_grouped_reducescatter_grad():
    ts = [_rs_input(2).requires_grad_() for _ in range(3)]
    outs = hvd.grouped_reducescatter(ts, op=hvd.Sum)
    for o in outs:
        o.backward(torch.ones_like(o))
    for t in ts:
        assert torch.allclose(t.grad, torch.full(t.shape, float(N)))


def test_reducescatter_type_error():
    t = torch.ones(N * 2, dtype=torch.int32 if R == 0 else torch.float32)
    with pytest.raises(RuntimeError, match="dtype"):
        hvd.reducescatter(t, name="rs.dtype")


def test_reducescatter_scalar_error():
    with pytest.raises(RuntimeError):
        hvd.reducescatter(torch.tensor(float(R)), op=hvd.Average)


def test_reducescatter_duplicate_name_error():
    # A second op under the name of one still pending is refused with ValueError. Each rank
    # checks in turn, while its first op certainly waits: the others submit theirs only after
    # the checking rank's broadcast.
    t = torch.ones(N * 4)
    for checker in range(N):
        name = "rs.duplicate.%d" % checker
        if R == checker:
            h = hvd.reducescatter_async(t, name=name)
            with pytest.raises(ValueError, match=name):
                hvd.reducescatter_async(t, name=name)
            hvd.broadcast(torch.zeros(1), checker, name="rs.duplicate.go.%d" % checker)
        else:
            hvd.broadcast(torch.zeros(1), checker, name="rs.duplicate.go.%d" % checker)
            h = hvd.reducescatter_async(t, name=name)
        assert torch.allclose(hvd.synchronize(h), torch.ones(4))


def test_broadcast_duplicate_name_error():
    # Horovod's case: rank 0 submits a broadcast twice under one name, then rank 1 does. The
    # second is refused on every rank with the message below, also on rank 1, where the first
    # meets rank 0's at once and may have ended before the second comes (the sleep makes that
    # likely): a name is taken until its handle is waited for, so the answer follows the
    # caller's order of calls, never the engine's speed. After synchronize() it is free again.
    t = torch.zeros(17)
    for i in range(3):
        name = "bc.duplicate.%d" % i
        msg = ("cannot enqueue '%s': an op with this name is still pending on this rank (a name "
               "holds one op until its handle is waited for, polled to its end or released)"
               % name)
        if R == 0:
            h = hvd.broadcast_async(t, root_rank=0, name=name)
            with pytest.raises(ValueError, match=re.escape(msg)):
                hvd.broadcast_async(t, root_rank=0, name=name)
        hvd.barrier()
        if R > 0:
            h = hvd.broadcast_async(t, root_rank=0, name=name)
            time.sleep(0.05)
            with pytest.raises(ValueError, match=re.escape(msg)):
                hvd.broadcast_async(t, root_rank=0, name=name)
        hvd.synchronize(h)
        hvd.broadcast(t, root_rank=0, name=name)


def test_reducescatter_adasum_error():
    with pytest.raises(RuntimeError):
        hvd.reducescatter(torch.ones(N * 4), op=hvd.Adasum)


# ---- join ---------------------------------------------------------------------------------

def test_join_allreduce():
    if R == 0:
        last = hvd.join()
    else:
        t = torch.full((5,), float(R))
        s = hvd.allreduce(t, op=hvd.Sum, name="join.ar")
        assert torch.allclose(s, torch.full((5,), float(sum(range(1, N)))))
        last = hvd.join()
    assert 0 <= last < N
    hvd.barrier()


def test_join_average_counts_joined_ranks():
    # Horovod: the joined rank's part is zeros and the average divides by every rank
    if R == 0:
        hvd.join()
    else:
        t = torch.full((5,), float(R))
        a = hvd.allreduce(t, name="join.avg")
        assert torch.allclose(a, torch.full((5,), float(sum(range(1, N))) / N)), a
        hvd.join()
    hvd.barrier()


def test_join_allgather_alltoall_reducescatter_raise():
    # Horovod: these have no meaning while a rank has joined; they raise, naming the op
    if R == 0:
        hvd.join()
    else:
        with pytest.raises(RuntimeError, match="allgather 'join.ag' is not supported while "
                                               "rank 0 has joined"):
            hvd.allgather(torch.full((2, 3), float(R)), name="join.ag")
        with pytest.raises(RuntimeError, match="chorus alltoall: .* not supported while rank 0 has"):
            hvd.alltoall(torch.ones(N, 2), name="join.a2a")
        with pytest.raises(RuntimeError, match="reduce_scatter .* not supported while rank 0"):
            hvd.reducescatter(torch.ones(N, 2), name="join.rs")
        hvd.join()
    # after every rank joined, they work again
    assert hvd.allgather(torch.ones(1, 1)).shape[0] == N
    hvd.barrier()


def test_join_broadcast():
    if R == 0:
        hvd.join()
    else:
        with pytest.raises(RuntimeError, match="join"):
            hvd.broadcast(torch.ones(3), 0, name="join.bc.root")
        # Horovod: a broadcast raises while any rank has joined, whoever its root
        with pytest.raises(RuntimeError, match="broadcast 'join.bc' is not supported while "
                                               "rank 0 has joined"):
            hvd.broadcast(torch.full((3,), float(R)), 1, name="join.bc")
        hvd.join()
    hvd.barrier()


# ---- sparse allreduce -----------------------------------------------------------------------

def _embedding_model():
    torch.manual_seed(7)
    return torch.nn.Embedding(20, 4, sparse=True)


@pytest.mark.parametrize("sparse_as_dense", [True, False])
def test_sparse_embedding_optimizer(sparse_as_dense):
    m = _embedding_model()
    ref = _embedding_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.5),
                                   named_parameters=m.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    idx = torch.tensor([[R, R + 3, 5]])
    m(idx).sum().backward()
    opt.synchronize()
    # the reduced gradient is sparse, as the gradient was (Horovod, sparse_as_dense too)
    assert m.weight.grad.is_sparse
    with opt.skip_synchronize():
        opt.step()
    # the serial reference: the average of every rank's gradient
    ropt = torch.optim.SGD(ref.parameters(), lr=0.5)
    loss = sum(ref(torch.tensor([[r, r + 3, 5]])).sum() for r in range(N)) / N
    loss.backward()
    ref.weight.grad = ref.weight.grad.to_dense()
    ropt.step()
    assert torch.allclose(m.weight.detach(), ref.weight.detach(), atol=1e-6)


def test_sparse_allreduce_async():
    dense = torch.zeros(10, 3)
    dense[R] = R + 1.0
    dense[7] = 1.0
    sp = dense.to_sparse()
    h = hvd.sparse_allreduce_async(sp, name="sparse.ar", op=hvd.Sum)
    out = hvd.synchronize(h)
    want = torch.zeros(10, 3)
    for r in range(N):
        want[r] += r + 1.0
    want[7] = float(N)
    assert out.is_sparse and torch.allclose(out.to_dense(), want)
    h = hvd.sparse_allreduce_async(sp, "sparse.avg", hvd.Average)
    assert torch.allclose(hvd.synchronize(h).to_dense(), want / N)
    # as Horovod's, the handle is a callable that waits and gives the result
    h = hvd.sparse_allreduce_async(sp, "sparse.call", hvd.Sum)
    assert callable(h)
    out = h()
    assert out.is_sparse and torch.allclose(out.to_dense(), want)


# ---- broadcast -----------------------------------------------------------------------------

def test_broadcast_type_error():
    t = torch.ones(17, dtype=torch.int32 if R == 0 else torch.float32)
    with pytest.raises(RuntimeError, match="dtype"):
        hvd.broadcast(t, 0, name="bcast.type")


def test_broadcast_rank_error():
    with pytest.raises((RuntimeError, ValueError)):
        hvd.broadcast(torch.ones(3), R, name="bcast.root")


def test_broadcast_optimizer_state_params_without_grads():
    torch.manual_seed(R)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model[1].bias.requires_grad_(False)  # a parameter that never has a gradient
    opt = torch.optim.Adam(model.parameters(), lr=0.1 * (R + 1))
    # no step yet: no parameter has a gradient or a state
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0, model=model)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    assert model[1].bias not in opt.state
    st = [opt.state[p]["exp_avg"] for p in model.parameters() if p.requires_grad]
    gathered = [hvd.allgather(s.reshape(1, -1)) for s in st]
    for g in gathered:
        assert torch.allclose(g[0], g[-1])


# ---- Adasum -------------------------------------------------------------------------------

def _adasum_pair(a, b):
    dot = float((a.double() * b.double()).sum())
    na, nb = float((a.double() ** 2).sum()), float((b.double() ** 2).sum())
    ca = 1.0 - dot / (2 * na) if na > 0 else 1.0
    cb = 1.0 - dot / (2 * nb) if nb > 0 else 1.0
    return (ca * a.double() + cb * b.double()).to(a.dtype)


def test_adasum_allreduce():
    torch.manual_seed(11)
    xs = [torch.randn(6, 5) for _ in range(N)]
    if N & (N - 1):
        with pytest.raises(NotImplementedError, match="power of 2"):
            hvd.allreduce(xs[R], op=hvd.Adasum)
        return
    got = hvd.allreduce(xs[R], op=hvd.Adasum, name="adasum")
    level = xs
    while len(level) > 1:
        level = [_adasum_pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    assert torch.allclose(got, level[0], atol=1e-5)
    # orthogonal vectors add; equal vectors stay
    e = torch.zeros(N * 2)
    e[R] = 1.0
    assert torch.allclose(hvd.allreduce(e, op=hvd.Adasum), (torch.arange(N * 2) < N).float())
    assert torch.allclose(hvd.allreduce(torch.ones(4) * 3, op=hvd.Adasum), torch.ones(4) * 3)


def test_adasum_integer_error():
    with pytest.raises((RuntimeError, ValueError, NotImplementedError)):
        hvd.allreduce(torch.ones(4, dtype=torch.int32), op=hvd.Adasum)


# ---- desynchronisation is an error, not a hang --------------------------------------------

def test_desync_different_names_raises_fast():
    # each rank waits for a collective the other never issues
    with pytest.raises(RuntimeError, match="desync") as ei:
        hvd.allreduce(torch.ones(3), name="desync.%d" % R)
    msg = str(ei.value)
    assert "desync.0" in msg and "desync.1" in msg and "rank" in msg
    # the runtime can be brought back
    hvd.shutdown()
    hvd.init()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


def test_backward_on_one_rank_is_a_desync_error():
    # Only rank 0 differentiates through an allgather: its gradient's allreduce has no
    # partner. Every rank gets an error naming the ops and ranks within seconds, no hang.
    t = ones(R + 1, 3).requires_grad_()
    g = hvd.allgather(t, name="ag.one.backward")
    with pytest.raises(hvd.HorovodInternalError, match="desynchronised") as ei:
        if R == 0:
            g.sum().backward()
        else:
            hvd.allreduce(torch.ones(2), name="ag.one.other")
    assert "ag.one.other" in str(ei.value) and "rank 1" in str(ei.value)
    # rank 0 issued one unnamed op more: start the runtime again to agree on names
    hvd.shutdown()
    hvd.init()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


# ---- init / shutdown ------------------------------------------------------------------------

def test_reinit_rank_size():
    r, n = hvd.rank(), hvd.size()
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match="init"):
        hvd.rank()
    hvd.init()
    assert (hvd.rank(), hvd.size()) == (r, n)
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [float(N)] * 2
    hvd.init()  # idempotent
    assert hvd.size() == n


# ---- Horovod's conventions: root ranks in process sets, even alltoall, shapes --------------

def test_process_set_root_rank_is_global():
    # Horovod: root_rank names a global rank, also inside a process set
    members = list(range(1, N))  # every rank but 0: set rank 0 is global rank 1
    ps = hvd.add_process_set(members)
    try:
        if R in members:
            root = members[-1]
            b = hvd.broadcast(torch.full((3,), float(R)), root_rank=root, process_set=ps)
            assert torch.equal(b, torch.full((3,), float(root))), b
            t = torch.full((2,), float(R))
            hvd.broadcast_(t, root, process_set=ps)
            assert torch.equal(t, torch.full((2,), float(root)))
            assert hvd.broadcast_object({"r": R}, root, process_set=ps) == {"r": root}
            with pytest.raises(ValueError, match="root_rank 0 is not in the process set "
                                                 r"\(global ranks \[1"):
                hvd.broadcast(torch.ones(1), root_rank=0, process_set=ps)
    finally:
        hvd.barrier()
        hvd.remove_process_set(ps)


def test_alltoall_even_split_uneven_first_dims():
    # Horovod: without splits each rank's own first dimension is split evenly, and the ranks'
    # first dimensions may differ. Rank r sends r + 1 rows (value j) to rank j.
    t = torch.cat([torch.full((R + 1, 2), float(j)) for j in range(N)])
    out = hvd.alltoall(t, name="a2a.even.uneven")
    assert out.shape == (N * (N + 1) // 2, 2), out.shape
    assert torch.equal(out, torch.full_like(out, float(R)))
    with pytest.raises(ValueError, match="not divisible by the number of ranks"):
        hvd.alltoall(torch.ones(N + 1))


def test_reducescatter_same_count_other_shape():
    # Horovod: the shapes must agree, not only the element counts
    shape = (N * 2, 6) if R == 0 else (N * 2, 2, 3)
    with pytest.raises(RuntimeError, match="shape"):
        hvd.reducescatter(torch.ones(shape), name="rs.same.count")
    assert hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item() == N


# ---- optimizer state ------------------------------------------------------------------------

def test_broadcast_optimizer_state_before_any_gradient():
    # Horovod: a new optimizer has no state; parameters that require a gradient get zero
    # gradients and the state is created by a local step, then root's state is broadcast
    torch.manual_seed(3)
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    w = torch.nn.Parameter(torch.full((4,), float(R + 1)))
    opt = torch.optim.SGD([frozen, w], lr=0.1, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=[("frozen", frozen), ("w", w)])
    hvd.broadcast_parameters({"w": w}, root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert frozen.grad is None
    assert torch.equal(w.grad, torch.zeros(4))
    assert torch.equal(opt.state_dict()["state"][1]["momentum_buffer"], torch.zeros(4))
    assert torch.equal(w.detach(), torch.ones(4))  # a zero step leaves SGD's weights alone
