/*
 * shm_edge.c - the shared-memory collectives at their edges, with real ranks:
 *
 *   chorus-run -np N shm_edge            every collective over shared memory with buffers at
 *                                        odd offsets (different on each rank), counts that do
 *                                        not divide by N or by the slot, in place and not,
 *                                        one-shot and pipelined, many chunks; then random
 *                                        floats (f32, f16, bf16) whose bits must agree on all
 *                                        ranks, and a hash line for run-to-run comparison
 *   chorus-run -np N shm_edge mismatch   ranks call allreduce with different counts: every
 *                                        rank must fail with CHORUS_ERR_MISMATCH and say so
 *   chorus-run -np N shm_edge timeout    rank N-1 skips a barrier: the others must time out
 *                                        (CHORUS_TIMEOUT_S) with a message naming a rank
 *   chorus-run -np N shm_edge noshm      with CHORUS_SHM=0: no shared memory, forcing it warns
 *
 * Run with a small CHORUS_SHM_CHUNK (the list uses 8192) so that modest sizes span many
 * chunks. Exact results: inputs are small integers, so every reduction order gives the same
 * answer and each rank can compute the reference alone.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/comm.h"
#include "harness.h"
#include "transport/shm/shm.h"

static chorus_comm *comm;
static int rank_, size_;

static void put(void *buf, size_t i, chorus_dtype t, long long v)
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

/* Rank r's value at element i: 0..3, or 1 / -1 for products. */
static long long val(int r, size_t i, chorus_op op, uint64_t salt)
{
    uint64_t s = salt * 7777u + i * 31u + (uint64_t)r * 1009u;
    uint64_t x = test_rand(&s);
    if (op == CHORUS_PROD) return (x & 3) == 0 ? -1 : 1;
    return (long long)(x & 3);
}

static long long ref(size_t i, chorus_op op, uint64_t salt)
{
    long long a = val(0, i, op, salt);
    for (int r = 1; r < size_; r++) {
        long long v = val(r, i, op, salt);
        if (op == CHORUS_SUM || op == CHORUS_AVG) a += v;
        if (op == CHORUS_PROD) a *= v;
        if (op == CHORUS_MIN) a = v < a ? v : a;
        if (op == CHORUS_MAX) a = v > a ? v : a;
    }
    return a;
}

/* A buffer of n bytes at an offset that differs by rank and is not a multiple of 64. */
static char *odd_alloc(size_t n, size_t es, char **base)
{
    *base = malloc(n + 256);
    ASSERT(*base != NULL);
    return *base + es * (size_t)(1 + 3 * rank_);
}

static void check(const char *got, const char *want, size_t bytes, const char *what, size_t count,
                  int inplace)
{
    if (memcmp(got, want, bytes) == 0) return;
    size_t i = 0;
    while (got[i] == want[i]) i++;
    test_fail(__FILE__, __LINE__, "%s count %zu inplace %d: first difference at byte %zu of %zu",
              what, count, inplace, i, bytes);
}

static void allreduce(size_t count, chorus_dtype t, chorus_op op, int inplace, uint64_t salt)
{
    size_t es = chorus_dtype_size(t), bytes = count * es;
    char *b1, *b2, *b3;
    char *send = odd_alloc(bytes, es, &b1), *recv = odd_alloc(bytes, es, &b2);
    char *want = odd_alloc(bytes, es, &b3);
    for (size_t i = 0; i < count; i++) {
        put(send, i, t, val(rank_, i, op, salt));
        put(want, i, t, ref(i, op, salt));
    }
    if (op == CHORUS_AVG) chorus__reduce_finish(want, count, t, op, size_);
    if (inplace) memcpy(recv, send, bytes);
    ASSERT_OK(chorus_allreduce(comm, inplace ? recv : send, recv, count, t, op));
    check(recv, want, bytes, "allreduce", count, inplace);
    free(b1);
    free(b2);
    free(b3);
}

static void reduce_scatter(size_t rc, chorus_dtype t, chorus_op op, int inplace, uint64_t salt)
{
    size_t es = chorus_dtype_size(t), total = rc * (size_t)size_;
    char *b1, *b2, *b3;
    char *send = odd_alloc(total * es, es, &b1), *recv = odd_alloc(total * es, es, &b2);
    char *want = odd_alloc(total * es, es, &b3);
    for (size_t i = 0; i < total; i++) {
        put(send, i, t, val(rank_, i, op, salt));
        put(want, i, t, ref(i, op, salt));
    }
    if (op == CHORUS_AVG) chorus__reduce_finish(want, total, t, op, size_);
    if (inplace) memcpy(recv, send, total * es);
    ASSERT_OK(chorus_reduce_scatter(comm, inplace ? recv : send, recv, rc, t, op));
    check(recv, want + (size_t)rank_ * rc * es, rc * es, "reduce_scatter", rc, inplace);
    free(b1);
    free(b2);
    free(b3);
}

