/* hier.c - collectives of a job that spans hosts (started by tests/net/hier.sh on the namespace
 * cluster): allreduce, broadcast and allgather by the rules (the hierarchical path where a host
 * has several ranks) and forced to each algorithm, every result compared bit for bit with a
 * serial reference computed here in the documented order:
 *   flat allreduce (oneshot, direct_ring): ((x_0 + x_1) + x_2) + ... in rank order;
 *   hier: each host's ranks folded in rank order, then the host partials in host order;
 * so every rank holds the same bits, and the algorithms agree bit for bit on exact data (small
 * integers in floats) and wherever the orders coincide (one rank per host); a communicator
 * split from the world takes the same path. The host layout is learnt from chorus_local_rank
 * (a host's ranks are consecutive). */
#include <math.h>

#include "coll/comm.h"
#include "harness.h"

static chorus_comm *comm;
static int P, me, nhosts, host_lo[64], host_n[64];

/* Rank q's input element i: not exact in float (the order of a sum shows), or small integers. */
static float input(int q, size_t i, int exact)
{
    if (exact) return (float)((q * 7 + (int)(i % 13)) % 11);
    return 0.1f * (float)(q + 1) + 1e-3f * (float)(i % 1000) + 1e4f * (float)(q == 1);
}

static float fold_rank(size_t i, int exact)
{
    float acc = input(0, i, exact);
    for (int q = 1; q < P; q++) acc = acc + input(q, i, exact);
    return acc;
}

static float fold_host(size_t i, int exact)
{
    float acc = 0;
    for (int h = 0; h < nhosts; h++) {
        float part = input(host_lo[h], i, exact);
        for (int q = host_lo[h] + 1; q < host_lo[h] + host_n[h]; q++)
            part = part + input(q, i, exact);
        acc = h ? acc + part : part;
    }
    return acc;
}

static void learn_layout(void)
{
    int32_t lr = chorus_local_rank(comm), all[64];
    ASSERT(P <= 64);
    ASSERT_OK(chorus_allgather(comm, &lr, all, 1, CHORUS_INT32));
    for (int q = 0; q < P; q++) {
        if (all[q] == 0) host_lo[nhosts++] = q;
        host_n[nhosts - 1]++;
    }
}

/* The allreduce named algo (NULL: the rules) of count floats; hier_order: which fold to expect. */
static void check_allreduce(const char *algo, size_t count, int hier_order, int exact, int inplace)
{
    test_set_config(comm, "CHORUS_ALGO_ALLREDUCE", algo);
    float *in = malloc(sizeof(float) * count), *out = malloc(sizeof(float) * count);
    ASSERT(in && out);
    for (size_t i = 0; i < count; i++) in[i] = input(me, i, exact);
    float *dst = inplace ? in : out;
    ASSERT_OK(chorus_allreduce(comm, in, dst, count, CHORUS_FLOAT32, CHORUS_SUM));
    for (size_t i = 0; i < count; i++) {
        float want = hier_order ? fold_host(i, exact) : fold_rank(i, exact);
        if (memcmp(&dst[i], &want, sizeof(float)))
            test_fail(__FILE__, __LINE__,
                      "allreduce %s of %zu floats%s: element %zu is %a, the %s-order fold is %a",
                      algo ? algo : "(rules)", count, exact ? " (exact)" : "", i, (double)dst[i],
                      hier_order ? "host" : "rank", (double)want);
    }
    free(in);
    free(out);
}

/* AVG of doubles and MAX of int32 (exact whatever the order). */
static void check_ops(const char *algo, size_t count)
{
    test_set_config(comm, "CHORUS_ALGO_ALLREDUCE", algo);
    double *d = malloc(sizeof(double) * count);
    int32_t *m = malloc(sizeof(int32_t) * count);
    ASSERT(d && m);
    for (size_t i = 0; i < count; i++) {
        d[i] = (double)(me + 1) * 2.0 + (double)(i % 5);
        m[i] = (int32_t)((me * 31 + (int)i) % 97) - 40;
    }
    ASSERT_OK(chorus_allreduce(comm, d, d, count, CHORUS_FLOAT64, CHORUS_AVG));
    ASSERT_OK(chorus_allreduce(comm, m, m, count, CHORUS_INT32, CHORUS_MAX));
    for (size_t i = 0; i < count; i++) {
        double sum = 0;
        int32_t mx = INT32_MIN;
        for (int q = 0; q < P; q++) {
            sum += (double)(q + 1) * 2.0 + (double)(i % 5);
            int32_t v = (int32_t)((q * 31 + (int)i) % 97) - 40;
            mx = v > mx ? v : mx;
        }
        ASSERT_EQ(d[i] == sum / P, 1);
        ASSERT_EQ(m[i], mx);
    }
    free(d);
    free(m);
}

