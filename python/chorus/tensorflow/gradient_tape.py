"""DistributedGradientTape: gradients averaged over the ranks by one grouped allreduce (the
engine fuses it), as Horovod's; the allreduce of gradients that the optimizers share."""

import tensorflow as tf

from .._core import Average, Sum, Adasum, global_process_set, as_op
from .compression import Compression
from .mpi_ops import grouped_allreduce, size
from .util import no_autograph


def _make_allreduce_grads(op, compression, sparse_as_dense, prescale, postscale, process_set,
                          name):
    """fn(grads, vars) -> the grads allreduced (None stays None), one grouped call."""
    op = as_op(op)
    if op is Adasum:
        raise NotImplementedError("chorus: op=Adasum is not supported by chorus.tensorflow; "
                                  "use op=Average (the default) or op=Sum")

    def fn(grads, variables=None):
        grads = list(grads)
        idx = [i for i, g in enumerate(grads) if g is not None]
        todo = []
        for i in idx:
            g = grads[i]
            if sparse_as_dense and isinstance(g, tf.IndexedSlices):
                g = tf.convert_to_tensor(g)
            todo.append(g)
        if not todo:
            return grads
        with tf.name_scope(name + "_Allreduce"):
            red = grouped_allreduce(todo, op=op, compression=compression,
                                    prescale_factor=prescale, postscale_factor=postscale,
                                    process_set=process_set, name=name + ".grads")
        out = list(grads)
        for i, r in zip(idx, red):
            out[i] = r
        return out
    return fn


class _DistributedGradientTape(tf.GradientTape):
    """A tf.GradientTape holding another tape's recording (its state is taken over), whose
    gradient() allreduces what the recording gives."""

    @classmethod
    def wrap(cls, gradtape, allreduce_grads):
        tape = cls.__new__(cls)
        tape.__dict__.update(gradtape.__dict__)
        tape._allreduce_grads = allreduce_grads
        tape._local_vars = set()
        return tape

    def register_local_source(self, source):
        """A variable whose gradient stays this rank's own: not allreduced, divided by the
        size (as Horovod's, so that it weighs as an averaged one would)."""
        self._local_vars.add(source.ref())

    @tf.autograph.experimental.do_not_convert
    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = super().gradient(target, sources, output_gradients, **kwargs)
        flat = tf.nest.flatten(sources)
        gflat = tf.nest.flatten(grads)
        local = [hasattr(s, "ref") and s.ref() in self._local_vars for s in flat]
        red = iter(self._allreduce_grads([g for g, l in zip(gflat, local) if not l]))
        n = float(size())
        out = [_scaled(g, 1.0 / n) if l else next(red) for g, l in zip(gflat, local)]
        return tf.nest.pack_sequence_as(grads, out)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       **kwargs):
        """([(variable, gradient)] of the local variables, [(variable, gradient)] of the
        others), the gradients as gradient() gives them."""
        grads = self.gradient(target, sources, output_gradients, **kwargs)
        pairs = list(zip(tf.nest.flatten(sources), tf.nest.flatten(grads)))
        return ([(v, g) for v, g in pairs if v.ref() in self._local_vars],
                [(v, g) for v, g in pairs if v.ref() not in self._local_vars])


def _scaled(g, f):
    """g * f for a tensor, tf.IndexedSlices or None."""
    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values * f, g.indices, g.dense_shape)
    return g * f


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=None,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                            num_groups=0, groups=None, process_set=global_process_set):
    """Wraps a tf.GradientTape: gradient() returns gradients allreduced over the ranks
    (Average by default) by one grouped allreduce."""
    if num_groups or groups:
        pass  # the engine fuses the one grouped call; grouping is its concern
    pre, post = _factors(op, gradient_predivide_factor, process_set)
    return _DistributedGradientTape.wrap(gradtape, _make_allreduce_grads(
        op if pre == 1.0 else Sum, compression or Compression.none, sparse_as_dense, pre, post,
        process_set, "DistributedGradientTape"))


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=None, sparse_as_dense=False, op=Average,
                                   gradient_predivide_factor=1.0, num_groups=0, groups=None,
                                   process_set=global_process_set, local_layers=None):
    """DistributedGradientTape whose local_layers' variables keep their own gradients."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set)
    layers = local_layers if isinstance(local_layers, (list, tuple)) else \
        ([local_layers] if local_layers is not None else [])
    for layer in layers:
        for v in layer.trainable_weights:
            tape.register_local_source(v)
    return tape


def _factors(op, predivide, process_set):
    """(prescale, postscale): Horovod's gradient_predivide_factor divides before the sum and
    multiplies by factor/size after it (Average only)."""
    if predivide == 1.0:
        return 1.0, 1.0
    if as_op(op) is not Average:
        raise ValueError("chorus: gradient_predivide_factor needs op=Average")
    n = process_set.size() if process_set is not None else size()
    return 1.0 / predivide, predivide / n


no_autograph(globals())
