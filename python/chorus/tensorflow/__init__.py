"""chorus.tensorflow: a drop-in for horovod.tensorflow over libchorus.

    import chorus.tensorflow as hvd
    hvd.init()
    tape = hvd.DistributedGradientTape(tape)
    hvd.broadcast_variables(model.variables, root_rank=0)

Every op reaches the same engine as chorus.torch through the NumPy front end (eagerly
directly, in a tf.function as a stateful tf.numpy_function). Keras is Horovod's Keras 2 API:
TF_USE_LEGACY_KERAS defaults to 1 here, so tf.keras is tf_keras. See docs/TENSORFLOW.md.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from .mpi_ops import *  # noqa: F401,F403,E402
from .mpi_ops import __all__ as _ops_all  # noqa: E402
from .compression import Compression, Compressor, NoneCompressor, FP16Compressor  # noqa: F401,E402
from .functions import (broadcast_variables, broadcast_global_variables,  # noqa: F401,E402
                        broadcast_object, broadcast_object_fn, allgather_object)
from .gradient_tape import DistributedGradientTape, PartialDistributedGradientTape  # noqa: E402
from .optimizer import DistributedOptimizer  # noqa: E402
from .util import _executing_eagerly  # noqa: F401,E402
from . import util  # noqa: F401,E402
from . import elastic  # noqa: F401,E402
from .sync_batch_norm import SyncBatchNormalization  # noqa: E402
from .._lib import (ChorusError, HorovodInternalError, ChorusMismatchError,  # noqa: F401,E402
                    ChorusPeerLostError, ChorusTimeoutError, HostsUpdatedInterrupt)

__all__ = list(_ops_all) + [
    "Compression", "broadcast_variables", "broadcast_global_variables", "broadcast_object",
    "broadcast_object_fn", "allgather_object", "DistributedGradientTape",
    "PartialDistributedGradientTape", "DistributedOptimizer", "ChorusError",
    "HorovodInternalError", "ChorusPeerLostError", "ChorusTimeoutError",
    "HostsUpdatedInterrupt", "SyncBatchNormalization",
]
