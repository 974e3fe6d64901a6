/*
 * fusion.c - allreduce rounds packed into fusion buffers. Items of one pass (plain allreduces
 * and compressed tensors' reduce rounds) are grouped by (wire dtype, op) into buckets of at
 * most fusion_threshold bytes; a bucket is packed (each item's part written at its offset),
 * reduced with one chorus_allreduce and unpacked. The core reduces elementwise, so where an
 * item sits in the bucket does not change which values are combined. Items of DIRECT_BYTES or
 * more, or any item when fusion is off, are reduced alone, in place on the caller's buffers
 * when nothing needs a copy. Every choice depends only on agreed metadata, never on whether
 * this rank has joined, so all ranks make the same collective calls.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "engine/engine_int.h"

#define DIRECT_BYTES ((size_t)1 << 20)

static void count_batch(chorus_engine *e, size_t bytes)
{
    pthread_mutex_lock(&e->mu);
    e->st.fused_batches++;
    e->st.bytes_reduced += bytes;
    pthread_mutex_unlock(&e->mu);
}

/* A plain allreduce alone, in place: no copies. */
static chorus_result reduce_in_place(chorus_engine *e, eng_exec *x)
{
    eng_round w = chorus__round_of(e, x);
    double t0 = chorus__now();
    chorus_result res = chorus_allreduce(e->comm, x->req->send, x->req->recv, w.wcount,
                                         (chorus_dtype)w.wdtype, (chorus_op)w.op);
    double t1 = chorus__now();
    if (res != CHORUS_OK) return res;
    count_batch(e, w.wcount * chorus_dtype_size((chorus_dtype)w.wdtype));
    chorus__eng_tl_pre(e, x, t0);
    chorus__tl_span(&e->tl, x->name, "ALLREDUCE", t0, t1, NULL);
    chorus__round_finish(e, x, x->req->recv, 0, NULL);
    chorus__round_end(e, x);
    return CHORUS_OK;
}

/* Reduces items idx[0..n) of xs together in the fusion buffer. */
static chorus_result reduce_packed(chorus_engine *e, eng_exec *xs, const size_t *idx, size_t n)
{
    if (n == 1 && chorus__round_in_place(&xs[idx[0]])) return reduce_in_place(e, &xs[idx[0]]);
    eng_round w0 = chorus__round_of(e, &xs[idx[0]]);
    chorus_dtype wt = (chorus_dtype)w0.wdtype;
    size_t wes = chorus_dtype_size(wt), total = 0;
    for (size_t i = 0; i < n; i++) total += chorus__round_of(e, &xs[idx[i]]).wcount;
    char *buf = chorus__eng_grow(&e->fbuf, &e->fbuf_cap, total * wes);
    unsigned char *last = calloc(n, 1);
    if (!buf || !last) {
        free(last);
        return chorus__eng_err(e, CHORUS_ERR_NOMEM,
                               "out of memory for a fusion buffer of %zu bytes", total * wes);
    }
    double t0 = chorus__now();
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        eng_exec *x = &xs[idx[i]];
        chorus__round_prepare(e, x, buf + off * wes);
        off += chorus__round_of(e, x).wcount;
    }
    double t1 = chorus__now();
    chorus_result res = chorus_allreduce(e->comm, buf, buf, total, wt, (chorus_op)w0.op);
    double t2 = chorus__now();
    if (res != CHORUS_OK) {
        free(last);
        return res;
    }
    off = 0;
    for (size_t i = 0; i < n; i++) {
        eng_exec *x = &xs[idx[i]];
        size_t wc = chorus__round_of(e, x).wcount;
        last[i] = (unsigned char)chorus__round_finish(e, x, buf + off * wes, 0, NULL);
        off += wc;
    }
    double t3 = chorus__now();
    count_batch(e, total * wes);
    char args[96];
    snprintf(args, sizeof(args), "{\"tensors\":%zu,\"bytes\":%zu}", n, total * wes);
    for (size_t i = 0; i < n; i++) {
        eng_exec *x = &xs[idx[i]];
        if (!x->req) continue;
        if (x->round == 0) chorus__eng_tl_pre(e, x, t0);
        chorus__tl_span(&e->tl, x->name, "MEMCPY_IN_FUSION_BUFFER", t0, t1, NULL);
        chorus__tl_span(&e->tl, x->name, "ALLREDUCE", t1, t2, args);
        chorus__tl_span(&e->tl, x->name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3, NULL);
        if (last[i]) chorus__round_end(e, x);
    }
    free(last);
    return CHORUS_OK;
}

static chorus_result flush_bucket(chorus_engine *e, eng_fusion *f, int b, eng_exec *x)
{
    eng_bucket *k = &f->bk[b];
    chorus_result r = k->n ? reduce_packed(e, x, k->items, k->n) : CHORUS_OK;
    k->n = 0;
    k->bytes = 0;
    k->open = 0;
    for (int j = 0; j < f->nopen; j++)
        if (f->order[j] == b) {
            memmove(f->order + j, f->order + j + 1, (size_t)(f->nopen - j - 1) * sizeof(int));
            f->nopen--;
            break;
        }
    return r;
}

chorus_result chorus__fusion_add(chorus_engine *e, eng_fusion *f, eng_exec *x, size_t i)
{
    eng_round w = chorus__round_of(e, &x[i]);
    size_t wb = w.wcount * chorus_dtype_size((chorus_dtype)w.wdtype);
    size_t thr = e->o.fusion_threshold;
    if (thr == 0 || wb >= DIRECT_BYTES || wb > thr) return reduce_packed(e, x, &i, 1);
    int b = -1;
    for (int k = 0; k < ENG_NBUCKETS; k++)
        if (f->bk[k].open && f->bk[k].wdtype == w.wdtype && f->bk[k].op == w.op) b = k;
    if (b >= 0 && f->bk[b].bytes + wb > thr) {
        CHORUS_CHECK(flush_bucket(e, f, b, x));
        b = -1;
    }
    if (b < 0) {
        for (int k = 0; k < ENG_NBUCKETS && b < 0; k++)
            if (!f->bk[k].open) b = k;
        if (b < 0) { /* every bucket in use: reduce the oldest */
            b = f->order[0];
            CHORUS_CHECK(flush_bucket(e, f, b, x));
        }
        f->bk[b].open = 1;
        f->bk[b].wdtype = w.wdtype;
        f->bk[b].op = w.op;
        f->order[f->nopen++] = b;
    }
    eng_bucket *k = &f->bk[b];
    if (k->n == k->cap) {
        size_t nc = k->cap ? k->cap * 2 : 64;
        size_t *p = realloc(k->items, nc * sizeof(size_t));
        if (!p) return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
        k->items = p;
        k->cap = nc;
    }
    k->items[k->n++] = i;
    k->bytes += wb;
    return CHORUS_OK;
}

chorus_result chorus__fusion_flush(chorus_engine *e, eng_fusion *f, eng_exec *x)
{
    while (f->nopen) CHORUS_CHECK(flush_bucket(e, f, f->order[0], x));
    return CHORUS_OK;
}

void chorus__fusion_free(eng_fusion *f)
{
    for (int k = 0; k < ENG_NBUCKETS; k++) free(f->bk[k].items);
    memset(f, 0, sizeof(*f));
}
