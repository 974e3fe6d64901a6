/*
 * coll_matrix.c - every collective x dtype x op x count against a serial reference, run with
 * real ranks: chorus-run -np N coll_matrix [--big].
 *
 * Inputs are small integers, so every summation order gives the exact same answer and the
 * result can be compared bit for bit with a reference each rank computes alone. A separate
 * check with random floats (where order matters) shows that all ranks get identical bits.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "harness.h"
#include "reduce/reduce.h"

static chorus_comm *comm;
static int rank_, size_;

static const chorus_dtype dtypes[] = {CHORUS_INT8,    CHORUS_UINT8,   CHORUS_INT32,
                                      CHORUS_INT64,   CHORUS_FLOAT16, CHORUS_BFLOAT16,
                                      CHORUS_FLOAT32, CHORUS_FLOAT64};
static const chorus_op ops[] = {CHORUS_SUM, CHORUS_PROD, CHORUS_MIN, CHORUS_MAX, CHORUS_AVG};
/* the bitwise ops, on the integer dtypes (the first four) */
static const chorus_op bit_ops[] = {CHORUS_BAND, CHORUS_BOR, CHORUS_BXOR};

/* The integer rank r contributes at index i for op. */
static long long value(int r, size_t i, chorus_op op, chorus_dtype t, uint64_t salt)
{
    uint64_t s = salt * 1000003u + i * 7919u + (uint64_t)r * 104729u;
    uint64_t x = test_rand(&s);
    int is_unsigned = t == CHORUS_UINT8;
    if (op == CHORUS_PROD) {
        long long v = (((i + (size_t)r) % 7) == 0) ? 2 : 1;
        if (!is_unsigned && (x & 1)) v = -v;
        return v;
    }
    long long v = (long long)(x % 7); /* 0..6 */
    return is_unsigned ? v : v - 3;
}

static void store(void *buf, size_t i, chorus_dtype t, long long v)
{
    switch (t) {
    case CHORUS_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case CHORUS_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case CHORUS_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case CHORUS_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case CHORUS_FLOAT16: ((uint16_t *)buf)[i] = chorus__f32_to_f16((float)v); break;
    case CHORUS_BFLOAT16: ((uint16_t *)buf)[i] = chorus__f32_to_bf16((float)v); break;
    case CHORUS_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case CHORUS_FLOAT64: ((double *)buf)[i] = (double)v; break;
    default: break;
    }
}

static void fill(void *buf, size_t count, int r, chorus_op op, chorus_dtype t, uint64_t salt)
{
    for (size_t i = 0; i < count; i++) store(buf, i, t, value(r, i, op, t, salt));
}

/* Reference reduction of element i over all ranks, written into ref in dtype t. */
static void reference(void *ref, size_t i, chorus_op op, chorus_dtype t, uint64_t salt)
{
    long long acc = value(0, i, op, t, salt);
    for (int r = 1; r < size_; r++) {
        long long v = value(r, i, op, t, salt);
        switch (op) {
        case CHORUS_SUM:
        case CHORUS_AVG: acc += v; break;
        case CHORUS_PROD: acc *= v; break;
        case CHORUS_MIN: acc = v < acc ? v : acc; break;
        case CHORUS_MAX: acc = v > acc ? v : acc; break;
        case CHORUS_BAND: acc &= v; break;
        case CHORUS_BOR: acc |= v; break;
        case CHORUS_BXOR: acc ^= v; break;
        default: break;
        }
    }
    store(ref, i, t, acc);
    if (op == CHORUS_AVG)
        chorus__reduce_finish((char *)ref + i * chorus_dtype_size(t), 1, t, op, size_);
}

static void expect_equal(const void *got, const void *want, size_t bytes, const char *what)
{
    if (memcmp(got, want, bytes) == 0) return;
    size_t i = 0;
    while (((const unsigned char *)got)[i] == ((const unsigned char *)want)[i]) i++;
    test_fail(__FILE__, __LINE__, "%s: first difference at byte %zu of %zu", what, i, bytes);
}

