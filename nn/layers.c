/*
 * layers.c - forward and backward passes of every layer kind, one layer at a time
 * (nn__layer_forward, nn__layer_backward: the model's loops over them are in passes.c), and
 * softmax cross-entropy.
 *
 * Linear and conv2d are GEMMs (cblas_sgemm; conv2d through im2col). Everything else is
 * plain loops over contiguous memory that the compiler vectorises. Backward passes ADD
 * their parameter gradients, so micro-batches accumulate; gradients w.r.t. activations are
 * overwritten. Element-wise layers (relu, dropout) run in place on buffers the model owns.
 */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "chorus/nn.h"
#include "nn_internal.h"

/* ---- linear: y (B,Fout) = x (B,Fin) W^T + b, W is (Fout,Fin) ------------------------------------
 */

static void linear_forward(nn_layer *L, const float *x, float *y, int B)
{
    int Fin = (int)nn__in_features(L), Fout = L->out_c;
    for (int n = 0; n < B; n++) memcpy(y + (size_t)n * Fout, L->b, (size_t)Fout * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, Fout, Fin, 1.0f, x, Fin, L->w, Fin,
                1.0f, y, Fout);
}

static void linear_backward(nn_layer *L, const float *dy, float *dx, int B)
{
    int Fin = (int)nn__in_features(L), Fout = L->out_c;
    /* dW (Fout,Fin) += dy^T (Fout,B) x (B,Fin); db (Fout) += sum over B of dy */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Fout, Fin, B, 1.0f, dy, Fout, L->in, Fin,
                1.0f, L->dw, Fin);
    nn__bias_grad(L->db, dy, B, Fout); /* in sample order, built per instruction set */
    /* dx (B,Fin) = dy (B,Fout) W (Fout,Fin) */
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, Fin, Fout, 1.0f, dy, Fout, L->w,
                    Fin, 0.0f, dx, Fin);
}

/* ---- conv2d via im2col ------------------------------------------------------------- */

/* Output columns ow in [*lo, *hi) read input column ow*s - pad + kj inside [0, W). */
static void valid_range(int OW, int W, int s, int pad, int kj, int *lo, int *hi)
{
    int a = 0, b = OW;
    while (a < OW && a * s - pad + kj < 0) a++;
    while (b > a && (b - 1) * s - pad + kj >= W) b--;
    *lo = a;
    *hi = b;
}

/* x (C,H,W) -> cols (C*k*k, OH*OW): row (c,ki,kj), column (oh,ow) holds
 * x[c][oh*s-pad+ki][ow*s-pad+kj], or 0 outside the image. */
