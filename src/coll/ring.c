/*
 * ring.c - the ring primitives: reduce-scatter and allgather, pipelined in segments.
 * Rank r sends to r+1 and receives from r-1. Receives are posted ahead (into scratch for the
 * reduce-scatter, straight into the user's buffer for the allgather), and each segment is
 * forwarded as soon as it has arrived (and been reduced), so the network, the reduction and
 * the next hop overlap. Every chunk is reduced along one fixed path and then copied, so all
 * ranks hold the same bits.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"

chorus_result chorus__ring_reduce_scatter(chorus_coll *x, const char *local, char *work, char *out,
                                          const size_t *off, const size_t *cnt, chorus_dtype t,
                                          chorus_op op, int tag_base)
{
    chorus_comm *c = x->c;
    int n = c->size, r = c->rank;
    int right = chorus__ring_next(r, n), left = chorus__ring_prev(r, n);
    size_t es = chorus_dtype_size(t), maxcnt = 0;
    for (int i = 0; i < n; i++)
        if (cnt[i] > maxcnt) maxcnt = cnt[i];
    size_t segc;
    int nseg;
    chorus__segments(c, maxcnt, es, &segc, &nseg);
    char *tmp = chorus__comm_scratch(c, 2 * maxcnt * es + 128);
    size_t nmsg = (size_t)(n - 1) * (size_t)nseg;
    chorus_req *sreq = malloc(sizeof(chorus_req) * nmsg), *rreq = malloc(sizeof(chorus_req) * nmsg);
    if (!tmp || !sreq || !rreq) {
        free(sreq);
        free(rreq);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory for a ring of %zu bytes",
                            maxcnt * es);
    }
    char *tbuf[2] = {tmp, tmp + ((maxcnt * es + 63) & ~(size_t)63)};
#define POST_RECV(s)                                                                               \
    do {                                                                                           \
        int rc_ = chorus__mod(r - (s)-2, n);                                                       \
        for (int k = 0; k < nseg; k++)                                                             \
            chorus__coll_irecv(x, &rreq[(s)*nseg + k], left, tag_base + (s)*nseg + k,              \
                               tbuf[(s) % 2] + chorus__seg_lo(cnt[rc_], segc, k) * es,             \
                               chorus__seg_n(cnt[rc_], segc, k) * es);                             \
    } while (0)

    chorus_result res = CHORUS_OK;
    POST_RECV(0);
    int sc = chorus__mod(r - 1, n);
    for (int k = 0; k < nseg; k++)
        chorus__coll_isend(x, &sreq[k], right, tag_base + k,
                           local + (off[sc] + chorus__seg_lo(cnt[sc], segc, k)) * es,
                           chorus__seg_n(cnt[sc], segc, k) * es);
    for (int s = 0; s < n - 1 && res == CHORUS_OK; s++) {
        if (s + 1 < n - 1) POST_RECV(s + 1);
        int rc = chorus__mod(r - s - 2, n);
        char *dst = s == n - 2 ? out : work + off[rc] * es;
        for (int k = 0; k < nseg; k++) {
            res = chorus__coll_wait1(x, &rreq[s * nseg + k]);
            if (res != CHORUS_OK) break;
            size_t lo = chorus__seg_lo(cnt[rc], segc, k), m = chorus__seg_n(cnt[rc], segc, k);
            chorus__reduce(dst + lo * es, tbuf[s % 2] + lo * es, local + (off[rc] + lo) * es, m, t,
                           op);
            if (s + 1 < n - 1)
                chorus__coll_isend(x, &sreq[(s + 1) * nseg + k], right,
                                   tag_base + (s + 1) * nseg + k, dst + lo * es, m * es);
        }
    }
    if (res == CHORUS_OK) {
        chorus_req **all = malloc(sizeof(chorus_req *) * nmsg);
        if (!all) {
            res = chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
        } else {
            for (size_t i = 0; i < nmsg; i++) all[i] = &sreq[i];
            res = chorus__coll_wait(x, all, (int)nmsg);
            free(all);
        }
    }
#undef POST_RECV
    free(sreq);
    free(rreq);
    return res;
}

chorus_result chorus__ring_ag_post(chorus_ring_ag *ag, chorus_coll *x, char *buf, const size_t *off,
                                   const size_t *cnt, size_t es, int tag_base)
{
    chorus_comm *c = x->c;
    int n = c->size, r = c->rank;
    memset(ag, 0, sizeof(*ag));
    ag->x = x;
    ag->buf = buf;
    ag->off = off;
    ag->cnt = cnt;
    ag->es = es;
    ag->tag_base = tag_base;
    size_t maxcnt = 0;
    for (int i = 0; i < n; i++)
        if (cnt[i] > maxcnt) maxcnt = cnt[i];
    chorus__segments(c, maxcnt, es, &ag->segc, &ag->nseg);
    size_t nmsg = (size_t)(n - 1) * (size_t)ag->nseg;
    ag->sreq = malloc(sizeof(chorus_req) * nmsg);
    ag->rreq = malloc(sizeof(chorus_req) * nmsg);
    if (!ag->sreq || !ag->rreq) {
        free(ag->sreq);
        free(ag->rreq);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    size_t segc = ag->segc;
    int nseg = ag->nseg, left = chorus__ring_prev(r, n);
    /* every step receives a different chunk: post them all, in the order they will arrive */
    for (int s = 0; s < n - 1; s++) {
        int rc = chorus__mod(r - s - 1, n);
        for (int k = 0; k < nseg; k++)
            chorus__coll_irecv(x, &ag->rreq[s * nseg + k], left, tag_base + s * nseg + k,
                               buf + (off[rc] + chorus__seg_lo(cnt[rc], segc, k)) * es,
                               chorus__seg_n(cnt[rc], segc, k) * es);
    }
    return CHORUS_OK;
}