static void test_allreduce(size_t count, chorus_dtype t, chorus_op op, int inplace, uint64_t salt)
{
    size_t es = chorus_dtype_size(t), bytes = count * es;
    char *send = malloc(bytes + 1), *recv = malloc(bytes + 1), *ref = malloc(bytes + 1);
    fill(send, count, rank_, op, t, salt);
    for (size_t i = 0; i < count; i++) reference(ref, i, op, t, salt);
    if (inplace) {
        memcpy(recv, send, bytes);
        ASSERT_OK(chorus_allreduce(comm, recv, recv, count, t, op));
    } else {
        ASSERT_OK(chorus_allreduce(comm, send, recv, count, t, op));
    }
    char what[128];
    snprintf(what, sizeof(what), "allreduce count %zu dtype %d op %d inplace %d algo %s", count,
             (int)t, (int)op, inplace,
             comm->cfg.algo_allreduce ? comm->cfg.algo_allreduce : "auto");
    expect_equal(recv, ref, bytes, what);
    free(send);
    free(recv);
    free(ref);
}

static void test_reduce_scatter(size_t rc, chorus_dtype t, chorus_op op, int inplace, uint64_t salt)
{
    size_t es = chorus_dtype_size(t), total = rc * (size_t)size_;
    char *send = malloc(total * es + 1), *recv = malloc(total * es + 1),
         *ref = malloc(total * es + 1);
    fill(send, total, rank_, op, t, salt);
    for (size_t i = 0; i < total; i++) reference(ref, i, op, t, salt);
    if (inplace) {
        memcpy(recv, send, total * es);
        ASSERT_OK(chorus_reduce_scatter(comm, recv, recv, rc, t, op));
    } else {
        ASSERT_OK(chorus_reduce_scatter(comm, send, recv, rc, t, op));
    }
    expect_equal(recv, ref + (size_t)rank_ * rc * es, rc * es, "reduce_scatter");
    free(send);
    free(recv);
    free(ref);
}

static void test_broadcast(size_t count, chorus_dtype t, int root, uint64_t salt)
{
    size_t bytes = count * chorus_dtype_size(t);
    char *buf = malloc(bytes + 1), *ref = malloc(bytes + 1);
    fill(ref, count, root, CHORUS_SUM, t, salt);
    if (rank_ == root)
        memcpy(buf, ref, bytes);
    else
        memset(buf, 0x5a, bytes);
    ASSERT_OK(chorus_broadcast(comm, buf, count, t, root));
    expect_equal(buf, ref, bytes, "broadcast");
    free(buf);
    free(ref);
}

static void test_allgather(size_t count, chorus_dtype t, int inplace, uint64_t salt)
{
    size_t es = chorus_dtype_size(t), bytes = count * es;
    char *send = malloc(bytes + 1), *recv = malloc(bytes * (size_t)size_ + 1),
         *ref = malloc(bytes * (size_t)size_ + 1);
    for (int r = 0; r < size_; r++) fill(ref + (size_t)r * bytes, count, r, CHORUS_SUM, t, salt);
    fill(send, count, rank_, CHORUS_SUM, t, salt);
    memset(recv, 0x77, bytes * (size_t)size_);
    if (inplace) {
        memcpy(recv + (size_t)rank_ * bytes, send, bytes);
        ASSERT_OK(chorus_allgather(comm, recv + (size_t)rank_ * bytes, recv, count, t));
    } else {
        ASSERT_OK(chorus_allgather(comm, send, recv, count, t));
    }
    expect_equal(recv, ref, bytes * (size_t)size_, "allgather");
    free(send);
    free(recv);
    free(ref);
}

static void test_alltoall(size_t count, chorus_dtype t, int inplace, uint64_t salt)
{
    size_t es = chorus_dtype_size(t), bytes = count * es, total = bytes * (size_t)size_;
    char *send = malloc(total + 1), *recv = malloc(total + 1), *ref = malloc(total + 1);
    /* block j of rank r's send: fill with salt (r*64+j) */
    for (int j = 0; j < size_; j++) {
        fill(send + (size_t)j * bytes, count, rank_, CHORUS_SUM, t,
             salt + (uint64_t)(j * 64 + rank_));
        fill(ref + (size_t)j * bytes, count, j, CHORUS_SUM, t, salt + (uint64_t)(rank_ * 64 + j));
    }
    if (inplace) {
        memcpy(recv, send, total);
        ASSERT_OK(chorus_alltoall(comm, recv, recv, count, t));
    } else {
        ASSERT_OK(chorus_alltoall(comm, send, recv, count, t));
    }
    expect_equal(recv, ref, total, "alltoall");
    free(send);
    free(recv);
    free(ref);
}

