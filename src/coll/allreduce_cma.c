/*
 * allreduce_cma.c - single-copy allreduce between the ranks of one host: each rank reads its
 * peers' buffers directly with process_vm_readv (transport/shm/cma.h) instead of staging
 * every byte through the shared segment. The rules use it for 2 ranks from CHORUS_SHM_CMA_MIN
 * to CHORUS_SHM_CMA_MAX bytes: above, the kernel's pinning of every 4 KiB page it copies costs
 * more than the staging copy of the pipelined slots (select.c).
 *
 * The message is cut into K pieces (at most CHORUS_SHM_CMA_PIECE bytes, at least one per
 * rank, cache-line aligned). Each rank posts IN with the addresses of its send and recv
 * buffers, then claims pieces one at a time from a counter in the segment - even ranks from
 * the front, odd ranks from the back, so that on an idle machine each of 2 ranks does the
 * same half every call. For a piece it reads that piece of every peer's input
 * (process_vm_readv) into a small scratch buffer that stays in cache, folds all p inputs in
 * rank order - its own read in place - straight into its recv, and writes the reduced piece,
 * still in cache, into every peer's recv (process_vm_writev). When no piece is left it posts
 * OUT and waits for every peer's OUT: nobody returns while a peer may still read or write its
 * buffers. Two synchronisations per call, whatever the size. A rank that is descheduled
 * (another process took its core) claims less and the others do its share: which rank
 * computes a piece changes nothing in the result.
 *
 * Per rank (when the ranks keep pace): (p-1)/p S bytes of peers' inputs and (p-1)/p S bytes
 * of results cross cores, each in one copy, and 1/p of the reduction; memory traffic is one read of
 * the input and one write of the output. Pushing results (rather than having peers read them)
 * matters: a rank's writes land in lines it already owns from the previous call on the same
 * buffers, while a read of a result just written on another core must snoop that core's cache (1.6x
 * slower at 1 MiB here). Every element is folded once, x0 op x1 op ... in rank order, and
 * copied to the others, so all ranks hold identical bits, equal to the staging-slot paths.
 *
 * No non-temporal stores here (CHORUS_SHM_NT_MIN is for the slot paths): at 64 MiB, reducing
 * into a cached piece and streaming it into recv took 13.6-14.2 ms against 12.1-12.7 ms for
 * reducing straight into recv (2 ranks, idle machine); pulling the peer's results through a
 * cached piece and streaming them (no kernel write into the peer) took 12.9-13.7 ms.
 *
 * In place works: only the rank that claimed a piece touches it, in any buffer, and it writes
 * the result there after it has read every input of it (with me >= 2 it copies its own input
 * piece aside first, since the fold writes x0 op x1 over it).
 *
 * The collective takes one chunk number g of the shm flag protocol (IN and OUT) and touches no
 * staging slot.
 */
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/cma.h"
#include "transport/shm/shm.h"

/* The group's claim word: low half F, pieces taken from the front, high half B, from the back,
 * both counted since the group began (32-bit, wrapping). A collective of K pieces began when
 * F + B was t0 and ends when F + B = t0 + K: then every piece has been claimed once. */
typedef struct claims {
    uint64_t *word;
    uint32_t f0, b0, t0, k;
    int back;
} claims;

