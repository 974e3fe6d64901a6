/*
 * train_engine.c - chorus-train with --grad-sync engine (each layer's gradient enqueued with
 * the training runtime during backward) on real ranks through chorus-run:
 *   - 2 ranks: every rank ends bitwise identical, and identical to the blocking fused path
 *     (both sum a + b), with dropout and gradient accumulation; the metrics carry the
 *     communication timings, and every layer's gradient is handed over during backward;
 *   - 3 ranks with uneven shards and the CNN on 2 ranks: bitwise identical across ranks;
 *   - 2 ranks x 64 match 1 rank x 128 up to floating-point rounding;
 *   - a 2-rank run stopped and resumed from its checkpoint ends bitwise equal to one that
 *     never stopped;
 *   - a rank killed mid-training makes the other rank stop with a message naming it, and a
 *     bad --grad-sync value is refused by name.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static char g_dir[256];
static char g_train[512], g_run[512];

static int same_on_all_ranks(const char *name, int np)
{
    int ok = 1;
    for (int r = 1; r < np; r++) {
        char a[512], b[512];
        snprintf(a, sizeof(a), "%s/%s.0", g_dir, name);
        snprintf(b, sizeof(b), "%s/%s.%d", g_dir, name, r);
        ok &= test_same_file(a, b);
    }
    return ok;
}

static int same_dump(const char *x, const char *y)
{
    char a[512], b[512];
    snprintf(a, sizeof(a), "%s/%s.0", g_dir, x);
    snprintf(b, sizeof(b), "%s/%s.0", g_dir, y);
    return test_same_file(a, b);
}

#define MLP2                                                                                       \
    "--model mlp --dropout 0.1 --batch 256 --accum 2 --max-steps 20 --seed 2 --log-every 10"

static void test_two_ranks_engine_equals_fused(void)
{
    ASSERT_EQ(test_sh("%s -np 2 %s " MLP2 " --grad-sync engine --metrics %s/me.jsonl "
                      "--dump-params %s/e2 > %s/e2.log 2>&1",
                      g_run, g_train, g_dir, g_dir, g_dir),
              0);
    ASSERT_EQ(test_sh("%s -np 2 %s " MLP2 " --grad-sync fused --dump-params %s/f2 > %s/f2.log 2>&1",
                      g_run, g_train, g_dir, g_dir),
              0);
    ASSERT(same_on_all_ranks("e2", 2));
    ASSERT(same_dump("e2", "f2"));
    char p[512];
    snprintf(p, sizeof(p), "%s/me.jsonl", g_dir);
    ASSERT(test_file_has(p, "{\"step\":20,"));
    ASSERT(test_file_has(p, "\"grad_comm_s\":"));
    ASSERT(test_file_has(p, "\"grad_wait_s\":"));
    /* The hook hands each layer's gradient (3 linear layers) to the engine during backward,
     * on every step. */
    char *text;
    if (test_slurp(p, &text) >= 0) {
        int steps = 0, handed = 0;
        const char *key = "\"grad_tensors_in_backward\":";
        for (char *q = text; (q = strstr(q, key)); q++) {
            steps++;
            handed += atoi(q + strlen(key)) == 3;
        }
        ASSERT_EQ(steps, 20);
        ASSERT_EQ(handed, 20);
        free(text);
    }
    snprintf(p, sizeof(p), "%s/e2.log", g_dir);
    ASSERT(test_file_has(p, "communication (--grad-sync engine, 2 ranks): averaging the gradients "
                            "took "));
    ASSERT(test_file_has(p, "of it ran behind the backward pass"));
}

static void test_three_ranks_and_cnn(void)
{
    /* 1000 samples per step over 3 ranks: 334 + 333 + 333. */
    ASSERT_EQ(test_sh("%s -np 3 %s --model mlp --batch 1000 --max-steps 8 --seed 4 --grad-sync "
                      "engine --log-every 100 --dump-params %s/e3 > %s/e3.log 2>&1",
                      g_run, g_train, g_dir, g_dir),
              0);
    ASSERT(same_on_all_ranks("e3", 3));
    ASSERT_EQ(
        test_sh("%s -np 2 %s --model cnn --batch 32 --max-steps 6 --seed 3 --grad-sync engine "
                "--log-every 100 --dump-params %s/ec > %s/ec.log 2>&1",
                g_run, g_train, g_dir, g_dir),
        0);
    ASSERT(same_on_all_ranks("ec", 2));
}

