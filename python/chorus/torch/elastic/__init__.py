"""chorus.torch.elastic: horovod.torch.elastic's run / TorchState / ElasticSampler.

State objects commit (an in-memory copy of model, optimizer, samplers and plain attributes),
restore the last commit, and sync from another rank. ElasticSampler shards the not yet
processed indices of an epoch over the current ranks and resumes mid-epoch. run(), State,
ObjectState and the driving of `chorus-run --elastic` are chorus._elastic's (shared with
chorus.tensorflow.elastic; its text says what run() does under --elastic and elsewhere).
"""

import copy

import torch

from ... import _core, _elastic
from ..._elastic import State, generation, runtime_available, worker_id  # noqa: F401
from .. import mpi_ops
from ..balance import BalancedDistributedSampler
from ..functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                         broadcast_parameters)

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "runtime_available",
           "generation", "worker_id"]


class ObjectState(_elastic.ObjectState):
    """Plain attributes (epoch=0, batch=0, ...) kept in sync from rank 0."""

    def __init__(self, bcast_object=broadcast_object, get_rank=mpi_ops.rank, **kwargs):
        super().__init__(bcast_object, get_rank, **kwargs)


class _Handler:
    def __init__(self, value):
        self.value = value
        self.save()


class _ModelHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self, root):
        broadcast_parameters(self.value.state_dict(), root_rank=root)


class _OptimizerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        if hasattr(self.value, "_reset_comm_state"):  # a DistributedOptimizer
            self.value._reset_comm_state()
        self.value.load_state_dict(self._saved)

    def sync(self, root):
        broadcast_optimizer_state(self.value, root_rank=root)


class _SamplerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self, root):
        # The union of every rank's processed indices, so none is seen twice after a reset.
        everyone = allgather_object(self.value.state_dict())
        processed = set()
        for s in everyone:
            processed.update(s["processed_indices"])
        st = broadcast_object(self.value.state_dict(), root)
        st["processed_indices"] = sorted(processed)
        self.value.load_state_dict(st)


class _BalancedSamplerHandler(_SamplerHandler):
    """A BalancedDistributedSampler: its position is global (every rank hands out its range of
    the same global batches), so the root's state is everyone's. Its times are kept by worker
    id, so a new generation starts with shares for its workers' measured speeds."""

    def __init__(self, value):
        value.worker_id = worker_id
        super().__init__(value)

    def sync(self, root):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root))
        self.value.adopt_workers(allgather_object(worker_id()))


class TorchState(ObjectState):
    """State of a PyTorch training job: model, optimizer, ElasticSamplers and
    BalancedDistributedSamplers (any keyword whose value is one) and plain attributes."""

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
            elif isinstance(v, BalancedDistributedSampler):
                self._handlers[k] = _BalancedSamplerHandler(v)
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

    def sync(self, root=0):
        for h in self._handlers.values():
            h.sync(root)
        super().sync(root)


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


run = _elastic.make_run("chorus.torch.elastic")
