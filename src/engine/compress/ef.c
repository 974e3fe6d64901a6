/*
 * ef.c - the compressors with error feedback: made from a spec ("topk:0.01", "powersgd:2"),
 * destroyed, and their one table of tensors (name -> residual and per-kind memory), shared by
 * topk.c, randomk.c and powersgd.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compress/compress.h"

enum { DEFAULT_DENSE_BELOW = 1024, MAX_POWERSGD_RANK = 64 };

static const char valid_specs[] = "none, fp16, bf16, topk:RATIO, randomk:RATIO, powersgd:RANK "
                                  "(RATIO in (0, 1], RANK in 1..64)";

static chorus_result bad_spec(const char *spec, const char *why)
{
    return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                        "compressor '%s': %s; valid: %s", spec ? spec : "(null)", why,
                        valid_specs);
}

/* Parses "kind:NUMBER" into the kind's ops and the number; 0 when spec is not of that kind. */
static int spec_number(const char *spec, const char *kind, double *v, const char **why)
{
    size_t n = strlen(kind);
    if (strncmp(spec, kind, n) || spec[n] != ':') return 0;
    char *end;
    errno = 0;
    *v = strtod(spec + n + 1, &end);
    if (end == spec + n + 1 || *end || errno) *why = "the value after ':' is not a number";
    return 1;
}

static chorus_result fill(ef_comp *s, const char *spec)
{
    double v = 0;
    const char *why = NULL;
    const chorus_compressor *cast = chorus__compressor_by_name(spec);
    if (cast) {
        s->pub = *cast;
        s->kind = EF_CAST;
        return CHORUS_OK;
    }
    if (spec_number(spec, "topk", &v, &why)) {
        s->pub = chorus__topk_ops;
        s->kind = EF_TOPK;
    } else if (spec_number(spec, "randomk", &v, &why)) {
        s->pub = chorus__randomk_ops;
        s->kind = EF_RANDOMK;
    } else if (spec_number(spec, "powersgd", &v, &why)) {
        s->pub = chorus__powersgd_ops;
        s->kind = EF_POWERSGD;
    } else {
        return bad_spec(spec, "unknown compressor");
    }
    if (why) return bad_spec(spec, why);
    if (s->kind == EF_POWERSGD) {
        if (v != (double)(int)v || v < 1 || v > MAX_POWERSGD_RANK)
            return bad_spec(spec, "the rank must be a whole number from 1 to 64");
        s->rank = (int)v;
    } else {
        if (!(v > 0.0 && v <= 1.0)) return bad_spec(spec, "the ratio must be in (0, 1]");
        s->ratio = v;
    }
    /* Compared across ranks: equal specs give equal names. */
    snprintf(s->name, sizeof(s->name), "%s", spec);
    s->pub.name = s->name;
    s->pub.state = s;
    return CHORUS_OK;
}

chorus_result chorus_compressor_create(const char *spec, size_t dense_below,
                                       chorus_compressor **out)
{
    if (!out) return bad_spec(spec, "out is NULL");
    *out = NULL;
    if (!spec || strlen(spec) >= 32) return bad_spec(spec, "missing or too long");
    if (!strcmp(spec, "none") || !*spec) return CHORUS_OK;
    ef_comp *s = calloc(1, sizeof(*s));
    if (!s) return CHORUS_ERR_NOMEM;
    chorus_result r = fill(s, spec);
    if (r != CHORUS_OK) {
        free(s);
        return r;
    }
    s->dense_below = dense_below ? dense_below : DEFAULT_DENSE_BELOW;
    pthread_mutex_init(&s->mu, NULL);
    *out = &s->pub;
    return CHORUS_OK;
}

static void tensor_free(ef_tensor *t)
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
    for (int i = 0; i < s->nt; i++) tensor_free(s->t[i]);
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
