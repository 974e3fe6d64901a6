"""Small helpers with horovod.tensorflow.util's and horovod.common.util's names."""

import tensorflow as tf
from packaging import version


def _executing_eagerly():
    """True when TensorFlow runs eagerly here (not while a tf.function is traced)."""
    return tf.executing_eagerly()


def is_version_greater_equal_than(ver, target):
    """True when version string ver is at least target ("2.21.0-tf" reads as 2.21.0)."""
    return version.parse(ver.replace("-tf", "+tf")) >= version.parse(target)


def optimizer_variables(optimizer):
    """A Keras optimizer's variables (a method of the legacy optimizers, a property of the
    others); none for None."""
    if optimizer is None:
        return []
    v = optimizer.variables
    return list(v() if callable(v) else v)


def no_autograph(namespace):
    """Marks every function defined in the module of namespace (its globals()) as not to be
    converted by AutoGraph: called from a tf.function, the collectives run as the Python they
    are (AutoGraph would turn their Python conditions and loops into graph control flow)."""
    import inspect
    for k, v in list(namespace.items()):
        if inspect.isfunction(v) and v.__module__ == namespace["__name__"]:
            namespace[k] = tf.autograph.experimental.do_not_convert(v)
