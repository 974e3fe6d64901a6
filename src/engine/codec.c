/*
 * codec.c - the engine's small pieces of data handling: the negotiation messages (explicit
 * little-endian encoding; the reader checks every length against what is left and never reads
 * past the end), comparing tensor metadata across ranks, scaling, the identity element of each
 * op and the built-in fp16/bf16 compressors (the divergence check hashes with base/hash.c).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"
#include "reduce/reduce.h"

/* ---- writer ------------------------------------------------------------------------------- */

static void put(eng_buf *b, const void *p, size_t n)
{
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->len + n) nc *= 2;
        unsigned char *q = realloc(b->p, nc);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void chorus__eb_raw(eng_buf *b, const void *p, size_t n)
{
    if (n) put(b, p, n);
}

void chorus__eb_u8(eng_buf *b, uint8_t v)
{
    put(b, &v, 1);
}

void chorus__eb_u32(eng_buf *b, uint32_t v)
{
    unsigned char x[4];
    for (int i = 0; i < 4; i++) x[i] = (unsigned char)(v >> (8 * i));
    put(b, x, 4);
}

void chorus__eb_u64(eng_buf *b, uint64_t v)
{
    unsigned char x[8];
    for (int i = 0; i < 8; i++) x[i] = (unsigned char)(v >> (8 * i));
    put(b, x, 8);
}

void chorus__eb_f64(eng_buf *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    chorus__eb_u64(b, u);
}

void chorus__eb_str(eng_buf *b, const char *s)
{
    size_t n = strlen(s);
    chorus__eb_u32(b, (uint32_t)n);
    put(b, s, n);
}

void chorus__eb_meta(eng_buf *b, const eng_meta *m)
{
    chorus__eb_u8(b, m->kind);
    chorus__eb_u8(b, m->dtype);
    chorus__eb_u8(b, m->op);
    chorus__eb_u32(b, (uint32_t)m->root);
    chorus__eb_u64(b, m->count);
    chorus__eb_f64(b, m->prescale);
    chorus__eb_f64(b, m->postscale);
    chorus__eb_str(b, m->comp);
    chorus__eb_u8(b, m->wdtype);
    chorus__eb_u8(b, m->gather);
    chorus__eb_u64(b, m->wcount);
}

/* ---- reader ------------------------------------------------------------------------------- */

static const unsigned char *take(eng_rd *r, size_t n)
{
    if (r->bad || n > r->len - r->off) {
        r->bad = 1;
        return NULL;
    }
    const unsigned char *p = r->p + r->off;
    r->off += n;
    return p;
}

uint8_t chorus__rd_u8(eng_rd *r)
{
    const unsigned char *p = take(r, 1);
    return p ? p[0] : 0;
}

