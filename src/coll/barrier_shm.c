/*
 * barrier_shm.c - barrier through shared memory: every rank posts its IN flag for one chunk
 * and waits for everyone else's. No data moves; the cost is one cache-line transfer per peer.
 */
#include "coll/coll.h"
#include "transport/shm/shm.h"

chorus_result chorus__barrier_shm(chorus_comm *c, const chorus_coll_args *a)
{
    (void)a;
    chorus_shm *s = c->shm;
    s->what = "barrier";
    uint64_t g = s->g++, sig = chorus__shm_sig(CHORUS_COLL_BARRIER, 0, 0, 1, 0);
    CHORUS_CHECK(chorus__shm_wait_slot(s, g, &c->err));
    chorus__shm_post_in(s, g, sig, 0);
    CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, 0, &c->err));
    chorus__shm_end_chunk(s, g);
    return CHORUS_OK;
}
