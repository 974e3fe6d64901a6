"""A plain PyTorch DistributedDataParallel program, as torchrun runs it: nothing of Chorus,
the process group from the environment (init_method="env://": RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) over gloo. test_ux.py runs it under `chorus-run -np 2`. It checks an allreduce,
trains a few steps and checks that every rank holds the same weights."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", init_method="env://")
rank, size = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])
torch.manual_seed(0)
torch.set_num_threads(1)

t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
want = size * (size + 1) / 2
assert t.item() == want, "allreduce gave %g, expected %g" % (t.item(), want)

model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(1 + rank)  # each rank its own data
X = torch.randn(32, 4, generator=g)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
for step in range(5):
    opt.zero_grad()
    loss = ((model(X) - Y) ** 2).mean()
    loss.backward()
    opt.step()

flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
everyone = [torch.zeros_like(flat) for _ in range(size)]
dist.all_gather(everyone, flat)
same = all(torch.equal(e, flat) for e in everyone)
print("ddp rank %d of %d (local %d) allreduce %g same weights %s loss %.4f"
      % (rank, size, local_rank, t.item(), same, loss.item()), flush=True)
dist.destroy_process_group()
