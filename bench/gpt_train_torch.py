#!/usr/bin/python3
"""gpt_train_torch: chorus-train's GPT trained by PyTorch on --np CPU ranks, data parallel with
DistributedDataParallel (--mode ddp) or with FSDP2 (--mode fsdp2: torch.distributed.fsdp's
fully_shard on each block, then on the whole model), over Gloo; for bench/gpt.sh.

The model is tests/python/gpt_torch.py's GPT (the torch model that the py_gpt_torch test
holds nn/gpt.c against), float32, starting from --params (bench/gpt_prep.c: chorus-train's
initial parameters for the shape and seed). The data are windows of --context + 1 tokens of
--tokens (llm.c's token file of the same fortune text, bench/gpt_prep.c), cut as nn/text.c
cuts them (window w starts at token w * context), drawn without replacement in an order of
--seed, --batch windows per rank per step. The step is chorus-train's: the mean cross-entropy
over the global batch's tokens, backward (the gradient averaged over the ranks by DDP's
buckets or FSDP2's reduce-scatter), clipping to global norm --clip, AdamW (betas 0.9, 0.999,
eps 1e-8, --weight-decay) at the constant rate --lr.

The ranks are started by this script (plain env:// variables: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), each with one thread: torch.set_num_threads(1), OMP_NUM_THREADS=1 and
MKL_NUM_THREADS=1. The first --warmup steps are not timed; the rate is the global batch's
tokens times the timed steps over the sum of rank 0's step times (every step ends in the
gradient's collective, so rank 0's step is the job's).

    python bench/gpt_train_torch.py --mode ddp --params P --tokens T --layers 4 --d-model 128 \\
        --heads 4 --context 64 --vocab 256
Output: one line "gpt_train_torch: mode M np N ... loss L tokens_per_s X".
"""
import argparse
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
from hipri import raise_priority  # noqa: E402  bench/hipri.py
from torchdist_train import wait_all  # noqa: E402  bench/torchdist_train.py


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", default="ddp", choices=("ddp", "fsdp2"))
    p.add_argument("-np", "--np", type=int, default=2)
    p.add_argument("--params", required=True, help="float32 parameters in nn/gpt.c's order")
    p.add_argument("--tokens", required=True, help="llm.c token file (uint16 tokens)")
    for name in ("layers", "d-model", "heads", "context", "vocab"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--batch", type=int, default=16, help="windows per rank per step")
    p.add_argument("--steps", type=int, default=40, help="steps in all, --warmup included")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--limit", type=int, default=300, help="seconds before the ranks are killed")
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.steps <= a.warmup:
        p.error("--steps must exceed --warmup")
    return a


def launch(argv, args):
    with socket.socket() as s:  # a free port; tiny race with other users, fine for a bench
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.np):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.np), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   MKL_NUM_THREADS="1")
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank"] +
                                      argv, env=env))
    return wait_all(procs, args.limit)


def load_tokens(path, np):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        if header[0] != 20240520 or header[1] != 1:
            sys.exit(f"gpt_train_torch: {path} is not an llm.c token file (magic {header[0]})")
        tokens = np.frombuffer(f.read(), dtype=np.uint16)
    if tokens.size != header[2]:
        sys.exit(f"gpt_train_torch: {path}: {tokens.size} tokens, its header says {header[2]}")
    return tokens.astype(np.int64)


def worker(args):
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from gpt_torch import GPT  # tests/python/gpt_torch.py

    raise_priority()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    T, V = args.context, args.vocab
    model = GPT(args.layers, args.d_model, args.heads, T, V)
    flat = model.flat()
    params = np.fromfile(args.params, dtype=np.float32)
    total = sum(p.numel() for p in flat)
    if params.size != total:
        sys.exit(f"gpt_train_torch: {args.params} holds {params.size} parameters, the model {total}")
    with torch.no_grad():
        off = 0
        for p in flat:
            p.copy_(torch.from_numpy(params[off:off + p.numel()]).view_as(p))
            off += p.numel()
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = DDP(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (n,))
        for b in model.blocks:
            fully_shard(b, mesh=mesh)
        net = fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay)

    tokens = load_tokens(args.tokens, np)
    windows = (tokens.size - 1) // T
    order = np.random.default_rng(args.seed).permutation(windows)
    span = np.arange(T + 1)

    def batch(step):
        g = order[(step * n * args.batch + np.arange(n * args.batch)) % windows]
        w = tokens[g[rank * args.batch:(rank + 1) * args.batch, None] * T + span]
        return torch.from_numpy(w[:, :T]), torch.from_numpy(w[:, 1:])

    timed, loss = 0.0, None
    for step in range(args.steps):
        x, y = batch(step)
        t0 = time.perf_counter()
        logits = net(x)
        loss = F.cross_entropy(logits.view(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(net.parameters(), args.clip)
        opt.step()
        if step >= args.warmup:
            timed += time.perf_counter() - t0
    if rank == 0:
        steps = args.steps - args.warmup
        print("gpt_train_torch: mode %s np %d torch %s threads %d params %d batch %d/rank context %d "
              "steps %d (%d timed) loss %.4f step_s %.6f tokens_per_s %.1f" %
              (args.mode, n, torch.__version__, torch.get_num_threads(), total, args.batch, T,
               args.steps, steps, loss.item(), timed / steps,
               n * args.batch * T * steps / timed), flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # no teardown: it is not what is measured


if __name__ == "__main__":
    argv = sys.argv[1:]
    a = parse_args(argv)
    if a.rank:
        worker(a)
    else:
        sys.exit(launch(argv, a))
