/*
 * nn_ckpt.c - checkpoints: a saved state loads back exactly; only the newest two are kept;
 * a corrupt (bit flip), truncated or foreign newest checkpoint is refused with a message
 * naming it and the previous one is used; when all are bad, loading fails and the model is
 * left untouched.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus/nn.h"
#include "../../nn/nn_test.h"

static char g_dir[256];

static nn_model *make_model(int hidden)
{
    nn_model *m = nn_model_create(1, 4, 4);
    nn_add_conv2d(m, 2, 3, 1, 1);
    nn_add_relu(m);
    nn_add_linear(m, hidden);
    nn_add_layernorm(m);
    nn_add_linear(m, 3);
    if (nn_model_finalize(m, 2)) abort();
    return m;
}

static void fill(float *p, size_t n, float base)
{
    for (size_t i = 0; i < n; i++) p[i] = base + (float)i * 0.001f;
}

static int count_files(void)
{
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void ckpt_file(char *out, size_t len, uint64_t step)
{
    snprintf(out, len, "%s/ckpt-%08llu.chk", g_dir, (unsigned long long)step);
}

/* Saves a state where everything is derived from `step`. */
static void save_at(nn_model *m, nn_optim *o, uint64_t step)
{
    fill(m->params, m->nparams, (float)step);
    fill(o->m, o->n, -(float)step);
    fill(o->v, o->n, 0.5f * (float)step);
    o->t = step;
    nn_train_state st = {step / 10, step % 10, step, 77, 1234 + step, nn_model_signature(m)};
    char err[512];
    NT_EQ_INT(nn_ckpt_save(g_dir, m, o, &st, err, sizeof(err)), 0);
}

static void test_roundtrip_and_keep_two(void)
{
    nn_model *m = make_model(5), *m2 = make_model(5);
    nn_optim o, o2;
    nn_optim_init_adamw(&o, m->nparams, 0.9f, 0.999f, 1e-8f, 0.0f);
    nn_optim_init_adamw(&o2, m->nparams, 0.9f, 0.999f, 1e-8f, 0.0f);
    save_at(m, &o, 10);
    save_at(m, &o, 20);
    save_at(m, &o, 35);
    NT_EQ_INT(count_files(), 2); /* 20 and 35; no temporary left behind */
    char used[512], note[1024], err[512];
    nn_train_state st;
    NT_EQ_INT(nn_ckpt_load_latest(g_dir, m2, &o2, &st, used, sizeof(used), note, sizeof(note), err,
                                  sizeof(err)),
              1);
    char want[512];
    ckpt_file(want, sizeof(want), 35);
    NT_CHECK(strcmp(used, want) == 0);
    NT_CHECK(note[0] == 0);
    NT_CHECK(memcmp(m->params, m2->params, m->nparams * sizeof(float)) == 0);
    NT_CHECK(memcmp(o.m, o2.m, o.n * sizeof(float)) == 0);
    NT_CHECK(memcmp(o.v, o2.v, o.n * sizeof(float)) == 0);
    NT_EQ_INT(o2.t, 35);
    NT_EQ_INT(st.epoch, 3);
    NT_EQ_INT(st.step_in_epoch, 5);
    NT_EQ_INT(st.global_step, 35);
    NT_EQ_INT(st.seed, 77);
    NT_EQ_INT(st.rng, 1269);
    nn_optim_free(&o);
    nn_optim_free(&o2);
    nn_model_destroy(m);
    nn_model_destroy(m2);
}

/* Damages the newest (35) and checks that 20 is used with a message naming 35. */
static void expect_fallback(const char *why)
{
    nn_model *m = make_model(5);
    nn_optim o;
    nn_optim_init_adamw(&o, m->nparams, 0.9f, 0.999f, 1e-8f, 0.0f);
    char used[512], note[1024], err[512], bad[512], prev[512];
    nn_train_state st;
    ckpt_file(bad, sizeof(bad), 35);
    ckpt_file(prev, sizeof(prev), 20);
    NT_EQ_INT(nn_ckpt_load_latest(g_dir, m, &o, &st, used, sizeof(used), note, sizeof(note), err,
                                  sizeof(err)),
              1);
    fprintf(stderr, "  %s\n", note);
    NT_CHECK(strcmp(used, prev) == 0);
    NT_CHECK(strstr(note, bad) != NULL);
    NT_CHECK(strstr(note, why) != NULL);
    NT_CHECK(strstr(note, "using previous") != NULL);
    NT_EQ_INT(st.global_step, 20);
    NT_NEAR(m->params[0], 20.0, 0);
    nn_optim_free(&o);
    nn_model_destroy(m);
}

