/*
 * allreduce_hier.c - allreduce across hosts: shared memory within a host, TCP between hosts.
 * The buffer is cut into nslice slices (the most ranks on one host); on a host of n ranks,
 * slice j belongs to local rank j mod n (a host with fewer ranks gives some of them several).
 *
 *   1. within each host, a reduce-scatter over shared memory: the owner of slice j folds the
 *      host's inputs of slice j in rank order;
 *   2. across hosts, the owners of slice j (one per host) allreduce it over TCP, folding the
 *      host partials in host order; slices with different owners cross the links at once;
 *   3. within each host, an allgather of the slices over shared memory.
 *
 * Small slices (up to CHORUS_TCP_ONESHOT_MAX bytes) take the three steps once, step 2 one-shot.
 * Larger ones go in rounds, a piece of every slice per round (4 TCP segments), pipelined so
 * that the link never waits for shared memory: in round k a host reduces piece k over shared
 * memory and sends each other host its part of it (a direct reduce-scatter), while piece k-1's
 * parts, received meanwhile, are folded and sent back to every host (the allgather) and piece
 * k-2, complete, is copied out to the host's ranks. Sends are handed to the kernel at once, so
 * bytes cross the link while the ranks work in shared memory.
 *
 * Each host's link carries 2(h-1)/h of the buffer each way for h hosts (the flat algorithms
 * over all p ranks carry more: every rank's slice to and from every other host). The fold is
 * ((x_a + x_a+1) + ...) within each host, then the host partials in host order, for every
 * element alike: the same bits on every rank and every run, equal to the flat algorithms'
 * rank-order fold when every host has one rank (or the reduction is exact).
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

enum { PIECE_SEGMENTS = 4 };

/* One call: the slices, this host's shared memory, the pieces of a round. */
typedef struct hier_call {
    chorus_comm *c;
    const chorus_coll_args *a;
    chorus_hier *h;
    size_t es;
    size_t *v;       /* off[nslice], cnt[nslice] of the slices */
    size_t *round;   /* off[nslice], cnt[nslice] of this round's pieces */
    size_t piece;    /* elements of a slice per round */
    int nown, hn;    /* slices this rank owns, hosts */
    chorus_coll *x;  /* [nown]: the exchange on each owned slice's group */
    int *own;        /* [nown]: the slices */
    chorus_req *req; /* [2 phases][2 parities][nown][2 (h-1)] */
    char *tmp;       /* [2 parities][nown][h-1] received parts, `part` elements each */
    size_t part;
} hier_call;

/* Step 1 or 3 inside this host for blocks b (nothing to do for a host of one rank, but the
 * copy of its input). */
static chorus_result within_host(hier_call *q, const chorus_shm_blocks *b, int gather)
{
    chorus_comm *local = q->h->local;
    const chorus_coll_args *a = q->a;
    if (local->size == 1) {
        for (int j = 0; !gather && a->send != a->recv && j < b->n; j++)
            memcpy((char *)a->recv + b->off[j] * q->es, (const char *)a->send + b->off[j] * q->es,
                   b->cnt[j] * q->es);
        return CHORUS_OK;
    }
    local->shm->what = "allreduce";
    uint64_t sig = chorus__shm_sig(CHORUS_COLL_ALLREDUCE, (int)a->t, (int)a->op, 2 + gather, 0);
    chorus_result r =
        gather ? chorus__shm_allgather_blocks(local, b, a->recv, q->es, sig)
               : chorus__shm_reduce_scatter_blocks(local, b, a->send, a->recv, a->t, a->op, 0, sig);
    return chorus__coll_sub_fail(q->c, local, r);
}

/* The pieces of round k of every slice, as blocks. */
static chorus_shm_blocks round_blocks(hier_call *q, int k)
{
    int ns = q->h->nslice;
    for (int j = 0; j < ns; j++) {
        q->round[j] = q->v[j] + chorus__seg_lo(q->v[ns + j], q->piece, k);
        q->round[ns + j] = chorus__seg_n(q->v[ns + j], q->piece, k);
    }
    return (chorus_shm_blocks){ns, q->round, q->round + ns, NULL, q->a->count};
}

