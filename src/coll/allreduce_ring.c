/*
 * allreduce_ring.c - ring allreduce for large messages: reduce-scatter then allgather
 * (ring.c), each rank sending 2(p-1)/p of the buffer, which is bandwidth-optimal.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"

chorus_result chorus__allreduce_ring(chorus_comm *c, const chorus_coll_args *a)
{
    int n = c->size;
    size_t count = a->count;
    chorus_dtype t = a->t;
    char *recv = a->recv;
    size_t es = chorus_dtype_size(t);
    size_t *off = chorus__chunks(count, n);
    if (!off) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    size_t *cnt = off + n;
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_ALLREDUCE, t, a->op, count);
    char *out = recv + off[c->rank] * es;
    /* Partial results go to recv at their chunk's place; reading local chunks from send (or
     * from recv itself when in place) is safe because a chunk is read before it is written. */
    chorus_result r = chorus__ring_reduce_scatter(&x, a->send, recv, out, off, cnt, t, a->op, 0);
    if (r == CHORUS_OK) {
        chorus__reduce_finish(out, cnt[c->rank], t, a->op, n);
        int nseg;
        size_t segc, maxcnt = cnt[0];
        chorus__segments(c, maxcnt, es, &segc, &nseg);
        r = chorus__ring_allgather(&x, recv, off, cnt, es, (n - 1) * nseg);
    }
    free(off);
    return r;
}
