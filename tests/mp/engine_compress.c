/*
 * engine_compress.c - a two-round compressor through the engine, checked exactly against a
 * reference computed locally.
 *
 * The compressor is rank-1 PowerSGD on a float64 matrix of rows x cols (M = input + residual):
 * round 0 reduces P = M q (rows elements), its finish normalises P (the same on every rank);
 * round 1 reduces Q = M^T P (cols elements), its finish writes the output P Q^T, keeps the
 * residual M - P (M^T P)^T and the warm start q = Q / |Q| for the next step. Every rank runs
 * the same compressor for every rank on its own (summing in rank order, as the core does) and
 * compares: the outputs bit for bit, its own residual bit for bit, and over all steps the
 * error feedback loses nothing (sum of outputs + every rank's residual = sum of inputs).
 * Also: the plan's rounds fuse with plain and fp16 allreduces of the same cycle, an in-place
 * tensor, an average, a plan that differs across ranks (CHORUS_ERR_MISMATCH), options of an
 * unknown size or version (CHORUS_ERR_INVALID_ARG naming both), plans the engine refuses, and a
 * compressor that fails in round 0 on one rank (that rank's handle fails, the others and the
 * engine go on).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/engine.h"
#include "harness.h"

enum { MAXR = 16, MAXN = 64, MAXC = 8, MAXT = 4, STEPS = 5 };

/* One tensor's state. */
typedef struct lr_tensor {
    char name[32];
    double m[MAXN], resid[MAXN], p[MAXN], q[MAXC], qloc[MAXC];
    int used;
} lr_tensor;

typedef struct lowrank {
    size_t cols;
    lr_tensor t[MAXT];
} lowrank;

static lr_tensor *lr_get(lowrank *s, const char *name)
{
    for (int i = 0; i < MAXT; i++)
        if (s->t[i].used && !strcmp(s->t[i].name, name)) return &s->t[i];
    for (int i = 0; i < MAXT; i++)
        if (!s->t[i].used) {
            lr_tensor *t = &s->t[i];
            memset(t, 0, sizeof(*t));
            t->used = 1;
            snprintf(t->name, sizeof(t->name), "%s", name);
            for (size_t j = 0; j < s->cols; j++) t->q[j] = 1.0 / sqrt((double)s->cols);
            return t;
        }
    return NULL;
}

static void normalise(double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i] * v[i];
    if (s > 0)
        for (size_t i = 0; i < n; i++) v[i] /= sqrt(s);
}

/* The compressor's steps, shared by the engine's callbacks and the local reference. */
static void lr_prepare0(lr_tensor *t, size_t rows, size_t cols, const double *src, double *w)
{
    for (size_t i = 0; i < rows * cols; i++) t->m[i] = src[i] + t->resid[i];
    for (size_t i = 0; i < rows; i++) {
        w[i] = 0;
        for (size_t j = 0; j < cols; j++) w[i] += t->m[i * cols + j] * t->q[j];
    }
}
static void lr_finish0(lr_tensor *t, size_t rows, const double *w)
{
    memcpy(t->p, w, rows * sizeof(double));
    normalise(t->p, rows);
}
static void lr_prepare1(lr_tensor *t, size_t rows, size_t cols, double *w)
{
    for (size_t j = 0; j < cols; j++) {
        t->qloc[j] = 0;
        for (size_t i = 0; i < rows; i++) t->qloc[j] += t->m[i * cols + j] * t->p[i];
        w[j] = t->qloc[j];
    }
}
static void lr_finish1(lr_tensor *t, size_t rows, size_t cols, const double *w, double *dst)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            dst[i * cols + j] = t->p[i] * w[j];
            t->resid[i * cols + j] = t->m[i * cols + j] - t->p[i] * t->qloc[j];
        }
    memcpy(t->q, w, cols * sizeof(double));
    normalise(t->q, cols);
}

static chorus_result lr_plan(void *st, const char *tensor, size_t count, chorus_dtype t,
                             chorus_op op, chorus_compress_plan *plan)
{
    (void)tensor, (void)op;
    lowrank *s = st;
    if (t != CHORUS_FLOAT64 || count % s->cols || count > MAXN) return CHORUS_ERR_INVALID_ARG;
    plan->nrounds = 2;
    plan->round[0] =
        (chorus_round){CHORUS_ROUND_REDUCE, CHORUS_SUM, CHORUS_FLOAT64, count / s->cols};
    plan->round[1] = (chorus_round){CHORUS_ROUND_REDUCE, CHORUS_SUM, CHORUS_FLOAT64, s->cols};
    return CHORUS_OK;
}

