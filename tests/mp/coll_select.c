/* coll_select.c - how collectives pick their algorithm, by name and by topology.
 * By name (CHORUS_ALGO_*): a name that is no algorithm of the collective is
 * CHORUS_ERR_INVALID_ARG with a message listing the valid names, sends nothing and leaves the
 * communicator usable; every valid name (and the documented alias shm_flat) runs and gives
 * correct results (shared-memory names fall back to TCP where there is none).
 * By topology: chorus_comm_split_type(CHORUS_SPLIT_HOST) gives the ranks of this host, with
 * shared memory when there are two or more (unless CHORUS_SHM=0), also when the world spans
 * hosts and so itself has none; CHORUS_SPLIT_HOST_LEADERS the lowest rank of every host.
 * Every collective is checked on all three communicators.
 * Usage: chorus-run -np N coll_select (one host), or tests/net/twohosts.sh (two hosts). */
#include "coll/comm.h"
#include "harness.h"

static chorus_comm *comm;

/* Runs collective kind once over c on small data and checks the result; returns its code. */
static chorus_result run_on(chorus_comm *c, int kind)
{
    int n = chorus_size(c), me = chorus_rank(c);
    enum { C = 1000 };
    int32_t *in = malloc(sizeof(int32_t) * C * (size_t)n),
            *out = malloc(sizeof(int32_t) * C * (size_t)n);
    for (int i = 0; i < C * n; i++) in[i] = me * 100000 + i;
    chorus_result r;
    switch (kind) {
    case 0:
        r = chorus_allreduce(c, in, out, C, CHORUS_INT32, CHORUS_SUM);
        for (int i = 0; r == CHORUS_OK && i < C; i++)
            ASSERT_EQ(out[i], 100000 * n * (n - 1) / 2 + n * i);
        break;
    case 1:
        if (me == 1 % n) memcpy(out, in, sizeof(int32_t) * C);
        r = chorus_broadcast(c, out, C, CHORUS_INT32, 1 % n);
        for (int i = 0; r == CHORUS_OK && i < C; i++) ASSERT_EQ(out[i], (1 % n) * 100000 + i);
        break;
    case 2:
        r = chorus_allgather(c, in, out, C, CHORUS_INT32);
        for (int i = 0; r == CHORUS_OK && i < C * n; i++)
            ASSERT_EQ(out[i], (i / C) * 100000 + i % C);
        break;
    case 3:
        r = chorus_reduce_scatter(c, in, out, C, CHORUS_INT32, CHORUS_SUM);
        for (int i = 0; r == CHORUS_OK && i < C; i++)
            ASSERT_EQ(out[i], 100000 * n * (n - 1) / 2 + n * (me * C + i));
        break;
    case 4:
        r = chorus_alltoall(c, in, out, C, CHORUS_INT32);
        for (int i = 0; r == CHORUS_OK && i < C * n; i++)
            ASSERT_EQ(out[i], (i / C) * 100000 + me * C + i % C);
        break;
    default: r = chorus_barrier(c); break;
    }
    free(in);
    free(out);
    return r;
}

static chorus_result run(int kind)
{
    return run_on(comm, kind);
}

static void all_on(chorus_comm *c)
{
    for (int k = 0; k < 6; k++) ASSERT_OK(run_on(c, k));
}

