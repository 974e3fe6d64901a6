"""DistributedOptimizer(op=Adasum) against a serial reference of Horovod's definition: every
rank steps with its own gradient; the steps are combined per tensor with the pairwise Adasum
rule, neighbours first ((0,1), (2,3), then the pairs' results), and added to the weights
as they were. Runs on 2 and 4 ranks (Adasum needs a power of two)."""

import pytest
import torch

import chorus.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()


def adasum_pair(a, b):
    # Horovod's Adasum of two vectors (the Adasum paper's formula)
    a, b = a.double().flatten(), b.double().flatten()
    dot = float(a @ b)
    na, nb = float(a @ a), float(b @ b)
    ka = 1.0 - dot / (2 * na) if na else 1.0
    kb = 1.0 - dot / (2 * nb) if nb else 1.0
    return ka * a + kb * b


def adasum_ranks(vectors):
    while len(vectors) > 1:
        vectors = [adasum_pair(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    return vectors[0]


def data(r):
    g = torch.Generator().manual_seed(100 + r)
    return torch.randn(8, 5, generator=g), torch.randint(0, 3, (8,), generator=g)


def model():
    torch.manual_seed(11)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))


def local_step(m, opt_cls, r, **kw):
    """The step rank r takes alone: {name: new - old}."""
    opt = opt_cls(m.parameters(), **kw)
    before = {k: v.detach().clone() for k, v in m.named_parameters()}
    x, y = data(r)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(m(x), y).backward()
    opt.step()
    return {k: v.detach() - before[k] for k, v in m.named_parameters()}


@pytest.mark.parametrize("opt_cls,kw", [(torch.optim.SGD, {"lr": 0.5}),
                                        (torch.optim.Adam, {"lr": 0.01})], ids=["sgd", "adam"])
def test_adasum_optimizer_matches_reference(opt_cls, kw):
    m = model()
    start = {k: v.detach().clone() for k, v in m.named_parameters()}
    opt = hvd.DistributedOptimizer(opt_cls(m.parameters(), **kw),
                                   named_parameters=m.named_parameters(), op=hvd.Adasum)
    x, y = data(R)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(m(x), y).backward()
    opt.step()
    steps = [local_step(model(), opt_cls, r, **kw) for r in range(N)]
    for k, v in m.named_parameters():
        want = start[k].double() + adasum_ranks([s[k] for s in steps]).reshape(v.shape)
        assert torch.allclose(v.detach().double(), want, atol=1e-6), k
    # every rank holds the same weights
    flat = torch.cat([v.detach().flatten() for v in m.parameters()])
    assert torch.equal(hvd.broadcast(flat, 0), flat)


def test_adasum_parallel_steps_average_orthogonal_add():
    # the rule's two limits, through allreduce(op=Adasum): equal vectors give themselves,
    # orthogonal ones their sum
    same = hvd.allreduce(torch.tensor([1.0, 2.0, 3.0]), op=hvd.Adasum)
    assert torch.allclose(same, torch.tensor([1.0, 2.0, 3.0]))
    e = torch.zeros(N)
    e[R] = 1.0
    assert torch.allclose(hvd.allreduce(e, op=hvd.Adasum), torch.ones(N))
