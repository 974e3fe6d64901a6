/*
 * chorus/engine.h - the training runtime: asynchronous named collectives driven by one
 * background thread per engine (Horovod-style).
 *
 * Any thread enqueues a tensor by name and gets a handle back at once. The engine thread owns
 * all communication on a private communicator (split from the one given to
 * chorus_engine_start), so the caller's communicator stays usable. Every cycle the ranks agree
 * which names are ready everywhere and in which order; names seen before hit a response cache
 * and are agreed by one small allreduce of a byte vector, new names go through a coordinator
 * on rank 0 that also compares their metadata across ranks. Ready allreduces of one dtype and
 * op are packed into a fusion buffer and reduced with one chorus_allreduce; a compressor's
 * plan of rounds (below) runs round by round, its rounds fused like plain allreduces. Several
 * engines may run in one process, each over its own communicator (process sets).
 *
 * Every handle ends, successfully or with an error: CHORUS_ERR_MISMATCH (ranks disagree on a
 * tensor's dtype, count, op, root, kind, scaling or compression plan), CHORUS_ERR_ABORTED (the
 * engine was shut down on some rank), CHORUS_ERR_TIMEOUT (stall shutdown), CHORUS_ERR_PEER_LOST (a
 * rank died). chorus_engine_handle_last_error() gives the detail (tensor, ranks, values); the
 * errors of the engine's own calls are in chorus_engine_last_error() (include/chorus.h says
 * the convention).
 *
 * Environment (see chorus-run --help-env): CHORUS_CYCLE_TIME_MS, CHORUS_FUSION_THRESHOLD,
 * CHORUS_CACHE_CAPACITY, CHORUS_STALL_WARN_S, CHORUS_STALL_SHUTDOWN_S, CHORUS_TIMELINE,
 * CHORUS_ENGINE_IDLE_MS, CHORUS_COMPRESSION.
 */
#ifndef CHORUS_ENGINE_H
#define CHORUS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chorus_engine chorus_engine;               /* opaque */
typedef struct chorus_engine_handle chorus_engine_handle; /* opaque, one per enqueued op */

/* ---- compression -------------------------------------------------------------------------- */

/* A gradient compressor is a plan of rounds with state. For each allreduce it is used on, the
 * compressor describes a plan of 1 to CHORUS_COMPRESS_MAX_ROUNDS rounds; each round is one
 * exchange among the ranks:
 *
 *   CHORUS_ROUND_REDUCE  every rank's wire_count elements of wire_dtype are reduced
 *                        elementwise with op (SUM, MIN, MAX or PROD); rounds of equal wire
 *                        dtype and op are fused with other tensors' rounds and plain
 *                        allreduces of that dtype and op.
 *   CHORUS_ROUND_GATHER  every rank's wire_count elements of wire_dtype are allgathered
 *                        (the same count on every rank); the result holds size parts in rank
 *                        order. Only for tensors reduced with CHORUS_SUM or CHORUS_AVG.
 *
 * For every round, on the engine thread, in round order: prepare writes this rank's part of
 * the round (wire) from the input and the compressor's state; after the exchange, finish
 * consumes the round's result (may update state, may write the output dst). The last round's
 * finish must have written all count elements of dst; after it the engine divides by the
 * ranks that contributed (CHORUS_AVG) and applies the postscale. src is the input (already
 * prescaled); it stays valid until the last finish, but it may be the same memory as dst
 * (in-place allreduce), so write dst only in the last round's finish.
 *
 * Example, PowerSGD of rank 1 on an n x m matrix M (input plus the residual in the state):
 * round 0 reduce(SUM) of P = M Q (n elements); finish orthogonalises P (same on every rank);
 * round 1 reduce(SUM) of Q' = M^T P (m elements); finish writes dst = P Q'^T and keeps the
 * residual M - P P^T M for the next step. Top-k with error feedback: one gather round of
 * (index, value) pairs; finish sums every rank's pairs into dst.
 *
 * A rank that joined (chorus_engine_join) takes part with no input: the engine fills its part
 * with the identity of the round's op (zeros for a gather) and does not call the compressor.
 * If prepare or finish fails, the tensor's handle ends with that error, but the rounds still
 * run (with identity parts) so every rank makes the same calls.
 *
 * Ranks must use compressors of the same name and the same plan for a tensor (compared as
 * metadata: a difference ends the handle with CHORUS_ERR_MISMATCH on every rank). */

