"""DistributedOptimizer against single-process training on the global batch (plain, with
gradient accumulation, with fp16 compression), broadcast of model and optimizer state,
join with uneven batches, gradient clipping with skip_synchronize, SyncBatchNorm."""

import copy

import pytest
import torch

import chorus.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)
MB = 4  # rows per rank per micro-batch


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def batch(step, micro=0):
    """The global batch of a step: N*MB rows; rank r's shard is rows r*MB:(r+1)*MB."""
    g = torch.Generator().manual_seed(1000 * step + micro)
    return torch.randn(N * MB, 10, generator=g), torch.randint(0, 3, (N * MB,), generator=g)


def shard(x):
    return x[R * MB:(R + 1) * MB]


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def assert_same_on_all_ranks(model):
    mine = flat(model)
    everyone = hvd.allgather(mine.unsqueeze(0))
    for r in range(N):
        assert torch.equal(everyone[r], mine), "rank %d's parameters differ" % r


def train(distributed, steps=4, passes=1, compression=hvd.Compression.none, opt_cls=None,
          bucket_cap_mb=25.0):
    model = make_model()
    opt_cls = opt_cls or (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    opt = opt_cls(model.parameters())
    if distributed:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       compression=compression,
                                       backward_passes_per_step=passes,
                                       bucket_cap_mb=bucket_cap_mb)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(steps):
        opt.zero_grad()
        for m in range(passes):
            x, y = batch(step, m)
            if distributed:
                x, y = shard(x), shard(y)
            (loss_fn(model(x), y) / passes).backward()
        opt.step()
    return model


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_matches_single_process_global_batch(opt_name):
    cls = None if opt_name == "sgd" else (lambda p: torch.optim.Adam(p, lr=0.01))
    dist = train(True, opt_cls=cls)
    ref = train(False, opt_cls=cls)
    assert_same_on_all_ranks(dist)
    assert torch.allclose(flat(dist), flat(ref), atol=1e-5), (flat(dist) - flat(ref)).abs().max()


@pytest.mark.parametrize("cap", [0, 0.0005])
def test_buckets(cap):
    """One allreduce per parameter (cap 0), and buckets of a few parameters each."""
    dist = train(True, bucket_cap_mb=cap)
    ref = train(False)
    assert_same_on_all_ranks(dist)
    assert torch.allclose(flat(dist), flat(ref), atol=1e-5)


def test_gradient_accumulation():
    dist = train(True, passes=3)
    ref = train(False, passes=3)
    assert_same_on_all_ranks(dist)
    assert torch.allclose(flat(dist), flat(ref), atol=1e-5)


def test_fp16_compression():
    dist = train(True, compression=hvd.Compression.fp16)
    ref = train(False)
    assert_same_on_all_ranks(dist)
    assert torch.allclose(flat(dist), flat(ref), atol=5e-3)
    assert not torch.equal(flat(dist), flat(ref))  # it did travel as fp16


def test_too_many_backward_passes():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = batch(0)
    torch.nn.functional.cross_entropy(model(shard(x)), shard(y)).backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    with pytest.raises(AssertionError, match="more than backward_passes_per_step"):
        torch.nn.functional.cross_entropy(model(shard(x)), shard(y)).backward()
    opt.step()


def test_broadcast_parameters_and_optimizer_state():
    model = make_model(seed=R)  # different on every rank
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (R + 1), momentum=0.9)
    for step in range(R + 1):  # different momentum buffers too
        opt.zero_grad()
        x, y = batch(step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    root = N - 1
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    assert_same_on_all_ranks(model)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * N)
    bufs = torch.cat([opt.state[p]["momentum_buffer"].reshape(-1) for p in model.parameters()])
    allb = hvd.allgather(bufs.unsqueeze(0))
    assert all(torch.equal(allb[r], bufs) for r in range(N))
    # named_parameters (a list of pairs) works too
    m2 = make_model(seed=10 + R)
    hvd.broadcast_parameters(list(m2.named_parameters()), root_rank=0)
    assert_same_on_all_ranks(m2)
    with pytest.raises(ValueError, match="must be a dict"):
        hvd.broadcast_parameters(42, root_rank=0)


def test_join_uneven_batches():
    """Rank r has 2 + r batches; after its last one it joins and contributes zeros: the
    average still divides by every rank, as Horovod's (and as the reference computes)."""
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for step in range(2 + R):
        opt.zero_grad()
        x, y = batch(step)
        torch.nn.functional.cross_entropy(model(shard(x)), shard(y)).backward()
        opt.step()
    last = hvd.join()
    assert last == N - 1
    # Ranks that joined early skipped the last updates: take the model of the last rank.
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    assert_same_on_all_ranks(model)
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2 + N - 1):
        active = [r for r in range(N) if step < 2 + r]
        x, y = batch(step)
        ref_opt.zero_grad()
        for r in active:
            rows = slice(r * MB, (r + 1) * MB)
            (torch.nn.functional.cross_entropy(ref(x[rows]), y[rows]) / N).backward()
        ref_opt.step()
    assert torch.allclose(flat(model), flat(ref), atol=1e-5)


def test_clipping_with_skip_synchronize():
    model = make_model()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters())
    x, y = batch(0)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(shard(x)), shard(y)).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    with opt.skip_synchronize():
        opt.step()
    assert_same_on_all_ranks(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    torch.nn.functional.cross_entropy(ref(x), y).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.01)
    ref_opt.step()
    assert torch.allclose(flat(model), flat(ref), atol=1e-6)


def test_unused_parameter_on_some_ranks():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, _ = batch(0)
    out = model[0](shard(x)) if R == 0 else model(shard(x))  # rank 0 skips the last layer
    opt.zero_grad()
    out.sum().backward()
    opt.step()
    assert_same_on_all_ranks(model)


def test_optimizer_argument_errors():
    model = make_model()
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[("w", p) for p in model.parameters()])
    with pytest.raises(ValueError, match="not in it"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=list(model.named_parameters())[:1])
    if N & (N - 1):  # Adasum (tests/python/test_adasum.py) needs a power of 2 ranks
        with pytest.raises(NotImplementedError, match="op=Adasum needs a power of 2 ranks"):
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum)
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)


def test_sync_batch_norm_matches_global_batch():
    torch.manual_seed(3)
    x = torch.randn(N * MB, 5, 3, 3)
    bn = hvd.SyncBatchNorm(5)
    ref = torch.nn.BatchNorm2d(5)
    xs = shard(x).clone().requires_grad_(True)
    xr = x.clone().requires_grad_(True)
    w = torch.randn(N * MB, 5, 3, 3, generator=torch.Generator().manual_seed(4))
    y = bn(xs)
    (y * shard(w)).sum().backward()
    yr = ref(xr)
    (yr * w).sum().backward()
    assert torch.allclose(y, shard(yr), atol=1e-5)
    assert torch.allclose(xs.grad, shard(xr.grad), atol=1e-4)
    gw = hvd.allreduce(bn.weight.grad, op=hvd.Sum)
    assert torch.allclose(gw, ref.weight.grad, atol=1e-4)
    assert torch.allclose(bn.running_mean, ref.running_mean, atol=1e-6)
    assert torch.allclose(bn.running_var, ref.running_var, atol=1e-5)
    bn.eval()
    ref.eval()
    assert torch.allclose(bn(shard(x)), ref(shard(x)), atol=1e-5)
