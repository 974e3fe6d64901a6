/*
 * allreduce_shm.c - allreduce through the shared-memory staging slots (transport/shm/shm.h).
 *
 * One-shot (messages up to CHORUS_SHM_ONESHOT_MAX): every rank copies its input into its
 * slot, and once all slots are posted every rank reduces all of them, in rank order 0..p-1,
 * into its output. One copy and one synchronisation: the latency path. The same operations in
 * the same order on every rank give bitwise identical results.
 *
 * Pipelined (larger): the message goes through in chunks of one slot. For chunk k each rank
 * copies the slices of its input that others reduce into its slot (copy-in), reduces its own
 * slice r over all ranks - its own input read in place, the others' from their slots, in rank
 * order - into its slot (reduce-scatter), block by block, each block copied into its output while
 * it is in cache, then copies the other ranks' reduced slices into its output (allgather). Slots
 * alternate (double buffering), so one rank's copy-in of chunk k+1 overlaps another's copy-out of
 * chunk k. The slots stay in cache: memory traffic is one read of the input and one write of the
 * output per rank, the bound for an allreduce; large outputs are written with non-temporal stores
 * (CHORUS_SHM_NT_MIN).
 */
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

#define NT_BLOCK CHORUS_SHM_BLOCK /* bytes reduced in cache before a non-temporal copy */

/* Every rank reduces everything, chunk by chunk: copy my chunk into my slot, post, wait for
 * everyone's, reduce all slots in rank order into my output. One synchronisation per chunk.
 * With a single chunk this is the one-shot. Large outputs go through a small cached block and
 * are written with non-temporal stores. */
static chorus_result flat(chorus_comm *c, const char *send, char *recv, size_t count,
                          chorus_dtype t, chorus_op op)
{
    chorus_shm *s = c->shm;
    chorus_errbuf *e = &c->err;
    int p = s->size, me = s->rank;
    size_t es = chorus_dtype_size(t), per = s->chunk / es;
    size_t nch = (count + per - 1) / per;
    int nt = count * es >= s->nt_min;
    size_t blk = NT_BLOCK / es;
    uint64_t sig = chorus__shm_sig(CHORUS_COLL_ALLREDUCE, (int)t, (int)op, 1, 0);
    for (size_t k = 0; k < nch; k++) {
        uint64_t g = s->g + k;
        size_t base = k * per, n = count - base < per ? count - base : per;
        CHORUS_CHECK(chorus__shm_wait_slot(s, g, e));
        memcpy(chorus__shm_slot(s, me, g), send + base * es, n * es);
        chorus__shm_post_in(s, g, sig, count);
        CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, count, e));
        char *out = recv + base * es;
        for (size_t i = 0; i < n; i += blk) {
            size_t m = n - i > blk ? blk : n - i;
            char *dst = nt ? s->block : out + i * es;
            size_t at = i * es;
            chorus__reduce(dst, chorus__shm_slot(s, 0, g) + at, chorus__shm_slot(s, 1, g) + at, m,
                           t, op);
            for (int q = 2; q < p; q++)
                chorus__reduce(dst, dst, chorus__shm_slot(s, q, g) + at, m, t, op);
            chorus__reduce_finish(dst, m, t, op, p);
            if (nt) chorus__shm_copy(out + i * es, dst, m * es, 1);
        }
        chorus__shm_end_chunk(s, g);
    }
    s->g += nch;
    return CHORUS_OK;
}

static chorus_result pipelined(chorus_comm *c, const char *send, char *recv, size_t count,
                               chorus_dtype t, chorus_op op)
{
    chorus_shm *s = c->shm;
    chorus_errbuf *e = &c->err;
    int p = s->size, me = s->rank;
    size_t es = chorus_dtype_size(t), blk = NT_BLOCK / es; /* reduced in cache, then stored */
    size_t al = 64 / es;                                   /* slices start on cache lines */
    size_t per = s->chunk / es;                            /* elements per chunk */
    size_t nch = (count + per - 1) / per;
    int nt = count * es >= s->nt_min;
    uint64_t sig = chorus__shm_sig(CHORUS_COLL_ALLREDUCE, (int)t, (int)op, 2, 0);
    for (size_t k = 0; k < nch; k++) {
        uint64_t g = s->g + k;
        size_t base = k * per, n = count - base < per ? count - base : per;
        size_t sl = ((n + (size_t)p - 1) / (size_t)p + al - 1) / al * al;
        size_t lo = (size_t)me * sl < n ? (size_t)me * sl : n;
        size_t hi = lo + sl < n ? lo + sl : n;
        const char *in = send + base * es;
        char *mine = chorus__shm_slot(s, me, g);
        /* copy-in: everything but my own slice, which I read in place */
        CHORUS_CHECK(chorus__shm_wait_slot(s, g, e));
        memcpy(mine, in, lo * es);
        memcpy(mine + hi * es, in + hi * es, (n - hi) * es);
        chorus__shm_post_in(s, g, sig, count);
        CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, count, e));
        /* reduce-scatter: slice [lo, hi) over all ranks in rank order */
        char *out = recv + base * es;
        for (size_t i = lo; i < hi; i += blk) {
            size_t m = hi - i < blk ? hi - i : blk;
            char *dst = mine + i * es;
            const char *src0 = me == 0 ? in + i * es : chorus__shm_slot(s, 0, g) + i * es;
            const char *src1 = me == 1 ? in + i * es : chorus__shm_slot(s, 1, g) + i * es;
            chorus__reduce(dst, src0, src1, m, t, op);
            for (int q = 2; q < p; q++) {
                const char *src = q == me ? in + i * es : chorus__shm_slot(s, q, g) + i * es;
                chorus__reduce(dst, dst, src, m, t, op);
            }
            chorus__reduce_finish(dst, m, t, op, p);
            chorus__shm_copy(out + i * es, dst, m * es, nt);
        }
        chorus__shm_post(s, CHORUS_SHM_RED, g + 1);
        CHORUS_CHECK(chorus__shm_wait_all(s, CHORUS_SHM_RED, g + 1, e));
        /* allgather: every rank's reduced slice into my output */
        for (int q = 0; q < p; q++) {
            if (q == me) continue;
            size_t qlo = (size_t)q * sl < n ? (size_t)q * sl : n;
            size_t qhi = qlo + sl < n ? qlo + sl : n;
            if (qhi > qlo)
                chorus__shm_copy(out + qlo * es, chorus__shm_slot(s, q, g) + qlo * es,
                                 (qhi - qlo) * es, nt);
        }
        chorus__shm_end_chunk(s, g);
    }
    s->g += nch;
    return CHORUS_OK;
}

chorus_result chorus__allreduce_shm(chorus_comm *c, const void *send, void *recv, size_t count,
                                    chorus_dtype t, chorus_op op, int rsag)
{
    c->shm->what = "allreduce";
    if (rsag) return pipelined(c, send, recv, count, t, op);
    return flat(c, send, recv, count, t, op);
}