#define CHORUS_COMPRESS_MAX_ROUNDS 4

typedef enum chorus_round_kind {
    CHORUS_ROUND_REDUCE = 0,
    CHORUS_ROUND_GATHER = 1
} chorus_round_kind;

/* One round of a plan. */
typedef struct chorus_round {
    chorus_round_kind kind;
    chorus_op op;            /* REDUCE: SUM, MIN, MAX or PROD (not AVG); GATHER: not used */
    chorus_dtype wire_dtype; /* dtype of the round's data */
    size_t wire_count;       /* elements of wire_dtype this rank gives (may be 0) */
} chorus_round;

/* A plan: nrounds rounds, run in order. nrounds == 0 means "not compressed": the tensor is
 * reduced as if no compressor had been given (fp16 on an integer tensor, for instance). */
typedef struct chorus_compress_plan {
    int nrounds;
    chorus_round round[CHORUS_COMPRESS_MAX_ROUNDS];
} chorus_compress_plan;

/* What prepare and finish are told about the call. */
typedef struct chorus_compress_call {
    const char *tensor; /* name the tensor was enqueued with */
    size_t count;       /* elements of the tensor */
    chorus_dtype dtype; /* dtype of the tensor (of src and dst) */
    chorus_op op;       /* the tensor's op */
    int round;          /* index of this round in the plan */
    const chorus_round *r;
    int nparts;                      /* gather: parts in the result (the engine's size) */
    const unsigned char *part_valid; /* gather: 1 per part that holds data, 0 for a rank that
                                        joined (its part is zeros); NULL for a reduce */
    int contributors;                /* ranks giving data (those that did not join) */
} chorus_compress_call;

typedef struct chorus_compressor {
    const char *name; /* compared across ranks; 1 to 31 characters */
    void *state;      /* passed back to every function */
    /* Fills *plan for a tensor of count elements of t reduced with op. Called from the thread
     * that enqueues (so it must be safe to call concurrently with prepare/finish: usually it
     * depends on its arguments only). Returns CHORUS_OK, or an error (the enqueue then fails
     * with CHORUS_ERR_INVALID_ARG naming the compressor). */
    chorus_result (*plan)(void *state, const char *tensor, size_t count, chorus_dtype t,
                          chorus_op op, chorus_compress_plan *plan);
    /* Writes this rank's r->wire_count elements of round c->round into wire. Engine thread. */
    chorus_result (*prepare)(void *state, const chorus_compress_call *c, const void *src,
                             void *wire);
    /* Consumes the round's result: a reduce gives wire_count reduced elements, a gather
     * c->nparts parts of wire_count elements each. Engine thread. */
    chorus_result (*finish)(void *state, const chorus_compress_call *c, const void *wire,
                            void *dst);
} chorus_compressor;

/* Built-in one-round compressors: float32/float64 travel and are reduced as float16 /
 * bfloat16 (the core sums 16-bit floats through float32), then widened back. Other dtypes
 * pass unchanged (an empty plan). The returned pointers are to static constant objects. */
const chorus_compressor *chorus_compressor_fp16(void);
const chorus_compressor *chorus_compressor_bf16(void);

/* Compressors with error feedback. Each keeps, per tensor name, the residual: what it did not
 * send of a step's input (gradient + previous residual) is added to that tensor's next input,
 * so nothing is lost over steps: the sum of what was sent plus the residual equals the sum of
 * the inputs. The decompressed result is computed from bits every rank holds alike, so it is
 * bitwise identical on every rank. float32 tensors reduced with CHORUS_SUM or CHORUS_AVG are
 * compressed; other dtypes and ops, and tensors of fewer than dense_below elements, are left
 * dense (an empty plan: a plain allreduce).
 *
 *   topk:R      the ceil(R*n) elements of largest magnitude; (index, value) pairs travel in
 *               one gather round; finish adds every rank's pairs, in rank order
 *   randomk:R   ceil(R*n) elements chosen by a generator seeded from the tensor's name and
 *               step, identical on every rank, so only the values travel, in one reduce round
 *               fused with other sums; a rank out of step fails the tensor on every rank
 *   powersgd:N  rank-N PowerSGD on the tensor viewed as a rows x cols matrix M (zero-padded):
 *               round 0 sums P = M Q, finish orthonormalises P's columns (Gram-Schmidt);
 *               round 1 sums Q = M^T P, finish writes P Q^T; Q is kept as the next step's warm
 *               start (the first Q is drawn from the name's seed, equal on every rank). Left
 *               dense where (rows + cols) N >= n.
 *   fp16, bf16  the casts above (no residual)
 *
 * spec is one of those ("none" gives *out = NULL and CHORUS_OK); dense_below 0 means 1024.
 * Returns CHORUS_ERR_INVALID_ARG for another spec or a ratio outside (0, 1] or a rank outside
 * 1..64 (chorus_last_error(NULL) lists the valid specs), CHORUS_ERR_NOMEM. A compressor is
 * used by one engine or one calling thread at a time; destroy it after its last use (after the
 * engine's shutdown). */
