/*
 * chorus/nn/dist.h - data-parallel gradient synchronisation and gradient compression (nn.h).
 * Included by chorus/nn.h, which states the library's conventions (errors, threading).
 */
#ifndef CHORUS_NN_DIST_H
#define CHORUS_NN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "chorus/nn/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one place where the trainer talks to the communicator about gradients. */
typedef enum {
    NN_SYNC_LAYER, /* one blocking allreduce per layer that has parameters, last layer first,
                      after the backward pass */
    NN_SYNC_FUSED, /* one blocking allreduce over model->grads after the backward pass */
    NN_SYNC_ENGINE /* through the training runtime (chorus/engine.h): each layer's gradient
                      is enqueued by name as soon as backward has produced it, so it travels
                      while the layers below are differentiated; the step waits on them */
} nn_sync_mode;

struct nn_dist_engine; /* engine mode: the engine, handles and timings (nn/dist.c) */

/* One tensor of a model's gradient: a row-major rows x cols matrix at off in model->grads
 * (rows 1: a vector). nn_dist_set_tensors. */
typedef struct nn_grad_tensor {
    char name[40]; /* what it travels under ("block0.qkv.weight") */
    size_t off, rows, cols;
} nn_grad_tensor;

typedef struct nn_dist {
    chorus_comm *comm;
    int rank, size;
    nn_sync_mode mode;
    double wait_s;        /* seconds the caller was blocked in collectives since init (exposed
                             communication: in engine mode only the waits on the handles) */
    double comm_s;        /* seconds gradient communication took since init: engine mode, the time
                             at least one gradient tensor was on its way (from its enqueue to the end
                             of its handle; union over the tensors of a step, summed over steps);
                             blocking modes, the time in the gradient allreduces */
    double hidden_s;      /* the part of comm_s that overlapped backward: in flight before the
                             step began to wait for the gradients, less the time the caller's
                             thread was off the CPU meanwhile (a lower bound; 0 in the blocking
                             modes) */
    double grad_wait_s;   /* the part of wait_s spent waiting for gradients */
    uint64_t in_backward; /* engine mode: gradient tensors handed to the engine during backward
                             (by the hook) rather than by nn_dist_sync_grads, since init */
    size_t bucket_bytes;  /* engine mode: consecutive layers are sent as one tensor until it
                             holds this many bytes (0, the default: one tensor per layer). Set
                             before the first step, the same on every rank. */
    struct nn_dist_engine *eng;
    struct chorus_compressor *comp; /* gradient compression (nn_dist_set_compression), or NULL */
    nn_grad_tensor *tensors;        /* nn_dist_set_tensors, or NULL */
    int ntensors;
    float *vec;   /* the vectors of tensors packed for their one dense sum */
    size_t vec_n; /* floats in vec */
} nn_dist;

/* Sets d up over comm (NULL: one rank, nothing to communicate). NN_SYNC_ENGINE with more than
 * one rank starts an engine (collective: every rank calls this). Errors: the engine's, and
 * CHORUS_ERR_NOMEM. */
chorus_result nn_dist_init(nn_dist *d, chorus_comm *comm, nn_sync_mode mode);
/* Stops the engine, if any (collective in engine mode). d->comm is not finalized. */
void nn_dist_finalize(nn_dist *d);
/* Copies rank 0's parameters to every rank. Errors: the broadcast's (e.g.
 * CHORUS_ERR_PEER_LOST), with the peer in nn_last_error(). */
chorus_result nn_dist_broadcast_params(nn_dist *d, nn_model *m);
/* Call before the LAST backward pass of a step (after nn_zero_grad and any earlier
 * accumulating passes). In engine mode it installs m->grad_hook so that each layer's
 * gradient is enqueued the moment backward finishes it; other modes do nothing. */
void nn_dist_begin_backward(nn_dist *d, nn_model *m);
/* Sums model->grads over the ranks, in place: the blocking modes allreduce now; engine mode
 * enqueues what backward has not (a step without nn_dist_begin_backward), waits on every
 * handle and removes the hook. The caller scales the loss gradient by 1/global batch, so the
 * sum is the gradient of the global mean loss. Errors: the allreduce's or the engine's (the
 * first failing tensor is named in nn_last_error()). */
chorus_result nn_dist_sync_grads(nn_dist *d, nn_model *m);
/* Sums n doubles over the ranks, in place (loss and accuracy counters). Errors: the
 * allreduce's. */
chorus_result nn_dist_sum(nn_dist *d, double *v, int n);
/* Broadcasts n bytes from rank 0. Errors: the broadcast's. */
chorus_result nn_dist_broadcast_bytes(nn_dist *d, void *buf, size_t n);

/* ---- gradient compression (nn/compress.c) ------------------------------------------------ */

/* Compresses the gradients with spec ("none", "fp16", "bf16", "topk:R", "randomk:R",
 * "powersgd:N": chorus_compressor_create) in every sync mode: fused compresses model->grads as
 * one tensor ("grads"; PowerSGD layer by layer, as it needs each layer's matrix), layer each
 * layer's gradient ("linear3"), engine each bucket (a bucket of several layers gets PowerSGD's
 * default square view). Layers under 1024 parameters stay dense; PowerSGD views a layer's
 * gradient as its weight matrix (out, in) with the bias as extra rows. The same spec on every
 * rank, after nn_dist_init and before the first step of m; nn_dist_finalize frees it. Errors:
 * CHORUS_ERR_INVALID_ARG for an unknown spec (nn_last_error() lists the valid ones),
 * CHORUS_ERR_NOMEM. */
chorus_result nn_dist_set_compression(nn_dist *d, const nn_model *m, const char *spec);
/* For PowerSGD: the model's gradient as the tensors it is made of (n of them, covering every
 * parameter once) rather than one matrix per layer, for a model whose layers hold several
 * (the GPT's groups: nn_gpt_grad_tensors). Each matrix is then compressed under its own name
 * and shape (dense when nn_dist_set_compression's rules say so) and the vectors (rows 1:
 * biases, LayerNorm parameters) are sent dense, as PyTorch's PowerSGD hook sends its
 * uncompressed tensors: in the blocking modes packed into one allreduce, in engine mode each
 * its own tensor (the engine fuses them), every tensor of a layer handed over when backward
 * finishes the layer (d->bucket_bytes does not apply). The other compressors are unchanged. Call
 * before nn_dist_set_compression, the same tensors on every rank; nn_dist_finalize frees them.
 * Errors: CHORUS_ERR_NOMEM. */
chorus_result nn_dist_set_tensors(nn_dist *d, const nn_grad_tensor *t, int n);
/* Bytes of gradient one rank sends per step with the compression set, against dense float32
 * (a step of model m); 1.0 with none. */
double nn_dist_compression_ratio(const nn_dist *d, const nn_model *m);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_DIST_H */
