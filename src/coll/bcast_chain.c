/*
 * bcast_chain.c - pipelined chain broadcast for large messages: the root cuts the buffer in
 * segments and sends them down the ring root, root+1, ...; each rank forwards a segment as
 * soon as it has it. Time ~ (p-2) segments + S/bandwidth, independent of p for large S.
 */
#include <stdlib.h>

#include "coll/comm.h"

chorus_result chorus__bcast_chain(chorus_comm *c, void *buf, size_t bytes, int root, chorus_coll *x)
{
    int n = c->size, v = chorus__mod(c->rank - root, n);
    int prev = (c->rank - 1 + n) % n, next = (c->rank + 1) % n;
    size_t segb;
    int nseg;
    chorus__segments(bytes, 1, &segb, &nseg);
    chorus_req *rq = malloc(sizeof(chorus_req) * 2 * (size_t)nseg);
    chorus_req **ps = malloc(sizeof(chorus_req *) * (size_t)nseg);
    if (!rq || !ps) {
        free(rq);
        free(ps);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    chorus_req *sq = rq + nseg;
    char *b = buf;
    int sends = v < n - 1;
    chorus_result r = CHORUS_OK;
    if (v > 0)
        for (int k = 0; k < nseg; k++) {
            size_t lo = (size_t)k * segb < bytes ? (size_t)k * segb : bytes;
            size_t hi = lo + segb < bytes ? lo + segb : bytes;
            chorus__coll_irecv(x, &rq[k], prev, k, b + lo, hi - lo);
        }
    for (int k = 0; k < nseg && r == CHORUS_OK; k++) {
        size_t lo = (size_t)k * segb < bytes ? (size_t)k * segb : bytes;
        size_t hi = lo + segb < bytes ? lo + segb : bytes;
        if (v > 0) r = chorus__coll_wait1(x, &rq[k]);
        if (r == CHORUS_OK && sends) chorus__coll_isend(x, &sq[k], next, k, b + lo, hi - lo);
    }
    if (r == CHORUS_OK && sends) {
        for (int k = 0; k < nseg; k++) ps[k] = &sq[k];
        r = chorus__coll_wait(x, ps, nseg);
    }
    free(rq);
    free(ps);
    return r;
}
