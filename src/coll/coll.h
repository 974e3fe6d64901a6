/*
 * coll.h - what every collective algorithm shares: the arguments of a call, the context of
 * one call (sequence number, signature, deadlines), posting sends and receives in
 * communicator ranks, the scratch buffer and the pipeline segment size; and the algorithm
 * table's row type (select.c). Algorithms include this and patterns.h, never api.c.
 */
#ifndef CHORUS_COLL_H
#define CHORUS_COLL_H

#include "coll/comm.h"
#include "coll/patterns.h"
#include "reduce/reduce.h"

/* The arguments of one collective call, already checked by api.c. Unused fields are 0. */
typedef struct chorus_coll_args {
    const void *send;
    void *recv;   /* broadcast: the buffer; allgather: recv with this rank's block in place */
    size_t count; /* elements: allreduce, broadcast, alltoall per rank, allgather and
                     reduce-scatter per rank */
    size_t bytes; /* count * dtype size */
    chorus_dtype t;
    chorus_op op;
    int root;
} chorus_coll_args;

/* What a row needs of the communicator, so that it is usable there: its message transport
 * (c->net, always there), its shared-memory group (a transport with CHORUS_TPCAP_SEGMENT), that
 * group with single-copy transfers agreed at set-up (CHORUS_TPCAP_ZERO_COPY), or the host-local
 * and cross-host communicators of a job spanning hosts (c->hier, comm.c). */
typedef enum { CHORUS_TP_NET, CHORUS_TP_SHM, CHORUS_TP_SHM_CMA, CHORUS_TP_HIER } chorus_algo_tp;

typedef chorus_result (*chorus_algo_fn)(chorus_comm *c, const chorus_coll_args *a);

/* One row of the algorithm table (select.c). */
typedef struct chorus_algo {
    int kind;          /* CHORUS_COLL_* */
    const char *name;  /* CHORUS_ALGO_<KIND>=name forces it */
    const char *alias; /* an older name still accepted, or NULL */
    const char *desc;
    chorus_mem_type mem;
    chorus_algo_tp tp;
    chorus_algo_fn run;
} chorus_algo;

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
/* Waits for n requests; CHORUS_TIMEOUT_S bounds the time without progress (from the last
 * byte any of them moved), not the length of a large or slow collective. */
chorus_result chorus__coll_wait(chorus_coll *x, chorus_req *const *reqs, int n);
chorus_result chorus__coll_wait1(chorus_coll *x, chorus_req *r);

/* Every rank of c checks that every other called the same collective (kind, dtype, op, root
 * and count) and none finishes before all have entered; a difference is CHORUS_ERR_MISMATCH
 * on every rank, naming it. Over shared memory (over_shm, c->shm) one chunk of flags, else
 * ceil(log2(p)) rounds of headers over TCP. For the calls whose data alone would not tell
 * every rank (a broadcast's root sends and hears nothing; a count of 0 moves nothing), and the
 * barrier, which is exactly this. what names the call in messages. */
chorus_result chorus__coll_agree(chorus_comm *c, int over_shm, const char *what, int kind,
                                 chorus_dtype t, chorus_op op, int root, size_t count);

/* A step of a collective of c run on its sub-communicator sub failed with r: sub's ranks
 * waiting in shared memory are woken with the reason, c records it; returns r (CHORUS_OK: no
 * effect). */
chorus_result chorus__coll_sub_fail(chorus_comm *c, chorus_comm *sub, chorus_result r);

/* Scratch of at least n bytes (64-byte aligned), or NULL. */
void *chorus__comm_scratch(chorus_comm *c, size_t n);

/* off[i], cnt[i] = chorus__chunk_off/cnt(count, n, i) in one array of 2n (off, then cnt);
 * free() it. NULL when out of memory. */
size_t *chorus__chunks(size_t count, int n);

/* Segments over TCP: a chunk of at most max_cnt elements is cut in nseg pieces of seg_cnt
 * elements (the communicator's CHORUS_TCP_SEGMENT bytes at most). */
void chorus__segments(const chorus_comm *c, size_t max_cnt, size_t esize, size_t *seg_cnt,
                      int *nseg);

/* ---- TCP building blocks shared by several algorithms ---------------------------------- */

/* Tag of the empty message that says "every receive of this call is posted" (a segment index
 * never reaches it). */
#define CHORUS_TAG_READY 0x7ffffff0

/* Ring reduce-scatter (ring.c): chunk i of the reduction (cnt(i) elements at off(i)) ends at
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
/* Reductions in rank order (allreduce_direct.c): slice i (cnt[i] elements at off[i]) of the
 * reduction of every rank's local ends at rank i, written to out (which may overlap local).
 * With ag_buf it is an allreduce: each final segment of this rank's slice (out, inside ag_buf)
 * goes to a ring allgather over ag_buf at once (after CHORUS_AVG's division). */
chorus_result chorus__direct_rs_ag(chorus_coll *x, const char *local, char *out, const size_t *off,
                                   const size_t *cnt, chorus_dtype t, chorus_op op, int tag_base,
                                   char *ag_buf);

