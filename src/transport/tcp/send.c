/*
 * send.c - sending: each lane has a queue of requests written in order as the socket takes
 * them (eagerly when posted, then on EPOLLOUT). A striped message's header and first slice go
 * on lane 0, its other slices on the other lanes as requests of their own (recv.c describes
 * the format).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "transport/tcp/net_internal.h"

/* Registers for EPOLLOUT on lane l of p exactly while its send queue is not empty. */
static void update_epoll(chorus_net *n, int p, int l)
{
    lane *ln = &n->peers[p].lanes[l];
    int want = ln->sq_head != NULL;
    if (want == ln->want_out || ln->fd < 0) return;
    struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0),
                             .data.u64 = tcp_lane_tag(p, l)};
    epoll_ctl(n->epfd, EPOLL_CTL_MOD, ln->fd, &ev);
    ln->want_out = want;
}

/* Writing to lane l of p failed (EPIPE, ECONNRESET). */
static void send_failed(chorus_net *n, int p, int l, int err)
{
    lane *ln = &n->peers[p].lanes[l];
    /* The peer may have said goodbye and closed (a reset, when its close found our ping
     * unread): read the goodbye first. Then a ping alone in the queue is no failure; a
     * request of the caller's for a finalized peer is. */
    if (!ln->bye && n->broken == CHORUS_OK) tcp_read_lane(n, p, l);
    if (n->broken != CHORUS_OK) return;
    if (ln->bye && ln->sq_head == &ln->ping && ln->sq_tail == &ln->ping) {
        ln->sq_head = ln->sq_tail = NULL;
        update_epoll(n, p, l);
        return;
    }
    tcp_conn_failed(n, p, l, strerror(err));
}

/* A send request left its lane's queue, all written. A slice of a striped send is freed and
 * counts for its parent; a request is done when all its parts are. */
static void send_part_done(chorus_req *r)
{
    chorus_req *o = r->parent ? r->parent : r;
    if (r->parent) {
        o->lane_moved += r->len;
        free(r);
    }
    if (o->parts > 1)
        o->parts--;
    else
        o->done = 1;
}

/* Writes as much of lane l of peer p's send queue as the socket takes. */
void tcp_flush_sends(chorus_net *n, int p, int l)
{
    lane *pe = &n->peers[p].lanes[l];
    while (pe->sq_head && n->broken == CHORUS_OK) {
        chorus_req *r = pe->sq_head;
        struct iovec iov[2];
        int cnt = 0;
        if (r->hoff < CHORUS_WIRE_HDR_LEN)
            iov[cnt++] = (struct iovec){r->hbytes + r->hoff, CHORUS_WIRE_HDR_LEN - r->hoff};
        if (r->off < r->len) iov[cnt++] = (struct iovec){r->buf + r->off, r->len - r->off};
        ssize_t w = 0;
        if (cnt) {
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
            w = sendmsg(pe->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
                send_failed(n, p, l, errno);
                return;
            }
            if (w > 0) pe->last_tx = chorus__now();
        }
        size_t hw = CHORUS_WIRE_HDR_LEN - r->hoff;
        if ((size_t)w < hw) {
            r->hoff += (size_t)w;
        } else {
            r->hoff = CHORUS_WIRE_HDR_LEN;
            r->off += (size_t)w - hw;
        }
        if (r->hoff == CHORUS_WIRE_HDR_LEN && r->off == r->len) {
            send_part_done(tcp_reqq_pop(&pe->sq_head, &pe->sq_tail));
        } else {
            break; /* socket full */
        }
    }
    update_epoll(n, p, l);
}

static void enqueue_send(chorus_net *n, int p, int l, chorus_req *r)
{
    lane *ln = &n->peers[p].lanes[l];
    tcp_reqq_push(&ln->sq_head, &ln->sq_tail, r);
    if (ln->sq_head == r) tcp_flush_sends(n, p, l); /* eager: most sends finish here */
}

/* Queues striped send r: its header and slice 0 on lane 0 (first, so that the receiver mostly
 * knows where the other slices go before they come), slices 1.. on the other lanes, each with a
 * CHUNK header naming the pair's stripe number. mu held. 0, or -1 out of memory (nothing
 * queued). */
static int stripe_send(chorus_net *n, int p, chorus_req *r)
{
    peer *pe = &n->peers[p];
    chorus_req *sub[CHORUS_WIRE_LANES_MAX];
    for (int c = 1; c < n->nlanes; c++)
        if (!(sub[c] = calloc(1, sizeof(chorus_req)))) {
            while (--c >= 1) free(sub[c]);
            return -1;
        }
    uint64_t seq = pe->tx_stripe++;
    size_t off;
    r->len = tcp_stripe_slice(r->h.len, n->nlanes, 0, &off);
    r->parts = n->nlanes;
    for (int c = 1; c < n->nlanes; c++) {
        chorus_req *s = sub[c];
        s->is_send = 1;
        s->peer = p;
        s->parent = r;
        s->len = tcp_stripe_slice(r->h.len, n->nlanes, c, &off);
        s->buf = r->buf + off;
        s->h = (chorus_wire_hdr){.type = CHORUS_MSG_CHUNK, .seq = seq, .len = s->len};
        chorus__wire_encode_hdr(&s->h, s->hbytes);
    }
    enqueue_send(n, p, 0, r);
    for (int c = 1; c < n->nlanes; c++) enqueue_send(n, p, c, sub[c]); /* owned by the lane */
    return 0;
}

void chorus__net_isend(chorus_net *n, chorus_req *r, int peer_rank, const chorus_wire_hdr *h,
                       const void *buf)
{
    memset(r, 0, sizeof(*r));
    r->is_send = 1;
    r->peer = peer_rank;
    r->h = *h;
    r->buf = (char *)buf;
    r->len = h->len;
    chorus__wire_encode_hdr(h, r->hbytes);
    pthread_mutex_lock(&n->mu);
    if (n->broken != CHORUS_OK) {
        r->done = 1;
        r->res = n->broken;
    } else if (n->peers[peer_rank].lost) {
        tcp_fail_req(r);
    } else if (!tcp_striped(n, h)) {
        enqueue_send(n, peer_rank, 0, r);
    } else if (stripe_send(n, peer_rank, r)) {
        const char *why = "out of memory striping a message over the lanes";
        tcp_break_locked(n, peer_rank, CHORUS_ERR_NOMEM, why, why);
        r->done = 1;
        r->res = n->broken;
    }
    pthread_mutex_unlock(&n->mu);
}
