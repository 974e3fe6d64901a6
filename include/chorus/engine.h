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
 * op are packed into a fusion buffer and reduced with one chorus_allreduce.
 *
 * Every handle ends, successfully or with an error: CHORUS_ERR_MISMATCH (ranks disagree on a
 * tensor's dtype, count, op, root, kind or scaling), CHORUS_ERR_ABORTED (the engine was shut
 * down on some rank), CHORUS_ERR_TIMEOUT (stall shutdown), CHORUS_ERR_PEER_LOST (a rank died).
 * chorus_engine_handle_error() gives the detail (tensor, ranks, values).
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

/* A gradient compressor. The engine calls compress on the sending side and decompress on the
 * result; state is the compressor's own (error-feedback residuals, random seeds, ...), keyed
 * by the tensor name it is given. compress and decompress are called from the engine thread
 * only; wire_dtype and wire_count from the thread that enqueues (they should be pure).
 *
 * gather == 0: the compressed data is reduced elementwise in wire_dtype with the tensor's op
 *   (fp16, bf16 and other quantizers); wire_count elements per tensor. Such tensors are fused
 *   with others of the same wire dtype and op. decompress is called once with accumulate = 0.
 * gather == 1: each rank's compressed bytes (wire_count elements of wire_dtype, the same
 *   number on every rank) are allgathered, and decompress is called for every rank's part in
 *   rank order, with accumulate = 0 for the first and 1 after (dst += decoded); ranks that
 *   joined are skipped. For sparse schemes such as top-k with error feedback. Only CHORUS_SUM
 *   and CHORUS_AVG are allowed.
 * Ranks must use compressors of the same name for a tensor (checked as metadata). */
typedef struct chorus_compressor {
    const char *name; /* compared across ranks; at most 31 characters */
    void *state;
    int gather;
    chorus_dtype (*wire_dtype)(void *state, chorus_dtype t);
    /* Elements of wire_dtype for count elements of t; NULL means count. */
    size_t (*wire_count)(void *state, const char *tensor, size_t count, chorus_dtype t);
    chorus_result (*compress)(void *state, const char *tensor, const void *src, void *wire,
                              size_t count, chorus_dtype t);
    chorus_result (*decompress)(void *state, const char *tensor, const void *wire, void *dst,
                                size_t count, chorus_dtype t, int accumulate);
} chorus_compressor;

/* Built-in compressors: float32/float64 travel and are reduced as float16 / bfloat16 (the core
 * sums 16-bit floats through float32), then widened back. Other dtypes pass unchanged. */
const chorus_compressor *chorus_compressor_fp16(void);
const chorus_compressor *chorus_compressor_bf16(void);

/* ---- engine ------------------------------------------------------------------------------- */

typedef struct chorus_engine_opts {
    double cycle_time_ms;    /* pacing of negotiation cycles while work is pending */
    size_t fusion_threshold; /* bytes per fused allreduce; 0 disables fusion */
    int cache_capacity;      /* response-cache entries; 0 disables the cache */
    double stall_warn_s;     /* rank 0 warns about tensors missing on some ranks; 0: never */
    double stall_shutdown_s; /* fail everything with CHORUS_ERR_TIMEOUT after this; 0: never */
    double idle_ms;          /* heartbeat of an idle engine thread (bounds stall detection) */
    const char *timeline;    /* Chrome trace file ("%r" is replaced by the rank), or NULL */
    const chorus_compressor *compressor; /* default for float allreduces, or NULL */
} chorus_engine_opts;

/* Fills o with the defaults, taken from the environment variables named above. */
void chorus_engine_opts_init(chorus_engine_opts *o);

/* Starts an engine over comm: collective (every rank of comm calls it). opts may be NULL for
 * the defaults. The engine splits its own communicator from comm; comm itself stays free for
 * the caller and must outlive the engine. On failure *out is NULL and the reason is in
 * chorus_last_error(comm). */
chorus_result chorus_engine_start(chorus_comm *comm, const chorus_engine_opts *opts,
                                  chorus_engine **out);

/* Stops the engine: the shutdown is agreed in the next cycle, so every rank's engine stops
 * (there is no partial shutdown). Handles still pending on any rank fail with
 * CHORUS_ERR_ABORTED. Joins the thread, closes the timeline (valid JSON) and frees the engine;
 * handles stay valid until released. Returns the error that stopped the engine earlier, if
 * one did (a lost peer, a stall shutdown), else CHORUS_OK. */
chorus_result chorus_engine_shutdown(chorus_engine *e);

/* Detail of the last failure of a blocking engine call (join, barrier, divergence check) or of
 * the error that stopped the engine. */
const char *chorus_engine_last_error(const chorus_engine *e);

/* ---- enqueueing (any thread) -------------------------------------------------------------- */

/* Called on the engine thread when a handle ends, before a wait on it returns; it must not
 * wait on the engine (or on this handle). */
typedef void (*chorus_engine_callback)(chorus_engine_handle *h, chorus_result r, void *arg);

typedef struct chorus_engine_tensor_opts {
    double prescale;  /* multiply the input before the reduction (0 means 1) */
    double postscale; /* multiply the result after it (and after averaging; 0 means 1) */
    const chorus_compressor *compressor; /* NULL: the engine's default */
    int no_compression;                  /* 1: do not use the engine's default compressor */
    chorus_engine_callback callback;
    void *callback_arg;
} chorus_engine_tensor_opts;

/* Every enqueue call: name identifies the tensor across ranks (at most 255 bytes; one pending
 * op per name per rank). opts may be NULL. On success *h (when h is not NULL) is a handle the
 * caller must release; with h NULL the engine releases it after the callback. Buffers must
 * stay valid and untouched until the handle ends. Bad arguments return CHORUS_ERR_INVALID_ARG
 * at once (nothing is enqueued); a stopped engine returns the error that stopped it. */

/* recv[i] = op over ranks of send[i]; send == recv is in place. CHORUS_AVG divides by the
 * number of ranks that contributed (ranks that joined are not counted). Scaling is for float
 * dtypes only. */
chorus_result chorus_engine_allreduce(chorus_engine *e, const char *name, const void *send,
                                      void *recv, size_t count, chorus_dtype t, chorus_op op,
                                      const chorus_engine_tensor_opts *opts,
                                      chorus_engine_handle **h);

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

/* Blocks until h ends; returns its result (the detail is chorus_engine_handle_error(h)). */
chorus_result chorus_engine_wait(chorus_engine_handle *h);
/* 1 when h has ended (wait then returns at once), else 0. */
int chorus_engine_poll(const chorus_engine_handle *h);
/* Message of a failed handle ("" while pending or on success). */
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
 * other ranks' allreduces, reduce-scatters, allgathers and alltoalls with zeros (the identity
 * of the op for min/max/prod) or no rows, and in broadcasts as a receiver. Blocks until all
 * ranks joined; *last_rank (may be NULL) is the last rank to join (the highest rank among the
 * last ones when several joined in the same cycle). No other op may be enqueued on this rank
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
