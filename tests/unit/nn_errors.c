/*
 * nn_errors.c - the error convention of libchorus_nn: a call that fails returns a
 * chorus_result and nn_last_error() says why, in words a user can act on; the message is
 * per thread.
 */
#include <pthread.h>

#include "chorus/nn.h"
#include "harness.h"

static void test_model_building(void)
{
    nn_model *m = nn_model_create(1, 4, 4);
    ASSERT(m);
    ASSERT_EQ(nn_add_linear(m, 0), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "nn_add_linear: 0 output features");
    ASSERT_EQ(nn_add_conv2d(m, 2, 7, 1, 1), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "a 7x7 kernel (pad 1) does not fit the 4x4 input");
    ASSERT_EQ(nn_add_maxpool2d(m, 5, 1), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "a 5x5 window does not fit the 4x4 input");
    ASSERT_EQ(nn_add_dropout(m, 1.0f), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "probability 1 is not in [0, 1)");
    ASSERT_EQ(m->nlayers, 0); /* nothing half-added */
    ASSERT_EQ(nn_model_finalize(m, 2), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "the model has no layers");
    ASSERT_NN_OK(nn_add_linear(m, 3));
    ASSERT_EQ(nn_model_finalize(m, 0), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "max_batch must be positive");
    ASSERT_NN_OK(nn_model_finalize(m, 2));
    ASSERT_EQ(nn_model_finalize(m, 2), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "already finalized");
    ASSERT_EQ(nn_add_relu(m), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "nn_add_relu: the model is already finalized");
    nn_model_destroy(m);
}

static void test_sampler_and_idx(void)
{
    nn_sampler s;
    ASSERT_EQ(nn_sampler_init(&s, 100, 10, 2, 2, 1), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "rank 2 of 2");
    ASSERT_EQ(nn_sampler_init(&s, 0, 10, 0, 1, 1), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "0 samples");
    uint8_t *data;
    int shape[3];
    ASSERT_EQ(nn_idx_read("/nonexistent/x.idx", 1, &data, shape), CHORUS_ERR_SYSTEM);
    ASSERT_STR_CONTAINS(nn_last_error(), "/nonexistent/x.idx: cannot open");
    ASSERT_EQ(nn_idx_read("/dev/null", 4, &data, shape), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "bad dimension count");
}

static void *fail_in_thread(void *arg)
{
    (void)arg;
    nn_sampler s;
    if (nn_sampler_init(&s, 0, 1, 0, 1, 1) != CHORUS_ERR_INVALID_ARG) return (void *)1;
    return strstr(nn_last_error(), "nn_sampler_init") ? NULL : (void *)2;
}

static void test_per_thread(void)
{
    nn_model *m = nn_model_create(1, 1, 1);
    ASSERT_EQ(nn_add_linear(m, -1), CHORUS_ERR_INVALID_ARG);
    pthread_t th;
    void *res;
    ASSERT_EQ(pthread_create(&th, NULL, fail_in_thread, NULL), 0);
    ASSERT_EQ(pthread_join(th, &res), 0);
    ASSERT(res == NULL);
    /* the other thread's failure did not replace this thread's message */
    ASSERT_STR_CONTAINS(nn_last_error(), "nn_add_linear: -1 output features");
    nn_model_destroy(m);
}

int main(void)
{
    TEST_RUN(test_model_building);
    TEST_RUN(test_sampler_and_idx);
    TEST_RUN(test_per_thread);
    return 0;
}
