/*
 * train_resume.c - chorus-train in one process: a run stopped and resumed from its
 * checkpoint ends with the same parameters, bit for bit, as the run that never stopped
 * (crossing an epoch boundary, with dropout and momentum, and with AdamW and accumulation);
 * a corrupt newest checkpoint is refused by name and the previous one used, still
 * reproducing the same end state; a directory of old-format checkpoints is refused with a
 * message saying to re-create them; a missing dataset gives the install hint.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static char g_dir[256];
static char g_train[512];

/* 2000-sample global batches: 30 steps per epoch, so 45 steps cross into epoch 2. */
#define COMMON                                                                                     \
    "--model mlp --dropout 0.2 --batch 2000 --epochs 2 --lr 0.05 --seed 3 --log-every 1000"

static void test_resume_bitwise(void)
{
    ASSERT_EQ(test_sh("%s " COMMON " --max-steps 45 --dump-params %s/full > %s/full.log 2>&1",
                      g_train, g_dir, g_dir),
              0);
    ASSERT_EQ(test_sh("%s " COMMON " --max-steps 25 --checkpoint-dir %s/ck --checkpoint-every 10 > "
                      "%s/a.log 2>&1",
                      g_train, g_dir, g_dir),
              0);
    ASSERT_EQ(test_sh("%s " COMMON " --max-steps 45 --checkpoint-dir %s/ck --resume --dump-params "
                      "%s/resumed > %s/b.log 2>&1",
                      g_train, g_dir, g_dir, g_dir),
              0);
    char a[512], b[512];
    snprintf(a, sizeof(a), "%s/full.0", g_dir);
    snprintf(b, sizeof(b), "%s/resumed.0", g_dir);
    ASSERT(test_same_file(a, b));
    snprintf(b, sizeof(b), "%s/b.log", g_dir);
    ASSERT(test_file_has(b, "resumed from"));
    ASSERT(test_file_has(b, "train.00000000000000000025.ckpt: epoch 1, step 25"));
}

static void test_corrupt_newest_falls_back(void)
{
    ASSERT_EQ(test_sh("%s " COMMON
                      " --max-steps 25 --checkpoint-dir %s/ck2 --checkpoint-every 10 > "
                      "%s/c.log 2>&1",
                      g_train, g_dir, g_dir),
              0);
    /* flip one byte in the parameters of the newest checkpoint */
    char p[512];
    snprintf(p, sizeof(p), "%s/ck2/train.00000000000000000025.ckpt", g_dir);
    FILE *f = fopen(p, "r+b");
    ASSERT(f != NULL);
    if (!f) return;
    fseek(f, 1000, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 1000, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    ASSERT_EQ(test_sh("%s " COMMON " --max-steps 45 --checkpoint-dir %s/ck2 --resume --dump-params "
                      "%s/fallback > %s/d.log 2>&1",
                      g_train, g_dir, g_dir, g_dir),
              0);
    char log[512], a[512], b[512];
    snprintf(log, sizeof(log), "%s/d.log", g_dir);
    ASSERT(test_file_has(log, "skipped damaged checkpoint"));
    ASSERT(test_file_has(log, "train.00000000000000000025.ckpt: payload checksum mismatch"));
    char prev[600];
    snprintf(prev, sizeof(prev), "using previous %s/ck2/train.00000000000000000020.ckpt", g_dir);
    ASSERT(test_file_has(log, prev));
    snprintf(a, sizeof(a), "%s/full.0", g_dir);
    snprintf(b, sizeof(b), "%s/fallback.0", g_dir);
    ASSERT(test_same_file(a, b));
}

static void test_resume_adamw_accum(void)
{
#define ADAM                                                                                       \
    "--model mlp --optim adamw --accum 3 --batch 1000 --epochs 1 --seed 5 --lr-schedule step "     \
    "--warmup-epochs 0.2 --log-every 1000"
    ASSERT_EQ(test_sh("%s " ADAM " --max-steps 14 --dump-params %s/afull > /dev/null 2>&1", g_train,
                      g_dir),
              0);
    ASSERT_EQ(test_sh("%s " ADAM " --max-steps 7 --checkpoint-dir %s/ck3 > /dev/null 2>&1", g_train,
                      g_dir),
              0);
    ASSERT_EQ(test_sh("%s " ADAM " --max-steps 14 --checkpoint-dir %s/ck3 --resume --dump-params "
                      "%s/aresumed > %s/e.log 2>&1",
                      g_train, g_dir, g_dir, g_dir),
              0);
    char a[512], b[512];
    snprintf(a, sizeof(a), "%s/afull.0", g_dir);
    snprintf(b, sizeof(b), "%s/aresumed.0", g_dir);
    ASSERT(test_same_file(a, b));
    snprintf(b, sizeof(b), "%s/e.log", g_dir);
    ASSERT(test_file_has(b, "train.00000000000000000007.ckpt: epoch 1, step 7"));
}

static void test_old_format_refused(void)
{
    char log[512];
    snprintf(log, sizeof(log), "%s/old.log", g_dir);
    ASSERT_EQ(
        test_sh("mkdir -p %s/ckold && printf CHNNCKPT > %s/ckold/ckpt-00000010.chk", g_dir, g_dir),
        0);
    ASSERT_EQ(test_sh("%s " COMMON " --max-steps 5 --checkpoint-dir %s/ckold --resume > %s 2>&1",
                      g_train, g_dir, log),
              1);
    ASSERT(test_file_has(log, "cannot resume: "));
    ASSERT(test_file_has(log, "ckold/ckpt-00000010.chk is a checkpoint of the old format"));
    ASSERT(test_file_has(log, "re-create it by training from scratch"));
}

static void test_missing_data(void)
{
    char log[512];
    snprintf(log, sizeof(log), "%s/nodata.log", g_dir);
    ASSERT_EQ(test_sh("%s --data %s/nowhere --max-steps 1 > %s 2>&1", g_train, g_dir, log), 1);
    ASSERT(test_file_has(log, "nowhere/train-images-idx3-ubyte.gz does not exist"));
    ASSERT(test_file_has(log, "sudo apt-get install dataset-fashion-mnist"));
}

int main(void)
{
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(g_train, sizeof(g_train), "%s/bin/chorus-train", build);
    snprintf(g_dir, sizeof(g_dir), "%s/train_resume.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_resume_bitwise);
    TEST_RUN(test_corrupt_newest_falls_back);
    TEST_RUN(test_resume_adamw_accum);
    TEST_RUN(test_old_format_refused);
    TEST_RUN(test_missing_data);
    test_sh("rm -rf '%s'", g_dir);
    return 0;
}
