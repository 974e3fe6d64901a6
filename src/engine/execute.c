/*
 * execute.c - running the ops the ranks agreed on in a cycle, in the agreed order, and ending
 * their handles.
 *
 * Allreduces are grouped by (wire dtype, reduction) into fusion buckets of at most
 * fusion_threshold bytes: each tensor is copied in (scaled or compressed on the way), the
 * bucket is reduced with one chorus_allreduce, and copied out (decompressed, averaged,
 * scaled). The core reduces elementwise, so where a tensor sits in the bucket does not change
 * which values are combined. Tensors of DIRECT_BYTES or more, or any tensor when fusion is
 * off, are reduced alone, in place on the caller's buffers when no scaling or compression
 * needs a copy. Every choice here depends only on agreed metadata, never on whether this rank
 * has joined, so all ranks make the same collective calls.
 *
 * A rank that joined has no request: it contributes the identity of the op (zeros for sum)
 * and no allgather rows, and throws its results away. Averages divide by the ranks that did
 * not join.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "engine/engine_int.h"
#include "reduce/reduce.h"

#define DIRECT_BYTES ((size_t)1 << 20)
#define NBUCKETS     8

typedef struct bucket {
    int open;
    uint8_t wdtype, op;
    size_t bytes, n, cap;
    size_t *items;
} bucket;

static int n_active(const chorus_engine *e)
{
    int a = e->size;
    for (int r = 0; r < e->size; r++) a -= e->joined[r];
    return a > 0 ? a : 1;
}

static chorus_op red_op(int op)
{
    return op == CHORUS_AVG ? CHORUS_SUM : (chorus_op)op;
}

/* The op given to the core for an allreduce: an average over every rank (nobody joined, no
 * compression) is left to the core, which divides in the pass that writes the result; else
 * the sum, divided by the contributing ranks after decompression (finish). */
static chorus_op wire_op(const chorus_engine *e, const eng_meta *m)
{
    if (m->op == CHORUS_AVG && m->wdtype == m->dtype && !m->comp[0] && n_active(e) == e->size)
        return CHORUS_AVG;
    return red_op(m->op);
}

static void timeline_pre(chorus_engine *e, const eng_exec *x, double start)
{
    if (!e->tl.f || !x->req) return;
    chorus__tl_span(&e->tl, x->name, "NEGOTIATE", x->req->t_enqueue, x->req->t_agreed, NULL);
    chorus__tl_span(&e->tl, x->name, "QUEUE", x->req->t_agreed, start, NULL);
}

/* After the reduction: average over the ranks that contributed (unless the core did), then
 * postscale. */
static void finish(chorus_engine *e, const eng_meta *m, void *buf, size_t count)
{
    if (m->op == CHORUS_AVG && !(m->kind == EK_ALLREDUCE && wire_op(e, m) == CHORUS_AVG))
        chorus__reduce_finish(buf, count, (chorus_dtype)m->dtype, CHORUS_AVG, n_active(e));
    if (m->postscale != 1.0) chorus__scale(buf, buf, count, (chorus_dtype)m->dtype, m->postscale);
}

/* The caller's input, prescaled when asked (into scratch), or NULL when out of memory. */
static const void *scaled_input(chorus_engine *e, const eng_req *r)
{
    if (r->m.prescale == 1.0) return r->send;
    size_t b = r->m.count * chorus_dtype_size((chorus_dtype)r->m.dtype);
    void *tmp = chorus__eng_grow(&e->scratch, &e->scratch_cap, b);
    if (tmp) chorus__scale(tmp, r->send, r->m.count, (chorus_dtype)r->m.dtype, r->m.prescale);
    return tmp;
}

/* ---- allreduce ---------------------------------------------------------------------------- */

