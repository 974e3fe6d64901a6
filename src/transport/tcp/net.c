/*
 * net.c - TCP transport: connection mesh, epoll progress, matching of receives, and the
 * watchdog that finds dead and hung peers.
 *
 * Locking: one mutex per net protects the peers' queues and receive state. A thread that
 * waits drops the mutex while it sleeps in epoll_wait, so several communicators sharing the
 * net (comm_split) can be driven from several threads; whoever holds the mutex makes progress
 * for everyone.
 *
 * Failure detection: a dead peer's socket closes (EOF/ECONNRESET). A hung one (SIGSTOP, a
 * stuck kernel call) keeps its socket open, so a watchdog thread sends a PING on every
 * connection that has been idle for CHORUS_HEARTBEAT_S and reads whatever is pending (which
 * also keeps queued sends moving while the application computes); a peer from which nothing
 * at all arrived for CHORUS_HEARTBEAT_TIMEOUT_S is declared lost, naming its rank and host
 * (a peer the job may lose, a parameter server's worker in async or SSP mode, is then lost
 * whichever deadline sees its silence first: see timeout_locked()).
 * Every rank has a direct connection to every other, so each survivor notices on its own.
 *
 * Lanes: a pair of ranks holds CHORUS_TCP_LANES connections (lane 0 .. L-1, each opened with
 * its own authenticated hello naming its lane). Lane 0 carries every header, in the order the
 * messages were posted, so matching and ordering are those of one connection. A message of
 * STRIPE_MIN bytes or more is striped: its header and first slice go on lane 0, slice c (of L
 * equal contiguous slices) on lane c behind a CHUNK header with the pair's stripe number. Each
 * lane carries its slices in stripe order, so the receiver pairs them with headers without
 * any search: a slice whose header it has read lands in place; one that comes first waits in
 * a buffer of its own until the header arrives. A message is complete when all its slices are.
 * Every lane is read all the time, pinged when idle and watched by the watchdog; a lane that
 * closes or falls silent is the peer lost.
 */
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"
#include "transport/tcp/net.h"
#include "wire/auth.h"
#include "wire/sock.h"

typedef struct umsg {
    struct umsg *next;
    chorus_wire_hdr h;
    char *data;
    int complete;
    chorus_req *waiter; /* a receive posted while the message was still arriving */
    int dropped; /* claimed by a point-to-point receive it did not fit: freed when complete */
} umsg;

typedef struct stripe stripe;

/* A slice of a striped message on a lane other than the first: expected (its header arrived
 * on lane 0, so dst is known) or arrived early (kept in early until the header comes). */
typedef struct lchunk {
    struct lchunk *next;
    uint64_t seq; /* the pair's stripe number */
    size_t len;
    char *dst;   /* the message's buffer at this slice's offset, or NULL: discarded */
    char *early; /* the bytes, when they came before the header */
    stripe *st;  /* the message, once its header arrived */
    int arrived;
} lchunk;

/* A striped message being received: where it lands and how many slices are still due. */
struct stripe {
    struct stripe *next;
    chorus_req *req; /* a posted receive, or */
    umsg *msg;       /* an unexpected message, or neither: discarded */
    int parts;
};

/* One connection of a pair. Lane 0 carries every header (and the first slice of a striped
 * message); the others carry only the other slices (CHORUS_MSG_CHUNK) and pings. */
typedef struct lane {
    int fd;
    int want_out; /* EPOLLOUT registered */
    chorus_req *sq_head, *sq_tail;
    /* receive state: header, then plen payload bytes into dst (a request's buffer, an
     * unexpected message's, an early slice's, or NULL: read and dropped) */
    unsigned char hbuf[CHORUS_WIRE_HDR_LEN];
    size_t hoff;
    int in_payload;
    chorus_wire_hdr cur;
    size_t plen;
    char *dst;
    size_t doff;
    stripe *dstripe;           /* lane 0: the striped message whose first slice arrives */
    lchunk *dchunk;            /* other lanes: the slice that arrives */
    lchunk *cq_head, *cq_tail; /* other lanes: slices expected or early, in stripe order */
    unsigned char *stage;      /* staging buffer for small messages */
    size_t spos, slen;
    int bye;                 /* the peer said goodbye on this lane: its closing is no failure */
    double last_rx, last_tx; /* when bytes last arrived on / left by this lane */
    chorus_req ping;         /* keep-alive, queued like any send so it never splits one */
} lane;

typedef struct peer {
    lane *lanes; /* the net's nlanes connections to this peer */
    chorus_req *rq_head, *rq_tail;
    umsg *uq_head, *uq_tail;
    chorus_req *dreq; /* lane 0's payload lands in this receive or this message */
    umsg *dmsg;
    unsigned char ctl[CHORUS_WIRE_ABORT_MAX]; /* payload of control messages */
    int bye;                                  /* the peer finalized */
    stripe *stripes;                          /* striped messages still arriving */
    uint64_t tx_stripe, rx_stripe;            /* striped messages sent / headers received */
    char host[64];
    double last_rx;       /* when bytes last arrived from this peer, on any lane */
    int expendable, lost; /* chorus__net_set_expendable; and it was lost */
} peer;

/* Messages of at least this many bytes are striped over the lanes. A fixed size, so that both
 * ends of a pair (which agree on the lane count at connection) split the same way. */
#define STRIPE_MIN 65536

struct chorus_net {
    int rank, size;
    int refs;
    int epfd;
    int listen_fd;
    char job[CHORUS_WIRE_JOB_LEN];
    uint64_t max_msg;
    int spin_us;
    int nlanes;                          /* connections per pair (CHORUS_TCP_LANES) */
    char refusal[CHORUS_WIRE_ABORT_MAX]; /* why set-up refused a rank of the job, or "" */
    chorus_auth_key key; /* CHORUS_SECRET; connections prove it before anything else */
    pthread_mutex_t mu;
    peer *peers;
    chorus_req *anyq_head, *anyq_tail; /* point-to-point receives from any source */
    uint64_t post_seq;                 /* point-to-point receives posted so far */
    int any_next;                      /* where an any-source receive starts looking */
    chorus_result broken;              /* first error, CHORUS_OK while healthy */
    int broken_rank;                   /* world rank blamed for it, -1 when none */
    char broken_msg[sizeof(((chorus_errbuf *)0)->msg)];
    int *lost_notice; /* expendable ranks lost whose loss no any-source receive reported yet */
    int nlost_notice;
    char loss_msg[sizeof(((chorus_errbuf *)0)->msg)];
    /* watchdog */
    double hb_interval, hb_timeout; /* seconds; interval 0: no watchdog */
    int hb_started, hb_stop;
    pthread_t hb_thread;
    pthread_cond_t hb_cv;
};

/* ---- helpers ---------------------------------------------------------------------------- */

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Epoll's tag for lane l of peer p. */
static uint64_t lane_tag(int p, int l)
{
    return (uint64_t)l << 32 | (uint32_t)p;
}

static void update_epoll(chorus_net *n, int p, int l)
{
    lane *ln = &n->peers[p].lanes[l];
    int want = ln->sq_head != NULL;
    if (want == ln->want_out || ln->fd < 0) return;
    struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.u64 = lane_tag(p, l)};
    epoll_ctl(n->epfd, EPOLL_CTL_MOD, ln->fd, &ev);
    ln->want_out = want;
}

