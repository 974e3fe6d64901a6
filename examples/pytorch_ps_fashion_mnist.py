#!/usr/bin/env python3
"""A PyTorch MLP on Fashion-MNIST trained against Chorus parameter servers (chorus.ps).

    make && PYTHONPATH=python build/bin/chorus-run -np 3 /usr/bin/python3 \
        examples/pytorch_ps_fashion_mnist.py --mode async --epochs 1

Rank 0 serves (--servers 1): it holds every parameter and applies SGD with momentum. The other
ranks are workers: each trains on its own shard of the data, pushes every parameter's gradient
and pulls the parameters back, both started at once and completed together. In async mode a
worker never waits for another; in sync mode the servers apply one summed gradient per round;
in ssp mode a worker may run --staleness steps ahead of the slowest. Worker 0 evaluates the
final parameters on the test set. Data: Debian's dataset-fashion-mnist, read as in
examples/pytorch_fashion_mnist.py.
"""

import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_fashion_mnist import load  # noqa: E402  (same data loading)

import chorus.ps  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="async", choices=["sync", "async", "ssp"])
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--staleness", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128, help="per worker")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many (0: none)")
    ap.add_argument("--limit", type=int, default=0, help="use only this many training images")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)  # every rank builds the same initial model
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    params = list(model.parameters())
    ps = chorus.ps.ParameterServer(mode=a.mode, servers=a.servers, staleness=a.staleness,
                                   momentum=0.9, nesterov=True)
    for key, p in enumerate(params):
        ps.register(key, p.data)
    if ps.is_server:
        ps.serve()
        st = ps.stats()
        print("server: %d updates, %.1f MiB held, MiB pushed per worker %s" % (
            st["updates"], st["server_bytes"] / 2**20,
            ["%.1f" % (b / 2**20) for b in st["worker_bytes_pushed"]]), flush=True)
        ps.close()
        return
    train = load("train", a.limit)
    shard = torch.utils.data.Subset(train, range(ps.worker_index, len(train), ps.num_workers))
    loader = torch.utils.data.DataLoader(shard, batch_size=a.batch, shuffle=True)
    step = 0
    for epoch in range(a.epochs):
        for x, y in loader:
            model.zero_grad()
            loss = F.cross_entropy(model(x), y) / ps.num_workers
            loss.backward()
            hs = [ps.push(k, p.grad, a.lr) for k, p in enumerate(params)]
            hs += [ps.pull(k, p.data) for k, p in enumerate(params)]
            for h in hs:
                h.wait()
            step += 1
            if ps.worker_index == 0 and step % 100 == 0:
                print("epoch %d step %d loss %.4f" % (epoch + 1, step,
                                                     loss.item() * ps.num_workers), flush=True)
            if a.max_steps and step >= a.max_steps:
                break
    for k, p in enumerate(params):
        ps.pull(k, p.data).wait()
    ps.leave()
    if ps.worker_index == 0:
        test = load("test", 0)
        with torch.no_grad():
            x, y = test.tensors
            acc = (model(x).argmax(1) == y).float().mean().item()
        print("worker 0: %d steps, test accuracy %.4f" % (step, acc), flush=True)
    ps.close()


if __name__ == "__main__":
    main()
