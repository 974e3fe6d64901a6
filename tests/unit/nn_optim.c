/*
 * nn_optim.c - SGD (plain, momentum, Nesterov, weight decay) and AdamW steps against values
 * worked out by hand from the PyTorch update rules (the arithmetic is in the comments).
 */
#include "chorus/nn.h"
#include "harness.h"

static void test_sgd_plain(void)
{
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_sgd(&o, 2, 0.0f, 0, 0.0f));
    float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, 0.25f};
    nn_optim_step(&o, p, g, 0.1f);
    ASSERT_NEAR(p[0], 0.95, 1e-7);   /* 1 - 0.1*0.5 */
    ASSERT_NEAR(p[1], -2.025, 1e-7); /* -2 - 0.1*0.25 */
    ASSERT_NN_OK(nn_optim_state_count(&o));
    nn_optim_free(&o);
}

static void test_sgd_momentum_wd(void)
{
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_sgd(&o, 1, 0.9f, 0, 0.1f));
    float p = 1.0f, g = 0.5f;
    /* g' = 0.5 + 0.1*1 = 0.6; buf = 0.6; p = 1 - 0.1*0.6 = 0.94 */
    nn_optim_step(&o, &p, &g, 0.1f);
    ASSERT_NEAR(p, 0.94, 1e-6);
    ASSERT_NEAR(o.m[0], 0.6, 1e-6);
    /* g' = 0.5 + 0.094 = 0.594; buf = 0.54 + 0.594 = 1.134; p = 0.94 - 0.1134 = 0.8266 */
    nn_optim_step(&o, &p, &g, 0.1f);
    ASSERT_NEAR(p, 0.8266, 1e-6);
    ASSERT_NEAR(o.m[0], 1.134, 1e-6);
    nn_optim_free(&o);
}

static void test_sgd_nesterov(void)
{
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_sgd(&o, 1, 0.9f, 1, 0.1f));
    float p = 1.0f, g = 0.5f;
    /* g' = 0.6; buf = 0.6; p = 1 - 0.1*(0.6 + 0.9*0.6) = 0.886 */
    nn_optim_step(&o, &p, &g, 0.1f);
    ASSERT_NEAR(p, 0.886, 1e-6);
    /* g' = 0.5 + 0.0886 = 0.5886; buf = 0.54 + 0.5886 = 1.1286;
     * p = 0.886 - 0.1*(0.5886 + 0.9*1.1286) = 0.886 - 0.160434 = 0.725566 */
    nn_optim_step(&o, &p, &g, 0.1f);
    ASSERT_NEAR(p, 0.725566, 1e-6);
    nn_optim_free(&o);
}

static void test_adamw(void)
{
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_adamw(&o, 1, 0.9f, 0.999f, 1e-8f, 0.01f));
    ASSERT_EQ(nn_optim_state_count(&o), 2);
    float p = 1.0f, g = 0.5f;
    /* p = 1*(1 - 0.1*0.01) = 0.999; m = 0.05, v = 0.00025; mhat = 0.5, vhat = 0.25;
     * p -= 0.1 * 0.5 / 0.5 -> 0.899 */
    nn_optim_step(&o, &p, &g, 0.1f);
    ASSERT_NEAR(p, 0.899, 1e-6);
    ASSERT_NEAR(o.m[0], 0.05, 1e-7);
    ASSERT_NEAR(o.v[0], 0.00025, 1e-8); /* float(1 - 0.999) is 0.00099999 */
    g = -0.25f;
    /* p = 0.899*0.999 = 0.898101; m = 0.045 - 0.025 = 0.02; v = 0.00024975 + 0.0000625
     * = 0.00031225; mhat = 0.02/0.19 = 0.1052632; vhat = 0.00031225/0.001999 = 0.1562031;
     * p -= 0.1 * 0.1052632 / 0.3952254 = 0.0266337 -> 0.8714673 */
    nn_optim_step(&o, &p, &g, 0.1f);
    ASSERT_NEAR(p, 0.8714673, 2e-6);
    ASSERT_NEAR(o.m[0], 0.02, 1e-7);
    ASSERT_NEAR(o.v[0], 0.00031225, 1e-8);
    ASSERT_EQ(o.t, 2);
    nn_optim_free(&o);
}

/* A long buffer takes the same path as one element: every entry moves identically. */
static void test_vector_consistency(void)
{
    enum { N = 1037 };
    static float p[N], g[N];
    for (int i = 0; i < N; i++) {
        p[i] = 1.0f;
        g[i] = 0.5f;
    }
    nn_optim o;
    ASSERT_NN_OK(nn_optim_init_adamw(&o, N, 0.9f, 0.999f, 1e-8f, 0.01f));
    nn_optim_step(&o, p, g, 0.1f);
    int same = 1;
    for (int i = 0; i < N; i++) same &= p[i] == p[0];
    ASSERT(same);
    ASSERT_NEAR(p[N - 1], 0.899, 1e-6);
    nn_optim_free(&o);
}

int main(void)
{
    TEST_RUN(test_sgd_plain);
    TEST_RUN(test_sgd_momentum_wd);
    TEST_RUN(test_sgd_nesterov);
    TEST_RUN(test_adamw);
    TEST_RUN(test_vector_consistency);
    return 0;
}
