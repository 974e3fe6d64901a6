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

/* The k-th largest of a[0..n) (k >= 1), reordering a: quickselect, median-of-three pivots. */
static float kth_largest(float *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        float x = a[lo], y = a[mid], z = a[hi];
        float piv = x > y ? (y > z ? y : (x > z ? z : x)) : (x > z ? x : (y > z ? z : y));
        size_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > piv) i++;
            while (a[j] < piv) j--;
            if (i <= j) {
                float tmp = a[i];
                a[i] = a[j];
                a[j] = tmp;
                i++;
                if (j == 0) break;
                j--;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return a[want];
    }
    return a[lo];
}

static chorus_result topk_prepare(void *st, const chorus_compress_call *c, const void *src,
                                  void *wire)
{
    ef_comp *s = st;
    const char *why;
    ef_tensor *t = chorus__ef_tensor(s, c->tensor, c->count, &why);
    if (!t) return CHORUS_ERR_NOMEM;
    size_t n = c->count, k = c->r->wire_count / 2;
    if (!t->m && !(t->m = malloc(2 * n * sizeof(float)))) return CHORUS_ERR_NOMEM;
    chorus__ef_accumulate(t, src);
    /* The threshold: the k-th largest magnitude (on a copy, which quickselect reorders). */
    float *mag = t->m + n;
    for (size_t i = 0; i < n; i++) mag[i] = t->m[i] < 0 ? -t->m[i] : t->m[i];
    float thr = kth_largest(mag, n, k);
    int32_t *w = wire;
    size_t got = 0;
    memcpy(t->resid, t->m, n * sizeof(float));
    /* Strictly above the threshold (fewer than k), then ties in index order until k. */
    for (int pass = 0; pass < 2 && got < k; pass++)
        for (size_t i = 0; i < n && got < k; i++) {
            float a = t->m[i] < 0 ? -t->m[i] : t->m[i];
            if (pass == 0 ? !(a > thr) : !(a == thr)) continue;
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
