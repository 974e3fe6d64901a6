/*
 * reduce_scatter_shm.c - reduce-scatter through shared memory, of blocks that may differ in
 * size and that a rank may own several of (block b belongs to rank b % p): the reduce-scatter
 * collective (p equal blocks) and the intra-host step of the hierarchical allreduce (one block
 * per slice). The blocks go through in pieces of m elements (one piece of every block fills a
 * slot): for piece k every rank copies piece k of each block into its slot, and once all have
 * posted, the owner of block b reduces piece k of b over all slots in rank order 0..p-1 into
 * its output. The fixed order makes the result independent of timing; slots alternate between
 * pieces.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

chorus_result chorus__shm_reduce_scatter_blocks(chorus_comm *c, const chorus_shm_blocks *b,
                                                const void *send, void *recv, chorus_dtype t,
                                                chorus_op op, int finish, uint64_t sig)
{
    chorus_shm *s = c->shm;
    chorus_errbuf *e = &c->err;
    int p = s->size, me = s->rank, nb = b->n;
    size_t es = chorus_dtype_size(t), al = 64 / es;
    size_t m = s->chunk / es / (size_t)nb, most = 0;
    if (m > al) m -= m % al; /* pieces start on cache lines */
    for (int j = 0; j < nb; j++) most = b->cnt[j] > most ? b->cnt[j] : most;
    size_t nch = (most + m - 1) / m;
    const char *in = send;
    char *out = recv;
    for (size_t k = 0; k < nch; k++) {
        uint64_t g = s->g + k;
        size_t lo = k * m;
        char *mine = chorus__shm_slot(s, me, g);
        CHORUS_CHECK(chorus__shm_wait_slot(s, g, e));
        for (int j = 0; j < nb; j++)
            if (lo < b->cnt[j])
                memcpy(mine + (size_t)j * m * es, in + (b->off[j] + lo) * es,
                       chorus__seg_n(b->cnt[j], m, (int)k) * es);
        chorus__shm_post_in(s, g, sig, b->total);
        CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, b->total, e));
        for (int j = me; j < nb; j += p) {
            size_t n = chorus__seg_n(b->cnt[j], m, (int)k), at = (size_t)j * m * es;
            if (!n) continue;
            char *dst = out + ((b->out_off ? b->out_off[j] : b->off[j]) + lo) * es;
            chorus__reduce(dst, chorus__shm_slot(s, 0, g) + at, chorus__shm_slot(s, 1, g) + at, n,
                           t, op);
            for (int q = 2; q < p; q++)
                chorus__reduce(dst, dst, chorus__shm_slot(s, q, g) + at, n, t, op);
            if (finish) chorus__reduce_finish(dst, n, t, op, p);
        }
        chorus__shm_end_chunk(s, g);
    }
    s->g += nch;
    return CHORUS_OK;
}

chorus_result chorus__reduce_scatter_shm(chorus_comm *c, const chorus_coll_args *a)
{
    int p = c->shm->size;
    size_t *v = malloc(sizeof(size_t) * 3 * (size_t)p);
    if (!v) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "reduce_scatter: out of memory");
    for (int j = 0; j < p; j++) {
        v[j] = (size_t)j * a->count; /* block j of send */
        v[p + j] = a->count;
        v[2 * p + j] = 0; /* this rank's block is the whole of recv */
    }
    chorus_shm_blocks b = {p, v, v + p, v + 2 * p, a->count};
    c->shm->what = "reduce_scatter";
    chorus_result r = chorus__shm_reduce_scatter_blocks(
        c, &b, a->send, a->recv, a->t, a->op, 1,
        chorus__shm_sig(CHORUS_COLL_REDUCE_SCATTER, (int)a->t, (int)a->op, 1, 0));
    free(v);
    return r;
}
