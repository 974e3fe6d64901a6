/*
 * engine_ops.c - every engine op, enqueued by name in a different random order on every rank
 * and from two threads at once, over several steps (the first negotiated by the coordinator,
 * the later ones through the response cache), checked against a reference each rank computes
 * alone. Inputs are small integers, so every summation order gives the same bits.
 * Usage: chorus-run -np N engine_ops [tensors-per-kind]
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus/engine.h"
#include "harness.h"
#include "reduce/reduce.h"

static int rank_, size_;
static chorus_engine *eng;

static const chorus_dtype dts[] = {CHORUS_FLOAT32, CHORUS_FLOAT64,  CHORUS_INT32,
                                   CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_INT64};
static const chorus_op ops[] = {CHORUS_SUM, CHORUS_AVG, CHORUS_MIN, CHORUS_MAX, CHORUS_PROD};

static long long val(int r, int i, size_t k, int step, chorus_op op)
{
    uint64_t s = (uint64_t)r * 1000003u + (uint64_t)i * 7919u + k * 104729u + (uint64_t)step * 31u;
    uint64_t x = test_rand(&s);
    if (op == CHORUS_PROD) return (x % 5 == 0) ? 2 : ((x & 8) ? -1 : 1);
    return (long long)(x % 7) - 3;
}

static void put(void *b, size_t k, chorus_dtype t, long long v)
{
    switch (t) {
    case CHORUS_INT32: ((int32_t *)b)[k] = (int32_t)v; break;
    case CHORUS_INT64: ((int64_t *)b)[k] = v; break;
    case CHORUS_FLOAT16: ((uint16_t *)b)[k] = chorus__f32_to_f16((float)v); break;
    case CHORUS_BFLOAT16: ((uint16_t *)b)[k] = chorus__f32_to_bf16((float)v); break;
    case CHORUS_FLOAT32: ((float *)b)[k] = (float)v; break;
    case CHORUS_FLOAT64: ((double *)b)[k] = (double)v; break;
    default: break;
    }
}

enum { K_AR, K_BC, K_AG, K_RS, K_A2A, K_CB, NKIND };

typedef struct op {
    int kind, i;
    char name[64];
    chorus_dtype t;
    chorus_op rop;
    size_t count, rows;
    double pre, post;
    void *send, *recv, *want;
    size_t want_bytes;
    chorus_engine_handle *h;
} op;

static op *all;
static int nall;
static int cb_count, cb_errors;
static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_done(chorus_engine_handle *h, chorus_result r, void *arg)
{
    op *o = arg;
    pthread_mutex_lock(&cb_mu);
    cb_count++;
    if (r != CHORUS_OK || strcmp(chorus_engine_handle_name(h), o->name) ||
        memcmp(o->recv, o->want, o->want_bytes))
        cb_errors++;
    pthread_mutex_unlock(&cb_mu);
}

static void build(int per_kind, int step)
{
    nall = 0;
    for (int kind = 0; kind < NKIND; kind++)
        for (int i = 0; i < per_kind; i++) {
            op *o = &all[nall++];
            memset(o, 0, sizeof(*o));
            o->kind = kind;
            o->i = i;
            o->pre = o->post = 1.0;
            snprintf(o->name, sizeof(o->name), "k%d.t%d", kind, i);
            if (kind == K_AR || kind == K_CB) {
                o->t = dts[i % 6];
                o->rop = ops[(i / 6) % 5];
                int isf = o->t != CHORUS_INT32 && o->t != CHORUS_INT64;
                if (o->rop == CHORUS_AVG && !isf) o->rop = CHORUS_SUM;
                o->count = i % 9 == 0 ? 70000 + (size_t)i : 1 + (size_t)(i * 37) % 300;
                if (isf && o->rop == CHORUS_SUM && i % 4 == 1) {
                    o->pre = 2.0;
                    o->post = 0.25;
                }
            } else if (kind == K_BC) {
                o->t = dts[i % 6];
                o->count = 1 + (size_t)(i * 13) % 500;
            } else if (kind == K_AG) {
                o->t = CHORUS_INT32;
                o->count = 5; /* row size */
                o->rows = (size_t)((rank_ + i) % 3);
            } else if (kind == K_RS) {
                o->t = i % 2 ? CHORUS_FLOAT32 : CHORUS_INT32;
                o->rop = i % 3 == 2 ? CHORUS_MAX : CHORUS_SUM;
                o->count = 10 + (size_t)i;
            } else {
                o->t = CHORUS_INT32;
                o->count = (size_t)size_ * (1 + (size_t)i % 4);
            }
            size_t es = chorus_dtype_size(o->t);
            size_t in = kind == K_AG ? o->rows * o->count : o->count;
            o->send = calloc(in + 1, es);
            for (size_t k = 0; k < in; k++)
                put(o->send, k, o->t, val(rank_, i + 100 * kind, k, step, o->rop));
            /* reference */
            if (kind == K_AR || kind == K_CB) {
                o->recv = calloc(o->count, es);
                o->want = calloc(o->count, es);
                o->want_bytes = o->count * es;
                for (size_t k = 0; k < o->count; k++) {
                    long long acc = val(0, i + 100 * kind, k, step, o->rop) * (long long)o->pre;
                    for (int r = 1; r < size_; r++) {
                        long long v = val(r, i + 100 * kind, k, step, o->rop) * (long long)o->pre;
                        if (o->rop == CHORUS_SUM || o->rop == CHORUS_AVG) acc += v;
                        if (o->rop == CHORUS_PROD) acc *= v;
                        if (o->rop == CHORUS_MIN && v < acc) acc = v;
                        if (o->rop == CHORUS_MAX && v > acc) acc = v;
                    }
                    put(o->want, k, o->t, acc);
                }
                chorus__reduce_finish(o->want, o->count, o->t, o->rop, size_);
                if (o->post != 1.0)
                    for (size_t k = 0; k < o->count; k++) {
                        if (o->t == CHORUS_FLOAT32) ((float *)o->want)[k] *= (float)o->post;
                        if (o->t == CHORUS_FLOAT64) ((double *)o->want)[k] *= o->post;
                        if (o->t == CHORUS_FLOAT16)
                            ((uint16_t *)o->want)[k] = chorus__f32_to_f16(
                                chorus__f16_to_f32(((uint16_t *)o->want)[k]) * (float)o->post);
                        if (o->t == CHORUS_BFLOAT16)
                            ((uint16_t *)o->want)[k] = chorus__f32_to_bf16(
                                chorus__bf16_to_f32(((uint16_t *)o->want)[k]) * (float)o->post);
                    }
            } else if (kind == K_BC) {
                int root = i % size_;
                o->want = calloc(o->count, es);
                o->want_bytes = o->count * es;
                for (size_t k = 0; k < o->count; k++)
                    put(o->want, k, o->t, val(root, i + 100 * kind, k, step, 0));
            } else if (kind == K_AG) {
                size_t total = 0;
                for (int r = 0; r < size_; r++) total += (size_t)((r + i) % 3);
                o->want = calloc(total * 5 + 1, es);
                o->want_bytes = total * 5 * es;
                size_t at = 0;
                for (int r = 0; r < size_; r++)
                    for (size_t k = 0; k < (size_t)((r + i) % 3) * 5; k++)
                        put(o->want, at++, o->t, val(r, i + 100 * kind, k, step, 0));
            } else if (kind == K_RS) {
                size_t mine = chorus_engine_reduce_scatter_count(eng, o->count);
                size_t off = 0;
                for (int r = 0; r < rank_; r++)
                    off += chorus_engine_reduce_scatter_count(eng, o->count) + 0 * (size_t)r;
                /* offsets of the split: the first count % size ranks get one more */
                size_t q = o->count / (size_t)size_, rem = o->count % (size_t)size_;
                off = q * (size_t)rank_ + ((size_t)rank_ < rem ? (size_t)rank_ : rem);
                o->recv = calloc(mine + 1, es);
                o->want = calloc(mine + 1, es);
                o->want_bytes = mine * es;
                for (size_t k = 0; k < mine; k++) {
                    long long acc = val(0, i + 100 * kind, off + k, step, o->rop);
                    for (int r = 1; r < size_; r++) {
                        long long v = val(r, i + 100 * kind, off + k, step, o->rop);
                        acc = o->rop == CHORUS_MAX ? (v > acc ? v : acc) : acc + v;
                    }
                    put(o->want, k, o->t, acc);
                }
            } else {
                size_t per = o->count / (size_t)size_;
                o->recv = calloc(o->count, es);
                o->want = calloc(o->count, es);
                o->want_bytes = o->count * es;
                /* block j of my result is block rank_ of rank j's input */
                for (int r = 0; r < size_; r++)
                    for (size_t k = 0; k < per; k++)
                        put(o->want, (size_t)r * per + k, o->t,
                            val(r, i + 100 * kind, (size_t)rank_ * per + k, step, 0));
            }
            if (kind == K_BC) o->recv = o->send;
        }
    /* broadcast: non-root buffers start as garbage */
    for (int j = 0; j < nall; j++)
        if (all[j].kind == K_BC && all[j].i % size_ != rank_)
            memset(all[j].send, 0x5a, all[j].count * chorus_dtype_size(all[j].t));
}

