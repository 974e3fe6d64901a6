/*
 * mismatch.c - calls that differ across ranks fail on every rank, at the call itself, with
 * CHORUS_ERR_MISMATCH naming the difference; nothing is returned as a success with data from
 * another call. Run over shared memory (the default) and over TCP (CHORUS_SHM=0):
 *
 *   chorus-run -np N mismatch root        rank 0 broadcasts from root 0, the others from root 1
 *   chorus-run -np N mismatch zero KIND   the last rank calls KIND (allreduce, broadcast,
 *                                         allgather, reduce_scatter, alltoall) with count 0,
 *                                         the others with 1000
 *   chorus-run -np N mismatch big         allreduce of 10^6 floats on rank 0, 10^6 + 1 on the
 *                                         others: a mismatch everywhere, never a lost peer
 *   chorus-run -np 2 mismatch p2p         send 200 float32, receive 100 float64 (blocking and
 *                                         non-blocking): the receive fails with a mismatch
 *
 * Each rank prints "rank R: RESULT: detail" for the mismatched call, for the test list to grep.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static chorus_comm *comm;
static int rank_, size_;

/* The mismatched call must fail with CHORUS_ERR_MISMATCH, and the communicator stays broken. */
static void expect_mismatch(chorus_result r, const char *needle)
{
    printf("rank %d: %s: %s\n", rank_, chorus_strerror(r), r ? chorus_last_error(comm) : "");
    fflush(stdout);
    ASSERT_EQ(r, CHORUS_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(chorus_last_error(comm), needle);
    ASSERT(chorus_barrier(comm) != CHORUS_OK);
}

static void root(void)
{
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = (float)(rank_ * 100 + i);
    int r = rank_ == 0 ? 0 : 1;
    expect_mismatch(chorus_broadcast(comm, x, 64, CHORUS_FLOAT32, r), "root");
}

static chorus_result call_kind(const char *kind, size_t count, float *send, float *recv)
{
    if (!strcmp(kind, "allreduce"))
        return chorus_allreduce(comm, send, recv, count, CHORUS_FLOAT32, CHORUS_SUM);
    if (!strcmp(kind, "broadcast")) return chorus_broadcast(comm, recv, count, CHORUS_FLOAT32, 0);
    if (!strcmp(kind, "allgather"))
        return chorus_allgather(comm, send, recv, count, CHORUS_FLOAT32);
    if (!strcmp(kind, "reduce_scatter"))
        return chorus_reduce_scatter(comm, send, recv, count, CHORUS_FLOAT32, CHORUS_SUM);
    if (!strcmp(kind, "alltoall")) return chorus_alltoall(comm, send, recv, count, CHORUS_FLOAT32);
    test_fail(__FILE__, __LINE__, "unknown kind %s", kind);
}

static void zero(const char *kind)
{
    size_t n = 1000, all = n * (size_t)size_;
    float *send = calloc(all, sizeof(float)), *recv = calloc(all, sizeof(float));
    ASSERT(send && recv);
    for (size_t i = 0; i < all; i++) send[i] = recv[i] = 1;
    size_t count = rank_ == size_ - 1 ? 0 : n;
    expect_mismatch(call_kind(kind, count, send, recv), "count");
    /* a second call of the same kind must not pair with anything: the communicator is broken */
    ASSERT(call_kind(kind, count, send, recv) != CHORUS_OK);
    free(send);
    free(recv);
}

static void big(void)
{
    size_t n = 1000000, count = rank_ == 0 ? n : n + 1;
    float *x = calloc(n + 1, sizeof(float));
    ASSERT(x);
    expect_mismatch(chorus_allreduce(comm, x, x, count, CHORUS_FLOAT32, CHORUS_SUM), "count");
    free(x);
}

static void p2p(void)
{
    float f[200];
    double d[100];
    for (int i = 0; i < 200; i++) f[i] = (float)i;
    if (rank_ == 0) {
        ASSERT_OK(chorus_send(comm, f, 200, CHORUS_FLOAT32, 1, 7));
        chorus_request *rq;
        ASSERT_OK(chorus_isend(comm, f, 200, CHORUS_FLOAT32, 1, 8, &rq));
        ASSERT_OK(chorus_wait(rq, NULL));
    } else if (rank_ == 1) {
        chorus_result r = chorus_recv(comm, d, 100, CHORUS_FLOAT64, 0, 7);
        printf("rank %d: %s: %s\n", rank_, chorus_strerror(r), chorus_last_error(comm));
        ASSERT_EQ(r, CHORUS_ERR_MISMATCH);
        ASSERT_STR_CONTAINS(chorus_last_error(comm), "float32");
        chorus_request *rq;
        ASSERT_OK(chorus_irecv(comm, d, 100, CHORUS_FLOAT64, 0, 8, &rq));
        r = chorus_wait(rq, NULL);
        printf("rank %d: %s: %s\n", rank_, chorus_strerror(r), chorus_last_error(comm));
        ASSERT_EQ(r, CHORUS_ERR_MISMATCH);
        ASSERT_STR_CONTAINS(chorus_last_error(comm), "float32");
    }
    ASSERT_OK(chorus_barrier(comm)); /* a point-to-point mismatch leaves the communicator usable */
}

int main(int argc, char **argv)
{
    ASSERT(argc >= 2);
    ASSERT_OK(chorus_init(&comm));
    rank_ = test_rank = chorus_rank(comm);
    size_ = chorus_size(comm);
    /* Every rank past chorus_init and this barrier, so that the mismatch is the first thing
     * that goes wrong: a rank still reading the barrier's last message when another's abort
     * comes in on another connection would fail in the barrier (rightly, but not here). */
    ASSERT_OK(chorus_barrier(comm));
    usleep(200000);
    if (!strcmp(argv[1], "root"))
        root();
    else if (!strcmp(argv[1], "zero") && argc >= 3)
        zero(argv[2]);
    else if (!strcmp(argv[1], "big"))
        big();
    else if (!strcmp(argv[1], "p2p"))
        p2p();
    else
        test_fail(__FILE__, __LINE__, "unknown mode %s", argv[1]);
    chorus_finalize(comm);
    printf("mismatch: rank %d ok\n", rank_);
    return 0;
}