void chorus__ring_ag_send_own(chorus_ring_ag *ag, int k)
{
    chorus_comm *c = ag->x->c;
    int r = c->rank;
    size_t segc = ag->segc, es = ag->es;
    const size_t *off = ag->off, *cnt = ag->cnt;
    chorus__coll_isend(ag->x, &ag->sreq[k], chorus__ring_next(r, c->size), ag->tag_base + k,
                       ag->buf + (off[r] + chorus__seg_lo(cnt[r], segc, k)) * es,
                       chorus__seg_n(cnt[r], segc, k) * es);
}

chorus_result chorus__ring_ag_finish(chorus_ring_ag *ag, chorus_result res)
{
    chorus_coll *x = ag->x;
    chorus_comm *c = x->c;
    int n = c->size, r = c->rank, nseg = ag->nseg;
    size_t segc = ag->segc, es = ag->es;
    const size_t *off = ag->off, *cnt = ag->cnt;
    size_t nmsg = (size_t)(n - 1) * (size_t)nseg;
    for (int s = 0; s < n - 2 && res == CHORUS_OK; s++) {
        int rc = chorus__mod(r - s - 1, n);
        for (int k = 0; k < nseg && res == CHORUS_OK; k++) {
            res = chorus__coll_wait1(x, &ag->rreq[s * nseg + k]);
            if (res == CHORUS_OK)
                chorus__coll_isend(x, &ag->sreq[(s + 1) * nseg + k], chorus__ring_next(r, n),
                                   ag->tag_base + (s + 1) * nseg + k,
                                   ag->buf + (off[rc] + chorus__seg_lo(cnt[rc], segc, k)) * es,
                                   chorus__seg_n(cnt[rc], segc, k) * es);
        }
    }
    chorus_req **all = res == CHORUS_OK ? malloc(sizeof(chorus_req *) * 2 * nmsg) : NULL;
    if (res == CHORUS_OK && !all) res = chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    if (res == CHORUS_OK) {
        for (size_t i = 0; i < nmsg; i++) {
            all[i] = &ag->rreq[i];
            all[nmsg + i] = &ag->sreq[i];
        }
        res = chorus__coll_wait(x, all, (int)(2 * nmsg));
    }
    free(all);
    free(ag->sreq);
    free(ag->rreq);
    return res;
}

chorus_result chorus__ring_allgather(chorus_coll *x, char *buf, const size_t *off,
                                     const size_t *cnt, size_t es, int tag_base)
{
    chorus_ring_ag ag;
    CHORUS_CHECK(chorus__ring_ag_post(&ag, x, buf, off, cnt, es, tag_base));
    for (int k = 0; k < ag.nseg; k++) chorus__ring_ag_send_own(&ag, k);
    return chorus__ring_ag_finish(&ag, CHORUS_OK);
}

chorus_result chorus__allgather_ring(chorus_comm *c, const chorus_coll_args *a)
{
    int n = c->size;
    size_t *off = chorus__chunks(a->count * (size_t)n, n); /* block i at i * count */
    if (!off) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_ALLGATHER, a->t, 0, a->count);
    chorus_result r = chorus__ring_allgather(&x, a->recv, off, off + n, chorus_dtype_size(a->t), 0);
    free(off);
    return r;
}
