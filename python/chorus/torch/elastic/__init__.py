"""chorus.torch.elastic: horovod.torch.elastic's run / TorchState / ElasticSampler.

State objects commit (an in-memory copy of model, optimizer, samplers and plain attributes),
restore the last commit, and sync from another rank. ElasticSampler shards the not yet
processed indices of an epoch over the current ranks and resumes mid-epoch.

Under `chorus-run --elastic -np N --min-np A --max-np B` (and a libchorus with
include/chorus/elastic.h), run() drives chorus_elastic_run: the job forms inside it; for every
generation the world communicator is the elastic runtime's, the state is restored to the last
commit and synced from the rank with the most commits (as the C runtime does), the reset
callbacks run (rescale the learning rate, re-shard), then the training function. A lost peer
(HorovodInternalError) or a membership change (state.commit() raising HostsUpdatedInterrupt
when workers wait to join or leave) ends the generation; survivors and newcomers form the
next one and go on from the last commit. init() under --elastic does not form a job:
size()/rank() are valid inside run(). Once run() has returned, the ranks of the last
generation stay formed for the rest of the program (evaluation and metrics after training,
as in Horovod's examples), until shutdown() or exit.

Under any other launcher run() syncs from rank 0 and runs the function once; a
HorovodInternalError restores the last commit and is re-raised, since the ranks cannot change
in place there.
"""

import copy
import ctypes
import functools
import sys

import torch

from ... import _core, _lib
from ..._lib import HorovodInternalError, HostsUpdatedInterrupt, lib
from .. import mpi_ops
from ..balance import BalancedDistributedSampler
from ..functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                         broadcast_parameters)

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "runtime_available",
           "generation", "worker_id"]


def runtime_available():
    """True when run() can go on with a new set of ranks in place: a worker of
    `chorus-run --elastic` with a libchorus that has the elastic runtime."""
    return _core.elastic_pending()


class State:
    """State that can be committed, restored and synced across ranks."""

    def __init__(self):
        self._reset_callbacks = []
        self._commits = 0
        self._elastic = None  # the chorus_elastic handle while run() drives one

    def register_reset_callbacks(self, callbacks):
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for cb in self._reset_callbacks:
            cb()

    def on_hosts_updated(self, timestamp, update_res):
        pass

    def commit(self):
        """Saves the current state (restore() returns to it); a collective where every rank
        agrees, after an optimizer step. In an elastic job it is also where workers join or
        leave: HostsUpdatedInterrupt is raised on every rank then (the state is saved)."""
        self.save()
        self._commits += 1
        if self._elastic is not None:
            r = lib.chorus_elastic_commit(self._elastic)
            if r == _MEMBERSHIP:
                raise HostsUpdatedInterrupt(skip_sync=False)
            if r != 0:
                _lib.raise_for(r, None, "chorus elastic commit",
                               _dec(lib.chorus_elastic_last_error(self._elastic)))
        self.check_host_updates()

    def check_host_updates(self):
        """Membership changes surface in commit() (the elastic runtime checks there), so
        this never raises on its own."""
        return None

    def sync_from_most_advanced(self):
        """Every rank takes the state of the rank with the most commits (the lowest such
        rank), as the C elastic runtime does; rank 0's when nobody has committed."""
        counts = mpi_ops.allgather(torch.tensor([self._commits], dtype=torch.int64))
        root = int(torch.argmax(counts).item())  # first maximum: the lowest such rank
        self.sync(root)
        self._commits = int(counts[root])
        self.save()

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self, root=0):
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

    def sync(self, root=0):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, root)
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


