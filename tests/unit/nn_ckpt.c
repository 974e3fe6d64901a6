/*
 * nn_ckpt.c - trainer checkpoints (payload inside the library's checkpoint container): a saved
 * state loads back exactly; only the newest two are kept; EVERY truncation and EVERY single-bit
 * flip of a small checkpoint file is refused with a message naming the file and the damage,
 * and the previous checkpoint is used (or, with no previous one, loading fails naming it); a
 * checkpoint of another model or optimizer, a payload of another version and the old
 * standalone format are refused with a clear message, leaving the model untouched; an empty or
 * missing directory is "nothing to resume".
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus/checkpoint.h"
#include "chorus/nn.h"
#include "harness.h"

static char g_dir[256];

static nn_model *make_model(int hidden)
{
    nn_model *m = nn_model_create(1, 4, 4);
    ASSERT(m);
    ASSERT_NN_OK(nn_add_conv2d(m, 2, 3, 1, 1));
    ASSERT_NN_OK(nn_add_relu(m));
    ASSERT_NN_OK(nn_add_linear(m, hidden));
    ASSERT_NN_OK(nn_add_layernorm(m));
    ASSERT_NN_OK(nn_add_linear(m, 3));
    ASSERT_NN_OK(nn_model_finalize(m, 2));
    return m;
}

/* A model small enough that every bit of its checkpoint file can be flipped. */
static nn_model *make_tiny(void)
{
    nn_model *m = nn_model_create(2, 1, 1);
    ASSERT(m);
    ASSERT_NN_OK(nn_add_linear(m, 2));
    ASSERT_NN_OK(nn_model_finalize(m, 1));
    return m;
}