chorus_result chorus_compressor_create(const char *spec, size_t dense_below,
                                       chorus_compressor **out);
/* Frees a compressor of chorus_compressor_create and its residuals; NULL is ignored. */
void chorus_compressor_destroy(chorus_compressor *c);
/* Copies the residual of a tensor (count float32 elements) into out: zeros for a tensor not
 * seen yet or a compressor without one (fp16, bf16). CHORUS_ERR_INVALID_ARG when the tensor
 * was seen with another count or c is not from chorus_compressor_create. */
chorus_result chorus_compressor_residual(chorus_compressor *c, const char *tensor, float *out,
                                         size_t count);
/* A compressor's memory (per tensor: residual, step, random-k's permutation, PowerSGD's
 * warm-start Q) as a malloc'ed buffer of *len bytes (free it) for a checkpoint; *data NULL and
 * *len 0 for a compressor without memory (fp16, bf16). It is this rank's own: each rank saves
 * its own. Errors: CHORUS_ERR_INVALID_ARG (NULL argument), CHORUS_ERR_NOMEM. */
chorus_result chorus_compressor_save_state(chorus_compressor *c, void **data, size_t *len);
/* Replaces c's memory with one saved by chorus_compressor_save_state from a compressor of the
 * same spec, so that compression goes on as if never interrupted. Everything is checked first:
 * on error c is unchanged. Errors: CHORUS_ERR_INVALID_ARG (another spec, damaged or truncated
 * data: chorus_last_error(NULL) says which), CHORUS_ERR_NOMEM. */
chorus_result chorus_compressor_load_state(chorus_compressor *c, const void *data, size_t len);
/* PowerSGD: view that tensor as a matrix of cols columns (a layer's weight (out, in) followed
 * by its bias: cols = in) instead of the default ceil(sqrt(n)). Takes effect before the
 * tensor's first use; ignored by the other kinds. CHORUS_ERR_INVALID_ARG for cols 0. */
chorus_result chorus_compressor_set_cols(chorus_compressor *c, const char *tensor, size_t cols);
/* One compressed allreduce without an engine: runs c's plan for the tensor round by round
 * with chorus_allreduce / chorus_allgather on comm (every rank must call it with the same
 * name, count, dtype and op, as for any collective). send may equal recv. c NULL or an empty
 * plan: a plain allreduce. Errors: those of the collectives, of the plan (INVALID_ARG) and of
 * the compressor. */
chorus_result chorus_compressed_allreduce(chorus_comm *comm, chorus_compressor *c,
                                          const char *tensor, const void *send, void *recv,
                                          size_t count, chorus_dtype t, chorus_op op);

/* ---- engine ------------------------------------------------------------------------------- */

/* The layout version of chorus_engine_opts and chorus_engine_tensor_opts. Both start with
 * their size and version (as filled by chorus_engine_opts_init /
 * chorus_engine_tensor_opts_init), so a caller built against another layout (C or a ctypes
 * mirror) is refused with CHORUS_ERR_INVALID_ARG instead of being misread. */
#define CHORUS_ENGINE_OPTS_VERSION 1