static void im2col(const nn_layer *L, const float *x, float *cols)
{
    int C = L->in_c, H = L->in_h, W = L->in_w, k = L->k, s = L->stride, pad = L->pad;
    int OH = L->out_h, OW = L->out_w;
    for (int c = 0; c < C; c++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
                float *row = cols + ((size_t)(c * k + ki) * k + kj) * (size_t)(OH * OW);
                int lo, hi;
                valid_range(OW, W, s, pad, kj, &lo, &hi);
                for (int oh = 0; oh < OH; oh++) {
                    float *o = row + (size_t)oh * OW;
                    int ih = oh * s - pad + ki;
                    if (ih < 0 || ih >= H) {
                        memset(o, 0, (size_t)OW * sizeof(float));
                        continue;
                    }
                    const float *src = x + ((size_t)c * H + ih) * W - pad + kj;
                    for (int ow = 0; ow < lo; ow++) o[ow] = 0.0f;
                    if (s == 1)
                        memcpy(o + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
                    else
                        for (int ow = lo; ow < hi; ow++) o[ow] = src[ow * s];
                    for (int ow = hi; ow < OW; ow++) o[ow] = 0.0f;
                }
            }
}

/* The adjoint of im2col: dx (C,H,W) = sum of dcols scattered back. */
static void col2im(const nn_layer *L, const float *dcols, float *dx)
{
    int C = L->in_c, H = L->in_h, W = L->in_w, k = L->k, s = L->stride, pad = L->pad;
    int OH = L->out_h, OW = L->out_w;
    memset(dx, 0, (size_t)C * H * W * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
                const float *row = dcols + ((size_t)(c * k + ki) * k + kj) * (size_t)(OH * OW);
                int lo, hi;
                valid_range(OW, W, s, pad, kj, &lo, &hi);
                for (int oh = 0; oh < OH; oh++) {
                    int ih = oh * s - pad + ki;
                    if (ih < 0 || ih >= H) continue;
                    const float *g = row + (size_t)oh * OW;
                    float *dst = dx + ((size_t)c * H + ih) * W - pad + kj;
                    if (s == 1)
                        for (int ow = lo; ow < hi; ow++) dst[ow] += g[ow];
                    else
                        for (int ow = lo; ow < hi; ow++) dst[ow * s] += g[ow];
                }
            }
}

/* y (B,OC,OH,OW) = W (OC, C*k*k) cols_n (C*k*k, OH*OW) + b, per sample n. The columns of
 * one sample (in scratch) stay in cache for the GEMM; backward rebuilds them rather than
 * keeping the whole batch's, which would be tens of megabytes of memory traffic. */
static void conv_forward(nn_layer *L, const float *x, float *y, int B)
{
    int OC = L->out_c, K = L->in_c * L->k * L->k, P = L->out_h * L->out_w;
    size_t in = nn__in_features(L), out = nn__out_features(L);
    float *cols = L->scratch;
    for (int n = 0; n < B; n++) {
        float *yn = y + (size_t)n * out;
        im2col(L, x + (size_t)n * in, cols);
        for (int o = 0; o < OC; o++) {
            float bo = L->b[o];
            float *r = yn + (size_t)o * P;
            for (int p = 0; p < P; p++) r[p] = bo;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, P, K, 1.0f, L->w, K, cols, P,
                    1.0f, yn, P);
    }
}

static void conv_backward(nn_layer *L, const float *dy, float *dx, int B)
{
    int OC = L->out_c, K = L->in_c * L->k * L->k, P = L->out_h * L->out_w;
    size_t in = nn__in_features(L), out = nn__out_features(L);
    float *cols = L->scratch, *dcols = L->cache;
    for (int n = 0; n < B; n++) {
        const float *dyn = dy + (size_t)n * out;
        im2col(L, L->in + (size_t)n * in, cols);
        for (int o = 0; o < OC; o++) {
            const float *r = dyn + (size_t)o * P;
            float acc = 0.0f;
            for (int p = 0; p < P; p++) acc += r[p];
            L->db[o] += acc;
        }
        /* dW (OC,K) += dy_n (OC,P) cols_n^T (P,K) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, K, P, 1.0f, dyn, P, cols, P, 1.0f,
                    L->dw, K);
        if (dx) {
            /* dcols (K,P) = W^T (K,OC) dy_n (OC,P) */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, P, OC, 1.0f, L->w, K, dyn, P,
                        0.0f, dcols, P);
            col2im(L, dcols, dx + (size_t)n * in);
        }
    }
}

/* ---- maxpool2d: no padding; idx holds the argmax position within the input plane ----- */

static void maxpool_forward(nn_layer *L, const float *x, float *y, int B)
{
    int C = L->in_c, H = L->in_h, W = L->in_w, k = L->k, s = L->stride;
    int OH = L->out_h, OW = L->out_w;
    for (int nc = 0; nc < B * C; nc++) {
        const float *xp = x + (size_t)nc * H * W;
        float *yp = y + (size_t)nc * OH * OW;
        int32_t *ip = L->idx + (size_t)nc * OH * OW;
        if (k == 2 && s == 2) {
            /* The common case, branch-free so it vectorises. Ties keep the first. */
            for (int oh = 0; oh < OH; oh++) {
                const float *r0 = xp + (size_t)(2 * oh) * W, *r1 = r0 + W;
                float *yo = yp + (size_t)oh * OW;
                int32_t *io = ip + (size_t)oh * OW;
                int base = 2 * oh * W;
                for (int ow = 0; ow < OW; ow++) {
                    float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
                    int ia = base + 2 * ow;
                    float m1 = b > a ? b : a;
                    int i1 = b > a ? ia + 1 : ia;
                    float m2 = d > c ? d : c;
                    int i2 = d > c ? ia + W + 1 : ia + W;
                    yo[ow] = m2 > m1 ? m2 : m1;
                    io[ow] = m2 > m1 ? i2 : i1;
                }
            }
            continue;
        }
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                int best = (oh * s) * W + ow * s;
                float bv = xp[best];
                for (int ki = 0; ki < k; ki++)
                    for (int kj = 0; kj < k; kj++) {
                        int pos = (oh * s + ki) * W + ow * s + kj;
                        if (xp[pos] > bv) {
                            bv = xp[pos];
                            best = pos;
                        }
                    }
                yp[oh * OW + ow] = bv;
                ip[oh * OW + ow] = best;
            }
    }
}