static void fill(float *p, size_t n, float base)
{
    for (size_t i = 0; i < n; i++) p[i] = base + (float)i * 0.001f;
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    ASSERT(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void ckpt_file(char *out, size_t len, const char *dir, uint64_t step)
{
    ASSERT_OK(chorus_checkpoint_path(dir, NN_CKPT_NAME, step, out, len));
}

/* Saves into dir a state where everything is derived from `step`. */
static void save_at(const char *dir, nn_model *m, nn_optim *o, uint64_t step)
{
    fill(m->params, m->nparams, (float)step);
    if (o->m) fill(o->m, o->n, -(float)step);
    if (o->v) fill(o->v, o->n, 0.5f * (float)step);
    o->t = step;
    nn_train_state st = {step / 10, step % 10, step, 77, 1234 + step, nn_model_signature(m)};
    ASSERT_NN_OK(nn_ckpt_save(dir, m, o, &st));
}

static void test_roundtrip_and_keep_two(void)
{
    nn_model *m = make_model(5), *m2 = make_model(5);
    nn_optim o, o2;
    ASSERT_NN_OK(nn_optim_init_adamw(&o, m->nparams, 0.9f, 0.999f, 1e-8f, 0.0f));
    ASSERT_NN_OK(nn_optim_init_adamw(&o2, m->nparams, 0.9f, 0.999f, 1e-8f, 0.0f));
    save_at(g_dir, m, &o, 10);
    save_at(g_dir, m, &o, 20);
    save_at(g_dir, m, &o, 35);
    ASSERT_EQ(count_files(g_dir), 2); /* 20 and 35; no temporary left behind */
    nn_train_state st;
    nn_ckpt_info info;
    ASSERT_NN_OK(nn_ckpt_load_latest(g_dir, m2, &o2, &st, &info));
    char want[512];
    ckpt_file(want, sizeof(want), g_dir, 35);
    ASSERT_EQ(info.found, 1);
    ASSERT_EQ(info.step, 35);
    ASSERT_STR_CONTAINS(info.path, want);
    ASSERT_EQ(info.skipped[0], 0);
    ASSERT(memcmp(m->params, m2->params, m->nparams * sizeof(float)) == 0);
    ASSERT(memcmp(o.m, o2.m, o.n * sizeof(float)) == 0);
    ASSERT(memcmp(o.v, o2.v, o.n * sizeof(float)) == 0);
    ASSERT_EQ(o2.t, 35);
    ASSERT_EQ(st.epoch, 3);
    ASSERT_EQ(st.step_in_epoch, 5);
    ASSERT_EQ(st.global_step, 35);
    ASSERT_EQ(st.seed, 77);
    ASSERT_EQ(st.rng, 1269);
    /* the payload on its own: encode, decode */
    size_t len = nn_ckpt_payload_size(m, &o);
    ASSERT_EQ(len, 88 + 3 * m->nparams * sizeof(float));
    unsigned char *buf = malloc(len);
    ASSERT_NN_OK(nn_ckpt_encode(m, &o, &st, buf, len));
    ASSERT_EQ(nn_ckpt_encode(m, &o, &st, buf, len - 1), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "the payload needs");
    ASSERT_NN_OK(nn_ckpt_decode(buf, len, m2, &o2, &st));
    ASSERT_EQ(nn_ckpt_decode(buf, len - 4, m2, &o2, &st), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "truncated payload");
    buf[8] = 9; /* payload version */
    ASSERT_EQ(nn_ckpt_decode(buf, len, m2, &o2, &st), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "payload version 9, this build reads version 1");
    free(buf);
    nn_optim_free(&o);
    nn_optim_free(&o2);
    nn_model_destroy(m);
    nn_model_destroy(m2);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    char *b;
    long n = test_slurp(path, &b);
    ASSERT(n >= 0);
    *len = (size_t)n;
    return (unsigned char *)b;
}

static void put(const char *path, const unsigned char *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    ASSERT(f);
    ASSERT_EQ(fwrite(b, 1, len, f), len);
    ASSERT_EQ(fclose(f), 0);
}

/* Loading must refuse the newest (damaged) file by name and load step 1 instead. */
static void expect_fallback(const char *dir, const char *bad, const char *what)
{
    nn_model *m = make_tiny();
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_sgd(&o, m->nparams, 0.9f, 0, 0.0f));
    nn_train_state st = {0};
    nn_ckpt_info info;
    chorus_result r = nn_ckpt_load_latest(dir, m, &o, &st, &info);
    if (r != CHORUS_OK) test_fail(__FILE__, __LINE__, "%s: no fallback: %s", what, nn_last_error());
    if (info.step != 1 || st.global_step != 1)
        test_fail(__FILE__, __LINE__, "%s: loaded step %llu, expected 1", what,
                  (unsigned long long)info.step);
    ASSERT_NEAR(m->params[0], 1.0, 0);
    ASSERT_STR_CONTAINS(info.skipped, "skipped damaged checkpoint");
    ASSERT_STR_CONTAINS(info.skipped, bad);
    nn_optim_free(&o);
    nn_model_destroy(m);
}

/* Every truncation and every single-bit flip of the newest checkpoint falls back to the one
 * before; with no previous one, each is an error naming the file. */
static void test_every_truncation_and_bit_flip(void)
{
    char dir[300], bad[512];
    snprintf(dir, sizeof(dir), "%s/tiny", g_dir);
    nn_model *m = make_tiny();
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_sgd(&o, m->nparams, 0.9f, 0, 0.0f));
    save_at(dir, m, &o, 1);
    save_at(dir, m, &o, 2);
    ckpt_file(bad, sizeof(bad), dir, 2);
    size_t flen;
    unsigned char *good = slurp(bad, &flen);
    ASSERT_EQ(flen, 48 + 88 + 2 * m->nparams * sizeof(float)); /* container + payload */
    char what[96];
    for (size_t k = 0; k < flen; k++) {
        put(bad, good, k);
        snprintf(what, sizeof(what), "truncated to %zu bytes", k);
        expect_fallback(dir, bad, what);
    }
    int flips = 0;
    for (size_t k = 0; k < flen; k++)
        for (int bit = 0; bit < 8; bit++) {
            good[k] ^= (unsigned char)(1u << bit);
            put(bad, good, flen);
            snprintf(what, sizeof(what), "bit %d of byte %zu flipped", bit, k);
            expect_fallback(dir, bad, what);
            good[k] ^= (unsigned char)(1u << bit);
            flips++;
        }
    /* the reasons a user sees, one of each kind */
    nn_train_state st;
    nn_ckpt_info info;
    put(bad, good, 40);
    ASSERT_NN_OK(nn_ckpt_load_latest(dir, m, &o, &st, &info));
    fprintf(stderr, "  %s\n", info.skipped);
    ASSERT_STR_CONTAINS(info.skipped, "truncated: 40 bytes, shorter than the 48-byte header");
    put(bad, good, flen - 1);
    ASSERT_NN_OK(nn_ckpt_load_latest(dir, m, &o, &st, &info));
    fprintf(stderr, "  %s\n", info.skipped);
    ASSERT_STR_CONTAINS(info.skipped, "truncated (torn write?)");
    good[flen - 1] ^= 0x10;
    put(bad, good, flen);
    good[flen - 1] ^= 0x10;
    ASSERT_NN_OK(nn_ckpt_load_latest(dir, m, &o, &st, &info));
    fprintf(stderr, "  %s\n", info.skipped);
    ASSERT_STR_CONTAINS(info.skipped, "payload checksum mismatch");
    good[20] ^= 0x01;
    put(bad, good, flen);
    good[20] ^= 0x01;
    ASSERT_NN_OK(nn_ckpt_load_latest(dir, m, &o, &st, &info));
    fprintf(stderr, "  %s\n", info.skipped);
    ASSERT_STR_CONTAINS(info.skipped, "header checksum mismatch");
    /* no previous checkpoint: every damage is an error naming the file */
    char prev[512];
    ckpt_file(prev, sizeof(prev), dir, 1);
    ASSERT_EQ(unlink(prev), 0);
    fill(m->params, m->nparams, 5.0f);
    for (size_t k = 0; k < flen; k += 7) {
        good[k] ^= 0x04;
        put(bad, good, flen);
        good[k] ^= 0x04;
        ASSERT_EQ(nn_ckpt_load_latest(dir, m, &o, &st, &info), CHORUS_ERR_INVALID_ARG);
        ASSERT_STR_CONTAINS(nn_last_error(), "no valid checkpoint 'train'");
        ASSERT_STR_CONTAINS(nn_last_error(), bad);
        ASSERT_NEAR(m->params[0], 5.0, 0); /* untouched */
    }
    fprintf(stderr, "  %s\n", nn_last_error());
    put(bad, good, flen);
    ASSERT_NN_OK(nn_ckpt_load_latest(dir, m, &o, &st, &info));
    ASSERT_EQ(info.step, 2);
    fprintf(stderr, "  %zu truncations and %d bit flips of a %zu-byte checkpoint detected\n", flen,
            flips, flen);
    free(good);
    nn_optim_free(&o);
    nn_model_destroy(m);
}

