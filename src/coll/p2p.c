/*
 * p2p.c - point-to-point messages: chorus_isend/chorus_irecv and the requests they return
 * (wait, test, waitall, waitany), probe, and the blocking chorus_send/chorus_recv on the same
 * path, over the communicator's message transport (transport.h). Matching (any source, any tag,
 * the order of messages) lives in the transport (TCP: transport/tcp/match.c); this file checks
 * arguments, translates ranks of the communicator to ranks of the world and back, and turns what
 * the transport reports into results and messages.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"

#define REQUEST_MAGIC 0x43503250u /* "P2PC": a live request */

struct chorus_request {
    uint32_t magic;
    chorus_comm *c;
    chorus_req r;
    int peer; /* rank in c, or CHORUS_ANY_SOURCE */
    int tag;  /* or CHORUS_ANY_TAG */
    chorus_dtype t;
    size_t count;
};

#define BAD(e, ...) chorus__fail(e, CHORUS_ERR_INVALID_ARG, __VA_ARGS__)

/* Rank in c of world rank w (-1 if w is not in c). */
static int comm_rank_of(const chorus_comm *c, int w)
{
    for (int i = 0; i < c->size; i++)
        if (c->world[i] == w) return i;
    return -1;
}

/* A failure that broke the communicator: ranks waiting in shared memory learn it at once, and
 * the communicator's detail is the net's. */
static chorus_result broke(chorus_comm *c, chorus_result r)
{
    chorus__comm_break_failed(c, r);
    return r;
}

static void describe_tag(int tag, char *out, size_t len)
{
    if (tag == CHORUS_ANY_TAG)
        snprintf(out, len, "any tag");
    else
        snprintf(out, len, "tag %d", tag);
}

/* Checks what isend, irecv and probe share; any: CHORUS_ANY_SOURCE/CHORUS_ANY_TAG allowed. */
static chorus_result check_peer_tag(chorus_comm *c, const char *fn, int peer, int tag, int any)
{
    if (any && peer == CHORUS_ANY_SOURCE) {
        if (c->size < 2)
            return BAD(&c->err,
                       "%s: CHORUS_ANY_SOURCE on a communicator of one rank: no rank "
                       "can send to it",
                       fn);
    } else if (peer < 0 || peer >= c->size || peer == c->rank) {
        return BAD(&c->err,
                   "%s: peer %d is not another rank of this communicator (size %d, rank %d%s)", fn,
                   peer, c->size, c->rank, any ? "; CHORUS_ANY_SOURCE is -1" : "");
    }
    if (tag < 0 && !(any && tag == CHORUS_ANY_TAG))
        return BAD(&c->err, "%s: tag %d is negative%s", fn, tag,
                   any ? " (CHORUS_ANY_TAG is -1)" : "");
    return CHORUS_OK;
}

/* Checks the arguments of a send or receive and fills the header it carries or expects. */
static chorus_result check_args(chorus_comm *c, const char *fn, const void *buf, size_t count,
                                chorus_dtype t, int peer, int tag, int is_send, chorus_wire_hdr *h)
{
    if ((unsigned)t >= CHORUS_DTYPE_COUNT) return BAD(&c->err, "%s: unknown dtype %d", fn, (int)t);
    CHORUS_CHECK(check_peer_tag(c, fn, peer, tag, !is_send));
    size_t bytes;
    if (chorus__mul_overflow(count, chorus_dtype_size(t), &bytes) || bytes > (size_t)1 << 62)
        return BAD(&c->err, "%s: count %zu of %s overflows the addressable size", fn, count,
                   chorus__dtype_name((int)t));
    if (count && !buf) return BAD(&c->err, "%s: NULL buffer with count %zu", fn, count);
    CHORUS_CHECK(chorus__tp_error(&c->net, NULL, &c->err));
    *h = (chorus_wire_hdr){.type = CHORUS_MSG_P2P,
                           .comm_id = c->id,
                           .tag = tag,
                           .coll = (uint32_t)t << 8,
                           .count = count,
                           .len = bytes};
    return CHORUS_OK;
}

