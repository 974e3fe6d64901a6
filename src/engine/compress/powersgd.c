/*
 * powersgd.c - the "powersgd:N" compressor (Vogels et al., PowerSGD, 2019): one step of power
 * iteration per training step on M = input + residual viewed as a rows x cols matrix (row
 * major, zero-padded at the end), in two reduce rounds that fuse with the other float sums:
 *
 *   round 0  prepare: P = M Q (rows, N)      sum     finish: orthonormalise P's columns
 *   round 1  prepare: Q_r = M^T P (cols, N)  sum Q   finish: out = P Q^T; residual = M - P Q_r^T
 *
 * Q is kept for the next step (warm start); the first is drawn from a generator seeded by the
 * tensor's name, so every rank starts from the same Q. P and Q are sums every rank holds
 * alike and the finishes compute from them only, so the output is the same bits everywhere.
 * Each rank's own share P Q_r^T of the output is what it sent; the residual keeps the rest.
 * Round 0 carries one more float, the step check (chorus__ef_check_step): a rank that missed
 * steps (it joined) holds another Q, and its sums would be wrong, so the tensor fails instead.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compress/compress.h"

/* The matrix view of count elements: cols from the hint or near sqrt(count). */
static void shape(size_t count, size_t cols_hint, size_t *rows, size_t *cols)
{
    size_t c = cols_hint;
    if (!c) {
        c = (size_t)sqrt((double)count);
        while (c * c < count) c++;
    }
    if (c > count) c = count;
    *cols = c;
    *rows = (count + c - 1) / c;
}

static size_t rank_of(const ef_comp *s, size_t rows, size_t cols)
{
    size_t r = (size_t)s->rank;
    if (r > rows) r = rows;
    if (r > cols) r = cols;
    return r;
}

static chorus_result powersgd_plan(void *st, const char *tensor, size_t count, chorus_dtype t,
                                   chorus_op op, chorus_compress_plan *plan)
{
    ef_comp *s = st;
    memset(plan, 0, sizeof(*plan));
    if (t != CHORUS_FLOAT32 || (op != CHORUS_SUM && op != CHORUS_AVG) || count < s->dense_below)
        return CHORUS_OK; /* dense */
    size_t hint = 0, rows, cols;
    pthread_mutex_lock(&s->mu);
    ef_tensor *e = chorus__ef_find(s, tensor);
    if (e) hint = e->cols_hint;
    pthread_mutex_unlock(&s->mu);
    shape(count, hint, &rows, &cols);
    size_t r = rank_of(s, rows, cols);
    if ((rows + cols) * r + 1 >= count) return CHORUS_OK; /* no smaller than dense */
    plan->nrounds = 2;
    plan->round[0] = (chorus_round){CHORUS_ROUND_REDUCE, CHORUS_SUM, CHORUS_FLOAT32, rows * r + 1};
    plan->round[1] = (chorus_round){CHORUS_ROUND_REDUCE, CHORUS_SUM, CHORUS_FLOAT32, cols * r};
    return CHORUS_OK;
}

