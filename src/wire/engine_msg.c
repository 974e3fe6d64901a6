/*
 * engine_msg.c - the training runtime's negotiation messages (see engine_msg.h): the writer,
 * and the reader, which checks every length against what is left and never reads past the end.
 */
#include <stdlib.h>
#include <string.h>

#include "base/byteorder.h"
#include "wire/engine_msg.h"

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
    chorus__put_le32(x, v);
    put(b, x, 4);
}

void chorus__eb_u64(eng_buf *b, uint64_t v)
{
    unsigned char x[8];
    chorus__put_le64(x, v);
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
    chorus__eb_u64(b, m->shape);
    chorus__eb_f64(b, m->prescale);
    chorus__eb_f64(b, m->postscale);
    chorus__eb_str(b, m->comp);
    chorus__eb_u8(b, m->nrounds);
    for (int i = 0; i < m->nrounds && i < ENG_ROUNDS_MAX; i++) {
        chorus__eb_u8(b, m->rounds[i].kind);
        chorus__eb_u8(b, m->rounds[i].op);
        chorus__eb_u8(b, m->rounds[i].wdtype);
        chorus__eb_u64(b, m->rounds[i].wcount);
    }
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
    return p ? chorus__get_le32(p) : 0;
}

uint64_t chorus__rd_u64(eng_rd *r)
{
    const unsigned char *p = take(r, 8);
    return p ? chorus__get_le64(p) : 0;
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
    m->shape = chorus__rd_u64(r);
    m->prescale = chorus__rd_f64(r);
    m->postscale = chorus__rd_f64(r);
    chorus__rd_str(r, m->comp, ENG_COMP_MAX);
    m->nrounds = chorus__rd_u8(r);
    if (m->nrounds > ENG_ROUNDS_MAX) r->bad = 1;
    for (int i = 0; i < m->nrounds && !r->bad; i++) {
        eng_round *x = &m->rounds[i];
        x->kind = chorus__rd_u8(r);
        x->op = chorus__rd_u8(r);
        x->wdtype = chorus__rd_u8(r);
        x->wcount = chorus__rd_u64(r);
        if (x->kind > ENG_ROUND_GATHER || x->op >= CHORUS_OP_COUNT ||
            x->wdtype >= CHORUS_DTYPE_COUNT)
            r->bad = 1;
    }
    if (m->kind >= EK_COUNT || m->dtype >= CHORUS_DTYPE_COUNT || m->op >= CHORUS_OP_COUNT)
        r->bad = 1;
    if (r->bad) memset(m, 0, sizeof(*m));
}

/* ---- report entries ------------------------------------------------------------------------ */

void chorus__engmsg_put_new(eng_buf *b, const char *name, const eng_meta *m)
{
    chorus__eb_str(b, name);
    chorus__eb_meta(b, m);
}

int chorus__engmsg_read_new(eng_rd *r, char *name, eng_meta *m)
{
    chorus__rd_str(r, name, ENG_NAME_MAX);
    chorus__rd_meta(r, m);
    if (!r->bad && !name[0]) r->bad = 1;
    return r->bad ? -1 : 0;
}

void chorus__engmsg_put_stall(eng_buf *b, const char *name, uint32_t age_ms)
{
    chorus__eb_str(b, name);
    chorus__eb_u32(b, age_ms);
}

int chorus__engmsg_read_stall(eng_rd *r, char *name, uint32_t *age_ms)
{
    chorus__rd_str(r, name, ENG_NAME_MAX);
    *age_ms = chorus__rd_u32(r);
    if (!r->bad && !name[0]) r->bad = 1;
    return r->bad ? -1 : 0;
}

/* ---- answer items ------------------------------------------------------------------------- */

void chorus__engmsg_put_answer(eng_buf *b, const eng_answer *a)
{
    chorus__eb_u8(b, a->type);
    switch (a->type) {
    case ENG_ANS_EXEC:
        chorus__eb_str(b, a->name);
        chorus__eb_meta(b, &a->m);
        chorus__eb_u32(b, (uint32_t)a->slot);
        break;
    case ENG_ANS_ERROR:
        chorus__eb_str(b, a->name);
        chorus__eb_u8(b, a->code);
        chorus__eb_str(b, a->msg);
        break;
    case ENG_ANS_EVICT: chorus__eb_u32(b, (uint32_t)a->slot); break;
    case ENG_ANS_STALL: chorus__eb_str(b, a->msg); break;
    default: break;
    }
}

int chorus__engmsg_read_answer(eng_rd *r, eng_answer *a)
{
    a->name[0] = a->msg[0] = 0;
    a->slot = -1;
    a->code = 0;
    a->type = chorus__rd_u8(r);
    switch (a->type) {
    case ENG_ANS_EXEC:
        chorus__rd_str(r, a->name, ENG_NAME_MAX);
        chorus__rd_meta(r, &a->m);
        a->slot = (int32_t)chorus__rd_u32(r);
        if (!r->bad && (!a->name[0] || a->slot < -1)) r->bad = 1;
        break;
    case ENG_ANS_ERROR:
        chorus__rd_str(r, a->name, ENG_NAME_MAX);
        a->code = chorus__rd_u8(r);
        chorus__rd_str(r, a->msg, ENG_MSG_MAX);
        if (!r->bad && (!a->name[0] || a->code <= CHORUS_OK || a->code >= CHORUS_RESULT_COUNT))
            r->bad = 1;
        break;
    case ENG_ANS_EVICT:
        a->slot = (int32_t)chorus__rd_u32(r);
        if (!r->bad && a->slot < 0) r->bad = 1;
        break;
    case ENG_ANS_STALL: chorus__rd_str(r, a->msg, ENG_MSG_MAX); break;
    default: r->bad = 1; break;
    }
    return r->bad ? -1 : 0;
}
