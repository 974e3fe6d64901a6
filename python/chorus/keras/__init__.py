"""chorus.keras: Horovod's horovod.keras name for chorus.tensorflow.keras (Keras 2)."""

from ..tensorflow.keras import *  # noqa: F401,F403
from ..tensorflow.keras import __all__  # noqa: F401
from ..tensorflow.keras import callbacks  # noqa: F401
from ..tensorflow.keras import elastic  # noqa: F401