static void maxpool_backward(nn_layer *L, const float *dy, float *dx, int B)
{
    int C = L->in_c, HW = L->in_h * L->in_w, P = L->out_h * L->out_w;
    memset(dx, 0, (size_t)B * C * HW * sizeof(float));
    for (int nc = 0; nc < B * C; nc++) {
        float *dxp = dx + (size_t)nc * HW;
        const float *dyp = dy + (size_t)nc * P;
        const int32_t *ip = L->idx + (size_t)nc * P;
        for (int p = 0; p < P; p++) dxp[ip[p]] += dyp[p];
    }
}

/* ---- element-wise: relu, gelu, dropout ----------------------------------------------- */

/* Built per instruction set (NN_CLONES): the MLP's activations pass through these every step. */
NN_CLONES static void relu_forward(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* Uses the output: y > 0 exactly where x > 0. */
NN_CLONES static void relu_backward(const float *y, const float *dy, float *dx, size_t n)
{
    for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* Exact GELU: x * Phi(x), Phi the standard normal CDF. */
static void gelu_forward(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}

static void gelu_backward(const float *x, const float *dy, float *dx, size_t n)
{
    const float inv_sqrt_2pi = 0.3989422804014327f;
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float cdf = 0.5f * (1.0f + erff(v * (float)M_SQRT1_2));
        float pdf = inv_sqrt_2pi * expf(-0.5f * v * v);
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

/* Each forward gets its own stream from (seed, rank, step, layer), so runs are reproducible
 * and resumable without storing masks. mask holds 0 or 1/(1-p). */
static void dropout_forward(nn_model *m, int li, nn_layer *L, const float *x, float *y, size_t n)
{
    nn_rng r;
    nn_rng_seed(&r, nn_seed_mix(m->seed, (uint64_t)m->rank, m->step, (uint64_t)li));
    float keep = 1.0f / (1.0f - L->p);
    uint32_t thresh = (uint32_t)((double)L->p * 4294967296.0);
    float *mask = L->cache;
    for (size_t i = 0; i < n; i += 2) {
        uint64_t bits = nn_rng_next(&r);
        mask[i] = (uint32_t)bits >= thresh ? keep : 0.0f;
        if (i + 1 < n) mask[i + 1] = (uint32_t)(bits >> 32) >= thresh ? keep : 0.0f;
    }
    for (size_t i = 0; i < n; i++) y[i] = x[i] * mask[i];
}

/* ---- layernorm over the F features of each sample ------------------------------------ */

static void layernorm_forward(nn_layer *L, const float *x, float *y, int B)
{
    size_t F = nn__in_features(L);
    const float eps = 1e-5f;
    for (int n = 0; n < B; n++) {
        const float *xr = x + (size_t)n * F;
        float *yr = y + (size_t)n * F;
        double s = 0.0, ss = 0.0;
        for (size_t i = 0; i < F; i++) s += xr[i];
        float mean = (float)(s / (double)F);
        for (size_t i = 0; i < F; i++) {
            float d = xr[i] - mean;
            ss += (double)d * d;
        }
        float rstd = 1.0f / sqrtf((float)(ss / (double)F) + eps);
        L->cache[2 * n] = mean;
        L->cache[2 * n + 1] = rstd;
        for (size_t i = 0; i < F; i++) yr[i] = (xr[i] - mean) * rstd * L->w[i] + L->b[i];
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. dx may equal dy. */
static void layernorm_backward(nn_layer *L, const float *dy, float *dx, int B)
{
    size_t F = nn__in_features(L);
    for (int n = 0; n < B; n++) {
        const float *xr = L->in + (size_t)n * F;
        const float *dr = dy + (size_t)n * F;
        float mean = L->cache[2 * n], rstd = L->cache[2 * n + 1];
        float sg = 0.0f, sgx = 0.0f;
        for (size_t i = 0; i < F; i++) {
            float xh = (xr[i] - mean) * rstd;
            float g = dr[i] * L->w[i];
            L->dw[i] += dr[i] * xh;
            L->db[i] += dr[i];
            sg += g;
            sgx += g * xh;
        }
        if (!dx) continue;
        float mg = sg / (float)F, mgx = sgx / (float)F;
        float *xo = dx + (size_t)n * F;
        for (size_t i = 0; i < F; i++) {
            float xh = (xr[i] - mean) * rstd;
            xo[i] = rstd * (dr[i] * L->w[i] - mg - xh * mgx);
        }
    }
}

/* ---- one layer of the model ---------------------------------------------------------- */

const float *nn__layer_forward(nn_model *m, int i, const float *cur, int *owned, int B)
{
    nn_layer *L = &m->layers[i];
    size_t n = (size_t)B * nn__out_features(L);
    float *out = L->buf;
    L->in = cur;
    switch (L->kind) {
    case NN_LINEAR:
        if (L->tp == NN_TP_ROW)
            nn__tp_row_forward(m, L, cur, out, B);
        else
            linear_forward(L, cur, out, B);
        break;
    case NN_CONV2D: conv_forward(L, cur, out, B); break;
    case NN_MAXPOOL2D: maxpool_forward(L, cur, out, B); break;
    case NN_RELU:
        if (*owned) out = (float *)cur;
        relu_forward(cur, out, n);
        break;
    case NN_GELU: gelu_forward(cur, out, n); break;
    case NN_DROPOUT:
        if (!m->training || L->p == 0.0f) {
            L->out = (float *)cur; /* identity; ownership unchanged */
            return cur;
        }
        if (*owned) out = (float *)cur;
        dropout_forward(m, i, L, cur, out, n);
        break;
    case NN_FLATTEN: L->out = (float *)cur; return cur;
    case NN_LAYERNORM: layernorm_forward(L, cur, out, B); break;
    default: break;
    }
    L->out = out;
    *owned = 1;
    return out;
}

const float *nn__layer_backward(nn_model *m, int i, const float *dy, int *which, int B, int need_dx)
{
    nn_layer *L = &m->layers[i];
    size_t n = (size_t)B * nn__out_features(L);
    int elementwise = L->kind == NN_RELU || L->kind == NN_GELU || L->kind == NN_DROPOUT ||
                      L->kind == NN_LAYERNORM;
    if (L->kind == NN_FLATTEN || (L->kind == NN_DROPOUT && (!m->training || L->p == 0.0f)))
        return need_dx ? dy : NULL; /* identity: dx is dy */
    float *dx = NULL;
    int next = *which;
    if (need_dx) {
        if (elementwise && *which >= 0) {
            dx = (float *)dy;
        } else {
            next = *which == 0 ? 1 : 0;
            dx = m->dbuf[next];
        }
    }
    switch (L->kind) {
    case NN_LINEAR:
        linear_backward(L, dy, dx, B);
        if (dx && L->tp == NN_TP_COLUMN) nn__tp_column_dx(m, L, dx, B);
        break;
    case NN_CONV2D: conv_backward(L, dy, dx, B); break;
    case NN_MAXPOOL2D:
        if (dx) maxpool_backward(L, dy, dx, B);
        break;
    case NN_RELU:
        if (dx) relu_backward(L->out, dy, dx, n);
        break;
    case NN_GELU:
        if (dx) gelu_backward(L->in, dy, dx, n);
        break;
    case NN_DROPOUT:
        if (dx)
            for (size_t j = 0; j < n; j++) dx[j] = dy[j] * L->cache[j];
        break;
    case NN_LAYERNORM: layernorm_backward(L, dy, dx, B); break;
    default: break;
    }
    if (L->nparams && m->grad_hook) m->grad_hook(m, i, m->grad_hook_arg);
    *which = next;
    return dx;
}

double nn_xent(const float *logits, const int32_t *labels, int B, int C, float grad_scale,
               float *dlogits, int *correct)
{
    double total = 0.0;
    int hits = 0;
    for (int n = 0; n < B; n++) {
        const float *z = logits + (size_t)n * C;
        float mx = z[0];
        int arg = 0;
        for (int c = 1; c < C; c++)
            if (z[c] > mx) {
                mx = z[c];
                arg = c;
            }
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += exp((double)(z[c] - mx));
        double lse = log(sum) + (double)mx;
        int y = labels[n];
        total += lse - (double)z[y];
        hits += arg == y;
        if (dlogits) {
            float *d = dlogits + (size_t)n * C;
            for (int c = 0; c < C; c++) d[c] = (float)exp((double)z[c] - lse) * grad_scale;
            d[y] -= grad_scale;
        }
    }
    if (correct) *correct += hits;
    return total;
}
