/*
 * barrier_dissemination.c - barrier over TCP by dissemination: in round k every rank sends an
 * empty message to r + 2^k and waits for the one from r - 2^k, so after round k it has heard,
 * directly or not, from 2^(k+1) - 1 others; ceil(log2(p)) rounds for any p. It is the
 * signature agreement of coll.c with nothing else to do.
 */
#include "coll/coll.h"

chorus_result chorus__barrier_dissemination(chorus_comm *c, const chorus_coll_args *a)
{
    (void)a;
    return chorus__coll_agree(c, 0, "barrier", CHORUS_COLL_BARRIER, CHORUS_UINT8, 0, 0, 0);
}
