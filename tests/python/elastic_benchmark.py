"""Horovod's elastic synthetic benchmark for PyTorch, as a Horovod user writes it, with only
the import line naming chorus. It uses hvd.size() and hvd.rank() before hvd.elastic.run (to
scale the learning rate and to log on rank 0) and after it (the totals), as Horovod allows.
torchvision is not a dependency of the tests, so the model is a small CNN defined here
instead of torchvision's ResNet-50; everything else keeps the shape of the original:
warm-up batches, timed iterations of a few batches, a commit per batch, a reset callback
that rescales the learning rate. test_ux.py runs it under `chorus-run --elastic`."""
import argparse
import timeit

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim

import chorus.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch synthetic benchmark (elastic)")
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="compress gradients to fp16 for the allreduce")
parser.add_argument("--batch-size", type=int, default=8, help="input batch size")
parser.add_argument("--num-warmup-batches", type=int, default=2,
                    help="batches run before timing starts")
parser.add_argument("--num-batches-per-iter", type=int, default=2,
                    help="batches per timed iteration")
parser.add_argument("--num-iters", type=int, default=3, help="timed iterations")
parser.add_argument("--num-batches-per-commit", type=int, default=1,
                    help="batches between commits of the elastic state")
args = parser.parse_args()

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(0)


class SmallCNN(torch.nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 8 * 8, classes)

    def forward(self, x):  # x is (B, 3, 32, 32)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (B, 8, 16, 16)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # (B, 16, 8, 8)
        return self.fc(x.flatten(1))


model = SmallCNN()


def lr_scaler():
    return hvd.size()


lr = 0.01
optimizer = optim.SGD(model.parameters(), lr=lr * lr_scaler())
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression, op=hvd.Average)

data = torch.randn(args.batch_size, 3, 32, 32)
target = torch.LongTensor(args.batch_size).random_() % 10


def benchmark_step(state):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()
    state.batch += 1
    if state.batch == args.num_batches_per_commit:
        state.batch = 0
        state.commit()


def log(s):
    if hvd.rank() == 0:
        print(s, flush=True)


log("Model: SmallCNN")
log("Batch size: %d" % args.batch_size)
log("Number of CPUs: %d" % hvd.size())


@hvd.elastic.run
def run_benchmark(state):
    if not state.warm:
        log("Running warmup...")
        timeit.timeit(lambda: benchmark_step(state), number=args.num_warmup_batches)
        state.warm = True
        state.commit()
    if state.iter == 0:
        log("Running benchmark...")
    for x in range(state.iter, args.num_iters):
        t = timeit.timeit(lambda: benchmark_step(state), number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per CPU" % (x, img_sec))
        state.img_secs.append(img_sec)
        state.iter = x
        state.commit()


def on_state_reset():
    for group in optimizer.param_groups:
        group["lr"] = lr * lr_scaler()


state = hvd.elastic.TorchState(model, optimizer, img_secs=[], iter=0, batch=0, warm=False)
state.register_reset_callbacks([on_state_reset])
run_benchmark(state)

img_sec_mean = np.mean(state.img_secs)
img_sec_conf = 1.96 * np.std(state.img_secs)
log("Img/sec per CPU: %.1f +-%.1f" % (img_sec_mean, img_sec_conf))
log("Total img/sec on %d CPU(s): %.1f +-%.1f"
    % (hvd.size(), hvd.size() * img_sec_mean, hvd.size() * img_sec_conf))
