"""chorus.tensorflow.keras.elastic: horovod.tensorflow.keras.elastic's KerasState, run and
the Keras callbacks that keep an elastic state current during Model.fit
(chorus.tensorflow.elastic says what run() does).

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(dataset, steps_per_epoch=..., epochs=epochs - state.epoch,
                        callbacks=callbacks)
"""

import tensorflow as tf

from ..elastic import (State, ObjectState, TensorFlowKerasState, generation,  # noqa: F401
                       run, runtime_available, worker_id)

__all__ = ["run", "State", "ObjectState", "KerasState", "TensorFlowKerasState",
           "CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback",
           "runtime_available", "generation", "worker_id"]


class KerasState(TensorFlowKerasState):
    """A Keras model, its optimizer (the model's when none is given) and plain attributes."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=tf.compat.v1.keras.backend,
                         **kwargs)


class CommitStateCallback(tf.keras.callbacks.Callback):
    """Commits the state every batches_per_commit batches (where, under `chorus-run
    --elastic`, workers join or leave)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallback(tf.keras.callbacks.Callback):
    """Keeps state.batch the number of batches done in the current epoch (0 at its end); an
    epoch resumed with state.batch > 0 is shown with its remaining steps."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params["steps"]
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(tf.keras.callbacks.Callback):
    """Keeps state.epoch the number of epochs done: at the end of each epoch of fit, the
    state's epoch when fit began plus the epochs done since (whether fit counts its epochs
    from 0, as with epochs=total - state.epoch, or from initial_epoch=state.epoch)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch
        self._first = None

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch
        self._first = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._first is None:
            self._first = epoch

    def on_epoch_end(self, epoch, logs=None):
        first = epoch if self._first is None else self._first
        self.state.epoch = self.initial_epoch + epoch - first + 1
