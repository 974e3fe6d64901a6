"""chorus.tensorflow.elastic: horovod.tensorflow.elastic's run, TensorFlowState and
TensorFlowKerasState (chorus.tensorflow.keras.elastic adds KerasState and Horovod's Keras
callbacks).

A state commits (an in-memory copy of its variables and plain attributes), restores the
last commit and syncs from a rank. run() is chorus._elastic's, shared with
chorus.torch.elastic: under `chorus-run --elastic` a lost worker or a membership change ends
a generation, and the next one restores the last commit, syncs it from the rank with the
most commits and runs the reset callbacks, then the training function again; elsewhere it
syncs from rank 0 and runs the function once. A collective's error inside a tf.function
reaches Python as a tf.errors exception; run() traces it back to the chorus error behind it
(a lost peer is recoverable, a mismatch is not).

Eagerly the variables are read and assigned directly; in a tf.compat.v1 graph through a
session (the one given, else the default session, else Keras's).
"""

import tensorflow as tf

from .. import _elastic, _np
from .._elastic import State, ObjectState, generation, runtime_available, worker_id  # noqa: F401
from .._lib import ChorusMismatchError
from .functions import broadcast_object, broadcast_variables
from .mpi_ops import chorus_error_of, rank
from .util import optimizer_variables

__all__ = ["run", "State", "ObjectState", "TensorFlowState", "TensorFlowKerasState",
           "runtime_available", "generation", "worker_id"]

run = _elastic.make_run("chorus.tensorflow.elastic", chorus_error_of)


class _Variables:
    """Reads, assigns and broadcasts a list of variables, eagerly or through a session."""

    def __init__(self, session=None):
        self._session = session
        self._bcast_ops = {}

    def session(self):
        if tf.executing_eagerly():
            return None
        s = self._session or tf.compat.v1.get_default_session()
        if s is None:
            s = tf.compat.v1.keras.backend.get_session()
        return s

    def read(self, variables):
        s = self.session()
        if s is None:
            return [v.numpy().copy() for v in variables]
        return s.run(list(variables))

    def assign(self, variables, values):
        s = self.session()
        for v, x in zip(variables, values):
            if s is None:
                v.assign(x)
            else:
                v.load(x, s)

    def broadcast(self, variables, root):
        s = self.session()
        if s is None:
            broadcast_variables(variables, root)
            return
        key = (tuple(id(v) for v in variables), root)
        if key not in self._bcast_ops:
            self._bcast_ops[key] = broadcast_variables(variables, root)
        s.run(self._bcast_ops[key])


class _VariablesState(ObjectState):
    """Variables (from variables(), called each time: a Keras optimizer makes its own on its
    first step) and plain attributes."""

    def __init__(self, session=None, **kwargs):
        self._vars = _Variables(session)
        self._saved_vars = []
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)
        self._save_variables()

    def variables(self):
        raise NotImplementedError

    def _save_variables(self):
        vs = list(self.variables())
        self._saved_vars = list(zip(vs, self._vars.read(vs)))

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        if self._saved_vars:
            vs, values = zip(*self._saved_vars)
            self._vars.assign(vs, values)
        super().restore()

    def sync(self, root=0):
        self._vars.broadcast(self._agreed(list(self.variables())), root)
        self._save_variables()
        super().sync(root)

    def _agreed(self, vs):
        counts = _np.allgather_object(len(vs))
        if len(set(counts)) > 1:
            raise ChorusMismatchError(
                "chorus.tensorflow.elastic: the ranks' states have different numbers of "
                "variables (%s, by rank) and cannot be synced; build the model (and the "
                "optimizer's variables, e.g. with one training step) on every rank before "
                "the state syncs" % ", ".join(str(c) for c in counts))
        return vs


class TensorFlowState(_VariablesState):
    """tf.Variables (default: the tf.compat.v1 graph's global variables) and plain
    attributes, as horovod.tensorflow.elastic.TensorFlowState."""

    def __init__(self, variables=None, session=None, **kwargs):
        self._variables = list(variables) if variables is not None else \
            list(tf.compat.v1.global_variables())
        super().__init__(session, **kwargs)

    def variables(self):
        return self._variables


def _build_optimizer(optimizer, variables):
    """Makes a Keras optimizer's slot variables now (they are made on its first step)."""
    if hasattr(optimizer, "build") and not hasattr(optimizer, "_create_all_weights"):
        optimizer.build(variables)  # the Keras 2.11+ optimizers
    elif hasattr(optimizer, "_create_all_weights"):
        optimizer._create_all_weights(variables)  # the legacy optimizers


class TensorFlowKerasState(_VariablesState):
    """A Keras model's variables, its optimizer's (the model's optimizer when none is given)
    and plain attributes, as horovod.tensorflow.elastic.TensorFlowKerasState. A rank whose
    optimizer has not made its slot variables yet (a worker that joined) makes them before
    the state syncs."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else \
            getattr(model, "optimizer", None)
        self.backend = backend
        session = backend.get_session() if (backend is not None and
                                             not tf.executing_eagerly()) else None
        super().__init__(session, **kwargs)

    def variables(self):
        return list(self.model.variables) + optimizer_variables(self.optimizer)

    def sync(self, root=0):
        if self.optimizer is not None:
            counts = _np.allgather_object(len(optimizer_variables(self.optimizer)))
            if len(optimizer_variables(self.optimizer)) < max(counts):
                _build_optimizer(self.optimizer, self.model.trainable_variables)
        super().sync(root)
