/*
 * allgather_shm.c - allgather through shared memory: each rank copies its block, one
 * slot-sized piece at a time, into its staging slot; when every rank has posted piece k, each
 * copies the others' pieces into place. Slots alternate, so copying in piece k+1 overlaps
 * other ranks' copying out of piece k.
 */
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

chorus_result chorus__allgather_shm(chorus_comm *c, const chorus_coll_args *a)
{
    void *recv = a->recv;
    size_t sendcount = a->count;
    chorus_dtype t = a->t;
    chorus_shm *s = c->shm;
    chorus_errbuf *e = &c->err;
    s->what = "allgather";
    int p = s->size, me = s->rank;
    size_t bytes = sendcount * chorus_dtype_size(t);
    size_t nch = (bytes + s->chunk - 1) / s->chunk;
    int nt = bytes * (size_t)p >= s->nt_min;
    char *out = recv;
    uint64_t sig = chorus__shm_sig(CHORUS_COLL_ALLGATHER, (int)t, 0, 1, 0);
    for (size_t k = 0; k < nch; k++) {
        uint64_t g = s->g + k;
        size_t off = k * s->chunk, n = bytes - off < s->chunk ? bytes - off : s->chunk;
        CHORUS_CHECK(chorus__shm_wait_slot(s, g, e));
        memcpy(chorus__shm_slot(s, me, g), out + (size_t)me * bytes + off, n);
        chorus__shm_post_in(s, g, sig, sendcount);
        CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, sendcount, e));
        for (int i = 1; i < p; i++) {
            int q = (me + i) % p; /* start at different ranks: spread the readers */
            chorus__shm_copy(out + (size_t)q * bytes + off, chorus__shm_slot(s, q, g), n, nt);
        }
        chorus__shm_end_chunk(s, g);
    }
    s->g += nch;
    return CHORUS_OK;
}
