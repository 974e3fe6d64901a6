/*
 * engine_int.h - what the files of the training runtime share: requests, handles, the
 * response cache, the coordinator's table, and the engine itself.
 *
 *   engine.c     start, shutdown, options, the enqueue calls, the engine thread's pacing loop
 *   request.c    requests and handles: the pending set, completion, failing everything
 *   negotiate.c  one cycle, phase by phase: the byte-vector allreduce, the coordinator round
 *   coordinator.c  rank 0's side of the coordinator round: collecting reports, answering
 *   execute.c    running what was agreed, round by round: allgatherv, reduce-scatter, ...
 *   fusion.c     allreduce rounds packed into fusion buffers, one chorus_allreduce per bucket
 *   rounds.c     one tensor's part in a round: input, the compressor's prepare and finish
 *   compress/    the built-in compressors (cast.c: fp16 and bf16) and their registry
 *   meta.c       comparing metadata across ranks (scaling is src/reduce's, identities and the
 *                hash are src/base's)
 *   common.c     helpers the steps share: buffers, the thread's error record, rank sets
 *   timeline.c   the Chrome trace;  map.c  a string-keyed hash map
 *   autotune.c   CHORUS_AUTOTUNE: trying algorithms, fusion thresholds and cycle times
 *   (the negotiation messages are encoded and parsed in src/wire/engine_msg.c)
 *
 * Everything below the queue (pending requests, cache, coordinator table, fusion buffer,
 * timeline) belongs to the engine thread alone; only the queue, the stop state and the
 * statistics are shared with user threads, under mu, and the set of names taken, under its own
 * lock (eng_names: handles, which may outlive the engine, give their names back).
 */
#ifndef CHORUS_ENGINE_INT_H
#define CHORUS_ENGINE_INT_H

#include <pthread.h>
#include <stdio.h>

#include "base/base.h"
#include "base/trace.h"
#include "chorus/engine.h"
#include "wire/engine_msg.h"

/* ---- string map ----------------------------------------------------------------------------- */

typedef struct eng_map {
    char **keys; /* NULL: empty; TOMB: deleted */
    void **vals;
    size_t cap, used, live;
} eng_map;

void chorus__map_free(eng_map *m);
void *chorus__map_get(const eng_map *m, const char *key);
/* Inserts or replaces; key is copied. Returns -1 when out of memory. */
int chorus__map_put(eng_map *m, const char *key, void *val);
void chorus__map_del(eng_map *m, const char *key);

/* The names taken on this rank (one op per name): a name is taken by the enqueue and given back
 * once the caller has seen its op end (chorus_engine_wait returned, chorus_engine_poll said
 * done, or chorus_engine_release after the end), or at the end where the caller holds no
 * handle. Shared by the engine and the handles holding a name (a handle may outlive its
 * engine), reference counted; map and refs under mu. */
typedef struct eng_names {
    pthread_mutex_t mu;
    eng_map map; /* name -> the handle holding it */
    int refs;    /* the engine, and each handle holding a name */
} eng_names;

/* ---- requests ----------------------------------------------------------------------------- */

struct chorus_engine_handle {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;    /* atomic */
    int waiting; /* atomic: threads blocked in chorus_engine_wait on it */
    int done;
    chorus_result res;
    char *msg;
    char name[ENG_NAME_MAX + 1];
    chorus_engine_callback cb;
    void *cb_arg;
    eng_names *names; /* where its name is taken; NULL once given back (exchanged atomically) */
    int caller_ref;   /* the caller holds a reference (it was given the handle) */
    int caller_gone;  /* under mu: the caller released it before its end */
    int last_rank;    /* join */
    void *out;        /* allgather */
    size_t out_rows;
    size_t *rank_rows;
    int nranks;
};

enum { REQ_NEW, REQ_SENT, REQ_CACHED };

