/*
 * train_pipe.c - nn_pipe on real ranks (run under chorus-run; the world is the pipeline):
 * a model with every layer kind that has a backward (conv2d, relu, maxpool2d, flatten,
 * linear, gelu, layernorm) cut into as many stages as there are ranks trains 3 SGD steps of
 * m micro-batches under GPipe and 1F1B, and its gathered parameters equal, to the bit, those
 * of the unsplit model accumulating the same micro-batches on every rank; forward-only
 * evaluation through the pipeline gives the unsplit model's loss and hits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/nn.h"
#include "harness.h"

enum { N = 40, MICRO = 5, STEPS = 3, CLASSES = 10 };

static nn_model *build(void)
{
    nn_model *m = nn_model_create(2, 8, 8);
    ASSERT(m);
    ASSERT_NN_OK(nn_add_conv2d(m, 4, 3, 1, 1));
    ASSERT_NN_OK(nn_add_relu(m));
    ASSERT_NN_OK(nn_add_maxpool2d(m, 2, 2));
    ASSERT_NN_OK(nn_add_flatten(m));
    ASSERT_NN_OK(nn_add_linear(m, 24));
    ASSERT_NN_OK(nn_add_gelu(m));
    ASSERT_NN_OK(nn_add_layernorm(m));
    ASSERT_NN_OK(nn_add_linear(m, CLASSES));
    ASSERT_NN_OK(nn_model_finalize(m, N));
    nn_model_init_params(m, 11);
    return m;
}

/* The unsplit model: each step accumulates the micro-batches' gradients, then SGD. */
static void reference(nn_model *m, const float *x, const int32_t *y, float lr)
{
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_sgd(&o, m->nparams, 0.9f, 1, 5e-4f));
    float dl[N * CLASSES];
    size_t F = nn_model_in_features(m);
    for (int s = 0; s < STEPS; s++) {
        nn_zero_grad(m);
        for (int j = 0, off = 0; j < MICRO; j++) {
            int nb = N / MICRO + (j < N % MICRO);
            const float *z = nn_forward(m, x + (size_t)off * F, nb);
            nn_xent(z, y + off, nb, CLASSES, 1.0f / N, dl, NULL);
            nn_backward(m, dl, nb);
            off += nb;
        }
        nn_optim_step(&o, m->params, m->grads, lr);
    }
    nn_optim_free(&o);
}

static void run(chorus_comm *world, chorus_pipe_kind kind, const float *x, const int32_t *y)
{
    float lr = 0.05f;
    nn_model *ref = build(), *full = build();
    reference(ref, x, y, lr);
    nn_pipe *p;
    int P = chorus_size(world);
    ASSERT_NN_OK(nn_pipe_create(full, world, P, MICRO, kind, N / MICRO + 1, &p));
    nn_model *sm = nn_pipe_model(p);
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_sgd(&o, sm->nparams, 0.9f, 1, 5e-4f));
    for (int s = 0; s < STEPS; s++) {
        double stats[2] = {0, 0};
        ASSERT_NN_OK(nn_pipe_step(p, x, y, N, 1.0f / N, (uint64_t)s, stats));
        ASSERT_NN_OK(nn_pipe_sync_grads(p));
        nn_optim_step(&o, sm->params, sm->grads, lr);
    }
    ASSERT_NN_OK(nn_pipe_gather(p, sm->params, full->params));
    for (size_t i = 0; i < ref->nparams; i++)
        if (memcmp(&ref->params[i], &full->params[i], sizeof(float)))
            test_fail(__FILE__, __LINE__, "%s, %d stages: parameter %zu is %.9g, unsplit %.9g",
                      chorus_pipe_kind_name(kind), P, i, (double)full->params[i],
                      (double)ref->params[i]);
    /* evaluation: the pipeline's loss and hits are the unsplit model's */
    double stats[2] = {0, 0};
    ASSERT_NN_OK(nn_pipe_evaluate(p, x, y, N, stats));
    ASSERT_OK(chorus_allreduce(world, stats, stats, 2, CHORUS_FLOAT64, CHORUS_SUM));
    int hits = 0;
    ref->training = 0;
    double loss = nn_xent(nn_forward(ref, x, N), y, N, CLASSES, 0.0f, NULL, &hits);
    ASSERT_NEAR(stats[0], loss, 1e-4 * (1 + loss));
    ASSERT_EQ((int)stats[1], hits);
    nn_pipe_stats st;
    nn_pipe_get_stats(p, &st);
    ASSERT_EQ(st.steps, STEPS);
    int want = kind == CHORUS_PIPE_GPIPE ? MICRO : P - st.stage;
    ASSERT_EQ(st.peak_inflight, want);
    ASSERT(st.activations_bytes > 0 && st.params_bytes >= sm->nparams * sizeof(float));
    if (chorus_rank(world) == 0)
        printf("%s, %d stages x %d micro-batches: parameters identical to the unsplit model; "
               "stage 0 runs layers %d-%d, %d in flight\n",
               chorus_pipe_kind_name(kind), P, MICRO, st.layer_lo, st.layer_hi - 1,
               st.peak_inflight);
    nn_optim_free(&o);
    nn_pipe_destroy(p);
    nn_model_destroy(full);
    nn_model_destroy(ref);
}

int main(void)
{
    chorus_comm *world;
    ASSERT_OK(chorus_init(&world));
    static float x[N * 2 * 8 * 8];
    static int32_t y[N];
    uint64_t seed = 3;
    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
        x[i] = (float)(test_rand(&seed) % 2001) / 1000.0f - 1.0f;
    for (int i = 0; i < N; i++) y[i] = (int32_t)(test_rand(&seed) % CLASSES);
    run(world, CHORUS_PIPE_GPIPE, x, y);
    run(world, CHORUS_PIPE_1F1B, x, y);
    /* a world that the stages do not divide, and more stages than layers */
    nn_model *m = build();
    nn_pipe *p = (nn_pipe *)1;
    if (chorus_size(world) > 1) {
        ASSERT_EQ(nn_pipe_create(m, world, chorus_size(world) + 1, 2, CHORUS_PIPE_1F1B, 4, &p),
                  CHORUS_ERR_INVALID_ARG);
        ASSERT_STR_CONTAINS(nn_last_error(), "do not divide");
        ASSERT(p == NULL);
    }
    ASSERT_EQ(nn_pipe_create(m, world, 9, 2, CHORUS_PIPE_1F1B, 4, &p), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "the model has 8 layers: it cannot be cut into 9 pipeline "
                                         "stages");
    nn_model_destroy(m);
    if (chorus_rank(world) == 0) printf("train_pipe: ok\n");
    chorus_finalize(world);
    return 0;
}
