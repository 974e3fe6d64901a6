/*
 * execute.c - running the ops the ranks agreed on in a cycle, in the agreed order, and ending
 * their handles.
 *
 * Pass 0 runs every op in order; allreduces run their first round (a plain allreduce has only
 * that one) through the fusion buckets (fusion.c), which are reduced at the end of the pass.
 * Pass p runs round p of every compression plan that has one, once all of round p - 1 has
 * finished (rounds.c). Broadcasts, allgathers (with per-rank row counts), reduce-scatters,
 * alltoalls and divergence checks are run here, alone.
 *
 * A rank that joined has no request: it contributes the identity of the op (zeros for sum)
 * and no allgather rows, and throws its results away. Averages divide by the ranks that did
 * not join. Every choice depends only on agreed metadata, so all ranks make the same calls.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "engine/engine_int.h"
#include "reduce/reduce.h"

/* The caller's input, prescaled when asked (into scratch), or NULL when out of memory. */
static const void *scaled_input(chorus_engine *e, const eng_req *r)
{
    if (r->m.prescale == 1.0) return r->send;
    size_t b = r->m.count * chorus_dtype_size((chorus_dtype)r->m.dtype);
    void *tmp = chorus__eng_grow(&e->scratch, &e->scratch_cap, b);
    if (tmp)
        chorus__reduce_scale(tmp, r->send, r->m.count, (chorus_dtype)r->m.dtype, r->m.prescale);
    return tmp;
}

/* ---- the other collectives ---------------------------------------------------------------- */

static chorus_result run_broadcast(chorus_engine *e, eng_exec *x)
{
    size_t b = x->m.count * chorus_dtype_size((chorus_dtype)x->m.dtype);
    void *buf = x->req ? x->req->recv : chorus__eng_grow(&e->scratch2, &e->scratch2_cap, b);
    if (!buf) return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
    double t0 = chorus__now();
    chorus_result res =
        chorus_broadcast(e->comm, buf, x->m.count, (chorus_dtype)x->m.dtype, x->m.root);
    if (res != CHORUS_OK || !x->req) return res;
    chorus__eng_tl_pre(e, x, t0);
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
        return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
    }
    rows[me] = r ? (int64_t)r->rows : 0;
    chorus_result res = chorus_allgather(e->comm, &rows[me], rows, 1, CHORUS_INT64);
    size_t total = 0, maxr = 0;
    int equal = 1;
    for (int p = 0; p < n && res == CHORUS_OK; p++) {
        if (rows[p] < 0 || (uint64_t)rows[p] > ((uint64_t)1 << 48)) {
            res = chorus__eng_err(e, CHORUS_ERR_PROTOCOL, "allgather '%s': rank %d gave %lld rows",
                                  x->name, p, (long long)rows[p]);
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
        if (!out) res = chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
    }
    double t1 = chorus__now();
    if (res == CHORUS_OK && maxr * rc > 0) {
        if (equal) {
            /* equal and non-zero: every rank has a request */
            res = chorus_allgather(e->comm, r->send, out, maxr * rc, t);
        } else {
            char *tmp = chorus__eng_grow(&e->scratch2, &e->scratch2_cap, (size_t)n * maxr * rb);
            if (!tmp) {
                res = chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
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
    chorus__eng_tl_pre(e, x, t0);
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
    chorus_op op = chorus__eng_red_op(x->m.op);
    size_t N = x->m.count, es = chorus_dtype_size(t), maxc = chorus__chunk_cnt(N, n, 0);
    size_t mine = chorus__chunk_cnt(N, n, me);
    double t0 = chorus__now();
    chorus_result res;
    if (N % (size_t)n == 0 && r && x->m.prescale == 1.0) {
        res = chorus_reduce_scatter(e->comm, r->send, r->recv, maxc, t, op);
    } else {
        char *in = chorus__eng_grow(&e->scratch2, &e->scratch2_cap, (size_t)n * maxc * es);
        char *out = chorus__eng_grow(&e->fbuf, &e->fbuf_cap, maxc * es);
        if (!in || !out) return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
        const char *src = r ? scaled_input(e, r) : NULL;
        if (r && !src) return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
        for (int p = 0; p < n; p++) {
            char *dst = in + (size_t)p * maxc * es;
            size_t c = chorus__chunk_cnt(N, n, p), o = chorus__chunk_off(N, n, p);
            if (src)
                memcpy(dst, src + o * es, c * es);
            else
                c = 0;
            chorus__dtype_fill_identity(dst + c * es, maxc - c, t, op);
        }
        res = chorus_reduce_scatter(e->comm, in, out, maxc, t, op);
        if (res == CHORUS_OK && r && mine) memcpy(r->recv, out, mine * es);
    }
    if (res != CHORUS_OK || !r) return res;
    if (mine) chorus__eng_post(e, &x->m, r->recv, mine);
    chorus__eng_tl_pre(e, x, t0);
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
        if (!tmp) return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
        memset(tmp, 0, b);
        res = chorus_alltoall(e->comm, tmp, tmp, per, t);
    }
    if (res != CHORUS_OK || !r) return res;
    chorus__eng_tl_pre(e, x, t0);
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
            chorus__eng_tl_pre(e, x, t0);
            chorus__tl_span(&e->tl, x->name, "DIVERGENCE_CHECK", t0, chorus__now(), NULL);
            chorus__eng_complete(e, r, CHORUS_OK, NULL);
        }
        return CHORUS_OK;
    }
    uint64_t *all = calloc((size_t)n, 8), mine = r ? r->hash : 0;
    if (!all) return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
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
    chorus__eng_tl_pre(e, x, t0);
    chorus__tl_span(&e->tl, x->name, "DIVERGENCE_CHECK", t0, chorus__now(), NULL);
    chorus__eng_complete(e, r, CHORUS_ERR_MISMATCH, msg);
    return CHORUS_OK;
}

