/*
 * net.h - the TCP transport: one connection per pair of ranks of the world, non-blocking
 * sockets driven by an epoll progress loop, messages framed by wire.h headers.
 *
 * Communicators made by chorus_comm_split share the world's chorus_net; headers carry the
 * communicator id so messages find their receive. Receives are posted before or after the data
 * arrives; data that arrives first is kept as an unexpected message, otherwise it lands in the
 * user's buffer with no extra copy.
 *
 * Any failure (a peer lost, a timeout, garbage on a socket, a mismatch) breaks the whole net:
 * every later call fails at once with the first error, and the peers are told (an ABORT
 * message) so that they fail fast too instead of waiting for their own timeouts.
 */
#ifndef CHORUS_NET_H
#define CHORUS_NET_H

#include "base/base.h"
#include "wire/wire.h"

typedef struct chorus_net chorus_net;

typedef struct chorus_req {
    struct chorus_req *next;
    int peer; /* world rank */
    int is_send;
    int done;
    chorus_result res;
    chorus_wire_hdr h; /* send: the header; recv: what is expected */
    unsigned char hbytes[CHORUS_WIRE_HDR_LEN];
    size_t hoff;
    char *buf;
    size_t len, off;
} chorus_req;

/* Creates the listening socket on bind_ip (port 0: any) and returns "ip:port" to publish.
 * Timeouts, heartbeats, the largest message and the spin time come from cfg (the creating
 * communicator's config). */
chorus_result chorus__net_create(const chorus_config *cfg, int rank, int size, const char *job,
                                 const char *bind_ip, chorus_net **out, char *addr, size_t addr_len,
                                 chorus_errbuf *e);

/* Connects to every other rank (addrs[r] = "ip:port", hosts[r] for messages). Rank r connects
 * to lower ranks and accepts higher ones; connections that fail the handshake are dropped and
 * logged. The listening socket is closed when the mesh is complete. */
chorus_result chorus__net_connect_all(chorus_net *n, char *const *addrs, char *const *hosts,
                                      double deadline, chorus_errbuf *e);

void chorus__net_retain(chorus_net *n);
void chorus__net_release(chorus_net *n);

/* Posts a send/receive; completion through chorus__net_wait. buf must stay valid until then. */
void chorus__net_isend(chorus_net *n, chorus_req *r, int peer, const chorus_wire_hdr *h,
                       const void *buf);
void chorus__net_irecv(chorus_net *n, chorus_req *r, int peer, const chorus_wire_hdr *expect,
                       void *buf);

/* Drives progress until every request is done, the deadline passes, or the net breaks. */
chorus_result chorus__net_wait(chorus_net *n, chorus_req *const *reqs, int nreq, double deadline,
                               chorus_errbuf *e);

/* Breaks the net (idempotent; the first reason wins) and tells the peers. */
void chorus__net_abort(chorus_net *n, int failed_rank, chorus_result r, const char *why);

/* The world rank blamed for breaking the net (lost, timed out), or -1 (healthy, or nobody
 * in particular, e.g. a mismatch). */
int chorus__net_failed_rank(chorus_net *n);

/* The error that broke the net, or CHORUS_OK. */
chorus_result chorus__net_error(chorus_net *n, chorus_errbuf *e);

const char *chorus__net_host(const chorus_net *n, int rank);

#endif
