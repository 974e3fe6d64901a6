/*
 * optim.c - SGD (momentum, Nesterov, L2 weight decay) and AdamW over one flat parameter
 * buffer, with the same update rules as PyTorch's torch.optim.SGD and AdamW.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/nn.h"
#include "nn_internal.h"

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

static void sgd_step(nn_optim *o, float *restrict p, const float *restrict g, float lr)
{
    size_t n = o->n;
    float wd = o->weight_decay, mu = o->momentum;
    if (!o->m) {
        for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
        return;
    }
    float *restrict buf = o->m;
    if (o->nesterov) {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * p[i];
            float b = mu * buf[i] + gi;
            buf[i] = b;
            p[i] -= lr * (gi + mu * b);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float b = mu * buf[i] + (g[i] + wd * p[i]);
            buf[i] = b;
            p[i] -= lr * b;
        }
    }
}

static void adamw_step(nn_optim *o, float *restrict p, const float *restrict g, float lr)
{
    size_t n = o->n;
    float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    float *restrict m = o->m, *restrict v = o->v;
    double t = (double)o->t;
    float c1 = (float)(1.0 - pow((double)b1, t));
    float c2 = (float)(1.0 - pow((double)b2, t));
    float step = lr / c1, rc2 = 1.0f / sqrtf(c2), decay = 1.0f - lr * o->weight_decay;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * rc2 + eps);
    }
}

void nn_optim_step(nn_optim *o, float *params, const float *grads, float lr)
{
    o->t++;
    if (o->kind == NN_SGD)
        sgd_step(o, params, grads, lr);
    else
        adamw_step(o, params, grads, lr);
}