static void enqueue(op *o)
{
    chorus_engine_tensor_opts to = {.prescale = o->pre, .postscale = o->post};
    switch (o->kind) {
    case K_AR:
        ASSERT_OK(chorus_engine_allreduce(eng, o->name, o->send, o->recv, o->count, o->t, o->rop,
                                          &to, &o->h));
        break;
    case K_CB:
        to.callback = on_done;
        to.callback_arg = o;
        ASSERT_OK(chorus_engine_allreduce(eng, o->name, o->send, o->recv, o->count, o->t, o->rop,
                                          &to, NULL));
        break;
    case K_BC:
        ASSERT_OK(chorus_engine_broadcast(eng, o->name, o->send, o->count, o->t, o->i % size_, NULL,
                                          &o->h));
        break;
    case K_AG:
        ASSERT_OK(
            chorus_engine_allgather(eng, o->name, o->send, o->rows, o->count, o->t, NULL, &o->h));
        break;
    case K_RS:
        ASSERT_OK(chorus_engine_reduce_scatter(eng, o->name, o->send, o->recv, o->count, o->t,
                                               o->rop, NULL, &o->h));
        break;
    default:
        ASSERT_OK(
            chorus_engine_alltoall(eng, o->name, o->send, o->recv, o->count, o->t, NULL, &o->h));
        break;
    }
}

