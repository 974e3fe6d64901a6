"""chorus.torch.distributed.check_divergence and divergence_hook on the "chorus" backend with
DDP: after 5 steps, a parameter changed on one rank raises DivergenceError on every rank naming
it and the ranks outside the reference group (2 ranks: rank 1, no majority; 3 ranks: the
changed rank); unchanged, the check returns; the hook finds a change within its period and,
unchanged, gives the parameters of torch's allreduce_hook to the bit.

Run as every rank of a job (chorus-run -np N). Prints "torchdist divergence: K checks passed on
rank r of n"; raises otherwise.
"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus.torch as hvd
import chorus.torch.distributed as cdist

checks = 0


def ok():
    global checks
    checks += 1


def model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def train(ddp, steps, start=0):
    rank = dist.get_rank()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for s in range(start, start + steps):
        g = torch.Generator().manual_seed(100 * s + rank)
        x, y = torch.randn(4, 6, generator=g), torch.randn(4, 2, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()


def named_rank(changed, size):
    return 1 if size == 2 else changed  # two ranks: no majority, rank 0's group is the reference


def expect(text, tensor, step, named, size):
    others = ",".join(str(r) for r in range(size) if r != named)
    want = "weights diverged at step %d: tensor '%s' differs on rank %d from rank%s %s (" % (
        step, tensor, named, "s" if size > 2 else "", others)
    assert want in text, "%r not in %r" % (want, text)


def main():
    dist.init_process_group("chorus")
    rank, size = dist.get_rank(), dist.get_world_size()
    for changed in (1, 0):
        ddp = DDP(model())
        train(ddp, 5)
        cdist.check_divergence(ddp, step=5)
        ok()
        if rank == changed:
            with torch.no_grad():
                ddp.module[2].bias[0] += 1e-3
        try:
            cdist.check_divergence(ddp, step=5)
            raise AssertionError("no DivergenceError")
        except hvd.DivergenceError as e:
            expect(str(e), "module.2.bias", 5, named_rank(changed, size), size)
            assert e.tensor == "module.2.bias" and e.ranks == [named_rank(changed, size)]
            assert e.step == 5
            ok()
    # a subgroup: the hashes of ranks 0 and 1 only (global ranks named)
    sub = dist.new_group([0, 1])
    if rank < 2:
        t = torch.ones(3) * (1 if rank == 0 else 2)
        try:
            cdist.check_divergence({"t": t}, process_group=sub, step=3)
            raise AssertionError("no DivergenceError in the subgroup")
        except hvd.DivergenceError as e:
            assert e.ranks == [1], e.ranks
            ok()
    dist.barrier()
    # the hook: unchanged, the same parameters as torch's allreduce_hook (which it wraps), to the
    # bit (DDP's built-in averaging divides after the sum, so with 3 ranks it rounds otherwise)
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    plain = DDP(model())
    plain.register_comm_hook(None, default_hooks.allreduce_hook)
    train(plain, 6)
    hooked = DDP(model())
    hooked.register_comm_hook(cdist.DivergenceHookState(hooked, None, every=2),
                              cdist.divergence_hook)
    train(hooked, 6)
    for a, b in zip(plain.parameters(), hooked.parameters()):
        assert torch.equal(a, b), "the hook changed the training"
    ok()
    # changed after step 2 on rank 1: the check at the backward pass after step 4 finds it
    hooked = DDP(model())
    state = cdist.DivergenceHookState(hooked, None, every=4)
    hooked.register_comm_hook(state, cdist.divergence_hook)
    train(hooked, 2)
    if rank == 1:
        with torch.no_grad():
            hooked.module[0].weight[0, 0] += 1e-3
    train(hooked, 2, start=2)  # steps 3, 4: the check runs in the backward of step 5
    try:
        train(hooked, 1, start=4)
        raise AssertionError("the hook found no divergence")
    except Exception as e:  # the autograd engine re-raises the hook's error as RuntimeError
        expect(str(e), "module.0.weight", 4, 1, size)
        ok()
    print("torchdist divergence: %d checks passed on rank %d of %d" % (checks, rank, size),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