/* ---- shared-memory building blocks ----------------------------------------------------- */

/* n blocks of a buffer: block j is cnt[j] elements at off[j] and belongs to rank j % p of the
 * shared-memory group. out_off (or NULL: off) places the owner's result of a reduce-scatter.
 * total is the element count both calls carry in the mismatch check. */
typedef struct chorus_shm_blocks {
    int n;
    const size_t *off, *cnt, *out_off;
    size_t total;
} chorus_shm_blocks;
/* Every rank's send, block by block, reduced in rank order into the owner's recv (with
 * CHORUS_AVG's division when finish); sig is the call's signature (chorus__shm_sig). */
chorus_result chorus__shm_reduce_scatter_blocks(chorus_comm *c, const chorus_shm_blocks *b,
                                                const void *send, void *recv, chorus_dtype t,
                                                chorus_op op, int finish, uint64_t sig);
/* Each block of buf, elements of es bytes, copied from its owner to every other rank. */
chorus_result chorus__shm_allgather_blocks(chorus_comm *c, const chorus_shm_blocks *b, void *buf,
                                           size_t es, uint64_t sig);

/* ---- the algorithms: one per row of select.c's table ----------------------------------- */

/* allreduce over TCP */
chorus_result chorus__allreduce_oneshot(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__allreduce_direct_ring(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__allreduce_rd(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__allreduce_ring(chorus_comm *c, const chorus_coll_args *a);
/* allreduce over shared memory (allreduce_shm.c): rsag: the pipelined reduce-scatter +
 * allgather; else every rank reduces everything (one-shot, chunk by chunk). */
chorus_result chorus__allreduce_shm(chorus_comm *c, const void *send, void *recv, size_t count,
                                    chorus_dtype t, chorus_op op, int rsag);
/* Single-copy allreduce between the ranks of one host (allreduce_cma.c, process_vm_readv and
 * process_vm_writev); needs c->shm->cma. */
chorus_result chorus__allreduce_cma(chorus_comm *c, const void *send, void *recv, size_t count,
                                    chorus_dtype t, chorus_op op);
/* broadcast */
chorus_result chorus__bcast_tree(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__bcast_chain(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__bcast_shm(chorus_comm *c, const chorus_coll_args *a);
/* allgather (recv already holds this rank's block at recv + rank * bytes) */
chorus_result chorus__allgather_ring(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__allgather_shm(chorus_comm *c, const chorus_coll_args *a);
/* reduce-scatter */
chorus_result chorus__reduce_scatter_direct(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__reduce_scatter_shm(chorus_comm *c, const chorus_coll_args *a);
/* alltoall */
chorus_result chorus__alltoall_pairwise(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__alltoall_shm(chorus_comm *c, const chorus_coll_args *a);
/* across hosts: shared memory within each host, TCP between them (needs c->hier) */
chorus_result chorus__allreduce_hier(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__bcast_hier(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__allgather_hier(chorus_comm *c, const chorus_coll_args *a);
/* A broadcast of n elements of t at buf on sub (a sub-communicator of c, from its rank root):
 * shared memory when sub has it, else TCP by the broadcast rules; failure recorded on c. */
chorus_result chorus__bcast_sub(chorus_comm *c, chorus_comm *sub, void *buf, size_t n,
                                chorus_dtype t, int root);
/* barrier */
chorus_result chorus__barrier_dissemination(chorus_comm *c, const chorus_coll_args *a);
chorus_result chorus__barrier_shm(chorus_comm *c, const chorus_coll_args *a);

/* ---- selection (select.c) -------------------------------------------------------------- */

/* The row that runs a collective of kind on c for buffers of memory type mem: the one named
 * by CHORUS_ALGO_<KIND> when set and usable here, else the rules (size, ranks, transports).
 * NULL with CHORUS_ERR_INVALID_ARG in c->err when CHORUS_ALGO_<KIND> names no algorithm of
 * that collective (the message lists the valid names). Forcing a shared-memory algorithm on a
 * communicator without shared memory warns once and follows the rules. */
const chorus_algo *chorus__select(chorus_comm *c, int kind, chorus_mem_type mem, size_t bytes,
                                  chorus_result *err);

/* ---- the timeline of the collectives (coll_trace.c) ---------------------------------------- */

/* The start time of a call to trace on c (chorus__now()), or 0 when c writes no timeline or
 * the call runs inside another traced collective of this thread. The first call on c joins
 * this rank's CHORUS_TIMELINE file, or warns once, naming the file and why, when it cannot be
 * written. Every non-zero start must be ended with chorus__coll_trace_end. */
double chorus__coll_trace_begin(chorus_comm *c);
/* Writes the call's event (what, algorithm, bytes, dtype, its result when it failed) on c's
 * row, from t0 to now; nothing when t0 is 0. */
void chorus__coll_trace_end(chorus_comm *c, double t0, const char *what, const char *algo,
                            size_t bytes, chorus_dtype t, chorus_result r);

#endif
