/*
 * engine_step.c - one training step's gradient synchronisation through the engine: the 161
 * parameter tensors of ResNet-50 (25.6 M floats, 102 MB), enqueued in backward order (last
 * layer first) and waited for, as a data-parallel trainer does. Reports the median time per
 * step with fusion on and off, and one chorus_allreduce of the same total bytes on the same
 * ranks as the floor; the overhead is engine / floor - 1. Also the engine thread's CPU time
 * while idle.
 *
 *   chorus-run -np 2 engine_step [--steps N] [--warmup W]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "chorus/engine.h"

#define MAXT 200

static size_t shapes[MAXT];
static char names[MAXT][48];
static int ntensors;

static void add(const char *name, size_t n)
{
    snprintf(names[ntensors], sizeof(names[0]), "%s", name);
    shapes[ntensors++] = n;
}

/* torchvision resnet50: conv weights, batch-norm weight and bias, fc weight and bias */
static void resnet50(void)
{
    char nm[48];
    add("conv1.weight", 64 * 3 * 7 * 7);
    add("bn1.weight", 64);
    add("bn1.bias", 64);
    int blocks[4] = {3, 4, 6, 3}, width[4] = {64, 128, 256, 512}, in = 64;
    for (int l = 0; l < 4; l++)
        for (int b = 0; b < blocks[l]; b++) {
            int w = width[l], out = 4 * w;
            size_t conv[3] = {(size_t)in * w, (size_t)w * w * 9, (size_t)w * out};
            size_t bn[3] = {(size_t)w, (size_t)w, (size_t)out};
            for (int k = 0; k < 3; k++) {
                snprintf(nm, sizeof(nm), "layer%d.%d.conv%d.weight", l + 1, b, k + 1);
                add(nm, conv[k]);
                snprintf(nm, sizeof(nm), "layer%d.%d.bn%d.weight", l + 1, b, k + 1);
                add(nm, bn[k]);
                snprintf(nm, sizeof(nm), "layer%d.%d.bn%d.bias", l + 1, b, k + 1);
                add(nm, bn[k]);
            }
            if (b == 0) {
                snprintf(nm, sizeof(nm), "layer%d.0.downsample.0.weight", l + 1);
                add(nm, (size_t)in * out);
                snprintf(nm, sizeof(nm), "layer%d.0.downsample.1.weight", l + 1);
                add(nm, (size_t)out);
                snprintf(nm, sizeof(nm), "layer%d.0.downsample.1.bias", l + 1);
                add(nm, (size_t)out);
            }
            in = out;
        }
    add("fc.weight", 2048 * 1000);
    add("fc.bias", 1000);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(double), cmp);
    return t[n / 2];
}

static double engine_step(chorus_engine *e, float **g, float **out)
{
    chorus_engine_handle *h[MAXT];
    double t0 = chorus__now();
    for (int j = ntensors - 1; j >= 0; j--)
        if (chorus_engine_allreduce(e, names[j], g[j], out[j], shapes[j], CHORUS_FLOAT32,
                                    CHORUS_AVG, NULL, &h[j]) != CHORUS_OK) {
            fprintf(stderr, "enqueue: %s\n", chorus_engine_last_error(e));
            exit(1);
        }
    for (int j = 0; j < ntensors; j++) {
        if (chorus_engine_wait(h[j]) != CHORUS_OK) {
            fprintf(stderr, "%s: %s\n", names[j], chorus_engine_handle_error(h[j]));
            exit(1);
        }
        chorus_engine_release(h[j]);
    }
    return chorus__now() - t0;
}

