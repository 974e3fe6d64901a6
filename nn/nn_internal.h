/*
 * nn_internal.h - helpers shared by the files of libchorus_nn; not installed.
 */
#ifndef CHORUS_NN_INTERNAL_H
#define CHORUS_NN_INTERNAL_H

#include <stdint.h>
#include <string.h>

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

/* Hot loops are built for AVX-512, AVX2 and baseline x86-64, picked at load time (as
 * src/reduce/reduce.c's kernels; ThreadSanitizer's builds get the baseline only). Every version
 * does the same float operations on each element in the same order (no FMA contraction in C11
 * mode), so they give the same bits. Clang (14, Debian 12's; the fuzz targets' compiler) names
 * a cloned function that is not static only by its clones and resolver, so callers in other
 * files find no symbol: its builds get the baseline only. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__clang__)
#define NN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NN_CLONES
#endif

/* The error convention of libchorus_nn: a function that can fail returns a chorus_result and,
 * when it is not CHORUS_OK, leaves a one-line message for nn_last_error() (thread-local).
 * nn__fail formats that message and returns r, so `return nn__fail(CHORUS_ERR_..., ...)`. */
chorus_result nn__fail(chorus_result r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* e^x for x in [-87, 87] (clamped there), relative error below 2e-7: x = k ln2 + r with
 * |r| <= ln2/2, e^r by its Taylor series to r^7 (the remainder under 6e-9), 2^k put into a
 * float's exponent bits. No calls and no branches, so that the loops that call it vectorise
 * (gelu.c: libm's tanhf, a scalar call, took a third of the GPT's time in GELU): the clamp is done
 * on the bits (|x| as an integer orders as |x| does; a float comparison would keep the loop from
 * vectorising under the default -ftrapping-math), the rounding by adding and taking away
 * 1.5 x 2^23, which leaves the nearest integer (|x / ln2| < 126 here). */
static inline float nn__exp_approx(float x)
{
    int32_t bits, mag;
    memcpy(&bits, &x, sizeof(bits));
    mag = bits & 0x7fffffff;
    mag = mag > 0x42ae0000 ? 0x42ae0000 : mag; /* 87.0f */
    bits = (int32_t)((uint32_t)bits & 0x80000000u) | mag;
    memcpy(&x, &bits, sizeof(x));
    float kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln2) */
    float r = x - kf * 0.693145752f - kf * 1.42860677e-6f;             /* ln2 in two parts */
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    bits = ((int32_t)kf + 127) << 23; /* 2^k */
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

/* The GPT's row kernels (gpt_rows.c; shapes as in gpt.c). LayerNorm: out (N,C) = (in - mean)
 * rstd w + b per row, keeping mean and rstd (N); its backward adds to din, dw and db. */
void nn__layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                           const float *b, int N, int C, float eps);
void nn__layernorm_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                            const float *w, const float *mean, const float *rstd, int N, int C);
/* Each row i of p (T,T) = its softmax over j <= i (e^x by nn__exp_approx, the sum in double),
 * the future (j > i) set to 0; and its gradient: ds (T,T), given the gradient of p, becomes
 * that of the scores, p (dp - sum_j p dp) row by row. */
void nn__softmax_causal(float *p, int T);
void nn__softmax_causal_backward(float *ds, const float *p, int T);
/* Softmax cross-entropy of one row of logits z (V) against target y: returns the loss,
 * log sum_v e^(z_v - max) - (z_y - max), and leaves in z its gradient times grad_scale,
 * (softmax(z) - onehot(y)) grad_scale (e^x by nn__exp_approx, the sum in double). */
double nn__xent_row(float *z, int V, int y, float grad_scale);
/* out (N,OUT) = (out + bias) + res: a linear layer's bias and the residual stream. */
void nn__add_bias_residual(float *out, const float *bias, const float *res, int N, int OUT);
/* dbias (OUT) += the column sums of dout (N,OUT). */
void nn__bias_grad(float *dbias, const float *dout, int N, int OUT);

/* The global step recorded in a checkpoint payload: 1 and *step when buf starts with a payload
 * header, else 0 (ckpt_payload.c). */
int nn__ckpt_payload_step(const void *buf, size_t len, uint64_t *step);

/* The blocking modes' gradient sum through d->comp (nn/compress.c): fused, one tensor
 * "grads"; layer, one per layer, last first. Errors: the compressed allreduce's. */
chorus_result nn__dist_compressed_sync(nn_dist *d, nn_model *m);
/* Whether d's compressor is PowerSGD over the model's own tensors (nn_dist_set_tensors). */
int nn__dist_by_tensor(const nn_dist *d);
/* One layer of the forward pass (layers.c): runs layer i on cur, whose ownership (whether it
 * is a model buffer that may be overwritten in place) is *owned, and returns its output. */
const float *nn__layer_forward(nn_model *m, int i, const float *cur, int *owned, int B);
/* One layer of the backward pass (layers.c): differentiates layer i given dy, the gradient
 * w.r.t. its output, held by dbuf *which (-1: the caller's buffer). Returns the gradient
 * w.r.t. its input and updates *which, or NULL when need_dx is 0 (nothing below wants it). */
const float *nn__layer_backward(nn_model *m, int i, const float *dy, int *which, int B,
                                int need_dx);

/* Activation recomputation (recompute.c, called from model.c and passes.c): marks the segment ends
 * and the layers whose output buffer can come from the shared pool (before finalize allocates);
 * allocates the pool and points those layers into it (after; CHORUS_ERR_NOMEM); the backward pass
 * segment by segment. */
/* GELU, tanh form, of n values (gelu.c); the backward multiplies d by its derivative at in. */
void nn__gelu_forward(float *out, const float *in, size_t n);
void nn__gelu_backward(float *d, const float *in, size_t n);

void nn__recompute_plan(nn_model *m);
chorus_result nn__recompute_pool(nn_model *m, size_t B);
void nn__backward_recompute(nn_model *m, const float *dout, int B);

/* Tensor parallelism (tp_ops.c): a row-parallel linear forward (partial product,
 * allreduce, bias), and the allreduce of a column-parallel layer's input gradient. Failures
 * are latched in m->comm_err. */
void nn__tp_row_forward(nn_model *m, nn_layer *L, const float *x, float *y, int B);
void nn__tp_column_dx(nn_model *m, nn_layer *L, float *dx, int B);

#endif /* CHORUS_NN_INTERNAL_H */
