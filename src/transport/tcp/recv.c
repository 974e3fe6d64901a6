/*
 * recv.c - reading the lanes. Lane 0 carries every header, in the order the messages were
 * posted, so matching and ordering are those of one connection: a header is routed (to a posted
 * receive, an unexpected message, or dropped) and its payload lands there. A message that
 * tcp_striped() picks (STRIPE_MIN bytes or more; of a collective, only within the stripe range) is
 * striped: its header and first slice come on lane 0, slice c (of L equal
 * contiguous slices) on lane c behind a CHUNK header with the pair's stripe number. Each lane
 * carries its slices in stripe order, so the receiver pairs them with headers without any search: a
 * slice whose header it has read lands in place; one that comes first waits in a buffer of its own
 * until the header arrives. A message is complete when all its slices are. Every lane is read all
 * the time; a lane that closes is the peer lost (after lane 0 had its chance to say why). Small
 * messages are read through a staging buffer, large payloads straight into their destination.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "transport/tcp/net_internal.h"

/* A connection to p closed or failed (what: how). p may have closed after an abort that is
 * still unread on lane 0 (the only lane that carries aborts), naming the rank that failed
 * first and why; on another lane the abort may even still be on its way (lanes are separate
 * connections). So lane 0 is read until it tells (the abort, or its own closing) or, for
 * another lane, for at most ABORT_FLUSH_S, before p is blamed. */
void tcp_conn_failed(chorus_net *n, int p, int l, const char *what)
{
    peer *pe = &n->peers[p];
    double deadline = chorus__now() + (l ? ABORT_FLUSH_S : 0);
    for (;;) {
        tcp_read_lane(n, p, 0);
        if (n->broken != CHORUS_OK || pe->lost || pe->bye || pe->lanes[0].fd < 0 ||
            chorus__now() >= deadline)
            break;
        struct pollfd pf = {.fd = pe->lanes[0].fd, .events = POLLIN};
        poll(&pf, 1, 10);
    }
    if (n->broken == CHORUS_OK) tcp_peer_lost(n, p, what);
}

/* All of a message's payload (len bytes) arrived: into receive r, or unexpected message u. */
static void deliver(peer *pe, chorus_req *r, umsg *u, uint64_t len)
{
    if (r) {
        r->off = len;
        r->done = 1;
    } else if (u) {
        u->complete = 1;
        if (u->waiter) {
            if (u->h.len) memcpy(u->waiter->buf, u->data, u->h.len);
            u->waiter->off = u->h.len;
            u->waiter->done = 1;
        }
        if (u->waiter || u->dropped) {
            tcp_umsgq_unlink(&pe->uq_head, &pe->uq_tail, u);
            tcp_umsg_free(u);
        }
    }
}

/* One slice of striped message st arrived; the last one delivers it. */
static void stripe_part_done(peer *pe, stripe *st)
{
    if (--st->parts > 0) return;
    for (stripe **x = &pe->stripes; *x; x = &(*x)->next)
        if (*x == st) {
            *x = st->next;
            break;
        }
    deliver(pe, st->req, st->msg, st->req ? st->req->h.len : st->msg ? st->msg->h.len : 0);
    free(st);
}

static void finish_payload(chorus_net *n, int p)
{
    peer *pe = &n->peers[p];
    lane *ln = &pe->lanes[0];
    if (ln->dstripe) {
        stripe_part_done(pe, ln->dstripe);
    } else if (pe->dreq || pe->dmsg) {
        deliver(pe, pe->dreq, pe->dmsg, ln->cur.len);
    } else if (ln->cur.type == CHORUS_MSG_ABORT) {
        chorus_wire_abort a;
        if (chorus__wire_decode_abort(pe->ctl, ln->cur.len, &a) != CHORUS_OK) {
            tcp_peer_lost(n, p, "sent a malformed abort message");
        } else {
            char why[480];
            snprintf(why, sizeof(why), "%s [reported to rank %d by rank %d]", a.why, n->rank, p);
            /* Pass the first failure on before closing: a peer that then finds this socket
             * closed (or gets EPIPE writing to it) reads why, instead of blaming this rank. */
            tcp_break_locked(n, a.failed_rank, (chorus_result)a.result, why, a.why);
        }
    }
    ln->in_payload = 0;
    ln->hoff = 0;
    ln->dstripe = NULL;
    pe->dreq = NULL;
    pe->dmsg = NULL;
    ln->dst = NULL;
}

