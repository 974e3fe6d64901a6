/*
 * net_internal.h - what the files of the TCP transport share: the net, its peers and their
 * lanes, the queues of messages, and the functions one file offers the others. Only files of
 * src/transport/tcp/ include it; the rest of the library sees net.h.
 *
 * The files, lowest first (a file calls only into the files listed before it):
 *   fail.c      breaking the net (abort messages to the peers), losing a peer, host names
 *   match.c     which posted receive takes which message: streams of collectives, and
 *               point-to-point matching on communicator, source and tag
 *   recv.c      reading the lanes: headers, payloads, striped slices, connections that close
 *   send.c      writing the lanes' send queues, striping large messages over the lanes
 *   progress.c  epoll progress, waits with deadlines, timeouts and whom they blame, probes
 *   watchdog.c  the heartbeat thread that pings idle lanes and finds silent peers
 *   conn.c      creating the net, the connection mesh and its handshakes, closing it
 *   ops.c       the net as a transport (transport.h): the table of its operations
 *
 * Locking: one mutex per net (mu) protects everything below. A thread that waits drops it
 * while it sleeps in epoll_wait, so several communicators sharing the net (comm_split) can be
 * driven from several threads; whoever holds the mutex makes progress for everyone. Every
 * function declared here expects mu held, except where its comment says otherwise.
 */
#ifndef CHORUS_NET_INTERNAL_H
#define CHORUS_NET_INTERNAL_H

#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "base/list.h"
#include "transport/tcp/net.h"
#include "wire/auth.h"

/* A message that arrived before a receive was posted for it (or is still arriving). */
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
    uint64_t stripe_min, stripe_max;     /* collectives striped (CHORUS_TCP_STRIPE_MIN/_MAX) */
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

/* How long an aborting rank keeps writing, without progress, a message it had half sent and
 * then its abort, so that the abort arrives whole (a peer reads whatever comes, into an
 * unexpected message if need be). Also how long a closed lane waits for lane 0 to tell why. */
#define ABORT_FLUSH_S 2.0

CHORUS_SLIST(tcp_reqq, chorus_req, next) /* lane send queues, posted receives */
CHORUS_SLIST(tcp_umsgq, umsg, next)      /* a peer's unexpected messages */
CHORUS_SLIST(tcp_chunkq, lchunk, next)   /* a lane's expected or early slices */

/* Epoll's tag for lane l of peer p. */
static inline uint64_t tcp_lane_tag(int p, int l)
{
    return (uint64_t)l << 32 | (uint32_t)p;
}

/* Slice c of a striped message of len bytes over k lanes: [*off, *off + return value). */
static inline size_t tcp_stripe_slice(uint64_t len, int k, int c, size_t *off)
{
    *off = (size_t)(len * (uint64_t)c / (uint64_t)k);
    return (size_t)(len * (uint64_t)(c + 1) / (uint64_t)k) - *off;
}

/* Is a message with header h striped over the lanes? A point-to-point message of STRIPE_MIN
 * bytes or more is; a part of a collective is when the call, as its header tells (count and
 * element type), is stripe_min to stripe_max bytes: both ends read the same header, so they
 * agree, and one call's messages all take the same path. */
static inline int tcp_striped(const chorus_net *n, const chorus_wire_hdr *h)
{
    if (n->nlanes <= 1 || h->len < STRIPE_MIN) return 0;
    if (h->type == CHORUS_MSG_P2P) return 1;
    if (h->type != CHORUS_MSG_COLL) return 0;
    uint64_t es = chorus_dtype_size((chorus_dtype)((h->coll >> 8) & 0xff));
    return es && h->count <= n->stripe_max / es && h->count * es >= n->stripe_min;
}

static inline void tcp_umsg_free(umsg *u)
{
    free(u->data);
    free(u);
}

/* ---- fail.c ---- */

/* Breaks the net: the first error wins, it is logged and recorded for the status file, and the
 * sockets are shut down. tell: the reason sent to the peers in an abort message (with
 * failed_rank and r), or NULL to tell nobody. */
void tcp_break_locked(chorus_net *n, int failed_rank, chorus_result r, const char *why,
                      const char *tell);
/* Peer p is lost (what: how it was seen). A rank the job may lose is dropped and the net stays
 * healthy (chorus__net_set_expendable); any other loss breaks the net, blaming p. */
void tcp_peer_lost(chorus_net *n, int p, const char *what);
/* Request r ends with CHORUS_ERR_PEER_LOST. */
void tcp_fail_req(chorus_req *r);

/* ---- match.c ---- */

/* Does a message with header h belong to the same stream as receive r? Collective messages
 * of one communicator arrive in the order they were sent, so the first collective receive
 * posted for that communicator is the one; point-to-point messages also match the tag. */
int tcp_same_stream(const chorus_wire_hdr *h, const chorus_wire_hdr *want);
/* Checks the stream head h from p against what receive r expects; on mismatch fails r and
 * breaks the net naming both calls. 1 when they match. */
int tcp_check_match(chorus_net *n, int p, const chorus_wire_hdr *h, chorus_req *r);
/* The first unclaimed point-to-point message from peer_rank (or CHORUS__NET_ANY: from any
 * rank; with rotate the search starts after the sender found last, so that none starves) of
 * communicator comm_id with tag (or CHORUS__NET_ANY), or NULL. *src is the sender. */
umsg *tcp_p2p_find(chorus_net *n, int peer_rank, uint64_t comm_id, int tag, int *src, int rotate);
/* Receive r takes message h from world rank src. 1 when the payload is to land in r->buf, 0
 * when r failed with a mismatch (the payload is discarded), -1 when the header lies about its
 * payload: the net breaks, blaming src. */
int tcp_p2p_claim(chorus_net *n, chorus_req *r, const chorus_wire_hdr *h, int src);
/* The earliest posted receive that takes point-to-point message h from p (unlinked), or NULL. */
chorus_req *tcp_p2p_take_posted(chorus_net *n, int p, const chorus_wire_hdr *h);

/* ---- recv.c ---- */

/* Reads what lane l of peer p has ready and routes it (headers, payloads, slices), until the
 * socket has nothing more or the net breaks. */
void tcp_read_lane(chorus_net *n, int p, int l);
/* Lane l of p closed or failed (what: how). Reads lane 0 until it tells why (an abort naming
 * the rank that failed first, or its own closing), for at most ABORT_FLUSH_S on another lane,
 * then blames p. */
void tcp_conn_failed(chorus_net *n, int p, int l, const char *what);

/* ---- send.c ---- */

/* Writes as much of lane l of peer p's send queue as the socket takes. */
void tcp_flush_sends(chorus_net *n, int p, int l);

/* ---- progress.c ---- */

/* Handles nev epoll events: reads the lanes that have data, writes those that take more. */
void tcp_handle_events(chorus_net *n, struct epoll_event *ev, int nev);

/* ---- watchdog.c ---- */

/* Starts the heartbeat thread (nothing when heartbeats are off or the world is one rank). mu
 * not held. */
void tcp_watchdog_start(chorus_net *n);
/* Stops and joins it. mu not held. */
void tcp_watchdog_stop(chorus_net *n);

#endif
