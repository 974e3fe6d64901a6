/*
 * optim.c - SGD (momentum, Nesterov, L2 weight decay) and AdamW over one flat parameter
 * buffer, with the same update rules as PyTorch's torch.optim.SGD and AdamW (the rules
 * themselves are in include/chorus/optim.h, shared with the parameter server).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/nn.h"
#include "nn_internal.h"
#include "chorus/optim.h"

chorus_result nn_optim_init_sgd(nn_optim *o, size_t n, float momentum, int nesterov,
                                float weight_decay)
{
    memset(o, 0, sizeof(*o));
    o->kind = NN_SGD;
    o->n = n;
    o->momentum = momentum;
    o->nesterov = nesterov;
    o->weight_decay = weight_decay;
    if (momentum != 0.0f && !(o->m = calloc(n ? n : 1, sizeof(float))))
        return nn__fail(CHORUS_ERR_NOMEM, "nn_optim_init_sgd: out of memory for %zu floats", n);
    return CHORUS_OK;
}

chorus_result nn_optim_init_adamw(nn_optim *o, size_t n, float beta1, float beta2, float eps,
                                  float weight_decay)
{
    memset(o, 0, sizeof(*o));
    o->kind = NN_ADAMW;
    o->n = n;
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
    o->m = calloc(n ? n : 1, sizeof(float));
    o->v = calloc(n ? n : 1, sizeof(float));
    if (!o->m || !o->v) {
        nn_optim_free(o);
        return nn__fail(CHORUS_ERR_NOMEM, "nn_optim_init_adamw: out of memory for 2 x %zu floats",
                        n);
    }
    return CHORUS_OK;
}

void nn_optim_free(nn_optim *o)
{
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

size_t nn_optim_state_count(const nn_optim *o)
{
    return (o->m ? o->n : 0) + (o->v ? o->n : 0);
}

/* Built per instruction set as AdamW's below: every rank runs it over all the parameters each
 * step (AVX-512 does the update in fewer instructions; the same bits, element by element). */
NN_CLONES static void sgd_step(nn_optim *o, float *params, const float *grads, float lr)
{
    chorus_sgd_update(params, grads, o->m, o->n, lr, o->momentum, o->nesterov, o->weight_decay);
}

/* (built for several instruction sets: the update vectorises, sqrtf included, as -fno-math-errno
 * lets it) */
NN_CLONES static void adamw_step(nn_optim *o, float *params, const float *grads, float lr)
{
    chorus_adamw_update(params, grads, o->m, o->v, o->n, lr, o->beta1, o->beta2, o->eps,
                        o->weight_decay, o->t);
}

void nn_optim_step(nn_optim *o, float *params, const float *grads, float lr)
{
    o->t++;
    if (o->kind == NN_SGD)
        sgd_step(o, params, grads, lr);
    else
        adamw_step(o, params, grads, lr);
}