/* The slice of stripe seq on lane l, or NULL. */
static lchunk *find_chunk(lane *ln, uint64_t seq)
{
    for (lchunk *c = ln->cq_head; c; c = c->next)
        if (c->seq == seq) return c;
    return NULL;
}

/* Slice c has all its bytes and knows its message: copy it out of early storage, count it. */
static void chunk_complete(peer *pe, lane *ln, lchunk *c)
{
    if (c->early && c->dst && c->len) memcpy(c->dst, c->early, c->len);
    stripe *st = c->st;
    tcp_chunkq_unlink(&ln->cq_head, &ln->cq_tail, c);
    free(c->early);
    free(c);
    stripe_part_done(pe, st);
}

/* The header of a striped message arrived on lane 0, its payload landing at base (NULL:
 * dropped): starts tracking its slices, and tells every other lane where its slice goes. mu
 * held. 0, or -1 out of memory (the net is broken). */
static int stripe_begin(chorus_net *n, int p, char *base)
{
    peer *pe = &n->peers[p];
    lane *l0 = &pe->lanes[0];
    stripe *st = calloc(1, sizeof(*st));
    if (!st) return -1;
    st->req = pe->dreq;
    st->msg = pe->dmsg;
    st->parts = n->nlanes;
    st->next = pe->stripes;
    pe->stripes = st;
    uint64_t seq = pe->rx_stripe++;
    size_t off;
    l0->plen = tcp_stripe_slice(l0->cur.len, n->nlanes, 0, &off);
    l0->dstripe = st;
    for (int l = 1; l < n->nlanes; l++) {
        lane *ln = &pe->lanes[l];
        size_t len = tcp_stripe_slice(l0->cur.len, n->nlanes, l, &off);
        lchunk *c = find_chunk(ln, seq);
        if (c && c->len != len) {
            tcp_peer_lost(n, p,
                          "garbage on the connection: a slice of a striped message of the "
                          "wrong length");
            return 0;
        }
        if (!c) {
            if (!(c = calloc(1, sizeof(*c)))) return -1;
            c->seq = seq;
            c->len = len;
            tcp_chunkq_push(&ln->cq_head, &ln->cq_tail, c);
        }
        c->dst = base ? base + off : NULL;
        c->st = st;
        if (c->arrived) chunk_complete(pe, ln, c);
    }
    return 0;
}

/* A point-to-point header names a dtype and nothing else in coll; its length is checked
 * against its count when a receive (which knows the dtype's size) takes it. */
static int p2p_header_ok(const chorus_wire_hdr *h)
{
    return (h->coll & ~0xff00u) == 0 && ((h->coll >> 8) & 0xff) < CHORUS_DTYPE_COUNT;
}

/* Decodes the header that completed on lane ln of p into ln->cur and starts reading its
 * payload. 0 when it is garbage: p is lost. */
static int begin_header(chorus_net *n, int p, lane *ln)
{
    char why[200];
    if (chorus__wire_decode_hdr(ln->hbuf, n->max_msg, &ln->cur, why, sizeof(why)) != CHORUS_OK) {
        char msg[300];
        snprintf(msg, sizeof(msg), "garbage on the connection: %s", why);
        tcp_peer_lost(n, p, msg);
        return 0;
    }
    ln->in_payload = 1;
    ln->doff = 0;
    ln->plen = ln->cur.len;
    return 1;
}