typedef struct chorus_engine_opts {
    size_t size;             /* sizeof(chorus_engine_opts), set by chorus_engine_opts_init */
    unsigned version;        /* CHORUS_ENGINE_OPTS_VERSION, set by chorus_engine_opts_init */
    double cycle_time_ms;    /* pacing of negotiation cycles while work is pending */
    size_t fusion_threshold; /* bytes per fused allreduce; 0 disables fusion */
    int cache_capacity;      /* response-cache entries; 0 disables the cache */
    double stall_warn_s;     /* rank 0 warns about tensors missing on some ranks; 0: never */
    double stall_shutdown_s; /* fail everything with CHORUS_ERR_TIMEOUT after this; 0: never */
    double idle_ms;          /* heartbeat of an idle engine thread (bounds stall detection) */
    const char *timeline;    /* Chrome trace file ("%r" is replaced by the rank), or NULL */
    const chorus_compressor *compressor; /* default for float allreduces, or NULL */
    double desync_s; /* every rank blocked waiting for ops that some other rank never submitted
                      * for this long: those ops fail with CHORUS_ERR_MISMATCH; 0: never */
} chorus_engine_opts;

/* Fills o with the defaults, taken from the environment variables named above, and sets its
 * size and version. Any thread; o must not be NULL. */
void chorus_engine_opts_init(chorus_engine_opts *o);

/* sizeof(chorus_engine_opts) and sizeof(chorus_engine_tensor_opts) as this library was built,
 * so a binding (Python ctypes) can check its mirror of the structs. */
size_t chorus_engine_opts_size(void);
size_t chorus_engine_tensor_opts_size(void);

/* Starts an engine over comm: collective (every rank of comm calls it). comm may be a
 * communicator from chorus_comm_split: several engines, each over its own communicator, run
 * at once in one process (process sets). opts may be NULL for the defaults; otherwise
 * opts->size and opts->version must be what chorus_engine_opts_init sets (else
 * CHORUS_ERR_INVALID_ARG, a message naming both, and nothing collective happens). The engine
 * splits its own communicator from comm; comm itself stays free for the caller and must
 * outlive the engine. On failure *out is NULL and the reason is in chorus_last_error(comm). */
chorus_result chorus_engine_start(chorus_comm *comm, const chorus_engine_opts *opts,
                                  chorus_engine **out);

/* Stops the engine: the shutdown is agreed in the next cycle, so every rank's engine stops
 * (there is no partial shutdown). Handles still pending on any rank fail with
 * CHORUS_ERR_ABORTED. Joins the thread, closes the timeline (valid JSON) and frees the engine;
 * handles stay valid until released. Returns the error that stopped the engine earlier, if
 * one did (a lost peer, a stall shutdown), else CHORUS_OK. */
chorus_result chorus_engine_shutdown(chorus_engine *e);

/* Detail of the last failure of a blocking engine call (join, barrier, divergence check) or of
 * the error that stopped the engine; with e NULL, of this thread's last call that made or had
 * no engine (chorus_engine_start, the plan functions). "" when none. */
const char *chorus_engine_last_error(const chorus_engine *e);

/* ---- enqueueing (any thread) -------------------------------------------------------------- */

/* Called on the engine thread when a handle ends, before a wait on it returns; it must not
 * wait on the engine (or on this handle). */
typedef void (*chorus_engine_callback)(chorus_engine_handle *h, chorus_result r, void *arg);

typedef struct chorus_engine_tensor_opts {
    size_t size;      /* sizeof(chorus_engine_tensor_opts), or 0 (see below) */
    unsigned version; /* CHORUS_ENGINE_OPTS_VERSION, or 0 (see below) */
    double prescale;  /* multiply the input before the reduction (0 means 1) */
    double postscale; /* multiply the result after it (and after averaging; 0 means 1) */
    const chorus_compressor *compressor; /* NULL: the engine's default */
    int no_compression;                  /* 1: do not use the engine's default compressor */
    chorus_engine_callback callback;
    void *callback_arg;
    uint64_t shape_tag; /* 0, or a value every rank must give for this name (a hash of the
                         * tensor's shape): a tensor with the same count but another shape on
                         * some rank is then a mismatch instead of a silent reinterpretation */
} chorus_engine_tensor_opts;

/* Fills o with the defaults (no scaling, the engine's compressor, no callback) and its size and
 * version. A tensor opts whose size and version are both 0 (a zero-initialised C struct) is
 * taken as this version; any other size or version that this library does not know is refused
 * by the enqueue calls with CHORUS_ERR_INVALID_ARG. */
void chorus_engine_tensor_opts_init(chorus_engine_tensor_opts *o);

