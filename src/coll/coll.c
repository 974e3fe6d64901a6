/*
 * coll.c - what the collective algorithms share: the context of one call (its header
 * template, with the communicator's next sequence number), posting sends and receives in
 * communicator ranks, waiting with a deadline, the scratch buffer, chunks and segments.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

void chorus__coll_begin(chorus_coll *x, chorus_comm *c, int kind, chorus_dtype t, chorus_op op,
                        size_t count)
{
    x->c = c;
    memset(&x->h, 0, sizeof(x->h));
    x->h.type = CHORUS_MSG_COLL;
    x->h.comm_id = c->id;
    x->h.coll = chorus__coll_sig(kind, (int)t, (int)op);
    x->h.seq = ++c->seq;
    x->h.count = count;
}

void chorus__coll_isend(chorus_coll *x, chorus_req *r, int peer, int tag, const void *buf,
                        size_t bytes)
{
    chorus_wire_hdr h = x->h;
    h.tag = tag;
    h.len = bytes;
    chorus__tp_isend(&x->c->net, r, x->c->world[peer], &h, buf);
}

void chorus__coll_irecv(chorus_coll *x, chorus_req *r, int peer, int tag, void *buf, size_t bytes)
{
    chorus_wire_hdr h = x->h;
    h.tag = tag;
    h.len = bytes;
    chorus__tp_irecv(&x->c->net, r, x->c->world[peer], &h, buf);
}

chorus_result chorus__coll_wait(chorus_coll *x, chorus_req *const *reqs, int n)
{
    /* The timeout runs from the last byte any of the requests moved, so a large or slow
     * transfer that keeps moving never times out; a stall does. */
    CHORUS_CHECK(chorus__tp_wait(&x->c->net, reqs, n, n, chorus__timeout_s(), &x->c->err));
    for (int i = 0; i < n; i++)
        if (reqs[i]->res != CHORUS_OK) return reqs[i]->res;
    return CHORUS_OK;
}

chorus_result chorus__coll_wait1(chorus_coll *x, chorus_req *r)
{
    return chorus__coll_wait(x, &r, 1);
}

void *chorus__comm_scratch(chorus_comm *c, size_t n)
{
    if (n <= c->scratch_cap) return c->scratch;
    free(c->scratch);
    c->scratch = chorus__malloc_aligned(n);
    c->scratch_cap = c->scratch ? n : 0;
    return c->scratch;
}

size_t *chorus__chunks(size_t count, int n)
{
    size_t *off = malloc(sizeof(size_t) * 2 * (size_t)n);
    for (int i = 0; off && i < n; i++) {
        off[i] = chorus__chunk_off(count, n, i);
        off[n + i] = chorus__chunk_cnt(count, n, i);
    }
    return off;
}

void chorus__segments(const chorus_comm *c, size_t max_cnt, size_t esize, size_t *seg_cnt,
                      int *nseg)
{
    size_t seg_bytes = c->cfg.tcp_segment;
    if (seg_bytes < 4096) seg_bytes = 4096;
    size_t per = seg_bytes / esize;
    size_t n = max_cnt ? (max_cnt + per - 1) / per : 1;
    *nseg = (int)n;
    *seg_cnt = (max_cnt + n - 1) / n;
}

/* Over TCP: dissemination (in round k every rank sends a header to r + 2^k and waits for the
 * one from r - 2^k). A rank finishes only after hearing, directly or through others, from
 * every rank, and the first rank that receives a differing header stops forwarding, so no
 * rank can finish past a difference: each one either sees it or gets the abort. */
static chorus_result agree_net(chorus_comm *c, int kind, chorus_dtype t, int op, size_t count)
{
    int n = c->size;
    chorus_coll x;
    chorus__coll_begin(&x, c, kind, t, (chorus_op)op, count);
    chorus_result r = CHORUS_OK;
    for (int k = 1, round = 0; k < n && r == CHORUS_OK; k <<= 1, round++) {
        chorus_req rq[2];
        chorus_req *ps[2] = {&rq[0], &rq[1]};
        chorus__coll_irecv(&x, &rq[0], chorus__mod(c->rank - k, n), round, NULL, 0);
        chorus__coll_isend(&x, &rq[1], (c->rank + k) % n, round, NULL, 0);
        r = chorus__coll_wait(&x, ps, 2);
    }
    return r;
}

/* Over shared memory: every rank posts its signature with its IN flag for one chunk and
 * checks everyone else's. */
static chorus_result agree_shm(chorus_comm *c, const char *what, int kind, chorus_dtype t, int op,
                               int root, size_t count)
{
    chorus_shm *s = c->shm;
    s->what = what;
    uint64_t g = s->g++, sig = chorus__shm_sig(kind, (int)t, op, 1, root);
    CHORUS_CHECK(chorus__shm_wait_slot(s, g, &c->err));
    chorus__shm_post_in(s, g, sig, count);
    CHORUS_CHECK(chorus__shm_wait_in(s, g, sig, count, &c->err));
    chorus__shm_end_chunk(s, g);
    return CHORUS_OK;
}

chorus_result chorus__coll_agree(chorus_comm *c, int over_shm, const char *what, int kind,
                                 chorus_dtype t, chorus_op op, int root, size_t count)
{
    if (over_shm) return agree_shm(c, what, kind, t, (int)op, root, count);
    return agree_net(c, kind, t, kind == CHORUS_COLL_BROADCAST ? root : (int)op, count);
}

chorus_result chorus__coll_sub_fail(chorus_comm *c, chorus_comm *sub, chorus_result r)
{
    if (r == CHORUS_OK) return r;
    chorus__shm_abort(sub->shm, -1, r, sub->err.msg[0] ? sub->err.msg : chorus_strerror(r));
    return chorus__fail(&c->err, r, "%s", sub->err.msg);
}