const char *chorus__net_host(const chorus_net *n, int rank)
{
    return rank >= 0 && rank < n->size && n->peers[rank].host[0] ? n->peers[rank].host : "?";
}

/* How long an aborting rank keeps writing, without progress, a message it had half sent and
 * then its abort, so that the abort arrives whole (a peer reads whatever comes, into an
 * unexpected message if need be). */
#define ABORT_FLUSH_S 2.0

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
        /* A lost rank is not told. A rank blamed for a timeout may be alive and is, but only
         * with what its socket takes at once: it may be stopped, and is not waited for. */
        int blamed = p == failed_rank;
        if (p == n->rank || pe->fd < 0 || (blamed && r == CHORUS_ERR_PEER_LOST)) continue;
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
static void break_locked(chorus_net *n, int failed_rank, chorus_result r, const char *why,
                         const char *tell)
{
    if (n->broken != CHORUS_OK) return;
    n->broken = r;
    n->broken_rank = failed_rank;
    snprintf(n->broken_msg, sizeof(n->broken_msg), "%s", why);
    CHORUS_INFO(CHORUS_LOG_TCP, "communication failed: %s", why);
    chorus__status_failed(n->rank, failed_rank == n->rank ? -1 : failed_rank, r);
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
    break_locked(n, failed_rank, r, why, why);
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

static void unlink_req(chorus_req **head, chorus_req **tail, chorus_req *r);
static void unlink_umsg(peer *pe, umsg *u);
static void free_umsg(umsg *u);

static void fail_req(chorus_req *r)
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
        if (st->req) fail_req(st->req);
        if (st->msg) {
            if (st->msg->waiter) fail_req(st->msg->waiter);
            unlink_umsg(pe, st->msg);
            free_umsg(st->msg);
        }
        if (st->req && pe->dreq == st->req) pe->dreq = NULL;
        if (st->msg && pe->dmsg == st->msg) pe->dmsg = NULL;
        free(st);
    }
    pe->stripes = NULL;
    int cut = pe->lanes[0].in_payload;
    if (cut && pe->dreq) fail_req(pe->dreq);
    if (cut && pe->dmsg) {
        umsg *u = pe->dmsg;
        if (u->waiter) fail_req(u->waiter);
        unlink_umsg(pe, u);
        free_umsg(u);
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
                fail_req(r->parent);
                free(r);
            } else {
                fail_req(r);
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
        fail_req(r);
    }
    pe->rq_head = pe->rq_tail = NULL;
    chorus_req *any = n->anyq_head;
    if (any) {
        unlink_req(&n->anyq_head, &n->anyq_tail, any);
        any->src = p;
        fail_req(any);
    } else {
        int *nl = realloc(n->lost_notice, (size_t)(n->nlost_notice + 1) * sizeof(int));
        if (nl) {
            n->lost_notice = nl;
            n->lost_notice[n->nlost_notice++] = p;
        }
    }
}

static void peer_lost(chorus_net *n, int p, const char *what)
{
    char why[400];
    snprintf(why, sizeof(why), "rank %d (host %s) was lost: %s (seen by rank %d)", p,
             chorus__net_host(n, p), what, n->rank);
    if (n->peers[p].expendable && n->broken == CHORUS_OK) {
        if (!n->peers[p].lost) lose_peer(n, p, why);
        return;
    }
    break_locked(n, p, CHORUS_ERR_PEER_LOST, why, why);
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

/* ---- sending ---------------------------------------------------------------------------- */

static void read_lane(chorus_net *n, int p, int l);

/* A connection to p closed or failed (what: how). p may have closed after an abort that is
 * still unread on lane 0 (the only lane that carries aborts), naming the rank that failed
 * first and why; on another lane the abort may even still be on its way (lanes are separate
 * connections). So lane 0 is read until it tells (the abort, or its own closing) or, for
 * another lane, for at most ABORT_FLUSH_S, before p is blamed. */
static void conn_failed(chorus_net *n, int p, int l, const char *what)
{
    peer *pe = &n->peers[p];
    double deadline = chorus__now() + (l ? ABORT_FLUSH_S : 0);
    for (;;) {
        read_lane(n, p, 0);
        if (n->broken != CHORUS_OK || pe->lost || pe->bye || pe->lanes[0].fd < 0 ||
            chorus__now() >= deadline)
            break;
        struct pollfd pf = {.fd = pe->lanes[0].fd, .events = POLLIN};
        poll(&pf, 1, 10);
    }
    if (n->broken == CHORUS_OK) peer_lost(n, p, what);
}

/* Writing to lane l of p failed (EPIPE, ECONNRESET). */
static void send_failed(chorus_net *n, int p, int l, int err)
{
    conn_failed(n, p, l, strerror(err));
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
static void flush_sends(chorus_net *n, int p, int l)
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
            pe->sq_head = r->next;
            if (!pe->sq_head) pe->sq_tail = NULL;
            send_part_done(r);
        } else {
            break; /* socket full */
        }
    }
    update_epoll(n, p, l);
}

static void enqueue_send(chorus_net *n, int p, int l, chorus_req *r)
{
    lane *ln = &n->peers[p].lanes[l];
    if (ln->sq_tail)
        ln->sq_tail->next = r;
    else
        ln->sq_head = r;
    ln->sq_tail = r;
    if (ln->sq_head == r) flush_sends(n, p, l); /* eager: most sends finish here */
}

/* Slice c of a striped message of len bytes over k lanes: [*off, *off + return value). */
static size_t stripe_slice(uint64_t len, int k, int c, size_t *off)
{
    *off = (size_t)(len * (uint64_t)c / (uint64_t)k);
    return (size_t)(len * (uint64_t)(c + 1) / (uint64_t)k) - *off;
}

static int striped(const chorus_net *n, const chorus_wire_hdr *h)
{
    return n->nlanes > 1 && h->len >= STRIPE_MIN &&
           (h->type == CHORUS_MSG_P2P || h->type == CHORUS_MSG_COLL);
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
    r->len = stripe_slice(r->h.len, n->nlanes, 0, &off);
    r->parts = n->nlanes;
    for (int c = 1; c < n->nlanes; c++) {
        chorus_req *s = sub[c];
        s->is_send = 1;
        s->peer = p;
        s->parent = r;
        s->len = stripe_slice(r->h.len, n->nlanes, c, &off);
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
        fail_req(r);
    } else if (!striped(n, h)) {
        enqueue_send(n, peer_rank, 0, r);
    } else if (stripe_send(n, peer_rank, r)) {
        const char *why = "out of memory striping a message over the lanes";
        break_locked(n, peer_rank, CHORUS_ERR_NOMEM, why, why);
        r->done = 1;
        r->res = n->broken;
    }
    pthread_mutex_unlock(&n->mu);
}

/* ---- matching --------------------------------------------------------------------------- */

/* Does a message with header h belong to the same stream as receive r? Collective messages
 * of one communicator arrive in the order they were sent, so the first collective receive
 * posted for that communicator is the one; point-to-point messages also match the tag. */
static int same_stream(const chorus_wire_hdr *h, const chorus_wire_hdr *want)
{
    if (h->type != want->type || h->comm_id != want->comm_id) return 0;
    return h->type == CHORUS_MSG_COLL || h->tag == want->tag;
}

/* Checks the stream head h against what receive r expects; on mismatch fails r and breaks. */
static int check_match(chorus_net *n, int p, const chorus_wire_hdr *h, chorus_req *r)
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
    break_locked(n, -1, CHORUS_ERR_MISMATCH, why, why);
    return 0;
}

