/*
 * barrier_dissemination.c - barrier over TCP by dissemination: in round k every rank sends an
 * empty message to r + 2^k and waits for the one from r - 2^k, so after round k it has heard,
 * directly or not, from 2^(k+1) - 1 others; ceil(log2(p)) rounds for any p.
 */
#include "coll/coll.h"

chorus_result chorus__barrier_dissemination(chorus_comm *c, const chorus_coll_args *a)
{
    (void)a;
    int n = c->size;
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_BARRIER, CHORUS_UINT8, 0, 0);
    chorus_result r = CHORUS_OK;
    for (int k = 1, round = 0; k < n && r == CHORUS_OK; k <<= 1, round++) {
        chorus_req rq[2];
        chorus_req *ps[2] = {&rq[0], &rq[1]};
        chorus__coll_irecv(&x, &rq[0], chorus__mod(c->rank - k, n), round, NULL, 0);
        chorus__coll_isend(&x, &rq[1], (c->rank + k) % n, round, NULL, 0);
        r = chorus__coll_wait(&x, ps, 2);
    }
    return r;
}
