/*
 * compress_ef.c - the compressors with error feedback (chorus_compressor_create), with real
 * ranks:  chorus-run -np N compress_ef SPEC [engine]
 *
 *   round trip    step 1 on an input the compressor can carry whole comes back whole: for
 *                 topk a k-sparse input (exact), for powersgd:R a matrix of rank R (to float
 *                 rounding), for randomk the k drawn elements (exact) and zeros elsewhere;
 *   error feedback over STEPS steps of integer-valued gradients, the sum of the outputs plus
 *                 every rank's residual equals the sum of all gradients: exactly for topk and
 *                 randomk (every sum is of small integers), within 1e-4 of the largest sum
 *                 for powersgd (float products);
 *   identical     every step's output has the same bits on every rank;
 *   engine        with "engine": the same tensors go through chorus_engine_allreduce (beside a
 *                 plain allreduce that fuses with the reduce rounds) and every output has the
 *                 bits of chorus_compressed_allreduce on a second compressor of the same spec;
 *   small         a tensor under the dense threshold is reduced exactly, with no residual;
 *   saved state   a compressor restored from chorus_compressor_save_state after 10 steps gives
 *                 the bits of the one that went on, for 10 more steps; a truncated buffer, a
 *                 flipped length and another spec's state are refused naming why;
 *   join          with "join" (random-k, PowerSGD): rank 0 has one batch more, the others join
 *                 for it; afterwards they are a step behind rank 0 on the tensor (their draws,
 *                 their warm start), so the next step fails on every rank with
 *                 CHORUS_ERR_MISMATCH naming the compressor instead of summing wrong data.
 * Prints "SPEC: error feedback holds over N steps" on rank 0.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "chorus/engine.h"
#include "harness.h"

enum { ROWS = 48, COLS = 64, N = ROWS * COLS, STEPS = 40 };

static chorus_comm *comm;
static int rank_, size_;

/* An integer-valued gradient, different per rank and step, with a few large entries. */
static void gradient(float *g, int step, int rank)
{
    for (int i = 0; i < N; i++) {
        int v = (i * 7 + rank * 13 + step * 5) % 11 - 5;
        if ((i + step * 31 + rank) % 97 == 0) v *= 20;
        g[i] = (float)v;
    }
}

/* Every rank holds the same bits in buf (n floats). */
static void assert_same_everywhere(const float *buf, size_t n, const char *what)
{
    uint64_t h = chorus__hash64(buf, n * sizeof(float));
    uint64_t *all = calloc((size_t)size_, sizeof(uint64_t));
    ASSERT(all);
    ASSERT_OK(chorus_allgather(comm, &h, all, 1, CHORUS_INT64));
    for (int r = 0; r < size_; r++)
        if (all[r] != all[0])
            test_fail(__FILE__, __LINE__, "%s: rank %d's output differs from rank 0's", what, r);
    free(all);
}

/* Sum over the ranks, in double (exact for the integer sums here). */
static void sum_ranks(const float *x, double *out)
{
    for (int i = 0; i < N; i++) out[i] = x[i];
    ASSERT_OK(chorus_allreduce(comm, out, out, N, CHORUS_FLOAT64, CHORUS_SUM));
}