/* Random floats: summation order matters, so this shows every rank got the same bits. */
static void test_identical_bits(size_t count, const char *algo)
{
    test_set_config(comm, "CHORUS_ALGO_ALLREDUCE", algo);
    float *x = malloc(count * sizeof(float));
    uint64_t s = 42 + (uint64_t)rank_;
    for (size_t i = 0; i < count; i++)
        x[i] = (float)((double)(test_rand(&s) >> 11) * 0x1p-53 - 0.5) * 1e3f;
    ASSERT_OK(chorus_allreduce(comm, x, x, count, CHORUS_FLOAT32, CHORUS_SUM));
    uint64_t h = test_hash(x, count * sizeof(float));
    uint64_t *all = malloc(sizeof(uint64_t) * (size_t)size_);
    ASSERT_OK(chorus_allgather(comm, &h, all, 1, CHORUS_INT64));
    for (int r = 0; r < size_; r++)
        if (all[r] != h)
            test_fail(__FILE__, __LINE__,
                      "allreduce (%s, %zu floats): rank %d got different bits than rank %d", algo,
                      count, r, rank_);
    free(all);
    free(x);
    test_set_config(comm, "CHORUS_ALGO_ALLREDUCE", NULL);
}

static void test_p2p(void)
{
    if (size_ < 2) return;
    /* each rank sends 3 tagged messages to the next, receives from the previous, tags out of
     * order on the receive side */
    int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
    int32_t a[100], b[5], c = rank_ * 10;
    for (int i = 0; i < 100; i++) a[i] = rank_ * 1000 + i;
    for (int i = 0; i < 5; i++) b[i] = -rank_ - i;
    if (rank_ % 2 == 0) {
        ASSERT_OK(chorus_send(comm, a, 100, CHORUS_INT32, next, 7));
        ASSERT_OK(chorus_send(comm, b, 5, CHORUS_INT32, next, 8));
        ASSERT_OK(chorus_send(comm, &c, 1, CHORUS_INT32, next, 7));
    }
    int32_t ra[100], rb[5], rc;
    ASSERT_OK(chorus_recv(comm, rb, 5, CHORUS_INT32, prev, 8));
    ASSERT_OK(chorus_recv(comm, ra, 100, CHORUS_INT32, prev, 7));
    ASSERT_OK(chorus_recv(comm, &rc, 1, CHORUS_INT32, prev, 7));
    if (rank_ % 2 == 1) {
        ASSERT_OK(chorus_send(comm, a, 100, CHORUS_INT32, next, 7));
        ASSERT_OK(chorus_send(comm, b, 5, CHORUS_INT32, next, 8));
        ASSERT_OK(chorus_send(comm, &c, 1, CHORUS_INT32, next, 7));
    }
    for (int i = 0; i < 100; i++) ASSERT_EQ(ra[i], prev * 1000 + i);
    for (int i = 0; i < 5; i++) ASSERT_EQ(rb[i], -prev - i);
    ASSERT_EQ(rc, prev * 10);
}

static void test_split(void)
{
    chorus_comm *sub = NULL;
    ASSERT_OK(chorus_comm_split(comm, rank_ % 2, -rank_, &sub));
    ASSERT(sub != NULL);
    int n = (size_ + 1 - rank_ % 2) / 2;
    ASSERT_EQ(chorus_size(sub), n);
    /* key = -rank: reversed order */
    int expect_rank = 0;
    for (int r = rank_ + 2; r < size_; r += 2) expect_rank++;
    ASSERT_EQ(chorus_rank(sub), expect_rank);
    int64_t v = rank_, sum = 0, want = 0;
    for (int r = rank_ % 2; r < size_; r += 2) want += r;
    ASSERT_OK(chorus_allreduce(sub, &v, &sum, 1, CHORUS_INT64, CHORUS_SUM));
    ASSERT_EQ(sum, want);
    /* the parent still works, interleaved with the child */
    int64_t total = 0;
    ASSERT_OK(chorus_allreduce(comm, &v, &total, 1, CHORUS_INT64, CHORUS_SUM));
    ASSERT_EQ(total, (int64_t)size_ * (size_ - 1) / 2);
    float big[5000];
    for (int i = 0; i < 5000; i++) big[i] = (float)(rank_ + i % 3);
    ASSERT_OK(chorus_allreduce(sub, big, big, 5000, CHORUS_FLOAT32, CHORUS_MAX));
    chorus_comm *none = (chorus_comm *)1;
    ASSERT_OK(chorus_comm_split(comm, rank_ == 0 ? -1 : 0, 0, &none));
    ASSERT(rank_ == 0 ? none == NULL : none != NULL);
    if (none) {
        ASSERT_EQ(chorus_size(none), size_ - 1);
        ASSERT_OK(chorus_barrier(none));
        chorus_finalize(none);
    }
    chorus_finalize(sub);
}

