"""horovod.tensorflow.DistributedOptimizer: a tf.compat.v1.train.Optimizer whose
compute_gradients allreduces the gradients, or for a Keras optimizer the wrapper of
chorus.tensorflow._keras."""

import tensorflow as tf

from .._core import Average, Sum, global_process_set
from . import _keras
from .compression import Compression
from .gradient_tape import _factors, _make_allreduce_grads
from .util import no_autograph


class _V1DistributedOptimizer(tf.compat.v1.train.Optimizer):
    """A tf.compat.v1.train.Optimizer whose compute_gradients allreduces the gradients."""

    def __init__(self, optimizer, allreduce_grads, name=None, use_locking=False):
        self._optimizer = optimizer
        self._allreduce_grads = allreduce_grads
        super().__init__(name=name or "Distributed" + type(optimizer).__name__,
                         use_locking=use_locking)

    def compute_gradients(self, *args, **kwargs):
        gv = self._optimizer.compute_gradients(*args, **kwargs)
        grads = self._allreduce_grads([g for g, _ in gv], [v for _, v in gv])
        return list(zip(grads, [v for _, v in gv]))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=None, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set):
    """Wraps an optimizer so that its gradients are allreduced over the ranks: a
    tf.compat.v1.train.Optimizer here, a Keras optimizer through chorus.tensorflow.keras."""
    if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
        return _keras.create_distributed_optimizer(
            optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
            gradient_predivide_factor, op, backward_passes_per_step,
            average_aggregated_gradients, process_set)
    if backward_passes_per_step != 1:
        raise NotImplementedError("chorus: backward_passes_per_step > 1 is not supported for "
                                  "tf.compat.v1 optimizers")
    pre, post = _factors(op, gradient_predivide_factor, process_set)
    fn = _make_allreduce_grads(op if pre == 1.0 else Sum, compression or Compression.none,
                               sparse_as_dense, pre, post, process_set,
                               name or "DistributedOptimizer")
    return _V1DistributedOptimizer(optimizer, fn, name, use_locking)


no_autograph(globals())
