/*
 * engine_int.h - what the files of the training runtime share: requests, handles, the
 * response cache, the coordinator's table, and the engine itself.
 *
 *   engine.c     public API, handles, the queue and the engine thread's pacing loop
 *   negotiate.c  one cycle: the byte-vector allreduce, the coordinator round, stall checks
 *   execute.c    running what was agreed: fusion, allgatherv, reduce-scatter, ...
 *   codec.c      negotiation messages (bounds-checked), scaling, identities, compressors
 *   timeline.c   the Chrome trace
 *   map.c        a string-keyed hash map
 *
 * Everything below the queue (pending requests, cache, coordinator table, fusion buffer,
 * timeline) belongs to the engine thread alone; only the queue, the live-name set, the stop
 * state and the statistics are shared with user threads, under mu.
 */
#ifndef CHORUS_ENGINE_INT_H
#define CHORUS_ENGINE_INT_H

#include <pthread.h>
#include <stdio.h>

#include "base/base.h"
#include "chorus/engine.h"
#include "wire/wire.h"

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

/* ---- requests ----------------------------------------------------------------------------- */

enum {
    EK_ALLREDUCE,
    EK_BROADCAST,
    EK_ALLGATHER,
    EK_REDUCESCATTER,
    EK_ALLTOALL,
    EK_BARRIER,
    EK_DIVERGENCE,
    EK_JOIN,
    EK_COUNT
};

#define ENG_NAME_MAX 255
#define ENG_COMP_MAX 31

/* What every rank must agree on for a name (compared by the coordinator). */
typedef struct eng_meta {
    uint8_t kind, dtype, op;
    int32_t root;   /* broadcast */
    uint64_t count; /* elements; allgather: elements per row */
    double prescale, postscale;
    char comp[ENG_COMP_MAX + 1]; /* compressor name, "" for none */
    uint8_t wdtype, gather;      /* allreduce: dtype on the wire, compressor kind */
    uint64_t wcount;             /* allreduce: elements on the wire */
} eng_meta;

struct chorus_engine_handle {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs; /* atomic */
    int done;
    chorus_result res;
    char *msg;
    char name[ENG_NAME_MAX + 1];
    chorus_engine_callback cb;
    void *cb_arg;
    int last_rank; /* join */
    void *out;     /* allgather */
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
    size_t rows; /* allgather */
    const chorus_compressor *comp;
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
    FILE *f;
    int first, pid;
    double t0;
    eng_map rows; /* name -> row id + 1 */
    int nrows;
    double last_flush;
} eng_timeline;

int chorus__tl_open(eng_timeline *t, const char *path, int rank);
void chorus__tl_close(eng_timeline *t);
/* A span [t_start, t_end] (chorus__now() seconds) on the row of tensor name. */
void chorus__tl_span(eng_timeline *t, const char *name, const char *what, double t_start,
                     double t_end, const char *args_json);
void chorus__tl_instant(eng_timeline *t, const char *what, double ts, const char *args_json);
void chorus__tl_flush(eng_timeline *t, double now);

/* ---- the engine --------------------------------------------------------------------------- */

struct chorus_engine {
    chorus_comm *comm; /* private, split from the caller's */
    int rank, size;
    chorus_engine_opts o;
    char timeline_path[512];
    pthread_t thr;
    int thr_started;

    /* shared with user threads, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* wakes the engine thread */
    eng_req *q_head, *q_tail;
    size_t q_len, wake_at;
    int sleeping, shutdown_req;
    eng_map live;     /* names enqueued and not yet ended on this rank */
    int join_pending; /* a join was enqueued and has not ended */
    int stopped;      /* the engine thread has finished */
    chorus_result stop_res;
    char stop_msg[600];
    char last_err[1024];
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
    int all_active; /* every rank had work pending in the last cycle */
    long long first_div_step;
    void *fbuf, *scratch, *scratch2;
    size_t fbuf_cap, scratch_cap, scratch2_cap;
    uint8_t *vec;
    size_t vec_cap;
    eng_timeline tl;
};

/* engine.c */
void chorus__eng_complete(chorus_engine *e, eng_req *r, chorus_result res, const char *msg);
void chorus__eng_fail_all(chorus_engine *e, chorus_result res, const char *msg);
void *chorus__eng_grow(void **buf, size_t *cap, size_t n);

/* negotiate.c: one cycle; returns non-zero when the engine must stop. */
int chorus__eng_cycle(chorus_engine *e, int shutdown);
void chorus__eng_pend_remove(chorus_engine *e, eng_req *r);

/* execute.c: runs the agreed ops in order and completes their handles. */
chorus_result chorus__eng_execute(chorus_engine *e, eng_exec *x, size_t n);

/* codec.c */
typedef struct eng_buf {
    unsigned char *p;
    size_t len, cap;
    int oom;
} eng_buf;
typedef struct eng_rd {
    const unsigned char *p;
    size_t len, off;
    int bad;
} eng_rd;
void chorus__eb_raw(eng_buf *b, const void *p, size_t n);
void chorus__eb_u8(eng_buf *b, uint8_t v);
void chorus__eb_u32(eng_buf *b, uint32_t v);
void chorus__eb_u64(eng_buf *b, uint64_t v);
void chorus__eb_f64(eng_buf *b, double v);
void chorus__eb_str(eng_buf *b, const char *s);
void chorus__eb_meta(eng_buf *b, const eng_meta *m);
uint8_t chorus__rd_u8(eng_rd *r);
uint32_t chorus__rd_u32(eng_rd *r);
uint64_t chorus__rd_u64(eng_rd *r);
double chorus__rd_f64(eng_rd *r);
/* Reads a string of at most max bytes into out (max + 1 bytes). */
void chorus__rd_str(eng_rd *r, char *out, size_t max);
void chorus__rd_meta(eng_rd *r, eng_meta *m);

int chorus__meta_equal(const eng_meta *a, const eng_meta *b);
/* Describes how b differs from a: "dtype float32 on rank 0 but float16 on rank 1". */
void chorus__meta_diff(const eng_meta *a, int ra, const eng_meta *b, int rb, char *out, size_t len);
const char *chorus__kind_name(int kind);

/* dst[i] = src[i] * f for float dtypes (dst may equal src). */
void chorus__scale(void *dst, const void *src, size_t n, chorus_dtype t, double f);
/* Fills n elements with the identity of op (0 for sum/avg, 1 for prod, max for min, ...). */
void chorus__fill_identity(void *dst, size_t n, chorus_dtype t, chorus_op op);
/* A compressor by name ("fp16", "bf16"), or NULL. */
const chorus_compressor *chorus__compressor_by_name(const char *name);

#endif
