/*
 * ef.c - the compressors with error feedback (made from a spec in registry.c): their one table
 * of tensors (name -> residual and per-kind memory), shared by topk.c, randomk.c and
 * powersgd.c, reading a residual, the matrix view hint, and destroying.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/compress/compress.h"

void chorus__ef_free_tensor(ef_tensor *t)
{
    if (!t) return;
    free(t->name);
    free(t->resid);
    free(t->m);
    free(t->idx);
    free(t->p);
    free(t->q);
    free(t->qloc);
    free(t);
}

void chorus_compressor_destroy(chorus_compressor *c)
{
    if (!c) return;
    ef_comp *s = (ef_comp *)c; /* pub is the first member */
    for (int i = 0; i < s->nt; i++) chorus__ef_free_tensor(s->t[i]);
    free(s->t);
    free(s->hist);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

ef_tensor *chorus__ef_find(ef_comp *s, const char *name)
{
    for (int i = 0; i < s->nt; i++)
        if (!strcmp(s->t[i]->name, name)) return s->t[i];
    return NULL;
}

/* A new entry (no arrays yet), or NULL. Caller holds s->mu. */
static ef_tensor *tensor_add(ef_comp *s, const char *name)
{
    if (s->nt == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        ef_tensor **t = realloc(s->t, (size_t)cap * sizeof(*t));
        if (!t) return NULL;
        s->t = t;
        s->cap = cap;
    }
    ef_tensor *t = calloc(1, sizeof(*t));
    if (!t || !(t->name = strdup(name))) {
        free(t);
        return NULL;
    }
    s->t[s->nt++] = t;
    return t;
}

ef_tensor *chorus__ef_tensor(ef_comp *s, const char *name, size_t count, const char **why)
{
    *why = "out of memory";
    pthread_mutex_lock(&s->mu);
    ef_tensor *t = chorus__ef_find(s, name);
    if (!t) t = tensor_add(s, name);
    if (t && t->resid && t->count != count) {
        *why = "the tensor was seen before with another element count";
        t = NULL;
    } else if (t && !t->resid) {
        t->count = count;
        t->resid = calloc(count ? count : 1, sizeof(float));
        if (!t->resid) t = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    return t;
}

size_t chorus__ef_k(const ef_comp *s, size_t count)
{
    double k = s->ratio * (double)count;
    size_t n = (size_t)k;
    if ((double)n < k) n++;
    if (n < 1) n = 1;
    return n > count ? count : n;
}

void chorus__ef_accumulate(ef_tensor *t, const float *src)
{
    for (size_t i = 0; i < t->count; i++) t->m[i] = src[i] + t->resid[i];
}

float chorus__ef_step_tag(const ef_tensor *t)
{
    return (float)(t->step % 4096 + 1); /* small integers: the sum is exact */
}

chorus_result chorus__ef_check_step(const ef_comp *s, const chorus_compress_call *c,
                                    const ef_tensor *t, float sum)
{
    float want = chorus__ef_step_tag(t) * (float)c->contributors;
    if (sum == want) return CHORUS_OK;
    CHORUS_WARN(CHORUS_LOG_ENGINE,
                "%s on '%s': the ranks are at different steps of this tensor (step check %g, "
                "expected %g): a rank missed steps",
                s->name, c->tensor, (double)sum, (double)want);
    return CHORUS_ERR_MISMATCH;
}

uint64_t chorus__ef_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int is_ef(const chorus_compressor *c)
{
    return c && c->state == (const void *)c;
}

chorus_result chorus_compressor_residual(chorus_compressor *c, const char *tensor, float *out,
                                         size_t count)
{
    if (!c || !tensor || (count && !out))
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_compressor_residual: NULL argument");
    memset(out, 0, count * sizeof(float));
    if (!is_ef(c)) return CHORUS_OK;
    ef_comp *s = (ef_comp *)c;
    chorus_result r = CHORUS_OK;
    pthread_mutex_lock(&s->mu);
    ef_tensor *t = chorus__ef_find(s, tensor);
    if (t && t->resid && t->count != count)
        r = chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                         "chorus_compressor_residual('%s'): the tensor has %zu elements, not %zu",
                         tensor, t->count, count);
    else if (t && t->resid)
        memcpy(out, t->resid, count * sizeof(float));
    pthread_mutex_unlock(&s->mu);
    return r;
}

chorus_result chorus_compressor_set_cols(chorus_compressor *c, const char *tensor, size_t cols)
{
    if (!c || !tensor || !cols)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_compressor_set_cols: NULL compressor or tensor, or 0 columns");
    if (!is_ef(c)) return CHORUS_OK;
    ef_comp *s = (ef_comp *)c;
    pthread_mutex_lock(&s->mu);
    ef_tensor *t = chorus__ef_find(s, tensor);
    if (!t) t = tensor_add(s, tensor);
    if (t && !t->p) t->cols_hint = cols;
    pthread_mutex_unlock(&s->mu);
    return t ? CHORUS_OK : CHORUS_ERR_NOMEM;
}
