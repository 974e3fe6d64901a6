"""An elastic chorus.torch training script (Horovod elastic style), run by test_launch.py
under `chorus-run --elastic`. Worker CHORUS_TEST_DIE_WORKER (if set) dies at step 20 of the
first generation; the others go on from the last commit with fewer ranks."""
import os

import torch

import chorus.torch as hvd

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(0)
STEPS = 40
g = torch.Generator().manual_seed(1)
X = torch.randn(48, 4, generator=g)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 1.0

model = torch.nn.Linear(4, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5),
                               named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)
die = os.environ.get("CHORUS_TEST_DIE_WORKER")


def on_reset():
    print("reset: generation %d rank %d of %d at step %d"
          % (hvd.elastic.generation(), hvd.rank(), hvd.size(), state.step), flush=True)


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    while state.step < STEPS:
        r, n = hvd.rank(), hvd.size()
        opt.zero_grad()
        loss = ((model(X[r::n]) - Y[r::n]) ** 2).mean()
        loss.backward()
        opt.step()
        state.step += 1
        if (die is not None and state.step == 20 and hvd.elastic.generation() == 1
                and os.environ.get("CHORUS_WORKER_ID") == die):
            os._exit(7)  # dies without a word, between a step and the commit
        state.commit()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    everyone = hvd.allgather(flat.unsqueeze(0))
    same = all(torch.equal(everyone[i], flat) for i in range(hvd.size()))
    return hvd.size(), same, float(flat.sum())


size, same, digest = train(state)
print("done: step %d size %d same %s digest %.10f" % (state.step, size, same, digest),
      flush=True)
# After run() the last generation's ranks are still a job (as Horovod's examples use it: a
# test() that averages metrics): collectives work until exit.
mean_rank = hvd.allreduce(torch.tensor(float(hvd.rank())), name="after.run").item()
wid = os.environ.get("CHORUS_WORKER_ID", str(hvd.rank()))
names = hvd.allgather_object(wid)
print("after run: rank %d of %d, mean rank %.2f, workers %s"
      % (hvd.rank(), hvd.size(), mean_rank, sorted(names)), flush=True)