static void unlink_req(chorus_req **head, chorus_req **tail, chorus_req *r)
{
    chorus_req *prev = NULL;
    for (chorus_req *x = *head; x; prev = x, x = x->next)
        if (x == r) {
            if (prev)
                prev->next = x->next;
            else
                *head = x->next;
            if (*tail == x) *tail = prev;
            x->next = NULL;
            return;
        }
}

static void unlink_umsg(peer *pe, umsg *u)
{
    umsg *prev = NULL;
    for (umsg *x = pe->uq_head; x; prev = x, x = x->next)
        if (x == u) {
            if (prev)
                prev->next = u->next;
            else
                pe->uq_head = u->next;
            if (pe->uq_tail == u) pe->uq_tail = prev;
            return;
        }
}

static void free_umsg(umsg *u)
{
    free(u->data);
    free(u);
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
static umsg *p2p_find(chorus_net *n, int peer_rank, uint64_t comm_id, int tag, int *src, int rotate)
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
static int p2p_claim(chorus_net *n, chorus_req *r, const chorus_wire_hdr *h, int src)
{
    r->src = src;
    r->got = *h;
    if (!p2p_fits(h, r)) {
        r->res = CHORUS_ERR_MISMATCH;
        r->done = 1;
        return 0;
    }
    if (!p2p_sane(h, r)) {
        peer_lost(n, src,
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
    umsg *u = p2p_find(n, r->peer, r->h.comm_id, r->h.tag, &src, 1);
    if (u) {
        peer *pe = &n->peers[src];
        int fit = p2p_claim(n, r, &u->h, src);
        if (fit < 0) return;
        if (!fit) {
            if (u->complete) {
                unlink_umsg(pe, u);
                free_umsg(u);
            } else {
                u->dropped = 1;
            }
        } else if (u->complete) {
            if (r->len) memcpy(r->buf, u->data, r->len);
            r->off = r->len;
            r->done = 1;
            unlink_umsg(pe, u);
            free_umsg(u);
        } else {
            u->waiter = r;
        }
        return;
    }
    if (r->peer == CHORUS__NET_ANY && n->nlost_notice) { /* tell of a loss first */
        r->src = n->lost_notice[0];
        memmove(n->lost_notice, n->lost_notice + 1, (size_t)--n->nlost_notice * sizeof(int));
        fail_req(r);
        return;
    }
    if (r->peer != CHORUS__NET_ANY && n->peers[r->peer].lost) {
        fail_req(r);
        return;
    }
    chorus_req **head = &n->anyq_head, **tail = &n->anyq_tail;
    if (r->peer != CHORUS__NET_ANY) {
        head = &n->peers[r->peer].rq_head;
        tail = &n->peers[r->peer].rq_tail;
    }
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

/* The earliest posted receive that takes message h from p (unlinked), or NULL. */
static chorus_req *p2p_take_posted(chorus_net *n, int p, const chorus_wire_hdr *h)
{
    peer *pe = &n->peers[p];
    chorus_req *mine = NULL, *any = NULL;
    for (chorus_req *x = pe->rq_head; x && !mine; x = x->next)
        if (x->h.type == CHORUS_MSG_P2P && p2p_match(h, x->h.comm_id, x->h.tag)) mine = x;
    for (chorus_req *x = n->anyq_head; x && !any; x = x->next)
        if (p2p_match(h, x->h.comm_id, x->h.tag)) any = x;
    if (any && (!mine || any->order < mine->order)) {
        unlink_req(&n->anyq_head, &n->anyq_tail, any);
        return any;
    }
    if (mine) unlink_req(&pe->rq_head, &pe->rq_tail, mine);
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
        fail_req(r);
        pthread_mutex_unlock(&n->mu);
        return;
    }
    /* Something of this stream already arrived (or is arriving)? It is ours, unless an earlier
     * receive already claimed it or an earlier receive of the same stream is still waiting. */
    for (chorus_req *x = pe->rq_head; x; x = x->next)
        if (same_stream(&x->h, expect)) goto post;
    umsg *prev = NULL;
    for (umsg *u = pe->uq_head; u; prev = u, u = u->next) {
        if (u->waiter || !same_stream(&u->h, expect)) continue;
        if (!check_match(n, peer_rank, &u->h, r)) break;
        if (!u->complete) {
            u->waiter = r;
            pthread_mutex_unlock(&n->mu);
            return;
        }
        if (r->len) memcpy(r->buf, u->data, r->len);
        r->done = 1;
        if (prev)
            prev->next = u->next;
        else
            pe->uq_head = u->next;
        if (pe->uq_tail == u) pe->uq_tail = prev;
        free(u->data);
        free(u);
        pthread_mutex_unlock(&n->mu);
        return;
    }
    if (r->done) { /* mismatch */
        pthread_mutex_unlock(&n->mu);
        return;
    }
post:
    if (pe->rq_tail)
        pe->rq_tail->next = r;
    else
        pe->rq_head = r;
    pe->rq_tail = r;
    pthread_mutex_unlock(&n->mu);
}

/* ---- receiving -------------------------------------------------------------------------- */

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
            unlink_umsg(pe, u);
            free_umsg(u);
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
            peer_lost(n, p, "sent a malformed abort message");
        } else {
            char why[480];
            snprintf(why, sizeof(why), "%s [reported to rank %d by rank %d]", a.why, n->rank, p);
            /* Pass the first failure on before closing: a peer that then finds this socket
             * closed (or gets EPIPE writing to it) reads why, instead of blaming this rank. */
            break_locked(n, a.failed_rank, (chorus_result)a.result, why, a.why);
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

static void unlink_chunk(lane *ln, lchunk *c)
{
    lchunk *prev = NULL;
    for (lchunk *x = ln->cq_head; x; prev = x, x = x->next)
        if (x == c) {
            if (prev)
                prev->next = c->next;
            else
                ln->cq_head = c->next;
            if (ln->cq_tail == c) ln->cq_tail = prev;
            return;
        }
}

/* Slice c has all its bytes and knows its message: copy it out of early storage, count it. */
static void chunk_complete(peer *pe, lane *ln, lchunk *c)
{
    if (c->early && c->dst && c->len) memcpy(c->dst, c->early, c->len);
    stripe *st = c->st;
    unlink_chunk(ln, c);
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
    l0->plen = stripe_slice(l0->cur.len, n->nlanes, 0, &off);
    l0->dstripe = st;
    for (int l = 1; l < n->nlanes; l++) {
        lane *ln = &pe->lanes[l];
        size_t len = stripe_slice(l0->cur.len, n->nlanes, l, &off);
        lchunk *c = find_chunk(ln, seq);
        if (c && c->len != len) {
            peer_lost(n, p,
                      "garbage on the connection: a slice of a striped message of the "
                      "wrong length");
            return 0;
        }
        if (!c) {
            if (!(c = calloc(1, sizeof(*c)))) return -1;
            c->seq = seq;
            c->len = len;
            if (ln->cq_tail)
                ln->cq_tail->next = c;
            else
                ln->cq_head = c;
            ln->cq_tail = c;
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

/* A complete header arrived from p: decide where its payload goes. */
static void route_header(chorus_net *n, int p)
{
    peer *pe = &n->peers[p];
    lane *ln = &pe->lanes[0];
    int discard = 0; /* a point-to-point payload that fits no receive: read and dropped */
    char why[200];
    chorus_wire_hdr *h = &ln->cur;
    if (chorus__wire_decode_hdr(ln->hbuf, n->max_msg, h, why, sizeof(why)) != CHORUS_OK) {
        char msg[300];
        snprintf(msg, sizeof(msg), "garbage on the connection: %s", why);
        peer_lost(n, p, msg);
        return;
    }
    ln->in_payload = 1;
    ln->doff = 0;
    ln->plen = h->len;
    if (h->type == CHORUS_MSG_ABORT) {
        if (h->len > sizeof(pe->ctl)) {
            peer_lost(n, p, "oversized abort message");
            return;
        }
        ln->dst = (char *)pe->ctl;
    } else if (h->type == CHORUS_MSG_PING || h->type == CHORUS_MSG_BYE) {
        if (h->len) {
            peer_lost(n, p, "control message with a payload");
            return;
        }
        if (h->type == CHORUS_MSG_BYE) pe->bye = ln->bye = 1;
    } else if (h->type == CHORUS_MSG_P2P || h->type == CHORUS_MSG_COLL) {
        chorus_req *r = NULL;
        if (h->type == CHORUS_MSG_P2P) {
            if (!p2p_header_ok(h)) {
                peer_lost(n, p,
                          "garbage on the connection: a point-to-point header without a "
                          "valid dtype");
                return;
            }
            r = p2p_take_posted(n, p, h);
            int fit = r ? p2p_claim(n, r, h, p) : 1;
            if (fit < 0) return;
            if (!fit) {
                r = NULL;
                discard = 1;
            }
        } else {
            for (chorus_req *x = pe->rq_head; x; x = x->next)
                if (same_stream(h, &x->h)) {
                    r = x;
                    break;
                }
            if (r) {
                unlink_req(&pe->rq_head, &pe->rq_tail, r);
                if (!check_match(n, p, h, r)) return;
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
                break_locked(n, p, CHORUS_ERR_NOMEM, why, why);
                return;
            }
            u->h = *h;
            u->data = data;
            if (pe->uq_tail)
                pe->uq_tail->next = u;
            else
                pe->uq_head = u;
            pe->uq_tail = u;
            pe->dmsg = u;
            ln->dst = u->data;
        }
        if (striped(n, h) && stripe_begin(n, p, ln->dst)) {
            const char *why = "out of memory receiving a striped message";
            break_locked(n, p, CHORUS_ERR_NOMEM, why, why);
            return;
        }
        if (n->broken != CHORUS_OK) return;
    } else {
        peer_lost(n, p, "unexpected message type on an established connection");
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
    char why[200];
    if (chorus__wire_decode_hdr(ln->hbuf, n->max_msg, h, why, sizeof(why)) != CHORUS_OK) {
        char msg[300];
        snprintf(msg, sizeof(msg), "garbage on the connection: %s", why);
        peer_lost(n, p, msg);
        return;
    }
    ln->in_payload = 1;
    ln->doff = 0;
    ln->plen = h->len;
    ln->dst = NULL;
    ln->dchunk = NULL;
    if (h->type == CHORUS_MSG_PING || h->type == CHORUS_MSG_BYE) {
        if (h->len) {
            peer_lost(n, p, "control message with a payload");
            return;
        }
        if (h->type == CHORUS_MSG_BYE) ln->bye = 1;
        ln->in_payload = 0;
        ln->hoff = 0;
        return;
    }
    if (h->type != CHORUS_MSG_CHUNK || h->len == 0) {
        peer_lost(n, p, "unexpected message type on an established connection");
        return;
    }
    lchunk *c = find_chunk(ln, h->seq);
    if (!c && h->seq >= pe->rx_stripe) {
        read_lane(n, p, 0); /* its header may be waiting on lane 0 */
        if (n->broken != CHORUS_OK) return;
        c = find_chunk(ln, h->seq);
    }
    if ((c && (c->len != h->len || c->arrived)) || (!c && h->seq < pe->rx_stripe)) {
        peer_lost(n, p,
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
            break_locked(n, p, CHORUS_ERR_NOMEM, oom, oom);
            return;
        }
        c->seq = h->seq;
        c->len = h->len;
        c->early = early;
        if (ln->cq_tail)
            ln->cq_tail->next = c;
        else
            ln->cq_head = c;
        ln->cq_tail = c;
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

static void read_lane(chorus_net *n, int p, int l)
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
                break_locked(n, p, CHORUS_ERR_NOMEM, why, why);
                return;
            }
            ln->spos = ln->slen = 0;
            r = recv(ln->fd, ln->stage, STAGE_SIZE, MSG_DONTWAIT);
        }
        if (r == 0) {
            if (ln->bye && !ln->in_payload && ln->hoff == 0) {
                /* finalized cleanly: stop watching it; only a later use of it is an error */
                epoll_ctl(n->epfd, EPOLL_CTL_DEL, ln->fd, NULL);
                return;
            }
            if (l)
                conn_failed(n, p, l, "its connection closed (process exited or was killed)");
            else
                peer_lost(n, p, "its connection closed (process exited or was killed)");
            return;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (errno == EINTR) continue;
            if (l)
                conn_failed(n, p, l, strerror(errno));
            else
                peer_lost(n, p, strerror(errno));
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

static void handle_events(chorus_net *n, struct epoll_event *ev, int nev)
{
    for (int i = 0; i < nev && n->broken == CHORUS_OK; i++) {
        int p = (int)(uint32_t)ev[i].data.u64, l = (int)(ev[i].data.u64 >> 32);
        if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) read_lane(n, p, l);
        if (n->broken == CHORUS_OK && (ev[i].events & EPOLLOUT)) flush_sends(n, p, l);
    }
}

/* ---- waiting ----------------------------------------------------------------------------- */

/* Sleeps in epoll_wait for at most ms with mu dropped (so that other threads can drive the
 * net meanwhile), then handles what is ready. mu is held on entry and on return. */
static void poll_unlocked(chorus_net *n, int ms)
{
    struct epoll_event ev[32];
    pthread_mutex_unlock(&n->mu);
    int nev = epoll_wait(n->epfd, ev, 32, ms);
    /* While polling, let a runnable peer on the same core go first: on a busy machine
     * its message is what we are waiting for. */
    if (nev == 0 && ms == 0) sched_yield();
    pthread_mutex_lock(&n->mu);
    if (nev > 0) handle_events(n, ev, nev);
}

/* How long to sleep next: 0 while spinning (CHORUS_SPIN_US), else until the deadline, at most
 * 100 ms so that a break by another thread is seen promptly. */
static int sleep_ms(double now, double spin_until, double deadline)
{
    int ms = now < spin_until ? 0 : (int)((deadline - now) * 1000) + 1;
    return ms > 100 ? 100 : ms;
}

/* Request r waits on a peer that has finalized (or, from any source, on peers that all have):
 * it can never complete, so the net breaks now instead of at the deadline. mu held. */
static void check_bye(chorus_net *n, const chorus_req *r)
{
    char why[300];
    if (r->peer == CHORUS__NET_ANY) {
        for (int p = 0; p < n->size; p++)
            if (p != n->rank && !n->peers[p].bye && !n->peers[p].lost) return;
        snprintf(why, sizeof(why),
                 "every other rank has already finalized, but rank %d still waits in a receive "
                 "from any rank",
                 n->rank);
        break_locked(n, -1, CHORUS_ERR_PEER_LOST, why, why);
        return;
    }
    if (!n->peers[r->peer].bye) return;
    snprintf(why, sizeof(why),
             "rank %d (host %s) has already finalized, but rank %d still expects it in "
             "a collective or send/recv",
             r->peer, chorus__net_host(n, r->peer), n->rank);
    break_locked(n, r->peer, CHORUS_ERR_PEER_LOST, why, why);
}

/* When a wait on a live peer times out, the rank to blame is the one that made no progress:
 * with the watchdog on, every live peer sends something (a ping at least) every
 * CHORUS_HEARTBEAT_S, so a peer silent for several intervals is stopped or hung, while the
 * awaited one, heard from lately, is most likely waiting for it too. Returns that silent
 * peer (the longest silent) when the awaited one (waited_for, or -1 for any) was heard from
 * lately; else -1. mu held. */
static int silent_peer(chorus_net *n, int waited_for, double *silent_s)
{
    if (n->hb_interval <= 0 || !n->hb_started) return -1;
    double now = chorus__now(), limit = 3 * n->hb_interval;
    if (waited_for >= 0 && now - n->peers[waited_for].last_rx > limit) return -1;
    int q = -1;
    for (int p = 0; p < n->size; p++) {
        peer *pe = &n->peers[p];
        if (p == n->rank || pe->lanes[0].fd < 0 || pe->bye || now - pe->last_rx <= limit) continue;
        if (q < 0 || pe->last_rx < n->peers[q].last_rx) q = p;
    }
    if (q >= 0) *silent_s = now - n->peers[q].last_rx;
    return q;
}

/* Breaks the net because request r (or, probe, a chorus__net_probe for what r describes) made
 * no progress until its deadline. mu held. */
static void timeout_locked(chorus_net *n, const chorus_req *r, int probe)
{
    char what[160], why[480];
    double silent_s = 0;
    int q = silent_peer(n, r->peer, &silent_s);
    /* A silent peer the job may lose is lost, whether the watchdog or a deadline sees its
     * silence first: on a busy machine the two come in either order, and the verdict (the job
     * goes on without it) must not depend on which. */
    int e = q;
    if (r->peer >= 0 && r->peer != n->rank && n->hb_started &&
        chorus__now() - n->peers[r->peer].last_rx > 3 * n->hb_interval) {
        e = r->peer;
        silent_s = chorus__now() - n->peers[r->peer].last_rx;
    }
    if (e >= 0 && n->peers[e].expendable && !n->peers[e].lost && n->broken == CHORUS_OK) {
        snprintf(why, sizeof(why),
                 "nothing arrived from it for %.1f s, not even a heartbeat: the process is hung "
                 "or stopped (SIGSTOP?) or its host is unreachable (CHORUS_TIMEOUT_S)",
                 silent_s);
        peer_lost(n, e, why);
        return;
    }
    if (q >= 0 && q != r->peer) {
        snprintf(why, sizeof(why),
                 "rank %d (host %s) made no progress: nothing arrived from it for %.1f s, not "
                 "even a heartbeat, so it is stopped (SIGSTOP?) or hung; rank %d timed out "
                 "waiting %s rank %d, which is alive and waits too (CHORUS_TIMEOUT_S)",
                 q, chorus__net_host(n, q), silent_s, n->rank,
                 r->is_send ? "to send to" : "to receive from", r->peer);
        if (r->peer < 0)
            snprintf(why, sizeof(why),
                     "rank %d (host %s) made no progress: nothing arrived from it for %.1f s, "
                     "not even a heartbeat, so it is stopped (SIGSTOP?) or hung; rank %d timed "
                     "out waiting for a message from any rank (CHORUS_TIMEOUT_S)",
                     q, chorus__net_host(n, q), silent_s, n->rank);
        break_locked(n, q, CHORUS_ERR_TIMEOUT, why, why);
        return;
    }
    if (r->h.type != CHORUS_MSG_P2P) {
        chorus__wire_describe(&r->h, what, sizeof(what));
        snprintf(why, sizeof(why),
                 "rank %d timed out waiting to %s rank %d (host %s): %s; that rank is stuck "
                 "or not calling the same collectives (CHORUS_TIMEOUT_S)",
                 n->rank, r->is_send ? "send to" : "receive from", r->peer,
                 chorus__net_host(n, r->peer), what);
        break_locked(n, r->peer, CHORUS_ERR_TIMEOUT, why, why);
        return;
    }
    char tag[32] = "any tag";
    if (r->h.tag != CHORUS__NET_ANY) snprintf(tag, sizeof(tag), "tag %d", r->h.tag);
    if (probe)
        snprintf(what, sizeof(what), "a probe for a message with %s", tag);
    else
        snprintf(what, sizeof(what), "%s %s%llu %s with %s",
                 r->is_send ? "a send of" : "a receive of", r->is_send ? "" : "up to ",
                 (unsigned long long)r->h.count, chorus__dtype_name((int)((r->h.coll >> 8) & 0xff)),
                 tag);
    if (r->peer == CHORUS__NET_ANY)
        snprintf(why, sizeof(why),
                 "rank %d timed out in %s from any rank: no rank sent a matching message "
                 "(CHORUS_TIMEOUT_S)",
                 n->rank, what);
    else
        snprintf(why, sizeof(why),
                 "rank %d timed out in %s %s rank %d (host %s): that rank is stuck or did not "
                 "post the matching %s (CHORUS_TIMEOUT_S)",
                 n->rank, what, r->is_send ? "to" : "from", r->peer, chorus__net_host(n, r->peer),
                 r->is_send ? "receive" : "send");
    break_locked(n, r->peer, CHORUS_ERR_TIMEOUT, why, why);
}

/* Drives progress until need requests are done; extend_s > 0 moves the deadline on whenever a
 * request moved a byte. CHORUS_OK or the error that broke the net. */
static chorus_result wait_core(chorus_net *n, chorus_req *const *reqs, int nreq, int need,
                               double deadline, double extend_s, chorus_errbuf *e)
{
    double spin_until = chorus__now() + n->spin_us * 1e-6;
    pthread_mutex_lock(&n->mu);
    size_t last = (size_t)-1; /* bytes the requests had moved at the last look */
    for (;;) {
        int pending = -1, ndone = 0;
        size_t moved = 0; /* to tell progress from a stall */
        for (int i = 0; i < nreq; i++) {
            moved += reqs[i]->hoff + reqs[i]->off + reqs[i]->lane_moved;
            if (reqs[i]->done)
                ndone++;
            else if (pending < 0)
                pending = i;
        }
        if (pending < 0 || ndone >= need) break; /* done, even if the net broke right after */
        if (n->broken == CHORUS_OK) check_bye(n, reqs[pending]);
        if (n->broken != CHORUS_OK) {
            chorus_result r = n->broken;
            if (e) snprintf(e->msg, sizeof(e->msg), "%s", n->broken_msg);
            pthread_mutex_unlock(&n->mu);
            return r;
        }
        double now = chorus__now();
        if (extend_s > 0 && moved != last) {
            if (last != (size_t)-1) deadline = now + extend_s;
            last = moved;
        }
        if (now > deadline) {
            timeout_locked(n, reqs[pending], 0);
            continue;
        }
        poll_unlocked(n, sleep_ms(now, spin_until, deadline));
    }
    pthread_mutex_unlock(&n->mu);
    return CHORUS_OK;
}

chorus_result chorus__net_wait(chorus_net *n, chorus_req *const *reqs, int nreq, double deadline,
                               chorus_errbuf *e)
{
    CHORUS_CHECK(wait_core(n, reqs, nreq, nreq, deadline, 0, e));
    for (int i = 0; i < nreq; i++)
        if (reqs[i]->res != CHORUS_OK) return reqs[i]->res;
    return CHORUS_OK;
}

chorus_result chorus__net_wait_some(chorus_net *n, chorus_req *const *reqs, int nreq, int need,
                                    double timeout_s, chorus_errbuf *e)
{
    return wait_core(n, reqs, nreq, need, chorus__now() + timeout_s, timeout_s, e);
}

int chorus__net_test(chorus_net *n, chorus_req *r, chorus_errbuf *e)
{
    struct epoll_event ev[32];
    pthread_mutex_lock(&n->mu);
    if (!r->done && n->broken == CHORUS_OK) {
        int nev = epoll_wait(n->epfd, ev, 32, 0);
        if (nev > 0) handle_events(n, ev, nev);
        if (!r->done && n->broken == CHORUS_OK) check_bye(n, r);
    }
    int st = r->done ? 1 : n->broken != CHORUS_OK ? -1 : 0;
    if (st < 0 && e) snprintf(e->msg, sizeof(e->msg), "%s", n->broken_msg);
    pthread_mutex_unlock(&n->mu);
    return st;
}

chorus_result chorus__net_probe(chorus_net *n, uint64_t comm_id, int peer_rank, int tag,
                                double timeout_s, int *found, chorus_wire_hdr *h, int *src,
                                chorus_errbuf *e)
{
    double now = chorus__now(), deadline = now + timeout_s, spin_until = now + n->spin_us * 1e-6;
    chorus_req want = {.peer = peer_rank,
                       .h = {.type = CHORUS_MSG_P2P, .comm_id = comm_id, .tag = tag}};
    *found = 0;
    pthread_mutex_lock(&n->mu);
    if (n->broken == CHORUS_OK) poll_unlocked(n, 0);
    for (;;) {
        umsg *u = n->broken == CHORUS_OK ? p2p_find(n, peer_rank, comm_id, tag, src, 0) : NULL;
        if (u) {
            *h = u->h;
            *found = 1;
            break;
        }
        if (n->broken == CHORUS_OK && timeout_s > 0) check_bye(n, &want);
        if (n->broken != CHORUS_OK) {
            chorus_result r = n->broken;
            if (e) snprintf(e->msg, sizeof(e->msg), "%s", n->broken_msg);
            pthread_mutex_unlock(&n->mu);
            return r;
        }
        if (timeout_s <= 0) break;
        now = chorus__now();
        if (now > deadline) {
            timeout_locked(n, &want, 1);
            continue;
        }
        poll_unlocked(n, sleep_ms(now, spin_until, deadline));
    }
    pthread_mutex_unlock(&n->mu);
    return CHORUS_OK;
}

/* ---- watchdog ---------------------------------------------------------------------------- */

/* Every half interval: read what is pending (progress for everyone, and fresh last_rx),
 * send a PING where nothing went out for an interval, and declare lost a peer from which
 * nothing arrived for hb_timeout. Runs until the net breaks or is released. */
static void *watchdog(void *arg)
{
    chorus_net *n = arg;
    struct epoll_event ev[32];
    pthread_mutex_lock(&n->mu);
    while (!n->hb_stop && n->broken == CHORUS_OK) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double half = n->hb_interval / 2;
        ts.tv_sec += (time_t)half;
        ts.tv_nsec += (long)((half - (double)(time_t)half) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&n->hb_cv, &n->mu, &ts);
        if (n->hb_stop || n->broken != CHORUS_OK) break;
        int nev;
        while ((nev = epoll_wait(n->epfd, ev, 32, 0)) > 0 && n->broken == CHORUS_OK)
            handle_events(n, ev, nev);
        chorus__status_check_launcher();
        double now = chorus__now();
        for (int p = 0; p < n->size && n->broken == CHORUS_OK; p++) {
            if (p == n->rank || n->peers[p].bye) continue;
            peer *pe = &n->peers[p];
            char what[240];
            int silent = pe->lanes[0].fd >= 0 && now - pe->last_rx > n->hb_timeout;
            if (silent) {
                snprintf(what, sizeof(what),
                         "nothing arrived from it for %.1f s, not even a heartbeat: the process "
                         "is hung or stopped (SIGSTOP?) or its host is unreachable "
                         "(CHORUS_HEARTBEAT_TIMEOUT_S)",
                         now - pe->last_rx);
                peer_lost(n, p, what);
                continue;
            }
            /* every lane is watched on its own too: one that fell silent while the others
             * still talk is the peer lost. An idle lane hears a ping only once an interval,
             * so a lane gets two intervals more than the peer as a whole. */
            for (int l = 0; l < n->nlanes && n->broken == CHORUS_OK && !pe->lost; l++) {
                lane *ln = &pe->lanes[l];
                if (ln->fd < 0 || ln->bye) continue;
                if (!silent && now - ln->last_rx > n->hb_timeout + 2 * n->hb_interval) {
                    snprintf(what, sizeof(what),
                             "nothing arrived on its TCP lane %d of %d for %.1f s, not even a "
                             "heartbeat, while its other lanes still talk: that connection is "
                             "broken (CHORUS_HEARTBEAT_TIMEOUT_S)",
                             l, n->nlanes, now - ln->last_rx);
                    peer_lost(n, p, what);
                    break;
                }
                if (!ln->sq_head && now - ln->last_tx >= n->hb_interval) {
                    chorus_req *r = &ln->ping;
                    memset(r, 0, sizeof(*r));
                    r->is_send = 1;
                    r->peer = p;
                    r->h.type = CHORUS_MSG_PING;
                    chorus__wire_encode_hdr(&r->h, r->hbytes);
                    ln->sq_head = ln->sq_tail = r;
                    flush_sends(n, p, l);
                }
            }
        }
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

static void watchdog_start(chorus_net *n)
{
    if (n->hb_interval <= 0 || n->size < 2) return;
    if (n->hb_timeout < 2 * n->hb_interval) n->hb_timeout = 2 * n->hb_interval;
    double now = chorus__now();
    for (int p = 0; p < n->size; p++) {
        n->peers[p].last_rx = now;
        for (int l = 0; l < n->nlanes; l++)
            n->peers[p].lanes[l].last_rx = n->peers[p].lanes[l].last_tx = now;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&n->hb_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (chorus__thread_start(&n->hb_thread, watchdog, n) == 0)
        n->hb_started = 1;
    else
        pthread_cond_destroy(&n->hb_cv);
}

static void watchdog_stop(chorus_net *n)
{
    if (!n->hb_started) return;
    pthread_mutex_lock(&n->mu);
    n->hb_stop = 1;
    pthread_cond_signal(&n->hb_cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->hb_thread, NULL);
    pthread_cond_destroy(&n->hb_cv);
    n->hb_started = 0;
}

/* ---- set-up ----------------------------------------------------------------------------- */

chorus_result chorus__net_create(const chorus_config *cfg, int rank, int size, const char *job,
                                 const char *bind_ip, chorus_net **out, char *addr, size_t addr_len,
                                 chorus_errbuf *e)
{
    chorus_net *n = calloc(1, sizeof(*n));
    if (!n) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    n->nlanes = cfg->tcp_lanes < 1 ? 1 : (int)cfg->tcp_lanes;
    if (cfg->tcp_lanes > CHORUS_WIRE_LANES_MAX) {
        free(n);
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "CHORUS_TCP_LANES=%ld: at most %d",
                            cfg->tcp_lanes, CHORUS_WIRE_LANES_MAX);
    }
    n->peers = calloc((size_t)size, sizeof(peer));
    lane *lanes = calloc((size_t)size * (size_t)n->nlanes, sizeof(lane));
    if (!n->peers || !lanes) {
        free(n->peers);
        free(lanes);
        free(n);
        return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    }
    for (int p = 0; p < size; p++) {
        n->peers[p].lanes = lanes + (size_t)p * (size_t)n->nlanes;
        for (int l = 0; l < n->nlanes; l++) n->peers[p].lanes[l].fd = -1;
    }
    n->rank = rank;
    n->size = size;
    n->refs = 1;
    n->listen_fd = -1;
    n->broken_rank = -1;
    n->max_msg = (uint64_t)cfg->max_message;
    n->spin_us = (int)cfg->spin_us;
    n->hb_interval = cfg->heartbeat_s;
    n->hb_timeout = cfg->heartbeat_timeout_s;
    if (cfg->timeout_s > 0 && n->hb_timeout > cfg->timeout_s) n->hb_timeout = cfg->timeout_s;
    snprintf(n->job, sizeof(n->job), "%s", job);
    chorus__auth_key_from_env(&n->key);
    pthread_mutex_init(&n->mu, NULL);
    n->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (n->epfd < 0) {
        chorus__net_release(n);
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "epoll_create1: %s", strerror(errno));
    }
    int port = 0;
    if (size > 1) {
        chorus_result r =
            chorus__sock_listen(bind_ip, 0, size * n->nlanes + 16, &n->listen_fd, &port, e);
        if (r != CHORUS_OK) {
            chorus__net_release(n);
            return r;
        }
    }
    snprintf(addr, addr_len, "%s:%d", bind_ip && *bind_ip ? bind_ip : "127.0.0.1", port);
    *out = n;
    return CHORUS_OK;
}

/* Opens lane l to rank p: connects, proves the secret, says hello (rank, lane, lane count). */
static chorus_result connect_to(chorus_net *n, int p, int l, const char *addr, double deadline,
                                chorus_errbuf *e)
{
    int fd;
    /* Peers publish their address after they listen: a refusal means that peer is gone. */
    chorus_result cr = chorus__sock_connect_ex(addr, deadline, 0, &fd, e);
    if (cr != CHORUS_OK) {
        char msg[sizeof(e->msg)];
        snprintf(msg, sizeof(msg), "%s", e->msg);
        return chorus__fail(e, cr, "rank %d cannot connect to rank %d (host %s): %s", n->rank, p,
                            chorus__net_host(n, p), msg);
    }
    char what[200];
    snprintf(what, sizeof(what), "rank %d (host %s) at %s", p, chorus__net_host(n, p), addr);
    chorus_result ar = chorus__auth_connect(fd, &n->key, deadline, what, e);
    if (ar != CHORUS_OK) {
        close(fd);
        return ar;
    }
    chorus_wire_hello hello = {.rank = n->rank, .size = n->size, .lane = l, .lanes = n->nlanes};
    snprintf(hello.job, sizeof(hello.job), "%s", n->job);
    unsigned char payload[CHORUS_WIRE_HELLO_LEN];
    chorus__wire_encode_hello(&hello, payload);
    chorus_wire_hdr h = {.type = CHORUS_MSG_HELLO, .len = sizeof(payload)};
    int rc = chorus__sock_send_msg(fd, &h, payload, deadline);
    unsigned char *ack = NULL;
    char why[200] = "";
    if (rc == 0)
        rc = chorus__sock_recv_msg(fd, &h, &ack, CHORUS_WIRE_ABORT_MAX, deadline, why, sizeof(why));
    chorus_wire_abort refusal;
    int refused = rc == 0 && h.type == CHORUS_MSG_ABORT &&
                  chorus__wire_decode_abort(ack, h.len, &refusal) == CHORUS_OK;
    free(ack);
    if (refused) { /* a rank of the job that cannot work with this one, and says why */
        close(fd);
        return chorus__fail(e, (chorus_result)refusal.result, "%s", refusal.why);
    }
    if (rc == -3 && n->key.set) {
        close(fd);
        return chorus__fail(e, CHORUS_ERR_AUTH,
                            "rank %d at %s closed the connection after our authentication "
                            "proof: it does not accept our CHORUS_SECRET",
                            p, addr);
    }
    if (rc || h.type != CHORUS_MSG_HELLO_ACK) {
        close(fd);
        return chorus__fail(e, rc == -2 ? CHORUS_ERR_TIMEOUT : CHORUS_ERR_PEER_LOST,
                            "handshake with rank %d at %s failed: %s", p, addr,
                            rc ? why : "unexpected reply");
    }
    n->peers[p].lanes[l].fd = fd;
    return CHORUS_OK;
}

/* Accepts one connection and checks its hello. Returns the peer's rank or -1 at the deadline
 * (*res CHORUS_ERR_TIMEOUT). A connection that fails the checks is refused (closed and
 * logged; a rank of the job that opens another number of lanes is told why) and set-up goes
 * on. */
static int accept_one(chorus_net *n, double deadline, chorus_result *res)
{
    *res = CHORUS_OK;
    for (;;) {
        double left = deadline - chorus__now();
        if (left <= 0) {
            *res = CHORUS_ERR_TIMEOUT;
            return -1;
        }
        struct pollfd pfd = {.fd = n->listen_fd, .events = POLLIN};
        int pr = poll(&pfd, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
        if (pr <= 0) continue;
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        int fd = accept4(n->listen_fd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
        if (fd < 0) continue;
        char from[64];
        inet_ntop(AF_INET, &sa.sin_addr, from, sizeof(from));
        /* A real peer sends its hello at once; do not let a silent client hold set-up up. */
        double hd = chorus__now() + 5.0;
        if (hd > deadline) hd = deadline;
        chorus_wire_hdr h;
        unsigned char *payload = NULL;
        char why[200] = "";
        /* The secret first: nothing else is read from a connection that cannot prove it. */
        int rc = chorus__auth_accept(fd, &n->key, hd, why, sizeof(why)) ? -5 : 0;
        if (rc == 0)
            rc = chorus__sock_recv_msg(fd, &h, &payload, CHORUS_WIRE_HELLO_LEN, hd, why,
                                       sizeof(why));
        chorus_wire_hello hello;
        const char *bad = NULL;
        if (rc)
            bad = why;
        else if (h.type == CHORUS_MSG_AUTH_HELLO)
            bad = "it wants to authenticate, but CHORUS_SECRET is not set on this rank";
        else if (h.type != CHORUS_MSG_HELLO ||
                 chorus__wire_decode_hello(payload, h.len, &hello) != CHORUS_OK)
            bad = "not a valid hello";
        else if (strcmp(hello.job, n->job))
            bad = "belongs to another job";
        else if (hello.size != n->size)
            bad = "disagrees on the world size";
        else if (hello.lanes != n->nlanes && hello.rank > n->rank) {
            /* a rank of this job (it proved the secret and names the job) configured
             * differently: it is told why (an abort instead of the acknowledgement) and fails
             * at once; this rank remembers why, for its own error at the deadline */
            free(payload);
            chorus_wire_abort a = {.failed_rank = -1, .result = CHORUS_ERR_INVALID_ARG};
            snprintf(a.why, sizeof(a.why),
                     "rank %d opens %d TCP lanes per pair of ranks, rank %d opens %d: "
                     "CHORUS_TCP_LANES must be the same on every rank",
                     hello.rank, hello.lanes, n->rank, n->nlanes);
            snprintf(n->refusal, sizeof(n->refusal), "%s", a.why);
            CHORUS_WARN(CHORUS_LOG_TCP, "refused a connection from %s:%d: %s", from,
                        ntohs(sa.sin_port), a.why);
            unsigned char ab[CHORUS_WIRE_ABORT_MAX];
            chorus_wire_hdr ah = {.type = CHORUS_MSG_ABORT,
                                  .len = chorus__wire_encode_abort(&a, ab)};
            chorus__sock_send_msg(fd, &ah, ab, hd);
            close(fd);
            continue;
        } else if (hello.rank <= n->rank || n->peers[hello.rank].lanes[hello.lane].fd >= 0)
            bad = "claims a rank that should not connect here";
        free(payload);
        if (bad) {
            CHORUS_WARN(CHORUS_LOG_TCP, "refused a connection from %s:%d: %s", from,
                        ntohs(sa.sin_port), bad);
            close(fd);
            continue;
        }
        chorus_wire_hdr ack = {.type = CHORUS_MSG_HELLO_ACK};
        if (chorus__sock_send_msg(fd, &ack, NULL, deadline)) {
            close(fd);
            continue;
        }
        n->peers[hello.rank].lanes[hello.lane].fd = fd;
        return hello.rank;
    }
}

chorus_result chorus__net_connect_all(chorus_net *n, char *const *addrs, char *const *hosts,
                                      double deadline, chorus_errbuf *e)
{
    for (int p = 0; p < n->size; p++)
        snprintf(n->peers[p].host, sizeof(n->peers[p].host), "%s", hosts ? hosts[p] : "?");
    for (int p = 0; p < n->rank; p++)
        for (int l = 0; l < n->nlanes; l++)
            CHORUS_CHECK(connect_to(n, p, l, addrs[p], deadline, e));
    for (int got = (n->rank + 1) * n->nlanes; got < n->size * n->nlanes; got++) {
        chorus_result r;
        if (accept_one(n, deadline, &r) < 0) {
            int missing = -1;
            for (int p = n->rank + 1; p < n->size && missing < 0; p++)
                for (int l = 0; l < n->nlanes; l++)
                    if (n->peers[p].lanes[l].fd < 0) missing = p;
            return chorus__fail(e, r,
                                "rank %d timed out waiting for rank %d (host %s) to connect%s%s",
                                n->rank, missing, chorus__net_host(n, missing),
                                n->refusal[0] ? "; refused earlier: " : "", n->refusal);
        }
    }
    if (n->listen_fd >= 0) {
        close(n->listen_fd);
        n->listen_fd = -1;
    }
    for (int p = 0; p < n->size; p++)
        for (int l = 0; l < n->nlanes && p != n->rank; l++) {
            int fd = n->peers[p].lanes[l].fd;
            chorus__sock_tune(fd);
            set_nonblock(fd);
            struct epoll_event ev = {.events = EPOLLIN, .data.u64 = lane_tag(p, l)};
            if (epoll_ctl(n->epfd, EPOLL_CTL_ADD, fd, &ev))
                return chorus__fail(e, CHORUS_ERR_SYSTEM, "epoll_ctl: %s", strerror(errno));
        }
    CHORUS_INFO(CHORUS_LOG_TCP, "rank %d connected to %d peer%s over %d TCP lane%s each", n->rank,
                n->size - 1, n->size == 2 ? "" : "s", n->nlanes, n->nlanes == 1 ? "" : "s");
    watchdog_start(n);
    return CHORUS_OK;
}

void chorus__net_retain(chorus_net *n)
{
    __atomic_add_fetch(&n->refs, 1, __ATOMIC_ACQ_REL);
}

/* Before closing a healthy net: waits until the peers' kernels have acknowledged everything
 * this rank wrote (a fast rank's last segments may still be on a slow link), reading and
 * dropping what arrives meanwhile, since closing a socket with unread data resets the
 * connection and throws away what was still queued. Gives up on a peer that closed or that
 * took nothing for ABORT_FLUSH_S (or CHORUS_TIMEOUT_S when shorter). */
static void drain_before_close(chorus_net *n)
{
    double timeout_s = chorus__timeout_s();
    if (timeout_s > ABORT_FLUSH_S) timeout_s = ABORT_FLUSH_S;
    double deadline = chorus__now() + timeout_s;
    char sink[4096];
    for (int i = 0; i < n->size * n->nlanes; i++) {
        lane *pe = &n->peers[i / n->nlanes].lanes[i % n->nlanes];
        if (pe->fd < 0) continue;
        int last = -1, outq;
        while (ioctl(pe->fd, SIOCOUTQ, &outq) == 0 && outq > 0 && chorus__now() < deadline) {
            if (outq != last) deadline = chorus__now() + timeout_s;
            last = outq;
            ssize_t k;
            while ((k = recv(pe->fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0) {
            }
            if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                break; /* the peer closed: nothing more can be delivered */
            struct pollfd pf = {.fd = pe->fd, .events = POLLIN};
            poll(&pf, 1, 10);
        }
    }
}

void chorus__net_release(chorus_net *n)
{
    if (!n || __atomic_sub_fetch(&n->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    watchdog_stop(n);
    unsigned char bye[CHORUS_WIRE_HDR_LEN];
    chorus_wire_hdr h = {.type = CHORUS_MSG_BYE};
    chorus__wire_encode_hdr(&h, bye);
    for (int i = 0; i < n->size * n->nlanes; i++) {
        lane *pe = &n->peers[i / n->nlanes].lanes[i % n->nlanes];
        /* Say goodbye (on every lane) so the peer knows our closing is no failure; skipped
         * when a partial message is still queued (the peer could not parse it) or the net is
         * broken. */
        if (pe->fd >= 0 && n->broken == CHORUS_OK && !pe->sq_head)
            if (send(pe->fd, bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* gone */
            }
    }
    if (n->broken == CHORUS_OK) drain_before_close(n);
    for (int p = 0; p < n->size; p++) {
        peer *pe = &n->peers[p];
        for (int l = 0; l < n->nlanes; l++) {
            lane *ln = &pe->lanes[l];
            if (ln->fd >= 0) close(ln->fd);
            free(ln->stage);
            /* the slices of striped sends that never went out belong to the lane (lane 0's
             * queue holds the callers' requests, which may be gone by now: never touched) */
            for (chorus_req *r = l ? ln->sq_head : NULL, *nx; r; r = nx) {
                nx = r->next;
                if (r != &ln->ping) free(r);
            }
            for (lchunk *c = ln->cq_head, *nx; c; c = nx) {
                nx = c->next;
                free(c->early);
                free(c);
            }
        }
        for (stripe *st = pe->stripes, *nx; st; st = nx) {
            nx = st->next;
            free(st);
        }
        for (umsg *u = pe->uq_head, *nx; u; u = nx) {
            nx = u->next;
            free(u->data);
            free(u);
        }
    }
    if (n->listen_fd >= 0) close(n->listen_fd);
    if (n->epfd >= 0) close(n->epfd);
    pthread_mutex_destroy(&n->mu);
    if (n->peers) free(n->peers[0].lanes);
    free(n->peers);
    free(n->lost_notice);
    free(n);
}
