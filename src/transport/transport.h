/*
 * transport.h - the seam between the collective layer and the transports: what a transport
 * can do (capabilities), messages posted as requests and completed by a wait with a deadline,
 * and one failure record per transport (the first error that broke it, the rank blamed and the
 * reason), read and set the same way for every transport.
 *
 * A transport is a table of operations and its state (chorus_transport): TCP (tcp/net.h,
 * chorus__net_transport) moves tagged messages; shared memory (shm/shm.h,
 * chorus__shm_transport) is a segment whose flags and slots the shared-memory algorithms use
 * directly, and takes part here through its failure record only. The call through the table is
 * one indirect call per message or per wait, never per byte.
 *
 * A transport never includes another transport's header: what one needs of another (shared
 * memory's waits giving up when the job's TCP mesh broke) it gets as a chorus_transport.
 */
#ifndef CHORUS_TRANSPORT_H
#define CHORUS_TRANSPORT_H

#include "base/base.h"
#include "wire/wire.h"

/* What a transport offers (chorus_transport.caps). */
enum {
    /* tagged messages between ranks: isend, irecv, wait, test, probe */
    CHORUS_TPCAP_MSG = 1 << 0,
    /* a peer marked expendable can be lost without breaking the transport */
    CHORUS_TPCAP_EXPENDABLE = 1 << 1,
    /* a segment every member maps, with flags and staging slots (shm/shm.h) */
    CHORUS_TPCAP_SEGMENT = 1 << 2,
    /* single-copy reads and writes of a peer's buffers (cross-memory attach, shm/cma.h) */
    CHORUS_TPCAP_ZERO_COPY = 1 << 3,
};

/* A message posted to a transport. The caller owns the memory and keeps it (and buf) valid
 * until the request is done; the transport fills the fields under "result" and keeps its own
 * bookkeeping in the rest. */
typedef struct chorus_req {
    struct chorus_req *next;
    int peer; /* world rank; CHORUS__NET_ANY: a point-to-point receive from any rank */
    int is_send;
    /* result */
    int done;
    chorus_result res; /* CHORUS_ERR_MISMATCH: a point-to-point message that does not fit */
    chorus_wire_hdr h; /* send: the header; recv: what is expected */
    unsigned char hbytes[CHORUS_WIRE_HDR_LEN];
    size_t hoff;
    char *buf;
    size_t len, off; /* recv: bytes expected (P2P: the capacity until matched), received */
    /* point-to-point receives: posting order, and the message that matched (world rank of the
     * sender, its header) */
    uint64_t order;
    int src;
    chorus_wire_hdr got;
    /* TCP's striping over several lanes (send.c, recv.c): a send's slices on the other lanes
     * are requests of their own with parent set; parts counts what is outstanding; lane_moved
     * counts bytes moved on the other lanes (progress, for wait deadlines) */
    struct chorus_req *parent;
    int parts;
    uint64_t lane_moved;
} chorus_req;

/* A peer or tag that matches any (point-to-point receives and probes). */
#define CHORUS__NET_ANY (-1)

