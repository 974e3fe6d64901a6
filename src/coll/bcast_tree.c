/*
 * bcast_tree.c - binomial-tree broadcast for small messages: log2(p) rounds; each rank
 * receives from its parent in the tree rooted at the root (patterns.h) and then sends to its
 * children, the farthest first.
 */
#include "coll/coll.h"

chorus_result chorus__bcast_tree(chorus_comm *c, const chorus_coll_args *a)
{
    int n = c->size, root = a->root, below;
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_BROADCAST, a->t, (chorus_op)root, a->count);
    int parent = chorus__tree_parent(c->rank, root, n, &below);
    if (parent >= 0) {
        chorus_req rq;
        chorus__coll_irecv(&x, &rq, parent, 0, a->recv, a->bytes);
        CHORUS_CHECK(chorus__coll_wait1(&x, &rq));
    }
    chorus_req sq[32];
    chorus_req *ps[32];
    int ns = 0;
    for (int m = below >> 1; m > 0; m >>= 1) {
        int child = chorus__tree_child(c->rank, root, n, m);
        if (child < 0) continue;
        chorus__coll_isend(&x, &sq[ns], child, 0, a->recv, a->bytes);
        ps[ns] = &sq[ns];
        ns++;
    }
    return ns ? chorus__coll_wait(&x, ps, ns) : CHORUS_OK;
}
