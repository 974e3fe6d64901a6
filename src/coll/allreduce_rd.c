/*
 * allreduce_rd.c - recursive doubling, for small messages: log2(p) rounds of exchanging the
 * whole buffer with a partner. Any rank count: with p = 2^k + rem, the first 2*rem ranks pair
 * up (even sends to odd) before the rounds and get the result back after. Partners always
 * combine (lower rank's data) op (higher rank's data), so both hold the same bits.
 */
#include <string.h>

#include "coll/coll.h"

chorus_result chorus__allreduce_rd(chorus_comm *c, const chorus_coll_args *a)
{
    int n = c->size, r = c->rank;
    void *recv = a->recv;
    size_t count = a->count, bytes = a->bytes;
    chorus_dtype t = a->t;
    chorus_op op = a->op;
    const void *send = a->send;
    if (send != recv) memcpy(recv, send, bytes);
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_ALLREDUCE, t, op, count);
    char *tmp = chorus__comm_scratch(c, bytes + 64);
    if (!tmp) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    int p2 = chorus__pow2_floor(n);
    int rem = n - p2, vrank = chorus__rd_vrank(r, rem), tag = 0;
    chorus_req rq[2];
    chorus_req *both[2] = {&rq[0], &rq[1]};
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            chorus__coll_isend(&x, &rq[0], r + 1, tag, recv, bytes);
            CHORUS_CHECK(chorus__coll_wait1(&x, &rq[0]));
        } else {
            chorus__coll_irecv(&x, &rq[0], r - 1, tag, tmp, bytes);
            CHORUS_CHECK(chorus__coll_wait1(&x, &rq[0]));
            chorus__reduce(recv, tmp, recv, count, t, op);
        }
    }
    tag++;
    if (vrank >= 0) {
        for (int mask = 1; mask < p2; mask <<= 1, tag++) {
            int vp = vrank ^ mask;
            int peer = chorus__rd_rank(vp, rem);
            chorus__coll_irecv(&x, &rq[0], peer, tag, tmp, bytes);
            chorus__coll_isend(&x, &rq[1], peer, tag, recv, bytes);
            CHORUS_CHECK(chorus__coll_wait(&x, both, 2));
            if (vp < vrank)
                chorus__reduce(recv, tmp, recv, count, t, op);
            else
                chorus__reduce(recv, recv, tmp, count, t, op);
        }
    } else {
        for (int mask = 1; mask < p2; mask <<= 1) tag++; /* the partner's tag for the last step */
    }
    if (r < 2 * rem) {
        if (r % 2 == 1) {
            chorus__coll_isend(&x, &rq[0], r - 1, tag, recv, bytes);
            CHORUS_CHECK(chorus__coll_wait1(&x, &rq[0]));
        } else {
            chorus__coll_irecv(&x, &rq[0], r + 1, tag, recv, bytes);
            CHORUS_CHECK(chorus__coll_wait1(&x, &rq[0]));
        }
    }
    /* CHORUS_AVG divides once, after the result is complete, identically on every rank. */
    chorus__reduce_finish(recv, count, t, op, n);
    return CHORUS_OK;
}