int main(int argc, char **argv)
{
    int big = argc > 1 && !strcmp(argv[1], "--big");
    ASSERT_OK(chorus_init(&comm));
    rank_ = chorus_rank(comm);
    size_ = chorus_size(comm);
    test_rank = rank_;
    const size_t counts[] = {0, 1, 13, (size_t)size_ * 1000 + 7};
    uint64_t salt = 1;
    /* shm: the shared-memory algorithms (one-shot and pipelined), unless CHORUS_SHM=0 */
    const char *shm_env = getenv("CHORUS_SHM");
    int noshm = shm_env && !strcmp(shm_env, "0");
    static const char *algos[] = {"oneshot", "direct_ring", "rd", "ring", "shm"};
    for (int a = 0; a < 5 - noshm; a++) {
        test_set_config(comm, "CHORUS_ALGO_ALLREDUCE", algos[a]);
        for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++)
            for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
                for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                    for (int ip = 0; ip < 2; ip++)
                        test_allreduce(counts[k], dtypes[d], ops[o], ip, salt++);
        for (size_t d = 0; d < 4; d++)
            for (size_t o = 0; o < sizeof(bit_ops) / sizeof(bit_ops[0]); o++)
                for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                    test_allreduce(counts[k], dtypes[d], bit_ops[o], (int)(k % 2), salt++);
        /* a count that spans many pipeline segments */
        for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++)
            test_allreduce(262147, dtypes[d], CHORUS_SUM, d % 2, salt++);
    }
    test_set_config(comm, "CHORUS_ALGO_ALLREDUCE", NULL);
    for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++)
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                test_reduce_scatter(counts[k], dtypes[d], ops[o], (int)(k % 2), salt++);
    for (size_t d = 0; d < 4; d++)
        for (size_t o = 0; o < sizeof(bit_ops) / sizeof(bit_ops[0]); o++)
            test_reduce_scatter(1000, dtypes[d], bit_ops[o], (int)(o % 2), salt++);
    static const char *bcast_algos[] = {"tree", "chain", "shm"};
    for (int a = 0; a < 3 - noshm; a++) {
        test_set_config(comm, "CHORUS_ALGO_BROADCAST", bcast_algos[a]);
        for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++)
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                test_broadcast(counts[k], dtypes[d], (int)((d + k) % (size_t)size_), salt++);
        test_broadcast(700001, CHORUS_UINT8, size_ - 1, salt++);
    }
    test_set_config(comm, "CHORUS_ALGO_BROADCAST", NULL);
    for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++)
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            test_allgather(counts[k], dtypes[d], (int)(k % 2), salt++);
            test_alltoall(counts[k], dtypes[d], (int)(k % 2), salt++);
        }
    test_allgather(100003, CHORUS_FLOAT32, 0, salt++);
    test_alltoall(100003, CHORUS_INT8, 1, salt++);
    for (int i = 0; i < 5; i++) ASSERT_OK(chorus_barrier(comm));
    test_identical_bits(1000, "rd");
    test_identical_bits(300001, "ring");
    test_p2p();
    test_split();
    if (big) {
        /* 64 MiB: float32 sum, int32 max, bfloat16 sum through the ring; a 64 MiB broadcast */
        size_t n = (64u << 20) / 4;
        test_allreduce(n, CHORUS_FLOAT32, CHORUS_SUM, 0, salt++);
        test_allreduce(n, CHORUS_INT32, CHORUS_MAX, 1, salt++);
        test_allreduce((64u << 20) / 2, CHORUS_BFLOAT16, CHORUS_SUM, 1, salt++);
        test_broadcast(64u << 20, CHORUS_UINT8, 0, salt++);
        test_allgather((64u << 20) / 4 / (size_t)size_, CHORUS_FLOAT32, 0, salt++);
        test_reduce_scatter((64u << 20) / 4 / (size_t)size_, CHORUS_FLOAT32, CHORUS_SUM, 0, salt++);
    }
    ASSERT_OK(chorus_barrier(comm));
    if (rank_ == 0)
        printf("coll_matrix: all collectives correct on %d ranks%s\n", size_,
               big ? " (with 64 MiB)" : "");
    chorus_finalize(comm);
    return 0;
}