static void broadcast(size_t n, int root, uint64_t salt)
{
    char *b1, *b2;
    char *buf = odd_alloc(n, 1, &b1), *want = odd_alloc(n, 1, &b2);
    for (size_t i = 0; i < n; i++) want[i] = (char)val(root, i, CHORUS_SUM, salt);
    if (rank_ == root)
        memcpy(buf, want, n);
    else
        memset(buf, 0x5a, n);
    ASSERT_OK(chorus_broadcast(comm, buf, n, CHORUS_UINT8, root));
    check(buf, want, n, "broadcast", n, 1);
    free(b1);
    free(b2);
}

static void allgather(size_t count, int inplace, uint64_t salt)
{
    size_t es = 4, bytes = count * es, total = bytes * (size_t)size_;
    char *b1, *b2, *b3;
    char *send = odd_alloc(bytes, es, &b1), *recv = odd_alloc(total, es, &b2);
    char *want = odd_alloc(total, es, &b3);
    for (int r = 0; r < size_; r++)
        for (size_t i = 0; i < count; i++)
            put(want + (size_t)r * bytes, i, CHORUS_INT32, val(r, i, CHORUS_SUM, salt) + r);
    memcpy(send, want + (size_t)rank_ * bytes, bytes);
    memset(recv, 0x77, total);
    if (inplace) memcpy(recv + (size_t)rank_ * bytes, send, bytes);
    ASSERT_OK(chorus_allgather(comm, inplace ? recv + (size_t)rank_ * bytes : send, recv, count,
                               CHORUS_INT32));
    check(recv, want, total, "allgather", count, inplace);
    free(b1);
    free(b2);
    free(b3);
}

static void alltoall(size_t count, int inplace, uint64_t salt)
{
    size_t es = 2, bytes = count * es, total = bytes * (size_t)size_;
    char *b1, *b2, *b3;
    char *send = odd_alloc(total, es, &b1), *recv = odd_alloc(total, es, &b2);
    char *want = odd_alloc(total, es, &b3);
    for (int j = 0; j < size_; j++)
        for (size_t i = 0; i < count; i++) {
            /* block j of my send goes to rank j; block j of my receive comes from rank j */
            put(send + (size_t)j * bytes, i, CHORUS_BFLOAT16,
                val(rank_ * 64 + j, i, CHORUS_SUM, salt));
            put(want + (size_t)j * bytes, i, CHORUS_BFLOAT16,
                val(j * 64 + rank_, i, CHORUS_SUM, salt));
        }
    if (inplace) memcpy(recv, send, total);
    ASSERT_OK(chorus_alltoall(comm, inplace ? recv : send, recv, count, CHORUS_BFLOAT16));
    check(recv, want, total, "alltoall", count, inplace);
    free(b1);
    free(b2);
    free(b3);
}

/* Random floats: the bits must be the same on every rank; returns their hash. */
static uint64_t same_bits(size_t count, chorus_dtype t, chorus_op op)
{
    size_t es = chorus_dtype_size(t);
    char *x = malloc(count * es + 1);
    uint64_t s = 99 + (uint64_t)rank_ * 7 + count;
    for (size_t i = 0; i < count; i++) {
        float f = (float)((double)(test_rand(&s) >> 11) * 0x1p-53 - 0.5) * 100.0f;
        if (t == CHORUS_FLOAT32) ((float *)x)[i] = f;
        if (t == CHORUS_FLOAT16) ((uint16_t *)x)[i] = chorus__f32_to_f16(f);
        if (t == CHORUS_BFLOAT16) ((uint16_t *)x)[i] = chorus__f32_to_bf16(f);
    }
    ASSERT_OK(chorus_allreduce(comm, x, x, count, t, op));
    uint64_t h = test_hash(x, count * es);
    uint64_t *all = malloc(sizeof(uint64_t) * (size_t)size_);
    ASSERT_OK(chorus_allgather(comm, &h, all, 1, CHORUS_INT64));
    for (int r = 0; r < size_; r++)
        if (all[r] != h)
            test_fail(__FILE__, __LINE__,
                      "allreduce of %zu random %s: rank %d has other bits than rank %d", count,
                      chorus__dtype_name((int)t), r, rank_);
    free(all);
    free(x);
    return h;
}