/* Checks and posts a send or receive into rq (owned by the caller). */
static chorus_result post(chorus_comm *c, const char *fn, chorus_request *rq, void *buf,
                          size_t count, chorus_dtype t, int peer, int tag, int is_send)
{
    chorus_wire_hdr h;
    CHORUS_CHECK(check_args(c, fn, buf, count, t, peer, tag, is_send, &h));
    *rq = (chorus_request){
        .magic = REQUEST_MAGIC, .c = c, .peer = peer, .tag = tag, .t = t, .count = count};
    int w = peer == CHORUS_ANY_SOURCE ? CHORUS__NET_ANY : c->world[peer];
    if (is_send)
        chorus__tp_isend(&c->net, &rq->r, w, &h, buf);
    else
        chorus__tp_irecv(&c->net, &rq->r, w, &h, buf);
    return CHORUS_OK;
}

/* A receive failed on a message that does not fit: say what each side had. */
static chorus_result mismatch(chorus_request *rq)
{
    chorus_comm *c = rq->c;
    const chorus_wire_hdr *g = &rq->r.got;
    char from[48], tag[32];
    describe_tag(rq->tag, tag, sizeof(tag));
    if (rq->peer == CHORUS_ANY_SOURCE)
        snprintf(from, sizeof(from), "any rank");
    else
        snprintf(from, sizeof(from), "rank %d", rq->peer);
    return chorus__fail(&c->err, CHORUS_ERR_MISMATCH,
                        "mismatched send/recv: rank %d sent %llu %s with tag %d, but rank %d "
                        "posted a receive of up to %zu %s from %s with %s (a receive needs "
                        "the sender's dtype and room for its count)",
                        comm_rank_of(c, rq->r.src), (unsigned long long)g->count,
                        chorus__dtype_name((int)((g->coll >> 8) & 0xff)), g->tag, c->rank,
                        rq->count, chorus__dtype_name((int)rq->t), from, tag);
}

/* The result of a request that the transport reports complete (done) or never will be (the
 * communicator broke with net_res), with its status. Does not free it. */
static chorus_result finish(chorus_request *rq, int done, chorus_result net_res,
                            chorus_status *status)
{
    chorus_comm *c = rq->c;
    const chorus_req *r = &rq->r;
    chorus_result res = done ? r->res : net_res;
    int lost = 0;
    if (res == CHORUS_ERR_MISMATCH) {
        mismatch(rq);
    } else if (res == CHORUS_ERR_PEER_LOST && chorus__tp_error(&c->net, NULL, NULL) == CHORUS_OK) {
        chorus__tp_loss_detail(&c->net, &c->err); /* an expendable rank: c goes on */
        lost = 1;
    } else if (res != CHORUS_OK) {
        chorus__tp_error(&c->net, NULL, &c->err); /* what broke the communicator */
        broke(c, res);
    }
    if (status) {
        /* a message matched (and arrived, or was refused): its source, tag, count, dtype */
        int got = !r->is_send && r->got.type == CHORUS_MSG_P2P &&
                  (res == CHORUS_OK || res == CHORUS_ERR_MISMATCH);
        status->source =
            got || (lost && rq->peer == CHORUS_ANY_SOURCE) ? comm_rank_of(c, r->src) : rq->peer;
        status->tag = got ? r->got.tag : rq->tag;
        status->count = got ? (size_t)r->got.count : r->is_send && res == CHORUS_OK ? rq->count : 0;
        status->dtype = got ? (chorus_dtype)((r->got.coll >> 8) & 0xff) : rq->t;
        status->result = res;
    }
    return res;
}

static void release(chorus_request *rq)
{
    rq->magic = 0;
    free(rq);
}

/* Checks a request handed in by the user. */
static chorus_result check_req(const chorus_request *rq, const char *fn)
{
    if (!rq) return BAD(chorus__init_errbuf(), "%s: request is NULL", fn);
    if (rq->magic != REQUEST_MAGIC)
        return BAD(chorus__init_errbuf(),
                   "%s: not a live request (already completed and freed by a wait or test?)", fn);
    return CHORUS_OK;
}

/* Waits for rq (not freed). */
static chorus_result wait_one(chorus_request *rq, chorus_status *status)
{
    chorus_req *r = &rq->r;
    chorus_result nr = chorus__tp_wait(&rq->c->net, &r, 1, 1, chorus__timeout_s(), &rq->c->err);
    return finish(rq, r->done, nr, status);
}

