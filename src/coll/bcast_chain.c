/*
 * bcast_chain.c - pipelined chain broadcast for large messages: the root cuts the buffer in
 * segments and sends them down the ring root, root+1, ...; each rank forwards a segment as
 * soon as it has it. Time ~ (p-2) segments + S/bandwidth, independent of p for large S.
 */
#include <stdlib.h>

#include "coll/coll.h"

chorus_result chorus__bcast_chain(chorus_comm *c, const chorus_coll_args *a)
{
    int n = c->size, root = a->root, v = chorus__mod(c->rank - root, n);
    int prev = chorus__ring_prev(c->rank, n), next = chorus__ring_next(c->rank, n);
    size_t bytes = a->bytes;
    chorus_coll xs, *x = &xs;
    chorus__coll_begin(x, c, CHORUS_COLL_BROADCAST, a->t, (chorus_op)root, a->count);
    size_t segb;
    int nseg;
    chorus__segments(c, bytes, 1, &segb, &nseg);
    chorus_req *rq = malloc(sizeof(chorus_req) * 2 * (size_t)nseg);
    chorus_req **ps = malloc(sizeof(chorus_req *) * (size_t)nseg);
    if (!rq || !ps) {
        free(rq);
        free(ps);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    chorus_req *sq = rq + nseg;
    char *b = a->recv;
    int sends = v < n - 1;
    chorus_result r = CHORUS_OK;
    if (v > 0)
        for (int k = 0; k < nseg; k++) {
            size_t lo = chorus__seg_lo(bytes, segb, k);
            chorus__coll_irecv(x, &rq[k], prev, k, b + lo, chorus__seg_n(bytes, segb, k));
        }
    for (int k = 0; k < nseg && r == CHORUS_OK; k++) {
        size_t lo = chorus__seg_lo(bytes, segb, k);
        if (v > 0) r = chorus__coll_wait1(x, &rq[k]);
        if (r == CHORUS_OK && sends)
            chorus__coll_isend(x, &sq[k], next, k, b + lo, chorus__seg_n(bytes, segb, k));
    }
    if (r == CHORUS_OK && sends) {
        for (int k = 0; k < nseg; k++) ps[k] = &sq[k];
        r = chorus__coll_wait(x, ps, nseg);
    }
    free(rq);
    free(ps);
    return r;
}
