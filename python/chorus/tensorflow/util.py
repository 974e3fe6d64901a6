"""Small helpers with horovod.tensorflow.util's and horovod.common.util's names."""

import tensorflow as tf
from packaging import version


def _executing_eagerly():
    """True when TensorFlow runs eagerly here (not while a tf.function is traced)."""
    return tf.executing_eagerly()


def is_version_greater_equal_than(ver, target):
    """True when version string ver is at least target ("2.21.0-tf" reads as 2.21.0)."""
    return version.parse(ver.replace("-tf", "+tf")) >= version.parse(target)