static void round_trip(const char *spec)
{
    chorus_compressor *c;
    ASSERT_OK(chorus_compressor_create(spec, 0, &c));
    float *g = calloc(N, sizeof(float)), *out = calloc(N, sizeof(float));
    float *res = calloc(N, sizeof(float));
    double *want = calloc(N, sizeof(double)), *rsum = calloc(N, sizeof(double));
    ASSERT(g && out && res && want && rsum);
    int exact = strncmp(spec, "powersgd", 8) != 0;
    if (!strncmp(spec, "topk", 4)) { /* 20 nonzeros per rank: within k = ceil(0.05 N) */
        for (int j = 0; j < 20; j++) g[(j * 131 + rank_ * 17) % N] = (float)(j + 1 + rank_);
    } else { /* rank-2: row i = a_i u + b_i v, the same u, v on every rank */
        for (int i = 0; i < ROWS; i++)
            for (int j = 0; j < COLS; j++)
                g[i * COLS + j] = (float)((i % 5 + rank_) * (j % 3 - 1) + (i % 2) * (j % 4));
    }
    chorus_compressor_set_cols(c, "rt", COLS);
    ASSERT_OK(chorus_compressed_allreduce(comm, c, "rt", g, out, N, CHORUS_FLOAT32, CHORUS_SUM));
    ASSERT_OK(chorus_compressor_residual(c, "rt", res, N));
    sum_ranks(g, want);
    sum_ranks(res, rsum);
    double big = 0;
    for (int i = 0; i < N; i++) big = fmax(big, fabs(want[i]));
    int sent = 0;
    for (int i = 0; i < N; i++) {
        if (!strncmp(spec, "randomk", 7)) { /* out + residuals is the input, exactly */
            ASSERT_NEAR(out[i] + rsum[i], want[i], 0);
            sent += out[i] != 0;
        } else {
            ASSERT_NEAR(out[i], want[i], exact ? 0 : 1e-5 * big);
            ASSERT_NEAR(rsum[i], 0, exact ? 0 : 1e-5 * big);
        }
    }
    if (!strncmp(spec, "randomk", 7)) ASSERT(sent > 0 && sent <= (int)ceil(0.05 * N));
    assert_same_everywhere(out, N, "round trip");
    free(g), free(out), free(res), free(want), free(rsum);
    chorus_compressor_destroy(c);
}

/* One step through the engine: the compressed tensor and a plain one in the same cycle. */
static void engine_step(chorus_engine *e, chorus_compressor *c, float *g, float *out)
{
    chorus_engine_tensor_opts to;
    chorus_engine_tensor_opts_init(&to);
    to.compressor = c;
    float plain[16];
    for (int i = 0; i < 16; i++) plain[i] = (float)(i + rank_);
    chorus_engine_handle *h1, *h2;
    ASSERT_OK(chorus_engine_allreduce(e, "grad", g, out, N, CHORUS_FLOAT32, CHORUS_SUM, &to, &h1));
    ASSERT_OK(chorus_engine_allreduce(e, "plain", plain, plain, 16, CHORUS_FLOAT32, CHORUS_SUM,
                                      NULL, &h2));
    ASSERT_OK(chorus_engine_wait(h1));
    ASSERT_OK(chorus_engine_wait(h2));
    chorus_engine_release(h1);
    chorus_engine_release(h2);
    ASSERT_NEAR(plain[3], 3.0 * size_ + size_ * (size_ - 1) / 2.0, 0);
}