int main(int argc, char **argv)
{
    int steps = 10, warmup = 3;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[++i]);
    }
    if (steps < 1 || steps > 1000) steps = 10;
    chorus_comm *c;
    if (chorus_init(&c) != CHORUS_OK) {
        fprintf(stderr, "chorus_init: %s\n", chorus_last_error(NULL));
        return 1;
    }
    int rank = chorus_rank(c);
    resnet50();
    size_t total = 0;
    for (int j = 0; j < ntensors; j++) total += shapes[j];
    float *g[MAXT], *out[MAXT];
    for (int j = 0; j < ntensors; j++) {
        g[j] = malloc(shapes[j] * 4);
        out[j] = malloc(shapes[j] * 4);
        for (size_t k = 0; k < shapes[j]; k++)
            g[j][k] = (float)((k + (size_t)j + (size_t)rank) % 13) * 0.01f;
    }
    float *flat = malloc(total * 4);
    for (size_t k = 0; k < total; k++) flat[k] = (float)(k % 13) * 0.01f;
    int n = steps + warmup;
    double *t = malloc(sizeof(double) * 3 * (size_t)n);
    /* Both engines run side by side (an idle engine only heartbeats) and the three variants
     * take turns within each step, so a burst of load on this shared machine hits all three. */
    chorus_engine *eng[2];
    for (int fuse = 0; fuse < 2; fuse++) {
        chorus_engine_opts o;
        chorus_engine_opts_init(&o);
        if (!fuse) o.fusion_threshold = 0;
        if (chorus_engine_start(c, &o, &eng[fuse]) != CHORUS_OK) {
            fprintf(stderr, "engine: %s\n", chorus_last_error(c));
            return 1;
        }
    }
    chorus_engine_stats st[2], s0[2];
    for (int s = 0; s < n; s++) {
        if (s == warmup)
            for (int f = 0; f < 2; f++) chorus_engine_get_stats(eng[f], &s0[f]);
        chorus_barrier(c);
        double t0 = chorus__now();
        chorus_allreduce(c, flat, flat, total, CHORUS_FLOAT32, CHORUS_AVG);
        t[s] = chorus__now() - t0;
        for (int f = 1; f >= 0; f--) {
            chorus_engine_barrier(eng[f]);
            t[(size_t)(2 - f) * (size_t)n + (size_t)s] = engine_step(eng[f], g, out);
        }
    }
    double floor_s = median(t + warmup, steps);
    double res[2] = {median(t + 2 * n + warmup, steps), median(t + n + warmup, steps)};
    for (int f = 0; f < 2; f++) chorus_engine_get_stats(eng[f], &st[f]);
    /* idle: nothing enqueued for 2 s */
    chorus_engine_stats a, b;
    chorus_engine_get_stats(eng[1], &a);
    double w0 = chorus__now();
    sleep(2);
    chorus_engine_get_stats(eng[1], &b);
    double idle_wall = chorus__now() - w0, idle_cpu = b.thread_cpu_s - a.thread_cpu_s;
    double busy_cpu = (st[1].thread_cpu_s - s0[1].thread_cpu_s) / steps;
    for (int f = 0; f < 2; f++) chorus_engine_shutdown(eng[f]);
    if (rank == 0) {
        printf("ResNet-50 gradients: %d tensors, %zu floats (%.1f MB), %d ranks, median of %d "
               "steps after %d warm-up\n",
               ntensors, total, total * 4e-6, chorus_size(c), steps, warmup);
        printf("  one chorus_allreduce (avg) %.1f MB: %8.2f ms\n", total * 4e-6, floor_s * 1e3);
        printf("  engine, fusion on (64 MiB)      : %8.2f ms  overhead %+5.1f%%  (%.1f allreduce "
               "calls and %.1f cycles a step; engine thread %.1f ms CPU a step)\n",
               res[1] * 1e3, (res[1] / floor_s - 1) * 100,
               (double)(st[1].fused_batches - s0[1].fused_batches) / steps,
               (double)(st[1].cycles - s0[1].cycles) / steps, busy_cpu * 1e3);
        printf("  engine, fusion off              : %8.2f ms  overhead %+5.1f%%  (%.1f allreduce "
               "calls a step)\n",
               res[0] * 1e3, (res[0] / floor_s - 1) * 100,
               (double)(st[0].fused_batches - s0[0].fused_batches) / steps);
        printf("  engine thread idle: %.3f ms CPU in %.2f s (%.4f%% of a core)\n", idle_cpu * 1e3,
               idle_wall, idle_cpu / idle_wall * 100);
    }
    chorus_finalize(c);
    return 0;
}
