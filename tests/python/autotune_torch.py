"""chorus.torch's DistributedOptimizer with CHORUS_AUTOTUNE=1 (set by the caller): a small
model trained for enough steps that the engine tries every candidate, each rank on its own
random data. After every step the ranks' parameters must be bitwise identical (a hash of them,
allgathered), however the tuner switches algorithms, fusion thresholds and cycle times.

    CHORUS_AUTOTUNE=1 chorus-run -np 2 python3 tests/python/autotune_torch.py [steps]
"""
import hashlib
import sys

import numpy as np
import torch
import chorus.torch as hvd

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
hvd.init()
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                            torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
g = torch.Generator().manual_seed(100 + hvd.rank())
for step in range(steps):
    x = torch.randn(32, 256, generator=g)
    y = torch.randint(0, 10, (32,), generator=g)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    h = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    mine = torch.from_numpy(np.frombuffer(h.digest()[:8], dtype=np.int64).copy())
    every = hvd.allgather(mine, name="autotune.hash")
    if not bool((every == every[0]).all()):
        sys.exit("autotune_torch: step %d: the ranks' parameters differ: %s" % (step, every.tolist()))
print("autotune_torch: %d steps, parameters identical on %d ranks" % (steps, hvd.size()))