/* Global batch 128 on 1 rank and on 2 ranks (64 each) through the engine: the same
 * parameters up to the order of floating-point sums. */
static void test_split_batch_matches(void)
{
#define SPLIT "--model mlp --batch 128 --max-steps 25 --seed 6 --lr 0.05 --log-every 100"
    ASSERT_EQ(test_sh("%s " SPLIT " --dump-params %s/one > /dev/null 2>&1", g_train, g_dir), 0);
    ASSERT_EQ(test_sh("%s -np 2 %s " SPLIT " --grad-sync engine --dump-params %s/two > /dev/null "
                      "2>&1",
                      g_run, g_train, g_dir),
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

/* 2000-sample global batches: 30 steps per epoch, so 40 steps cross into epoch 2. */
#define RES                                                                                        \
    "--model mlp --dropout 0.2 --batch 2000 --accum 2 --epochs 2 --lr 0.05 --seed 3 "              \
    "--grad-sync engine --log-every 1000"

static void test_resume_bitwise(void)
{
    ASSERT_EQ(test_sh("%s -np 2 %s " RES " --max-steps 40 --dump-params %s/rfull > %s/rfull.log "
                      "2>&1",
                      g_run, g_train, g_dir, g_dir),
              0);
    ASSERT_EQ(test_sh("%s -np 2 %s " RES " --max-steps 25 --checkpoint-dir %s/ck "
                      "--checkpoint-every 10 > %s/ra.log 2>&1",
                      g_run, g_train, g_dir, g_dir),
              0);
    ASSERT_EQ(test_sh("%s -np 2 %s " RES " --max-steps 40 --checkpoint-dir %s/ck --resume "
                      "--dump-params %s/rres > %s/rb.log 2>&1",
                      g_run, g_train, g_dir, g_dir, g_dir),
              0);
    ASSERT(same_dump("rfull", "rres"));
    ASSERT(same_on_all_ranks("rres", 2));
    char p[512];
    snprintf(p, sizeof(p), "%s/rb.log", g_dir);
    ASSERT(test_file_has(p, "train.00000000000000000025.ckpt: epoch 1, step 25"));
}

/* Rank 1 is killed (SIGKILL) once rank 0 has printed step 5; rank 0 must stop with an
 * error that names rank 1 instead of hanging. */
static void test_peer_killed(void)
{
    char log[512], out0[512];
    snprintf(log, sizeof(log), "%s/kill.log", g_dir);
    snprintf(out0, sizeof(out0), "%s/kill.out0", g_dir);
    int rc =
        test_sh("CHORUS_TIMEOUT_S=20 %s -np 2 --grace 20 sh -c '"
                "if [ \"$CHORUS_RANK\" = 0 ]; then exec %s --model mlp --batch 256 --epochs 50 "
                "--grad-sync engine --log-every 1 > %s 2>&1; fi; "
                "%s --model mlp --batch 256 --epochs 50 --grad-sync engine --log-every 1 & p=$!; "
                "i=0; until grep -q \"step 5/\" %s 2>/dev/null || [ $i -ge 600 ]; do sleep 0.05; "
                "i=$((i+1)); done; kill -9 $p' > %s 2>&1",
                g_run, g_train, out0, g_train, out0, log);
    ASSERT(rc != 0);
    ASSERT(test_file_has(out0, "step 5/"));
    ASSERT(test_file_has(out0, "chorus-train[0]: "));
    ASSERT(test_file_has(out0, "failed: "));
    ASSERT(test_file_has(out0, "rank 1"));
}

static void test_bad_mode(void)
{
    char log[512];
    snprintf(log, sizeof(log), "%s/bad.log", g_dir);
    ASSERT_EQ(test_sh("%s --grad-sync overlap --max-steps 1 > %s 2>&1", g_train, log), 1);
    ASSERT(test_file_has(log, "--grad-sync must be fused, layer or engine, not 'overlap'"));
}

int main(void)
{
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(g_train, sizeof(g_train), "%s/bin/chorus-train", build);
    snprintf(g_run, sizeof(g_run), "%s/bin/chorus-run", build);
    snprintf(g_dir, sizeof(g_dir), "%s/train_engine.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_two_ranks_engine_equals_fused);
    TEST_RUN(test_three_ranks_and_cnn);
    TEST_RUN(test_split_batch_matches);
    TEST_RUN(test_resume_bitwise);
    TEST_RUN(test_peer_killed);
    TEST_RUN(test_bad_mode);
    test_sh("rm -rf '%s'", g_dir);
    return 0;
}
