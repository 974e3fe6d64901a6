/*
 * reduce_scatter_shm.c - reduce-scatter through shared memory. The output blocks go through
 * in pieces of m elements (p pieces fill one slot): for piece k every rank copies piece k of
 * each of its p input blocks into its slot, and once all have posted, rank r reduces piece k
 * of block r over all slots in rank order 0..p-1 straight into its output. The fixed order
 * makes the result independent of timing; slots alternate between pieces.
 */
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

chorus_result chorus__reduce_scatter_shm(chorus_comm *c, const chorus_coll_args *a)
{
    const void *send = a->send;
    void *recv = a->recv;
    size_t recvcount = a->count;
    chorus_dtype t = a->t;
    chorus_op op = a->op;
    chorus_shm *s = c->shm;
    chorus_errbuf *e = &c->err;
    s->what = "reduce_scatter";
    int p = s->size, me = s->rank;
    size_t es = chorus_dtype_size(t), al = 64 / es;
    size_t m = s->chunk / es / (size_t)p;
    if (m > al) m -= m % al; /* pieces start on cache lines */
    size_t nch = (recvcount + m - 1) / m;
    const char *in = send;
    char *out = recv;
    uint64_t sig = chorus__shm_sig(CHORUS_COLL_REDUCE_SCATTER, (int)t, (int)op, 1, 0);
    for (size_t k = 0; k < nch; k++) {
        uint64_t g = s->g + k;
        size_t off = k * m, n = recvcount - off < m ? recvcount - off : m;
        char *mine = chorus__shm_slot(s, me, g);
        CHORUS_CHECK(chorus__shm_wait_slot(s, g, e));
        for (int j = 0; j < p; j++)
            memcpy(mine + (size_t)j * n * es, in + ((size_t)j * recvcount + off) * es, n * es);
        chorus__shm_post_in(s, g, sig, recvcount);
        CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, recvcount, e));
        char *dst = out + off * es;
        size_t at = (size_t)me * n * es;
        chorus__reduce(dst, chorus__shm_slot(s, 0, g) + at, chorus__shm_slot(s, 1, g) + at, n, t,
                       op);
        for (int q = 2; q < p; q++)
            chorus__reduce(dst, dst, chorus__shm_slot(s, q, g) + at, n, t, op);
        chorus__reduce_finish(dst, n, t, op, p);
        chorus__shm_end_chunk(s, g);
    }
    s->g += nch;
    return CHORUS_OK;
}
