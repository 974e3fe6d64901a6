#!/usr/bin/python3
"""hvd_train: one Horovod-API training script, timed under Horovod itself or under Chorus.

--api horovod imports horovod.torch, --api chorus imports chorus.torch, each as hvd; the rest
is the same code: the MLP 784-512-256-10 (cross-entropy, SGD), --batch samples per rank per
step (default 64, random data, a different shard per rank), hvd.DistributedOptimizer and
hvd.broadcast_parameters. Run it as every rank of a job (horovodrun -np 2 ..., chorus-run -np 2
...). --warmup steps are not timed; then --steps steps; rank 0 prints the samples over all
ranks per second of the slowest rank, and each rank's CPU seconds per step (all its threads).

    chorus-run -np 2 /usr/bin/python3 bench/hvd_train.py --api chorus
Output (rank 0): "hvd_train: api A np N batch B/rank steps S time_s T samples_per_s X ...".
"""
import argparse
import importlib
import os
import resource
import sys
import time

from hipri import raise_priority  # bench/hipri.py, beside this script

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--api", choices=("horovod", "chorus"), required=True)
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    args = p.parse_args()
    raise_priority()
    hvd = importlib.import_module("horovod.torch" if args.api == "horovod" else "chorus.torch")
    hvd.init()
    rank, n = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 784, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    hvd.allreduce(torch.zeros(1), name="hvd_train.start")  # start together
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    took = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) / args.steps
    mine = torch.tensor([[took, cpu]], dtype=torch.float64)
    every = hvd.allgather(mine, name="hvd_train.times")
    if rank == 0:
        took = every[:, 0].max().item()
        print("hvd_train: api %s np %d batch %d/rank threads %d steps %d time_s %.3f "
              "samples_per_s %.1f cpu_ms_per_step %s" %
              (args.api, n, args.batch, torch.get_num_threads(), args.steps, took,
               args.steps * args.batch * n / took,
               ",".join("%.2f" % (c * 1e3) for c in every[:, 1].tolist())), flush=True)
    hvd.shutdown()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