static chorus_result lr_prepare(void *st, const chorus_compress_call *c, const void *src,
                                void *wire)
{
    lowrank *s = st;
    lr_tensor *t = lr_get(s, c->tensor);
    if (!t) return CHORUS_ERR_NOMEM;
    size_t rows = c->count / s->cols;
    if (c->round == 0)
        lr_prepare0(t, rows, s->cols, src, wire);
    else
        lr_prepare1(t, rows, s->cols, wire);
    return CHORUS_OK;
}

static chorus_result lr_finish(void *st, const chorus_compress_call *c, const void *wire, void *dst)
{
    lowrank *s = st;
    lr_tensor *t = lr_get(s, c->tensor);
    if (!t) return CHORUS_ERR_NOMEM;
    size_t rows = c->count / s->cols;
    if (c->round == 0)
        lr_finish0(t, rows, wire);
    else
        lr_finish1(t, rows, s->cols, wire, dst);
    return CHORUS_OK;
}

/* A compressor that fails: "fail1" in the finish of round 0 on rank 1 only, "badop" plans a
 * round that averages, "many" plans more rounds than there can be. */
static int fail_rank;
static chorus_result bad_plan(void *st, const char *tensor, size_t count, chorus_dtype t,
                              chorus_op op, chorus_compress_plan *plan)
{
    (void)tensor, (void)op;
    const char *kind = st;
    plan->nrounds = !strcmp(kind, "many") ? CHORUS_COMPRESS_MAX_ROUNDS + 1 : 2;
    for (int i = 0; i < 2; i++)
        plan->round[i] = (chorus_round){CHORUS_ROUND_REDUCE,
                                        !strcmp(kind, "badop") ? CHORUS_AVG : CHORUS_SUM, t, count};
    return CHORUS_OK;
}
static chorus_result copy_prepare(void *st, const chorus_compress_call *c, const void *src,
                                  void *wire)
{
    (void)st;
    memcpy(wire, src, c->count * sizeof(double));
    return CHORUS_OK;
}
static chorus_result fail_finish(void *st, const chorus_compress_call *c, const void *wire,
                                 void *dst)
{
    (void)st;
    if (c->round == 0 && fail_rank) return CHORUS_ERR_SYSTEM;
    if (c->round == 1) memcpy(dst, wire, c->count * sizeof(double));
    return CHORUS_OK;
}

