"""Compression.topk, randomk and powersgd: the error-feedback invariant through allreduce
(outputs plus every rank's residual sum to the gradients), and DistributedOptimizer training
with each, the ranks holding the same parameters bit for bit and the loss going down."""

import pytest
import torch

import chorus.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)
SPECS = [("topk", 0.05), ("randomk", 0.05), ("powersgd", 2)]


def make(kind, arg):
    return getattr(hvd.Compression, kind)(arg)


@pytest.mark.parametrize("kind,arg", SPECS)
def test_error_feedback_invariant(kind, arg):
    comp = make(kind, arg)
    shape, steps = (32, 64), 12
    sent = torch.zeros(shape, dtype=torch.float64)
    total = torch.zeros(shape, dtype=torch.float64)
    for s in range(steps):
        g = torch.Generator().manual_seed(100 * s + R)
        grad = torch.randint(-5, 6, shape, generator=g).float()
        out = hvd.allreduce(grad, op=hvd.Sum, name="ef", compression=comp)
        sent += out.double()
        total += hvd.allreduce(grad.double(), op=hvd.Sum, name="ef.dense")
    resid = torch.tensor(comp.residual("ef", 32 * 64), dtype=torch.float64).reshape(shape)
    resid = hvd.allreduce(resid, op=hvd.Sum, name="ef.resid")
    err = (sent + resid - total).abs().max().item()
    tol = 0.0 if kind != "powersgd" else 1e-4 * total.abs().max().item()
    assert err <= tol, "%s: sent + residual differs from the gradients by %g" % (kind, err)


def test_spec_errors():
    with pytest.raises(ValueError, match="the ratio must be in"):
        hvd.Compression.topk(1.5)
    with pytest.raises(ValueError, match="whole number from 1 to 64"):
        hvd.Compression.powersgd(0)
    with pytest.raises(NotImplementedError, match="runs in the engine"):
        hvd.Compression.topk(0.1).compress(torch.zeros(3))


@pytest.mark.parametrize("kind,arg", SPECS)
def test_distributed_optimizer(kind, arg):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Tanh(), torch.nn.Linear(48, 4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   compression=make(kind, arg))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    w = torch.Generator().manual_seed(7)
    teacher = torch.randn(64, 4, generator=w)
    losses = []
    for step in range(30):
        g = torch.Generator().manual_seed(1000 * step + R)
        x = torch.randn(16, 64, generator=g)
        y = (x @ teacher).argmax(1)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(hvd.allreduce(loss.detach(), name="loss").item())
    mine = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = hvd.allgather(mine.unsqueeze(0))
    for r in range(N):
        assert torch.equal(everyone[r], mine), "%s: rank %d's parameters differ" % (kind, r)
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5]), "%s: loss %s" % (kind, losses)
