#!/usr/bin/env python3
"""PyTorch DDP (gloo) against chorus.torch.DistributedOptimizer, side by side in one run.

Both train the same MLP (784-512-256-10, SGD momentum 0.9, global batch 256 split over the
ranks) on Fashion-MNIST (Debian's dataset-fashion-mnist) with torch.set_num_threads(1) per
rank; one rank alone (no communication) is measured too, as the ceiling. Every rank is a
process started here with RANK WORLD_SIZE MASTER_ADDR MASTER_PORT, as torchrun would set
them. Within a run, samples/s = timed steps x global batch / their time; each configuration
is run --repeat times, interleaved (load bursts on a shared machine hit them alike), and the
table shows the median over runs and the ratio to DDP. Final parameters are checked equal across ranks.

    PYTHONPATH=python /usr/bin/python3 bench/ddp_vs_chorus.py [--np 2] [--steps 60] [--repeat 2]
"""

import argparse
import gzip
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
LABELS = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"


def worker(args):
    import numpy as np
    import torch
    torch.set_num_threads(1)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    def idx(path):
        with gzip.open(path) as f:
            b = f.read()
        nd = b[3]
        dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
        return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)

    n = args.batch * 64
    x = torch.from_numpy(idx(DATA)[:n].reshape(n, 784).astype(np.float32) / 255.0)
    y = torch.from_numpy(idx(LABELS)[:n].astype(np.int64))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    lr = 0.05
    if args.mode == "ddp" and size > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=size)
        model = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        sync = dist.barrier
    elif args.mode.startswith("chorus") and size > 1:
        sys.path.insert(0, os.path.join(REPO, "python"))
        import chorus.torch as hvd
        hvd.init()
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        cap = 0.0 if args.mode == "chorus-per-tensor" else 25.0
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       bucket_cap_mb=cap)
        sync = hvd.barrier
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

        def sync():
            pass
    local = args.batch // size
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(i):
        b = (i % 64) * args.batch + rank * local
        opt.zero_grad()
        loss = loss_fn(model(x[b:b + local]), y[b:b + local])
        loss.backward()
        opt.step()
        return loss

    for i in range(args.warmup):
        step(i)
    sync()
    times = []
    t0 = time.perf_counter()
    for i in range(args.steps):
        t = time.perf_counter()
        loss = step(args.warmup + i)
        times.append(time.perf_counter() - t)
    sync()
    dt = time.perf_counter() - t0
    med = statistics.median(times)
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    digest = float(params.double().abs().sum())
    # Throughput is the mean over the timed steps; the median step is printed too (a large
    # gap between the two means load bursts, or steps of two kinds).
    print(json.dumps({"rank": rank, "samples_per_s": args.steps * args.batch / dt,
                      "step_ms": 1000 * dt / args.steps, "median_step_ms": 1000 * med,
                      "loss": float(loss), "digest": digest}), flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def launch(mode, np_, args):
    port = str(free_port())
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE=str(np_),
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch)]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(np_)]
    res = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit("%s np=%d failed:\n%s%s" % (mode, np_, out, err))
        res.append(json.loads(out.strip().splitlines()[-1]))
    digests = {r["digest"] for r in res}
    if len(digests) != 1:
        raise SystemExit("%s np=%d: ranks ended with different parameters" % (mode, np_))
    return res[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=256, help="global batch")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--mode", default="single")
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    configs = [("single", 1), ("ddp", args.np), ("chorus", args.np),
               ("chorus-per-tensor", args.np)]
    runs = {c: [] for c in configs}
    for rep in range(args.repeat):
        for mode, n in configs:
            r = launch(mode, n, args)
            runs[(mode, n)].append(r)
            print("# run %d %-17s np=%d  %8.0f samples/s  mean step %6.2f ms  median %6.2f ms"
                  "  loss %.4f" % (rep + 1, mode, n, r["samples_per_s"], r["step_ms"],
                                   r["median_step_ms"], r["loss"]), flush=True)
    med = {c: statistics.median(r["samples_per_s"] for r in runs[c]) for c in configs}
    ddp = med[("ddp", args.np)]
    print("| training (MLP 784-512-256-10, batch %d) | ranks | samples/s | ms/step | vs DDP |"
          % args.batch)
    print("|---|---:|---:|---:|---:|")
    names = {"single": "one process, no communication", "ddp": "PyTorch DDP (gloo)",
             "chorus": "chorus.torch DistributedOptimizer (engine)",
             "chorus-per-tensor": "chorus.torch, engine, one allreduce per tensor "
                                  "(bucket_cap_mb=0)"}
    for mode, n in configs:
        sps = med[(mode, n)]
        print("| %s | %d | %.0f | %.2f | %.2fx |" % (names[mode], n, sps,
                                                     1000.0 * args.batch / sps, sps / ddp))
    load = os.getloadavg()[0]
    print("# load average at the end: %.2f; %d runs each, interleaved, medians"
          % (load, args.repeat))


if __name__ == "__main__":
    main()
