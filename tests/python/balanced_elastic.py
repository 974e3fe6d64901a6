"""A chorus.torch job with a BalancedDistributedSampler under `chorus-run --elastic`, run by
tests/list/python.list (py_balance_elastic). Worker 0 does four times the work per sample
of the others; worker CHORUS_TEST_DIE_WORKER dies at step 5 of the first generation, and the
survivors go on from the last commit with fewer ranks, their shares at once from the times
measured for them. Rank 0 prints the shares after every re-balance and, after every epoch,
whether the ranks' batches held every sample once."""
import os
import time

import torch

import chorus.torch as hvd

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(0)
G, STEPS_PER_EPOCH, EPOCHS = 24, 6, 3
L = G * STEPS_PER_EPOCH
g = torch.Generator().manual_seed(1)
X = torch.randn(L, 8, generator=g)
Y = X @ torch.randn(8, 1, generator=g)
W = torch.randn(256, 256, generator=g) / 16  # the work per sample (see work())

model = torch.nn.Linear(8, 1)
sampler = hvd.BalancedDistributedSampler(X, G, seed=2, rebalance_every=2, clock=time.thread_time)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                               named_parameters=model.named_parameters(), sampler=sampler)
state = hvd.elastic.TorchState(model=model, optimizer=opt, sampler=sampler, epoch=0, step=0,
                               seen=[])
me = os.environ.get("CHORUS_WORKER_ID")
die = os.environ.get("CHORUS_TEST_DIE_WORKER")


def work(n, times):
    h = torch.ones(n, 256)
    for _ in range(100 * times):
        h = torch.tanh(h @ W)


def say(*what):
    if hvd.rank() == 0:
        print(*what, flush=True)


def slow_share():
    ids = hvd.allgather_object(me)
    return sampler.shares[ids.index("0")] if "0" in ids else None


def on_reset():
    slow = slow_share()
    say("reset: generation %d size %d shares %s at step %d; slow worker below even: %s"
        % (hvd.elastic.generation(), hvd.size(), sampler.shares, state.step,
           slow is not None and slow < G / hvd.size()))


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    while state.epoch < EPOCHS:
        for batch in sampler:
            state.seen.extend(i for part in hvd.allgather_object(batch) for i in part)
            opt.zero_grad()
            before = sampler.rebalances
            with sampler.measure():
                ((model(X[batch]) - Y[batch]) ** 2).mean().backward()
                work(len(batch), 4 if me == "0" else 1)
            opt.step()
            state.step += 1
            if sampler.rebalances != before:
                say("generation %d step %d shares %s" % (hvd.elastic.generation(), state.step,
                                                         sampler.shares))
                slow_shares.append(slow_share())
            if (die is not None and state.step == 5 and hvd.elastic.generation() == 1
                    and me == die):
                os._exit(7)  # dies without a word, between a step and the commit
            state.commit()
        say("epoch %d: every sample once: %s" % (state.epoch, sorted(state.seen) ==
                                                 list(range(L))))
        state.epoch += 1
        state.seen = []
        sampler.set_epoch(state.epoch)
        state.commit()
    return hvd.size(), sum(slow_shares) / len(slow_shares)


slow_shares = []  # the slow worker's share after each re-balance of the last generation
state.register_reset_callbacks([slow_shares.clear])
size, slow = train(state)
say("done: step %d size %d slow worker's mean share %.1f of %d in the last generation, below "
    "even: %s" % (state.step, size, slow, G, slow < G / size))