/* Copies item x into dst (wire dtype); on failure fills the identity and returns the error. */
static chorus_result copy_in(chorus_engine *e, eng_exec *x, void *dst, char *err, size_t errlen)
{
    const eng_meta *m = &x->m;
    eng_req *r = x->req;
    if (!r) {
        chorus__fill_identity(dst, m->wcount, (chorus_dtype)m->wdtype, red_op(m->op));
        return CHORUS_OK;
    }
    chorus_result res = CHORUS_OK;
    if (r->comp) {
        const void *src = scaled_input(e, r);
        res = src ? r->comp->compress(r->comp->state, r->name, src, dst, m->count,
                                      (chorus_dtype)m->dtype)
                  : CHORUS_ERR_NOMEM;
        if (res != CHORUS_OK)
            snprintf(err, errlen, "compressor %s failed on '%s' (%s)", m->comp, r->name,
                     chorus_strerror(res));
    } else if (m->prescale != 1.0) {
        chorus__scale(dst, r->send, m->count, (chorus_dtype)m->dtype, m->prescale);
    } else {
        memcpy(dst, r->send, m->count * chorus_dtype_size((chorus_dtype)m->dtype));
    }
    if (res != CHORUS_OK)
        chorus__fill_identity(dst, m->wcount, (chorus_dtype)m->wdtype, red_op(m->op));
    return res;
}

static chorus_result copy_out(chorus_engine *e, eng_exec *x, const void *src, char *err,
                              size_t errlen)
{
    eng_req *r = x->req;
    const eng_meta *m = &x->m;
    chorus_result res = CHORUS_OK;
    if (r->comp) {
        res = r->comp->decompress(r->comp->state, r->name, src, r->recv, m->count,
                                  (chorus_dtype)m->dtype, 0);
        if (res != CHORUS_OK)
            snprintf(err, errlen, "compressor %s failed to decompress '%s' (%s)", m->comp, r->name,
                     chorus_strerror(res));
    } else if (src != r->recv) {
        memcpy(r->recv, src, m->count * chorus_dtype_size((chorus_dtype)m->dtype));
    }
    if (res == CHORUS_OK) finish(e, m, r->recv, m->count);
    return res;
}

/* Reduces items idx[0..n) together in the fusion buffer (or alone, in place when possible). */
static chorus_result run_allreduce(chorus_engine *e, eng_exec *xs, const size_t *idx, size_t n)
{
    const eng_meta *m0 = &xs[idx[0]].m;
    chorus_dtype wt = (chorus_dtype)m0->wdtype;
    chorus_op op = wire_op(e, m0);
    size_t wes = chorus_dtype_size(wt), total = 0;
    for (size_t i = 0; i < n; i++) total += xs[idx[i]].m.wcount;
    double t0 = chorus__now(), t1, t2, t3;
    chorus_result res;
    eng_exec *one = &xs[idx[0]];
    if (n == 1 && one->req && !one->req->comp && one->m.prescale == 1.0) {
        /* alone, in place: no copies */
        t1 = t0;
        res = chorus_allreduce(e->comm, one->req->send, one->req->recv, total, wt, op);
        t2 = chorus__now();
        if (res != CHORUS_OK) return res;
        finish(e, &one->m, one->req->recv, one->m.count);
        t3 = chorus__now();
        timeline_pre(e, one, t0);
        chorus__tl_span(&e->tl, one->name, "ALLREDUCE", t1, t2, NULL);
        if (t3 > t2) chorus__tl_span(&e->tl, one->name, "SCALE", t2, t3, NULL);
        pthread_mutex_lock(&e->mu);
        e->st.fused_batches++;
        e->st.bytes_reduced += total * wes;
        pthread_mutex_unlock(&e->mu);
        chorus__eng_complete(e, one->req, CHORUS_OK, NULL);
        return CHORUS_OK;
    }
    char *buf = chorus__eng_grow(&e->fbuf, &e->fbuf_cap, total * wes);
    if (!buf)
        return chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM,
                            "out of memory for a fusion buffer of %zu bytes", total * wes);
    char *errs = calloc(n, 256);
    if (!errs) return chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
    chorus_result *rs = calloc(n, sizeof(*rs));
    if (!rs) {
        free(errs);
        return chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        eng_exec *x = &xs[idx[i]];
        rs[i] = copy_in(e, x, buf + off * wes, errs + i * 256, 256);
        off += x->m.wcount;
    }
    t1 = chorus__now();
    res = chorus_allreduce(e->comm, buf, buf, total, wt, op);
    t2 = chorus__now();
    if (res != CHORUS_OK) {
        free(errs);
        free(rs);
        return res;
    }
    off = 0;
    for (size_t i = 0; i < n; i++) {
        eng_exec *x = &xs[idx[i]];
        if (x->req && rs[i] == CHORUS_OK)
            rs[i] = copy_out(e, x, buf + off * wes, errs + i * 256, 256);
        off += x->m.wcount;
    }
    t3 = chorus__now();
    pthread_mutex_lock(&e->mu);
    e->st.fused_batches++;
    e->st.bytes_reduced += total * wes;
    pthread_mutex_unlock(&e->mu);
    char args[96];
    snprintf(args, sizeof(args), "{\"tensors\":%zu,\"bytes\":%zu}", n, total * wes);
    for (size_t i = 0; i < n; i++) {
        eng_exec *x = &xs[idx[i]];
        if (!x->req) continue;
        timeline_pre(e, x, t0);
        chorus__tl_span(&e->tl, x->name, "MEMCPY_IN_FUSION_BUFFER", t0, t1, NULL);
        chorus__tl_span(&e->tl, x->name, "ALLREDUCE", t1, t2, args);
        chorus__tl_span(&e->tl, x->name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3, NULL);
        chorus__eng_complete(e, x->req, rs[i], errs + i * 256);
    }
    free(errs);
    free(rs);
    return CHORUS_OK;
}

