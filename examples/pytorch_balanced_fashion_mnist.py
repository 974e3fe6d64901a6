#!/usr/bin/env python3
"""Fashion-MNIST with speed-proportional batches: each rank's part of the global batch follows
its measured speed (chorus.torch.BalancedDistributedSampler), and gradients are weighted by the
samples each rank took, so every step is still the step of the whole global batch.

    make && PYTHONPATH=python build/bin/chorus-run -np 2 /usr/bin/python3 \
        examples/pytorch_balanced_fashion_mnist.py --epochs 1 --slow-rank 1

--slow-rank R makes rank R slower with real extra work (--slow-extra forward passes of its
batch after each backward); --balance static keeps the even split, for comparison. The model,
the data and the test are those of examples/pytorch_fashion_mnist.py.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

import chorus.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_fashion_mnist import Net, add_data_args, start  # noqa: E402


def evaluate(model, test):
    sampler = torch.utils.data.distributed.DistributedSampler(
        test, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    correct, count = 0, 0
    model.eval()
    with torch.no_grad():
        for x, y in torch.utils.data.DataLoader(test, batch_size=256, sampler=sampler):
            correct += (model(x).argmax(1) == y).sum().item()
            count += len(y)
    sums = hvd.allreduce(torch.tensor([correct, count], dtype=torch.float64), op=hvd.Sum,
                         name="test_metrics")
    return (sums[0] / sums[1]).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--global-batch-size", type=int, default=128, help="over all ranks")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--balance", choices=["dynamic", "static"], default="dynamic")
    ap.add_argument("--rebalance-every", type=int, default=20, help="steps")
    ap.add_argument("--slow-rank", type=int, default=-1, help="this rank does extra work")
    ap.add_argument("--slow-extra", type=int, default=3,
                    help="extra forward passes per step on --slow-rank (3: about twice the "
                    "work of a step)")
    add_data_args(ap)
    args = ap.parse_args()
    train, test = start(args)
    sampler = hvd.BalancedDistributedSampler(
        train, args.global_batch_size, shuffle=True, seed=args.seed,
        rebalance_every=args.rebalance_every if args.balance == "dynamic" else 0)
    loader = torch.utils.data.DataLoader(train, batch_sampler=sampler)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    # The gradient of the mean loss over the global batch, whatever the shares.
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   sampler=sampler)
    slow = hvd.rank() == args.slow_rank

    for epoch in range(1, args.epochs + 1):
        model.train()
        sampler.set_epoch(epoch)
        t0, steps = time.time(), 0
        for x, y in loader:
            opt.zero_grad()
            with sampler.measure():  # this rank's compute: forward and backward
                F.cross_entropy(model(x), y).backward()
                if slow:
                    with torch.no_grad():
                        for _ in range(args.slow_extra):
                            model(x)
            opt.step()
            steps += 1
        dt = time.time() - t0
        acc = evaluate(model, test)
        if hvd.rank() == 0:
            t = sampler.seconds_per_sample
            print("epoch %d  %.1f s  %d steps  test accuracy %.4f  shares %s  (%s; ms per "
                  "sample %s)" % (epoch, dt, steps, acc, sampler.shares, args.balance,
                                  "not measured" if t is None else
                                  " ".join("%.3f" % (1e3 * x) for x in t)), flush=True)


if __name__ == "__main__":
    main()
