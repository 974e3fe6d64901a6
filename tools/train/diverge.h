/*
 * diverge.h - chorus-train's weight divergence check (--check-divergence N): every N
 * steps the ranks that should hold equal parameters (the data-parallel replicas, of each
 * tensor-parallel shard, of each pipeline stage; after ZeRO's all-gather) compare them in one
 * allgather of per-tensor hashes (chorus_check_divergence), and a divergence stops the run,
 * before any checkpoint of that step, naming the tensor, the ranks and the step. Also the
 * test-only fault injection that makes one rank diverge. Used by tools/train/ only.
 */
#ifndef CHORUS_TRAIN_DIVERGE_H
#define CHORUS_TRAIN_DIVERGE_H

#include <stdint.h>

#include "chorus.h"
#include "chorus/nn.h"

/* Collective over group, then over world when group is another communicator (so that every
 * rank stops together): compares m's parameters, tensor by tensor ("layer<first_layer + i>.
 * <kind>.weight" and ".bias"), across group. Returns 0 when they agree; otherwise writes the
 * reason (the tensor, the world ranks that differ and step; or, on ranks whose own group
 * agreed, which rank found it) into why and returns 1. A failed collective also returns 1,
 * with its error. */
int diverge_check(chorus_comm *world, chorus_comm *group, const nn_model *m, int first_layer,
                  uint64_t step, char *why, size_t len);

/* Test-only fault injection (--test-perturb, documented as such in docs/TRAINING.md): with spec
 * "RANK:STEP[:TENSOR]", world rank RANK changes the first element of tensor TENSOR (default:
 * the first one of m; x(1 + 2^-10), + 1e-4) right after the optimizer update of step STEP.
 * Returns 0 (also when spec is NULL), or 1 with the reason in why for an unknown tensor. */
int diverge_perturb(const char *spec, nn_model *m, int first_layer, int world_rank, uint64_t step,
                    char *why, size_t len);
/* Whether spec has the form RANK:STEP[:TENSOR]. */
int diverge_perturb_valid(const char *spec);

#endif /* CHORUS_TRAIN_DIVERGE_H */
