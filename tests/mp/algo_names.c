/* algo_names.c - forcing algorithms by name (CHORUS_ALGO_*): a name that is no algorithm of
 * the collective is CHORUS_ERR_INVALID_ARG with a message listing the valid names, sends
 * nothing and leaves the communicator usable; every valid name (and the documented alias
 * shm_flat) runs and gives correct results; a host split of a one-host job has shared memory
 * exactly when the world has.
 * Usage: chorus-run -np N algo_names */
#include "coll/comm.h"
#include "harness.h"

static chorus_comm *comm;
static int n, me;

/* Runs collective kind once on small data and checks the result; returns its result code. */
static chorus_result run(int kind)
{
    enum { C = 1000 };
    int32_t *in = malloc(sizeof(int32_t) * C * (size_t)n), *out = malloc(sizeof(int32_t) * C * (size_t)n);
    for (int i = 0; i < C * n; i++) in[i] = me * 100000 + i;
    chorus_result r;
    switch (kind) {
    case 0:
        r = chorus_allreduce(comm, in, out, C, CHORUS_INT32, CHORUS_SUM);
        for (int i = 0; r == CHORUS_OK && i < C; i++)
            ASSERT_EQ(out[i], 100000 * n * (n - 1) / 2 + n * i);
        break;
    case 1:
        if (me == 1 % n) memcpy(out, in, sizeof(int32_t) * C);
        r = chorus_broadcast(comm, out, C, CHORUS_INT32, 1 % n);
        for (int i = 0; r == CHORUS_OK && i < C; i++) ASSERT_EQ(out[i], (1 % n) * 100000 + i);
        break;
    case 2:
        r = chorus_allgather(comm, in, out, C, CHORUS_INT32);
        for (int i = 0; r == CHORUS_OK && i < C * n; i++)
            ASSERT_EQ(out[i], (i / C) * 100000 + i % C);
        break;
    case 3:
        r = chorus_reduce_scatter(comm, in, out, C, CHORUS_INT32, CHORUS_SUM);
        for (int i = 0; r == CHORUS_OK && i < C; i++)
            ASSERT_EQ(out[i], 100000 * n * (n - 1) / 2 + n * (me * C + i));
        break;
    case 4:
        r = chorus_alltoall(comm, in, out, C, CHORUS_INT32);
        for (int i = 0; r == CHORUS_OK && i < C * n; i++)
            ASSERT_EQ(out[i], (i / C) * 100000 + me * C + i % C);
        break;
    default: r = chorus_barrier(comm); break;
    }
    free(in);
    free(out);
    return r;
}

int main(void)
{
    ASSERT_OK(chorus_init(&comm));
    n = chorus_size(comm);
    me = test_rank = chorus_rank(comm);
    static const char *vars[6] = {"CHORUS_ALGO_ALLREDUCE",      "CHORUS_ALGO_BROADCAST",
                                  "CHORUS_ALGO_ALLGATHER",      "CHORUS_ALGO_REDUCE_SCATTER",
                                  "CHORUS_ALGO_ALLTOALL",       "CHORUS_ALGO_BARRIER"};
    static const char *valid[6] = {
        "shm_oneshot (or shm_flat), shm_pipelined, oneshot, direct_ring, rd, ring, shm (shared "
        "memory, by the rules)",
        "shm, tree, chain", "shm, ring", "shm, direct", "shm, pairwise", "shm, dissemination"};
    static const char *names[6][8] = {
        {"oneshot", "direct_ring", "rd", "ring", "shm", "shm_oneshot", "shm_flat", "shm_pipelined"},
        {"tree", "chain", "shm"},
        {"ring", "shm"},
        {"direct", "shm"},
        {"pairwise", "shm"},
        {"dissemination", "shm"}};
    for (int k = 0; k < 6; k++) {
        /* the old, misleading names are gone: rsag, flat, and ring for reduce-scatter */
        const char *bad = k == 0 ? "rsag" : k == 3 ? "ring" : "nonesuch";
        setenv(vars[k], bad, 1);
        chorus_result r = run(k);
        ASSERT_EQ(r, CHORUS_ERR_INVALID_ARG);
        const char *msg = chorus_last_error(comm);
        if (me == 0) printf("%s=%s: %s\n", vars[k], bad, msg);
        ASSERT_STR_CONTAINS(msg, vars[k]);
        ASSERT_STR_CONTAINS(msg, bad);
        ASSERT_STR_CONTAINS(msg, valid[k]);
        for (int i = 0; i < 8 && names[k][i]; i++) {
            setenv(vars[k], names[k][i], 1);
            ASSERT_OK(run(k)); /* the communicator is still usable after the refusal */
        }
        unsetenv(vars[k]);
        ASSERT_OK(run(k));
    }
    /* shm_flat is the same algorithm as shm_oneshot: same bits on float data */
    if (n > 1) {
        enum { F = 5000 };
        float x[F], a[F], b[F];
        uint64_t s = 11 + (uint64_t)me;
        for (int i = 0; i < F; i++) x[i] = (float)((double)(test_rand(&s) >> 11) * 0x1p-53 - 0.5);
        setenv("CHORUS_ALGO_ALLREDUCE", "shm_oneshot", 1);
        ASSERT_OK(chorus_allreduce(comm, x, a, F, CHORUS_FLOAT32, CHORUS_SUM));
        setenv("CHORUS_ALGO_ALLREDUCE", "shm_flat", 1);
        ASSERT_OK(chorus_allreduce(comm, x, b, F, CHORUS_FLOAT32, CHORUS_SUM));
        unsetenv("CHORUS_ALGO_ALLREDUCE");
        ASSERT(!memcmp(a, b, sizeof(a)));
    }
    /* one host: the host split is everyone, with shared memory exactly when the world has it */
    chorus_comm *local = NULL, *leaders = NULL;
    ASSERT_OK(chorus_comm_split_type(comm, CHORUS_SPLIT_HOST, me, &local));
    ASSERT(local != NULL);
    ASSERT_EQ(chorus_size(local), n);
    ASSERT_EQ(chorus_rank(local), me);
    ASSERT_EQ(local->shm != NULL, comm->shm != NULL);
    chorus_comm *world = comm;
    comm = local; /* same size and ranks as the world here */
    ASSERT_OK(run(0));
    comm = world;
    ASSERT_OK(chorus_finalize(local));
    ASSERT_OK(chorus_comm_split_type(comm, CHORUS_SPLIT_HOST_LEADERS, 0, &leaders));
    ASSERT_EQ(leaders != NULL, me == 0);
    if (leaders) ASSERT_EQ(chorus_size(leaders), 1);
    ASSERT_EQ(chorus_comm_split_type(comm, (chorus_split_type)7, 0, &local), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(comm), "unknown split type 7");
    ASSERT(local == NULL);
    if (leaders) ASSERT_OK(chorus_finalize(leaders));
    ASSERT_OK(chorus_barrier(comm));
    ASSERT_OK(chorus_finalize(comm));
    if (me == 0) printf("algo_names: OK on %d ranks\n", n);
    return 0;
}