/* Host i's part of round k's piece of owned slice s: *lo (buffer offset) and *n elements. */
static void part_of(const hier_call *q, int s, int k, int i, size_t *lo, size_t *n)
{
    int j = q->own[s];
    size_t ns = (size_t)q->h->nslice, cnt = q->v[ns + j];
    size_t plo = chorus__seg_lo(cnt, q->piece, k), pn = chorus__seg_n(cnt, q->piece, k);
    *lo = q->v[j] + plo + chorus__chunk_off(pn, q->hn, i);
    *n = chorus__chunk_cnt(pn, q->hn, i);
}

static chorus_req *reqs(hier_call *q, int phase, int k, int s)
{
    return q->req + ((size_t)((phase * 2 + (k & 1)) * q->nown + s) * 2 * (size_t)(q->hn - 1));
}

static char *tmp_part(hier_call *q, int k, int s, int i)
{
    return q->tmp +
           ((size_t)((k & 1) * q->nown + s) * (size_t)(q->hn - 1) + (size_t)i) * q->part * q->es;
}

/* Posts round k's phase: 0 sends every other host its part of this host's partial and
 * receives theirs of this host's part; 1 sends this host's final part and receives theirs. */
static void post(hier_call *q, int phase, int k)
{
    char *buf = q->a->recv;
    for (int s = 0; s < q->nown; s++) {
        chorus_coll *x = &q->x[s];
        int me = x->c->rank, t = 2 * k + phase;
        chorus_req *r = reqs(q, phase, k, s);
        size_t mlo, mn, lo, n;
        part_of(q, s, k, me, &mlo, &mn);
        for (int i = 0, o = 0; i < q->hn; i++) {
            if (i == me) continue;
            part_of(q, s, k, i, &lo, &n);
            if (phase == 0) {
                chorus__coll_irecv(x, &r[2 * o], i, t, tmp_part(q, k, s, o), mn * q->es);
                chorus__coll_isend(x, &r[2 * o + 1], i, t, buf + lo * q->es, n * q->es);
            } else {
                chorus__coll_irecv(x, &r[2 * o], i, t, buf + lo * q->es, n * q->es);
                chorus__coll_isend(x, &r[2 * o + 1], i, t, buf + mlo * q->es, mn * q->es);
            }
            o++;
        }
    }
}

static chorus_result wait_phase(hier_call *q, int phase, int k)
{
    int n = 2 * (q->hn - 1);
    chorus_req **rp = malloc(sizeof(chorus_req *) * (size_t)n);
    if (!rp) return chorus__fail(&q->c->err, CHORUS_ERR_NOMEM, "allreduce: out of memory");
    chorus_result r = CHORUS_OK;
    for (int s = 0; s < q->nown && r == CHORUS_OK; s++) {
        chorus_req *base = reqs(q, phase, k, s);
        for (int i = 0; i < n; i++) rp[i] = &base[i];
        r = chorus__coll_sub_fail(q->c, q->x[s].c, chorus__coll_wait(&q->x[s], rp, n));
    }
    free(rp);
    return r;
}

/* Round k's own parts, every host's partial received: fold them in host order. */
static void fold(hier_call *q, int k)
{
    const chorus_coll_args *a = q->a;
    chorus_op op = a->op;
    for (int s = 0; s < q->nown; s++) {
        int me = q->x[s].c->rank;
        size_t lo, n;
        part_of(q, s, k, me, &lo, &n);
        char *mine = (char *)a->recv + lo * q->es;
        /* host 0's partial, then each next host's folded in; the last fold lands in mine
         * (until then this rank's own partial must stay as it is) */
        char *acc = me == 0 ? mine : tmp_part(q, k, s, 0);
        for (int i = 1; i < q->hn; i++) {
            const char *next = i == me ? mine : tmp_part(q, k, s, i < me ? i : i - 1);
            chorus__reduce(i == q->hn - 1 ? mine : acc, acc, next, n, a->t, op);
        }
        chorus__reduce_finish(mine, n, a->t, op, q->c->size);
    }
}

