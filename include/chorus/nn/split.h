/*
 * chorus/nn/split.h - splitting a model that outgrows one rank (nn.h): tensor-parallel linear
 * layers, activation recomputation, sharded optimizer state and gradients (ZeRO stages 1 and 2).
 * Included by chorus/nn.h, which states the library's conventions (errors, threading).
 */
#ifndef CHORUS_NN_SPLIT_H
#define CHORUS_NN_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include "chorus/nn/memory.h"
#include "chorus/nn/model.h"
#include "chorus/nn/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Linear layers split over the ranks of a communicator tp of T ranks, as in Megatron-LM:
 *   column: the weight (Fout, Fin) is split by output features; rank t holds rows
 *           [t*Fout/T, (t+1)*Fout/T) and their biases and computes that slice of the output
 *           from the whole input. Backward: the gradient w.r.t. the input is the sum of every
 *           rank's part: one allreduce.
 *   row:    the weight is split by input features; the input is the slice a column layer
 *           produced; each rank computes a partial output x_t W_t^T, one allreduce sums them,
 *           and the (whole, replicated) bias is added once. Backward needs no communication.
 * A column layer, element-wise layers, then a row layer form a block that takes and gives the
 * whole activations with one allreduce in forward and one in backward. */
typedef enum { NN_TP_NONE, NN_TP_COLUMN, NN_TP_ROW } nn_tp_mode;

/* Appends a column-parallel Linear of out_features outputs in all (this rank computes
 * out_features / chorus_size(tp) of them). Errors: CHORUS_ERR_INVALID_ARG when out_features
 * is not a multiple of the rank count, or as nn_add_linear. */
chorus_result nn_add_linear_column(nn_model *m, int out_features, chorus_comm *tp);
/* Appends a row-parallel Linear of out_features outputs whose input is this rank's slice of
 * the features (the output of a column layer, possibly through element-wise layers).
 * Errors: CHORUS_ERR_INVALID_ARG for a bad count, or as nn_add_linear. */
chorus_result nn_add_linear_row(nn_model *m, int out_features, chorus_comm *tp);
/* CHORUS_OK, or the error of the first collective that failed inside nn_forward or
 * nn_backward since the model was built (they cannot return it; their outputs are then
 * meaningless), with its message (naming the peer) in nn_last_error(). */
chorus_result nn_model_comm_status(const nn_model *m);

/* ---- activation recomputation -------------------------------------------------------- */

/* Set before nn_model_finalize: the layers are cut into segments of about k layers (a cut
 * never falls before an in-place layer, so a segment's input is never overwritten); forward
 * keeps only each segment's output, and nn_backward recomputes a segment's activations from
 * its input before differentiating it (the last segment's are still there). The activation
 * buffers inside a segment are shared by all segments. The same computations run in the same
 * order, so gradients are bitwise those of a model that stores everything. k <= 0 chooses
 * about sqrt(layers). */
void nn_model_set_recompute(nn_model *m, int k);

/* ---- sharded optimizer state, gradients and parameters (ZeRO stages 1, 2 and 3) ------ */

/* The parameters are cut into segments of at most NN_ZERO_BUCKET floats, never across a
 * layer; rank r of p owns chunk r of each segment (ceil(len/p) floats, the last chunk maybe
 * shorter). Its optimizer state covers only its chunks (1/p of the model plus at most p-1
 * floats per segment). A step:
 *   stage 1: the gradients are allreduced (as data parallelism does); each rank updates its
 *            chunks of the parameters and optimizer state;
 *   stage 2: no full gradient buffer exists: every layer's gradient is written into one
 *            buffer of the largest layer's size, and reduce-scattered the moment backward has
 *            finished that layer (grad hook), so each rank keeps only its chunks of the summed
 *            gradients; then it updates its chunks.
 * Then every segment's chunks are all-gathered into every rank's parameters.
 *   stage 3: the gradients as at stage 2, and no whole parameters either: each rank keeps its
 *            chunks of them (pshard) and updates them there; m->params is freed, and every
 *            layer's parameter views point into one buffer of the largest layer's size, into
 *            which a layer's parameters are all-gathered just before they are read (the
 *            forward hook, which the model's passes call before each layer's forward and
 *            before its backward) and which the next layer's gather then overwrites.
 * The sums fold in rank order as the allreduce's do, and the update is element-wise, so the
 * parameters are bitwise those of plain data parallelism. */
#define NN_ZERO_BUCKET (1u << 18)

typedef struct nn_zero_seg {
    size_t off, len;  /* in model->params */
    size_t chunk;     /* ceil(len / size) */
    size_t shard_off; /* of this rank's chunk in the optimizer state and gradient shard */
} nn_zero_seg;

struct nn_zero_gather; /* the all-gather thread (nn/zero.c) */

