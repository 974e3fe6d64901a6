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

#endif /* CHORUS_TORCH_COMPAT_H */