#define NULL_COMM(fn)                                                                              \
    if (!c) return BAD(chorus__init_errbuf(), "%s: comm is NULL", fn)
#define NULL_REQ(fn)                                                                               \
    if (!req) return BAD(&c->err, "%s: req (where the request is returned) is NULL", fn)

chorus_result chorus_isend(chorus_comm *c, const void *buf, size_t count, chorus_dtype t, int peer,
                           int tag, chorus_request **req)
{
    NULL_COMM("chorus_isend");
    NULL_REQ("chorus_isend");
    *req = NULL;
    chorus_request *rq = malloc(sizeof(*rq));
    if (!rq) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "chorus_isend: out of memory");
    chorus_result res = post(c, "chorus_isend", rq, (void *)buf, count, t, peer, tag, 1);
    if (res != CHORUS_OK)
        free(rq);
    else
        *req = rq;
    return res;
}

chorus_result chorus_irecv(chorus_comm *c, void *buf, size_t count, chorus_dtype t, int peer,
                           int tag, chorus_request **req)
{
    NULL_COMM("chorus_irecv");
    NULL_REQ("chorus_irecv");
    *req = NULL;
    chorus_request *rq = malloc(sizeof(*rq));
    if (!rq) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "chorus_irecv: out of memory");
    chorus_result res = post(c, "chorus_irecv", rq, buf, count, t, peer, tag, 0);
    if (res != CHORUS_OK)
        free(rq);
    else
        *req = rq;
    return res;
}

chorus_result chorus_wait(chorus_request *req, chorus_status *status)
{
    CHORUS_CHECK(check_req(req, "chorus_wait"));
    chorus_result res = wait_one(req, status);
    release(req);
    return res;
}

chorus_result chorus_test(chorus_request *req, int *done, chorus_status *status)
{
    CHORUS_CHECK(check_req(req, "chorus_test"));
    if (!done) return BAD(&req->c->err, "chorus_test: done is NULL");
    chorus_comm *c = req->c;
    int st = chorus__tp_test(&c->net, &req->r, &c->err);
    *done = st != 0;
    if (!st) return CHORUS_OK;
    chorus_result res = finish(req, st > 0, chorus__tp_error(&c->net, NULL, NULL), status);
    release(req);
    return res;
}

chorus_result chorus_waitall(int n, chorus_request **reqs, chorus_status *statuses)
{
    if (n < 0 || (n > 0 && !reqs))
        return BAD(chorus__init_errbuf(), "chorus_waitall: %s",
                   n < 0 ? "n is negative" : "reqs is NULL");
    for (int i = 0; i < n; i++)
        if (reqs[i]) CHORUS_CHECK(check_req(reqs[i], "chorus_waitall"));
    /* One at a time: the transport moves every request while it waits for any, so this takes
     * as long as waiting for all at once, and each wait has its own deadline. */
    chorus_result first = CHORUS_OK;
    for (int i = 0; i < n; i++) {
        chorus_status st = {.source = CHORUS_ANY_SOURCE, .tag = CHORUS_ANY_TAG};
        if (reqs[i]) {
            chorus_result res = wait_one(reqs[i], &st);
            release(reqs[i]);
            reqs[i] = NULL;
            if (first == CHORUS_OK) first = res;
        }
        if (statuses) statuses[i] = st;
    }
    return first;
}