typedef struct nn_zero {
    int stage, rank, size;
    chorus_comm *comm;
    int nseg;
    nn_zero_seg *seg;
    size_t shard_n; /* floats of this rank's chunks in all */
    float *gshard;  /* stage 2: (shard_n) this rank's chunks of the summed gradients */
    float *gbuf;    /* stage 2: one layer's gradient, padded to whole chunks */
    size_t gbuf_n;
    float *scratch; /* stages 1, 2: (size+1) * largest chunk: all-gather landing and send */
    size_t scratch_n;
    float *pshard;     /* stage 3: (shard_n) this rank's chunks of the parameters */
    float *pbuf;       /* stage 3: one group's parameters, all-gathered (gbuf_n floats) */
    int *first_seg;    /* (layers + 1): layer i's segments are [first_seg[i], first_seg[i + 1]) */
    int resident;      /* stage 3: the layer whose parameters pbuf holds (-1: none) */
    uint64_t gathers;  /* stage 3: group all-gathers run (forward and backward) */
    chorus_result err; /* first failure in the backward hook */
    double comm_s;     /* seconds in the collectives (the all-gather thread's included) */
    double gather_s;   /* seconds the parameter all-gathers took (part of comm_s) */
    double wait_s;     /* seconds forward waited for parameters still being all-gathered */
    uint64_t steps;    /* nn_zero_step calls */
    int summed;        /* nn_zero_sum_grads ran this step: nn_zero_step does not sum again */
    nn_mem *mem;
    struct nn_zero_gather *bg; /* nn_zero_overlap: the all-gather thread */
} nn_zero;

/* Floats of optimizer state per state vector that rank `rank` of `size` needs for m (the
 * optimizer is initialised with this count). */
size_t nn_zero_shard_count(const nn_model *m, int rank, int size);
/* Sets z up for stage 1, 2 or 3 over comm for the finalized model m (stages 2 and 3: m was
 * finalized with m->no_grads set, and the layers' gradient views are pointed into z's buffer;
 * stage 3: this rank's chunks are taken from m->params, which is then freed (its
 * m->nparams floats removed from mem, where the caller recorded them) and left NULL, the
 * layers' parameter views are pointed into z's gather buffer and m->fwd_hook is installed;
 * a model whose passes do not call the forward hook before reading a layer's parameters in
 * backward too cannot run stage 3). Records its buffers in mem (may be NULL). Errors:
 * CHORUS_ERR_INVALID_ARG, CHORUS_ERR_NOMEM. */
chorus_result nn_zero_init(nn_zero *z, nn_model *m, chorus_comm *comm, int stage, nn_mem *mem);
/* Frees z's buffers. */
void nn_zero_free(nn_zero *z);
/* Collective over z's communicator: from now on nn_zero_step leaves the all-gather to a thread
 * of its own (on a communicator split from z's, so the caller's collectives may run meanwhile),
 * segment by segment in layer order, and installs m->fwd_hook: the next forward waits before
 * each layer only for that layer's segments, so the all-gather of the later layers overlaps
 * the forward pass of the earlier ones. A failed all-gather is latched in m->comm_err
 * (nn_model_comm_status). Errors: the split's, CHORUS_ERR_SYSTEM (no thread). */
chorus_result nn_zero_overlap(nn_zero *z, nn_model *m);
/* Waits until the parameters are whole (before reading them outside forward: a dump, a
 * checkpoint). Errors: the all-gather's. */
chorus_result nn_zero_wait(nn_zero *z, nn_model *m);
/* Call before the backward pass of a step (one backward pass per step at stage 2): stage 2
 * installs the hook that reduce-scatters each layer's gradient. */
void nn_zero_begin_backward(nn_zero *z, nn_model *m);
/* Completes the step: the gradient reduction (stage 1), this rank's update of its chunks with
 * o (initialised with nn_zero_shard_count floats) at learning rate lr, and the all-gather of
 * the parameters. Errors: the collectives' (the peer named in nn_last_error()). */
chorus_result nn_zero_step(nn_zero *z, nn_model *m, nn_optim *o, float lr);
/* For an update that needs the summed gradient before it (clipping by its norm): the sum
 * now, after backward, rather than in nn_zero_step (stage 1: the allreduce of m->grads, which
 * then holds the whole sum on every rank; stage 2: the reduce-scatter already ran in
 * backward). Errors: the collectives'. */
chorus_result nn_zero_sum_grads(nn_zero *z, nn_model *m);
/* Stage 2, after nn_zero_sum_grads: the norm of the summed gradient from every rank's chunks
 * (a collective over z's communicator: the same value on every rank; the squares are added
 * in another order than over the whole gradient, so its last bits may differ from that). */
chorus_result nn_zero_shard_norm(nn_zero *z, double *norm);
/* Multiplies the summed gradient this rank updates from by k (stage 1: m->grads; stages 2 and
 * 3: its chunks). */
void nn_zero_scale_grads(nn_zero *z, nn_model *m, float k);
/* Collective over z's communicator: the whole parameters (stage 3) and optimizer state (every
 * stage) from every rank's chunks; at stages 1 and 2, whose parameters are whole on every
 * rank already, whole_p is NULL everywhere. The ranks' chunks of params (stage 3's own), om
 * and ov (this rank's
 * optimizer state, shard_n floats each; either may be NULL, then on every rank) go to
 * whole_p, whole_m and whole_v (m->nparams floats each) on rank root only, or on every rank
 * when root is -1 (the others pass NULL). Errors: the collectives'. */
chorus_result nn_zero_gather_whole(nn_zero *z, int root, const float *om, const float *ov,
                                   float *whole_p, float *whole_m, float *whole_v);
/* Collective: the reverse: rank root's whole_p (stage 3; NULL at stages 1 and 2), whole_m and
 * whole_v (m->nparams floats each; NULL on the other ranks) become every rank's chunks (its
 * parameters, om and ov; om or ov NULL on every rank: skipped). At stages 1 and 2 the
 * all-gather scratch is the landing: no all-gather may be in flight (nn_zero_wait). Errors:
 * the collectives'. */
chorus_result nn_zero_scatter_whole(nn_zero *z, int root, const float *whole_p,
                                    const float *whole_m, const float *whole_v, float *om,
                                    float *ov);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_SPLIT_H */
