/*
 * train_split.c - the model splits of libchorus_nn with real ranks (chorus-run -np 2):
 *   - a tensor-parallel block (a plain linear, a column-parallel linear, ReLU, a
 *     row-parallel linear) gives the output and gradients of the same unsplit layers.
 *     Tolerance: the row layer sums its inputs as T partial sums added by the allreduce,
 *     where the unsplit layer folds them in one pass, so the output (and every gradient
 *     downstream of it, through the column layer's summed input gradient) differs by float
 *     rounding: at most 1e-5 relative to the largest value here (sums of 48 terms of
 *     magnitude ~1, unit roundoff 6e-8); the slices of the row layer's weight gradient
 *     and its bias gradient are computed the same way as the unsplit ones from the same
 *     dy, and are compared for equality to that tolerance as well;
 *   - activation recomputation gives bitwise the gradients of a model that stores its
 *     activations, with fewer activation bytes (counted by the memory accounting);
 *   - ZeRO stage 1 and 2 steps give bitwise the parameters of an allreduce and a plain
 *     optimizer step (SGD with momentum, then AdamW), with the all-gather inline and on its
 *     thread behind the next forward pass.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/nn.h"
#include "harness.h"

#define B    5
#define FIN  24
#define H0   16
#define H1   48
#define FOUT 8

static chorus_comm *g_world;

static void fill(float *x, size_t n, uint64_t seed)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * nn_rng_uniform(&r) - 1.0f;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* |a - b| <= tol * max|b| over n values */
static void assert_close(const char *what, const float *a, const float *b, size_t n, double tol)
{
    double scale = max_abs(b, n), worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > worst) worst = d;
    }
    fprintf(stderr, "  %s: largest difference %.3g (scale %.3g)\n", what, worst, scale);
    ASSERT(worst <= tol * scale);
}

static void test_tensor_parallel_block(void)
{
    int T = chorus_size(g_world), t = chorus_rank(g_world);
    nn_model *full = nn_model_create(FIN, 1, 1), *split = nn_model_create(FIN, 1, 1);
    ASSERT(full && split);
    ASSERT_NN_OK(nn_add_linear(full, H0));
    ASSERT_NN_OK(nn_add_linear(full, H1));
    ASSERT_NN_OK(nn_add_relu(full));
    ASSERT_NN_OK(nn_add_linear(full, FOUT));
    ASSERT_NN_OK(nn_add_linear(split, H0));
    ASSERT_NN_OK(nn_add_linear_column(split, H1, g_world));
    ASSERT_NN_OK(nn_add_relu(split));
    ASSERT_NN_OK(nn_add_linear_row(split, FOUT, g_world));
    ASSERT_EQ(nn_add_linear_column(split, 7, g_world) == CHORUS_ERR_INVALID_ARG, T > 1);
    ASSERT_NN_OK(nn_model_finalize(full, B));
    ASSERT_NN_OK(nn_model_finalize(split, B));
    nn_model_init_params(full, 11);
    nn_model_init_params(split, 11);
    /* the split layers start as slices of the unsplit ones */
    nn_layer *fc = &full->layers[1], *sc = &split->layers[1];
    nn_layer *fr = &full->layers[3], *sr = &split->layers[3];
    int hs = H1 / T;
    ASSERT(!memcmp(sc->w, fc->w + (size_t)t * hs * H0, (size_t)hs * H0 * sizeof(float)));
    for (int o = 0; o < FOUT; o++)
        ASSERT(!memcmp(sr->w + (size_t)o * hs, fr->w + (size_t)o * H1 + t * hs,
                       (size_t)hs * sizeof(float)));

    float x[B * FIN], dout[B * FOUT];
    fill(x, B * FIN, 5);
    fill(dout, B * FOUT, 6);
    const float *yf = nn_forward(full, x, B);
    const float *ys = nn_forward(split, x, B);
    ASSERT_NN_OK(nn_model_comm_status(split));
    assert_close("output", ys, yf, B * FOUT, 1e-5);
    nn_zero_grad(full);
    nn_zero_grad(split);
    nn_backward(full, dout, B);
    nn_backward(split, dout, B);
    ASSERT_NN_OK(nn_model_comm_status(split));
    /* the first layer is whole on every rank: its gradient needs the summed input gradient
     * of the column layer (the backward allreduce) */
    assert_close("plain layer dW", split->layers[0].dw, full->layers[0].dw,
                 split->layers[0].nparams, 1e-5);
    assert_close("column dW slice", sc->dw, fc->dw + (size_t)t * hs * H0, (size_t)hs * H0, 1e-5);
    assert_close("column db slice", sc->db, fc->db + t * hs, (size_t)hs, 1e-5);
    float rslice[FOUT * H1];
    for (int o = 0; o < FOUT; o++)
        memcpy(rslice + (size_t)o * hs, fr->dw + (size_t)o * H1 + t * hs,
               (size_t)hs * sizeof(float));
    assert_close("row dW slice", sr->dw, rslice, (size_t)FOUT * hs, 1e-5);
    assert_close("row db", sr->db, fr->db, FOUT, 1e-5);
    nn_model_destroy(full);
    nn_model_destroy(split);
}

/* 784 -> 64 x6 (ReLU) -> 10 with and without recomputation. */
static nn_model *deep(int recompute, nn_mem *mem)
{
    nn_model *m = nn_model_create(32, 1, 1);
    ASSERT(m);
    for (int i = 0; i < 6; i++) {
        ASSERT_NN_OK(nn_add_linear(m, 64));
        ASSERT_NN_OK(nn_add_relu(m));
    }
    ASSERT_NN_OK(nn_add_dropout(m, 0.2f));
    ASSERT_NN_OK(nn_add_linear(m, 10));
    if (recompute) nn_model_set_recompute(m, 0);
    m->mem = mem;
    ASSERT_NN_OK(nn_model_finalize(m, 16));
    nn_model_init_params(m, 3);
    return m;
}

