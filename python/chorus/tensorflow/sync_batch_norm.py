"""SyncBatchNormalization (horovod.tensorflow.SyncBatchNormalization): Keras 2's
BatchNormalization whose batch statistics in training are those of the whole batch over the
ranks of a process set, so every rank normalises with the same mean and variance and
updates the same moving averages.

Each rank sums its inputs, their squares and its count per channel; one allreduce (Sum)
adds the three; mean = sum / count and variance = E[x^2] - mean^2 (as Keras's own
synchronized BatchNormalization computes them, and correct for batches of different sizes
on the ranks). float16 inputs are reduced in float32. Inference uses the moving averages
and makes no collective."""

import tensorflow as tf

from .._core import Sum, global_process_set
from .mpi_ops import allreduce
from .util import no_autograph


class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
    """BatchNormalization over the batch of all ranks of process_set (Keras 2)."""

    def __init__(self, fused=False, process_set=global_process_set, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True (the fused "
                             "kernel computes its statistics itself); pass fused=False")
        kwargs.setdefault("name", "sync_batch_normalization")
        super().__init__(fused=False, **kwargs)
        self.process_set = process_set

    def _calculate_mean_and_var(self, inputs, reduction_axes, keep_dims, mask=None):
        y = tf.cast(inputs, tf.float32) if inputs.dtype == tf.float16 else inputs
        if mask is None:
            count = tf.ones_like(y)
        else:
            w = tf.expand_dims(tf.cast(mask, y.dtype), axis=-1)
            y = y * w
            count = tf.broadcast_to(w, tf.shape(y))
        local = tf.stack([tf.reduce_sum(y, axis=reduction_axes, keepdims=True),
                          tf.reduce_sum(tf.square(y), axis=reduction_axes, keepdims=True),
                          tf.reduce_sum(count, axis=reduction_axes, keepdims=True)])
        total = allreduce(local, op=Sum, process_set=self.process_set,
                          name="%s.moments" % self.name)
        mean = tf.math.divide_no_nan(total[0], total[2])
        variance = tf.maximum(tf.math.divide_no_nan(total[1], total[2]) - tf.square(mean), 0.0)
        if not keep_dims:
            mean = tf.squeeze(mean, reduction_axes)
            variance = tf.squeeze(variance, reduction_axes)
        if inputs.dtype == tf.float16:
            return tf.cast(mean, tf.float16), tf.cast(variance, tf.float16)
        return mean, variance


no_autograph(globals())
