/*
 * fail.c - how the TCP transport fails: breaking the net (the first error wins, the peers are
 * told with an ABORT message and the sockets shut down so that every peer sees it promptly),
 * and losing a peer, which breaks the net unless the job may lose that rank (a parameter
 * server's worker in async or SSP mode): then only what involves it fails and the job goes on.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/status.h"
#include "transport/tcp/net_internal.h"

const char *chorus__net_host(const chorus_net *n, int rank)
{
    return rank >= 0 && rank < n->size && n->peers[rank].host[0] ? n->peers[rank].host : "?";
}

/* Writes all of iov (cnt <= 2 entries, advanced in place) to fd, waiting at most stall_s
 * without progress (0: what the socket takes at once). 1 when all was written. */
static int write_bounded(int fd, struct iovec *iov, int cnt, double stall_s)
{
    double deadline = chorus__now() + stall_s;
    int i = 0;
    while (i < cnt) {
        if (iov[i].iov_len == 0) {
            i++;
            continue;
        }
        struct msghdr m = {.msg_iov = iov + i, .msg_iovlen = (size_t)(cnt - i)};
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 0;
        if (w > 0) {
            for (size_t left = (size_t)w; left > 0 && i < cnt; i++) {
                size_t k = left < iov[i].iov_len ? left : iov[i].iov_len;
                iov[i].iov_base = (char *)iov[i].iov_base + k;
                iov[i].iov_len -= k;
                left -= k;
                if (iov[i].iov_len) break;
            }
            deadline = chorus__now() + stall_s;
            continue;
        }
        double left = deadline - chorus__now();
        if (left <= 0) return 0;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        poll(&pf, 1, (int)(left * 1000) + 1);
    }
    return 1;
}

/* The rest of the message at the head of ln's send queue (bounded). 1 when the socket is at
 * a message boundary again. */
static int finish_partial(lane *ln)
{
    chorus_req *r = ln->sq_head;
    struct iovec iov[2] = {{r->hbytes + r->hoff, CHORUS_WIRE_HDR_LEN - r->hoff},
                           {r->buf + r->off, r->len - r->off}};
    return write_bounded(ln->fd, iov, 2, ABORT_FLUSH_S);
}

static void send_abort_to_all(chorus_net *n, int failed_rank, chorus_result r, const char *why)
{
    chorus_wire_abort a = {.failed_rank = failed_rank, .result = r};
    snprintf(a.why, sizeof(a.why), "%s", why);
    unsigned char payload[CHORUS_WIRE_ABORT_MAX];
    size_t plen = chorus__wire_encode_abort(&a, payload);
    chorus_wire_hdr h = {.type = CHORUS_MSG_ABORT, .len = plen};
    unsigned char hb[CHORUS_WIRE_HDR_LEN];
    chorus__wire_encode_hdr(&h, hb);
    for (int p = 0; p < n->size; p++) {
        lane *pe = &n->peers[p].lanes[0]; /* where the peer reads headers */
        /* The blamed rank is told too, but only with what its socket takes at once: it may be
         * dead or stopped, and is not waited for. It may well be alive (it timed out, or sent
         * garbage): told, it reads why before it finds this socket shut, instead of blaming
         * this rank, a survivor, to the others. */
        int blamed = p == failed_rank;
        if (p == n->rank || pe->fd < 0) continue;
        /* A peer can parse our abort only at a message boundary: a message half sent is
         * finished first (bounded), else the peer learns from the closed socket instead. */
        if (pe->sq_head && (pe->sq_head->hoff || pe->sq_head->off) &&
            (blamed || !finish_partial(pe)))
            continue;
        struct iovec iov[2] = {{hb, sizeof(hb)}, {payload, plen}};
        write_bounded(pe->fd, iov, 2, blamed ? 0 : ABORT_FLUSH_S); /* a peer gone is fine */
    }
}

/* Breaks the net with mu held. tell: the reason sent to the peers in an abort message (with
 * failed_rank and r), or NULL to tell nobody. */
void tcp_break_locked(chorus_net *n, int failed_rank, chorus_result r, const char *why,
                      const char *tell)
{
    if (n->broken != CHORUS_OK) return;
    n->broken = r;
    n->broken_rank = failed_rank;
    snprintf(n->broken_msg, sizeof(n->broken_msg), "%s", why);
    CHORUS_INFO(CHORUS_LOG_TCP, "communication failed: %s", why);
    chorus__status_failed(n->rank, failed_rank == n->rank ? -1 : failed_rank, r, why);
    if (tell) send_abort_to_all(n, failed_rank, r, tell);
    /* Stop using the sockets: shut them down so that every peer sees the failure promptly,
     * even one blocked on a message it will never get. */
    for (int p = 0; p < n->size; p++)
        for (int l = 0; l < n->nlanes; l++)
            if (n->peers[p].lanes[l].fd >= 0) shutdown(n->peers[p].lanes[l].fd, SHUT_RDWR);
}

void chorus__net_abort(chorus_net *n, int failed_rank, chorus_result r, const char *why)
{
    pthread_mutex_lock(&n->mu);
    tcp_break_locked(n, failed_rank, r, why, why);
    pthread_mutex_unlock(&n->mu);
}

