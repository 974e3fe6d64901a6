"""The Keras optimizer wrapper shared by chorus.tensorflow and chorus.tensorflow.keras (Keras
2, tf.keras with TF_USE_LEGACY_KERAS=1, or tf_keras): a subclass of the optimizer's own class
made at run time, whose apply_gradients allreduces the gradients first (one grouped call),
so Model.fit, train_on_batch and minimize() all train on the ranks' average."""

from .._core import Average
from .compression import Compression
from .gradient_tape import _factors, _make_allreduce_grads


def create_distributed_optimizer(optimizer, name=None, device_dense="", device_sparse="",
                                 compression=None, sparse_as_dense=False,
                                 gradient_predivide_factor=1.0, op=Average,
                                 backward_passes_per_step=1,
                                 average_aggregated_gradients=False, process_set=None):
    if backward_passes_per_step != 1:
        raise NotImplementedError("chorus: backward_passes_per_step > 1 (local gradient "
                                  "aggregation) is not supported by chorus.tensorflow.keras")
    from .._core import global_process_set
    process_set = process_set or global_process_set
    pre, post = _factors(op, gradient_predivide_factor, process_set)
    from .._core import Sum
    reduce_grads = _make_allreduce_grads(op if pre == 1.0 else Sum,
                                         compression or Compression.none, sparse_as_dense, pre,
                                         post, process_set,
                                         name or "Distributed%s" % type(optimizer).__name__)
    base = optimizer.__class__

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        gv = [(g, v) for g, v in grads_and_vars]
        grads = reduce_grads([g for g, _ in gv], [v for _, v in gv])
        return base.apply_gradients(self, list(zip(grads, [v for _, v in gv])), *args,
                                    **kwargs)

    def get_gradients(self, loss, params):
        return reduce_grads(base.get_gradients(self, loss, params), params)

    attrs = {"apply_gradients": apply_gradients, "_chorus_distributed": True}
    if hasattr(base, "get_gradients"):
        attrs["get_gradients"] = get_gradients
    cls = type(base.__name__, (base,), attrs)
    return cls.from_config(optimizer.get_config())
