"""BalancedDistributedSampler and the sample-weighted DistributedOptimizer, on real ranks:
the share rule, every sample once per epoch whatever the shares, shares that follow a rank
slowed by real extra work, the weighted step against the even split and the single process,
and the sampler's state across a checkpoint."""

import io
import random
import time

import pytest
import torch

import chorus.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)


def random_shares(rng, total, n):
    """Ints >= 1 summing to total, drawn from rng (seeded alike on every rank)."""
    cuts = sorted(rng.sample(range(1, total), n - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def test_rule():
    assert hvd.balanced_shares([1.0, 1.0], 10) == [5, 5]
    assert hvd.balanced_shares([1.0, 2.0], 10) == [7, 3]      # 6.67, 3.33: rank 0's .67
    assert hvd.balanced_shares([1.0, 1.0, 1.0], 10) == [4, 3, 3]  # ties to the lower rank
    assert hvd.balanced_shares([2.0, 1.0, 1.0], 10) == [2, 4, 4]  # 2, 4, 4 exactly
    assert hvd.balanced_shares([1.0, 1000.0], 4) == [3, 1]    # minimum 1, from the largest
    assert hvd.balanced_shares([1000.0, 1.0, 1000.0], 3) == [1, 1, 1]
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 8)
        G = rng.randint(n, 300)
        t = [rng.uniform(1e-6, 1e-2) for _ in range(n)]
        s = hvd.balanced_shares(t, G)
        assert sum(s) == G and min(s) >= 1, (t, G, s)
        exact = [G * (1 / x) / sum(1 / y for y in t) for x in t]
        assert all(abs(a - b) < n for a, b in zip(s, exact)), (s, exact)
    with pytest.raises(ValueError, match="3 samples cannot give each of 4 ranks one"):
        hvd.balanced_shares([1, 1, 1, 1], 3)
    with pytest.raises(ValueError, match="rank 1's time per sample is 0.0; it must be positive"):
        hvd.balanced_shares([1, 0.0], 3)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("extra", [0, 1, 5])
def test_every_sample_once_per_epoch(drop_last, extra):
    """30 share vectors per epoch, changed every 1..3 steps, over 3 epochs: the ranks' batches
    together hold every index of the epoch exactly once (with drop_last, those of the full
    global batches); each batch has the size of the rank's share."""
    G = 4 * N + 3
    data = list(range(G * 9 + extra))
    s = hvd.BalancedDistributedSampler(data, G, shuffle=True, seed=3, drop_last=drop_last,
                                       rebalance_every=0)
    rng = random.Random(11)
    for epoch in range(3):
        s.set_epoch(epoch)
        mine, step, steps = [], 0, len(s)
        for batch in s:
            total = s.last_batch[1]
            if total == G:
                assert len(batch) == s.shares[R], (batch, s.shares)
            mine.extend(batch)
            step += 1
            if step % rng.randint(1, 3) == 0:
                s.update(random_shares(rng, G, N))
        assert step == steps and len(s) == 0 and list(s) == []
        everyone = [i for part in hvd.allgather_object(mine) for i in part]
        assert len(everyone) == len(set(everyone)), "an index was served twice"
        if drop_last:
            want = set(torch.randperm(len(data), generator=torch.Generator().manual_seed(
                3 + epoch))[:G * 9].tolist())
        else:
            want = set(data)
        assert set(everyone) == want


def test_shares_follow_measured_time():
    """The last rank does 8 extra forward passes of its batch (real work, per sample): about
    3.5x the time per sample of the others (a forward is about a third of forward and
    backward). The shares come from the measured times (record()), nothing else. A small
    CNN: its work per sample outweighs the fixed cost of a step (the rule assumes time
    proportional to samples; with a large fixed cost the shares would wander). The clock is
    each rank's CPU time, so that the load of other jobs on the test machine (which changes
    wall time at random) does not hide the extra work."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 8, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 5),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 10))
    G = 32 * N
    data = torch.utils.data.TensorDataset(torch.randn(G * 24, 1, 28, 28),
                                          torch.randint(0, 10, (G * 24,)))
    s = hvd.BalancedDistributedSampler(data, G, rebalance_every=4, clock=time.thread_time)
    loader = torch.utils.data.DataLoader(data, batch_sampler=s)

    def compute(x, y):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if R == N - 1:
            with torch.no_grad():
                for _ in range(8):
                    model(x)

    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters(), sampler=s)
    history, spent = [], []
    for x, y in loader:
        opt.zero_grad()
        t0 = time.thread_time()
        compute(x, y)
        spent.append(time.thread_time() - t0)
        s.record(spent[-1])  # as measure() does
        opt.step()
        history.append(list(s.shares))
    even = G / N
    # Each rank's compute over the first 4 steps (even shares) and over the last 12 (the
    # shares settled after 3 re-balances; 4 steps of CPU time on a shared 2-core machine are
    # too few to compare ranks).
    first = hvd.allgather_object(sum(spent[:4]))
    last = hvd.allgather_object(sum(spent[-12:]))
    print("shares, every 4 steps:", history[::4], "smoothed s/sample:", s.seconds_per_sample,
          "compute in the first 4 steps:", first, "in the last 12:", last)
    assert s.rebalances == 6
    assert s.shares == hvd.balanced_shares(s.seconds_per_sample, G)
    assert hvd.allgather_object(s.shares) == [s.shares] * N
    t = s.seconds_per_sample
    assert t[N - 1] > 1.5 * max(t[:N - 1]), t
    assert s.shares[N - 1] < 0.75 * even, s.shares
    assert all(x > even for x in s.shares[:N - 1]), s.shares
    # Converged: the slow rank's compute took about 3.5x the others' with even shares, and
    # about as long as theirs at the end (within 1.5x: a step's fixed cost weighs more on the
    # smaller share, and shares are whole samples).
    assert first[N - 1] > 2 * max(first[:N - 1]), first
    assert max(last) < 1.5 * min(last), last


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_weighted_step_equals_even_split():
    """Uneven shares with the sample-weighted optimizer against the even split (op=Average)
    and one process on the whole global batch, same samples, 5 steps of SGD with momentum.
    Only the order of the float32 sums differs (the weighted sum of per-rank means against
    one mean of the global batch), hence a tolerance of 1e-5 instead of equality."""
    G = 6 * N
    g = torch.Generator().manual_seed(5)
    X, Y = torch.randn(G * 5, 10, generator=g), torch.randint(0, 3, (G * 5,), generator=g)
    data = torch.utils.data.TensorDataset(X, Y)
    rng = random.Random(3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def run(mode):
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if mode == "single":
            for k in range(5):
                opt.zero_grad()
                loss_fn(model(X[k * G:(k + 1) * G]), Y[k * G:(k + 1) * G]).backward()
                opt.step()
            return model
        s = hvd.BalancedDistributedSampler(data, G, shuffle=False, rebalance_every=0)
        kw = {"sampler": s} if mode == "weighted" else {}
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), **kw)
        for x, y in torch.utils.data.DataLoader(data, batch_sampler=s):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            if mode == "weighted":
                s.update([1] + [G - N + 1] + [1] * (N - 2) if rng.random() < 0.5
                         else random_shares(rng, G, N))
        return model

    weighted, even, single = run("weighted"), run("even"), run("single")
    assert torch.allclose(flat(weighted), flat(single), atol=1e-5), \
        (flat(weighted) - flat(single)).abs().max()
    assert torch.allclose(flat(weighted), flat(even), atol=1e-5)
    assert hvd.allgather_object(flat(weighted).tolist()) == [flat(weighted).tolist()] * N
    # Weighted explicitly, without the sampler argument.
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    s = hvd.BalancedDistributedSampler(data, G, shuffle=False, rebalance_every=0)
    s.update([1] * (N - 1) + [G - N + 1])
    for k, (x, y) in enumerate(torch.utils.data.DataLoader(data, batch_sampler=s)):
        opt.zero_grad()
        # Before backward, which starts the allreduces. Without total, the total is
        # allreduced: a collective on every rank.
        opt.set_local_samples(len(x), G if k % 2 else None)
        loss_fn(model(x), y).backward()
        opt.step()
    assert torch.allclose(flat(model), flat(single), atol=1e-5)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="global_batch_size 1 is smaller than the %d ranks" % N):
        hvd.BalancedDistributedSampler(list(range(10)), 1)
    s = hvd.BalancedDistributedSampler(list(range(10)), 2 * N)
    with pytest.raises(ValueError, match="must each be >= 1 and sum to the global batch size"):
        s.update([2 * N] + [0] * (N - 1))
    model = make_model()
    with pytest.raises(ValueError, match="weighting gradients by samples replaces the average"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Sum,
                                 named_parameters=model.named_parameters(), sampler=s)


def test_state_dict_round_trip():
    """Half an epoch, re-balanced from recorded times, written with torch.save and loaded
    into a new sampler: the rest of the epoch, the shares and the times are the same. Loaded
    for another number of ranks, the position stays and the shares start even."""
    G = 5 * N
    data = list(range(G * 8 + 3))
    a = hvd.BalancedDistributedSampler(data, G, seed=9, rebalance_every=0)
    a.set_epoch(4)
    it = iter(a)
    for _ in range(3):
        next(it)
        a.record(0.001 * (R + 1), 10)
    a.rebalance()
    assert a.shares != [G // N] * N or N == 1
    next(it)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    rest = list(it)
    b = hvd.BalancedDistributedSampler(data, G, seed=0, rebalance_every=0)
    buf.seek(0)
    b.load_state_dict(torch.load(buf))
    assert b.shares == a.shares and b.seconds_per_sample == a.seconds_per_sample
    assert b.seconds_by_worker == {r: t for r, t in enumerate(a.seconds_per_sample)}
    assert b.epoch == 4 and list(b) == rest
    c = hvd.BalancedDistributedSampler(data, G, num_replicas=N + 1, rank=N, rebalance_every=0)
    buf.seek(0)
    saved = torch.load(buf)
    assert saved["cursor"] == 4 * G
    c.load_state_dict(saved)
    assert sorted(c.shares) == sorted([G // (N + 1) + (1 if i < G % (N + 1) else 0)
                                       for i in range(N + 1)])
    assert c.seconds_per_sample is None and c.seconds_by_worker == {} and c.cursor == 4 * G
    d = hvd.BalancedDistributedSampler(data, G + 1, rebalance_every=0)
    with pytest.raises(ValueError, match="the checkpoint's global batch size is %d" % G):
        buf.seek(0)
        d.load_state_dict(torch.load(buf))


@pytest.mark.parametrize("comp", ["none", "fp16"])
def test_weighted_gradient_with_compression(comp):
    """One weighted gradient (shares 1, ..., G-N+1) against the gradient of the global batch;
    fp16 on the wire rounds to about 3 decimal digits, hence its looser tolerance."""
    G = 4 * N
    g = torch.Generator().manual_seed(8)
    X, Y = torch.randn(G, 10, generator=g), torch.randint(0, 3, (G,), generator=g)
    ref = make_model()
    torch.nn.functional.cross_entropy(ref(X), Y).backward()
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   compression=getattr(hvd.Compression, comp))
    shares = [1] * (N - 1) + [G - N + 1]
    a = sum(shares[:R])
    opt.set_local_samples(shares[R], G)
    torch.nn.functional.cross_entropy(model(X[a:a + shares[R]]), Y[a:a + shares[R]]).backward()
    opt.synchronize()
    tol = 1e-6 if comp == "none" else 1e-3
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=tol), (p.grad - q.grad).abs().max()


def test_torch_state_syncs_samplers():
    """TorchState with a BalancedDistributedSampler and an ElasticSampler: sync() gives every
    rank rank 0's position and shares (and the union of processed indices), and restore()
    returns to the commit."""
    G = 3 * N
    data = list(range(G * 4))
    s = hvd.BalancedDistributedSampler(data, G, rebalance_every=0)
    e = hvd.elastic.ElasticSampler(data, shuffle=False)
    state = hvd.elastic.TorchState(balanced=s, elastic=e, step=0)
    it = iter(s)
    for _ in range(R + 1):  # the ranks disagree before the sync
        next(it)
    e.record_indices([R])
    s.update([G - N + 1] + [1] * (N - 1) if R == 0 else [1] * (N - 1) + [G - N + 1])
    state.sync()
    assert s.cursor == G and s.shares == [G - N + 1] + [1] * (N - 1)
    assert e.state_dict()["processed_indices"] == list(range(N))
    state.commit()
    next(iter(s))
    state.restore()
    assert s.cursor == G