int main(void)
{
    ASSERT_OK(chorus_init(&comm));
    int n = chorus_size(comm), me = test_rank = chorus_rank(comm);
    static const char *vars[6] = {"CHORUS_ALGO_ALLREDUCE", "CHORUS_ALGO_BROADCAST",
                                  "CHORUS_ALGO_ALLGATHER", "CHORUS_ALGO_REDUCE_SCATTER",
                                  "CHORUS_ALGO_ALLTOALL",  "CHORUS_ALGO_BARRIER"};
    static const char *valid[6] = {
        "shm_oneshot (or shm_flat), shm_pipelined, hier, oneshot, direct_ring, rd, ring, shm "
        "(shared memory, by the rules)",
        "shm, hier, tree, chain",
        "shm, hier, ring",
        "shm, direct",
        "shm, pairwise",
        "shm, dissemination"};
    static const char *names[6][9] = {{"oneshot", "direct_ring", "rd", "ring", "shm", "shm_oneshot",
                                       "shm_flat", "shm_pipelined", "hier"},
                                      {"tree", "chain", "shm", "hier"},
                                      {"ring", "shm", "hier"},
                                      {"direct", "shm"},
                                      {"pairwise", "shm"},
                                      {"dissemination", "shm"}};
    for (int k = 0; k < 6; k++) {
        /* the old, misleading names are gone: rsag, flat, and ring for reduce-scatter */
        const char *bad = k == 0 ? "rsag" : k == 3 ? "ring" : "nonesuch";
        test_set_config(comm, vars[k], bad);
        chorus_result r = run(k);
        ASSERT_EQ(r, CHORUS_ERR_INVALID_ARG);
        const char *msg = chorus_last_error(comm);
        if (me == 0) printf("%s=%s: %s\n", vars[k], bad, msg);
        ASSERT_STR_CONTAINS(msg, vars[k]);
        ASSERT_STR_CONTAINS(msg, bad);
        ASSERT_STR_CONTAINS(msg, valid[k]);
        for (int i = 0; i < 9 && names[k][i]; i++) {
            test_set_config(comm, vars[k], names[k][i]);
            ASSERT_OK(run(k)); /* the communicator is still usable after the refusal */
        }
        test_set_config(comm, vars[k], NULL);
        ASSERT_OK(run(k));
    }
    /* shm_flat is the same algorithm as shm_oneshot: same bits on float data */
    if (n > 1) {
        enum { F = 5000 };
        float x[F], a[F], b[F];
        uint64_t s = 11 + (uint64_t)me;
        for (int i = 0; i < F; i++) x[i] = (float)((double)(test_rand(&s) >> 11) * 0x1p-53 - 0.5);
        test_set_config(comm, "CHORUS_ALGO_ALLREDUCE", "shm_oneshot");
        ASSERT_OK(chorus_allreduce(comm, x, a, F, CHORUS_FLOAT32, CHORUS_SUM));
        test_set_config(comm, "CHORUS_ALGO_ALLREDUCE", "shm_flat");
        ASSERT_OK(chorus_allreduce(comm, x, b, F, CHORUS_FLOAT32, CHORUS_SUM));
        test_set_config(comm, "CHORUS_ALGO_ALLREDUCE", NULL);
        ASSERT(!memcmp(a, b, sizeof(a)));
    }
    /* the ranks of this host, and the first rank of every host */
    int host0 = 0; /* the lowest rank on my host */
    while (comm->host[host0] != comm->host[me]) host0++;
    chorus_comm *local = NULL, *leaders = NULL;
    ASSERT_OK(chorus_comm_split_type(comm, CHORUS_SPLIT_HOST, me, &local));
    ASSERT(local != NULL);
    ASSERT_EQ(chorus_size(local), chorus_local_size(comm));
    ASSERT_EQ(chorus_rank(local), chorus_local_rank(comm));
    ASSERT_EQ(local->nhosts, 1);
    int want_shm = chorus_size(local) > 1 && comm->cfg.shm;
    ASSERT_EQ(local->shm != NULL, want_shm);
    if (comm->nhosts == 1)
        ASSERT_EQ(comm->shm != NULL, want_shm);
    else
        ASSERT(comm->shm == NULL); /* spans hosts: TCP */
    printf("rank %d: world of %d ranks on %d hosts (%s); host-local communicator of %d ranks "
           "(%s)\n",
           me, n, comm->nhosts, comm->shm ? "shared memory" : "TCP", chorus_size(local),
           local->shm ? "shared memory" : "TCP");
    all_on(local);
    ASSERT_OK(chorus_comm_split_type(comm, CHORUS_SPLIT_HOST_LEADERS, 0, &leaders));
    ASSERT_EQ(leaders != NULL, me == host0);
    if (leaders) {
        ASSERT_EQ(chorus_size(leaders), comm->nhosts);
        ASSERT_EQ(chorus_rank(leaders), comm->host[me]);
        all_on(leaders);
        ASSERT_OK(chorus_finalize(leaders));
    }
    all_on(comm);
    ASSERT_OK(chorus_finalize(local));
    ASSERT_EQ(chorus_comm_split_type(comm, (chorus_split_type)7, 0, &local),
              CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(comm), "unknown split type 7");
    ASSERT(local == NULL);
    ASSERT_OK(chorus_barrier(comm));
    ASSERT_OK(chorus_finalize(comm));
    if (me == 0) printf("coll_select: OK on %d ranks\n", n);
    return 0;
}