static void error_feedback(const char *spec, int use_engine)
{
    chorus_compressor *c, *ref;
    ASSERT_OK(chorus_compressor_create(spec, 0, &c));
    ASSERT_OK(chorus_compressor_create(spec, 0, &ref));
    chorus_engine *e = NULL;
    if (use_engine) {
        chorus_engine_opts eo;
        chorus_engine_opts_init(&eo);
        eo.cycle_time_ms = 1;
        ASSERT_OK(chorus_engine_start(comm, &eo, &e));
    }
    float *g = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
    float *out2 = malloc(N * sizeof(float)), *res = malloc(N * sizeof(float));
    double *gsum = calloc(N, sizeof(double)), *osum = calloc(N, sizeof(double));
    double *tmp = calloc(N, sizeof(double));
    ASSERT(g && out && out2 && res && gsum && osum && tmp);
    for (int s = 0; s < STEPS; s++) {
        gradient(g, s, rank_);
        if (e) {
            engine_step(e, c, g, out);
            ASSERT_OK(chorus_compressed_allreduce(comm, ref, "grad", g, out2, N, CHORUS_FLOAT32,
                                                  CHORUS_SUM));
            if (memcmp(out, out2, N * sizeof(float)))
                test_fail(__FILE__, __LINE__,
                          "step %d: the engine's output differs from "
                          "chorus_compressed_allreduce's",
                          s);
        } else {
            memcpy(out, g, N * sizeof(float)); /* in place */
            ASSERT_OK(chorus_compressed_allreduce(comm, c, "grad", out, out, N, CHORUS_FLOAT32,
                                                  CHORUS_SUM));
        }
        assert_same_everywhere(out, N, spec);
        for (int i = 0; i < N; i++) osum[i] += out[i];
        sum_ranks(g, tmp);
        for (int i = 0; i < N; i++) gsum[i] += tmp[i];
    }
    ASSERT_OK(chorus_compressor_residual(c, "grad", res, N));
    sum_ranks(res, tmp);
    double big = 0, worst = 0, rnorm = 0;
    for (int i = 0; i < N; i++) big = fmax(big, fabs(gsum[i]));
    for (int i = 0; i < N; i++) {
        worst = fmax(worst, fabs(osum[i] + tmp[i] - gsum[i]));
        rnorm = fmax(rnorm, fabs(tmp[i]));
    }
    double tol = strncmp(spec, "powersgd", 8) ? 0 : 1e-4 * big;
    if (!(worst <= tol))
        test_fail(__FILE__, __LINE__,
                  "%s: sum of outputs + residuals differs from the sum of gradients by %g "
                  "(tolerance %g)",
                  spec, worst, tol);
    if (rank_ == 0)
        printf("%s%s: error feedback holds over %d steps (largest sum %g, largest residual %g, "
               "error %g)\n",
               spec, e ? " through the engine" : "", STEPS, big, rnorm, worst);
    if (e) ASSERT_OK(chorus_engine_shutdown(e));
    free(g), free(out), free(out2), free(res), free(gsum), free(osum), free(tmp);
    chorus_compressor_destroy(c);
    chorus_compressor_destroy(ref);
}

static void small_stays_dense(const char *spec)
{
    chorus_compressor *c;
    ASSERT_OK(chorus_compressor_create(spec, 0, &c));
    float x[100], res[100];
    for (int i = 0; i < 100; i++) x[i] = (float)(i % 9 + rank_);
    ASSERT_OK(chorus_compressed_allreduce(comm, c, "small", x, x, 100, CHORUS_FLOAT32, CHORUS_SUM));
    for (int i = 0; i < 100; i++) ASSERT_NEAR(x[i], size_ * (i % 9) + size_ * (size_ - 1) / 2, 0);
    ASSERT_OK(chorus_compressor_residual(c, "small", res, 100));
    for (int i = 0; i < 100; i++) ASSERT_NEAR(res[i], 0, 0);
    chorus_compressor_destroy(c);
}

