/*
 * net.h - the TCP transport: CHORUS_TCP_LANES connections per pair of ranks of the world,
 * non-blocking sockets driven by an epoll progress loop, messages framed by wire.h headers.
 *
 * Communicators made by chorus_comm_split share the world's chorus_net; headers carry the
 * communicator id so messages find their receive. Receives are posted before or after the data
 * arrives; data that arrives first is kept as an unexpected message, otherwise it lands in the
 * user's buffer with no extra copy.
 *
 * Any failure (a peer lost, a timeout, garbage on a socket, a mismatch of collectives) breaks
 * the whole net: every later call fails at once with the first error, and the peers are told
 * (an ABORT message) so that they fail fast too instead of waiting for their own timeouts. A
 * point-to-point message that does not fit its receive fails only that receive.
 */
#ifndef CHORUS_NET_H
#define CHORUS_NET_H

#include "base/base.h"
#include "transport/transport.h"
#include "wire/wire.h"

typedef struct chorus_net chorus_net;

/* Point-to-point receives (header type CHORUS_MSG_P2P) match on communicator, source and tag,
 * as in MPI: peer CHORUS__NET_ANY takes a message from any rank (of that communicator id), tag
 * CHORUS__NET_ANY any tag. A message goes to the earliest posted receive that matches it, and a
 * receive takes the earliest unclaimed message that matches it, so messages of one sender with
 * one tag are received in the order sent. The expected header carries the dtype (coll >> 8) and
 * the capacity (count, len); a matched message of another dtype or more elements completes the
 * receive with CHORUS_ERR_MISMATCH (req->got says what was sent) and is discarded; the net stays
 * healthy. CHORUS__NET_ANY is in transport.h. */

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

/* Drives progress until at least need of the requests are done. The deadline is timeout_s
 * from the call and moves on whenever a byte of a pending request moves, so it bounds the time
 * without progress. A timeout breaks the net, blaming the peer of the first pending request.
 * Returns CHORUS_OK once enough are done (each request's own res tells how it ended), or the
 * error that broke the net (requests not done then never complete). */
chorus_result chorus__net_wait_some(chorus_net *n, chorus_req *const *reqs, int nreq, int need,
                                    double timeout_s, chorus_errbuf *e);

/* Non-blocking: handles what the sockets have ready, then returns 1 if r is done, 0 if not,
 * and -1 if it never will be because the net broke (detail in e). */
int chorus__net_test(chorus_net *n, chorus_req *r, chorus_errbuf *e);

/* Looks for a point-to-point message of communicator comm_id from peer (world rank or
 * CHORUS__NET_ANY) with tag (or CHORUS__NET_ANY) that no receive has claimed yet. With
 * timeout_s > 0 waits for one that long (then breaks the net: CHORUS_ERR_TIMEOUT), else only
 * handles what the sockets have ready. *found = 1 with its header and sender's world rank. */
chorus_result chorus__net_probe(chorus_net *n, uint64_t comm_id, int peer, int tag,
                                double timeout_s, int *found, chorus_wire_hdr *h, int *src,
                                chorus_errbuf *e);

/* Breaks the net (idempotent; the first reason wins) and tells the peers. */
void chorus__net_abort(chorus_net *n, int failed_rank, chorus_result r, const char *why);

/* The world rank blamed for breaking the net (lost, timed out), or -1 (healthy, or nobody
 * in particular, e.g. a mismatch). */
int chorus__net_failed_rank(chorus_net *n);

/* The error that broke the net, or CHORUS_OK. */
chorus_result chorus__net_error(chorus_net *n, chorus_errbuf *e);

/* The net as a transport (transport.h): messages, expendable peers, shared ownership; its
 * failure record is chorus__net_error and chorus__net_failed_rank. */
chorus_transport chorus__net_transport(chorus_net *n);

/* Marks world rank p as one the job can lose (a parameter server's worker in async and SSP
 * mode): when p dies (or is stopped past the heartbeat timeout) the net does not break. Its
 * connection is closed, every request to or from p fails with CHORUS_ERR_PEER_LOST, later ones
 * at once, and one receive from any source (pending, or the next one posted) ends with
 * CHORUS_ERR_PEER_LOST and p as its source, so that a program waiting on everyone learns it. */
void chorus__net_set_expendable(chorus_net *n, int p);

/* The detail of the last loss of an expendable rank (empty when none). */
void chorus__net_loss_detail(chorus_net *n, chorus_errbuf *e);

const char *chorus__net_host(const chorus_net *n, int rank);

#endif
