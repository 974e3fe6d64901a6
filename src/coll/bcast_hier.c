/*
 * bcast_hier.c - broadcast across hosts: on the root's host the root's buffer goes to its
 * ranks over shared memory, then across hosts among the hosts' lowest ranks over TCP
 * (binomial tree up to CHORUS_BCAST_TREE_MAX bytes, pipelined chain above, after the leaders
 * agree on the call as every TCP broadcast does), then on every other host from its lowest
 * rank over shared memory. Each host's link carries the buffer once.
 */
#include "coll/coll.h"

/* A broadcast of n elements at buf on sub from its rank root; failure recorded on c. */
chorus_result chorus__bcast_sub(chorus_comm *c, chorus_comm *sub, void *buf, size_t n,
                                chorus_dtype t, int root)
{
    if (sub->size == 1 || n == 0) return CHORUS_OK;
    chorus_coll_args s = {.send = buf,
                          .recv = buf,
                          .count = n,
                          .bytes = n * chorus_dtype_size(t),
                          .t = t,
                          .root = root};
    chorus_result r;
    if (sub->shm)
        r = chorus__bcast_shm(sub, &s);
    else if ((r = chorus__coll_agree(sub, 0, "broadcast", CHORUS_COLL_BROADCAST, t, 0, root, n)) ==
             CHORUS_OK)
        r = s.bytes <= c->cfg.bcast_tree_max ? chorus__bcast_tree(sub, &s)
                                             : chorus__bcast_chain(sub, &s);
    return chorus__coll_sub_fail(c, sub, r);
}

chorus_result chorus__bcast_hier(chorus_comm *c, const chorus_coll_args *a)
{
    chorus_hier *h = c->hier;
    int rh = 0; /* the root's host */
    while (rh + 1 < h->nhosts && h->lo[rh + 1] <= a->root) rh++;
    chorus_result r = CHORUS_OK;
    if (h->me == rh)
        r = chorus__bcast_sub(c, h->local, a->recv, a->count, a->t, a->root - h->lo[rh]);
    if (r == CHORUS_OK && h->leaders)
        r = chorus__bcast_sub(c, h->leaders, a->recv, a->count, a->t, rh);
    if (r == CHORUS_OK && h->me != rh)
        r = chorus__bcast_sub(c, h->local, a->recv, a->count, a->t, 0);
    return r;
}
