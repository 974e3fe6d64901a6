/*
 * match.c - which receive takes which message. Collective messages of one communicator from
 * one peer form a stream in send order: the first collective receive posted for it takes the
 * stream's head, and a head that differs from what the receive expects is a mismatch of calls
 * that breaks the net, naming both. Point-to-point messages match on communicator, source and
 * tag as in MPI (net.h), in posting order; one that does not fit fails only its receive.
 */
#include <stdio.h>
#include <string.h>

#include "transport/tcp/net_internal.h"

/* Does a message with header h belong to the same stream as receive r? Collective messages
 * of one communicator arrive in the order they were sent, so the first collective receive
 * posted for that communicator is the one; point-to-point messages also match the tag. */
int tcp_same_stream(const chorus_wire_hdr *h, const chorus_wire_hdr *want)
{
    if (h->type != want->type || h->comm_id != want->comm_id) return 0;
    return h->type == CHORUS_MSG_COLL || h->tag == want->tag;
}

/* Checks the stream head h against what receive r expects; on mismatch fails r and breaks. */
int tcp_check_match(chorus_net *n, int p, const chorus_wire_hdr *h, chorus_req *r)
{
    const chorus_wire_hdr *w = &r->h;
    int ok = h->len == w->len;
    if (h->type == CHORUS_MSG_COLL)
        ok = ok && h->tag == w->tag && h->coll == w->coll && h->seq == w->seq &&
             h->count == w->count;
    if (ok) return 1;
    char got[160], want[160], diff[160] = "", why[480];
    chorus__wire_describe(h, got, sizeof(got));
    chorus__wire_describe(w, want, sizeof(want));
    if (h->type == CHORUS_MSG_COLL) {
        chorus_call_sig a = chorus__wire_call_sig(h), b = chorus__wire_call_sig(w);
        chorus__call_diff(&a, p, &b, n->rank, diff, sizeof(diff) - 2);
        if (diff[0]) strcat(diff, ": ");
    }
    snprintf(why, sizeof(why), "mismatched calls: %srank %d sent %s, rank %d expected %s", diff, p,
             got, n->rank, want);
    r->res = CHORUS_ERR_MISMATCH;
    r->done = 1;
    tcp_break_locked(n, -1, CHORUS_ERR_MISMATCH, why, why);
    return 0;
}

/* ---- point-to-point matching ------------------------------------------------------------ */

/* Would a receive of communicator comm_id with tag (or CHORUS__NET_ANY) take message h? */
static int p2p_match(const chorus_wire_hdr *h, uint64_t comm_id, int tag)
{
    return h->type == CHORUS_MSG_P2P && h->comm_id == comm_id &&
           (tag == CHORUS__NET_ANY || h->tag == tag);
}

/* The first message from p that no receive has claimed and that matches, or NULL. */
static umsg *p2p_find_from(peer *pe, uint64_t comm_id, int tag)
{
    for (umsg *u = pe->uq_head; u; u = u->next)
        if (!u->waiter && !u->dropped && p2p_match(&u->h, comm_id, tag)) return u;
    return NULL;
}

/* The same from peer, or from any peer: with rotate, the search starts after the sender found
 * last, so that no sender starves. *src is the sender. Messages of one sender are found in the
 * order they arrived. */
umsg *tcp_p2p_find(chorus_net *n, int peer_rank, uint64_t comm_id, int tag, int *src, int rotate)
{
    if (peer_rank != CHORUS__NET_ANY) {
        *src = peer_rank;
        return p2p_find_from(&n->peers[peer_rank], comm_id, tag);
    }
    for (int i = 0; i < n->size; i++) {
        int p = (n->any_next + i) % n->size;
        umsg *u = p == n->rank ? NULL : p2p_find_from(&n->peers[p], comm_id, tag);
        if (u) {
            if (rotate) n->any_next = (p + 1) % n->size;
            *src = p;
            return u;
        }
    }
    return NULL;
}

/* Does message h fit receive r: same dtype, no more elements than it has room for? */
static int p2p_fits(const chorus_wire_hdr *h, const chorus_req *r)
{
    return h->coll == r->h.coll && h->count <= r->h.count;
}

/* A message of r's dtype must be count elements of r's element size (r->len / r->h.count). */
static int p2p_sane(const chorus_wire_hdr *h, const chorus_req *r)
{
    return r->h.count ? h->len == h->count * (r->len / r->h.count) : h->len == 0;
}

/* Receive r (posted, with mu held) takes message h from world rank src. Returns 1 when the
 * payload is to land in r->buf, 0 when r failed with a mismatch (the payload is discarded),
 * -1 when the header lies about its payload: the net breaks, blaming src. */
int tcp_p2p_claim(chorus_net *n, chorus_req *r, const chorus_wire_hdr *h, int src)
{
    r->src = src;
    r->got = *h;
    if (!p2p_fits(h, r)) {
        r->res = CHORUS_ERR_MISMATCH;
        r->done = 1;
        return 0;
    }
    if (!p2p_sane(h, r)) {
        tcp_peer_lost(n, src,
                      "garbage on the connection: a point-to-point message whose length is not "
                      "its count of its dtype");
        r->res = n->broken;
        r->done = 1;
        return -1;
    }
    r->len = h->len;
    return 1;
}

