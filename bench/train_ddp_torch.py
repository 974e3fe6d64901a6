#!/usr/bin/python3
"""PyTorch baselines for chorus-train: DistributedDataParallel (gloo, CPU), or one plain
process with several intra-op threads.

Trains the same 784-512-256-10 MLP on Fashion-MNIST with the same global batch split
across ranks, SGD with Nesterov momentum, --threads intra-op threads per rank, and prints the
training throughput in samples/s over all ranks, timed after a warm-up, like chorus-train.

    /usr/bin/python3 bench/train_ddp_torch.py --np 2 --batch 256 --steps 200
    /usr/bin/python3 bench/train_ddp_torch.py --plain --threads 2 --batch 256   # no DDP
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

DATA = "/usr/share/datasets/fashion-mnist"


def load(path_dir):
    with gzip.open(os.path.join(path_dir, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(path_dir, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (x.astype(np.float32) / 255.0 - 0.2860) / 0.3530
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))


def worker(rank, args):
    torch.set_num_threads(args.threads)
    if not args.plain:
        if not args.env:
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = str(args.port)
        dist.init_process_group("gloo", rank=rank, world_size=args.np)
    torch.manual_seed(1)
    x, y = load(args.data)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    ddp = model if args.plain else nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(x.shape[0], generator=g)
    per = args.batch // args.np
    steps_per_epoch = x.shape[0] // args.batch
    t0 = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if not args.plain:
                dist.barrier()
            t0 = time.perf_counter()
        s = step % steps_per_epoch
        idx = perm[s * args.batch + rank * per: s * args.batch + (rank + 1) * per]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x[idx]), y[idx])
        loss.backward()
        opt.step()
    if not args.plain:
        dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        what = "torch plain" if args.plain else "torch DDP (gloo)"
        print(f"{what} mlp: {args.np} ranks x {args.threads} thread, global batch "
              f"{args.batch}: {args.steps * args.batch / dt:.0f} samples/s "
              f"({dt / args.steps * 1e3:.2f} ms/step, loss {loss.item():.3f})")
    if not args.plain:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--plain", action="store_true",
                    help="one process, no DDP (the --threads intra-op threads do the work)")
    ap.add_argument("--env", action="store_true",
                    help="this process is one rank, started by a launcher: RANK, WORLD_SIZE, "
                    "MASTER_ADDR and MASTER_PORT come from the environment (other hosts)")
    args = ap.parse_args()
    if args.env:
        args.np = int(os.environ["WORLD_SIZE"])
        worker(int(os.environ["RANK"]), args)
    elif args.plain:
        args.np = 1
        worker(0, args)
    else:
        mp.spawn(worker, args=(args,), nprocs=args.np, join=True)


if __name__ == "__main__":
    main()
