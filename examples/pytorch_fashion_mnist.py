#!/usr/bin/env python3
"""Data-parallel training of a small CNN on Fashion-MNIST with chorus.torch, Horovod style.

    make && PYTHONPATH=python build/bin/chorus-run -np 2 /usr/bin/python3 \
        examples/pytorch_fashion_mnist.py --epochs 1

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist/*-ubyte.gz), read
with gzip + numpy. Every rank trains on its shard of each epoch; the learning rate is scaled
by the number of ranks (the global batch grows with it), rank 0's initial weights and
optimizer state are broadcast, gradients are averaged by DistributedOptimizer while backward
runs, and only rank 0 prints.
"""

import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import chorus.torch as hvd

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (the MNIST format) as a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic >> 8 != 0x08:
        raise ValueError("%s: not an unsigned-byte IDX file (magic %#x)" % (path, magic))
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, limit):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(DATA, "%s-images-idx3-ubyte.gz" % prefix))
    y = read_idx(os.path.join(DATA, "%s-labels-idx1-ubyte.gz" % prefix))
    if limit:
        x, y = x[:limit], y[:limit]
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - 0.2860) / 0.3530  # Fashion-MNIST mean and std
    return torch.utils.data.TensorDataset(x, torch.from_numpy(y.astype(np.int64)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)   # (B,1,28,28) -> (B,16,24,24) -> pool (B,16,12,12)
        self.conv2 = nn.Conv2d(16, 32, 5)  # -> (B,32,8,8) -> pool (B,32,4,4)
        self.fc1 = nn.Linear(32 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def add_data_args(ap):
    ap.add_argument("--limit", type=int, default=0, help="use only the first N images")
    ap.add_argument("--seed", type=int, default=42)


def start(args):
    """Starts chorus.torch, seeds torch, and loads the data: (train, test) datasets."""
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # one core per rank; the ranks share the machine
    return load("train", args.limit), load("test", args.limit // 6 if args.limit else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=0.01, help="per rank; scaled by the size")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--fp16-allreduce", action="store_true")
    add_data_args(ap)
    args = ap.parse_args()
    train, test = start(args)
    sampler = torch.utils.data.distributed.DistributedSampler(
        train, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test, batch_size=256, sampler=test_sampler)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   compression=compression)

    for epoch in range(1, args.epochs + 1):
        model.train()
        sampler.set_epoch(epoch)
        t0, seen, total_loss = time.time(), 0, 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            seen += len(x)
            total_loss += loss.item() * len(x)
        train_loss = hvd.allreduce(torch.tensor(total_loss / max(seen, 1)), name="train_loss")
        dt = time.time() - t0

        model.eval()
        correct, count, tloss = 0, 0, 0.0
        with torch.no_grad():
            for x, y in test_loader:
                out = model(x)
                tloss += F.cross_entropy(out, y, reduction="sum").item()
                correct += (out.argmax(1) == y).sum().item()
                count += len(y)
        sums = hvd.allreduce(torch.tensor([correct, count, tloss], dtype=torch.float64),
                             op=hvd.Sum, name="test_metrics")
        if hvd.rank() == 0:
            print("epoch %d  train loss %.4f  test loss %.4f  test accuracy %.2f%%  "
                  "%.0f samples/s on %d ranks" % (epoch, train_loss.item(), sums[2] / sums[1],
                                                  100.0 * sums[0] / sums[1],
                                                  seen * hvd.size() / dt, hvd.size()),
                  flush=True)


if __name__ == "__main__":
    main()