typedef struct eng_req {
    struct eng_req *next; /* queue link */
    char *name;
    eng_meta m;
    const void *send;
    void *recv;
    size_t rows;                   /* allgather */
    const chorus_compressor *comp; /* allreduce with a plan (m.nrounds > 0), else NULL */
    void *input;                   /* compressed: the prescaled input, kept across rounds */
    chorus_result cres;            /* compressed: first failure of prepare/finish */
    char cerr[256];
    chorus_engine_handle *h;
    uint64_t hash; /* divergence */
    long long step;
    double t_enqueue, t_agreed;
    int state, slot;
    size_t pidx; /* index in the pending array */
} eng_req;

/* One agreed op of a cycle: the request (NULL on a rank that joined) and the metadata. */
typedef struct eng_exec {
    eng_req *req;
    const char *name;
    eng_meta m;
    int cached;
    int round; /* allreduce: the round of its plan being run in this pass */
} eng_exec;

/* ---- cache and coordinator ---------------------------------------------------------------- */

typedef struct eng_slot {
    char *name; /* NULL: free */
    eng_meta m;
    uint64_t last_cycle; /* cycle in which it was cached or last executed */
} eng_slot;

typedef struct eng_centry {
    char *name;
    eng_meta *metas; /* per rank */
    uint8_t *have;   /* per rank */
    int nhave;
    int cache_slot; /* slot of the name when one rank sent it while it was cached */
} eng_centry;

/* ---- timeline ----------------------------------------------------------------------------- */

typedef struct eng_timeline {
    struct chorus_trace *tr; /* the process's trace file of this rank (base/trace.h), or NULL */
    eng_map rows;            /* name -> row id */
    double last_flush;
} eng_timeline;

/* Joins the trace file that pattern names for rank (shared with the collectives' rows): 0,
 * with t->tr NULL when the pattern does not name a file of this rank; -1 with why on failure. */
int chorus__tl_open(eng_timeline *t, const char *pattern, int rank, char *why, size_t len);
void chorus__tl_close(eng_timeline *t);
/* A span [t_start, t_end] (chorus__now() seconds) on the row of tensor name. */
void chorus__tl_span(eng_timeline *t, const char *name, const char *what, double t_start,
                     double t_end, const char *args_json);
void chorus__tl_instant(eng_timeline *t, const char *what, double ts, const char *args_json);
/* Flushes the file at most every half second. */
void chorus__tl_flush(eng_timeline *t, double now);
void chorus__tl_flush(eng_timeline *t, double now);

/* ---- autotuning (autotune.c) -------------------------------------------------------------- */

#define ENG_TUNE_MAXC      8   /* candidates of one dimension */
#define ENG_TUNE_MAX_STEPS 100 /* measured steps per candidate */

typedef struct eng_tune {
    int active;      /* still trying */
    int stage;       /* -1: warm-up; then the dimension being tried */
    int cand, ncand; /* candidate being measured, of how many */
    int steps, warmup, algo_forced;
    int trial_step; /* steps since the candidate was applied (the first settles) */
    int trials, cycles_unmarked;
    long long nsteps, start_step;
    char marker[ENG_NAME_MAX + 1]; /* the name whose executions count steps */
    double last_mark, t_start;
    const char *algo[ENG_TUNE_MAXC]; /* the candidates of the current dimension */
    size_t fusion[ENG_TUNE_MAXC];
    double cycle[ENG_TUNE_MAXC];
    double score[ENG_TUNE_MAXC]; /* median step time in seconds (rank 0's are the ones used) */
    double samples[ENG_TUNE_MAX_STEPS];
    const char *best_algo, *start_algo; /* NULL: the rules */
    size_t best_fusion, start_fusion;
    double best_cycle, start_cycle, best_score, base_score;
} eng_tune;

/* ---- the engine --------------------------------------------------------------------------- */

struct chorus_engine {
    chorus_comm *comm; /* private, split from the caller's */
    int rank, size;
    chorus_engine_opts o;
    pthread_t thr;
    int thr_started;