/* Every enqueue call: name identifies the tensor across ranks (at most 255 bytes; one pending
 * op per name per rank: a name is taken until the caller has seen its op end, by
 * chorus_engine_wait, by chorus_engine_poll returning 1, or by chorus_engine_release after the
 * end; with h NULL, until the end. A second enqueue under a taken name returns
 * CHORUS_ERR_INVALID_ARG, however fast the first ran, as in Horovod). opts may be NULL. On success
 * *h (when h is not NULL) is a handle the caller must release; with h NULL the engine releases it
 * after the callback. Buffers must stay valid and untouched until the handle ends. Bad arguments
 * return CHORUS_ERR_INVALID_ARG at once (nothing is enqueued); a stopped engine returns the error
 * that stopped it. */

/* recv[i] = op over ranks of send[i]; send == recv is in place. CHORUS_AVG divides by the
 * number of ranks (ranks that joined count, with zeros, as in Horovod). Scaling is for float
 * dtypes only. */
chorus_result chorus_engine_allreduce(chorus_engine *e, const char *name, const void *send,
                                      void *recv, size_t count, chorus_dtype t, chorus_op op,
                                      const chorus_engine_tensor_opts *opts,
                                      chorus_engine_handle **h);

/* Ops enqueued on e (by any thread) between chorus_engine_hold(e) and the matching
 * chorus_engine_unhold(e) reach the engine thread together at the unhold, so that they are
 * negotiated in one cycle and fused, instead of the engine starting a cycle with the first of
 * them (a grouped allreduce, a bucket of gradients). Holds nest: the ops are handed over when
 * the last hold ends. A held op does not run before then: the thread that holds must unhold
 * before waiting on any op of e. CHORUS_ERR_INVALID_ARG when e is NULL, or (unhold) when e
 * is not held. */
chorus_result chorus_engine_hold(chorus_engine *e);
chorus_result chorus_engine_unhold(chorus_engine *e);

/* root's buf is copied into every rank's buf. */
chorus_result chorus_engine_broadcast(chorus_engine *e, const char *name, void *buf, size_t count,
                                      chorus_dtype t, int root,
                                      const chorus_engine_tensor_opts *opts,
                                      chorus_engine_handle **h);

/* Allgather with a first dimension that may differ per rank: this rank gives rows rows of
 * row_count elements (row_count must match on every rank; rows may be 0). The result (rows of
 * rank 0, then rank 1, ...) is allocated by the engine: see chorus_engine_take_output. */
chorus_result chorus_engine_allgather(chorus_engine *e, const char *name, const void *send,
                                      size_t rows, size_t row_count, chorus_dtype t,
                                      const chorus_engine_tensor_opts *opts,
                                      chorus_engine_handle **h);

/* send holds count elements (the same count on every rank); the reduction is split in size
 * nearly equal parts (the first count % size ranks get one more element) and rank r gets part
 * r in recv, which holds chorus_engine_reduce_scatter_count(e, count) elements. */
chorus_result chorus_engine_reduce_scatter(chorus_engine *e, const char *name, const void *send,
                                           void *recv, size_t count, chorus_dtype t, chorus_op op,
                                           const chorus_engine_tensor_opts *opts,
                                           chorus_engine_handle **h);
size_t chorus_engine_reduce_scatter_count(const chorus_engine *e, size_t count);

/* send holds size blocks of count/size elements (count must be a multiple of size); block j
 * goes to rank j, recv block j comes from rank j. */
chorus_result chorus_engine_alltoall(chorus_engine *e, const char *name, const void *send,
                                     void *recv, size_t count, chorus_dtype t,
                                     const chorus_engine_tensor_opts *opts,
                                     chorus_engine_handle **h);

/* ---- handles ------------------------------------------------------------------------------ */

/* Blocks until h ends; returns its result (the detail is chorus_engine_handle_last_error(h)).
 * It polls h for CHORUS_ENGINE_WAIT_SPIN_US (300), yielding the core between polls, before it
 * sleeps. */
chorus_result chorus_engine_wait(chorus_engine_handle *h);
/* 1 when h has ended (wait then returns at once), else 0. */
int chorus_engine_poll(const chorus_engine_handle *h);
/* Message of a failed handle ("" while pending or on success); with h NULL, this thread's last
 * failure of a call that made no handle (as chorus_last_error(NULL)). */
const char *chorus_engine_handle_last_error(const chorus_engine_handle *h);
/* The older name of chorus_engine_handle_last_error, kept for the programs that call it; with h
 * NULL it returns "". */