/* Claims the next piece from this rank's end: 1 and its index, or 0 when none is left. */
static int claim(claims *cl, size_t *piece)
{
    uint64_t w = __atomic_load_n(cl->word, __ATOMIC_RELAXED);
    for (;;) {
        uint32_t f = (uint32_t)w, b = (uint32_t)(w >> 32);
        if ((uint32_t)(f + b - cl->t0) >= cl->k) return 0;
        uint64_t nw = cl->back ? w + ((uint64_t)1 << 32) : (w & ~(uint64_t)0xffffffffu) | (f + 1u);
        if (__atomic_compare_exchange_n(cl->word, &w, nw, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            *piece = cl->back ? cl->k - 1u - (uint32_t)(b - cl->b0) : (uint32_t)(f - cl->f0);
            return 1;
        }
    }
}

chorus_result chorus__allreduce_cma(chorus_comm *c, const void *sendv, void *recvv, size_t count,
                                    chorus_dtype t, chorus_op op)
{
    chorus_shm *s = c->shm;
    chorus_errbuf *e = &c->err;
    const char *send = sendv;
    char *recv = recvv;
    int p = s->size, me = s->rank;
    size_t es = chorus_dtype_size(t);
    size_t al = 64 / es; /* pieces start on cache lines */
    /* at least one piece per rank, at most CHORUS_SHM_CMA_PIECE bytes each */
    size_t np = (count * es + s->cma_piece - 1) / s->cma_piece;
    if (np < (size_t)p) np = (size_t)p;
    size_t pe = ((count + np - 1) / np + al - 1) / al * al;
    size_t npiece = (count + pe - 1) / pe;
    int own_aside = send == recv && me >= 2; /* the fold would overwrite my input */
    /* scratch: the first two inputs of the fold, and my own input when it must be set aside */
    char *scr = chorus__comm_scratch(c, 3 * pe * es);
    if (!scr) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    char *scr_a = scr, *scr_b = scr + pe * es, *scr_me = scr + 2 * pe * es;
    uint64_t g = s->g;
    uint64_t sig = chorus__shm_sig(CHORUS_COLL_ALLREDUCE, (int)t, (int)op, 3, 0);
    s->what = "allreduce";

    CHORUS_CHECK(chorus__shm_wait_slot(s, g, e));
    /* Nobody claims before everyone has posted IN below, and every claim of earlier
     * collectives ended before its rank's OUT, which this rank has waited for: stable. */
    claims cl = {.word = &s->hdr->cma_claim, .k = (uint32_t)npiece, .back = me & 1};
    uint64_t w0 = __atomic_load_n(cl.word, __ATOMIC_ACQUIRE);
    cl.f0 = (uint32_t)w0;
    cl.b0 = (uint32_t)(w0 >> 32);
    cl.t0 = cl.f0 + cl.b0;
    s->ctrl[me].cma_send = (uint64_t)(uintptr_t)send;
    s->ctrl[me].cma_recv = (uint64_t)(uintptr_t)recv;
    chorus__shm_post_in(s, g, sig, count); /* publishes the addresses (sequentially consistent) */
    CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, count, e));

    size_t k;
    while (claim(&cl, &k)) {
        size_t a = k * pe, m = count - a < pe ? count - a : pe, at = a * es, len = m * es;
        char *dst = recv + at;
        const char *mine = send + at;
        if (own_aside) {
            memcpy(scr_me, mine, len);
            mine = scr_me;
        }
        /* inputs 0 and 1, then the others in rank order */
        const char *x0 = mine, *x1 = mine;
        if (me != 0) {
            CHORUS_CHECK(chorus__cma_read(s, 0, scr_a, s->ctrl[0].cma_send + at, len, e));
            x0 = scr_a;
        }
        if (me != 1) {
            CHORUS_CHECK(chorus__cma_read(s, 1, scr_b, s->ctrl[1].cma_send + at, len, e));
            x1 = scr_b;
        }
        chorus__reduce(dst, x0, x1, m, t, op);
        for (int q = 2; q < p; q++) {
            const char *xq = mine;
            if (q != me) {
                CHORUS_CHECK(chorus__cma_read(s, q, scr_a, s->ctrl[q].cma_send + at, len, e));
                xq = scr_a;
            }
            chorus__reduce(dst, dst, xq, m, t, op);
        }
        chorus__reduce_finish(dst, m, t, op, p);
        /* the reduced piece, still in cache, into every peer's recv */
        for (int q = 0; q < p; q++)
            if (q != me)
                CHORUS_CHECK(chorus__cma_write(s, q, s->ctrl[q].cma_recv + at, dst, len, e));
    }
    chorus__shm_end_chunk(s, g);
    /* Nobody may reuse its buffers while a peer still reads or writes them. */
    CHORUS_CHECK(chorus__shm_wait_all(s, CHORUS_SHM_OUT, g + 1, e));
    s->out_min = g + 1;
    s->g = g + 1;
    return CHORUS_OK;
}
