/*
 * state.c - a compressor's memory as bytes and back, for training checkpoints: per tensor its
 * residual, its step, random-k's permutation and PowerSGD's warm-start Q, so that training
 * resumed from a checkpoint compresses exactly as a run that never stopped would.
 *
 * Layout (little-endian, as laid out in memory): the magic "CHCMPST1", the spec (32 bytes,
 * zero-padded), the tensor count (u64); then per tensor: name length (u64) and name, count,
 * step, cols_hint, rows, cols, r, flags (u64 each; flags: 1 residual, 2 permutation, 4 Q),
 * and the arrays the flags name: residual (count floats), permutation (count u32), Q (cols x r
 * floats). The decoder checks every length before it reads, and the whole input before it
 * changes the compressor.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/compress/compress.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "compressor state is stored in little-endian order; this target is not"
#endif

#define STATE_MAGIC "CHCMPST1"
enum { F_RESID = 1, F_IDX = 2, F_Q = 4, SPEC_BYTES = 32, TENSOR_WORDS = 8 };

static int is_ef(const chorus_compressor *c)
{
    return c && c->state == (const void *)c;
}

static chorus_result bad_state(const char *why)
{
    return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG, "compressor state: %s", why);
}

/* Bytes of one tensor's record. */
static size_t tensor_bytes(const ef_tensor *t)
{
    size_t n = TENSOR_WORDS * sizeof(uint64_t) + strlen(t->name);
    if (t->resid) n += t->count * sizeof(float);
    if (t->idx) n += t->count * sizeof(uint32_t);
    if (t->q) n += t->cols * t->r * sizeof(float);
    return n;
}

static unsigned char *put(unsigned char *p, const void *v, size_t n)
{
    if (n) memcpy(p, v, n);
    return p + n;
}

