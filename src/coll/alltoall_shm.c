/*
 * alltoall_shm.c - alltoall through shared memory. Blocks go through in pieces (p pieces fill
 * one slot): for piece k every rank copies piece k of each of its p send blocks into its slot,
 * and once all have posted, rank r copies piece k of block r from every rank's slot into its
 * receive blocks. In place works: a rank overwrites only what it has already copied in.
 */
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

chorus_result chorus__alltoall_shm(chorus_comm *c, const chorus_coll_args *a)
{
    const void *send = a->send;
    void *recv = a->recv;
    size_t count = a->count;
    chorus_dtype t = a->t;
    chorus_shm *s = c->shm;
    chorus_errbuf *e = &c->err;
    s->what = "alltoall";
    int p = s->size, me = s->rank;
    size_t bytes = count * chorus_dtype_size(t);
    size_t m = s->chunk / (size_t)p;
    if (m > 64) m -= m % 64;
    size_t nch = (bytes + m - 1) / m;
    int nt = bytes * (size_t)p >= s->nt_min;
    const char *in = send;
    char *out = recv;
    uint64_t sig = chorus__shm_sig(CHORUS_COLL_ALLTOALL, (int)t, 0, 1, 0);
    for (size_t k = 0; k < nch; k++) {
        uint64_t g = s->g + k;
        size_t off = k * m, n = bytes - off < m ? bytes - off : m;
        char *mine = chorus__shm_slot(s, me, g);
        CHORUS_CHECK(chorus__shm_wait_slot(s, g, e));
        for (int j = 0; j < p; j++) memcpy(mine + (size_t)j * n, in + (size_t)j * bytes + off, n);
        chorus__shm_post_in(s, g, sig, count);
        CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, count, e));
        for (int i = 0; i < p; i++) {
            int q = (me + i) % p;
            chorus__shm_copy(out + (size_t)q * bytes + off,
                             chorus__shm_slot(s, q, g) + (size_t)me * n, n, nt);
        }
        chorus__shm_end_chunk(s, g);
    }
    s->g += nch;
    return CHORUS_OK;
}