/* ---- the agreed list ---------------------------------------------------------------------- */

/* One allreduce item in pass p: its round p (a plain allreduce has only round 0). */
static chorus_result run_round(chorus_engine *e, eng_fusion *f, eng_exec *x, size_t i)
{
    eng_exec *xi = &x[i];
    eng_round w = chorus__round_of(e, xi);
    if (w.kind == ENG_ROUND_GATHER) return chorus__round_gather(e, xi);
    if (w.wcount == 0) { /* nothing to exchange */
        if (chorus__round_finish(e, xi, NULL, 0, NULL)) chorus__round_end(e, xi);
        return CHORUS_OK;
    }
    return chorus__fusion_add(e, f, x, i);
}

/* Ops that move data between particular ranks have no meaning while a rank has joined (it has
 * no rows to give, no part to receive, no root to be): as Horovod, they end with an error on
 * every rank that issued them. Every rank sees the same joined set, so all skip them alike.
 * Returns 1 when x was ended so. */
static int refuse_while_joined(chorus_engine *e, eng_exec *x)
{
    int k = x->m.kind;
    if (k != EK_BROADCAST && k != EK_ALLGATHER && k != EK_REDUCESCATTER && k != EK_ALLTOALL)
        return 0;
    if (chorus__eng_active(e) == e->size) return 0;
    if (x->req) {
        char who[160], msg[400];
        chorus__fmt_ranks(e->joined, e->size, 1, who, sizeof(who));
        snprintf(msg, sizeof(msg),
                 "%s '%s' is not supported while %s %s joined (join covers allreduce only; "
                 "call it before join, or after every rank has joined)",
                 chorus__kind_name(k), x->name, who,
                 e->size - chorus__eng_active(e) > 1 ? "have" : "has");
        chorus__eng_complete(e, x->req, CHORUS_ERR_INVALID_ARG, msg);
    }
    return 1;
}

chorus_result chorus__eng_execute(chorus_engine *e, eng_exec *x, size_t n)
{
    eng_fusion f;
    memset(&f, 0, sizeof(f));
    chorus_result res = CHORUS_OK;
    int passes = 1;
    /* pass 0: every op in the agreed order, allreduces with their first round */
    for (size_t i = 0; i < n && res == CHORUS_OK; i++) {
        eng_exec *xi = &x[i];
        if (refuse_while_joined(e, xi)) continue;
        switch (xi->m.kind) {
        case EK_ALLREDUCE:
            xi->round = 0;
            if (xi->m.nrounds > passes) passes = xi->m.nrounds;
            res = run_round(e, &f, x, i);
            break;
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
    if (res == CHORUS_OK) res = chorus__fusion_flush(e, &f, x);
    /* later passes: the next round of every plan that has one, after the previous round of
     * all of them has finished (their reduce rounds fuse like first rounds do) */
    for (int p = 1; p < passes && res == CHORUS_OK; p++) {
        for (size_t i = 0; i < n && res == CHORUS_OK; i++) {
            if (x[i].m.kind != EK_ALLREDUCE || x[i].m.nrounds <= p) continue;
            x[i].round = p;
            res = run_round(e, &f, x, i);
        }
        if (res == CHORUS_OK) res = chorus__fusion_flush(e, &f, x);
    }
    chorus__fusion_free(&f);
    return res;
}