chorus_result chorus_compressor_save_state(chorus_compressor *c, void **data, size_t *len)
{
    if (!c || !data || !len)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_compressor_save_state: NULL argument");
    *data = NULL;
    *len = 0;
    if (!is_ef(c)) return CHORUS_OK; /* the casts keep nothing */
    ef_comp *s = (ef_comp *)c;
    pthread_mutex_lock(&s->mu);
    size_t n = 8 + SPEC_BYTES + sizeof(uint64_t);
    for (int i = 0; i < s->nt; i++) n += tensor_bytes(s->t[i]);
    unsigned char *buf = malloc(n), *p = buf;
    if (buf) {
        char spec[SPEC_BYTES] = {0};
        memcpy(spec, s->name, strlen(s->name));
        uint64_t nt = (uint64_t)s->nt;
        p = put(put(put(p, STATE_MAGIC, 8), spec, SPEC_BYTES), &nt, sizeof(nt));
        for (int i = 0; i < s->nt; i++) {
            const ef_tensor *t = s->t[i];
            uint64_t w[TENSOR_WORDS] = {strlen(t->name),
                                        t->count,
                                        t->step,
                                        t->cols_hint,
                                        t->rows,
                                        t->cols,
                                        t->r,
                                        (t->resid ? F_RESID : 0) | (t->idx ? F_IDX : 0) |
                                            (t->q ? F_Q : 0)};
            p = put(p, w, TENSOR_WORDS * sizeof(uint64_t));
            p = put(p, t->name, w[0]);
            if (t->resid) p = put(p, t->resid, t->count * sizeof(float));
            if (t->idx) p = put(p, t->idx, t->count * sizeof(uint32_t));
            if (t->q) p = put(p, t->q, t->cols * t->r * sizeof(float));
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (!buf) return CHORUS_ERR_NOMEM;
    *data = buf;
    *len = n;
    return CHORUS_OK;
}

/* A cursor over the input: take() hands out n bytes or NULL when fewer are left. */
typedef struct cursor {
    const unsigned char *p;
    size_t left;
} cursor;

static const void *take(cursor *c, size_t n)
{
    if (n > c->left) return NULL;
    const void *r = c->p;
    c->p += n;
    c->left -= n;
    return r;
}

/* n elements of size bytes, NULL on overflow or short input. */
static const void *take_array(cursor *c, uint64_t n, size_t size)
{
    if (n > SIZE_MAX / size) return NULL;
    return take(c, (size_t)n * size);
}

/* One tensor's record into t (made by the caller, no arrays yet); the arrays are checked
 * before, so only allocation fails here. */
static chorus_result restore_tensor(ef_tensor *t, const uint64_t *w, const void *resid,
                                    const void *idx, const void *q)
{
    size_t count = (size_t)w[1];
    t->count = count;
    t->step = w[2];
    t->cols_hint = (size_t)w[3];
    if (resid && !(t->resid = malloc(count ? count * sizeof(float) : 1))) return CHORUS_ERR_NOMEM;
    if (resid) memcpy(t->resid, resid, count * sizeof(float));
    if (idx && !(t->idx = malloc(count ? count * sizeof(uint32_t) : 1))) return CHORUS_ERR_NOMEM;
    if (idx) memcpy(t->idx, idx, count * sizeof(uint32_t));
    if (!q) return CHORUS_OK;
    t->rows = (size_t)w[4];
    t->cols = (size_t)w[5];
    t->r = (size_t)w[6];
    t->m = calloc(t->rows * t->cols, sizeof(float));
    t->p = calloc(t->rows * t->r, sizeof(float));
    t->q = malloc(t->cols * t->r * sizeof(float));
    t->qloc = malloc(t->cols * t->r * sizeof(float));
    if (!t->m || !t->p || !t->q || !t->qloc) return CHORUS_ERR_NOMEM;
    memcpy(t->q, q, t->cols * t->r * sizeof(float));
    return CHORUS_OK;
}

/* Checks one record at the cursor and, with apply, restores it into a new entry of s. */
static chorus_result read_tensor(cursor *cur, ef_comp *s, int apply)
{
    const void *wp = take(cur, TENSOR_WORDS * sizeof(uint64_t));
    if (!wp) return bad_state("truncated");
    uint64_t w[TENSOR_WORDS];
    memcpy(w, wp, sizeof(w));
    const char *name = take_array(cur, w[0], 1);
    if (!name || w[0] == 0 || w[0] > 255 || memchr(name, 0, (size_t)w[0]))
        return bad_state("a tensor's name is missing, too long or truncated");
    uint64_t flags = w[7], count = w[1];
    if (flags & ~(uint64_t)(F_RESID | F_IDX | F_Q)) return bad_state("unknown flags");
    if (count > UINT32_MAX) return bad_state("a tensor's count is out of range");
    const void *resid = NULL, *idx = NULL, *q = NULL;
    if ((flags & F_RESID) && !(resid = take_array(cur, count, sizeof(float))))
        return bad_state("truncated residual");
    if ((flags & F_IDX) && !(idx = take_array(cur, count, sizeof(uint32_t))))
        return bad_state("truncated permutation");
    if (flags & F_Q) {
        uint64_t rows = w[4], cols = w[5], r = w[6];
        if (!(flags & F_RESID) || !rows || !cols || !r || r > 64 || cols > count || rows > count ||
            rows * cols < count || (rows - 1) * cols >= count)
            return bad_state("PowerSGD's matrix does not fit its tensor");
        if (!(q = take_array(cur, cols * r, sizeof(float)))) return bad_state("truncated Q");
    }
    if (idx) /* indices into the tensor */
        for (uint64_t i = 0; i < count; i++) {
            uint32_t v;
            memcpy(&v, (const uint32_t *)idx + i, sizeof(v));
            if (v >= count) return bad_state("random-k's permutation is out of range");
        }
    if (!apply) return CHORUS_OK;
    char nm[256];
    memcpy(nm, name, (size_t)w[0]);
    nm[w[0]] = '\0';
    ef_tensor *t = calloc(1, sizeof(*t));
    if (!t || !(t->name = strdup(nm))) {
        free(t);
        return CHORUS_ERR_NOMEM;
    }
    if (s->nt == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        ef_tensor **tt = realloc(s->t, (size_t)cap * sizeof(*tt));
        if (!tt) {
            chorus__ef_free_tensor(t);
            return CHORUS_ERR_NOMEM;
        }
        s->t = tt;
        s->cap = cap;
    }
    s->t[s->nt++] = t;
    return restore_tensor(t, w, resid, idx, q);
}

chorus_result chorus_compressor_load_state(chorus_compressor *c, const void *data, size_t len)
{
    if (!c || (len && !data))
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_compressor_load_state: NULL argument");
    if (!is_ef(c)) {
        if (len) return bad_state("this compressor keeps no state");
        return CHORUS_OK;
    }
    ef_comp *s = (ef_comp *)c;
    cursor cur = {data, len};
    const unsigned char *magic = take(&cur, 8);
    const char *spec = take(&cur, SPEC_BYTES);
    const void *ntp = take(&cur, sizeof(uint64_t));
    if (!magic || !spec || !ntp || memcmp(magic, STATE_MAGIC, 8))
        return bad_state("no state header");
    if (memchr(spec, 0, SPEC_BYTES) == NULL || strcmp(spec, s->name))
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "compressor state: saved by compressor '%.*s', this one is '%s'",
                            SPEC_BYTES, spec, s->name);
    uint64_t nt;
    memcpy(&nt, ntp, sizeof(nt));
    if (nt > 1u << 20) return bad_state("too many tensors");
    cursor check = cur;
    for (uint64_t i = 0; i < nt; i++) {
        chorus_result r = read_tensor(&check, s, 0);
        if (r != CHORUS_OK) return r;
    }
    if (check.left) return bad_state("trailing bytes");
    pthread_mutex_lock(&s->mu);
    /* the saved table replaces this one; the columns hints come with it */
    for (int i = 0; i < s->nt; i++) chorus__ef_free_tensor(s->t[i]);
    s->nt = 0;
    chorus_result r = CHORUS_OK;
    for (uint64_t i = 0; i < nt && r == CHORUS_OK; i++) r = read_tensor(&cur, s, 1);
    pthread_mutex_unlock(&s->mu);
    return r;
}
