/*
 * chorus/ps.h - the parameter server: parameters live in shards on server ranks, worker ranks
 * push gradients and pull parameters by key, and the servers apply the optimizer.
 *
 * A job's ranks are split once, by chorus_ps_create: ranks 0..K-1 of the communicator serve,
 * the others work. Every rank then registers the same keys in the same order; each key's
 * floats are placed on the servers balanced by bytes (a large key is cut into one slice per
 * server, a small one goes whole to the server holding the fewest bytes so far). Servers run
 * chorus_ps_serve until every worker has called chorus_ps_finalize. Workers call
 * chorus_ps_push and chorus_ps_pull, which return at once with a handle, so the transfers run
 * while the worker computes; chorus_ps_wait completes a handle.
 *
 * Modes (how a server applies pushes and answers pulls):
 *   CHORUS_PS_SYNC   each server waits for one push of a key from every worker, sums them in
 *                    worker order and applies the optimizer once; a worker's pull after its
 *                    n-th push returns the parameters after the n-th update, so every worker
 *                    sees the same parameters, and the result equals allreduce data
 *                    parallelism with the same optimizer.
 *   CHORUS_PS_ASYNC  each push is applied the moment it arrives; a pull returns at once.
 *   CHORUS_PS_SSP    pushes are applied at once, but a pull waits while its worker has pushed
 *                    that key more than `staleness` times more than the slowest live worker.
 *
 * All traffic is point-to-point over the communicator (include/chorus.h); every wait has the
 * CHORUS_TIMEOUT_S deadline, and a peer that dies fails the calls that wait for it with
 * CHORUS_ERR_PEER_LOST naming the rank. Gradients may travel as float16 or bfloat16 (the
 * servers widen them to float32 before summing); parameters always travel as float32.
 *
 * Errors are returned, never printed; chorus_ps_last_error() has the detail. A handle or a
 * chorus_ps must not be used by two threads at once.
 */
#ifndef CHORUS_PS_H
#define CHORUS_PS_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CHORUS_PS_SYNC = 0, CHORUS_PS_ASYNC = 1, CHORUS_PS_SSP = 2 } chorus_ps_mode;
typedef enum { CHORUS_PS_SGD = 0, CHORUS_PS_ADAMW = 1 } chorus_ps_optim;

#define CHORUS_PS_OPTS_VERSION 1

/* How the servers work. Fill with chorus_ps_opts_default, then change fields. The same values
 * must be given on every rank. */
typedef struct chorus_ps_opts {
    size_t size;             /* sizeof(chorus_ps_opts), set by chorus_ps_opts_default */
    int version;             /* CHORUS_PS_OPTS_VERSION */
    int nservers;            /* K: ranks 0..K-1 serve (chorus-run --servers K, else 1) */
    chorus_ps_mode mode;     /* (CHORUS_PS_SYNC) */
    int staleness;           /* SSP: how many pushes a worker may be ahead of the slowest (2) */
    chorus_ps_optim optim;   /* (CHORUS_PS_SGD) */
    float momentum;          /* SGD (0.9) */
    int nesterov;            /* SGD: Nesterov momentum (1) */
    float weight_decay;      /* SGD: L2 added to the gradient; AdamW: decoupled (0) */
    float beta1, beta2, eps; /* AdamW (0.9, 0.999, 1e-8) */
    chorus_dtype grad_dtype; /* how gradients travel: FLOAT32, FLOAT16 or BFLOAT16 (FLOAT32) */
    /* SYNC only: each round's summed gradient of a key is cut to this global norm before the
     * update (0: off). The norm is that of the whole key over every server's slice: the
     * servers exchange their slices' sums of squares and add them in server order, so all
     * scale by the same factor. Register the model as one key to clip by its global norm. In
     * async and SSP mode each push is applied alone: its worker, which holds the whole
     * gradient, clips it before pushing (refused here). */
    float clip_norm;
} chorus_ps_opts;

typedef struct chorus_ps chorus_ps;               /* opaque */
typedef struct chorus_ps_handle chorus_ps_handle; /* opaque: a push or pull in flight */

/* What one rank has seen so far. Servers count per worker (the arrays have one entry per
 * worker, indexed by worker number); workers fill only their own totals. */
#define CHORUS_PS_MAX_WORKERS 64
typedef struct chorus_ps_stats {
    uint64_t pushes, pulls;     /* handled (server) or started (worker) */
    uint64_t bytes_pushed;      /* gradient bytes received (server) or sent (worker) */
    uint64_t bytes_pulled;      /* parameter bytes sent (server) or received (worker) */
    uint64_t updates;           /* optimizer applications (server) */
    uint64_t pulls_delayed;     /* pulls that had to wait (sync: for the round; SSP: bound) */
    uint64_t max_staleness;     /* largest lead over the slowest live worker at a pull reply */
    uint64_t server_bytes;      /* memory of parameters, optimizer and buffers (server) */
    int nworkers, workers_gone; /* workers that finished or died (server) */
    int workers_lost;           /* of those, the ones that died (server; async and SSP) */
    uint64_t worker_bytes_pushed[CHORUS_PS_MAX_WORKERS];
    uint64_t worker_bytes_pulled[CHORUS_PS_MAX_WORKERS];
    uint64_t clipped; /* sync rounds whose summed gradient clip_norm cut (server) */
    double last_norm; /* the last round's global norm before clipping, 0 without (server) */
} chorus_ps_stats;

/* Fills *o with the defaults above. */
void chorus_ps_opts_default(chorus_ps_opts *o);

