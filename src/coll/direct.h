/*
 * direct.h - reductions in the canonical order (allreduce_direct.c): every element is folded
 * as ((x0 op x1) op x2) ... in rank order, independent of its position and of the buffer size.
 */
#ifndef CHORUS_DIRECT_H
#define CHORUS_DIRECT_H

#include "coll/comm.h"

/* Slice i (cnt[i] elements at off[i]) of the reduction of every rank's local ends at rank i,
 * written to out (which may overlap local). */
chorus_result chorus__direct_reduce_scatter(chorus_coll *x, const char *local, char *out,
                                            const size_t *off, const size_t *cnt, chorus_dtype t,
                                            chorus_op op, int tag_base);
/* With ag_buf: an allreduce. Each final segment of this rank's slice (out, inside ag_buf) goes
 * to a ring allgather over ag_buf at once (after CHORUS_AVG's division), so the two phases
 * overlap. */
chorus_result chorus__direct_rs_ag(chorus_coll *x, const char *local, char *out, const size_t *off,
                                   const size_t *cnt, chorus_dtype t, chorus_op op, int tag_base,
                                   char *ag_buf);
/* Large messages: direct reduce-scatter + ring allgather. */
chorus_result chorus__allreduce_rsag(chorus_comm *c, const void *send, void *recv, size_t count,
                                     chorus_dtype t, chorus_op op);
/* Small messages: everyone sends everything to everyone, each folds locally. */
chorus_result chorus__allreduce_oneshot(chorus_comm *c, const void *send, void *recv, size_t count,
                                        chorus_dtype t, chorus_op op);

#endif
