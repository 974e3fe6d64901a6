"""chorus.torch.check_divergence and DistributedOptimizer(check_divergence_every=N): a model
trained a few steps, then changed on one rank only, raises DivergenceError on every rank naming
the parameter (or buffer), the ranks outside the reference group and the step; an unchanged one
returns. With 2 ranks there is no majority: the group of rank 0 is the reference, so a change
on either rank names rank 1; with 3 ranks the changed rank is named."""

import pytest
import torch

import chorus.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 3))


def train(model, opt, steps, start=0):
    loss_fn = torch.nn.CrossEntropyLoss()
    for s in range(start, start + steps):
        # the same batch on every rank: BatchNorm's running statistics are buffers of each
        # rank's own batches, which no optimizer averages, so they would differ by design
        g = torch.Generator().manual_seed(100 * s)
        x, y = torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()


def trained(steps=5, every=0):
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   check_divergence_every=every)
    train(model, opt, steps)
    return model, opt


def expect(exc, tensor, step):
    """The rank named: the changed rank with 3 ranks or more; rank 1 with 2 (no majority)."""
    named = 1 if N == 2 else exc.changed
    assert exc.value.tensor == tensor
    assert exc.value.ranks == [named]
    assert exc.value.step == step
    msg = str(exc.value)
    others = ",".join(str(r) for r in range(N) if r != named)
    assert ("weights diverged at step %d: tensor '%s' differs on rank %d from rank%s %s ("
            % (step, tensor, named, "s" if N > 2 else "", others)) in msg, msg
    why = ("no majority: the reference is the group of the lowest rank" if N == 2
           else "the reference is the largest group of equal ranks")
    assert why in msg, msg
    assert isinstance(exc.value, hvd.ChorusError)


def test_unchanged_returns():
    model, _ = trained()
    hvd.check_divergence(model)
    hvd.check_divergence(dict(model.named_parameters()), step=5)


@pytest.mark.parametrize("changed", [1, 0])
def test_parameter_changed_on_one_rank(changed):
    model, _ = trained()
    if R == changed:
        with torch.no_grad():
            model[3].bias[1] += 1e-3
    with pytest.raises(hvd.DivergenceError) as e:
        hvd.check_divergence(model, step=5)
    e.changed = changed
    expect(e, "3.bias", 5)
    # 6 parameters (2 linear layers, BatchNorm's weight and bias) and 3 buffers
    assert "1 of 9 tensors differ" in str(e.value)
    hvd.check_divergence(torch.nn.Linear(2, 2).requires_grad_(False).apply(
        lambda m: torch.nn.init.zeros_(m.weight)))  # the job goes on after a divergence


def test_buffer_changed_on_one_rank():
    model, _ = trained()
    if R == 1:
        model[1].running_mean.mul_(2)
    with pytest.raises(hvd.DivergenceError) as e:
        hvd.check_divergence(model, step=7)
    e.changed = 1
    expect(e, "1.running_mean", 7)


def test_bitwise_negative_zero():
    t = torch.zeros(4)
    if R == 1:
        t[2] = -0.0
    with pytest.raises(hvd.DivergenceError) as e:
        hvd.check_divergence([("zeros", t)], step=1)
    assert e.value.tensor == "zeros"


def test_different_tensor_lists():
    t = torch.ones(3)
    with pytest.raises(hvd.DivergenceError) as e:
        hvd.check_divergence([("a" if R == 0 else "b", t)], step=2)
    assert e.value.tensor is None
    assert "the ranks hold different tensor lists (count, names or sizes)" in str(e.value)


def test_every_n_steps():
    model, opt = trained(steps=3, every=4)  # checked after step 4, then 8
    train(model, opt, 1, start=3)  # step 4: equal
    if R == 1:
        with torch.no_grad():
            model[0].weight[0, 0] += 1e-3
    train(model, opt, 3, start=4)  # steps 5-7: not checked
    with pytest.raises(hvd.DivergenceError) as e:
        train(model, opt, 1, start=7)
    e.changed = 1
    expect(e, "0.weight", 8)


def test_every_n_steps_unchanged():
    trained(steps=8, every=2)


def test_bad_arguments():
    with pytest.raises(TypeError, match="check_divergence: expected a torch.nn.Module"):
        hvd.check_divergence([torch.ones(2)])
    with pytest.raises(ValueError, match="check_divergence_every must be >= 0"):
        hvd.DistributedOptimizer(torch.optim.SGD(make_model().parameters(), lr=0.1),
                                 check_divergence_every=-1)
