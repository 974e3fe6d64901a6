/*
 * comm.h - the communicator, and what every collective algorithm shares: the context of one
 * call (sequence number, signature, deadlines), posting sends and receives in communicator
 * ranks, chunking of a buffer among ranks, and the scratch buffer.
 */
#ifndef CHORUS_COMM_H
#define CHORUS_COMM_H

#include "base/base.h"
#include "reduce/reduce.h"
#include "transport/tcp/net.h"
#include "wire/wire.h"

struct chorus_comm {
    chorus_net *net;
    int rank, size;
    int local_rank, local_size;
    int *world; /* comm rank -> world rank */
    int *host;  /* comm rank -> host index (equal index: same host) */
    int nhosts;
    uint64_t id;  /* carried in every header so split communicators share connections */
    uint64_t seq; /* collectives started on this communicator */
    unsigned nsplit;
    chorus_errbuf err;
    void *scratch; /* grow-only, reused by algorithms (page faults cost more than a copy) */
    size_t scratch_cap;
    struct chorus_shm *shm; /* shared-memory group of all ranks, when they share one host */
    unsigned select_warned; /* CHORUS_ALGO_* warnings already given (bit per collective) */
};

/* Per-call state of a collective. */
typedef struct chorus_coll {
    chorus_comm *c;
    chorus_wire_hdr h; /* template header: type, comm id, signature, seq, count */
} chorus_coll;

void chorus__coll_begin(chorus_coll *x, chorus_comm *c, int kind, chorus_dtype t, chorus_op op,
                        size_t count);
void chorus__coll_isend(chorus_coll *x, chorus_req *r, int peer, int tag, const void *buf,
                        size_t bytes);
void chorus__coll_irecv(chorus_coll *x, chorus_req *r, int peer, int tag, void *buf, size_t bytes);
/* Waits for n requests; the deadline is CHORUS_TIMEOUT_S from now, so it bounds the time
 * without progress, not the length of a large collective. */
chorus_result chorus__coll_wait(chorus_coll *x, chorus_req *const *reqs, int n);
chorus_result chorus__coll_wait1(chorus_coll *x, chorus_req *r);

/* Scratch of at least n bytes (64-byte aligned), or NULL. */
void *chorus__comm_scratch(chorus_comm *c, size_t n);

/* Splits count elements into n chunks (sizes differ by at most one). */
static inline size_t chorus__chunk_off(size_t count, int n, int i)
{
    size_t q = count / (size_t)n, r = count % (size_t)n;
    return q * (size_t)i + ((size_t)i < r ? (size_t)i : r);
}
static inline size_t chorus__chunk_cnt(size_t count, int n, int i)
{
    return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}
/* off[i], cnt[i] = chorus__chunk_off/cnt(count, n, i) in one array of 2n (off, then cnt);
 * free() it. NULL when out of memory. */
size_t *chorus__chunks(size_t count, int n);
static inline int chorus__mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* Segments: a chunk of at most max_cnt elements is cut in nseg pieces of seg_cnt elements. */
void chorus__segments(size_t max_cnt, size_t esize, size_t *seg_cnt, int *nseg);

/* ---- algorithms (one per file) --------------------------------------------------------- */
chorus_result chorus__allreduce_rd(chorus_comm *c, const void *send, void *recv, size_t count,
                                   chorus_dtype t, chorus_op op);
chorus_result chorus__allreduce_ring(chorus_comm *c, const void *send, void *recv, size_t count,
                                     chorus_dtype t, chorus_op op);
/* Ring reduce-scatter: chunk i of the reduction (chunks of cnt(i) elements at off(i)) ends at
 * rank i, written to out. local is this rank's input, work receives partial results at the
 * chunks' offsets (may equal local). */
chorus_result chorus__ring_reduce_scatter(chorus_coll *x, const char *local, char *work, char *out,
                                          const size_t *off, const size_t *cnt, chorus_dtype t,
                                          chorus_op op, int tag_base);
