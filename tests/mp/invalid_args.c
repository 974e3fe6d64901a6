/* invalid_args.c - invalid arguments give CHORUS_ERR_INVALID_ARG with a message, touch no
 * buffer, and leave the communicator working (the other ranks never notice). */
#include "harness.h"

static chorus_comm *c;

static void expect_invalid(chorus_result r, const char *what, const char *needle)
{
    if (r != CHORUS_ERR_INVALID_ARG)
        test_fail(__FILE__, __LINE__, "%s: expected CHORUS_ERR_INVALID_ARG, got %s", what,
                  chorus_strerror(r));
    if (test_rank == 0) printf("%-40s -> %s\n", what, chorus_last_error(c));
    ASSERT_STR_CONTAINS(chorus_last_error(c), needle);
}

int main(void)
{
    ASSERT_OK(chorus_init(&c));
    test_rank = chorus_rank(c);
    int n = chorus_size(c);
    float buf[8], out[64];
    for (int i = 0; i < 8; i++) buf[i] = (float)i;
    memset(out, 0x33, sizeof(out));
    unsigned char before[sizeof(out)];
    memcpy(before, out, sizeof(out));

    expect_invalid(chorus_allreduce(c, NULL, out, 4, CHORUS_FLOAT32, CHORUS_SUM),
                   "allreduce NULL send", "NULL buffer");
    expect_invalid(chorus_allreduce(c, buf, NULL, 4, CHORUS_FLOAT32, CHORUS_SUM),
                   "allreduce NULL recv", "NULL buffer");
    expect_invalid(chorus_allreduce(c, buf, out, 4, (chorus_dtype)42, CHORUS_SUM),
                   "allreduce dtype 42", "unknown dtype 42");
    expect_invalid(chorus_allreduce(c, buf, out, 4, CHORUS_FLOAT32, (chorus_op)-1),
                   "allreduce op -1", "unknown op -1");
    expect_invalid(chorus_allreduce(c, buf, out, 4, CHORUS_FLOAT32, CHORUS_BAND),
                   "allreduce band on float32", "op band needs an integer dtype, not float32");
    expect_invalid(chorus_reduce_scatter(c, buf, out, 1, CHORUS_BFLOAT16, CHORUS_BXOR),
                   "reduce_scatter bxor on bfloat16",
                   "op bxor needs an integer dtype, not bfloat16");
    expect_invalid(chorus_allreduce(c, buf, out, SIZE_MAX / 2, CHORUS_FLOAT64, CHORUS_SUM),
                   "allreduce count overflow", "overflows");
    expect_invalid(chorus_broadcast(c, out, 4, CHORUS_FLOAT32, n), "broadcast root = size", "root");
    expect_invalid(chorus_broadcast(c, out, 4, CHORUS_FLOAT32, -1), "broadcast root -1",
                   "out of range");
    expect_invalid(chorus_allgather(c, buf, out, SIZE_MAX / 3, CHORUS_INT8),
                   "allgather size*count overflow", "overflows");
    expect_invalid(chorus_reduce_scatter(c, buf, out, 1, CHORUS_FLOAT32, (chorus_op)9),
                   "reduce_scatter op 9", "unknown op");
    expect_invalid(chorus_alltoall(c, NULL, out, 1, CHORUS_FLOAT32), "alltoall NULL send",
                   "NULL buffer");
    expect_invalid(chorus_send(c, buf, 1, CHORUS_FLOAT32, n, 0), "send to rank = size",
                   "not another rank");
    expect_invalid(chorus_send(c, buf, 1, CHORUS_FLOAT32, chorus_rank(c), 0), "send to self",
                   "not another rank");
    expect_invalid(chorus_recv(c, out, 1, CHORUS_FLOAT32, (chorus_rank(c) + 1) % n, -3),
                   "recv with tag -3", "tag -3");
    ASSERT(memcmp(out, before, sizeof(out)) == 0); /* nothing was touched */
    ASSERT_EQ(chorus_allreduce(NULL, buf, out, 1, CHORUS_FLOAT32, CHORUS_SUM),
              CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "comm is NULL");
    ASSERT_EQ(chorus_init(NULL), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_strerror(CHORUS_ERR_TIMEOUT), "CHORUS_TIMEOUT_S");
    ASSERT_STR_CONTAINS(chorus_strerror((chorus_result)1000), "unknown");
    /* NULL buffers are fine when the count is 0 */
    ASSERT_OK(chorus_allreduce(c, NULL, NULL, 0, CHORUS_FLOAT32, CHORUS_SUM));
    /* and the communicator still works */
    ASSERT_OK(chorus_allreduce(c, buf, out, 8, CHORUS_FLOAT32, CHORUS_SUM));
    for (int i = 0; i < 8; i++) ASSERT(out[i] == (float)(i * n));
    chorus_finalize(c);
    return 0;
}
