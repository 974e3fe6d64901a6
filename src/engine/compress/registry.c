/*
 * registry.c - the built-in compressors by name (for CHORUS_COMPRESSION), and
 * chorus_compressor_create: a compressor from a spec ("fp16", "topk:0.01", "powersgd:2").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compress/compress.h"

const chorus_compressor *chorus__compressor_by_name(const char *name)
{
    if (!name || !*name || !strcmp(name, "none")) return NULL;
    if (!strcmp(name, "fp16")) return chorus_compressor_fp16();
    if (!strcmp(name, "bf16")) return chorus_compressor_bf16();
    return NULL;
}

enum { DEFAULT_DENSE_BELOW = 1024, MAX_POWERSGD_RANK = 64 };

static const char valid_specs[] = "none, fp16, bf16, topk:RATIO, randomk:RATIO, powersgd:RANK "
                                  "(RATIO in (0, 1], RANK in 1..64)";

static chorus_result bad_spec(const char *spec, const char *why)
{
    return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                        "compressor '%s': %s; valid: %s", spec ? spec : "(null)", why, valid_specs);
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