/* A compressor that gathers: every rank's compressed bytes, decompressed and summed. */
static chorus_result run_gather(chorus_engine *e, eng_exec *x)
{
    const eng_meta *m = &x->m;
    eng_req *r = x->req;
    int n = e->size;
    chorus_dtype wt = (chorus_dtype)m->wdtype;
    size_t wb = m->wcount * chorus_dtype_size(wt);
    double t0 = chorus__now();
    char *all = chorus__eng_grow(&e->scratch2, &e->scratch2_cap, (size_t)n * wb);
    if (!all) return chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
    char *mine = all + (size_t)e->rank * wb;
    chorus_result rr = CHORUS_OK;
    char err[256] = "";
    if (r) {
        const void *src = scaled_input(e, r);
        rr = src ? r->comp->compress(r->comp->state, r->name, src, mine, m->count,
                                     (chorus_dtype)m->dtype)
                 : CHORUS_ERR_NOMEM;
        if (rr != CHORUS_OK)
            snprintf(err, sizeof(err), "compressor %s failed on '%s'", m->comp, r->name);
    }
    if (!r || rr != CHORUS_OK) memset(mine, 0, wb);
    double t1 = chorus__now();
    chorus_result res = chorus_allgather(e->comm, mine, all, m->wcount, wt);
    double t2 = chorus__now();
    if (res != CHORUS_OK) return res;
    if (r && rr == CHORUS_OK) {
        int first = 1;
        for (int p = 0; p < n && rr == CHORUS_OK; p++) {
            if (e->joined[p]) continue;
            rr = r->comp->decompress(r->comp->state, r->name, all + (size_t)p * wb, r->recv,
                                     m->count, (chorus_dtype)m->dtype, first ? 0 : 1);
            first = 0;
        }
        if (rr != CHORUS_OK)
            snprintf(err, sizeof(err), "compressor %s failed to decompress '%s'", m->comp, r->name);
        else
            finish(e, m, r->recv, m->count);
    }
    double t3 = chorus__now();
    if (r) {
        timeline_pre(e, x, t0);
        chorus__tl_span(&e->tl, x->name, "COMPRESS", t0, t1, NULL);
        chorus__tl_span(&e->tl, x->name, "ALLGATHER", t1, t2, NULL);
        chorus__tl_span(&e->tl, x->name, "DECOMPRESS", t2, t3, NULL);
        chorus__eng_complete(e, r, rr, err);
    }
    return CHORUS_OK;
}

/* ---- the other collectives ---------------------------------------------------------------- */

static chorus_result run_broadcast(chorus_engine *e, eng_exec *x)
{
    size_t b = x->m.count * chorus_dtype_size((chorus_dtype)x->m.dtype);
    void *buf = x->req ? x->req->recv : chorus__eng_grow(&e->scratch2, &e->scratch2_cap, b);
    if (!buf) return chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
    double t0 = chorus__now();
    chorus_result res =
        chorus_broadcast(e->comm, buf, x->m.count, (chorus_dtype)x->m.dtype, x->m.root);
    if (res != CHORUS_OK || !x->req) return res;
    timeline_pre(e, x, t0);
    chorus__tl_span(&e->tl, x->name, "BROADCAST", t0, chorus__now(), NULL);
    chorus__eng_complete(e, x->req, CHORUS_OK, NULL);
    return CHORUS_OK;
}

/* Allgather with per-rank row counts: the counts are allgathered first; equal counts go
 * straight into the result, unequal ones are padded to the largest and compacted after. */
