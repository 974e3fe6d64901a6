"""The helper of horovod.common.util that Horovod's Keras test file imports."""

from chorus.tensorflow.util import is_version_greater_equal_than  # noqa: F401
