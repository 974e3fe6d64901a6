/*
 * torch_compat.h - the one place where the torch.distributed backend meets the differences
 * between torch versions. torch 1.x has a backend derive from c10d::ProcessGroup, the object
 * torch.distributed keeps for a group; torch 2.x split that class in two, and a backend derives
 * from c10d::Backend, which torch wraps in its own ProcessGroup. Both versions keep the same
 * collective signatures and the same c10d::Work, so the backend is written once against
 * chorus_td::BackendBase.
 */
#ifndef CHORUS_TORCH_COMPAT_H
#define CHORUS_TORCH_COMPAT_H

#include <torch/version.h>

/* torch >= major.minor */
#define CHORUS_TORCH_AT_LEAST(major, minor)                                                        \
    (TORCH_VERSION_MAJOR > (major) ||                                                              \
     (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

/* CHORUS_TORCH_COALESCED: the backend implements allgather_into_tensor_coalesced and
 * reduce_scatter_tensor_coalesced (torch 2.x's all-gather and reduce-scatter of FSDP2, DTensor
 * and functional collectives). CHORUS_TORCH_SPLIT: Backend::split(store, ranks, options), which
 * torch.distributed.split_group calls. */
#define CHORUS_TORCH_COALESCED CHORUS_TORCH_AT_LEAST(2, 1)
#define CHORUS_TORCH_SPLIT     CHORUS_TORCH_AT_LEAST(2, 8)

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
namespace chorus_td
{
using BackendBase = c10d::Backend;
}
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
namespace chorus_td
{
using BackendBase = c10d::ProcessGroup;
}
#endif

/* PREMUL_SUM's factor: torch 1.x keeps a list of tensors, torch 2.x one tensor. */
namespace chorus_td
{
using PreMulSupplement = c10d::NCCLPreMulSumSupplement;
static inline at::Tensor premul_tensor(const PreMulSupplement &s)
{
#if TORCH_VERSION_MAJOR >= 2
    return s.tensor_factor;
#else
    return s.tensor_factors.empty() ? at::Tensor() : s.tensor_factors[0];
#endif
}
} // namespace chorus_td

#endif /* CHORUS_TORCH_COMPAT_H */