static chorus_result run_allgather(chorus_engine *e, eng_exec *x)
{
    int n = e->size, me = e->rank;
    eng_req *r = x->req;
    chorus_dtype t = (chorus_dtype)x->m.dtype;
    size_t rc = x->m.count, rb = rc * chorus_dtype_size(t);
    double t0 = chorus__now();
    int64_t *rows = calloc((size_t)n, sizeof(int64_t));
    size_t *rr = calloc((size_t)n, sizeof(size_t));
    if (!rows || !rr) {
        free(rows);
        free(rr);
        return chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    rows[me] = r ? (int64_t)r->rows : 0;
    chorus_result res = chorus_allgather(e->comm, &rows[me], rows, 1, CHORUS_INT64);
    size_t total = 0, maxr = 0;
    int equal = 1;
    for (int p = 0; p < n && res == CHORUS_OK; p++) {
        if (rows[p] < 0 || (uint64_t)rows[p] > ((uint64_t)1 << 48)) {
            res = chorus__fail(&e->comm->err, CHORUS_ERR_PROTOCOL,
                               "allgather '%s': rank %d gave %lld rows", x->name, p,
                               (long long)rows[p]);
            break;
        }
        rr[p] = (size_t)rows[p];
        total += rr[p];
        if (rr[p] > maxr) maxr = rr[p];
        if (rr[p] != rr[0]) equal = 0;
    }
    free(rows);
    char *out = NULL;
    if (res == CHORUS_OK && r) {
        out = malloc(total * rb > 0 ? total * rb : 1);
        if (!out) res = chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    double t1 = chorus__now();
    if (res == CHORUS_OK && maxr * rc > 0) {
        if (equal) {
            /* equal and non-zero: every rank has a request */
            res = chorus_allgather(e->comm, r->send, out, maxr * rc, t);
        } else {
            char *tmp = chorus__eng_grow(&e->scratch2, &e->scratch2_cap, (size_t)n * maxr * rb);
            if (!tmp) {
                res = chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
            } else {
                char *slot = tmp + (size_t)me * maxr * rb;
                if (rr[me]) memcpy(slot, r->send, rr[me] * rb);
                res = chorus_allgather(e->comm, slot, tmp, maxr * rc, t);
                for (int p = 0, o = 0; res == CHORUS_OK && out && p < n; p++) {
                    memcpy(out + (size_t)o * rb, tmp + (size_t)p * maxr * rb, rr[p] * rb);
                    o += (int)rr[p];
                }
            }
        }
    }
    if (res != CHORUS_OK || !r) {
        free(out);
        free(rr);
        return res;
    }
    double t2 = chorus__now();
    chorus_engine_handle *h = r->h;
    h->out = out;
    h->out_rows = total;
    h->rank_rows = rr;
    h->nranks = n;
    timeline_pre(e, x, t0);
    chorus__tl_span(&e->tl, x->name, "ALLGATHER_SIZES", t0, t1, NULL);
    chorus__tl_span(&e->tl, x->name, "ALLGATHER", t1, t2, NULL);
    chorus__eng_complete(e, r, CHORUS_OK, NULL);
    return CHORUS_OK;
}

static chorus_result run_reduce_scatter(chorus_engine *e, eng_exec *x)
{
    int n = e->size, me = e->rank;
    eng_req *r = x->req;
    chorus_dtype t = (chorus_dtype)x->m.dtype;
    chorus_op op = red_op(x->m.op);
    size_t N = x->m.count, es = chorus_dtype_size(t), maxc = chorus__chunk_cnt(N, n, 0);
    size_t mine = chorus__chunk_cnt(N, n, me);
    double t0 = chorus__now();
    chorus_result res;
    if (N % (size_t)n == 0 && r && x->m.prescale == 1.0) {
        res = chorus_reduce_scatter(e->comm, r->send, r->recv, maxc, t, op);
    } else {
        char *in = chorus__eng_grow(&e->scratch2, &e->scratch2_cap, (size_t)n * maxc * es);
        char *out = chorus__eng_grow(&e->fbuf, &e->fbuf_cap, maxc * es);
        if (!in || !out) return chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
        const char *src = r ? scaled_input(e, r) : NULL;
        if (r && !src) return chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
        for (int p = 0; p < n; p++) {
            char *dst = in + (size_t)p * maxc * es;
            size_t c = chorus__chunk_cnt(N, n, p), o = chorus__chunk_off(N, n, p);
            if (src)
                memcpy(dst, src + o * es, c * es);
            else
                c = 0;
            chorus__fill_identity(dst + c * es, maxc - c, t, op);
        }
        res = chorus_reduce_scatter(e->comm, in, out, maxc, t, op);
        if (res == CHORUS_OK && r && mine) memcpy(r->recv, out, mine * es);
    }
    if (res != CHORUS_OK || !r) return res;
    if (mine) finish(e, &x->m, r->recv, mine);
    timeline_pre(e, x, t0);
    chorus__tl_span(&e->tl, x->name, "REDUCE_SCATTER", t0, chorus__now(), NULL);
    chorus__eng_complete(e, r, CHORUS_OK, NULL);
    return CHORUS_OK;
}

static chorus_result run_alltoall(chorus_engine *e, eng_exec *x)
{
    eng_req *r = x->req;
    chorus_dtype t = (chorus_dtype)x->m.dtype;
    size_t per = x->m.count / (size_t)e->size, b = x->m.count * chorus_dtype_size(t);
    double t0 = chorus__now();
    chorus_result res;
    if (r) {
        res = chorus_alltoall(e->comm, r->send, r->recv, per, t);
    } else {
        char *tmp = chorus__eng_grow(&e->scratch2, &e->scratch2_cap, b);
        if (!tmp) return chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
        memset(tmp, 0, b);
        res = chorus_alltoall(e->comm, tmp, tmp, per, t);
    }
    if (res != CHORUS_OK || !r) return res;
    timeline_pre(e, x, t0);
    chorus__tl_span(&e->tl, x->name, "ALLTOALL", t0, chorus__now(), NULL);
    chorus__eng_complete(e, r, CHORUS_OK, NULL);
    return CHORUS_OK;
}

/* Weight divergence: one MIN allreduce of (hash, ~hash) gives the min and the max hash; only
 * when they differ, an allgather of the hashes names the ranks. */
static chorus_result run_divergence(chorus_engine *e, eng_exec *x)
{
    int n = e->size;
    eng_req *r = x->req;
    int64_t v[2] = {INT64_MAX, INT64_MAX};
    if (r) {
        v[0] = (int64_t)r->hash;
        v[1] = ~(int64_t)r->hash;
    }
    double t0 = chorus__now();
    chorus_result res = chorus_allreduce(e->comm, v, v, 2, CHORUS_INT64, CHORUS_MIN);
    if (res != CHORUS_OK) return res;
    if (v[0] == ~v[1]) {
        if (r) {
            timeline_pre(e, x, t0);
            chorus__tl_span(&e->tl, x->name, "DIVERGENCE_CHECK", t0, chorus__now(), NULL);
            chorus__eng_complete(e, r, CHORUS_OK, NULL);
        }
        return CHORUS_OK;
    }
    uint64_t *all = calloc((size_t)n, 8), mine = r ? r->hash : 0;
    if (!all) return chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
    res = chorus_allgather(e->comm, &mine, all, 1, CHORUS_INT64);
    if (res != CHORUS_OK || !r) {
        free(all);
        return res;
    }
    if (e->first_div_step < 0) e->first_div_step = r->step;
    /* group the ranks by hash, in rank order */
    char msg[1024];
    size_t o = (size_t)snprintf(msg, sizeof(msg),
                                "weights '%s' differ across ranks at step %lld (first divergent "
                                "step seen: %lld):",
                                x->name + strlen("chorus.divergence."), r->step, e->first_div_step);
    uint8_t *done = calloc((size_t)n, 1), *grp = calloc((size_t)n, 1);
    for (int p = 0; done && grp && p < n && o + 80 < sizeof(msg); p++) {
        if (done[p] || e->joined[p]) continue;
        memset(grp, 0, (size_t)n);
        for (int q = p; q < n; q++)
            if (!e->joined[q] && all[q] == all[p]) grp[q] = done[q] = 1;
        char ranks[200];
        size_t k = 0;
        ranks[0] = 0;
        for (int q = 0; q < n && k + 12 < sizeof(ranks); q++)
            if (grp[q]) k += (size_t)snprintf(ranks + k, sizeof(ranks) - k, k ? ",%d" : "%d", q);
        o += (size_t)snprintf(msg + o, sizeof(msg) - o, " rank%s %s hash %016" PRIx64 ";",
                              strchr(ranks, ',') ? "s" : "", ranks, all[p]);
    }
    free(done);
    free(grp);
    free(all);
    timeline_pre(e, x, t0);
    chorus__tl_span(&e->tl, x->name, "DIVERGENCE_CHECK", t0, chorus__now(), NULL);
    chorus__eng_complete(e, r, CHORUS_ERR_MISMATCH, msg);
    return CHORUS_OK;
}

/* ---- the agreed list ---------------------------------------------------------------------- */

static chorus_result flush_bucket(chorus_engine *e, eng_exec *x, bucket *b)
{
    chorus_result r = b->n ? run_allreduce(e, x, b->items, b->n) : CHORUS_OK;
    b->n = 0;
    b->bytes = 0;
    b->open = 0;
    return r;
}

chorus_result chorus__eng_execute(chorus_engine *e, eng_exec *x, size_t n)
{
    bucket bk[NBUCKETS];
    memset(bk, 0, sizeof(bk));
    size_t thr = e->o.fusion_threshold;
    chorus_result res = CHORUS_OK;
    int order[NBUCKETS], nopen = 0; /* buckets in the order they were opened */
    for (size_t i = 0; i < n && res == CHORUS_OK; i++) {
        eng_exec *xi = &x[i];
        const eng_meta *m = &xi->m;
        switch (m->kind) {
        case EK_ALLREDUCE: {
            if (m->gather) {
                res = run_gather(e, xi);
                break;
            }
            size_t wb = m->wcount * chorus_dtype_size((chorus_dtype)m->wdtype);
            if (m->wcount == 0) {
                if (xi->req) chorus__eng_complete(e, xi->req, CHORUS_OK, NULL);
                break;
            }
            if (thr == 0 || wb >= DIRECT_BYTES || wb > thr) {
                res = run_allreduce(e, x, &i, 1);
                break;
            }
            int b = -1;
            for (int k = 0; k < NBUCKETS; k++)
                if (bk[k].open && bk[k].wdtype == m->wdtype && bk[k].op == wire_op(e, m)) b = k;
            if (b >= 0 && bk[b].bytes + wb > thr) {
                res = flush_bucket(e, x, &bk[b]);
                for (int k = 0; k < nopen; k++)
                    if (order[k] == b) {
                        memmove(order + k, order + k + 1, (size_t)(nopen - k - 1) * sizeof(int));
                        nopen--;
                        break;
                    }
                if (res != CHORUS_OK) break;
            }
            if (b < 0 || !bk[b].open) {
                b = -1;
                for (int k = 0; k < NBUCKETS && b < 0; k++)
                    if (!bk[k].open) b = k;
                if (b < 0) { /* every bucket in use: flush the oldest */
                    b = order[0];
                    res = flush_bucket(e, x, &bk[b]);
                    memmove(order, order + 1, (size_t)(nopen - 1) * sizeof(int));
                    nopen--;
                    if (res != CHORUS_OK) break;
                }
                bk[b].open = 1;
                bk[b].wdtype = m->wdtype;
                bk[b].op = (uint8_t)wire_op(e, m);
                order[nopen++] = b;
            }
            if (bk[b].n == bk[b].cap) {
                size_t nc = bk[b].cap ? bk[b].cap * 2 : 64;
                size_t *p = realloc(bk[b].items, nc * sizeof(size_t));
                if (!p) {
                    res = chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
                    break;
                }
                bk[b].items = p;
                bk[b].cap = nc;
            }
            bk[b].items[bk[b].n++] = i;
            bk[b].bytes += wb;
            break;
        }
        case EK_BROADCAST: res = run_broadcast(e, xi); break;
        case EK_ALLGATHER: res = run_allgather(e, xi); break;
        case EK_REDUCESCATTER: res = run_reduce_scatter(e, xi); break;
        case EK_ALLTOALL: res = run_alltoall(e, xi); break;
        case EK_DIVERGENCE: res = run_divergence(e, xi); break;
        case EK_BARRIER:
        default:
            if (xi->req) chorus__eng_complete(e, xi->req, CHORUS_OK, NULL);
            break;
        }
    }
    for (int k = 0; k < nopen && res == CHORUS_OK; k++) res = flush_bucket(e, x, &bk[order[k]]);
    for (int k = 0; k < NBUCKETS; k++) free(bk[k].items);
    return res;
}
