/*
 * compress.h - the built-in compressors (one per file in this folder) and what they share.
 * Each is a chorus_compressor (include/chorus/engine.h): a plan of rounds with prepare and
 * finish functions, run by the engine thread (execute.c) or by chorus_compressed_allreduce.
 *
 * The compressors with error feedback (top-k, random-k, PowerSGD) keep, per tensor name, what
 * they did not send (the residual) and add it to that tensor's next input; their state is an
 * ef_comp made by chorus_compressor_create, whose table of tensors (ef.c) they share.
 */
#ifndef CHORUS_ENGINE_COMPRESS_H
#define CHORUS_ENGINE_COMPRESS_H

#include <pthread.h>

#include "base/base.h"
#include "chorus/engine.h"

/* A built-in compressor by name ("fp16", "bf16"); NULL for "", "none" or an unknown name. */
const chorus_compressor *chorus__compressor_by_name(const char *name);

typedef enum ef_kind { EF_CAST, EF_TOPK, EF_RANDOMK, EF_POWERSGD } ef_kind;

/* One tensor's memory. The arrays are sized for count elements (PowerSGD: rows x cols). */
typedef struct ef_tensor {
    char *name;
    size_t count;
    float *resid; /* (count) what was not sent yet */
    float *m;     /* (count, or rows*cols) input + residual of the step in flight */
    uint64_t step;
    size_t cols_hint; /* PowerSGD: columns of the matrix view, 0: near sqrt(count) */
    /* top-k and random-k */
    uint32_t *idx; /* random-k: a permutation of 0..count-1 whose first k are sent */
    size_t k;
    /* PowerSGD: M (rows, cols), P (rows, r), Q and this rank's Q (cols, r) */
    size_t rows, cols, r;
    float *p, *q, *qloc;
} ef_tensor;

/* The state of a compressor made by chorus_compressor_create; pub.state points to it (to the
 * wire dtype for the casts). */
typedef struct ef_comp {
    chorus_compressor pub;
    char name[32];
    ef_kind kind;
    double ratio; /* top-k, random-k: fraction of the elements sent */
    int rank;     /* PowerSGD */
    size_t dense_below;
    uint32_t *hist;     /* top-k: 65536 counters for the threshold (the preparing thread's) */
    pthread_mutex_t mu; /* guards the table (the engine thread and the caller's) */
    ef_tensor **t;
    int nt, cap;
} ef_comp;

/* The tensor of that name, made with count elements (residual zero) the first time; NULL when
 * out of memory or when the name was seen with another count (*why says which). */
ef_tensor *chorus__ef_tensor(ef_comp *s, const char *name, size_t count, const char **why);
/* Frees an entry and its arrays (NULL is ignored). */
void chorus__ef_free_tensor(ef_tensor *t);
/* The entry of that name or NULL (no allocation). Caller holds s->mu. */
ef_tensor *chorus__ef_find(ef_comp *s, const char *name);

/* Elements a sparsifier sends of count: ceil(ratio * count), at least 1. */
size_t chorus__ef_k(const ef_comp *s, size_t count);

/* m = src + resid over count floats. */
void chorus__ef_accumulate(ef_tensor *t, const float *src);

/* The step check of the compressors whose ranks must stay in step (random-k's draws,
 * PowerSGD's warm start): each rank adds chorus__ef_step_tag to a sum; chorus__ef_check_step
 * compares the sum with contributors x its own tag and, when a rank was out of step (it joined
 * and missed steps of the tensor), logs it and returns CHORUS_ERR_MISMATCH. */
float chorus__ef_step_tag(const ef_tensor *t);
chorus_result chorus__ef_check_step(const ef_comp *s, const chorus_compress_call *c,
                                    const ef_tensor *t, float sum);

/* A deterministic 64-bit generator (splitmix64), the same on every rank for the same seed. */
uint64_t chorus__ef_rand(uint64_t *state);

/* The functions of each kind (topk.c, randomk.c, powersgd.c). */
extern const chorus_compressor chorus__topk_ops, chorus__randomk_ops, chorus__powersgd_ops;

#endif
