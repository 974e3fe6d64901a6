/*
 * gpt_rows.c - the GPT's kernels that work row by row without the BLAS (nn/gpt.c calls them):
 * the attention's causal softmax and its gradient, the cross-entropy of a row of logits, LayerNorm
 * forward and backward, the bias and residual added after a linear layer, and a bias's gradient.
 * Shapes as in gpt.c: N rows of C (or OUT) floats.
 *
 * Built for AVX-512, AVX2 and baseline x86-64 and picked at load time (NN_CLONES), as the GELU
 * loops are. A row's sums are taken in double over NN_LANES partial sums, added in a fixed
 * order at the end, so that the compiler can run them as vectors: every build does the same
 * operations in the same order and gives the same bits.
 */
#include <math.h>

#include "nn_internal.h"

#define NN_LANES 8

/* The sum of the lanes, in a fixed order. */
static inline double lanes_sum(const double s[NN_LANES])
{
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* sum of x (C) */
static inline double row_sum(const float *x, int C)
{
    double s[NN_LANES] = {0};
    int i = 0;
    for (; i + NN_LANES <= C; i += NN_LANES)
        for (int l = 0; l < NN_LANES; l++) s[l] += x[i + l];
    for (; i < C; i++) s[i % NN_LANES] += x[i];
    return lanes_sum(s);
}

/* sum of (x - m)^2 over x (C) */
static inline double row_sq_dev(const float *x, float m, int C)
{
    double s[NN_LANES] = {0};
    int i = 0;
    for (; i + NN_LANES <= C; i += NN_LANES)
        for (int l = 0; l < NN_LANES; l++) {
            float d = x[i + l] - m;
            s[l] += (double)d * d;
        }
    for (; i < C; i++) s[i % NN_LANES] += (double)(x[i] - m) * (x[i] - m);
    return lanes_sum(s);
}

/* sum of a[i] b[i] over n */
static inline double row_dot(const float *a, const float *b, int n)
{
    double s[NN_LANES] = {0};
    int i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES)
        for (int l = 0; l < NN_LANES; l++) s[l] += (double)a[i + l] * b[i + l];
    for (; i < n; i++) s[i % NN_LANES] += (double)a[i] * b[i];
    return lanes_sum(s);
}

NN_CLONES void nn__softmax_causal(float *restrict p, int T)
{
    for (int i = 0; i < T; i++) {
        float *row = p + (size_t)i * T, mx = row[0];
        for (int j = 1; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j <= i; j++) row[j] = nn__exp_approx(row[j] - mx);
        float inv = (float)(1.0 / row_sum(row, i + 1));
        for (int j = 0; j <= i; j++) row[j] *= inv;
        for (int j = i + 1; j < T; j++) row[j] = 0.0f;
    }
}

NN_CLONES void nn__softmax_causal_backward(float *restrict ds, const float *restrict p, int T)
{
    for (int i = 0; i < T; i++) {
        const float *pr = p + (size_t)i * T;
        float *d = ds + (size_t)i * T, dot = (float)row_dot(pr, d, i + 1); /* masked p are 0 */
        for (int j = 0; j < T; j++) d[j] = pr[j] * (d[j] - dot);
    }
}

NN_CLONES double nn__xent_row(float *restrict z, int V, int y, float grad_scale)
{
    float mx = z[0], zy = z[y];
    for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < V; v++) z[v] = nn__exp_approx(z[v] - mx);
    double sum = row_sum(z, V);
    float inv = (float)(1.0 / sum);
    for (int v = 0; v < V; v++) z[v] = z[v] * inv * grad_scale;
    z[y] -= grad_scale;
    return log(sum) - (double)(zy - mx);
}

NN_CLONES void nn__layernorm_forward(float *restrict out, float *mean, float *rstd,
                                     const float *restrict in, const float *restrict w,
                                     const float *restrict b, int N, int C, float eps)
{
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float m = (float)(row_sum(x, C) / C);
        float r = 1.0f / sqrtf((float)(row_sq_dev(x, m, C) / C) + eps);
        for (int i = 0; i < C; i++) y[i] = (x[i] - m) * r * w[i] + b[i];
        mean[n] = m;
        rstd[n] = r;
    }
}

NN_CLONES void nn__layernorm_backward(float *restrict din, float *restrict dw, float *restrict db,
                                      const float *restrict dout, const float *restrict in,
                                      const float *restrict w, const float *mean, const float *rstd,
                                      int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * C, *dy = dout + (size_t)n * C;
        float *dx = din + (size_t)n * C;
        float m = mean[n], r = rstd[n];
        double sd[NN_LANES] = {0}, sdx[NN_LANES] = {0}; /* sums of dnorm and dnorm * xhat */
        int i = 0;
        for (; i + NN_LANES <= C; i += NN_LANES)
            for (int l = 0; l < NN_LANES; l++) {
                float xhat = (x[i + l] - m) * r, dnorm = dy[i + l] * w[i + l];
                sd[l] += dnorm;
                sdx[l] += dnorm * xhat;
            }
        for (; i < C; i++) {
            float xhat = (x[i] - m) * r, dnorm = dy[i] * w[i];
            sd[i % NN_LANES] += dnorm;
            sdx[i % NN_LANES] += dnorm * xhat;
        }
        float md = (float)(lanes_sum(sd) / C), mdx = (float)(lanes_sum(sdx) / C);
        for (i = 0; i < C; i++) {
            float xhat = (x[i] - m) * r, dnorm = dy[i] * w[i];
            dw[i] += dy[i] * xhat;
            db[i] += dy[i];
            dx[i] += r * (dnorm - md - xhat * mdx);
        }
    }
}

NN_CLONES void nn__add_bias_residual(float *restrict out, const float *restrict bias,
                                     const float *restrict res, int N, int OUT)
{
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OUT;
        const float *x = res + (size_t)n * OUT;
        for (int j = 0; j < OUT; j++) o[j] = (o[j] + bias[j]) + x[j];
    }
}

NN_CLONES void nn__bias_grad(float *restrict dbias, const float *restrict dout, int N, int OUT)
{
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * OUT;
        for (int o = 0; o < OUT; o++) dbias[o] += d[o];
    }
}
