#!/usr/bin/python3
"""hvd_step_path: what chorus.torch's DistributedOptimizer costs per step without the model's
compute: the hooks of every parameter, the bucket's grouped allreduce and synchronize(),
called in a loop on the gradients of one backward pass of bench/hvd_train.py's MLP
(784-512-256-10). Prints the wall time per step and the main thread's CPU time per step
(the Python side and the enqueue and wait calls; the engine thread's work is in the wall
time only). Run it as every rank of a job:

    chorus-run -np 2 /usr/bin/python3 bench/hvd_step_path.py [--steps 3000]
Output (rank 0): "hvd_step_path: np N steps S wall_us_per_step W main_cpu_us_per_step C".
"""
import argparse
import time

from hipri import raise_priority  # bench/hipri.py, beside this script

import torch

import chorus.torch as hvd


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=200)
    args = p.parse_args()
    raise_priority()
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters())
    torch.nn.functional.cross_entropy(model(torch.randn(64, 784)),
                                      torch.randint(0, 10, (64,))).backward()
    opt.synchronize()
    # the hooks autograd would run, in backward order
    hooks = [opt._make_hook(q) for q in reversed(list(model.parameters()))]

    def step():
        for h in hooks:
            h()
        opt.synchronize()

    for _ in range(args.warmup):
        step()
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(args.steps):
        step()
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    if hvd.rank() == 0:
        print("hvd_step_path: np %d steps %d wall_us_per_step %.1f main_cpu_us_per_step %.1f"
              % (hvd.size(), args.steps, wall / args.steps * 1e6, cpu / args.steps * 1e6),
              flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
