/*
 * allgather_hier.c - allgather across hosts, whose ranks are consecutive: each host gathers
 * its ranks' blocks over shared memory (one piece of recv), the hosts' lowest ranks exchange
 * those pieces over TCP (one broadcast per host, in host order: bcast_hier.c's leader step),
 * and each host's lowest rank hands the other hosts' pieces to its ranks over shared memory.
 * A host's blocks cross each link once.
 */
#include "coll/coll.h"

chorus_result chorus__allgather_hier(chorus_comm *c, const chorus_coll_args *a)
{
    chorus_hier *h = c->hier;
    int lo = h->lo[h->me], n = h->n[h->me];
    char *buf = a->recv;
    chorus_result r = CHORUS_OK;
    if (h->local->size > 1) {
        chorus_coll_args s = *a; /* this rank's block is in place at recv + rank * bytes */
        s.send = buf + (size_t)c->rank * a->bytes;
        s.recv = buf + (size_t)lo * a->bytes;
        r = chorus__coll_sub_fail(c, h->local, chorus__allgather_shm(h->local, &s));
    }
    for (int k = 0; k < h->nhosts && r == CHORUS_OK && h->leaders; k++)
        r = chorus__bcast_sub(c, h->leaders, buf + (size_t)h->lo[k] * a->bytes,
                              (size_t)h->n[k] * a->count, a->t, k);
    if (r == CHORUS_OK) r = chorus__bcast_sub(c, h->local, buf, (size_t)lo * a->count, a->t, 0);
    if (r == CHORUS_OK)
        r = chorus__bcast_sub(c, h->local, buf + (size_t)(lo + n) * a->bytes,
                              (size_t)(c->size - lo - n) * a->count, a->t, 0);
    return r;
}