typedef struct chorus_transport_ops {
    const char *name;
    /* CHORUS_TPCAP_MSG. Posts a send or receive; completion through wait or test. */
    void (*isend)(void *self, chorus_req *r, int peer, const chorus_wire_hdr *h, const void *buf);
    void (*irecv)(void *self, chorus_req *r, int peer, const chorus_wire_hdr *expect, void *buf);
    /* Drives progress until need of the requests are done. timeout_s bounds the time without
     * progress (it moves on whenever a byte of a pending request moves); a timeout breaks the
     * transport blaming the peer of the first pending request. CHORUS_OK once enough are done
     * (each request's res says how it ended), else the error that broke the transport. */
    chorus_result (*wait)(void *self, chorus_req *const *reqs, int nreq, int need, double timeout_s,
                          chorus_errbuf *e);
    /* Non-blocking: 1 if r is done, 0 if not, -1 if it never will be (detail in e). */
    int (*test)(void *self, chorus_req *r, chorus_errbuf *e);
    /* An unclaimed point-to-point message of comm_id from peer with tag (CHORUS__NET_ANY:
     * any), waiting up to timeout_s (0: only what is ready); *found with its header and its
     * sender's world rank. */
    chorus_result (*probe)(void *self, uint64_t comm_id, int peer, int tag, double timeout_s,
                           int *found, chorus_wire_hdr *h, int *src, chorus_errbuf *e);
    /* Every transport. Breaks it (idempotent; the first reason wins), waking or telling
     * everyone that waits on it; culprit is the world rank blamed, -1 for nobody in
     * particular. */
    void (*abort)(void *self, int culprit, chorus_result r, const char *why);
    /* The failure record: CHORUS_OK while healthy, else the error that broke it, with the
     * world rank blamed (-1: nobody in particular) in *culprit and the reason in e (either
     * may be NULL). Cheap and thread-safe: other transports poll it while they wait. */
    chorus_result (*error)(void *self, int *culprit, chorus_errbuf *e);
    /* CHORUS_TPCAP_EXPENDABLE. Marks world rank p as one the job can lose, and the detail of
     * the last such loss. */
    void (*set_expendable)(void *self, int p);
    void (*loss_detail)(void *self, chorus_errbuf *e);
    /* Shared ownership (communicators made by split share their parent's transport); NULL
     * where the owner frees the state itself. */
    void (*retain)(void *self);
    void (*release)(void *self);
} chorus_transport_ops;

/* A transport: its operations, its state and what it offers. ops NULL: none (abort and
 * error then do nothing and report healthy). */
typedef struct chorus_transport {
    const chorus_transport_ops *ops;
    void *self;
    unsigned caps;
} chorus_transport;

static inline int chorus__tp_has(const chorus_transport *t, unsigned caps)
{
    return t->ops && (t->caps & caps) == caps;
}

static inline void chorus__tp_isend(const chorus_transport *t, chorus_req *r, int peer,
                                    const chorus_wire_hdr *h, const void *buf)
{
    t->ops->isend(t->self, r, peer, h, buf);
}

static inline void chorus__tp_irecv(const chorus_transport *t, chorus_req *r, int peer,
                                    const chorus_wire_hdr *expect, void *buf)
{
    t->ops->irecv(t->self, r, peer, expect, buf);
}

static inline chorus_result chorus__tp_wait(const chorus_transport *t, chorus_req *const *reqs,
                                            int nreq, int need, double timeout_s, chorus_errbuf *e)
{
    return t->ops->wait(t->self, reqs, nreq, need, timeout_s, e);
}

static inline int chorus__tp_test(const chorus_transport *t, chorus_req *r, chorus_errbuf *e)
{
    return t->ops->test(t->self, r, e);
}

static inline chorus_result chorus__tp_probe(const chorus_transport *t, uint64_t comm_id, int peer,
                                             int tag, double timeout_s, int *found,
                                             chorus_wire_hdr *h, int *src, chorus_errbuf *e)
{
    return t->ops->probe(t->self, comm_id, peer, tag, timeout_s, found, h, src, e);
}

static inline void chorus__tp_abort(const chorus_transport *t, int culprit, chorus_result r,
                                    const char *why)
{
    if (t->ops) t->ops->abort(t->self, culprit, r, why);
}

static inline chorus_result chorus__tp_error(const chorus_transport *t, int *culprit,
                                             chorus_errbuf *e)
{
    if (culprit) *culprit = -1;
    return t->ops ? t->ops->error(t->self, culprit, e) : CHORUS_OK;
}

/* CHORUS_TPCAP_EXPENDABLE only. */
static inline void chorus__tp_set_expendable(const chorus_transport *t, int p)
{
    t->ops->set_expendable(t->self, p);
}

static inline void chorus__tp_loss_detail(const chorus_transport *t, chorus_errbuf *e)
{
    t->ops->loss_detail(t->self, e);
}

static inline void chorus__tp_retain(const chorus_transport *t)
{
    if (t->ops && t->ops->retain) t->ops->retain(t->self);
}

static inline void chorus__tp_release(const chorus_transport *t)
{
    if (t->ops && t->ops->release) t->ops->release(t->self);
}

#endif