chorus_result chorus__net_error(chorus_net *n, chorus_errbuf *e)
{
    pthread_mutex_lock(&n->mu);
    chorus_result r = n->broken;
    if (r != CHORUS_OK && e) snprintf(e->msg, sizeof(e->msg), "%s", n->broken_msg);
    pthread_mutex_unlock(&n->mu);
    return r;
}

int chorus__net_failed_rank(chorus_net *n)
{
    pthread_mutex_lock(&n->mu);
    int r = n->broken != CHORUS_OK ? n->broken_rank : -1;
    pthread_mutex_unlock(&n->mu);
    return r;
}

void tcp_fail_req(chorus_req *r)
{
    r->res = CHORUS_ERR_PEER_LOST;
    r->done = 1;
}

/* Expendable rank p is lost (mu held): close its connection, fail what involves it, and tell
 * one any-source receive. The net stays healthy. */
static void lose_peer(chorus_net *n, int p, const char *why)
{
    peer *pe = &n->peers[p];
    pe->lost = 1;
    snprintf(n->loss_msg, sizeof(n->loss_msg), "%s", why);
    CHORUS_WARN(CHORUS_LOG_TCP, "%s; the job goes on without it", why);
    /* messages cut short: striped ones still arriving, then the one arriving on lane 0; each
     * is dropped and its taker failed */
    for (stripe *st = pe->stripes, *nx; st; st = nx) {
        nx = st->next;
        if (st->req) tcp_fail_req(st->req);
        if (st->msg) {
            if (st->msg->waiter) tcp_fail_req(st->msg->waiter);
            tcp_umsgq_unlink(&pe->uq_head, &pe->uq_tail, st->msg);
            tcp_umsg_free(st->msg);
        }
        if (st->req && pe->dreq == st->req) pe->dreq = NULL;
        if (st->msg && pe->dmsg == st->msg) pe->dmsg = NULL;
        free(st);
    }
    pe->stripes = NULL;
    int cut = pe->lanes[0].in_payload;
    if (cut && pe->dreq) tcp_fail_req(pe->dreq);
    if (cut && pe->dmsg) {
        umsg *u = pe->dmsg;
        if (u->waiter) tcp_fail_req(u->waiter);
        tcp_umsgq_unlink(&pe->uq_head, &pe->uq_tail, u);
        tcp_umsg_free(u);
    }
    pe->dreq = NULL;
    pe->dmsg = NULL;
    for (int l = 0; l < n->nlanes; l++) {
        lane *ln = &pe->lanes[l];
        if (ln->fd >= 0) {
            epoll_ctl(n->epfd, EPOLL_CTL_DEL, ln->fd, NULL);
            close(ln->fd);
            ln->fd = -1;
        }
        /* lane 0 queues the callers' sends; the others the slices of striped ones */
        for (chorus_req *r = ln->sq_head, *nx; r; r = nx) {
            nx = r->next;
            if (r == &ln->ping) continue;
            if (r->parent) {
                tcp_fail_req(r->parent);
                free(r);
            } else {
                tcp_fail_req(r);
            }
        }
        ln->sq_head = ln->sq_tail = NULL;
        for (lchunk *c = ln->cq_head, *nx; c; c = nx) {
            nx = c->next;
            free(c->early);
            free(c);
        }
        ln->cq_head = ln->cq_tail = NULL;
        ln->dchunk = NULL;
        ln->dstripe = NULL;
        ln->dst = NULL;
        ln->in_payload = 0;
        ln->hoff = 0;
        ln->spos = ln->slen = 0;
    }
    for (chorus_req *r = pe->rq_head, *nx; r; r = nx) {
        nx = r->next;
        tcp_fail_req(r);
    }
    pe->rq_head = pe->rq_tail = NULL;
    chorus_req *any = n->anyq_head;
    if (any) {
        tcp_reqq_unlink(&n->anyq_head, &n->anyq_tail, any);
        any->src = p;
        tcp_fail_req(any);
    } else {
        int *nl = realloc(n->lost_notice, (size_t)(n->nlost_notice + 1) * sizeof(int));
        if (nl) {
            n->lost_notice = nl;
            n->lost_notice[n->nlost_notice++] = p;
        }
    }
}

void tcp_peer_lost(chorus_net *n, int p, const char *what)
{
    char why[400];
    snprintf(why, sizeof(why), "rank %d (host %s) was lost: %s (seen by rank %d)", p,
             chorus__net_host(n, p), what, n->rank);
    if (n->peers[p].expendable && n->broken == CHORUS_OK) {
        if (!n->peers[p].lost) lose_peer(n, p, why);
        return;
    }
    tcp_break_locked(n, p, CHORUS_ERR_PEER_LOST, why, why);
}

void chorus__net_set_expendable(chorus_net *n, int p)
{
    pthread_mutex_lock(&n->mu);
    if (p >= 0 && p < n->size && p != n->rank) n->peers[p].expendable = 1;
    pthread_mutex_unlock(&n->mu);
}

void chorus__net_loss_detail(chorus_net *n, chorus_errbuf *e)
{
    pthread_mutex_lock(&n->mu);
    if (e) snprintf(e->msg, sizeof(e->msg), "%s", n->loss_msg);
    pthread_mutex_unlock(&n->mu);
}