static void test_foreign(void)
{
    nn_model *m = make_model(5);
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_adamw(&o, m->nparams, 0.9f, 0.999f, 1e-8f, 0.0f));
    save_at(g_dir, m, &o, 20);
    save_at(g_dir, m, &o, 35);
    nn_optim_free(&o);
    /* A model with another shape is refused. */
    nn_model *other = make_model(6);
    ASSERT_NN_OK(nn_optim_init_adamw(&o, other->nparams, 0.9f, 0.999f, 1e-8f, 0.0f));
    fill(other->params, other->nparams, 3.0f);
    nn_train_state st = {0};
    nn_ckpt_info info;
    ASSERT_EQ(nn_ckpt_load_latest(g_dir, other, &o, &st, &info), CHORUS_ERR_INVALID_ARG);
    fprintf(stderr, "  %s\n", nn_last_error());
    ASSERT_STR_CONTAINS(nn_last_error(), "different model");
    ASSERT_STR_CONTAINS(nn_last_error(), "train.00000000000000000035.ckpt");
    ASSERT_NEAR(other->params[0], 3.0, 0); /* untouched */
    ASSERT_EQ(st.global_step, 0);
    ASSERT_EQ(info.found, 0);
    nn_optim_free(&o);
    /* An SGD run refuses an AdamW checkpoint. */
    ASSERT_NN_OK(nn_optim_init_sgd(&o, m->nparams, 0.9f, 0, 0.0f));
    ASSERT_EQ(nn_ckpt_load_latest(g_dir, m, &o, &st, &info), CHORUS_ERR_INVALID_ARG);
    fprintf(stderr, "  %s\n", nn_last_error());
    ASSERT_STR_CONTAINS(nn_last_error(), "different optimizer");
    nn_optim_free(&o);
    nn_model_destroy(m);
    nn_model_destroy(other);
}

