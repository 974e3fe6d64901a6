"""chorus.torch.elastic: horovod.torch.elastic's run / TorchState / ElasticSampler.

What works: state objects that commit (an in-memory copy of model, optimizer, sampler and
scalar attributes), restore the last commit, and sync from rank 0; ElasticSampler, which
shards the not yet processed indices of an epoch over the current ranks and can resume in
the middle of an epoch; run(), which syncs the state, runs the training function, and on a
HorovodInternalError (a peer died or timed out) restores the last commit.

Not done: continuing with a different set of ranks inside the same processes (that needs a
C elastic runtime to rebuild the communicator, which this package does not drive yet). On a
failure run() restores the last commit and re-raises with a message saying so; restart the
job (for example from a checkpoint written after a commit) instead.
"""

import copy
import functools

import torch

from ... import _core
from ..._lib import HorovodInternalError, HostsUpdatedInterrupt
from .. import mpi_ops
from ..functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "runtime_available"]


def runtime_available():
    """Whether run() can continue in place with a new set of ranks. Not yet: this package
    does not drive a C elastic runtime, so the answer is False."""
    return False


class State:
    """State that can be committed, restored and synced across ranks."""

    def __init__(self):
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for cb in self._reset_callbacks:
            cb()

    def on_hosts_updated(self, timestamp, update_res):
        pass

    def commit(self):
        """Saves the current state (restore() returns to it) and checks for host changes."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt when the job's membership changed. Without the
        elastic runtime the membership is fixed, so this never raises."""
        return None

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError


class ObjectState(State):
    """Plain attributes (epoch=0, batch=0, ...) kept in sync from rank 0."""

    def __init__(self, bcast_object=broadcast_object, get_rank=mpi_ops.rank, **kwargs):
        super().__init__()
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._saved_state = kwargs
        self._set_attrs()

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, v)

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, 0)
            self._set_attrs()


class _Handler:
    def __init__(self, value):
        self.value = value
        self.save()


class _ModelHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        # The union of every rank's processed indices, so none is seen twice after a reset.
        everyone = mpi_ops.allgather_object(self.value.state_dict())
        processed = set()
        for s in everyone:
            processed.update(s["processed_indices"])
        st = broadcast_object(self.value.state_dict(), 0)
        st["processed_indices"] = sorted(processed)
        self.value.load_state_dict(st)


class TorchState(ObjectState):
    """State of a PyTorch training job: model, optimizer, ElasticSamplers (any keyword whose
    value is one) and plain attributes."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self._handlers = {}
        if model is not None:
            self._handlers["model"] = _ModelHandler(model)
        if optimizer is not None:
            self._handlers["optimizer"] = _OptimizerHandler(optimizer)
        plain = {}
        for k, v in kwargs.items():
            if isinstance(v, ElasticSampler):
                self._handlers[k] = _SamplerHandler(v)
            else:
                plain[k] = v
        self.model, self.optimizer = model, optimizer
        for k, h in self._handlers.items():
            setattr(self, k, h.value)
        super().__init__(**plain)

    def save(self):
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def sync(self):
        for h in self._handlers.values():
            h.sync()
        super().sync()


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset's indices over the current ranks, skipping the indices already
    processed in this epoch (record_batch / record_indices), so an epoch can resume after a
    restore or a change of ranks. set_epoch(e) starts a new epoch (and a new shuffle)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks batch number batch_idx (of this rank's indices) as processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx, batch_size):
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed_indices = set(state["processed_indices"])
        self.reset()

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": sorted(self.processed_indices)}

    def reset(self):
        """Recomputes this rank's share of the remaining indices for the current ranks."""
        n = mpi_ops.size() if _core.is_initialized() else 1
        r = mpi_ops.rank() if _core.is_initialized() else 0
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=g).tolist()
        else:
            order = list(range(len(self.dataset)))
        remaining = [i for i in order if i not in self.processed_indices]
        self.num_samples = (len(remaining) + n - 1) // n if remaining else 0
        total = self.num_samples * n
        padded = remaining + remaining[:total - len(remaining)]
        self.indices = padded[r:total:n]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


def run(func):
    """Decorator for the training function f(state, ...): syncs state from rank 0, then runs
    f. A HostsUpdatedInterrupt restores nothing and runs f again after a sync; a
    HorovodInternalError (a rank died or timed out) restores the last commit and, without
    the elastic runtime, re-raises with an explanation (see the module text)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            if not skip_sync:
                state.sync()
            try:
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            except HorovodInternalError as e:
                state.restore()
                raise HorovodInternalError(
                    "%s -- chorus.torch.elastic restored the last commit, but cannot go on "
                    "with the remaining ranks in place (no elastic runtime); restart the "
                    "job, e.g. from a checkpoint written after a commit" % e) from e
            state.on_reset()
    return wrapper