    /* shared with user threads, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* wakes the engine thread */
    eng_req *q_head, *q_tail;
    size_t q_len, wake_at;
    int sleeping, shutdown_req;
    int hold;         /* chorus_engine_hold depth: while > 0 the queue stays where it is */
    int group_ready;  /* the last unhold handed over a group: its cycle starts at once */
    eng_names *names; /* names taken on this rank (under names->mu) */
    int join_pending; /* a join was enqueued and has not ended */
    int stopped;      /* the engine thread has finished */
    chorus_result stop_res;
    char stop_msg[600];
    char last_err[1024]; /* last failure of a call on a user thread (chorus_engine_last_error) */
    chorus_engine_stats st;
    clockid_t cpu_clock;
    int have_cpu_clock;

    /* engine thread only */
    eng_req **pend;
    size_t npend, cap_pend;
    eng_map pend_map;
    size_t n_cached_ready;
    eng_slot *slots;
    int nslots, live_slots;
    eng_map cache_map;  /* name -> slot + 1 */
    eng_centry **coord; /* rank 0: names reported by some ranks, in arrival order */
    size_t ncoord, cap_coord;
    eng_map coord_map;
    eng_req *my_join;
    uint8_t *joined, *prev_joined; /* per rank, from the last cycle */
    int njoined;
    double last_cycle, last_progress, next_stall_report;
    double blocked_since, next_desync_report; /* a thread waits on a pending op (0: none) */
    int all_active;                           /* every rank had work pending in the last cycle */
    long long first_div_step;
    void *fbuf, *scratch, *scratch2;
    size_t fbuf_cap, scratch_cap, scratch2_cap;
    uint8_t *vec;
    size_t vec_cap;
    eng_timeline tl;
    eng_tune tune;
    char thr_err[600]; /* engine thread: detail of the failure that is stopping it */
};

/* common.c */
/* A buffer of at least n bytes in *buf (64-byte aligned, grown, contents not kept), or NULL. */
void *chorus__eng_grow(void **buf, size_t *cap, size_t n);
/* Engine thread: records a failure that stops the engine (its detail goes into the stop
 * message) and returns r. */
chorus_result chorus__eng_err(chorus_engine *e, chorus_result r, const char *fmt, ...)
    CHORUS__PRINTF(3, 4);
/* "ranks 0,2-4" or "rank 3": the ranks r < n with (set[r] != 0) == want. */
void chorus__fmt_ranks(const uint8_t *set, int n, int want, char *out, size_t len);
/* Ranks that contribute (did not join), at least 1. */
int chorus__eng_active(const chorus_engine *e);
/* After an op's last exchange: average over the contributors unless the core did, then the
 * postscale. */
void chorus__eng_post(chorus_engine *e, const eng_meta *m, void *buf, size_t count);
/* The NEGOTIATE and QUEUE spans of x's timeline row, up to start. */
void chorus__eng_tl_pre(chorus_engine *e, const eng_exec *x, double start);

/* request.c: handles and the pending set (engine thread, except where said). */
chorus_engine_handle *chorus__handle_new(const char *name, const chorus_engine_tensor_opts *o,
                                         int caller_ref);
void chorus__handle_unref(chorus_engine_handle *h); /* any thread */
/* Any thread. names_new returns NULL when out of memory; names_take takes h's name for h (and
 * a reference to n): 0, 1 when another handle holds it, -1 when out of memory. */
eng_names *chorus__names_new(void);
void chorus__names_unref(eng_names *n);
int chorus__names_take(eng_names *n, chorus_engine_handle *h);
void chorus__req_free(eng_req *r);
void chorus__eng_pend_add(chorus_engine *e, eng_req *r);
void chorus__eng_pend_remove(chorus_engine *e, eng_req *r);
void chorus__eng_complete(chorus_engine *e, eng_req *r, chorus_result res, const char *msg);
void chorus__eng_fail_all(chorus_engine *e, chorus_result res, const char *msg);

/* negotiate.c: one cycle; returns non-zero when the engine must stop. */
int chorus__eng_cycle(chorus_engine *e, int shutdown);
/* Stops the engine with r and msg (the first stop wins); returns 1. */
int chorus__eng_stop(chorus_engine *e, chorus_result r, const char *msg);

