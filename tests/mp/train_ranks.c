/*
 * train_ranks.c - chorus-train on several ranks through chorus-run: every rank ends with
 * bitwise-identical parameters (2 ranks; 3 ranks with uneven shards and the per-layer gradient
 * path; the CNN with dropout on 2 ranks), and 2 ranks x 64 samples take the same steps as
 * 1 rank x 128 up to floating-point rounding.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static char g_dir[256];
static char g_train[512], g_run[512];

static void same_on_all_ranks(const char *name, int np)
{
    for (int r = 1; r < np; r++) {
        char a[512], b[512];
        snprintf(a, sizeof(a), "%s/%s.0", g_dir, name);
        snprintf(b, sizeof(b), "%s/%s.%d", g_dir, name, r);
        ASSERT(test_same_file(a, b));
    }
}

static void test_two_ranks_identical(void)
{
    ASSERT_EQ(test_sh("%s -np 2 %s --model mlp --dropout 0.1 --batch 256 --max-steps 30 --seed 2 "
                      "--log-every 10 --metrics %s/m2.jsonl --dump-params %s/r2 > %s/r2.log 2>&1",
                      g_run, g_train, g_dir, g_dir, g_dir),
              0);
    same_on_all_ranks("r2", 2);
    char p[512];
    snprintf(p, sizeof(p), "%s/r2.log", g_dir);
    ASSERT(test_file_has(p, "2 ranks"));
    snprintf(p, sizeof(p), "%s/m2.jsonl", g_dir);
    ASSERT(test_file_has(p, "{\"step\":30,"));
    ASSERT(test_file_has(p, "\"comm_wait_s\":"));
}

static void test_three_ranks_uneven(void)
{
    /* 1000 samples per step over 3 ranks: 334 + 333 + 333. */
    ASSERT_EQ(test_sh("%s -np 3 %s --model mlp --batch 1000 --max-steps 8 --seed 4 --grad-sync "
                      "layer --log-every 100 --dump-params %s/r3 > %s/r3.log 2>&1",
                      g_run, g_train, g_dir, g_dir),
              0);
    same_on_all_ranks("r3", 3);
    /* 7 global samples per step: 3 + 2 + 2, and 60000 % 7 = 3 leaves a short last step. */
    ASSERT_EQ(test_sh("%s -np 3 %s --model mlp --batch 7 --epochs 1 --max-steps 20 --seed 4 "
                      "--log-every 100 --dump-params %s/r3b > %s/r3b.log 2>&1",
                      g_run, g_train, g_dir, g_dir),
              0);
    same_on_all_ranks("r3b", 3);
}

static void test_cnn_two_ranks_identical(void)
{
    ASSERT_EQ(test_sh("%s -np 2 %s --model cnn --batch 32 --max-steps 6 --seed 3 --log-every 100 "
                      "--dump-params %s/c2 > %s/c2.log 2>&1",
                      g_run, g_train, g_dir, g_dir),
              0);
    same_on_all_ranks("c2", 2);
}

/* Global batch 128 on 1 rank and on 2 ranks (64 each): the same samples per step, so the
 * same parameters up to the order of floating-point sums. */
static void test_split_batch_matches(void)
{
#define SPLIT "--model mlp --batch 128 --max-steps 25 --seed 6 --lr 0.05 --log-every 100"
    ASSERT_EQ(test_sh("%s " SPLIT " --dump-params %s/one > /dev/null 2>&1", g_train, g_dir), 0);
    ASSERT_EQ(test_sh("%s -np 2 %s " SPLIT " --dump-params %s/two > /dev/null 2>&1", g_run, g_train,
                      g_dir),
              0);
    char a[512], b[512];
    snprintf(a, sizeof(a), "%s/one.0", g_dir);
    snprintf(b, sizeof(b), "%s/two.0", g_dir);
    char *x, *y;
    long nx = test_slurp(a, &x), ny = test_slurp(b, &y);
    ASSERT(nx > 0 && nx == ny);
    if (nx > 0 && nx == ny) {
        const float *p = (const float *)x, *q = (const float *)y;
        size_t n = (size_t)nx / sizeof(float), bad = 0, diff = 0;
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)p[i] - (double)q[i]);
            double tol = 1e-5 + 1e-4 * fabs((double)p[i]);
            if (d > 0) diff++;
            if (d > tol) bad++;
            if (d > worst) worst = d;
        }
        fprintf(stderr, "  %zu of %zu parameters differ, largest difference %.3g\n", diff, n,
                worst);
        ASSERT_EQ(bad, 0);
    }
    free(x);
    free(y);
}

int main(void)
{
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(g_train, sizeof(g_train), "%s/bin/chorus-train", build);
    snprintf(g_run, sizeof(g_run), "%s/bin/chorus-run", build);
    snprintf(g_dir, sizeof(g_dir), "%s/train_ranks.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_two_ranks_identical);
    TEST_RUN(test_three_ranks_uneven);
    TEST_RUN(test_cnn_two_ranks_identical);
    TEST_RUN(test_split_batch_matches);
    test_sh("rm -rf '%s'", g_dir);
    return 0;
}