/* A complete header arrived from p: decide where its payload goes. */
static void route_header(chorus_net *n, int p)
{
    peer *pe = &n->peers[p];
    lane *ln = &pe->lanes[0];
    int discard = 0; /* a point-to-point payload that fits no receive: read and dropped */
    chorus_wire_hdr *h = &ln->cur;
    if (!begin_header(n, p, ln)) return;
    if (h->type == CHORUS_MSG_ABORT) {
        if (h->len > sizeof(pe->ctl)) {
            tcp_peer_lost(n, p, "oversized abort message");
            return;
        }
        ln->dst = (char *)pe->ctl;
    } else if (h->type == CHORUS_MSG_PING || h->type == CHORUS_MSG_BYE) {
        if (h->len) {
            tcp_peer_lost(n, p, "control message with a payload");
            return;
        }
        if (h->type == CHORUS_MSG_BYE) pe->bye = ln->bye = 1;
    } else if (h->type == CHORUS_MSG_P2P || h->type == CHORUS_MSG_COLL) {
        chorus_req *r = NULL;
        if (h->type == CHORUS_MSG_P2P) {
            if (!p2p_header_ok(h)) {
                tcp_peer_lost(n, p,
                              "garbage on the connection: a point-to-point header without a "
                              "valid dtype");
                return;
            }
            r = tcp_p2p_take_posted(n, p, h);
            int fit = r ? tcp_p2p_claim(n, r, h, p) : 1;
            if (fit < 0) return;
            if (!fit) {
                r = NULL;
                discard = 1;
            }
        } else {
            for (chorus_req *x = pe->rq_head; x; x = x->next)
                if (tcp_same_stream(h, &x->h)) {
                    r = x;
                    break;
                }
            if (r) {
                tcp_reqq_unlink(&pe->rq_head, &pe->rq_tail, r);
                if (!tcp_check_match(n, p, h, r)) return;
            }
        }
        if (r) {
            pe->dreq = r;
            ln->dst = r->buf;
        } else if (!discard) {
            umsg *u = calloc(1, sizeof(*u));
            char *data = h->len ? malloc(h->len) : NULL;
            if (!u || (h->len && !data)) {
                free(u);
                free(data);
                const char *why = "out of memory buffering a message";
                tcp_break_locked(n, p, CHORUS_ERR_NOMEM, why, why);
                return;
            }
            u->h = *h;
            u->data = data;
            tcp_umsgq_push(&pe->uq_head, &pe->uq_tail, u);
            pe->dmsg = u;
            ln->dst = u->data;
        }
        if (tcp_striped(n, h) && stripe_begin(n, p, ln->dst)) {
            const char *why = "out of memory receiving a striped message";
            tcp_break_locked(n, p, CHORUS_ERR_NOMEM, why, why);
            return;
        }
        if (n->broken != CHORUS_OK) return;
    } else {
        tcp_peer_lost(n, p, "unexpected message type on an established connection");
        return;
    }
    if (ln->plen == 0) finish_payload(n, p);
}

/* A complete header arrived on lane l > 0 of p: a ping, a goodbye, or a slice of a striped
 * message, which lands where its header (on lane 0) said, or in early storage until that
 * header comes. */
static void route_chunk(chorus_net *n, int p, int l)
{
    peer *pe = &n->peers[p];
    lane *ln = &pe->lanes[l];
    chorus_wire_hdr *h = &ln->cur;
    if (!begin_header(n, p, ln)) return;
    ln->dst = NULL;
    ln->dchunk = NULL;
    if (h->type == CHORUS_MSG_PING || h->type == CHORUS_MSG_BYE) {
        if (h->len) {
            tcp_peer_lost(n, p, "control message with a payload");
            return;
        }
        if (h->type == CHORUS_MSG_BYE) ln->bye = 1;
        ln->in_payload = 0;
        ln->hoff = 0;
        return;
    }
    if (h->type != CHORUS_MSG_CHUNK || h->len == 0) {
        tcp_peer_lost(n, p, "unexpected message type on an established connection");
        return;
    }
    lchunk *c = find_chunk(ln, h->seq);
    if (!c && h->seq >= pe->rx_stripe) {
        tcp_read_lane(n, p, 0); /* its header may be waiting on lane 0 */
        if (n->broken != CHORUS_OK) return;
        c = find_chunk(ln, h->seq);
    }
    if ((c && (c->len != h->len || c->arrived)) || (!c && h->seq < pe->rx_stripe)) {
        tcp_peer_lost(n, p,
                      "garbage on the connection: a slice of a striped message that is "
                      "not expected");
        return;
    }
    if (!c) {
        c = calloc(1, sizeof(*c));
        char *early = malloc(h->len);
        if (!c || !early) {
            free(c);
            free(early);
            const char *oom = "out of memory buffering a slice of a striped message";
            tcp_break_locked(n, p, CHORUS_ERR_NOMEM, oom, oom);
            return;
        }
        c->seq = h->seq;
        c->len = h->len;
        c->early = early;
        tcp_chunkq_push(&ln->cq_head, &ln->cq_tail, c);
    }
    ln->dchunk = c;
    ln->dst = c->early ? c->early : c->dst;
}

/* Small messages are read through a staging buffer, so that one recv() brings in a header
 * and its payload (and often the next message); a payload of STAGE_DIRECT bytes or more is
 * received straight into its destination instead, with no extra copy. */
#define STAGE_SIZE   65536
#define STAGE_DIRECT 16384

