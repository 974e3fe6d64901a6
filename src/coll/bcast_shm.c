/*
 * bcast_shm.c - broadcast through shared memory: the root copies the message, one slot-sized
 * chunk at a time, into its staging slots; every other rank copies each chunk out as soon as
 * it is posted. Every rank posts and checks the first chunk's signature (root and count
 * included), so a mismatch fails every rank, the root too. Slots alternate, so the root fills chunk
 * k+1 while the others read chunk k: the time is about one copy of the message plus one chunk.
 */
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

chorus_result chorus__bcast_shm(chorus_comm *c, const chorus_coll_args *a)
{
    void *buf = a->recv;
    size_t count = a->count;
    chorus_dtype t = a->t;
    int root = a->root;
    chorus_shm *s = c->shm;
    chorus_errbuf *e = &c->err;
    s->what = "broadcast";
    size_t bytes = count * chorus_dtype_size(t);
    size_t nch = (bytes + s->chunk - 1) / s->chunk;
    int nt = bytes >= s->nt_min;
    uint64_t sig = chorus__shm_sig(CHORUS_COLL_BROADCAST, (int)t, 0, 1, root);
    for (size_t k = 0; k < nch; k++) {
        uint64_t g = s->g + k;
        size_t off = k * s->chunk, n = bytes - off < s->chunk ? bytes - off : s->chunk;
        if (s->rank == root) {
            CHORUS_CHECK(chorus__shm_wait_slot(s, g, e));
            memcpy(chorus__shm_slot(s, root, g), (char *)buf + off, n);
            chorus__shm_post_in(s, g, sig, count);
            if (k == 0) CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, count, e));
        } else if (k == 0) {
            /* Everyone posts and checks the first chunk's signature, so that a rank that
             * names another root (or count) fails here, the root included. */
            CHORUS_CHECK(chorus__shm_wait_slot(s, g, e));
            chorus__shm_post_in(s, g, sig, count);
            CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, count, e));
        } else {
            CHORUS_CHECK(chorus__shm_wait_in1(s, root, g, sig, count, e));
        }
        if (s->rank != root)
            chorus__shm_copy((char *)buf + off, chorus__shm_slot(s, root, g), n, nt);
        chorus__shm_end_chunk(s, g);
    }
    s->g += nch;
    return CHORUS_OK;
}
