"""DistributedOptimizer: data-parallel gradient averaging that overlaps backward.

A hook on every parameter fires as soon as autograd has accumulated its gradient (on the last
of backward_passes_per_step passes). Parameters are grouped into buckets in backward order
(bucket_cap_mb, as DDP); when every gradient of a bucket is there, one asynchronous in-place
grouped allreduce of the bucket starts, named after its first parameter. So the gradients of
the last layers travel while the first layers are still being differentiated. step() (or
synchronize()) waits for all of them and then runs the wrapped optimizer's update. The
buckets are libchorus's (chorus_engine_bucket_plan, the rule the C trainer uses too); the
engine agrees the order of the allreduces across ranks, and Compression.fp16 is its fp16
compressor.
"""

import contextlib
import time
import warnings

import torch

from .. import _core, _engine, _scalars
from .._core import Average, Adasum, global_process_set
from .compression import Compression
from . import mpi_ops
from .divergence import check_divergence


def _parameter_names(param_groups, named_parameters):
    """{parameter: name} from named_parameters (checked: pairs, unique names, every parameter
    of the optimizer named), or generated names when it is None."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%d.%d" % (i, j), v)
                            for i, group in enumerate(param_groups)
                            for j, v in enumerate(group["params"])]
    if any(not isinstance(p, tuple) or len(p) != 2 for p in named_parameters):
        raise ValueError("chorus DistributedOptimizer: named_parameters must be a list of "
                         "(name, parameter) pairs, such as model.named_parameters()")
    names = [k for k, _ in named_parameters]
    dups = sorted({k for k in names if names.count(k) > 1})
    if dups:
        raise ValueError("chorus DistributedOptimizer: parameter names must be unique; "
                         "repeated: %s" % ", ".join(dups))
    all_params = {id(v) for g in param_groups for v in g["params"]}
    named = {id(v) for _, v in named_parameters}
    if all_params - named:
        raise ValueError("chorus DistributedOptimizer: named_parameters was given, but some "
                         "parameters of the optimizer are not in it")
    return {v: k for k, v in named_parameters}


class _DistributedOptimizer(torch.optim.Optimizer):
    _chorus_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, sparse_as_dense=False,
                 process_set=global_process_set, bucket_cap_mb=25.0, sampler=None,
                 check_divergence_every=0):
        super(self.__class__, self).__init__(params)
        self._check_every = int(check_divergence_every)
        if self._check_every < 0:
            raise ValueError("chorus DistributedOptimizer: check_divergence_every must be >= 0 "
                             "(0: never)")
        self._chorus_steps = 0  # optimizer steps taken (the step a divergence is reported at)
        self._sampler = sampler
        self._local_samples = None  # (n_i, n) from set_local_samples
        self._compression = compression
        self._parameter_names = _parameter_names(self.param_groups, named_parameters)
        self.backward_passes_per_step = int(backward_passes_per_step)
        if self.backward_passes_per_step < 1:
            raise ValueError("chorus DistributedOptimizer: backward_passes_per_step must be >= 1")
        self._allreduce_delay = {v: self.backward_passes_per_step
                                 for g in self.param_groups for v in g["params"]}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._handles = {}      # parameter -> True once its hook ran this step
        self._inflight = {}     # bucket index -> (handle, [(param, compressed, ctx)])
        self._issued = set()    # buckets started this step
        self._sparse_inflight = []  # (param, handle) of sparse gradients
        self._densified = []  # params whose sparse gradient is reduced dense (sparse_as_dense)
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._step_scalars = _scalars.StepScalars(lambda: mpi_ops.engine_stats(process_set))
        self._should_synchronize = True
        # Buckets: libchorus's plan over the parameters in registration order (it walks them
        # from the last, the usual order in which backward produces their gradients, a bucket
        # closing once it holds bucket_cap_mb). Parameters without gradients take no part.
        params = [p for g in self.param_groups for p in g["params"]]
        cap = max(0, int(float(bucket_cap_mb) * 1024 * 1024))
        plan, nb = _engine.bucket_plan(
            [p.numel() * p.element_size() if p.requires_grad else 0 for p in params], cap)
        self._buckets = [[] for _ in range(nb)]
        for p, b in reversed(list(zip(params, plan))):
            if b >= 0:
                self._buckets[b].append(p)
        self._bucket_of = {p: i for i, b in enumerate(self._buckets) for p in b}
        self._left = [len(b) for b in self._buckets]
        if self._included():
            self._register_hooks()

    def _included(self):
        # The global set holds every rank (also before an elastic job has formed).
        return self.process_set is global_process_set or self.process_set.included()

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = int(passes)
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    def set_local_samples(self, samples, total=None):
        """Weights this rank's gradient by samples / total in the steps that follow (until
        called again; call it before backward, which starts the allreduces): the gradients
        are summed over the ranks after each was multiplied by its weight, so with a loss
        that is the mean over the local batch the result is the gradient of the mean over
        all `total` samples, whatever each rank took. samples=None
        goes back to the plain average (Horovod's op=Average). total: the samples of the step
        over all ranks (the same on every rank); omitted, it is allreduced each time this is
        called (a collective then)."""
        if samples is None:
            self._local_samples = None
            return
        _weighting_allowed(self.op, self.gradient_predivide_factor)
        if total is None:
            total = int(mpi_ops.allreduce(torch.tensor([int(samples)], dtype=torch.int64),
                                          op=_core.Sum, process_set=self.process_set).item())
        if not 0 <= samples <= total or total <= 0:
            raise ValueError("chorus DistributedOptimizer: set_local_samples(%d, %d): this rank's "
                             "samples must be in [0, total] and total > 0" % (samples, total))
        self._local_samples = (int(samples), int(total))

    def _sample_weight(self):
        """n_i / n for this step (set_local_samples, else the sampler's last batch), or None
        for the plain average."""
        if self._local_samples is not None:
            return self._local_samples[0] / self._local_samples[1]
        if self._sampler is not None:
            return self._sampler.batch_weight()
        return None

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._requires_update.add(p)
                hook = self._make_hook(p)
                if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                    self._grad_accs.append(p.register_post_accumulate_grad_hook(
                        lambda _p, hook=hook: hook()))
                else:
                    # The AccumulateGrad node of p runs once its gradient is in p.grad.
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    acc.register_hook(lambda *_, hook=hook: hook())
                    self._grad_accs.append(acc)  # keeps the node (and its hook) alive

    def _make_hook(self, p):
        def hook():
            delay = self._allreduce_delay
            left = delay[p]
            if left <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times "
                    "before call to step(). Increase backward_passes_per_step to "
                    "accumulate gradients locally.")
            assert not p.grad.requires_grad
            delay[p] = left - 1
            self._handles[p] = True
            if left == 1:
                self._ready(p)
        return hook

    def _ready(self, p):
        i = self._bucket_of[p]
        self._left[i] -= 1
        # The engine agrees the order across ranks: a full bucket goes at once.
        if self._left[i] == 0:
            self._issue(i)

    def _issue(self, i):
        """Starts the allreduce of bucket i's gradients (one fused operation)."""
        self._issued.add(i)
        params, sparse = [], []
        for p in self._buckets[i]:
            if p.grad is None:
                # This rank did not use p, others may have: it still takes part, with zeros.
                p.grad = torch.zeros_like(p)
            if p.grad.is_sparse and self.sparse_as_dense:
                p.grad = p.grad.to_dense()
                self._densified.append(p)
            (sparse if p.grad.is_sparse else params).append(p)
        # Weighted by the samples this rank took (a balanced sampler): sum of n_i/n * g_i.
        weight = self._sample_weight()
        op = self.op if weight is None else _core.Sum
        # torch.sparse gradients (nn.Embedding(sparse=True)): indices and values are
        # allgathered (sparse_allreduce_async), as Horovod does without sparse_as_dense.
        self._sparse_inflight.extend(
            (p, mpi_ops.sparse_allreduce_async(p.grad if weight is None else p.grad * weight,
                                               "sparse.allreduce." +
                                               self._parameter_names.get(p), op,
                                               self.process_set)) for p in sparse)
        if not params:
            return
        name = "allreduce." + self._parameter_names.get(params[0])
        if weight is not None:
            # The engine wants one prescale on every rank; the weights differ, so they are
            # applied here, to the gradients themselves (the allreduce replaces them anyway).
            for p in params:
                p.grad.mul_(weight)
            pre, post = 1.0, 1.0
        elif self.op == Average:
            pre, post = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        else:
            pre, post = 1.0, 1.0
        grads = [p.grad for p in params]
        engine_comp = mpi_ops._compressor(self._compression)
        if engine_comp is not None:
            # The engine's compressor (fp16 on the wire): in place, no Python copies.
            comp = [(g, None) for g in grads]
        else:
            comp = [self._compression.compress(g) for g in grads]
        h = mpi_ops._grouped_allreduce(
            [c for c, _ in comp], [c for c, _ in comp], name, op, pre, post,
            self.process_set, False, "DistributedOptimizer", engine_comp)
        self._inflight[i] = (h, [(p, None if engine_comp else c, ctx)
                                 for p, (c, ctx) in zip(params, comp)])

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those whose hook did not fire: a
        parameter unused on this rank, or fewer backward passes than announced) and writes
        the averaged gradients into p.grad."""
        if not self._included():
            self._synchronized = True
            return
        t0, dense = time.perf_counter(), 0
        try:
            for i, b in enumerate(self._buckets):
                if i not in self._issued:
                    self._issue(i)
            for p, h in self._sparse_inflight:
                p.grad = h().coalesce()
            for i in sorted(self._inflight):
                h, items = self._inflight[i]
                mpi_ops.synchronize(h)
                for p, compressed, ctx in items:
                    dense += p.grad.numel() * p.grad.element_size()
                    if compressed is None:
                        continue
                    res = self._compression.decompress(compressed, ctx)
                    if res.data_ptr() != p.grad.data_ptr():
                        p.grad.copy_(res)
            # sparse_as_dense: the reduced gradient becomes sparse again (as Horovod)
            for p in self._densified:
                p.grad = p.grad.to_sparse()
        finally:
            self._reset_comm_state()
        self._step_scalars.step(time.perf_counter() - t0, dense)
        self._synchronized = True

    def _reset_comm_state(self):
        """Forgets the gradients of the current step (after it was synchronized, or after a
        failure: an elastic job restores the optimizer and goes on from there)."""
        self._inflight.clear()
        self._issued.clear()
        self._sparse_inflight = []
        self._densified = []
        self._handles.clear()
        self._left = [len(b) for b in self._buckets]
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For code that calls synchronize() itself (gradient clipping): step() inside this
        context does not synchronize again."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        out = super(self.__class__, self).step(closure)
        self._chorus_steps += 1
        if self._check_every and self._chorus_steps % self._check_every == 0 and self._included():
            check_divergence([(self._parameter_names[p], p) for g in self.param_groups
                              for p in g["params"]], step=self._chorus_steps,
                             process_set=self.process_set, name="check_divergence.optimizer")
        return out

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set, bucket_cap_mb=25.0, sampler=None,
                         check_divergence_every=0):
    """Wraps a torch optimizer so that step() applies gradients averaged over all ranks.

    named_parameters: model.named_parameters(), naming each gradient's allreduce (the same
    names on every rank). compression: Compression.none, fp16, topk(ratio), randomk(ratio)
    or powersgd(rank).
    backward_passes_per_step: local backward passes (gradient accumulation) per step().
    op: Average (default) or Sum. gradient_predivide_factor: with Average, gradients are
    divided by this before the sum and by size/this after it.
    bucket_cap_mb (a Chorus extension): gradients are reduced in buckets of up to this many
    MiB, in backward order, each started as soon as all its gradients exist (as DDP's
    buckets): one fused allreduce per bucket instead of one per tensor, which matters when
    ranks share cores. 0 gives one allreduce per parameter (Horovod's way).
    sampler (a Chorus extension): a BalancedDistributedSampler. Each rank's gradient is then
    weighted by the samples it took of the step's global batch (n_i/n, from the sampler's last
    batch) and the weighted gradients are summed, so a step with uneven shares is the step of
    the whole global batch, as an even split would give (the loss must be the mean over the
    local batch). Needs op=Average, gradient_predivide_factor=1 and one backward pass per
    step; set_local_samples(n_i, n) does the same weighting without a sampler.
    check_divergence_every (a Chorus extension): every N optimizer steps (0: never), after
    the update, check_divergence over the parameters it optimises (named as in
    named_parameters): a rank whose parameters drifted from the others' raises
    DivergenceError on every rank, naming the parameter, the ranks and the step.
    """
    if sampler is not None:
        _weighting_allowed(op, gradient_predivide_factor)
        if backward_passes_per_step != 1:
            raise ValueError("chorus DistributedOptimizer: sampler= weights one batch per step; "
                             "with backward_passes_per_step > 1 call set_local_samples(n, total) "
                             "with the samples of all passes instead")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("chorus DistributedOptimizer: gradient_predivide_factor is only "
                         "supported with op=Average")
    op = _core.as_op(op, adasum=True)
    n = mpi_ops._set(process_set)[0].comm.size if op is Adasum else 1
    if n & (n - 1):
        raise NotImplementedError("chorus DistributedOptimizer: op=Adasum needs a power of 2 "
                                  "ranks (as Horovod's), not %d" % n)
    if n > 1:
        if sampler is not None or gradient_predivide_factor != 1.0 or num_groups or groups:
            raise ValueError("chorus DistributedOptimizer: op=Adasum takes none of sampler, "
                             "gradient_predivide_factor, num_groups, groups")
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
                   dict(_DistributedAdasumOptimizer.__dict__))
        opt = cls(optimizer.param_groups, named_parameters, compression, process_set)
        opt.state = optimizer.state
        return opt
    if num_groups or groups:
        raise NotImplementedError("chorus DistributedOptimizer: num_groups/groups are not "
                                  "implemented; the engine fuses ready gradients by itself")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    opt = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
              op, gradient_predivide_factor, sparse_as_dense, process_set, bucket_cap_mb,
              sampler, check_divergence_every)
    opt.state = optimizer.state  # keep state loaded into the wrapped optimizer
    return opt


def _weighting_allowed(op, predivide):
    if _core.as_op(op) != Average or predivide != 1.0:
        raise ValueError("chorus DistributedOptimizer: weighting gradients by samples replaces "
                         "the average; it needs op=Average and gradient_predivide_factor=1.0")


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """DistributedOptimizer(op=Adasum), Horovod's delta optimizer: every rank takes a step of
    the wrapped optimizer with its own gradients, and the steps themselves (each parameter's
    change) are combined across ranks with Adasum, then applied to the parameters as they were
    before the step. Adasum of two steps a and b, per tensor, is
    (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b: parallel steps are averaged, orthogonal
    ones added; more ranks combine pairwise, neighbours first (mpi_ops._adasum_tree). The
    number of ranks must be a power of two (as Horovod's)."""

    _chorus_distributed = True

    def __init__(self, params, named_parameters, compression, process_set):
        super(self.__class__, self).__init__(params)
        self._parameter_names = _parameter_names(self.param_groups, named_parameters)
        self._compression = compression
        self.process_set = process_set
        self.op = Adasum

    def synchronize(self):
        """Nothing to wait for: the steps are combined inside step()."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        yield

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        before = [p.detach().clone() for p in params]
        super(self.__class__, self).step()
        deltas, ctxs = [], []
        for p, b in zip(params, before):
            d, ctx = self._compression.compress(p.detach() - b)
            deltas.append(d.contiguous())
            ctxs.append(ctx)
        if params:
            combined = mpi_ops.grouped_allreduce(
                deltas, name="adasum." + self._parameter_names[params[0]], op=Adasum,
                process_set=self.process_set)
            with torch.no_grad():
                for p, b, d, ctx in zip(params, before, combined, ctxs):
                    p.copy_(b + self._compression.decompress(d, ctx))
        return loss
