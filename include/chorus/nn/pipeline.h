/*
 * chorus/nn/pipeline.h - pipeline parallelism (nn.h, nn/pipeline.c, docs/PARALLELISM.md): a model
 * cut into stages over consecutive ranks. Included by chorus/nn.h, which states the library's
 * conventions (errors, threading).
 */
#ifndef CHORUS_NN_PIPELINE_H
#define CHORUS_NN_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "chorus/nn/model.h"
#include "chorus/nn/optim.h"
#include "chorus/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The layers of a model cut into consecutive stages on consecutive ranks, trained on
 * micro-batches by a schedule of chorus/pipeline.h, and combined with data parallelism: a
 * world of D x P ranks is D pipelines of P consecutive ranks (rank r is stage r % P of
 * pipeline r / P), and the gradients of a stage are summed only over the D ranks holding
 * that stage. Activations go forward and their gradients back with non-blocking
 * point-to-point messages; a stage posts the receive of its next micro-batch before it
 * computes the current one. Each micro-batch in flight keeps its own activations (a stash
 * slot made the first time it is needed, so the slots a run holds are the most it ever had
 * in flight: m for GPipe, p - stage (+1 for the posted receive) for 1F1B). */
typedef struct nn_pipe nn_pipe;

/* What a rank measured, since nn_pipe_create. Bytes are of buffers actually allocated. */
typedef struct nn_pipe_stats {
    int stage, stages, replica, replicas;
    int layer_lo, layer_hi;   /* this stage runs layers [lo, hi) of the full model */
    size_t params_bytes;      /* this stage's parameters */
    size_t grads_bytes;       /* and their gradients */
    size_t activations_bytes; /* stash slots held at the peak: layer outputs, caches, the
                                 received input and output gradient of each micro-batch */
    int peak_inflight;        /* most micro-batches forwarded and not yet backwarded */
    double step_s;            /* seconds of pipeline steps (first to last micro-batch) */
    double wait_s;            /* of which waiting for a neighbour's activations, gradients,
                                 the delivery of its own sends, or the pipeline's end */
    uint64_t steps;
} nn_pipe_stats;

/* Collective over world: cuts full (a finalized model, its parameters initialised the same
 * on every rank) into `stages` stages balanced by compute (multiply-adds of a training step in
 * linear and conv2d layers: forward, weight and input gradients; other layers count their
 * output size), minimising the largest stage's, and sets this rank up as its
 * stage, for micro-batches of up to max_micro samples, m = micro per step, under schedule
 * kind. The stage copies its slice of full's parameters; full is not kept. Errors:
 * CHORUS_ERR_INVALID_ARG with the reason (a world size not a multiple of stages, more stages
 * than layers, counts below 1), the split's errors, CHORUS_ERR_NOMEM. */
chorus_result nn_pipe_create(const nn_model *full, chorus_comm *world, int stages, int micro,
                             chorus_pipe_kind kind, int max_micro, nn_pipe **out);
/* Frees the stage and its communicators (not world). Requests a failed step left pending are
 * completed first: at once when the failure broke the pipeline's communicator, else within
 * CHORUS_TIMEOUT_S. NULL is ignored. */
void nn_pipe_destroy(nn_pipe *p);

/* The stage's own model: its params and grads are the ones to update (optimizer) and to
 * report. Valid until nn_pipe_destroy. */
nn_model *nn_pipe_model(nn_pipe *p);
/* The communicator of this stage's replicas (this stage in every pipeline: the ranks whose
 * stage parameters are equal). Valid until nn_pipe_destroy. */
chorus_comm *nn_pipe_replicas(nn_pipe *p);

/* Collective over the pipeline: runs one step's forwards and backwards on nloc samples of
 * this pipeline (cut into m micro-batches of nloc/m, the first nloc%m one larger, as
 * chorus-train --accum), after zeroing the stage's gradients. x (nloc, in features) is read on
 * stage 0 only, y (nloc) on the last stage only (either may be NULL elsewhere). The last
 * stage's loss gradient is scaled by grad_scale; it adds the summed loss and hit count to
 * stats[0] and stats[1]. step seeds dropout: micro-batch k runs as step*m + k. Errors: a lost
 * or timed-out neighbour (CHORUS_ERR_PEER_LOST, CHORUS_ERR_TIMEOUT) with a message naming
 * its stage and world rank; CHORUS_ERR_NOMEM. */
chorus_result nn_pipe_step(nn_pipe *p, const float *x, const int32_t *y, int nloc, float grad_scale,
                           uint64_t step, double stats[2]);

/* Collective over the pipeline: forward only (dropout off) over n samples, in chunks of up
 * to max_micro; x (n, in features) is read on stage 0, y (n) on the last stage, which adds
 * the summed loss and hit count to stats[0] and stats[1]. Call between steps. Errors as
 * nn_pipe_step (the message gives the chunk's first sample in place of a micro-batch). */
chorus_result nn_pipe_evaluate(nn_pipe *p, const float *x, const int32_t *y, int n,
                               double stats[2]);

/* Sums the stage's gradients over the replicas of this stage (collective over them).
 * Errors: the allreduce's, with the message naming the stage. */
chorus_result nn_pipe_sync_grads(nn_pipe *p);

/* Collective over the pipeline: every stage's slice of a buffer laid out as the full model's
 * parameters (the parameters themselves, or optimizer state) into full (nparams of the full
 * model), on every rank of the pipeline; stage is this stage's slice (its model's nparams).
 * Errors: the broadcasts', with a message naming the stage. */
chorus_result nn_pipe_gather(nn_pipe *p, const float *stage, float *full);
/* This stage's slice of full (laid out as the full model's parameters) into stage. */
void nn_pipe_slice(const nn_pipe *p, const float *full, float *stage);

/* Fills *st with this rank's measurements. */
void nn_pipe_get_stats(const nn_pipe *p, nn_pipe_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_PIPELINE_H */
