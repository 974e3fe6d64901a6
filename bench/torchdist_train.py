#!/usr/bin/python3
"""torchdist_train: one DistributedDataParallel training script, timed on a torch.distributed
backend (gloo or chorus), CPU tensors.

--model mlp (the default) is the MLP 784-512-256-10 (0.54 M parameters, 2.1 MiB of float32
gradients) with cross-entropy; --model square is --layers square Linear layers of --width
(4 x 1024: 4.2 M parameters, 16 MiB of gradients) with MSE. --batch samples per rank per step
(default 64), SGD, random data (the same on both backends), DDP's default buckets.

--launcher picks who starts the ranks:
  self        this script, with plain env:// variables (RANK, WORLD_SIZE, MASTER_ADDR,
              MASTER_PORT), each rank with OMP_NUM_THREADS=1 unless set;
  chorus-run  chorus-run -np N (found on PATH or in $CHORUS_RUN), as users start it: nothing
              set beyond what chorus-run sets;
  torchrun    torchrun --standalone --nproc_per_node N (python -m torch.distributed.run of
              this Python; torch 1.x's needs --redirects 1 --tee 1, which are passed there).
Under chorus-run and torchrun the script does not touch torch's thread count: what the
launcher gives the ranks is what is measured.

--warmup steps are not timed; then --steps steps; the rate is samples over all ranks per
second of the slowest rank. Rank 0 also prints each rank's CPU seconds per step (user+system
over all its threads) and its voluntary/involuntary context switches per step: numbers that
load changes far less than the rate, so they show a spinning or starved thread on any host.

    /usr/bin/python3 bench/torchdist_train.py --backend chorus -np 2 --launcher chorus-run
Output: one line "torchdist_train: backend B launcher L np N ... samples_per_s X ...".
"""
import argparse
import os
import resource
import shutil
import socket
import subprocess
import sys
import time

from hipri import raise_priority  # bench/hipri.py, beside this script


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="gloo", choices=("gloo", "chorus"))
    p.add_argument("--launcher", default="self", choices=("self", "chorus-run", "torchrun"))
    p.add_argument("-np", type=int, default=2)
    p.add_argument("--model", default="mlp", choices=("mlp", "square"))
    p.add_argument("--width", type=int, default=1024, help="--model square: layer width")
    p.add_argument("--layers", type=int, default=4, help="--model square: layers")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--limit", type=int, default=300, help="seconds before the ranks are killed")
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def wait_all(procs, limit):
    status = 0
    deadline = time.monotonic() + limit
    for p in procs:
        try:
            status = max(status, p.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            print("torchdist_train: the ranks did not finish within %d s; stopped" % limit,
                  file=sys.stderr)
            status = 1
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return status


def launch(argv, args):
    me = [sys.executable, os.path.abspath(__file__), "--rank"] + argv
    if args.launcher == "chorus-run":
        run = os.environ.get("CHORUS_RUN") or shutil.which("chorus-run")
        if not run:
            sys.exit("torchdist_train: chorus-run not found (PATH or $CHORUS_RUN)")
        return wait_all([subprocess.Popen([run, "-np", str(args.np)] + me)], args.limit)
    if args.launcher == "torchrun":
        import torch
        old = int(torch.__version__.split(".")[0]) < 2
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", str(args.np)] + (["--redirects", "1", "--tee", "1"]
                                                    if old else [])
        env = dict(os.environ)
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        return wait_all([subprocess.Popen(cmd + me[1:], env=env)], args.limit)
    with socket.socket() as s:  # a free port; tiny race with other users, fine for a bench
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.np):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.np), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs.append(subprocess.Popen(me, env=env))
    return wait_all(procs, args.limit)


def make_model(args, torch):
    if args.model == "mlp":
        dims, loss = [784, 512, 256, 10], torch.nn.functional.cross_entropy
    else:
        dims, loss = [args.width] * (args.layers + 1), torch.nn.functional.mse_loss
    layers = []
    for i in range(len(dims) - 1):
        layers += [torch.nn.Linear(dims[i], dims[i + 1]), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]), dims, loss


def usage():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return [ru.ru_utime + ru.ru_stime, ru.ru_nvcsw, ru.ru_nivcsw]


def worker(args):
    import torch
    import torch.distributed as dist
    raise_priority()
    from torch.nn.parallel import DistributedDataParallel as DDP

    if args.backend == "chorus":
        import chorus.torch.distributed  # noqa: F401
    if args.launcher == "self":
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net, dims, loss_fn = make_model(args, torch)
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, dims[0], generator=g)
    if args.model == "mlp":
        y = torch.randint(0, dims[-1], (args.batch,), generator=g)
    else:
        y = torch.randn(args.batch, dims[-1], generator=g)

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    u0 = usage()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    took = time.perf_counter() - t0
    u1 = usage()
    per_step = [(b - a) / args.steps for a, b in zip(u0, u1)]
    mine = torch.tensor([took] + per_step, dtype=torch.float64)
    every = [torch.zeros_like(mine) for _ in range(n)]
    dist.all_gather(every, mine)
    if rank == 0:
        took = max(t[0].item() for t in every)
        params = sum(p.numel() for p in model.parameters())
        print("torchdist_train: backend %s launcher %s np %d model %s params %d batch %d/rank "
              "threads %d steps %d time_s %.3f samples_per_s %.1f cpu_ms_per_step %s "
              "vcsw_per_step %s ivcsw_per_step %s" %
              (args.backend, args.launcher, n, args.model, params, args.batch,
               torch.get_num_threads(), args.steps, took, args.steps * args.batch * n / took,
               ",".join("%.2f" % (t[1].item() * 1e3) for t in every),
               ",".join("%.1f" % t[2].item() for t in every),
               ",".join("%.1f" % t[3].item() for t in every)), flush=True)
    # No teardown: torch 1.13's Gloo group can deadlock in it (its worker waits for the GIL
    # the main thread holds), and either backend's teardown is not what is measured.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    argv = sys.argv[1:]
    a = parse_args(argv)
    if a.rank:
        worker(a)
    else:
        sys.exit(launch(argv, a))
