/*
 * chorus/nn/optim.h - SGD and AdamW over a flat parameter buffer (nn.h).
 * Included by chorus/nn.h, which states the library's conventions (errors, threading).
 */
#ifndef CHORUS_NN_OPTIM_H
#define CHORUS_NN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { NN_SGD, NN_ADAMW } nn_opt_kind;

typedef struct nn_optim {
    nn_opt_kind kind;
    size_t n;           /* parameter count */
    float momentum;     /* SGD */
    int nesterov;       /* SGD */
    float weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
    float beta1, beta2, eps;
    uint64_t t; /* steps taken */
    float *m;   /* (n) SGD momentum buffer / Adam first moment */
    float *v;   /* (n) Adam second moment; NULL for SGD */
} nn_optim;

/* SGD as in PyTorch (dampening 0): g += wd*p; buf = momentum*buf + g;
 * p -= lr * (nesterov ? g + momentum*buf : buf). Errors: CHORUS_ERR_NOMEM. */
chorus_result nn_optim_init_sgd(nn_optim *o, size_t n, float momentum, int nesterov,
                                float weight_decay);
/* AdamW as in PyTorch: p *= 1 - lr*wd; m,v moments; p -= lr * mhat / (sqrt(vhat) + eps).
 * Errors: CHORUS_ERR_NOMEM. */
chorus_result nn_optim_init_adamw(nn_optim *o, size_t n, float beta1, float beta2, float eps,
                                  float weight_decay);
/* Frees the state buffers (m, v); o may then be initialised again. */
void nn_optim_free(nn_optim *o);
/* One update of params (n) from grads (n) with learning rate lr. */
void nn_optim_step(nn_optim *o, float *params, const float *grads, float lr);
/* Floats of optimizer state (m and v) for checkpoints: 0, n or 2n. */
size_t nn_optim_state_count(const nn_optim *o);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_OPTIM_H */