static void check_broadcast(const char *algo, size_t count)
{
    test_set_config(comm, "CHORUS_ALGO_BROADCAST", algo);
    uint32_t *b = malloc(sizeof(uint32_t) * count);
    ASSERT(b);
    for (int root = 0; root < P; root++) {
        for (size_t i = 0; i < count; i++) b[i] = me == root ? (uint32_t)(root * 1000003 + i) : 0;
        ASSERT_OK(chorus_broadcast(comm, b, count * 4, CHORUS_UINT8, root));
        for (size_t i = 0; i < count; i++)
            if (b[i] != (uint32_t)(root * 1000003 + i))
                test_fail(__FILE__, __LINE__, "broadcast %s of %zu words from %d: word %zu wrong",
                          algo ? algo : "(rules)", count, root, i);
    }
    free(b);
}

static void check_allgather(const char *algo, size_t count)
{
    test_set_config(comm, "CHORUS_ALGO_ALLGATHER", algo);
    int32_t *mine = malloc(sizeof(int32_t) * count), *all = malloc(sizeof(int32_t) * count * P);
    ASSERT(mine && all);
    for (size_t i = 0; i < count; i++) mine[i] = me * 1000003 + (int32_t)i;
    ASSERT_OK(chorus_allgather(comm, mine, all, count, CHORUS_INT32));
    for (int q = 0; q < P; q++)
        for (size_t i = 0; i < count; i++)
            if (all[(size_t)q * count + i] != q * 1000003 + (int32_t)i)
                test_fail(__FILE__, __LINE__, "allgather %s of %zu: rank %d's element %zu wrong",
                          algo ? algo : "(rules)", count, q, i);
    free(mine);
    free(all);
}

int main(void)
{
    ASSERT_OK(chorus_init(&comm));
    P = chorus_size(comm);
    me = test_rank = chorus_rank(comm);
    learn_layout();
    int several = P > nhosts; /* the rules take hier when some host has several ranks */
    static const size_t counts[] = {1, 5, 1000, 100003, 1 << 20};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        size_t n = counts[k];
        check_allreduce(NULL, n, several, 0, k & 1);
        check_allreduce("hier", n, 1, 0, !(k & 1));
        check_allreduce(n * 4 <= 32768 ? "oneshot" : "direct_ring", n, 0, 0, k & 1);
        /* exact data: every algorithm gives the same bits */
        check_allreduce("hier", n, 1, 1, 0);
        check_allreduce("direct_ring", n, 0, 1, 1);
        check_allreduce("ring", n, 0, 1, 0);
    }
    /* count 0 takes part in the call's agreement, and moves nothing */
    float none = 7;
    ASSERT_OK(chorus_allreduce(comm, &none, &none, 0, CHORUS_FLOAT32, CHORUS_SUM));
    ASSERT_OK(chorus_broadcast(comm, &none, 0, CHORUS_FLOAT32, P - 1));
    ASSERT_OK(chorus_allgather(comm, &none, &none, 0, CHORUS_FLOAT32));
    ASSERT(none == 7);
    /* small TCP segments: the pipelined rounds of the hierarchical allreduce, many of them */
    test_set_config(comm, "CHORUS_TCP_SEGMENT", "4096");
    check_allreduce("hier", 100003, 1, 0, 0);
    check_allreduce("hier", 1 << 20, 1, 0, 1);
    check_ops("hier", 100003);
    test_set_config(comm, "CHORUS_TCP_ONESHOT_MAX", "0"); /* rounds down to a single element */
    check_allreduce("hier", 1, 1, 0, 0);
    check_allreduce("hier", 5, 1, 0, 1);
    check_ops("hier", 7);
    test_set_config(comm, "CHORUS_TCP_ONESHOT_MAX", NULL);
    test_set_config(comm, "CHORUS_TCP_SEGMENT", NULL);
    check_ops(NULL, 100003);
    check_ops("hier", 7);
    check_ops("direct_ring", 100003);
    static const size_t bcounts[] = {1, 1000, 300001};
    static const size_t gcounts[] = {1, 999, 200003};
    for (size_t k = 0; k < 3; k++) {
        check_broadcast(NULL, bcounts[k]);
        check_broadcast("hier", bcounts[k]);
        check_broadcast("chain", bcounts[k]);
        check_allgather(NULL, gcounts[k]);
        check_allgather("hier", gcounts[k]);
        check_allgather("ring", gcounts[k]);
    }
    /* a communicator split from the world (as the training runtime's) takes the same path */
    chorus_comm *world = comm, *dup = NULL;
    ASSERT_OK(chorus_comm_split(world, 0, me, &dup));
    ASSERT_EQ(dup->hier != NULL, world->hier != NULL);
    comm = dup;
    check_allreduce(NULL, 100003, several, 0, 0);
    check_broadcast(NULL, 1000);
    check_allgather(NULL, 999);
    ASSERT_OK(chorus_finalize(dup));
    comm = world;
    if (me == 0)
        printf("hier: OK (%d ranks on %d hosts: allreduce, broadcast, allgather by the rules and "
               "forced, bitwise against the serial folds)\n",
               P, nhosts);
    ASSERT_OK(chorus_finalize(comm));
    return 0;
}
