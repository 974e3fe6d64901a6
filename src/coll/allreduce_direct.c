/*
 * allreduce_direct.c - reductions in the canonical order: every element's result is
 * ((x0 op x1) op x2) ... op x(p-1), folded in rank order, whatever its position in the buffer
 * and whatever the buffer's size. The shared-memory algorithms fold in the same order, so an
 * allreduce gives the same bits whichever algorithm runs it — which is what lets the training
 * runtime fuse tensors (or not) without changing a single result.
 *
 *   one-shot (small): every rank sends its whole buffer to every other rank and folds all of
 *     them locally: one round, (p-1)·S bytes out per rank.
 *   reduce-scatter + allgather (large): rank r receives slice r of every rank's buffer and
 *     folds it (a direct reduce-scatter: p-1 transfers at once, (p-1)/p·S bytes each way, the
 *     same volume as a ring), segment by segment so folding overlaps the transfers; then the
 *     ring allgather spreads the reduced slices. Out of place, one peer's slice is received
 *     straight into the output and folded there.
 *
 *   ready (both, from CHORUS_TCP_READY_MIN bytes per slice): a rank posts every receive of the
 *     call first, then tells each peer so in an empty message, and sends a peer its data only
 *     after that peer's word. Without it, a rank that starts late (it was still folding the
 *     last call, or its peer left the barrier first) finds the first megabytes of the call
 *     already in its sockets with no receive to take them: the transport buffers them in fresh
 *     memory (page faults) and copies them again, which cost 16 MiB calls over loopback about
 *     a quarter of their bytes twice. The word costs one one-way latency.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"

/* Folds n contributions, the one of rank q at src(q), into dst in rank order. */
static void fold(char *dst, char *const *src, int n, size_t m, chorus_dtype t, chorus_op op)
{
    chorus__reduce(dst, src[0], src[1], m, t, op);
    for (int q = 2; q < n; q++) chorus__reduce(dst, dst, src[q], m, t, op);
}