/* coordinator.c (rank 0): takes every rank's report (in[r]), appends the answer to resp. */
/* all_blocked: every rank has had a thread waiting on one of its pending ops, without
 * progress, for CHORUS_DESYNC_S (the desync check). */
chorus_result chorus__eng_coordinate(chorus_engine *e, eng_buf *in, int report, int all_blocked,
                                     eng_buf *resp);

/* execute.c: runs the agreed ops in order, round by round, and completes their handles. */
chorus_result chorus__eng_execute(chorus_engine *e, eng_exec *x, size_t n);

/* rounds.c: one allreduce item's part in the round x->round. */
/* The exchange item x takes part in this pass (a plain allreduce is one reduce round). */
eng_round chorus__round_of(const chorus_engine *e, const eng_exec *x);
/* Writes this rank's part (the round's wire_count elements) into wire: the compressor's
 * prepare, the (scaled) input for a plain allreduce, or the identity on a rank that joined or
 * after a failure. */
void chorus__round_prepare(chorus_engine *e, eng_exec *x, void *wire);
/* Consumes the round's result (nparts/valid describe a gather's); returns 1 when it was the
 * item's last round on this rank: then chorus__round_end must follow. */
int chorus__round_finish(chorus_engine *e, eng_exec *x, const void *wire, int nparts,
                         const unsigned char *valid);
/* After the last round: averages and postscales the output, ends the handle (x->req is freed). */
void chorus__round_end(chorus_engine *e, eng_exec *x);
/* A gather round of item x, alone. */
chorus_result chorus__round_gather(chorus_engine *e, eng_exec *x);
/* Whether item x can be reduced alone in place (plain, no prescale): no copies. */
int chorus__round_in_place(const eng_exec *x);

/* fusion.c: allreduce rounds grouped by (wire dtype, op) into buckets of at most the fusion
 * threshold; a full bucket is packed, reduced with one chorus_allreduce and unpacked. */
typedef struct eng_bucket {
    int open;
    uint8_t wdtype, op;
    size_t bytes, n, cap;
    size_t *items;
} eng_bucket;
#define ENG_NBUCKETS 8
typedef struct eng_fusion {
    eng_bucket bk[ENG_NBUCKETS];
    int order[ENG_NBUCKETS], nopen; /* open buckets, oldest first */
} eng_fusion;
/* Adds item i of x (its round this pass); may reduce a full or the oldest bucket first. */
chorus_result chorus__fusion_add(chorus_engine *e, eng_fusion *f, eng_exec *x, size_t i);
/* Reduces every open bucket, oldest first. */
chorus_result chorus__fusion_flush(chorus_engine *e, eng_fusion *f, eng_exec *x);
void chorus__fusion_free(eng_fusion *f);

/* autotune.c */
/* Whether the CHORUS_AUTOTUNE_* values of cfg are usable; else the reason in why. */
chorus_result chorus__tune_check(const chorus_config *cfg, char *why, size_t len);
/* Before the engine thread starts, with the settings every rank agreed on (rank 0's). */
void chorus__tune_start(chorus_engine *e, int on, int steps, int warmup, int algo_forced);
/* Engine thread, on every rank after the agreed list x[0..n) of a cycle ran: counts steps,
 * applies the next candidate, and at the end of a dimension broadcasts rank 0's choice. */
chorus_result chorus__tune_cycle(chorus_engine *e, const eng_exec *x, size_t n);

/* meta.c */
int chorus__meta_equal(const eng_meta *a, const eng_meta *b);
/* Describes how b differs from a: "dtype float32 on rank 0 but float16 on rank 1". */
void chorus__meta_diff(const eng_meta *a, int ra, const eng_meta *b, int rb, char *out, size_t len);
const char *chorus__kind_name(int kind);

/* The op a sum-then-divide average reduces with (CHORUS_SUM for CHORUS_AVG), else op. */
static inline chorus_op chorus__eng_red_op(int op)
{
    return op == CHORUS_AVG ? CHORUS_SUM : (chorus_op)op;
}

#endif