def run(func):
    """Decorator for the training function f(state, ...), as horovod.torch.elastic.run.
    See the module text for what happens under chorus-run --elastic and elsewhere."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if _core.elastic_pending() and not _core.is_initialized():
            return _run_elastic(func, state, args, kwargs)
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
                    "%s -- chorus.torch.elastic restored the last commit, but the ranks cannot "
                    "change in place outside `chorus-run --elastic`; restart the job, e.g. "
                    "from a checkpoint written after a commit" % e) from e
            state.on_reset()
    return wrapper


# ---- driving chorus_elastic_run ------------------------------------------------------------

_MEMBERSHIP = _lib.RESULT_NAMES.index("CHORUS_ERR_MEMBERSHIP")
_RECOVERABLE = {_lib.RESULT_NAMES.index(n) for n in (
    "CHORUS_ERR_PEER_LOST", "CHORUS_ERR_TIMEOUT", "CHORUS_ERR_ABORTED", "CHORUS_ERR_MEMBERSHIP")}
_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def _dec(b):
    return b.decode("utf-8", "replace") if b else ""


def _protos():
    c, P = ctypes, ctypes.c_void_p
    for name, res, argt in [
        ("chorus_elastic_create", c.c_int, [c.POINTER(P)]),
        ("chorus_elastic_destroy", None, [P]),
        ("chorus_elastic_register", c.c_int, [P, c.c_char_p, P, c.c_size_t]),
        ("chorus_elastic_commit", c.c_int, [P]),
        ("chorus_elastic_run", c.c_int, [P, _CB, _CB, P]),
        ("chorus_elastic_generation", c.c_long, [P]),
        ("chorus_elastic_worker_id", c.c_int, [P]),
        ("chorus_elastic_last_error", c.c_char_p, [P]),
    ]:
        f = getattr(lib, name)
        f.restype, f.argtypes = res, argt


def worker_id():
    """This worker's id in the elastic job (ranks change between generations, worker ids do
    not); the rank outside one."""
    el = _current["el"]
    return lib.chorus_elastic_worker_id(el) if el else mpi_ops.rank()


def generation():
    """The generation of the elastic job this worker is in (1, 2, ...), 0 outside one."""
    el = _current["el"]
    return lib.chorus_elastic_generation(el) if el else 0


_current = {"el": None}


def _code_of(e):
    if isinstance(e, HostsUpdatedInterrupt):
        return _MEMBERSHIP
    code = getattr(e, "code", None)
    if isinstance(e, HorovodInternalError):
        if code is None:  # raised by the Python layer (a mismatch found by its check)
            return _lib.RESULT_NAMES.index("CHORUS_ERR_MISMATCH")
        return code
    return _lib.RESULT_NAMES.index("CHORUS_ERR_INTERNAL")


def _attach(comm):
    if not _core.is_initialized():
        _core.adopt(comm)  # starts the generation's engine (its names count from 0)


def _detach():
    _core.shutdown()  # the world is the runtime's: stops the engines, keeps the comm


def _run_elastic(func, state, args, kwargs):
    _protos()
    el = ctypes.c_void_p()
    _lib.check(lib.chorus_elastic_create(ctypes.byref(el)), None, "chorus elastic")
    el = el.value
    # The Python state is committed and synced by the State objects; the C runtime carries
    # only a marker, so that its own sync has something to compare.
    marker = ctypes.c_int64(0)
    out = {"value": None, "error": None}

    def fail(e):
        code = _code_of(e)
        if code not in _RECOVERABLE:
            out["error"] = e
        return code

    def reset_cb(_el, comm, _arg):
        try:
            _attach(comm)
            state._elastic = el
            state.restore()
            state.sync_from_most_advanced()
            state.on_reset()
            return 0
        except BaseException as e:  # noqa: B902 - handed back after chorus_elastic_run
            code = fail(e)
            _detach()
            return code

    def train_cb(_el, comm, _arg):
        try:
            _attach(comm)
            state._elastic = el
            out["value"] = func(state, *args, **kwargs)
            return 0  # the job stays formed: run() returns with this generation's world
        except BaseException as e:  # noqa: B902
            _detach()
            return fail(e)
        finally:
            state._elastic = None

    reset_c, train_c = _CB(reset_cb), _CB(train_cb)  # kept alive during the run
    _current["el"] = el
    done = False
    try:
        _lib.check(lib.chorus_elastic_register(el, b"chorus.torch.marker",
                                               ctypes.addressof(marker), 8), None,
                   "chorus elastic register")
        r = lib.chorus_elastic_run(el, train_c, reset_c, None)
        if out["error"] is not None:
            raise out["error"]
        if r == _MEMBERSHIP:
            print("chorus: this worker was retired from the elastic job", file=sys.stderr)
            return None
        if r != 0:
            _lib.raise_for(r, None, "chorus elastic run",
                           _dec(lib.chorus_elastic_last_error(el)))
        done = True
        return out["value"]
    finally:
        _current["el"] = None
        if done and _core.is_initialized():
            # The last generation's communicator is the world until shutdown() (which then
            # destroys the runtime, finalizing it), as Horovod's ranks outlive run().
            _core.keep_world(lambda: lib.chorus_elastic_destroy(el))
        else:
            lib.chorus_elastic_destroy(el)