chorus_result chorus__direct_rs_ag(chorus_coll *x, const char *local, char *out, const size_t *off,
                                   const size_t *cnt, chorus_dtype t, chorus_op op, int tag_base,
                                   char *ag_buf)
{
    chorus_comm *c = x->c;
    int n = c->size, r = c->rank;
    size_t es = chorus_dtype_size(t), maxcnt = 0, mine = cnt[r] * es;
    for (int i = 0; i < n; i++)
        if (cnt[i] > maxcnt) maxcnt = cnt[i];
    size_t segc;
    int nseg;
    chorus__segments(c, maxcnt, es, &segc, &nseg);
    const char *own = local + off[r] * es;
    /* When the output overlaps this rank's own slice and the fold writes the output before it
     * reads that slice (rank 2 and up), the slice is copied first. */
    int copy_own = r >= 2 && out < own + mine && own < out + mine;
    /* Out of place, the slice of the first peer in fold order lands in out itself, which the
     * fold then overwrites element by element: its segments are in cache when folded, and the
     * fold writes no cold line of out that a scratch slot would have kept it from reading. */
    const char *lend = local + (off[n - 1] + cnt[n - 1]) * es;
    int q_out = n > 1 && !(out < lend && local < out + mine) ? (r == 0 ? 1 : 0) : -1;
    size_t slot = (mine + 63) & ~(size_t)63;
    char *tmp = chorus__comm_scratch(c, slot * (size_t)n + 64);
    size_t nmsg = (size_t)(n - 1) * (size_t)nseg;
    chorus_req *rq = malloc(sizeof(chorus_req) * 2 * nmsg);
    chorus_req **ps = malloc(sizeof(chorus_req *) * nmsg);
    char **src = malloc(sizeof(char *) * (size_t)n);
    if (!tmp || !rq || !ps || !src) {
        free(rq);
        free(ps);
        free(src);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM,
                            "out of memory for a reduce-scatter of %zu bytes", mine);
    }
    chorus_req *sq = rq + nmsg;
    /* the peers' words that they are ready come before their data: post those receives first */
    int ready = n > 1 && maxcnt * es >= c->cfg.tcp_ready_min; /* the same on every rank */
    chorus_req *rdy = ready ? malloc(sizeof(chorus_req) * 2 * (size_t)(n - 1)) : NULL;
    if (ready && !rdy) {
        free(rq);
        free(ps);
        free(src);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    for (int j = 1; ready && j < n; j++)
        chorus__coll_irecv(x, &rdy[j - 1], (r + n - j) % n, CHORUS_TAG_READY, NULL, 0);
    /* receives: slice r of every other rank, into its slot; message (p, k) is rq[idx(p) + k] */
    for (int j = 1; j < n; j++) {
        int p = (r + n - j) % n;
        for (int k = 0; k < nseg; k++)
            chorus__coll_irecv(x, &rq[(size_t)(j - 1) * (size_t)nseg + (size_t)k], p, tag_base + k,
                               (p == q_out ? out : tmp + (size_t)p * slot) +
                                   chorus__seg_lo(cnt[r], segc, k) * es,
                               chorus__seg_n(cnt[r], segc, k) * es);
    }
    /* the allgather's receives come after the reduce-scatter's: each peer sends in that order */
    chorus_ring_ag agst, *ag = NULL;
    if (ag_buf) {
        chorus_result pr = chorus__ring_ag_post(&agst, x, ag_buf, off, cnt, es, tag_base + nseg);
        if (pr != CHORUS_OK) {
            free(rq);
            free(ps);
            free(src);
            free(rdy);
            return pr;
        }
        ag = &agst;
    }
    chorus_result res = CHORUS_OK;
    /* every receive of this call is posted: say so to each peer that sends to this rank */
    for (int j = 1; ready && j < n; j++)
        chorus__coll_isend(x, &rdy[n - 2 + j], (r + j) % n, CHORUS_TAG_READY, NULL, 0);
    /* sends: slice p to rank p, starting with the next rank so no rank is everyone's first */
    for (int j = 1; j < n; j++) {
        int p = (r + j) % n;
        /* rdy[i] for i < n-1 came from rank (r + n - 1 - i) % n: rank p's is index n-1-j */
        if (ready && res == CHORUS_OK) res = chorus__coll_wait1(x, &rdy[n - 1 - j]);
        if (res != CHORUS_OK) break;
        for (int k = 0; k < nseg; k++)
            chorus__coll_isend(x, &sq[(size_t)(j - 1) * (size_t)nseg + (size_t)k], p, tag_base + k,
                               local + (off[p] + chorus__seg_lo(cnt[p], segc, k)) * es,
                               chorus__seg_n(cnt[p], segc, k) * es);
    }
    if (copy_own) memcpy(tmp + (size_t)r * slot, own, mine);
    for (int k = 0; k < nseg && res == CHORUS_OK; k++) {
        size_t lo = chorus__seg_lo(cnt[r], segc, k) * es;
        for (int p = 0; p < n && res == CHORUS_OK; p++) {
            if (p == r) {
                src[p] = copy_own ? tmp + (size_t)r * slot + lo : (char *)own + lo;
                continue;
            }
            int j = (r - p + n) % n;
            res = chorus__coll_wait1(x, &rq[(size_t)(j - 1) * (size_t)nseg + (size_t)k]);
            src[p] = (p == q_out ? out : tmp + (size_t)p * slot) + lo;
        }
        if (res == CHORUS_OK) {
            fold(out + lo, src, n, chorus__seg_n(cnt[r], segc, k), t, op);
            if (ag) {
                chorus__reduce_finish(out + lo, chorus__seg_n(cnt[r], segc, k), t, op, n);
                chorus__ring_ag_send_own(ag, k);
            }
        }
    }
    if (ag) res = chorus__ring_ag_finish(ag, res);
    if (res == CHORUS_OK) {
        for (size_t i = 0; i < nmsg; i++) ps[i] = &sq[i];
        res = chorus__coll_wait(x, ps, (int)nmsg);
    }
    if (res == CHORUS_OK && ready) { /* the words sent: their requests must not outlive rdy */
        for (int i = 0; i < n - 1; i++) ps[i] = &rdy[n - 1 + i];
        res = chorus__coll_wait(x, ps, n - 1);
    }
    free(rq);
    free(ps);
    free(src);
    free(rdy);
    return res;
}