static void test_recompute_same_gradients(void)
{
    nn_mem ma = {0}, mb = {0};
    nn_model *a = deep(0, &ma), *b = deep(1, &mb);
    float x[16 * 32], dout[16 * 10];
    fill(x, sizeof(x) / sizeof(x[0]), 8);
    fill(dout, sizeof(dout) / sizeof(dout[0]), 9);
    for (int step = 0; step < 2; step++) { /* the second pass accumulates */
        a->step = b->step = (uint64_t)step;
        nn_forward(a, x, 16);
        nn_forward(b, x, 16);
        nn_backward(a, dout, 16);
        nn_backward(b, dout, 16);
        ASSERT(!memcmp(a->grads, b->grads, a->nparams * sizeof(float)));
    }
    fprintf(stderr, "  activations: %zu bytes stored, %zu with recomputation\n",
            ma.bytes[NN_MEM_ACTIVATIONS], mb.bytes[NN_MEM_ACTIVATIONS]);
    ASSERT(mb.bytes[NN_MEM_ACTIVATIONS] < ma.bytes[NN_MEM_ACTIVATIONS]);
    ASSERT(mb.bytes[NN_MEM_PARAMS] == ma.bytes[NN_MEM_PARAMS]);
    nn_model_destroy(a);
    nn_model_destroy(b);
}

/* One step of each ZeRO stage against allreduce + nn_optim_step, from the same gradients. */
static void zero_case(int stage, int adam, int overlap)
{
    int p = chorus_size(g_world), r = chorus_rank(g_world);
    nn_model *ref = nn_model_create(FIN, 1, 1), *z = nn_model_create(FIN, 1, 1);
    ASSERT(ref && z);
    ASSERT_NN_OK(nn_add_linear(ref, 301));
    ASSERT_NN_OK(nn_add_relu(ref));
    ASSERT_NN_OK(nn_add_linear(ref, 7));
    ASSERT_NN_OK(nn_add_linear(z, 301));
    ASSERT_NN_OK(nn_add_relu(z));
    ASSERT_NN_OK(nn_add_linear(z, 7));
    z->no_grads = stage == 2;
    ASSERT_NN_OK(nn_model_finalize(ref, B));
    ASSERT_NN_OK(nn_model_finalize(z, B));
    nn_model_init_params(ref, 21);
    nn_model_init_params(z, 21);
    nn_optim oref, oz;
    size_t shard = nn_zero_shard_count(z, r, p);
    ASSERT(shard < z->nparams / (size_t)p + 3 * (size_t)p);
    if (adam) {
        ASSERT_NN_OK(nn_optim_init_adamw(&oref, ref->nparams, 0.9f, 0.999f, 1e-8f, 0.01f));
        ASSERT_NN_OK(nn_optim_init_adamw(&oz, shard, 0.9f, 0.999f, 1e-8f, 0.01f));
    } else {
        ASSERT_NN_OK(nn_optim_init_sgd(&oref, ref->nparams, 0.9f, 1, 5e-4f));
        ASSERT_NN_OK(nn_optim_init_sgd(&oz, shard, 0.9f, 1, 5e-4f));
    }
    nn_zero zs;
    ASSERT_NN_OK(nn_zero_init(&zs, z, g_world, stage, NULL));
    if (overlap) ASSERT_NN_OK(nn_zero_overlap(&zs, z));
    float x[B * FIN], dout[B * 7];
    for (int step = 0; step < 3; step++) {
        fill(x, B * FIN, 100 + (uint64_t)(r * 10 + step)); /* each rank its own data */
        fill(dout, B * 7, 200 + (uint64_t)(r * 10 + step));
        nn_zero_grad(ref);
        nn_forward(ref, x, B);
        nn_backward(ref, dout, B);
        ASSERT_OK(chorus_allreduce(g_world, ref->grads, ref->grads, ref->nparams, CHORUS_FLOAT32,
                                   CHORUS_SUM));
        nn_optim_step(&oref, ref->params, ref->grads, 0.05f);
        nn_zero_grad(z);
        nn_forward(z, x, B);
        nn_zero_begin_backward(&zs, z);
        nn_backward(z, dout, B);
        ASSERT_NN_OK(nn_zero_step(&zs, z, &oz, 0.05f));
        if (step == 1) continue; /* the next forward waits for the all-gather itself */
        ASSERT_NN_OK(nn_zero_wait(&zs, z));
        ASSERT(!memcmp(ref->params, z->params, ref->nparams * sizeof(float)));
    }
    nn_zero_free(&zs);
    nn_optim_free(&oref);
    nn_optim_free(&oz);
    nn_model_destroy(ref);
    nn_model_destroy(z);
}

static void test_zero_equals_data_parallel(void)
{
    for (int stage = 1; stage <= 2; stage++)
        for (int adam = 0; adam <= 1; adam++)
            for (int overlap = 0; overlap <= 1; overlap++) zero_case(stage, adam, overlap);
}

int main(void)
{
    ASSERT_OK(chorus_init(&g_world));
    test_rank = chorus_rank(g_world);
    TEST_RUN(test_tensor_parallel_block);
    TEST_RUN(test_recompute_same_gradients);
    TEST_RUN(test_zero_equals_data_parallel);
    printf("train_split: ok\n");
    chorus_finalize(g_world);
    return 0;
}
