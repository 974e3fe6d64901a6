/*
 * allgather_shm.c - allgather through shared memory, of blocks that may differ in size and
 * that a rank may own several of (block b belongs to rank b % p): the allgather collective
 * (one block per rank) and the last step of the hierarchical allreduce (one block per slice).
 * Each rank copies piece k of each of its blocks into its staging slot; when every rank has
 * posted piece k, each copies the others' pieces into place. Slots alternate, so copying in
 * piece k+1 overlaps other ranks' copying out of piece k.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

chorus_result chorus__shm_allgather_blocks(chorus_comm *c, const chorus_shm_blocks *b, void *buf,
                                           size_t es, uint64_t sig)
{
    chorus_shm *s = c->shm;
    chorus_errbuf *e = &c->err;
    int p = s->size, me = s->rank, nb = b->n, per = (nb + p - 1) / p;
    size_t m = s->chunk / es / (size_t)per, al = 64 / es, most = 0, all = 0;
    if (m > al) m -= m % al; /* pieces start on cache lines */
    for (int j = 0; j < nb; j++) {
        most = b->cnt[j] > most ? b->cnt[j] : most;
        all += b->cnt[j];
    }
    size_t nch = (most + m - 1) / m;
    int nt = all * es >= s->nt_min;
    char *out = buf;
    for (size_t k = 0; k < nch; k++) {
        uint64_t g = s->g + k;
        size_t lo = k * m;
        CHORUS_CHECK(chorus__shm_wait_slot(s, g, e));
        for (int j = me; j < nb; j += p) /* this rank's blocks, j / p-th in its slot */
            memcpy(chorus__shm_slot(s, me, g) + (size_t)(j / p) * m * es,
                   out + (b->off[j] + lo) * es, chorus__seg_n(b->cnt[j], m, (int)k) * es);
        chorus__shm_post_in(s, g, sig, b->total);
        CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, b->total, e));
        for (int i = 1; i < nb; i++) {
            int j = (me + i) % nb; /* start at different blocks: spread the readers */
            if (j % p == me) continue;
            chorus__shm_copy(out + (b->off[j] + lo) * es,
                             chorus__shm_slot(s, j % p, g) + (size_t)(j / p) * m * es,
                             chorus__seg_n(b->cnt[j], m, (int)k) * es, nt);
        }
        chorus__shm_end_chunk(s, g);
    }
    s->g += nch;
    return CHORUS_OK;
}

chorus_result chorus__allgather_shm(chorus_comm *c, const chorus_coll_args *a)
{
    /* Bytes as the element: blocks of a->bytes at rank * a->bytes. */
    int p = c->shm->size;
    size_t *v = malloc(sizeof(size_t) * 2 * (size_t)p);
    if (!v) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "allgather: out of memory");
    for (int j = 0; j < p; j++) {
        v[j] = (size_t)j * a->bytes;
        v[p + j] = a->bytes;
    }
    chorus_shm_blocks b = {p, v, v + p, NULL, a->count};
    c->shm->what = "allgather";
    chorus_result r = chorus__shm_allgather_blocks(
        c, &b, a->recv, 1, chorus__shm_sig(CHORUS_COLL_ALLGATHER, (int)a->t, 0, 1, 0));
    free(v);
    return r;
}