static int *order;

static void *submitter(void *arg)
{
    int which = (int)(intptr_t)arg;
    for (int j = which; j < nall; j += 2) {
        enqueue(&all[order[j]]);
        if (j % 17 == 0) usleep(200);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    rank_ = test_rank = chorus_rank(c);
    size_ = chorus_size(c);
    int per_kind = argc > 1 ? atoi(argv[1]) : 40;
    ASSERT_OK(chorus_engine_start(c, NULL, &eng));
    all = calloc((size_t)per_kind * NKIND, sizeof(op));
    order = calloc((size_t)per_kind * NKIND, sizeof(int));
    uint64_t seed = 12345 + (uint64_t)rank_ * 777;
    int cb_total = 0;
    for (int step = 0; step < 3; step++) {
        build(per_kind, step);
        for (int j = 0; j < nall; j++) order[j] = j;
        for (int j = nall - 1; j > 0; j--) { /* a different order on every rank and step */
            int k = (int)(test_rand(&seed) % (uint64_t)(j + 1));
            int t = order[j];
            order[j] = order[k];
            order[k] = t;
        }
        pthread_t th[2];
        for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, submitter, (void *)(intptr_t)k);
        for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
        cb_total += per_kind;
        for (int j = 0; j < nall; j++) {
            op *o = &all[j];
            if (o->kind == K_CB) continue;
            chorus_result r = chorus_engine_wait(o->h);
            if (r != CHORUS_OK)
                test_fail(__FILE__, __LINE__, "%s: %s: %s", o->name, chorus_strerror(r),
                          chorus_engine_handle_error(o->h));
            if (o->kind == K_AG) {
                size_t rows;
                void *out = chorus_engine_take_output(o->h, &rows);
                ASSERT_EQ(rows * 5 * sizeof(int32_t), o->want_bytes);
                ASSERT(rows == 0 || memcmp(out, o->want, o->want_bytes) == 0);
                ASSERT_EQ(chorus_engine_output_rows(o->h, size_ - 1),
                          (size_t)((size_ - 1 + o->i) % 3));
                free(out);
            } else if (memcmp(o->recv, o->want, o->want_bytes)) {
                test_fail(__FILE__, __LINE__,
                          "step %d: wrong result for %s (dtype %d op %d count %zu)", step, o->name,
                          (int)o->t, (int)o->rop, o->count);
            }
            chorus_engine_release(o->h);
        }
        /* callbacks run on the engine thread; wait for all of them */
        for (int spins = 0;; spins++) {
            pthread_mutex_lock(&cb_mu);
            int n = cb_count;
            pthread_mutex_unlock(&cb_mu);
            if (n == cb_total) break;
            ASSERT(spins < 20000);
            usleep(1000);
        }
        ASSERT_EQ(cb_errors, 0);
        for (int j = 0; j < nall; j++) {
            if (all[j].recv != all[j].send) free(all[j].recv);
            free(all[j].send);
            free(all[j].want);
        }
    }
    chorus_engine_stats st;
    ASSERT_OK(chorus_engine_get_stats(eng, &st));
    if (rank_ == 0)
        printf("engine_ops: %d ranks, %d ops x 3 steps: %llu cycles, %llu coordinator rounds, %llu "
               "cache hits, %llu fused allreduces\n",
               size_, nall, (unsigned long long)st.cycles, (unsigned long long)st.coord_rounds,
               (unsigned long long)st.cache_hits, (unsigned long long)st.fused_batches);
    ASSERT_EQ(st.tensors, (uint64_t)nall * 3);
    const char *cap = getenv("CHORUS_CACHE_CAPACITY");
    if (!cap || atoi(cap) > 0) ASSERT(st.cache_hits > 0);
    ASSERT_OK(chorus_engine_barrier(eng));
    ASSERT_OK(chorus_engine_shutdown(eng));
    ASSERT_OK(chorus_finalize(c));
    return 0;
}
