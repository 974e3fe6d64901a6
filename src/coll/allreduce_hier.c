/*
 * allreduce_hier.c - allreduce across hosts: shared memory within a host, TCP between hosts.
 * The buffer is cut into nslice slices (the most ranks on one host); on a host of n ranks,
 * slice j belongs to local rank j mod n (a host with fewer ranks gives some of them several).
 *
 *   1. within each host, a reduce-scatter over shared memory: the owner of slice j folds the
 *      host's inputs of slice j in rank order;
 *   2. across hosts, the owners of slice j (one per host) allreduce it over TCP: one-shot up
 *      to CHORUS_TCP_ONESHOT_MAX bytes, else direct reduce-scatter + ring allgather (both fold
 *      in host order); slices with different owners cross the links at once;
 *   3. within each host, an allgather of the slices over shared memory.
 *
 * Each host's link carries 2(h-1)/h of the buffer each way for h hosts (the flat direct
 * reduce-scatter + ring allgather over all p ranks carries more: every rank's slice to and
 * from every other host). The fold is ((x_a + x_a+1) + ...) within each host, then the host
 * partials in host order: the same result on every rank and every run, equal to the flat
 * algorithms' rank-order fold when every host has one rank (or the reduction is exact).
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

/* Step 1 or 3 inside this host (nothing to do for a host of one rank). */
static chorus_result within_host(chorus_comm *c, chorus_comm *local, const chorus_shm_blocks *b,
                                 const chorus_coll_args *a, int gather)
{
    if (local->size == 1) return CHORUS_OK;
    local->shm->what = "allreduce";
    uint64_t sig = chorus__shm_sig(CHORUS_COLL_ALLREDUCE, (int)a->t, (int)a->op, 2 + gather, 0);
    chorus_result r =
        gather ? chorus__shm_allgather_blocks(local, b, a->recv, chorus_dtype_size(a->t), sig)
               : chorus__shm_reduce_scatter_blocks(local, b, a->send, a->recv, a->t, a->op, 0, sig);
    return chorus__coll_sub_fail(c, local, r);
}

/* Step 2 for slice j (cnt elements at at), among its owners on every host. */
static chorus_result across_hosts(chorus_comm *c, chorus_comm *g, char *at, size_t cnt,
                                  const chorus_coll_args *a)
{
    /* CHORUS_AVG sums across hosts and divides once, by every rank of c. */
    chorus_coll_args s = {.send = at,
                          .recv = at,
                          .count = cnt,
                          .bytes = cnt * chorus_dtype_size(a->t),
                          .t = a->t,
                          .op = a->op == CHORUS_AVG ? CHORUS_SUM : a->op};
    chorus_result r = s.bytes <= c->cfg.tcp_oneshot_max ? chorus__allreduce_oneshot(g, &s)
                                                        : chorus__allreduce_direct_ring(g, &s);
    if (r == CHORUS_OK) chorus__reduce_finish(at, cnt, a->t, a->op, c->size);
    return chorus__coll_sub_fail(c, g, r);
}

chorus_result chorus__allreduce_hier(chorus_comm *c, const chorus_coll_args *a)
{
    chorus_hier *h = c->hier;
    size_t es = chorus_dtype_size(a->t);
    size_t *v = chorus__chunks(a->count, h->nslice);
    if (!v) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "allreduce: out of memory");
    chorus_shm_blocks b = {h->nslice, v, v + h->nslice, NULL, a->count};
    chorus_result r = within_host(c, h->local, &b, a, 0);
    if (r == CHORUS_OK && h->local->size == 1 && a->send != a->recv)
        memcpy(a->recv, a->send, a->bytes);
    for (int j = 0; j < h->nslice && r == CHORUS_OK; j++)
        if (h->slice[j] && b.cnt[j])
            r = across_hosts(c, h->slice[j], (char *)a->recv + b.off[j] * es, b.cnt[j], a);
    if (r == CHORUS_OK) r = within_host(c, h->local, &b, a, 1);
    free(v);
    return r;
}