/* The rounds: every iteration starts one and moves the two before it along. */
static chorus_result pipelined(hier_call *q)
{
    int ns = q->h->nslice, nr = (int)((q->v[ns] + q->piece - 1) / q->piece); /* v[ns]: largest */
    chorus_result r = CHORUS_OK;
    for (int k = 0; k < nr + 2 && r == CHORUS_OK; k++) {
        if (k < nr) {
            chorus_shm_blocks b = round_blocks(q, k);
            r = within_host(q, &b, 0);
            if (r == CHORUS_OK) post(q, 0, k);
        }
        if (r == CHORUS_OK && k >= 1 && k - 1 < nr) {
            r = wait_phase(q, 0, k - 1);
            if (r == CHORUS_OK) {
                fold(q, k - 1);
                post(q, 1, k - 1);
            }
        }
        if (r == CHORUS_OK && k >= 2) {
            r = wait_phase(q, 1, k - 2);
            chorus_shm_blocks b = round_blocks(q, k - 2);
            if (r == CHORUS_OK) r = within_host(q, &b, 1);
        }
    }
    return r;
}

/* Small slices: the three steps once, one-shot across hosts. */
static chorus_result oneshot(hier_call *q)
{
    const chorus_coll_args *a = q->a;
    chorus_shm_blocks b = {q->h->nslice, q->v, q->v + q->h->nslice, NULL, a->count};
    chorus_result r = within_host(q, &b, 0);
    for (int s = 0; s < q->nown && r == CHORUS_OK; s++) {
        int j = q->own[s];
        char *at = (char *)a->recv + b.off[j] * q->es;
        /* CHORUS_AVG sums across hosts and divides once, by every rank of c. */
        chorus_coll_args sa = {.send = at,
                               .recv = at,
                               .count = b.cnt[j],
                               .bytes = b.cnt[j] * q->es,
                               .t = a->t,
                               .op = a->op == CHORUS_AVG ? CHORUS_SUM : a->op};
        if (!sa.count) continue;
        r = chorus__coll_sub_fail(q->c, q->h->slice[j],
                                  chorus__allreduce_oneshot(q->h->slice[j], &sa));
        if (r == CHORUS_OK) chorus__reduce_finish(at, sa.count, a->t, a->op, q->c->size);
    }
    if (r == CHORUS_OK) r = within_host(q, &b, 1);
    return r;
}

chorus_result chorus__allreduce_hier(chorus_comm *c, const chorus_coll_args *a)
{
    chorus_hier *h = c->hier;
    hier_call q = {.c = c, .a = a, .h = h, .es = chorus_dtype_size(a->t), .hn = h->nhosts};
    int ns = h->nslice, me_local = c->rank - h->lo[h->me], n_local = h->n[h->me];
    q.nown = (ns - me_local + n_local - 1) / n_local;
    q.v = chorus__chunks(a->count, ns);
    q.round = malloc(sizeof(size_t) * 2 * (size_t)ns);
    q.own = malloc(sizeof(int) * (size_t)q.nown);
    chorus_result r = CHORUS_OK;
    if (!q.v || !q.round || !q.own) {
        r = chorus__fail(&c->err, CHORUS_ERR_NOMEM, "allreduce: out of memory");
        goto out;
    }
    for (int s = 0; s < q.nown; s++) q.own[s] = me_local + s * n_local;
    if (q.v[ns] * q.es <= c->cfg.tcp_oneshot_max) { /* v[ns]: the largest slice */
        r = oneshot(&q);
        goto out;
    }
    q.piece = c->cfg.tcp_segment * PIECE_SEGMENTS / q.es;
    if (q.piece < 64) q.piece = 64;
    q.part = q.piece / (size_t)q.hn + 1;
    q.x = calloc((size_t)q.nown, sizeof(chorus_coll));
    q.req = calloc((size_t)(4 * q.nown * 2 * (q.hn - 1)), sizeof(chorus_req));
    q.tmp = chorus__comm_scratch(c, 2 * (size_t)q.nown * (size_t)(q.hn - 1) * q.part * q.es);
    if (!q.x || !q.req || !q.tmp) {
        r = chorus__fail(&c->err, CHORUS_ERR_NOMEM, "allreduce: out of memory");
        goto out;
    }
    for (int s = 0; s < q.nown; s++)
        chorus__coll_begin(&q.x[s], h->slice[q.own[s]], CHORUS_COLL_ALLREDUCE, a->t, a->op,
                           a->count);
    r = pipelined(&q);
out:
    free(q.v);
    free(q.round);
    free(q.own);
    free(q.x);
    free(q.req);
    return r;
}