static void matrix(void)
{
    ASSERT(comm->shm != NULL);
    char path[96];
    snprintf(path, sizeof(path), "/dev/shm%s", comm->shm->name);
    ASSERT(access(path, F_OK) != 0); /* unlinked as soon as everyone mapped it */
    size_t chunk = comm->shm->chunk, one = comm->shm->oneshot_max;
    /* around the one-shot limit, one slot, many slots; never multiples of the rank count */
    size_t counts[] = {1,
                       3,
                       61,
                       one / 4 - 1,
                       one / 4 + 5,
                       chunk / 4 + 13,
                       5 * chunk / 4 + 7,
                       (size_t)size_ * 1001 + 1};
    const chorus_dtype dts[] = {CHORUS_INT8,    CHORUS_UINT8,    CHORUS_INT32,   CHORUS_INT64,
                                CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32, CHORUS_FLOAT64};
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_PROD, CHORUS_MIN, CHORUS_MAX, CHORUS_AVG};
    uint64_t salt = 1;
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
        for (size_t d = 0; d < 8; d++) {
            allreduce(counts[k], dts[d], ops[(k + d) % 5], (int)((k + d) % 2), salt++);
            reduce_scatter(counts[k] / 3 + 1, dts[d], ops[(k + d + 2) % 5], (int)(d % 2), salt++);
        }
    for (size_t o = 0; o < 5; o++) allreduce(3 * chunk / 2 + 1, CHORUS_FLOAT32, ops[o], 1, salt++);
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        broadcast(counts[k] * 3 + 1, (int)(k % (size_t)size_), salt++);
        allgather(counts[k], (int)(k % 2), salt++);
        alltoall(counts[k] / 2 + 1, (int)(k % 2), salt++);
        ASSERT_OK(chorus_barrier(comm));
    }
    /* a split communicator gets its own group, interleaved with the parent's */
    chorus_comm *sub;
    ASSERT_OK(chorus_comm_split(comm, rank_ % 2, rank_, &sub));
    ASSERT(chorus_size(sub) < 2 || sub->shm != NULL);
    int64_t v = rank_, sum = 0, want = 0;
    for (int r = rank_ % 2; r < size_; r += 2) want += r;
    ASSERT_OK(chorus_allreduce(sub, &v, &sum, 1, CHORUS_INT64, CHORUS_SUM));
    ASSERT_OK(chorus_barrier(comm));
    ASSERT_EQ(sum, want);
    chorus_finalize(sub);
    /* bits agree across ranks, one-shot and pipelined; the hashes let two runs be compared */
    uint64_t h = 0;
    size_t fc[] = {1000, one / 4 + 100, 3 * chunk + 17};
    for (int i = 0; i < 3; i++) {
        h ^= same_bits(fc[i], CHORUS_FLOAT32, CHORUS_SUM);
        h = h * 31 + same_bits(fc[i] * 2, CHORUS_FLOAT16, CHORUS_SUM);
        h = h * 31 + same_bits(fc[i] * 2, CHORUS_BFLOAT16, CHORUS_AVG);
    }
    if (rank_ == 0) printf("shm_edge: bits %016llx\n", (unsigned long long)h);
}

static void mismatch(void)
{
    float x[300] = {0};
    /* Every rank past chorus_init first: init ends with a TCP collective, and a rank still
     * reading its last bytes there would see the others' abort before those bytes. */
    ASSERT_OK(chorus_barrier(comm));
    chorus_result r =
        chorus_allreduce(comm, x, x, rank_ == 0 ? 100 : 300, CHORUS_FLOAT32, CHORUS_SUM);
    fprintf(stderr, "rank %d: %s: %s\n", rank_, chorus_strerror(r), chorus_last_error(comm));
    ASSERT_EQ(r, CHORUS_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(chorus_last_error(comm), "mismatched calls over shared memory");
    ASSERT(chorus_barrier(comm) != CHORUS_OK); /* broken for good */
    printf("shm_edge: rank %d saw the mismatch\n", rank_);
}

static void timeout(void)
{
    if (rank_ == size_ - 1) {
        sleep(4); /* never calls the barrier; exits after the others have failed */
        return;
    }
    double t0 = chorus__now();
    chorus_result r = chorus_barrier(comm);
    fprintf(stderr, "rank %d: %s after %.1fs: %s\n", rank_, chorus_strerror(r), chorus__now() - t0,
            chorus_last_error(comm));
    ASSERT_EQ(r, CHORUS_ERR_TIMEOUT);
    ASSERT_STR_CONTAINS(chorus_last_error(comm), "over shared memory");
    ASSERT_STR_CONTAINS(chorus_last_error(comm), "timed out");
    printf("shm_edge: rank %d timed out\n", rank_);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "matrix";
    ASSERT_OK(chorus_init(&comm));
    rank_ = chorus_rank(comm);
    size_ = chorus_size(comm);
    test_rank = rank_;
    if (!strcmp(mode, "matrix")) {
        if (size_ > 1) matrix();
    } else if (!strcmp(mode, "mismatch")) {
        mismatch();
    } else if (!strcmp(mode, "timeout")) {
        timeout();
    } else if (!strcmp(mode, "noshm")) {
        ASSERT(comm->shm == NULL);
        test_set_config(comm, "CHORUS_ALGO_ALLREDUCE", "shm");
        int32_t x = 1;
        ASSERT_OK(chorus_allreduce(comm, &x, &x, 1, CHORUS_INT32, CHORUS_SUM));
        ASSERT_EQ(x, size_);
    } else {
        test_fail(__FILE__, __LINE__, "unknown mode %s", mode);
    }
    chorus_finalize(comm);
    return 0;
}