static void failures(chorus_engine *e, int rank)
{
    fail_rank = rank == 1;
    chorus_compressor f = {"fail1", "fail1", bad_plan, copy_prepare, fail_finish};
    chorus_engine_tensor_opts o = {.compressor = &f};
    double x[4] = {1, 2, 3, 4}, y[4], z[4];
    chorus_engine_handle *h, *ok;
    ASSERT_OK(chorus_engine_allreduce(e, "f.grad", x, y, 4, CHORUS_FLOAT64, CHORUS_SUM, &o, &h));
    ASSERT_OK(
        chorus_engine_allreduce(e, "f.other", x, z, 4, CHORUS_FLOAT64, CHORUS_SUM, NULL, &ok));
    chorus_result r = chorus_engine_wait(h);
    if (rank == 1) {
        ASSERT(r == CHORUS_ERR_SYSTEM);
        ASSERT_STR_CONTAINS(chorus_engine_handle_error(h),
                            "compressor fail1 failed to finish round 0 of 'f.grad'");
        printf("f.grad -> %s\n", chorus_engine_handle_error(h));
    } else {
        /* rank 1 gave zeros in round 1 (it had nothing valid to send) */
        ASSERT_OK(r);
    }
    chorus_engine_release(h);
    ASSERT_OK(chorus_engine_wait(ok)); /* the engine goes on */
    chorus_engine_release(ok);
    ASSERT(z[3] > 0);
    chorus_compressor b = {"badop", "badop", bad_plan, copy_prepare, fail_finish};
    o.compressor = &b;
    ASSERT(chorus_engine_allreduce(e, "b.grad", x, y, 4, CHORUS_FLOAT64, CHORUS_SUM, &o, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "compressor badop: round 0 reduces with op");
    chorus_compressor m = {"many", "many", bad_plan, copy_prepare, fail_finish};
    o.compressor = &m;
    ASSERT(chorus_engine_allreduce(e, "m.grad", x, y, 4, CHORUS_FLOAT64, CHORUS_SUM, &o, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e),
                        "compressor many planned 5 rounds (at most 4)");
}

static double input(const char *name, int r, int step, size_t i)
{
    int salt = name[3] == 'a' ? 3 : 11;
    return (double)((int)((i * 7 + (size_t)r * 13 + (size_t)step * 5 + (size_t)salt) % 17) - 8) *
           0.5;
}

/* The whole exchange of one tensor for every rank, locally: ref gets the output (a sum). */
static void reference(lowrank *sim, int size, const char *name, size_t rows, size_t cols, int step,
                      double *ref)
{
    double src[MAXN], w[MAXR][MAXN], sum[MAXN];
    lr_tensor *t[MAXR];
    for (int r = 0; r < size; r++) {
        t[r] = lr_get(&sim[r], name);
        for (size_t i = 0; i < rows * cols; i++) src[i] = input(name, r, step, i);
        lr_prepare0(t[r], rows, cols, src, w[r]);
    }
    for (size_t i = 0; i < rows; i++) {
        sum[i] = w[0][i];
        for (int r = 1; r < size; r++) sum[i] += w[r][i];
    }
    for (int r = 0; r < size; r++) lr_finish0(t[r], rows, sum);
    for (int r = 0; r < size; r++) lr_prepare1(t[r], rows, cols, w[r]);
    for (size_t j = 0; j < cols; j++) {
        sum[j] = w[0][j];
        for (int r = 1; r < size; r++) sum[j] += w[r][j];
    }
    for (int r = 0; r < size; r++) lr_finish1(t[r], rows, cols, sum, ref);
}

static void bad_options(chorus_comm *comm)
{
    chorus_engine_opts o;
    chorus_engine_opts_init(&o);
    ASSERT_EQ(o.size, sizeof(o));
    ASSERT_EQ(chorus_engine_opts_size(), sizeof(o));
    ASSERT_EQ(chorus_engine_tensor_opts_size(), sizeof(chorus_engine_tensor_opts));
    o.size -= 8; /* a binding that lacks a field */
    chorus_engine *e = NULL;
    ASSERT(chorus_engine_start(comm, &o, &e) == CHORUS_ERR_INVALID_ARG);
    ASSERT(e == NULL);
    char want[128];
    snprintf(want, sizeof(want), "chorus_engine_opts of size %zu and version %u", o.size,
             (unsigned)CHORUS_ENGINE_OPTS_VERSION);
    ASSERT_STR_CONTAINS(chorus_last_error(comm), want);
    snprintf(want, sizeof(want), "this library has size %zu and version %u", sizeof(o),
             (unsigned)CHORUS_ENGINE_OPTS_VERSION);
    ASSERT_STR_CONTAINS(chorus_last_error(comm), want);
    if (chorus_rank(comm) == 0) printf("bad opts -> %s\n", chorus_last_error(comm));
    chorus_engine_opts_init(&o);
    o.version = CHORUS_ENGINE_OPTS_VERSION + 1;
    ASSERT(chorus_engine_start(comm, &o, &e) == CHORUS_ERR_INVALID_ARG);
    snprintf(want, sizeof(want), "version %u, but", (unsigned)CHORUS_ENGINE_OPTS_VERSION + 1);
    ASSERT_STR_CONTAINS(chorus_last_error(comm), want);
}

int main(void)
{
    chorus_comm *comm;
    ASSERT_OK(chorus_init(&comm));
    int rank = chorus_rank(comm), size = chorus_size(comm);
    ASSERT(size <= MAXR);
    bad_options(comm);

    chorus_engine *e;
    ASSERT_OK(chorus_engine_start(comm, NULL, &e));
    /* a tensor opts of another version */
    chorus_engine_tensor_opts bad;
    chorus_engine_tensor_opts_init(&bad);
    bad.version = 99;
    double one = 1, out;
    chorus_engine_handle *h;
    ASSERT(chorus_engine_allreduce(e, "x", &one, &out, 1, CHORUS_FLOAT64, CHORUS_SUM, &bad, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "chorus_engine_tensor_opts of size");
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "version 99, but this library");

    static lowrank mine, sim[MAXR];
    mine.cols = 4;
    for (int r = 0; r < size; r++) sim[r].cols = 4;
    chorus_compressor lr = {"lowrank", &mine, lr_plan, lr_prepare, lr_finish};
    chorus_engine_tensor_opts o;
    chorus_engine_tensor_opts_init(&o);
    o.compressor = &lr;
    chorus_engine_tensor_opts o16 = {.compressor = chorus_compressor_fp16()};
    const size_t ra = 6, rb = 10, cols = 4, na = ra * cols, nb = rb * cols;
    double a[MAXN], b[MAXN], ref[MAXN], plain[5], plain_out[5];
    double sum_in[MAXN] = {0}, sum_out[MAXN] = {0};
    float f[3], fo[3];
    for (int step = 0; step < STEPS; step++) {
        for (size_t i = 0; i < na; i++) a[i] = input("lr.a", rank, step, i);
        for (size_t i = 0; i < nb; i++) b[i] = input("lr.b", rank, step, i);
        for (int i = 0; i < 5; i++) plain[i] = rank * 10 + i + step;
        for (int i = 0; i < 3; i++) f[i] = (float)(rank + i);
        chorus_engine_handle *hs[4];
        double a_out[MAXN];
        ASSERT_OK(chorus_engine_allreduce(e, "lr.a", a, a_out, na, CHORUS_FLOAT64, CHORUS_SUM, &o,
                                          &hs[0]));
        /* in place, averaged */
        ASSERT_OK(
            chorus_engine_allreduce(e, "lr.b", b, b, nb, CHORUS_FLOAT64, CHORUS_AVG, &o, &hs[1]));
        ASSERT_OK(chorus_engine_allreduce(e, "plain", plain, plain_out, 5, CHORUS_FLOAT64,
                                          CHORUS_SUM, NULL, &hs[2]));
        ASSERT_OK(
            chorus_engine_allreduce(e, "h16", f, fo, 3, CHORUS_FLOAT32, CHORUS_SUM, &o16, &hs[3]));
        for (int k = 0; k < 4; k++) {
            ASSERT_OK(chorus_engine_wait(hs[k]));
            chorus_engine_release(hs[k]);
        }
        reference(sim, size, "lr.a", ra, cols, step, ref);
        for (size_t i = 0; i < na; i++)
            if (a_out[i] != ref[i])
                test_fail(__FILE__, __LINE__, "lr.a step %d [%zu]: %.17g vs %.17g", step, i,
                          a_out[i], ref[i]);
        reference(sim, size, "lr.b", rb, cols, step, ref);
        for (size_t i = 0; i < nb; i++)
            if (b[i] != ref[i] / (double)size)
                test_fail(__FILE__, __LINE__, "lr.b step %d [%zu]: %.17g vs %.17g", step, i, b[i],
                          ref[i] / (double)size);
        /* the state the engine's compressor carries is the reference's */
        lr_tensor *ta = lr_get(&mine, "lr.a"), *sa = lr_get(&sim[rank], "lr.a");
        ASSERT(!memcmp(ta->resid, sa->resid, na * sizeof(double)));
        ASSERT(!memcmp(ta->q, sa->q, cols * sizeof(double)));
        for (int i = 0; i < 5; i++) {
            double s = 0;
            for (int r = 0; r < size; r++) s += r * 10 + i + step;
            ASSERT(plain_out[i] == s);
        }
        for (int i = 0; i < 3; i++) ASSERT(fo[i] == (float)(size * i + size * (size - 1) / 2));
        for (size_t i = 0; i < na; i++) {
            sum_out[i] += a_out[i];
            for (int r = 0; r < size; r++) sum_in[i] += input("lr.a", r, step, i);
        }
    }
    /* error feedback: nothing lost over the steps */
    double worst = 0, scale = 0;
    for (size_t i = 0; i < na; i++) {
        double kept = sum_out[i];
        for (int r = 0; r < size; r++) kept += lr_get(&sim[r], "lr.a")->resid[i];
        if (fabs(kept - sum_in[i]) > worst) worst = fabs(kept - sum_in[i]);
        if (fabs(sum_in[i]) > scale) scale = fabs(sum_in[i]);
    }
    if (!(worst <= 1e-12 * scale))
        test_fail(__FILE__, __LINE__, "error feedback lost %.3g (of %.3g)", worst, scale);
    double resid_norm = 0;
    for (size_t i = 0; i < na; i++) resid_norm += fabs(lr_get(&mine, "lr.a")->resid[i]);
    ASSERT(resid_norm > 0); /* a rank-1 plan is lossy here: the residual carries something */

    /* a plan that differs across ranks */
    static lowrank other;
    other.cols = rank == 0 ? 4 : 8;
    chorus_compressor lr2 = {"lowrank", &other, lr_plan, lr_prepare, lr_finish};
    chorus_engine_tensor_opts o2 = {.compressor = &lr2};
    double c[32] = {0}, co[32];
    ASSERT_OK(chorus_engine_allreduce(e, "lr.bad", c, co, 32, CHORUS_FLOAT64, CHORUS_SUM, &o2, &h));
    ASSERT(chorus_engine_wait(h) == CHORUS_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(chorus_engine_handle_error(h),
                        "compression plan 2 rounds: reduce sum float64 x 8, reduce sum float64 x "
                        "4 on rank 0 but 2 rounds: reduce sum float64 x 4, reduce sum float64 x 8 "
                        "on rank 1");
    if (rank == 0) printf("lr.bad -> %s\n", chorus_engine_handle_error(h));
    chorus_engine_release(h);
    /* a plan the compressor refuses */
    ASSERT(chorus_engine_allreduce(e, "lr.odd", c, co, 7, CHORUS_FLOAT64, CHORUS_SUM, &o, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e),
                        "compressor lowrank has no plan for 7 float64");
    failures(e, rank);
    ASSERT_OK(chorus_engine_shutdown(e));
    ASSERT_OK(chorus_finalize(comm));
    if (rank == 0)
        printf("engine_compress: %d steps of a two-round plan on %d ranks: ok\n", STEPS, size);
    return 0;
}
