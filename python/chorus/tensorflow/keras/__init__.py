"""chorus.tensorflow.keras: a drop-in for horovod.tensorflow.keras (Keras 2: tf.keras with
TF_USE_LEGACY_KERAS=1, which chorus.tensorflow sets by default, or tf_keras).

    import chorus.tensorflow.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.001 * hvd.size()))
    model.fit(..., callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
"""

import numpy as np
import tensorflow as tf

from .. import mpi_ops as _ops
from ..mpi_ops import (init, shutdown, is_initialized, size, rank, local_size,  # noqa: F401
                       local_rank, cross_size, cross_rank, mpi_built, gloo_built, nccl_built,
                       ccl_built, ddl_built, cuda_built, rocm_built, mpi_enabled, gloo_enabled,
                       mpi_threads_supported, Average, Sum, Min, Max, Product, Adasum,
                       ProcessSet, global_process_set, add_process_set, remove_process_set,
                       join, barrier)
from ..compression import Compression  # noqa: F401
from ..sync_batch_norm import SyncBatchNormalization  # noqa: F401
from ..functions import broadcast_object, allgather_object  # noqa: F401
from .. import _keras, functions as _functions
from . import callbacks  # noqa: F401
from . import elastic  # noqa: F401


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set):
    """The Keras optimizer of the same class and configuration whose gradients are averaged
    over the ranks (op) before it applies them."""
    return _keras.create_distributed_optimizer(
        optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
        gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients,
        process_set)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                process_set=global_process_set, local_layers=None):
    """DistributedOptimizer whose local_layers' variables keep their own gradients (divided
    by the size, as Horovod's)."""
    return _keras.create_distributed_optimizer(
        optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
        gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients,
        process_set, local_layers)


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none):
    """Loads a saved Keras model (tf.keras.models.load_model) whose optimizer comes back as a
    DistributedOptimizer of its saved class and state: Keras's own optimizers by their names,
    custom_optimizers (classes) by theirs; custom_objects as Keras takes them."""

    def wrap(cls):
        class Loader:  # what Keras's deserialization calls from_config on
            @staticmethod
            def from_config(config, custom_objects=None):
                return DistributedOptimizer(cls.from_config(config), compression=compression)
        return Loader

    base = tf.keras.optimizers.Optimizer
    objects = {}
    for name, cls in vars(tf.keras.optimizers).items():
        if isinstance(cls, type) and issubclass(cls, base) and cls is not base:
            # a .h5 file names the optimizer in lower case, a .keras file as its class
            objects[name] = objects[name.lower()] = wrap(cls)
    objects.update({cls.__name__: wrap(cls) for cls in custom_optimizers or []})
    objects.update(custom_objects or {})
    return tf.keras.models.load_model(filepath, custom_objects=objects)


def broadcast_global_variables(root_rank, model=None):
    """Overwrites the model's variables (every variable of a tf.compat.v1 graph when no model
    is given) with root_rank's."""
    if model is not None:
        return _functions.broadcast_variables(model.variables, root_rank)
    return _functions.broadcast_global_variables(root_rank)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none, process_set=global_process_set):
    """The reduction of a value (number, array or tensor) over the ranks, as a NumPy value."""
    return _value(_ops.allreduce(tf.constant(value, name=name), average=average, op=op,
                                 prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, compression=compression,
                                 process_set=process_set, name=name))


def allgather(value, name=None, process_set=global_process_set):
    """Every rank's value concatenated along dim 0, as a NumPy value."""
    return _value(_ops.allgather(tf.constant(value, name=name), name=name,
                                 process_set=process_set))


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """root_rank's value on every rank, as a NumPy value."""
    return _value(_ops.broadcast(tf.constant(value, name=name), root_rank, name=name,
                                 process_set=process_set))


def reducescatter(value, name=None, op=Average, process_set=global_process_set):
    return _value(_ops.reducescatter(tf.constant(value, name=name), op=op, name=name,
                                     process_set=process_set))


def _value(t):
    return t.numpy() if tf.executing_eagerly() else tf.keras.backend.get_value(t)


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("np", "tf")]
del np
