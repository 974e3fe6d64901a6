"""Horovod's Keras callbacks (horovod.tensorflow.keras.callbacks) on chorus.tensorflow."""

import numpy as np
import tensorflow as tf

from ... import _np
from ..._core import global_process_set
from ..functions import broadcast_variables
from ..mpi_ops import size
from ..util import optimizer_variables


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """At the end of the first batch (when the optimizer's variables exist), overwrites the
    model's and the optimizer's variables with root_rank's, so every rank trains the same
    weights from there on. local_variables keep this rank's values."""

    def __init__(self, root_rank, device="", local_variables=None,
                 process_set=global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.local_refs = {v.ref() for v in (local_variables or [])}
        self.process_set = process_set
        self.broadcast_done = False

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        broadcast_variables([v for v in self.model.variables if v.ref() not in self.local_refs],
                            self.root_rank, self.process_set)
        broadcast_variables(optimizer_variables(self.model.optimizer), self.root_rank,
                            self.process_set)
        self.broadcast_done = True


class MetricAverageCallback(tf.keras.callbacks.Callback):
    """At the end of each epoch, replaces every metric in logs by its average over the ranks
    (in the order of the sorted metric names, the same on every rank)."""

    def __init__(self, device="", process_set=global_process_set):
        super().__init__()
        self.process_set = process_set

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
        vals = np.array([float(logs[k]) for k in names], dtype=np.float64)
        avg = _np.allreduce(vals, op=_np.Average, name="keras.metrics.%d" % epoch,
                            process_set=self.process_set)
        for k, v in zip(names, avg):
            logs[k] = float(v)


def _set_value(var, value):
    if hasattr(var, "assign"):
        var.assign(value)
    else:
        tf.keras.backend.set_value(var, value)


def _get_lr(opt):
    return float(tf.keras.backend.get_value(opt.learning_rate if hasattr(opt, "learning_rate")
                                            else opt.lr))


def _set_lr(opt, lr):
    if hasattr(opt, "learning_rate"):
        try:
            opt.learning_rate = lr
            return
        except (TypeError, ValueError, AttributeError):
            pass
    _set_value(opt.lr, lr)


class LearningRateScheduleCallback(tf.keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier between start_epoch (inclusive) and
    end_epoch (exclusive); multiplier is a number or a function of the epoch. staircase=False
    changes it every batch with a fractional epoch (steps_per_epoch from fit when None).
    momentum_correction scales the momentum by new_lr / old_lr for the batch the learning
    rate changes on, as Horovod's."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self.restore_momentum = None
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)

    def _active(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch):
        opt = self.model.optimizer
        old = _get_lr(opt)
        new = self.initial_lr * self.multiplier(epoch)
        _set_lr(opt, new)
        if (self.momentum_correction and hasattr(opt, "momentum") and old > 0 and
                not callable(getattr(opt, "momentum"))):
            m = opt.momentum
            self.restore_momentum = float(tf.keras.backend.get_value(m))
            scaled = self.restore_momentum * new / old
            if hasattr(m, "assign"):
                m.assign(scaled)
            else:
                opt.momentum = scaled

    def _restore(self):
        if self.restore_momentum is not None:
            opt = self.model.optimizer
            if hasattr(opt.momentum, "assign"):
                opt.momentum.assign(self.restore_momentum)
            else:
                opt.momentum = self.restore_momentum
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = _get_lr(self.model.optimizer)
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self.params.get("steps") if self.params else None
            if not self.steps_per_epoch:
                raise ValueError("chorus LearningRateScheduleCallback: staircase=False needs "
                                 "steps_per_epoch (fit did not say it)")

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if not self._active(self.current_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust(self.current_epoch)
        elif not self.staircase:
            self._adjust(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self._active(epoch):
            logs["lr"] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Raises the learning rate from initial_lr / size to initial_lr over warmup_epochs
    (every batch), as Horovod's (Goyal et al., 2017)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            n = size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            print("\nEpoch %d: finished gradual learning rate warmup to %g."
                  % (epoch + 1, _get_lr(self.model.optimizer)))