/* A valid container whose payload is not ours, and the old standalone format. */
static void test_not_ours_and_old_format(void)
{
    char dir[300];
    snprintf(dir, sizeof(dir), "%s/other", g_dir);
    ASSERT_OK(chorus_checkpoint_save(dir, NN_CKPT_NAME, 4, "something else", 14, 2));
    nn_model *m = make_tiny();
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_sgd(&o, m->nparams, 0.9f, 0, 0.0f));
    nn_train_state st;
    nn_ckpt_info info;
    ASSERT_EQ(nn_ckpt_load_latest(dir, m, &o, &st, &info), CHORUS_ERR_INVALID_ARG);
    fprintf(stderr, "  %s\n", nn_last_error());
    ASSERT_STR_CONTAINS(nn_last_error(), "not a chorus-train checkpoint payload");

    snprintf(dir, sizeof(dir), "%s/old", g_dir);
    ASSERT_EQ(test_sh("mkdir -p '%s' && printf 'CHNNCKPT' > '%s/ckpt-00000025.chk'", dir, dir), 0);
    ASSERT_EQ(nn_ckpt_load_latest(dir, m, &o, &st, &info), CHORUS_ERR_INVALID_ARG);
    fprintf(stderr, "  %s\n", nn_last_error());
    ASSERT_STR_CONTAINS(nn_last_error(), "ckpt-00000025.chk is a checkpoint of the old format");
    ASSERT_STR_CONTAINS(nn_last_error(), "re-create it");
    nn_optim_free(&o);
    nn_model_destroy(m);
}

static void test_empty_dir(void)
{
    char empty[300];
    snprintf(empty, sizeof(empty), "%s/none", g_dir);
    nn_model *m = make_model(5);
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_sgd(&o, m->nparams, 0.9f, 0, 0.0f));
    nn_train_state st;
    nn_ckpt_info info;
    ASSERT_NN_OK(nn_ckpt_load_latest(empty, m, &o, &st, &info)); /* does not exist */
    ASSERT_EQ(info.found, 0);
    ASSERT_EQ(test_sh("mkdir -p '%s'", empty), 0);
    ASSERT_NN_OK(nn_ckpt_load_latest(empty, m, &o, &st, &info)); /* exists, empty */
    ASSERT_EQ(info.found, 0);
    nn_optim_free(&o);
    nn_model_destroy(m);
}

int main(void)
{
    snprintf(g_dir, sizeof(g_dir), "%s/nn_ckpt.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_roundtrip_and_keep_two);
    TEST_RUN(test_every_truncation_and_bit_flip);
    TEST_RUN(test_foreign);
    TEST_RUN(test_not_ours_and_old_format);
    TEST_RUN(test_empty_dir);
    ASSERT_EQ(test_sh("rm -rf '%s'", g_dir), 0);
    return 0;
}
