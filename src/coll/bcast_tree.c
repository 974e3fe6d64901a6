/*
 * bcast_tree.c - binomial-tree broadcast for small messages: log2(p) rounds; rank v (relative
 * to the root) receives from v minus its lowest set bit and sends to v + 2^k for the smaller
 * powers.
 */
#include "coll/comm.h"

chorus_result chorus__bcast_tree(chorus_comm *c, void *buf, size_t bytes, int root, chorus_coll *x)
{
    int n = c->size, v = chorus__mod(c->rank - root, n);
    chorus_req rq;
    int mask = 1;
    while (mask < n) {
        if (v & mask) {
            int parent = (v - mask + root) % n;
            chorus__coll_irecv(x, &rq, parent, 0, buf, bytes);
            CHORUS_CHECK(chorus__coll_wait1(x, &rq));
            break;
        }
        mask <<= 1;
    }
    chorus_req sq[32];
    chorus_req *ps[32];
    int ns = 0;
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (v + mask < n) {
            chorus__coll_isend(x, &sq[ns], (v + mask + root) % n, 0, buf, bytes);
            ps[ns] = &sq[ns];
            ns++;
        }
    return ns ? chorus__coll_wait(x, ps, ns) : CHORUS_OK;
}