chorus_result chorus__allreduce_direct_ring(chorus_comm *c, const chorus_coll_args *a)
{
    int n = c->size;
    size_t es = chorus_dtype_size(a->t);
    size_t *off = chorus__chunks(a->count, n);
    if (!off) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    size_t *cnt = off + n;
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_ALLREDUCE, a->t, a->op, a->count);
    char *out = (char *)a->recv + off[c->rank] * es;
    /* Allgather data for slice q lands in recv only after rank q folded it, which needed this
     * rank's reduce-scatter message for q to have left recv first: in place is safe. */
    chorus_result r = chorus__direct_rs_ag(&x, a->send, out, off, cnt, a->t, a->op, 0, a->recv);
    free(off);
    return r;
}

chorus_result chorus__allreduce_oneshot(chorus_comm *c, const chorus_coll_args *a)
{
    int n = c->size, r = c->rank;
    size_t count = a->count, bytes = a->bytes, slot = (bytes + 63) & ~(size_t)63;
    chorus_dtype t = a->t;
    chorus_op op = a->op;
    char *tmp = chorus__comm_scratch(c, slot * (size_t)n + 64);
    chorus_req *rq = malloc(sizeof(chorus_req) * 2 * (size_t)n);
    chorus_req **ps = malloc(sizeof(chorus_req *) * 2 * (size_t)n);
    char **src = malloc(sizeof(char *) * (size_t)n);
    if (!tmp || !rq || !ps || !src) {
        free(rq);
        free(ps);
        free(src);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_ALLREDUCE, t, op, count);
    memcpy(tmp + (size_t)r * slot, a->send, bytes); /* recv may be send: keep our input aside */
    int k = 0;
    for (int j = 1; j < n; j++) {
        int p = (r + n - j) % n;
        chorus__coll_irecv(&x, &rq[k], p, 0, tmp + (size_t)p * slot, bytes);
        ps[k] = &rq[k];
        k++;
    }
    for (int j = 1; j < n; j++) {
        chorus__coll_isend(&x, &rq[k], (r + j) % n, 0, tmp + (size_t)r * slot, bytes);
        ps[k] = &rq[k];
        k++;
    }
    chorus_result res = chorus__coll_wait(&x, ps, k);
    if (res == CHORUS_OK) {
        for (int p = 0; p < n; p++) src[p] = tmp + (size_t)p * slot;
        fold(a->recv, src, n, count, t, op);
        chorus__reduce_finish(a->recv, count, t, op, n);
    }
    free(rq);
    free(ps);
    free(src);
    return res;
}

/* Reduce-scatter with the same rank-order fold: slice i is block i of every input. */
chorus_result chorus__reduce_scatter_direct(chorus_comm *c, const chorus_coll_args *a)
{
    int n = c->size;
    size_t recvcount = a->count, all = a->bytes * (size_t)n;
    /* In place, the input is copied aside: the output (slice 0's place) would be overwritten
     * while slice 0 is still being sent. */
    size_t *off = chorus__chunks(recvcount * (size_t)n, n);
    char *copy = a->send == a->recv ? malloc(all) : NULL;
    if (!off || (a->send == a->recv && !copy)) {
        free(off);
        free(copy);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    if (copy) memcpy(copy, a->send, all);
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_REDUCE_SCATTER, a->t, a->op, recvcount);
    chorus_result r = chorus__direct_rs_ag(&x, copy ? copy : a->send, a->recv, off, off + n, a->t,
                                           a->op, 0, NULL);
    if (r == CHORUS_OK) chorus__reduce_finish(a->recv, recvcount, a->t, a->op, n);
    free(off);
    free(copy);
    return r;
}
