/*
 * chorus/optim.h - the optimizer update rules, written once for the trainer's optimizer
 * (nn/optim.c, nn/zero.c) and the parameter server (src/ps/server.c), so that a synchronous
 * parameter server and allreduce data parallelism take bit-identical steps. The rules are
 * PyTorch's: SGD with momentum, Nesterov and L2 weight decay; AdamW with decoupled weight
 * decay. Header-only (static inline), so that libchorus_nn, which may use only the library's
 * exported symbols, and the library itself compile the same code.
 */
#ifndef CHORUS_OPTIM_H
#define CHORUS_OPTIM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* One SGD step over n parameters p with gradient g: p -= lr * (g + wd * p), through the
 * momentum buffer buf (NULL: no momentum) when mu > 0, Nesterov when nesterov. */
static inline void chorus_sgd_update(float *restrict p, const float *restrict g,
                                     float *restrict buf, size_t n, float lr, float mu,
                                     int nesterov, float wd)
{
    if (!buf) {
        for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
        return;
    }
    if (nesterov) {
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

/* One AdamW step (t: the step number, from 1) over n parameters with moments m and v. */
static inline void chorus_adamw_update(float *restrict p, const float *restrict g,
                                       float *restrict m, float *restrict v, size_t n, float lr,
                                       float b1, float b2, float eps, float wd, uint64_t t)
{
    float c1 = (float)(1.0 - pow((double)b1, (double)t));
    float c2 = (float)(1.0 - pow((double)b2, (double)t));
    float step = lr / c1, rc2 = 1.0f / sqrtf(c2), decay = 1.0f - lr * wd;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * rc2 + eps);
    }
}

#endif /* CHORUS_OPTIM_H */
