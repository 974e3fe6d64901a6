"""SyncBatchNorm: batch normalisation with statistics over the whole global batch.

In training, every rank's per-channel sum, sum of squares and element count are summed over
the ranks with one differentiable allreduce; mean and variance come from the totals, so the
gradients flow back through the allreduce (its backward is an allreduce of the gradients).
In eval mode it is an ordinary BatchNorm using the running statistics.
"""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from .. import _core
from .._core import Sum, global_process_set
from . import mpi_ops


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d (and horovod.torch.SyncBatchNorm)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, x):
        if x.dim() < 2:
            raise ValueError("chorus SyncBatchNorm: expected at least 2D input (got %dD)"
                             % x.dim())

    def forward(self, x):
        self._check_input_dim(x)
        if not self.training and self.track_running_stats:
            return torch.nn.functional.batch_norm(x, self.running_mean, self.running_var,
                                                  self.weight, self.bias, False, 0.0, self.eps)
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        count = torch.tensor([x.numel() / c], dtype=xf.dtype, device=x.device)
        stats = torch.cat([xf.sum(dims), (xf * xf).sum(dims), count])
        _core.resolve_set(self.process_set)
        total = mpi_ops.allreduce(stats, op=Sum, name=None, process_set=self.process_set)
        n = total[2 * c]
        mean = total[:c] / n
        var = (total[c:2 * c] / n - mean * mean).clamp_min(0)
        if self.training and self.track_running_stats:
            with torch.no_grad():
                m = self.momentum
                if m is None:
                    m = 1.0 / float(self.num_batches_tracked)
                unbiased = var * (n / (n - 1)) if n > 1 else var
                self.running_mean.mul_(1 - m).add_(mean.detach().to(self.running_mean.dtype) * m)
                self.running_var.mul_(1 - m).add_(unbiased.detach().to(self.running_var.dtype) * m)
        shape = [1, c] + [1] * (x.dim() - 2)
        y = (xf - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y.to(x.dtype)
