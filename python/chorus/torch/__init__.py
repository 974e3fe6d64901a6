"""chorus.torch: a drop-in for horovod.torch over libchorus.

    import chorus.torch as hvd
    hvd.init()
    torch.set_num_threads(1)  # optional, on small machines
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

See docs/PYTHON.md for what differs from Horovod.
"""

from .mpi_ops import *  # noqa: F401,F403
from .mpi_ops import __all__ as _ops_all
from .compression import Compression, Compressor, NoneCompressor, FP16Compressor  # noqa: F401
from .functions import (broadcast_parameters, broadcast_optimizer_state, broadcast_object,  # noqa
                        allgather_object)
from .optimizer import DistributedOptimizer  # noqa: F401
from .balance import BalancedDistributedSampler, balanced_shares  # noqa: F401
from .sync_batch_norm import SyncBatchNorm  # noqa: F401
from .divergence import check_divergence, DivergenceError  # noqa: F401
from . import elastic  # noqa: F401
from .._lib import (ChorusError, HorovodInternalError, ChorusMismatchError,  # noqa: F401
                    ChorusPeerLostError, ChorusTimeoutError, HostsUpdatedInterrupt)
from .._scalars import log_scalar  # noqa: F401

__all__ = list(_ops_all) + [
    "Compression", "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "allgather_object", "DistributedOptimizer", "SyncBatchNorm", "ChorusError",
    "ChorusPeerLostError", "ChorusTimeoutError", "HostsUpdatedInterrupt",
    "log_scalar",
    "BalancedDistributedSampler", "balanced_shares", "check_divergence", "DivergenceError",
]