static void saved_state(const char *spec)
{
    chorus_compressor *c, *back, *other;
    ASSERT_OK(chorus_compressor_create(spec, 0, &c));
    ASSERT_OK(chorus_compressor_create(spec, 0, &back));
    ASSERT_OK(
        chorus_compressor_create(strncmp(spec, "topk", 4) ? "topk:0.5" : "randomk:0.5", 0, &other));
    float *g = malloc(N * sizeof(float)), *a = malloc(N * sizeof(float));
    float *b = malloc(N * sizeof(float));
    ASSERT(g && a && b);
    void *st = NULL;
    size_t len = 0;
    for (int s = 0; s < 20; s++) {
        if (s == 10) {
            ASSERT_OK(chorus_compressor_save_state(c, &st, &len));
            ASSERT(len > N * sizeof(float));
            ASSERT_EQ(chorus_compressor_load_state(back, st, len - 1), CHORUS_ERR_INVALID_ARG);
            ASSERT(strstr(chorus_last_error(NULL), "compressor state: "));
            uint64_t saved;
            memcpy(&saved, (char *)st + 48, sizeof(saved)); /* the first tensor's name length */
            uint64_t bad = saved + 1000;
            memcpy((char *)st + 48, &bad, sizeof(bad));
            ASSERT_EQ(chorus_compressor_load_state(back, st, len), CHORUS_ERR_INVALID_ARG);
            memcpy((char *)st + 48, &saved, sizeof(saved));
            ASSERT_EQ(chorus_compressor_load_state(other, st, len), CHORUS_ERR_INVALID_ARG);
            ASSERT(strstr(chorus_last_error(NULL), "saved by compressor"));
            ASSERT_OK(chorus_compressor_load_state(back, st, len));
            free(st);
        }
        gradient(g, s, rank_);
        ASSERT_OK(
            chorus_compressed_allreduce(comm, c, "grad", g, a, N, CHORUS_FLOAT32, CHORUS_SUM));
        if (s < 10) continue;
        ASSERT_OK(
            chorus_compressed_allreduce(comm, back, "grad", g, b, N, CHORUS_FLOAT32, CHORUS_SUM));
        if (memcmp(a, b, N * sizeof(float)))
            test_fail(__FILE__, __LINE__, "%s step %d: the restored compressor's output differs",
                      spec, s);
    }
    if (rank_ == 0) printf("%s: a compressor restored after 10 steps gives the same bits\n", spec);
    free(g), free(a), free(b);
    chorus_compressor_destroy(c);
    chorus_compressor_destroy(back);
    chorus_compressor_destroy(other);
}

static void out_of_step(const char *spec)
{
    chorus_compressor *c;
    ASSERT_OK(chorus_compressor_create(spec, 0, &c));
    chorus_engine *e;
    ASSERT_OK(chorus_engine_start(comm, NULL, &e));
    float *g = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
    ASSERT(g && out);
    chorus_engine_tensor_opts to;
    chorus_engine_tensor_opts_init(&to);
    to.compressor = c;
    chorus_engine_handle *h;
    int last;
    for (int s = 0; s < 3; s++) {
        gradient(g, s, rank_);
        if (s == 1 && rank_ != 0) { /* rank 0's extra batch: the others join */
            ASSERT_OK(chorus_engine_join(e, &last));
            continue;
        }
        ASSERT_OK(
            chorus_engine_allreduce(e, "grad", g, out, N, CHORUS_FLOAT32, CHORUS_SUM, &to, &h));
        chorus_result r = chorus_engine_wait(h);
        if (s < 2) {
            ASSERT_OK(r);
        } else {
            ASSERT_EQ(r, CHORUS_ERR_MISMATCH);
            ASSERT_STR_CONTAINS(chorus_engine_handle_error(h), "compressor ");
            ASSERT_STR_CONTAINS(chorus_engine_handle_error(h), spec);
            if (rank_ == 0)
                printf("%s, a rank out of step: %s\n", spec, chorus_engine_handle_error(h));
        }
        chorus_engine_release(h);
        if (s == 1) ASSERT_OK(chorus_engine_join(e, &last));
    }
    ASSERT_OK(chorus_engine_shutdown(e));
    free(g), free(out);
    chorus_compressor_destroy(c);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: compress_ef SPEC [engine]\n");
        return 2;
    }
    ASSERT_OK(chorus_init(&comm));
    rank_ = test_rank = chorus_rank(comm);
    size_ = chorus_size(comm);
    if (argc > 2 && !strcmp(argv[2], "join")) {
        out_of_step(argv[1]);
        ASSERT_OK(chorus_finalize(comm));
        return 0;
    }
    int use_engine = argc > 2 && !strcmp(argv[2], "engine");
    round_trip(argv[1]);
    small_stays_dense(argv[1]);
    saved_state(argv[1]);
    error_feedback(argv[1], use_engine);
    ASSERT_OK(chorus_finalize(comm));
    return 0;
}
