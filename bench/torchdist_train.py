#!/usr/bin/python3
"""torchdist_train: one DistributedDataParallel training script, timed on a torch.distributed
backend (gloo or chorus), CPU tensors.

The model is an MLP of --layers square Linear layers of --width (default 4 x 1024: 4.2 M
parameters, 16 MiB of float32 gradients) on a batch of --batch samples per rank (default 32),
SGD. With so few samples per step the backward pass takes about as long as the all-reduce of
its 16 MiB of gradients, so the step rate shows the backend rather than the BLAS. Data are
random (the same on both backends); DDP's default 25 MiB buckets.

Ranks are started by this script (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: plain env://),
each with OMP_NUM_THREADS=1 unless set (torch's BLAS, OpenBLAS on Debian, one thread per
rank). --warmup steps are not timed; then --steps steps; the rate is samples over all ranks per
second of the slowest rank.

    /usr/bin/python3 bench/torchdist_train.py --backend chorus -np 2
Output: one line "torchdist_train: backend B np N ... samples_per_s X".
"""
import argparse
import os
import socket
import subprocess
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="gloo", choices=("gloo", "chorus"))
    p.add_argument("-np", type=int, default=2)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--limit", type=int, default=300, help="seconds before the ranks are killed")
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def launch(argv, args):
    with socket.socket() as s:  # a free port; tiny race with other users, fine for a bench
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.np):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.np), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank"] +
                                      argv, env=env))
    status = 0
    deadline = time.monotonic() + args.limit
    for p in procs:
        try:
            status = max(status, p.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            print("torchdist_train: a rank did not finish within %d s; stopped" % args.limit,
                  file=sys.stderr)
            status = 1
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return status


def worker(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if args.backend == "chorus":
        import chorus.torch.distributed  # noqa: F401
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randn(args.batch, args.width, generator=g)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    took = torch.tensor([time.perf_counter() - t0])
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print("torchdist_train: backend %s np %d params %d batch %d/rank steps %d time_s %.3f "
              "samples_per_s %.1f" % (args.backend, n, params, args.batch, args.steps,
                                      took.item(), args.steps * args.batch * n / took.item()),
              flush=True)
    # No teardown: torch 1.13's Gloo group can deadlock in it (its worker waits for the GIL
    # the main thread holds), and either backend's teardown is not what is measured.
    dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    argv = sys.argv[1:]
    a = parse_args(argv)
    if a.rank:
        worker(a)
    else:
        sys.exit(launch(argv, a))