/* Collective over c: splits its ranks into servers (0..o->nservers-1) and workers and returns
 * this rank's side in *ps. c must outlive *ps and must not be used for point-to-point with the
 * tags the parameter server uses (0x5053xxxx) meanwhile. Errors: CHORUS_ERR_INVALID_ARG for a
 * NULL argument, an unknown options layout, mode, optimizer or gradient dtype, a negative
 * staleness, a clip_norm that is negative, not finite or given outside sync mode, or a server count
 * that leaves no worker (nothing is sent then); the split's errors. On error *ps is NULL; the
 * detail is in chorus_ps_last_error(NULL). */
chorus_result chorus_ps_create(chorus_comm *c, const chorus_ps_opts *o, chorus_ps **ps);

/* Collective over every rank of the job: registers key (>= 0) holding count (> 0) float32
 * parameters. Every rank must register the same keys with the same counts in the same order.
 * init: the initial values (read by servers only; NULL: zeros). Errors: CHORUS_ERR_INVALID_ARG
 * (key negative or already registered, count 0, too many keys), CHORUS_ERR_MISMATCH when the
 * ranks registered different keys or counts (the detail names both), CHORUS_ERR_NOMEM, and
 * peer failures. */
chorus_result chorus_ps_register(chorus_ps *ps, int key, size_t count, const float *init);

/* 1 on a server rank, 0 on a worker. */
int chorus_ps_is_server(const chorus_ps *ps);
/* This worker's number (0..workers-1), or -1 on a server. */
int chorus_ps_worker_index(const chorus_ps *ps);
/* Number of workers and of servers. */
int chorus_ps_num_workers(const chorus_ps *ps);
int chorus_ps_num_servers(const chorus_ps *ps);
/* The communicator of the workers alone (for evaluation, logging), or NULL on a server. Owned
 * by ps. */
chorus_comm *chorus_ps_worker_comm(chorus_ps *ps);

/* Worker: starts pushing count floats of gradient for key; the servers apply it with learning
 * rate lr (in sync mode the first worker's lr of each round). grad must stay untouched until
 * the handle is completed. Errors: CHORUS_ERR_INVALID_ARG (called on a server, unknown key,
 * count different from the registered one, NULL grad or h, lr not finite) with nothing sent;
 * peer failures. */
chorus_result chorus_ps_push(chorus_ps *ps, int key, const float *grad, size_t count, float lr,
                             chorus_ps_handle **h);

/* Worker: starts pulling the count parameters of key into out (which must stay valid until
 * the handle completes). Sync mode answers with the parameters after every push this worker
 * made of key has been applied; SSP may hold the answer while this worker is ahead of the
 * slowest by more than the staleness. Errors as chorus_ps_push. */
chorus_result chorus_ps_pull(chorus_ps *ps, int key, float *out, size_t count,
                             chorus_ps_handle **h);

/* Waits until h completes and frees it. Returns CHORUS_OK or the failure of one of its
 * transfers (CHORUS_ERR_PEER_LOST naming the server, CHORUS_ERR_TIMEOUT). */
chorus_result chorus_ps_wait(chorus_ps_handle *h);

/* Server: answers pushes and pulls until every worker has left (chorus_ps_leave or
 * chorus_ps_finalize). In async and SSP mode a worker that dies counts as left: the server
 * logs it (WARN, naming it) and goes on, and so do the other workers (chorus_ps_create marks
 * the workers' connections as ones the job may lose, on every rank); in sync mode, as any peer
 * failure (include/chorus.h), it fails the server with CHORUS_ERR_PEER_LOST naming it. Returns
 * CHORUS_OK once all have left; CHORUS_ERR_MISMATCH when a worker sent something that does not
 * fit (unknown key, wrong size), naming it (nothing is applied); peer failures. */
chorus_result chorus_ps_serve(chorus_ps *ps);

/* Worker (any one): asks every server to save its shard (parameters and optimizer state) as
 * checkpoint `step` in dir, crash-safely (include/chorus/checkpoint.h; each server keeps the
 * last two steps it saved), and waits until each has. Errors: CHORUS_ERR_INVALID_ARG (called
 * on a server, NULL or too long dir), a server's failure to write (CHORUS_ERR_SYSTEM, detail
 * in the server's log), peer failures. */
chorus_result chorus_ps_save(chorus_ps *ps, const char *dir, uint64_t step);

/* Worker (any one), after every key is registered and before pushing: asks every server to
 * load its shard of checkpoint `step` from dir and waits until each has. Errors as
 * chorus_ps_save; a server that has no valid shard of that step, or one saved with other
 * keys, sizes, optimizer or number of servers, answers CHORUS_ERR_MISMATCH or
 * CHORUS_ERR_INVALID_ARG and keeps its parameters. */
chorus_result chorus_ps_load(chorus_ps *ps, const char *dir, uint64_t step);

/* Copies this rank's counters into *s. */
void chorus_ps_get_stats(const chorus_ps *ps, chorus_ps_stats *s);

/* Worker: tells every server it is done (after completing its handles): sync rounds and the
 * staleness bound go on without it, and it may not push or pull any more. Errors:
 * CHORUS_ERR_INVALID_ARG on a server; peer failures. */
chorus_result chorus_ps_leave(chorus_ps *ps);

/* Worker: tells every server it is done, as chorus_ps_leave, unless it has. Then frees ps, on
 * servers and workers alike; c is not finalized. Returns the first error of telling. */
chorus_result chorus_ps_finalize(chorus_ps *ps);

/* Detail of the last failure on ps, or with ps NULL of this thread's last failed
 * chorus_ps_create ("" when none; include/chorus.h says the convention). */
const char *chorus_ps_last_error(const chorus_ps *ps);

/* Name of a mode ("sync", "async", "ssp"), NULL outside the enumeration. */
const char *chorus_ps_mode_name(int mode);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_PS_H */
