/*
 * randomk.c - the "randomk:R" compressor: k = ceil(R n) elements of M = input + residual,
 * chosen by a generator seeded from the tensor's name and step, the same choice on every
 * rank, so only the k values travel: one reduce round (sum) of k + 1 floats, fused with the
 * other float sums of the cycle. Half the bytes of top-k's (index, value) pairs, and a sum
 * rather than a gather, whose size grows with the ranks; the price is that the elements are
 * not the largest. The extra float is a step check (chorus__ef_check_step): the sum shows
 * whether every rank drew the same indices; if not (a rank that joined and missed steps), the
 * tensor fails on every rank instead of adding unrelated elements.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/compress/compress.h"

static chorus_result randomk_plan(void *st, const char *tensor, size_t count, chorus_dtype t,
                                  chorus_op op, chorus_compress_plan *plan)
{
    (void)tensor;
    ef_comp *s = st;
    memset(plan, 0, sizeof(*plan));
    if (t != CHORUS_FLOAT32 || (op != CHORUS_SUM && op != CHORUS_AVG) || count < s->dense_below ||
        count > UINT32_MAX)
        return CHORUS_OK; /* dense */
    size_t k = chorus__ef_k(s, count);
    if (k + 1 >= count) return CHORUS_OK;
    plan->nrounds = 1;
    plan->round[0] = (chorus_round){CHORUS_ROUND_REDUCE, CHORUS_SUM, CHORUS_FLOAT32, k + 1};
    return CHORUS_OK;
}

/* Moves k random elements of the permutation t->idx to its front (partial Fisher-Yates): any
 * starting order gives a uniform choice, and every rank starts from the same one. */
static void draw(ef_tensor *t, size_t k)
{
    uint64_t seed = chorus__hash64(t->name, strlen(t->name)) ^ (t->step * 0xd1b54a32d192ed03ULL);
    for (size_t j = 0; j < k; j++) {
        size_t pick = j + (size_t)(chorus__ef_rand(&seed) % (t->count - j));
        uint32_t tmp = t->idx[j];
        t->idx[j] = t->idx[pick];
        t->idx[pick] = tmp;
    }
}

static chorus_result randomk_prepare(void *st, const chorus_compress_call *c, const void *src,
                                     void *wire)
{
    ef_comp *s = st;
    const char *why;
    ef_tensor *t = chorus__ef_tensor(s, c->tensor, c->count, &why);
    if (!t) return CHORUS_ERR_NOMEM;
    size_t n = c->count, k = c->r->wire_count - 1;
    if (!t->m && !(t->m = malloc(n * sizeof(float)))) return CHORUS_ERR_NOMEM;
    if (!t->idx) {
        if (!(t->idx = malloc(n * sizeof(uint32_t)))) return CHORUS_ERR_NOMEM;
        for (size_t i = 0; i < n; i++) t->idx[i] = (uint32_t)i;
    }
    chorus__ef_accumulate(t, src);
    draw(t, k);
    float *w = wire;
    memcpy(t->resid, t->m, n * sizeof(float));
    for (size_t j = 0; j < k; j++) {
        w[j] = t->m[t->idx[j]];
        t->resid[t->idx[j]] = 0.0f;
    }
    w[k] = chorus__ef_step_tag(t);
    t->k = k;
    return CHORUS_OK;
}

static chorus_result randomk_finish(void *st, const chorus_compress_call *c, const void *wire,
                                    void *dst)
{
    ef_comp *s = st;
    pthread_mutex_lock(&s->mu);
    ef_tensor *t = chorus__ef_find(s, c->tensor);
    pthread_mutex_unlock(&s->mu);
    const float *w = wire;
    size_t k = c->r->wire_count - 1;
    if (!t || !t->idx || t->k != k) return CHORUS_ERR_INTERNAL;
    chorus_result r = chorus__ef_check_step(s, c, t, w[k]);
    t->step++;
    if (r != CHORUS_OK) return r;
    float *out = dst;
    memset(out, 0, c->count * sizeof(float));
    for (size_t j = 0; j < k; j++) out[t->idx[j]] = w[j];
    return CHORUS_OK;
}

const chorus_compressor chorus__randomk_ops = {"randomk", NULL, randomk_plan, randomk_prepare,
                                               randomk_finish};