/* k bytes of a payload arrived on lane l of p: the receive they are for moved (wait deadlines
 * count from the last move). */
static void note_progress(peer *pe, int l, size_t k)
{
    lane *ln = &pe->lanes[l];
    stripe *st = l ? (ln->dchunk ? ln->dchunk->st : NULL) : ln->dstripe;
    chorus_req *r = st ? st->req : l ? NULL : pe->dreq;
    umsg *u = st ? st->msg : l ? NULL : pe->dmsg;
    if (!r && u) r = u->waiter;
    if (!r) return;
    if (st)
        r->lane_moved += k;
    else
        r->off = ln->doff;
}

/* Lane l's payload is complete. */
static void lane_payload_done(chorus_net *n, int p, int l)
{
    if (l == 0) {
        finish_payload(n, p);
        return;
    }
    peer *pe = &n->peers[p];
    lane *ln = &pe->lanes[l];
    lchunk *c = ln->dchunk;
    ln->in_payload = 0;
    ln->hoff = 0;
    ln->dchunk = NULL;
    ln->dst = NULL;
    c->arrived = 1;
    if (c->st) chunk_complete(pe, ln, c);
}

static void consume_staged(chorus_net *n, int p, int l)
{
    peer *pe = &n->peers[p];
    lane *ln = &pe->lanes[l];
    while (ln->spos < ln->slen && n->broken == CHORUS_OK) {
        size_t avail = ln->slen - ln->spos;
        if (!ln->in_payload) {
            size_t k = CHORUS_WIRE_HDR_LEN - ln->hoff;
            if (k > avail) k = avail;
            memcpy(ln->hbuf + ln->hoff, ln->stage + ln->spos, k);
            ln->hoff += k;
            ln->spos += k;
            if (ln->hoff == CHORUS_WIRE_HDR_LEN) {
                if (l == 0)
                    route_header(n, p);
                else
                    route_chunk(n, p, l);
            }
        } else {
            size_t k = ln->plen - ln->doff;
            if (k > avail) k = avail;
            if (ln->dst) memcpy(ln->dst + ln->doff, ln->stage + ln->spos, k);
            ln->doff += k;
            ln->spos += k;
            note_progress(pe, l, k);
            if (ln->doff == ln->plen) lane_payload_done(n, p, l);
        }
    }
}

void tcp_read_lane(chorus_net *n, int p, int l)
{
    peer *pe = &n->peers[p];
    lane *ln = &pe->lanes[l];
    while (n->broken == CHORUS_OK) {
        consume_staged(n, p, l);
        if (n->broken != CHORUS_OK) return;
        ssize_t r;
        int direct = ln->in_payload && ln->dst && ln->plen - ln->doff >= STAGE_DIRECT;
        if (direct) {
            r = recv(ln->fd, ln->dst + ln->doff, ln->plen - ln->doff, MSG_DONTWAIT);
        } else {
            if (!ln->stage && !(ln->stage = malloc(STAGE_SIZE))) {
                const char *why = "out of memory for a receive buffer";
                tcp_break_locked(n, p, CHORUS_ERR_NOMEM, why, why);
                return;
            }
            ln->spos = ln->slen = 0;
            r = recv(ln->fd, ln->stage, STAGE_SIZE, MSG_DONTWAIT);
        }
        /* After its goodbye, at a message boundary, the peer's end of the connection is its
         * clean end: a close, or a reset when its close found bytes of ours unread (a ping we
         * sent as it finalized). Stop watching the lane; only a later use of it is an error. */
        if ((r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) &&
            ln->bye && !ln->in_payload && ln->hoff == 0) {
            epoll_ctl(n->epfd, EPOLL_CTL_DEL, ln->fd, NULL);
            return;
        }
        if (r == 0) {
            if (l)
                tcp_conn_failed(n, p, l, "its connection closed (process exited or was killed)");
            else
                tcp_peer_lost(n, p, "its connection closed (process exited or was killed)");
            return;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (errno == EINTR) continue;
            if (l)
                tcp_conn_failed(n, p, l, strerror(errno));
            else
                tcp_peer_lost(n, p, strerror(errno));
            return;
        }
        ln->last_rx = pe->last_rx = chorus__now();
        if (direct) {
            ln->doff += (size_t)r;
            note_progress(pe, l, (size_t)r);
            if (ln->doff == ln->plen) lane_payload_done(n, p, l);
        } else {
            ln->slen = (size_t)r;
        }
    }
}
