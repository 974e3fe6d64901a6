/*
 * alltoall_pairwise.c - alltoall over TCP in pairwise order: at step s rank r receives from
 * r-s and sends to r+s, so no rank is flooded by everyone at once. Every receive and send is
 * posted up front; the transport moves them as the peers get to them.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"

chorus_result chorus__alltoall_pairwise(chorus_comm *c, const chorus_coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t bytes = a->bytes;
    const char *src = a->send;
    char *recv = a->recv;
    if (a->send == a->recv) { /* in place: the blocks to send are kept aside */
        char *copy = chorus__comm_scratch(c, bytes * (size_t)n);
        if (!copy) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
        memcpy(copy, a->send, bytes * (size_t)n);
        src = copy;
    }
    memmove(recv + (size_t)me * bytes, src + (size_t)me * bytes, bytes);
    chorus_req *rq = malloc(sizeof(chorus_req) * 2 * (size_t)n);
    chorus_req **ps = malloc(sizeof(chorus_req *) * 2 * (size_t)n);
    if (!rq || !ps) {
        free(rq);
        free(ps);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_ALLTOALL, a->t, 0, a->count);
    int k = 0;
    for (int s = 1; s < n; s++) {
        int from = chorus__mod(me - s, n);
        chorus__coll_irecv(&x, &rq[k], from, 0, recv + (size_t)from * bytes, bytes);
        ps[k] = &rq[k];
        k++;
    }
    for (int s = 1; s < n; s++) {
        int to = (me + s) % n;
        chorus__coll_isend(&x, &rq[k], to, 0, src + (size_t)to * bytes, bytes);
        ps[k] = &rq[k];
        k++;
    }
    chorus_result r = chorus__coll_wait(&x, ps, k);
    free(rq);
    free(ps);
    return r;
}