uint32_t chorus__rd_u32(eng_rd *r)
{
    const unsigned char *p = take(r, 4);
    uint32_t v = 0;
    for (int i = 0; p && i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

uint64_t chorus__rd_u64(eng_rd *r)
{
    const unsigned char *p = take(r, 8);
    uint64_t v = 0;
    for (int i = 0; p && i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

double chorus__rd_f64(eng_rd *r)
{
    uint64_t u = chorus__rd_u64(r);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

void chorus__rd_str(eng_rd *r, char *out, size_t max)
{
    uint32_t n = chorus__rd_u32(r);
    out[0] = 0;
    if (r->bad) return;
    if (n > max) {
        r->bad = 1;
        return;
    }
    const unsigned char *p = take(r, n);
    if (!p) return;
    memcpy(out, p, n);
    out[n] = 0;
    if (strlen(out) != n) r->bad = 1; /* embedded NUL */
}

void chorus__rd_meta(eng_rd *r, eng_meta *m)
{
    memset(m, 0, sizeof(*m));
    m->kind = chorus__rd_u8(r);
    m->dtype = chorus__rd_u8(r);
    m->op = chorus__rd_u8(r);
    m->root = (int32_t)chorus__rd_u32(r);
    m->count = chorus__rd_u64(r);
    m->prescale = chorus__rd_f64(r);
    m->postscale = chorus__rd_f64(r);
    chorus__rd_str(r, m->comp, ENG_COMP_MAX);
    m->wdtype = chorus__rd_u8(r);
    m->gather = chorus__rd_u8(r);
    m->wcount = chorus__rd_u64(r);
    if (m->kind >= EK_COUNT || m->dtype >= CHORUS_DTYPE_COUNT || m->op >= CHORUS_OP_COUNT ||
        m->wdtype >= CHORUS_DTYPE_COUNT)
        r->bad = 1;
}

/* ---- metadata ----------------------------------------------------------------------------- */

const char *chorus__kind_name(int kind)
{
    static const char *names[EK_COUNT] = {"allreduce",        "broadcast", "allgather",
                                          "reduce_scatter",   "alltoall",  "barrier",
                                          "divergence check", "join"};
    return kind >= 0 && kind < EK_COUNT ? names[kind] : "?";
}

int chorus__meta_equal(const eng_meta *a, const eng_meta *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
           a->count == b->count && a->prescale == b->prescale && a->postscale == b->postscale &&
           !strcmp(a->comp, b->comp) && a->wdtype == b->wdtype && a->gather == b->gather &&
           a->wcount == b->wcount;
}

void chorus__meta_diff(const eng_meta *a, int ra, const eng_meta *b, int rb, char *out, size_t len)
{
#define DIFF(fmt, what, va, vb)                                                                    \
    snprintf(out, len, "%s " fmt " on rank %d but " fmt " on rank %d", what, va, ra, vb, rb)
    if (a->kind != b->kind)
        DIFF("%s", "operation", chorus__kind_name(a->kind), chorus__kind_name(b->kind));
    else if (a->dtype != b->dtype)
        DIFF("%s", "dtype", chorus__dtype_name(a->dtype), chorus__dtype_name(b->dtype));
    else if (a->count != b->count)
        DIFF("%llu", a->kind == EK_ALLGATHER ? "row size (elements)" : "count (elements)",
             (unsigned long long)a->count, (unsigned long long)b->count);
    else if (a->op != b->op)
        DIFF("%s", "op", chorus__op_name(a->op), chorus__op_name(b->op));
    else if (a->root != b->root)
        DIFF("%d", "root", (int)a->root, (int)b->root);
    else if (a->prescale != b->prescale)
        DIFF("%g", "prescale", a->prescale, b->prescale);
    else if (a->postscale != b->postscale)
        DIFF("%g", "postscale", a->postscale, b->postscale);
    else if (strcmp(a->comp, b->comp))
        DIFF("%s", "compression", a->comp[0] ? a->comp : "none", b->comp[0] ? b->comp : "none");
    else
        DIFF("%llu", "wire size (elements)", (unsigned long long)a->wcount,
             (unsigned long long)b->wcount);
#undef DIFF
}

/* ---- scaling and identities --------------------------------------------------------------- */

void chorus__scale(void *dst, const void *src, size_t n, chorus_dtype t, double f)
{
    switch (t) {
    case CHORUS_FLOAT32: {
        float *d = dst;
        const float *s = src;
        float ff = (float)f;
        for (size_t i = 0; i < n; i++) d[i] = s[i] * ff;
        break;
    }
    case CHORUS_FLOAT64: {
        double *d = dst;
        const double *s = src;
        for (size_t i = 0; i < n; i++) d[i] = s[i] * f;
        break;
    }
    case CHORUS_FLOAT16: {
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = chorus__f32_to_f16(chorus__f16_to_f32(s[i]) * (float)f);
        break;
    }
    case CHORUS_BFLOAT16: {
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = chorus__f32_to_bf16(chorus__bf16_to_f32(s[i]) * (float)f);
        break;
    }
    default:
        if (dst != src) memmove(dst, src, n * chorus_dtype_size(t));
        break;
    }
}

#define FILL(T, v)                                                                                 \
    do {                                                                                           \
        T *p = dst, x = (v);                                                                       \
        for (size_t i = 0; i < n; i++) p[i] = x;                                                   \
    } while (0)

void chorus__fill_identity(void *dst, size_t n, chorus_dtype t, chorus_op op)
{
    if (op == CHORUS_SUM || op == CHORUS_AVG) {
        memset(dst, 0, n * chorus_dtype_size(t)); /* 0 and +0.0 are all-zero bits */
        return;
    }
    int hi = op == CHORUS_MIN; /* min: the largest value; max: the smallest; prod: 1 */
    switch (t) {
    case CHORUS_INT8: FILL(int8_t, op == CHORUS_PROD ? 1 : hi ? INT8_MAX : INT8_MIN); break;
    case CHORUS_UINT8: FILL(uint8_t, op == CHORUS_PROD ? 1 : hi ? UINT8_MAX : 0); break;
    case CHORUS_INT32: FILL(int32_t, op == CHORUS_PROD ? 1 : hi ? INT32_MAX : INT32_MIN); break;
    case CHORUS_INT64: FILL(int64_t, op == CHORUS_PROD ? 1 : hi ? INT64_MAX : INT64_MIN); break;
    case CHORUS_FLOAT16: FILL(uint16_t, op == CHORUS_PROD ? 0x3c00 : hi ? 0x7c00 : 0xfc00); break;
    case CHORUS_BFLOAT16: FILL(uint16_t, op == CHORUS_PROD ? 0x3f80 : hi ? 0x7f80 : 0xff80); break;
    case CHORUS_FLOAT32: FILL(float, op == CHORUS_PROD ? 1.0f : hi ? INFINITY : -INFINITY); break;
    case CHORUS_FLOAT64: FILL(double, op == CHORUS_PROD ? 1.0 : hi ? INFINITY : -INFINITY); break;
    default: break;
    }
}

/* ---- built-in compressors ----------------------------------------------------------------- */

static int is_wide_float(chorus_dtype t)
{
    return t == CHORUS_FLOAT32 || t == CHORUS_FLOAT64;
}

static chorus_dtype f16_wire(void *st, chorus_dtype t)
{
    (void)st;
    return is_wide_float(t) ? CHORUS_FLOAT16 : t;
}

static chorus_dtype bf16_wire(void *st, chorus_dtype t)
{
    (void)st;
    return is_wide_float(t) ? CHORUS_BFLOAT16 : t;
}

static chorus_result narrow(const void *src, void *wire, size_t n, chorus_dtype t, int bf)
{
    uint16_t *w = wire;
    if (t == CHORUS_FLOAT32) {
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            w[i] = bf ? chorus__f32_to_bf16(s[i]) : chorus__f32_to_f16(s[i]);
    } else if (t == CHORUS_FLOAT64) {
        const double *s = src;
        for (size_t i = 0; i < n; i++)
            w[i] = bf ? chorus__f32_to_bf16((float)s[i]) : chorus__f32_to_f16((float)s[i]);
    } else if (src != wire) {
        memmove(wire, src, n * chorus_dtype_size(t));
    }
    return CHORUS_OK;
}

static chorus_result widen(const void *wire, void *dst, size_t n, chorus_dtype t, int bf)
{
    const uint16_t *w = wire;
    if (t == CHORUS_FLOAT32) {
        float *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = bf ? chorus__bf16_to_f32(w[i]) : chorus__f16_to_f32(w[i]);
    } else if (t == CHORUS_FLOAT64) {
        double *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = bf ? chorus__bf16_to_f32(w[i]) : chorus__f16_to_f32(w[i]);
    } else if (wire != dst) {
        memmove(dst, wire, n * chorus_dtype_size(t));
    }
    return CHORUS_OK;
}

static chorus_result f16_c(void *st, const char *name, const void *src, void *wire, size_t n,
                           chorus_dtype t)
{
    (void)st, (void)name;
    return narrow(src, wire, n, t, 0);
}
static chorus_result f16_d(void *st, const char *name, const void *wire, void *dst, size_t n,
                           chorus_dtype t, int acc)
{
    (void)st, (void)name, (void)acc;
    return widen(wire, dst, n, t, 0);
}
static chorus_result bf16_c(void *st, const char *name, const void *src, void *wire, size_t n,
                            chorus_dtype t)
{
    (void)st, (void)name;
    return narrow(src, wire, n, t, 1);
}
static chorus_result bf16_d(void *st, const char *name, const void *wire, void *dst, size_t n,
                            chorus_dtype t, int acc)
{
    (void)st, (void)name, (void)acc;
    return widen(wire, dst, n, t, 1);
}

static const chorus_compressor fp16_comp = {"fp16", NULL, 0, f16_wire, NULL, f16_c, f16_d};
static const chorus_compressor bf16_comp = {"bf16", NULL, 0, bf16_wire, NULL, bf16_c, bf16_d};

const chorus_compressor *chorus_compressor_fp16(void)
{
    return &fp16_comp;
}

const chorus_compressor *chorus_compressor_bf16(void)
{
    return &bf16_comp;
}

const chorus_compressor *chorus__compressor_by_name(const char *name)
{
    if (!name || !*name || !strcmp(name, "none")) return NULL;
    if (!strcmp(name, "fp16")) return &fp16_comp;
    if (!strcmp(name, "bf16")) return &bf16_comp;
    return NULL;
}