/* Posts point-to-point receive r with mu held: it takes the earliest unclaimed message that
 * matches, else waits in its peer's queue (or the any-source queue) in posting order. */
static void p2p_post_locked(chorus_net *n, chorus_req *r)
{
    r->order = ++n->post_seq;
    int src;
    umsg *u = tcp_p2p_find(n, r->peer, r->h.comm_id, r->h.tag, &src, 1);
    if (u) {
        peer *pe = &n->peers[src];
        int fit = tcp_p2p_claim(n, r, &u->h, src);
        if (fit < 0) return;
        if (!fit) {
            if (u->complete) {
                tcp_umsgq_unlink(&pe->uq_head, &pe->uq_tail, u);
                tcp_umsg_free(u);
            } else {
                u->dropped = 1;
            }
        } else if (u->complete) {
            if (r->len) memcpy(r->buf, u->data, r->len);
            r->off = r->len;
            r->done = 1;
            tcp_umsgq_unlink(&pe->uq_head, &pe->uq_tail, u);
            tcp_umsg_free(u);
        } else {
            u->waiter = r;
        }
        return;
    }
    if (r->peer == CHORUS__NET_ANY && n->nlost_notice) { /* tell of a loss first */
        r->src = n->lost_notice[0];
        memmove(n->lost_notice, n->lost_notice + 1, (size_t)--n->nlost_notice * sizeof(int));
        tcp_fail_req(r);
        return;
    }
    if (r->peer != CHORUS__NET_ANY && n->peers[r->peer].lost) {
        tcp_fail_req(r);
        return;
    }
    chorus_req **head = &n->anyq_head, **tail = &n->anyq_tail;
    if (r->peer != CHORUS__NET_ANY) {
        head = &n->peers[r->peer].rq_head;
        tail = &n->peers[r->peer].rq_tail;
    }
    tcp_reqq_push(head, tail, r);
}

/* The earliest posted receive that takes message h from p (unlinked), or NULL. */
chorus_req *tcp_p2p_take_posted(chorus_net *n, int p, const chorus_wire_hdr *h)
{
    peer *pe = &n->peers[p];
    chorus_req *mine = NULL, *any = NULL;
    for (chorus_req *x = pe->rq_head; x && !mine; x = x->next)
        if (x->h.type == CHORUS_MSG_P2P && p2p_match(h, x->h.comm_id, x->h.tag)) mine = x;
    for (chorus_req *x = n->anyq_head; x && !any; x = x->next)
        if (p2p_match(h, x->h.comm_id, x->h.tag)) any = x;
    if (any && (!mine || any->order < mine->order)) {
        tcp_reqq_unlink(&n->anyq_head, &n->anyq_tail, any);
        return any;
    }
    if (mine) tcp_reqq_unlink(&pe->rq_head, &pe->rq_tail, mine);
    return mine;
}

void chorus__net_irecv(chorus_net *n, chorus_req *r, int peer_rank, const chorus_wire_hdr *expect,
                       void *buf)
{
    memset(r, 0, sizeof(*r));
    r->peer = peer_rank;
    r->h = *expect;
    r->buf = buf;
    r->len = expect->len;
    pthread_mutex_lock(&n->mu);
    if (n->broken != CHORUS_OK) {
        r->done = 1;
        r->res = n->broken;
        pthread_mutex_unlock(&n->mu);
        return;
    }
    if (expect->type == CHORUS_MSG_P2P) {
        p2p_post_locked(n, r);
        pthread_mutex_unlock(&n->mu);
        return;
    }
    peer *pe = &n->peers[peer_rank];
    if (pe->lost) {
        tcp_fail_req(r);
        pthread_mutex_unlock(&n->mu);
        return;
    }
    /* Something of this stream already arrived (or is arriving)? It is ours, unless an earlier
     * receive already claimed it or an earlier receive of the same stream is still waiting. */
    for (chorus_req *x = pe->rq_head; x; x = x->next)
        if (tcp_same_stream(&x->h, expect)) goto post;
    for (umsg *u = pe->uq_head; u; u = u->next) {
        if (u->waiter || !tcp_same_stream(&u->h, expect)) continue;
        if (!tcp_check_match(n, peer_rank, &u->h, r)) break;
        if (!u->complete) {
            u->waiter = r;
            pthread_mutex_unlock(&n->mu);
            return;
        }
        if (r->len) memcpy(r->buf, u->data, r->len);
        r->done = 1;
        tcp_umsgq_unlink(&pe->uq_head, &pe->uq_tail, u);
        tcp_umsg_free(u);
        pthread_mutex_unlock(&n->mu);
        return;
    }
    if (r->done) { /* mismatch */
        pthread_mutex_unlock(&n->mu);
        return;
    }
post:
    tcp_reqq_push(&pe->rq_head, &pe->rq_tail, r);
    pthread_mutex_unlock(&n->mu);
}
