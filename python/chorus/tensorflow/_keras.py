"""The Keras optimizer wrapper shared by chorus.tensorflow and chorus.tensorflow.keras (Keras
2: tf.keras with TF_USE_LEGACY_KERAS=1, or tf_keras): a subclass of the optimizer's own class
made at run time, built again from the optimizer's config, whose gradients are allreduced
(one grouped call) before they are applied, as Horovod's.

The gradients are reduced in _compute_gradients (Horovod's hook, which the legacy optimizers'
minimize calls) or else in apply_gradients (the Keras 2 optimizers' minimize and Model.fit
call compute_gradients, then apply_gradients), never twice. backward_passes_per_step=N adds
each step's gradients to local accumulators and reduces and applies them every Nth step
(divided by N with average_aggregated_gradients); the other steps only count iterations."""

import tensorflow as tf

from .._core import Average, Sum, global_process_set
from .compression import Compression
from .gradient_tape import _factors, _make_allreduce_grads, _scaled
from .mpi_ops import size
from .util import no_autograph


class _Aggregator:
    """Local accumulation of gradients over backward_passes_per_step steps (Horovod's
    LocalGradientAggregationHelperEager: counter, then the reduced sums)."""

    def __init__(self, passes, average, reduce_grads):
        self.passes = passes
        self.average = average
        self.reduce_grads = reduce_grads
        self.counter = None
        self.acc = None

    def _build(self, grads):
        with tf.init_scope():
            self.counter = tf.Variable(0, dtype=tf.int32, trainable=False,
                                       name="chorus_aggregation_counter")
            self.acc = [None if g is None else
                        tf.Variable(tf.zeros(g.dense_shape if isinstance(g, tf.IndexedSlices)
                                             else g.shape, g.dtype), trainable=False)
                        for g in grads]

    def __call__(self, grads):
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                 for g in grads]
        if self.acc is None:
            self._build(grads)
        self.counter.assign_add(1)
        for a, g in zip(self.acc, grads):
            if a is not None and g is not None:
                a.assign_add(g)

        def reduce_now():
            sums = [None if a is None else tf.convert_to_tensor(a) for a in self.acc]
            if self.average:
                sums = [None if s is None else s / self.passes for s in sums]
            red = self.reduce_grads(sums)
            red = [None if r is None else tf.identity(r) for r in red]
            with tf.control_dependencies([r for r in red if r is not None]):
                for a in self.acc:
                    if a is not None:
                        a.assign(tf.zeros_like(a))
                self.counter.assign(0)
            return [tf.zeros([]) if r is None else r for r in red]

        def keep():
            return [tf.zeros([]) if a is None else tf.convert_to_tensor(a) for a in self.acc]
        out = tf.cond(tf.equal(self.counter, self.passes), reduce_now, keep)
        return [None if g is None else o for g, o in zip(grads, out)]

    def apply(self, optimizer, apply_fn):
        def apply_now():
            apply_fn()
            return tf.constant(True)

        def skip():
            optimizer.iterations.assign_add(1)
            return tf.constant(False)
        return tf.cond(tf.equal(self.counter, 0), apply_now, skip)


def create_distributed_optimizer(optimizer, name=None, device_dense="", device_sparse="",
                                 compression=None, sparse_as_dense=False,
                                 gradient_predivide_factor=1.0, op=Average,
                                 backward_passes_per_step=1,
                                 average_aggregated_gradients=False, process_set=None,
                                 local_layers=None):
    process_set = process_set or global_process_set
    pre, post = _factors(op, gradient_predivide_factor, process_set)
    reduce_all = _make_allreduce_grads(op if pre == 1.0 else Sum,
                                       compression or Compression.none,
                                       sparse_as_dense or backward_passes_per_step > 1, pre,
                                       post, process_set,
                                       name or "Distributed%s" % type(optimizer).__name__)
    layers = local_layers if isinstance(local_layers, (list, tuple)) else \
        ([local_layers] if local_layers is not None else [])
    local_refs = {v.ref() for layer in layers for v in layer.trainable_weights}
    base = optimizer.__class__

    def reduce_grads(grads, variables):
        """Local variables' gradients are divided by the size (as Horovod); the others are
        allreduced."""
        local = [v is not None and v.ref() in local_refs for v in variables]
        red = iter(reduce_all([g for g, l in zip(grads, local) if not l]))
        n = float(size())
        return [_scaled(g, 1.0 / n) if l else next(red) for g, l in zip(grads, local)]

    def reduce_or_aggregate(self, grads, variables):
        if backward_passes_per_step == 1:
            return reduce_grads(grads, variables)
        if self._agg_helper is None:
            self._agg_helper = _Aggregator(backward_passes_per_step,
                                           average_aggregated_gradients,
                                           lambda gs: reduce_grads(gs, variables))
        return self._agg_helper(grads)

    @tf.autograph.experimental.do_not_convert
    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        if hasattr(base, "_compute_gradients"):
            gv = base._compute_gradients(self, loss, var_list, grad_loss=grad_loss, tape=tape)
        else:
            gv = base.compute_gradients(self, loss, var_list, tape=tape)
        gv = list(gv)
        grads = reduce_or_aggregate(self, [g for g, _ in gv], [v for _, v in gv])
        self._chorus_reduced = True
        return list(zip(grads, [v for _, v in gv]))

    @tf.autograph.experimental.do_not_convert
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        gv = list(grads_and_vars)
        if not self._chorus_reduced:
            grads = reduce_or_aggregate(self, [g for g, _ in gv], [v for _, v in gv])
            gv = list(zip(grads, [v for _, v in gv]))
        self._chorus_reduced = False
        if self._agg_helper is None:
            return base.apply_gradients(self, gv, *args, **kwargs)
        return self._agg_helper.apply(self, lambda: base.apply_gradients(self, gv, *args,
                                                                           **kwargs))

    @tf.autograph.experimental.do_not_convert
    def get_gradients(self, loss, params):
        return reduce_grads(base.get_gradients(self, loss, params), params)

    def register_local_var(self, var):
        """var's gradient stays this rank's own (divided by the size, as Horovod's)."""
        local_refs.add(var.ref())

    attrs = {"_compute_gradients": _compute_gradients, "apply_gradients": apply_gradients,
             "register_local_var": register_local_var,
             "_chorus_distributed": True, "_chorus_reduced": False, "_agg_helper": None}
    if hasattr(base, "get_gradients"):
        attrs["get_gradients"] = get_gradients
    cls = type(base.__name__, (base,), attrs)
    return cls.from_config(optimizer.get_config())


no_autograph(globals())