/* Ring allgather in steps, so that another algorithm can feed it: post (every receive),
 * send_own(k) once this rank's own segment k is final, finish (forwarding, waits). */
typedef struct chorus_ring_ag {
    chorus_coll *x;
    char *buf;
    const size_t *off, *cnt;
    size_t es, segc;
    int nseg, tag_base;
    chorus_req *sreq, *rreq;
} chorus_ring_ag;
chorus_result chorus__ring_ag_post(chorus_ring_ag *ag, chorus_coll *x, char *buf, const size_t *off,
                                   const size_t *cnt, size_t es, int tag_base);
void chorus__ring_ag_send_own(chorus_ring_ag *ag, int k);
/* Frees what post allocated; with res != CHORUS_OK it only cleans up. */
chorus_result chorus__ring_ag_finish(chorus_ring_ag *ag, chorus_result res);
/* Ring allgather in place: chunk i (at off(i), cnt(i) elements) starts at rank i. */
chorus_result chorus__ring_allgather(chorus_coll *x, char *buf, const size_t *off,
                                     const size_t *cnt, size_t esize, int tag_base);
chorus_result chorus__bcast_tree(chorus_comm *c, void *buf, size_t bytes, int root, chorus_coll *x);
chorus_result chorus__bcast_chain(chorus_comm *c, void *buf, size_t bytes, int root,
                                  chorus_coll *x);

/* Shared memory (the *_shm.c files): c->shm must be set; counts are elements. */
chorus_result chorus__comm_shm_setup(chorus_comm *c);
/* rsag: reduce-scatter + allgather pipeline; else every rank reduces everything (flat). */
chorus_result chorus__allreduce_shm(chorus_comm *c, const void *send, void *recv, size_t count,
                                    chorus_dtype t, chorus_op op, int rsag);
/* Single-copy (process_vm_readv) reduce-scatter + allgather; needs c->shm->cma. */
chorus_result chorus__allreduce_cma(chorus_comm *c, const void *send, void *recv, size_t count,
                                    chorus_dtype t, chorus_op op);
chorus_result chorus__bcast_shm(chorus_comm *c, void *buf, size_t count, chorus_dtype t, int root);
/* recv already holds this rank's block at recv + rank * sendcount elements. */
chorus_result chorus__allgather_shm(chorus_comm *c, void *recv, size_t sendcount, chorus_dtype t);
chorus_result chorus__reduce_scatter_shm(chorus_comm *c, const void *send, void *recv,
                                         size_t recvcount, chorus_dtype t, chorus_op op);
chorus_result chorus__alltoall_shm(chorus_comm *c, const void *send, void *recv, size_t count,
                                   chorus_dtype t);
chorus_result chorus__barrier_shm(chorus_comm *c);

/* select.c */
typedef enum {
    CHORUS_AR_ONESHOT, /* TCP, canonical order (allreduce_direct.c) */
    CHORUS_AR_RSAG,    /* TCP, canonical order (allreduce_direct.c) */
    CHORUS_AR_RD,
    CHORUS_AR_RING,
    CHORUS_AR_SHM_FLAT,
    CHORUS_AR_SHM_RSAG,
    CHORUS_AR_SHM_CMA
} chorus_ar_algo;
typedef enum { CHORUS_BC_TREE, CHORUS_BC_CHAIN, CHORUS_BC_SHM } chorus_bc_algo;
chorus_ar_algo chorus__select_allreduce(chorus_comm *c, size_t bytes);
chorus_bc_algo chorus__select_broadcast(chorus_comm *c, size_t bytes);
/* Allgather, reduce-scatter, alltoall, barrier (kind: CHORUS_COLL_*): shared memory or the
 * one TCP algorithm. */
int chorus__select_shm(chorus_comm *c, int kind);
/* Logs the rules in force for c at INFO (once per communicator: init and split call it). */
void chorus__select_describe(const chorus_comm *c);

#endif
