"""DistributedDataParallel and ZeroRedundancyOptimizer give the same parameters on the "chorus"
backend as on Gloo, for the same seed and data.

Run as every rank of a job (chorus-run -np N). The default group is "chorus"; a Gloo group of
the same ranks is made beside it, and the same training (each rank its own shard of a fixed
data set) runs once on each: DDP with SGD and momentum, then DDP with ZeroRedundancyOptimizer
(Adam). With 2 ranks every sum has one order, so the parameters must be bit-identical; with
more, Gloo may add in another order, so they must agree to float32 rounding. Prints "torchdist
ddp: ... identical/close to gloo" on success; raises otherwise.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus.torch.distributed  # noqa: F401


def model():
    torch.manual_seed(1234)  # the same start everywhere: DDP's broadcast is checked apart
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8),
                               torch.nn.Tanh(), torch.nn.Linear(8, 1))


def train(pg, zero, steps=12):
    rank, size = dist.get_rank(), dist.get_world_size()
    m = model()
    if rank != 0:  # DDP must broadcast rank 0's parameters
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.5)
    ddp = DDP(m, process_group=pg, bucket_cap_mb=0.001)  # several buckets
    if zero:
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam,
                                      process_group=pg, lr=0.01)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(99)
    x = torch.randn(steps, 8 * size, 16, generator=g)
    y = torch.randn(steps, 8 * size, 1, generator=g)
    for s in range(steps):
        opt.zero_grad()
        mine = slice(8 * rank, 8 * (rank + 1))
        loss = torch.nn.functional.mse_loss(ddp(x[s, mine]), y[s, mine])
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


def main():
    dist.init_process_group("chorus")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(list(range(size)), backend="gloo")
    chorus = dist.group.WORLD
    for zero in (False, True):
        a, b = train(chorus, zero), train(gloo, zero)
        what = "ZeroRedundancyOptimizer" if zero else "DDP+SGD"
        for i, (pa, pb) in enumerate(zip(a, b)):
            ok = torch.equal(pa, pb) if size == 2 else torch.allclose(pa, pb, rtol=1e-5,
                                                                      atol=1e-6)
            if not ok:
                raise AssertionError("rank %d: %s: parameter %d differs from gloo by %g" %
                                     (rank, what, i, (pa - pb).abs().max().item()))
        # and every rank holds the same parameters
        for p in a:
            ref = p.clone()
            dist.broadcast(ref, 0)
            if not torch.equal(ref, p):
                raise AssertionError("rank %d: %s: parameters differ from rank 0's" % (rank, what))
        print("torchdist ddp: %s on %d ranks: %s to gloo" %
              (what, size, "identical" if size == 2 else "close"))
    # No teardown: torch's Gloo group can deadlock in its destructor (its worker thread waits
    # for the GIL that the destroying thread holds; seen with torch 2.1).
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
