/*
 * engine_autotune.c - steps of a small model's gradient synchronisation through the engine, as a
 * data-parallel trainer runs them, for CHORUS_AUTOTUNE=1 to tune on (the list sets the
 * variables and checks the log lines). Every step enqueues tensors of several sizes (small ones
 * that fuse, one above the engine's 1 MiB direct size) in backward order, of random floats that
 * differ per rank and per step, and waits for them. Checked at every step while the tuner
 * switches algorithms, fusion thresholds and cycle times under it: each result is the sum of
 * every rank's input (computed here for every rank, within float rounding), and the results are
 * bitwise identical on every rank (the engine's divergence check over all of them).
 *
 *   chorus-run -np N engine_autotune [steps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/engine.h"
#include "harness.h"

#define NT 6

static const size_t counts[NT] = {300000, 40000, 5000, 2048, 700, 10};

static void fill(float *x, size_t n, int rank, int step, int t)
{
    uint64_t s = ((uint64_t)rank << 40) ^ ((uint64_t)step << 20) ^ (uint64_t)t;
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)(test_rand(&s) >> 11) * 0x1p-53 - 0.5);
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 40;
    chorus_comm *comm;
    ASSERT_OK(chorus_init(&comm));
    test_rank = chorus_rank(comm);
    int rank = chorus_rank(comm), size = chorus_size(comm);
    chorus_engine *e;
    chorus_result sr = chorus_engine_start(comm, NULL, &e);
    if (sr != CHORUS_OK)
        test_fail(__FILE__, __LINE__, "chorus_engine_start: %s: %s", chorus_strerror(sr),
                  chorus_last_error(comm));
    size_t total = 0, maxc = 0;
    for (int t = 0; t < NT; t++) {
        total += counts[t];
        if (counts[t] > maxc) maxc = counts[t];
    }
    float *in = malloc(total * sizeof(float)), *out = malloc(total * sizeof(float));
    float *other = malloc(maxc * sizeof(float));
    double *want = malloc(maxc * sizeof(double));
    ASSERT(in && out && other && want);
    for (int step = 0; step < steps; step++) {
        chorus_engine_handle *h[NT];
        size_t off = 0;
        for (int t = 0; t < NT; t++) {
            char name[32];
            snprintf(name, sizeof(name), "grad.%d", t);
            fill(in + off, counts[t], rank, step, t);
            ASSERT_OK(chorus_engine_allreduce(e, name, in + off, out + off, counts[t],
                                              CHORUS_FLOAT32, CHORUS_SUM, NULL, &h[t]));
            off += counts[t];
        }
        for (int t = 0; t < NT; t++) {
            if (chorus_engine_wait(h[t]) != CHORUS_OK)
                test_fail(__FILE__, __LINE__, "step %d grad.%d: %s", step, t,
                          chorus_engine_handle_error(h[t]));
            chorus_engine_release(h[t]);
        }
        off = 0;
        for (int t = 0; t < NT; t++) {
            memset(want, 0, counts[t] * sizeof(double));
            for (int r = 0; r < size; r++) {
                fill(other, counts[t], r, step, t);
                for (size_t i = 0; i < counts[t]; i++) want[i] += other[i];
            }
            for (size_t i = 0; i < counts[t]; i++)
                if (!(fabs(out[off + i] - want[i]) <= 1e-5 * size))
                    test_fail(__FILE__, __LINE__, "step %d grad.%d[%zu] = %.9g, want %.9g", step, t,
                              i, out[off + i], want[i]);
            off += counts[t];
        }
        chorus_result r =
            chorus_engine_check_divergence(e, "results", out, total * sizeof(float), step);
        if (r != CHORUS_OK)
            test_fail(__FILE__, __LINE__, "step %d: %s", step, chorus_engine_last_error(e));
    }
    chorus_engine_stats st;
    ASSERT_OK(chorus_engine_get_stats(e, &st));
    printf("engine_autotune: %d steps, %llu cycles, %llu fused allreduces, results identical on "
           "%d ranks\n",
           steps, (unsigned long long)st.cycles, (unsigned long long)st.fused_batches, size);
    ASSERT_OK(chorus_engine_shutdown(e));
    free(in);
    free(out);
    free(other);
    free(want);
    chorus_finalize(comm);
    return 0;
}