/* A standard normal draw from the shared generator (Box-Muller). */
static float normal(uint64_t *g)
{
    double u1 = ((double)(chorus__ef_rand(g) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(chorus__ef_rand(g) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* The tensor's matrices, made on first use (Q drawn from the name's seed). */
static chorus_result setup(ef_comp *s, ef_tensor *t, const chorus_compress_call *c)
{
    if (t->p) return CHORUS_OK;
    shape(c->count, t->cols_hint, &t->rows, &t->cols);
    t->r = rank_of(s, t->rows, t->cols);
    t->m = calloc(t->rows * t->cols, sizeof(float));
    t->p = calloc(t->rows * t->r, sizeof(float));
    t->q = malloc(t->cols * t->r * sizeof(float));
    t->qloc = malloc(t->cols * t->r * sizeof(float));
    if (!t->m || !t->p || !t->q || !t->qloc) return CHORUS_ERR_NOMEM;
    uint64_t g = chorus__hash64(t->name, strlen(t->name));
    for (size_t i = 0; i < t->cols * t->r; i++) t->q[i] = normal(&g);
    return CHORUS_OK;
}

/* The factors are stored by column: P is r vectors of rows floats, Q r vectors of cols floats
 * (on the wire too), so every loop below runs over contiguous memory. */

static float dot(const float *a, const float *b, size_t n)
{
    float s[8] = {0};
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) s[k] += a[j + k] * b[j + k];
    for (; j < n; j++) s[0] += a[j] * b[j];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static void axpy(float *y, float a, const float *x, size_t n)
{
    for (size_t j = 0; j < n; j++) y[j] += a * x[j];
}

/* Gram-Schmidt on r vectors of n floats; a vector that vanishes becomes zero (it then sends
 * nothing and the residual keeps its part). */
static void orthonormalise(float *a, size_t n, size_t r)
{
    for (size_t j = 0; j < r; j++) {
        float *v = a + j * n;
        for (size_t l = 0; l < j; l++) axpy(v, -dot(v, a + l * n, n), a + l * n, n);
        double nrm = sqrt((double)dot(v, v, n));
        float inv = nrm > 1e-30 ? (float)(1.0 / nrm) : 0.0f;
        for (size_t i = 0; i < n; i++) v[i] *= inv;
    }
}

static chorus_result powersgd_prepare(void *st, const chorus_compress_call *c, const void *src,
                                      void *wire)
{
    ef_comp *s = st;
    const char *why;
    ef_tensor *t = chorus__ef_tensor(s, c->tensor, c->count, &why);
    if (!t) return CHORUS_ERR_NOMEM;
    if (setup(s, t, c) != CHORUS_OK) return CHORUS_ERR_NOMEM;
    size_t rows = t->rows, cols = t->cols, r = t->r;
    float *w = wire;
    if (c->round == 0) {
        chorus__ef_accumulate(t, src); /* the padding stays zero */
        for (size_t l = 0; l < r; l++) /* P = M Q */
            for (size_t i = 0; i < rows; i++)
                w[l * rows + i] = dot(t->m + i * cols, t->q + l * cols, cols);
        w[rows * r] = chorus__ef_step_tag(t);
        return CHORUS_OK;
    }
    memset(t->qloc, 0, cols * r * sizeof(float)); /* Q_r = M^T P */
    for (size_t l = 0; l < r; l++)
        for (size_t i = 0; i < rows; i++)
            axpy(t->qloc + l * cols, t->p[l * rows + i], t->m + i * cols, cols);
    memcpy(w, t->qloc, cols * r * sizeof(float));
    return CHORUS_OK;
}

static chorus_result powersgd_finish(void *st, const chorus_compress_call *c, const void *wire,
                                     void *dst)
{
    ef_comp *s = st;
    pthread_mutex_lock(&s->mu);
    ef_tensor *t = chorus__ef_find(s, c->tensor);
    pthread_mutex_unlock(&s->mu);
    if (!t || !t->p) return CHORUS_ERR_INTERNAL;
    size_t rows = t->rows, cols = t->cols, r = t->r;
    if (c->round == 0) {
        chorus_result res = chorus__ef_check_step(s, c, t, ((const float *)wire)[rows * r]);
        if (res != CHORUS_OK) return res;
        memcpy(t->p, wire, rows * r * sizeof(float));
        orthonormalise(t->p, rows, r);
        return CHORUS_OK;
    }
    memcpy(t->q, wire, cols * r * sizeof(float));
    float *out = dst;
    /* out = P Q^T and residual = M - P Q_r^T, row by row (the last row may be cut short) */
    for (size_t i = 0; i < rows; i++) {
        size_t e = i * cols, n = c->count - e < cols ? c->count - e : cols;
        float *o = out + e, *res = t->resid + e;
        memset(o, 0, n * sizeof(float));
        memcpy(res, t->m + e, n * sizeof(float));
        for (size_t l = 0; l < r; l++) {
            float pil = t->p[l * rows + i];
            axpy(o, pil, t->q + l * cols, n);
            axpy(res, -pil, t->qloc + l * cols, n);
        }
    }
    t->step++;
    return CHORUS_OK;
}

const chorus_compressor chorus__powersgd_ops = {"powersgd", NULL, powersgd_plan, powersgd_prepare,
                                                powersgd_finish};