chorus_result chorus_waitany(int n, chorus_request **reqs, int *index, chorus_status *status)
{
    if (n < 0 || (n > 0 && !reqs) || !index)
        return BAD(chorus__init_errbuf(), "chorus_waitany: %s",
                   n < 0    ? "n is negative"
                   : !index ? "index is NULL"
                            : "reqs is NULL");
    *index = -1;
    chorus_req **rs = malloc(sizeof(*rs) * (size_t)(n ? n : 1));
    int *at = malloc(sizeof(*at) * (size_t)(n ? n : 1));
    if (!rs || !at) {
        free(rs);
        free(at);
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_NOMEM,
                            "chorus_waitany: out of memory");
    }
    chorus_result res = CHORUS_OK;
    const chorus_transport *net = NULL;
    int k = 0;
    for (int i = 0; i < n && res == CHORUS_OK; i++) {
        if (!reqs[i]) continue;
        res = check_req(reqs[i], "chorus_waitany");
        if (res == CHORUS_OK && net && reqs[i]->c->net.self != net->self)
            res = BAD(chorus__init_errbuf(), "chorus_waitany: the requests belong to "
                                             "communicators of different chorus_init calls");
        net = res == CHORUS_OK ? &reqs[i]->c->net : net;
        rs[k] = &reqs[i]->r;
        at[k++] = i;
    }
    if (res == CHORUS_OK && k > 0) {
        chorus_comm *c = reqs[at[0]]->c;
        chorus_result nr = chorus__tp_wait(net, rs, k, 1, chorus__timeout_s(), &c->err);
        int j = 0; /* the first done, else (the communicator broke) the first */
        while (j < k && !rs[j]->done) j++;
        if (j == k) j = 0;
        chorus_request *rq = reqs[at[j]];
        res = finish(rq, rs[j]->done, nr, status);
        release(rq);
        reqs[at[j]] = NULL;
        *index = at[j];
    }
    free(rs);
    free(at);
    return res;
}

static chorus_result probe(chorus_comm *c, const char *fn, int source, int tag, double tmo,
                           int *flag, chorus_status *status)
{
    CHORUS_CHECK(check_peer_tag(c, fn, source, tag, 1));
    CHORUS_CHECK(chorus__tp_error(&c->net, NULL, &c->err));
    int found, src;
    chorus_wire_hdr h;
    int w = source == CHORUS_ANY_SOURCE ? CHORUS__NET_ANY : c->world[source];
    chorus_result res = chorus__tp_probe(&c->net, c->id, w, tag, tmo, &found, &h, &src, &c->err);
    if (res != CHORUS_OK) return broke(c, res);
    if (flag) *flag = found;
    if (found && status)
        *status = (chorus_status){.source = comm_rank_of(c, src),
                                  .tag = h.tag,
                                  .count = (size_t)h.count,
                                  .dtype = (chorus_dtype)((h.coll >> 8) & 0xff),
                                  .result = CHORUS_OK};
    return CHORUS_OK;
}

chorus_result chorus_probe(chorus_comm *c, int source, int tag, chorus_status *status)
{
    NULL_COMM("chorus_probe");
    if (!status) return BAD(&c->err, "chorus_probe: status is NULL");
    return probe(c, "chorus_probe", source, tag, chorus__timeout_s(), NULL, status);
}

chorus_result chorus_iprobe(chorus_comm *c, int source, int tag, int *flag, chorus_status *status)
{
    NULL_COMM("chorus_iprobe");
    if (!flag || !status)
        return BAD(&c->err, "chorus_iprobe: %s is NULL", flag ? "status" : "flag");
    return probe(c, "chorus_iprobe", source, tag, 0, flag, status);
}

chorus_result chorus_send(chorus_comm *c, const void *buf, size_t count, chorus_dtype t, int peer,
                          int tag)
{
    NULL_COMM("chorus_send");
    chorus_request rq;
    CHORUS_CHECK(post(c, "chorus_send", &rq, (void *)buf, count, t, peer, tag, 1));
    return wait_one(&rq, NULL);
}

chorus_result chorus_recv(chorus_comm *c, void *buf, size_t count, chorus_dtype t, int peer,
                          int tag)
{
    NULL_COMM("chorus_recv");
    chorus_request rq;
    chorus_status st;
    CHORUS_CHECK(post(c, "chorus_recv", &rq, buf, count, t, peer, tag, 0));
    CHORUS_CHECK(wait_one(&rq, &st));
    if (st.count == count) return CHORUS_OK;
    return chorus__fail(&c->err, CHORUS_ERR_MISMATCH,
                        "mismatched send/recv: rank %d sent %zu %s with tag %d, but chorus_recv "
                        "on rank %d expected exactly %zu (chorus_irecv takes shorter messages "
                        "and tells their count)",
                        st.source, st.count, chorus__dtype_name((int)st.dtype), st.tag, c->rank,
                        count);
}
