/*
 * nn_internal.h - helpers shared by the files of libchorus_nn; not installed.
 */
#ifndef CHORUS_NN_INTERNAL_H
#define CHORUS_NN_INTERNAL_H

#include "chorus/nn.h"

static inline size_t nn__in_features(const nn_layer *L)
{
    return (size_t)L->in_c * (size_t)L->in_h * (size_t)L->in_w;
}

static inline size_t nn__out_features(const nn_layer *L)
{
    return (size_t)L->out_c * (size_t)L->out_h * (size_t)L->out_w;
}

/* Biases (or LayerNorm betas) at the end of a layer's parameters. */
static inline size_t nn__bias_count(const nn_layer *L)
{
    switch (L->kind) {
    case NN_LINEAR:
    case NN_CONV2D: return (size_t)L->out_c;
    case NN_LAYERNORM: return L->nparams / 2;
    default: return 0;
    }
}

/* The error convention of libchorus_nn: a function that can fail returns a chorus_result and,
 * when it is not CHORUS_OK, leaves a one-line message for nn_last_error() (thread-local).
 * nn__fail formats that message and returns r, so `return nn__fail(CHORUS_ERR_..., ...)`. */
chorus_result nn__fail(chorus_result r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The global step recorded in a checkpoint payload: 1 and *step when buf starts with a payload
 * header, else 0 (ckpt_payload.c). */
int nn__ckpt_payload_step(const void *buf, size_t len, uint64_t *step);

/* The blocking modes' gradient sum through d->comp (nn/compress.c): fused, one tensor
 * "grads"; layer, one per layer, last first. Errors: the compressed allreduce's. */
chorus_result nn__dist_compressed_sync(nn_dist *d, nn_model *m);

#endif /* CHORUS_NN_INTERNAL_H */
