/*
 * topk.c - the "topk:R" compressor: of M = input + residual, the k = ceil(R n) elements of
 * largest magnitude travel as (index, value) pairs in one gather round (2k int32 per rank: the
 * index, then the float's bits); finish adds every rank's pairs into a zeroed output in rank
 * order, so every rank computes the same bits. What was not picked stays in the residual.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/compress/compress.h"

static chorus_result topk_plan(void *st, const char *tensor, size_t count, chorus_dtype t,
                               chorus_op op, chorus_compress_plan *plan)
{
    (void)tensor;
    ef_comp *s = st;
    memset(plan, 0, sizeof(*plan));
    if (t != CHORUS_FLOAT32 || (op != CHORUS_SUM && op != CHORUS_AVG) || count < s->dense_below ||
        count > UINT32_MAX)
        return CHORUS_OK; /* dense */
    size_t k = chorus__ef_k(s, count);
    if (2 * k >= count) return CHORUS_OK; /* pairs would not be smaller */
    plan->nrounds = 1;
    plan->round[0] = (chorus_round){CHORUS_ROUND_GATHER, CHORUS_SUM, CHORUS_INT32, 2 * k};
    return CHORUS_OK;
}

/* A magnitude as ordered bits: for floats >= 0 the IEEE bits order as the values; NaN
 * counts as 0 (never picked, it stays in the residual). */
static uint32_t mag_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    u &= 0x7fffffffu;
    return u > 0x7f800000u ? 0 : u;
}

/* The bits of the k-th largest magnitude of m[0..n) (1 <= k <= n): radix select, 16 bits per
 * pass, two passes over the data whatever the values (many equal ones included). hist holds
 * 65536 counters. */
static uint32_t kth_largest(const float *m, size_t n, size_t k, uint32_t *hist)
{
    uint32_t prefix = 0;
    for (int pass = 0; pass < 2; pass++) {
        memset(hist, 0, 65536 * sizeof(uint32_t));
        for (size_t i = 0; i < n; i++) {
            uint32_t b = mag_bits(m[i]);
            if (pass == 0)
                hist[b >> 16]++;
            else if ((b >> 16) == prefix)
                hist[b & 0xffffu]++;
        }
        uint32_t bin = 65535;
        for (;; bin--) { /* from the top down until the k-th is in this bin */
            if (hist[bin] >= k || bin == 0) break;
            k -= hist[bin];
        }
        prefix = pass == 0 ? bin : (prefix << 16) | bin;
    }
    return prefix;
}

static chorus_result topk_prepare(void *st, const chorus_compress_call *c, const void *src,
                                  void *wire)
{
    ef_comp *s = st;
    const char *why;
    ef_tensor *t = chorus__ef_tensor(s, c->tensor, c->count, &why);
    if (!t) return CHORUS_ERR_NOMEM;
    size_t n = c->count, k = c->r->wire_count / 2;
    if (!t->m && !(t->m = malloc(n * sizeof(float)))) return CHORUS_ERR_NOMEM;
    if (!s->hist && !(s->hist = malloc(65536 * sizeof(uint32_t)))) return CHORUS_ERR_NOMEM;
    chorus__ef_accumulate(t, src);
    uint32_t thr = kth_largest(t->m, n, k, s->hist);
    int32_t *w = wire;
    size_t got = 0;
    memcpy(t->resid, t->m, n * sizeof(float));
    /* Strictly above the threshold (fewer than k), then ties in index order until k. */
    for (int pass = 0; pass < 2 && got < k; pass++)
        for (size_t i = 0; i < n && got < k; i++) {
            uint32_t a = mag_bits(t->m[i]);
            if (pass == 0 ? a <= thr : a != thr) continue;
            w[2 * got] = (int32_t)i;
            memcpy(&w[2 * got + 1], &t->m[i], sizeof(float));
            t->resid[i] = 0.0f;
            got++;
        }
    for (; got < k; got++) { /* only NaNs left: send index 0 with nothing */
        w[2 * got] = 0;
        w[2 * got + 1] = 0;
    }
    t->step++;
    return CHORUS_OK;
}

static chorus_result topk_finish(void *st, const chorus_compress_call *c, const void *wire,
                                 void *dst)
{
    (void)st;
    float *out = dst;
    size_t k = c->r->wire_count / 2;
    memset(out, 0, c->count * sizeof(float));
    for (int p = 0; p < c->nparts; p++) {
        if (c->part_valid && !c->part_valid[p]) continue;
        const int32_t *w = (const int32_t *)wire + (size_t)p * 2 * k;
        for (size_t j = 0; j < k; j++) {
            float v;
            if (w[2 * j] < 0 || (size_t)w[2 * j] >= c->count) return CHORUS_ERR_INTERNAL;
            memcpy(&v, &w[2 * j + 1], sizeof(float));
            out[w[2 * j]] += v;
        }
    }
    return CHORUS_OK;
}

const chorus_compressor chorus__topk_ops = {"topk", NULL, topk_plan, topk_prepare, topk_finish};
