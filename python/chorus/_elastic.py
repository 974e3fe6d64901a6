"""The framework-free half of Horovod's elastic API, shared by chorus.torch.elastic and
chorus.tensorflow.elastic: State and ObjectState (commit, restore, sync, reset callbacks),
the run() decorator and the driver of the C elastic runtime (chorus_elastic_run).

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

A framework module gives make_run() its name and, where its collectives report a chorus
error as its own exception class (TensorFlow's tf.errors inside a graph), a function that
finds the chorus error behind such an exception.
"""

import copy
import ctypes
import functools
import sys

import numpy as np

from . import _core, _lib, _np
from ._lib import HorovodInternalError, HostsUpdatedInterrupt, lib


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
        self.reset()
        for cb in self._reset_callbacks:
            cb()

    def reset(self):
        """Called when the ranks changed, before the reset callbacks (Horovod's hook)."""

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
        counts = _np.allgather(np.array([self._commits], dtype=np.int64))
        root = int(np.argmax(counts))  # first maximum: the lowest such rank
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
    """Plain attributes (epoch=0, batch=0, ...) kept in sync from rank 0 (bcast_object(obj,
    root) and get_rank(): the framework's; the NumPy front end's by default)."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__()
        self._bcast_object = bcast_object or _np.broadcast_object
        self._rank = get_rank or _np.rank
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


def make_run(what, chorus_error_of=None):
    """The run decorator of framework module `what` (named in its messages).
    chorus_error_of(e) returns the chorus error behind the framework's exception e, or None."""

    def run(func):
        """Decorator for the training function f(state, ...), as Horovod's elastic.run. See
        the module text for what happens under chorus-run --elastic and elsewhere."""

        @functools.wraps(func)
        def wrapper(state, *args, **kwargs):
            if _core.elastic_pending() and not _core.is_initialized():
                return _run_elastic(func, state, args, kwargs, chorus_error_of)
            skip_sync = False
            while True:
                if not skip_sync:
                    state.sync()
                try:
                    return func(state, *args, **kwargs)
                except HostsUpdatedInterrupt as e:
                    skip_sync = e.skip_sync
                except Exception as e:  # noqa: B902 - re-raised unless it is a chorus error
                    inner = e if isinstance(e, HorovodInternalError) else \
                        (chorus_error_of(e) if chorus_error_of else None)
                    if not isinstance(inner, HorovodInternalError):
                        raise
                    state.restore()
                    raise HorovodInternalError(
                        "%s -- %s restored the last commit, but the ranks cannot change in "
                        "place outside `chorus-run --elastic`; restart the job, e.g. from a "
                        "checkpoint written after a commit" % (inner, what)) from e
                state.on_reset()
        return wrapper
    return run


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
    return lib.chorus_elastic_worker_id(el) if el else _np.rank()


def generation():
    """The generation of the elastic job this worker is in (1, 2, ...), 0 outside one."""
    el = _current["el"]
    return lib.chorus_elastic_generation(el) if el else 0


_current = {"el": None}


def _code_of(e, chorus_error_of):
    if isinstance(e, HostsUpdatedInterrupt):
        return _MEMBERSHIP
    if not isinstance(e, HorovodInternalError) and chorus_error_of is not None:
        e = chorus_error_of(e) or e
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


def _run_elastic(func, state, args, kwargs, chorus_error_of):
    _protos()
    el = ctypes.c_void_p()
    _lib.check(lib.chorus_elastic_create(ctypes.byref(el)), None, "chorus elastic")
    el = el.value
    # The Python state is committed and synced by the State objects; the C runtime carries
    # only a marker, so that its own sync has something to compare.
    marker = ctypes.c_int64(0)
    out = {"value": None, "error": None}

    def fail(e):
        code = _code_of(e, chorus_error_of)
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
        _lib.check(lib.chorus_elastic_register(el, b"chorus.python.marker",
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