static void rewrite_newest(void)
{
    nn_model *m = make_model(5);
    nn_optim o;
    nn_optim_init_adamw(&o, m->nparams, 0.9f, 0.999f, 1e-8f, 0.0f);
    save_at(m, &o, 20);
    save_at(m, &o, 35);
    nn_optim_free(&o);
    nn_model_destroy(m);
}

static void test_bit_flip(void)
{
    rewrite_newest();
    char p[512];
    ckpt_file(p, sizeof(p), 35);
    FILE *f = fopen(p, "r+b");
    fseek(f, 200, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 200, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
    expect_fallback("CRC mismatch");
    /* A flip in the header is caught by the CRC too, not mistaken for another model. */
    rewrite_newest();
    f = fopen(p, "r+b");
    fseek(f, 17, SEEK_SET);
    c = fgetc(f);
    fseek(f, 17, SEEK_SET);
    fputc(c ^ 4, f);
    fclose(f);
    expect_fallback("CRC mismatch");
}

static void test_truncated(void)
{
    rewrite_newest();
    char p[512];
    ckpt_file(p, sizeof(p), 35);
    NT_EQ_INT(truncate(p, 150), 0);
    expect_fallback("truncated");
    NT_EQ_INT(truncate(p, 40), 0);
    expect_fallback("truncated");
}

static void test_missing_marker(void)
{
    rewrite_newest();
    char p[512];
    ckpt_file(p, sizeof(p), 35);
    FILE *f = fopen(p, "r+b");
    fseek(f, -4, SEEK_END);
    fputs("XXXX", f);
    fclose(f);
    expect_fallback("end marker");
}

static void test_foreign_and_all_bad(void)
{
    rewrite_newest();
    /* A model with another shape refuses both. */
    nn_model *other = make_model(6);
    nn_optim o;
    nn_optim_init_adamw(&o, other->nparams, 0.9f, 0.999f, 1e-8f, 0.0f);
    fill(other->params, other->nparams, 3.0f);
    char used[512], note[1024], err[512];
    nn_train_state st = {0};
    NT_EQ_INT(nn_ckpt_load_latest(g_dir, other, &o, &st, used, sizeof(used), note, sizeof(note),
                                  err, sizeof(err)),
              -1);
    fprintf(stderr, "  %s\n", err);
    NT_CHECK(strstr(err, "different model") != NULL);
    NT_NEAR(other->params[0], 3.0, 0); /* untouched */
    NT_EQ_INT(st.global_step, 0);
    nn_optim_free(&o);
    /* An SGD run refuses an AdamW checkpoint. */
    nn_model *m = make_model(5);
    nn_optim_init_sgd(&o, m->nparams, 0.9f, 0, 0.0f);
    NT_EQ_INT(nn_ckpt_load_latest(g_dir, m, &o, &st, used, sizeof(used), note, sizeof(note), err,
                                  sizeof(err)),
              -1);
    NT_CHECK(strstr(err, "different optimizer") != NULL);
    nn_optim_free(&o);
    nn_model_destroy(m);
    nn_model_destroy(other);
}

static void test_empty_dir(void)
{
    char empty[300];
    snprintf(empty, sizeof(empty), "%s/none", g_dir);
    nn_model *m = make_model(5);
    nn_optim o;
    nn_optim_init_sgd(&o, m->nparams, 0.9f, 0, 0.0f);
    nn_train_state st;
    char used[512], note[1024], err[512];
    NT_EQ_INT(nn_ckpt_load_latest(empty, m, &o, &st, used, sizeof(used), note, sizeof(note), err,
                                  sizeof(err)),
              0);
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
    NT_RUN(test_roundtrip_and_keep_two);
    NT_RUN(test_bit_flip);
    NT_RUN(test_truncated);
    NT_RUN(test_missing_marker);
    NT_RUN(test_foreign_and_all_bad);
    NT_RUN(test_empty_dir);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    NT_DONE();
}