const char *chorus_engine_handle_error(const chorus_engine_handle *h);
/* Name the handle was enqueued with. */
const char *chorus_engine_handle_name(const chorus_engine_handle *h);
/* Allgather result: returns the buffer (free() it) and total rows; NULL when there is none
 * (not an allgather, not finished, failed, already taken, or zero rows). */
void *chorus_engine_take_output(chorus_engine_handle *h, size_t *rows);
/* Allgather: rows given by rank r (0 when unknown). */
size_t chorus_engine_output_rows(const chorus_engine_handle *h, int rank);
/* Drops the caller's reference; a pending op still completes (its buffers must stay valid). */
void chorus_engine_release(chorus_engine_handle *h);

/* ---- synchronous operations --------------------------------------------------------------- */

/* For a rank that ran out of data: until every rank has joined, this rank takes part in the
 * other ranks' allreduces with zeros (the identity of the op for min/max/prod; an average
 * still divides by every rank). Broadcasts, allgathers, reduce-scatters and alltoalls issued
 * meanwhile end with CHORUS_ERR_INVALID_ARG naming the joined ranks (as Horovod's). Blocks
 * until all ranks joined; *last_rank (may be NULL) is the last rank to join (the highest rank among
 * the last ones when several joined in the same cycle). No other op may be enqueued on this rank
 * meanwhile. */
chorus_result chorus_engine_join(chorus_engine *e, int *last_rank);

/* Returns when every rank has called it (ordered with the other named ops). */
chorus_result chorus_engine_barrier(chorus_engine *e);

/* Weight divergence check: hashes buf on every rank and compares (one allreduce of the min and
 * max hash). CHORUS_ERR_MISMATCH when ranks differ; chorus_engine_last_error names the ranks,
 * this step and the first step at which this engine saw a divergence. */
chorus_result chorus_engine_check_divergence(chorus_engine *e, const char *name, const void *buf,
                                             size_t bytes, long long step);

/* acc[i] += grad[i] (gradient accumulation over several backward passes). */
chorus_result chorus_engine_accumulate(void *acc, const void *grad, size_t count, chorus_dtype t);

/* ---- statistics --------------------------------------------------------------------------- */

typedef struct chorus_engine_stats {
    uint64_t cycles;        /* negotiation cycles run */
    uint64_t coord_rounds;  /* cycles that needed the coordinator (new names, stalls) */
    uint64_t tensors;       /* ops completed */
    uint64_t cache_hits;    /* ops agreed through the response cache */
    uint64_t fused_batches; /* chorus_allreduce calls made for allreduce ops */
    uint64_t bytes_reduced; /* bytes given to those calls */
    double thread_cpu_s;    /* CPU time used by the engine thread */
} chorus_engine_stats;

/* Copies the engine's counters into *s (any thread; they are read under the engine's lock,
 * as of the last completed update). CHORUS_ERR_INVALID_ARG when e or s is NULL. */
chorus_result chorus_engine_get_stats(chorus_engine *e, chorus_engine_stats *s);

/* ---- bucketing ---------------------------------------------------------------------------- */

/* The grouping of gradients into buckets (one fused allreduce each), shared by every front end
 * so that the C trainer and chorus.torch cut models the same way.
 *
 * bytes[i] is the size of item i (a parameter, or a layer's parameters), items in registration
 * (forward) order. The plan walks them from item n-1 down to item 0, the order in which backward
 * produces their gradients: the open bucket takes the next item, and closes once it holds at
 * least its cap, first_bucket_bytes for bucket 0 and bucket_bytes for the others. So buckets are
 * runs of consecutive items, bucket 0 holds the last items, and a bucket exceeds its cap by less
 * than its lowest item. A cap of 0 puts every item in a bucket of its own. Items of 0 bytes take
 * no part (bucket_of[i] = -1) and do not close or open a bucket.
 *
 * On success bucket_of[i] (n entries, the caller's) is item i's bucket and *nbuckets (may be
 * NULL) the number of buckets. CHORUS_ERR_INVALID_ARG when n < 0, or when n > 0 and bytes or
 * bucket_of is NULL (detail in chorus_last_error(NULL)). Pure: any thread, no engine needed. */
chorus_result chorus_engine_bucket_plan(const size_t *bytes, int n, size_t bucket_bytes,
                                        size_t first_bucket_bytes, int *bucket_of, int *nbuckets);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_ENGINE_H */
