"""A second world of the same job in the same processes (Horovod's shutdown() then init()),
where rank 0 comes late: rank 1 must meet rank 0's new world, not connect to the address rank 0
listened at in the first one (which is closed). Prints "second world: <sum> on rank r"."""
import time

import torch

import chorus.torch as hvd

hvd.init()
assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()
rank = hvd.rank()
hvd.shutdown()
if rank == 0:
    time.sleep(2)  # the other ranks form the second world first
hvd.init()
print("second world: %g on rank %d" % (hvd.allreduce(torch.ones(1), op=hvd.Sum).item(), rank),
      flush=True)
