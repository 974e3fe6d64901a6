/*
 * comm_group.c - chorus_comm_create_group: a communicator of listed ranks, made by them alone
 * (the others do not call it), numbered in list order, usable beside its parent; and the
 * arguments it refuses. Run with chorus-run -np N (N >= 2); prints "comm_group: ok" per rank.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"

int main(void)
{
    chorus_comm *world = NULL, *g = NULL, *twin = NULL;
    ASSERT_OK(chorus_init(&world));
    int rank = chorus_rank(world), size = chorus_size(world);
    test_rank = rank;

    /* every rank but 1 (all of them with 2 ranks), listed from the highest down */
    int ranks[64], n = 0;
    for (int r = size - 1; r >= 0; r--)
        if (r != 1 || size == 2) ranks[n++] = r;
    int member = size == 2 || rank != 1;
    if (member) {
        ASSERT_OK(chorus_comm_create_group(world, n, ranks, 7, &g));
        ASSERT_OK(chorus_comm_create_group(world, n, ranks, 8, &twin));
        ASSERT_EQ(chorus_size(g), n);
        ASSERT_EQ(ranks[chorus_rank(g)], rank);
        int64_t v = rank, sum = 0, want = 0;
        for (int i = 0; i < n; i++) want += ranks[i];
        ASSERT_OK(chorus_allreduce(g, &v, &sum, 1, CHORUS_INT64, CHORUS_SUM));
        ASSERT_EQ(sum, want);
        /* the group's rank 0 (the highest world rank) broadcasts on the twin */
        int64_t b = rank;
        ASSERT_OK(chorus_broadcast(twin, &b, 1, CHORUS_INT64, 0));
        ASSERT_EQ(b, ranks[0]);
    }
    ASSERT_OK(chorus_barrier(world)); /* the parent still works */

    int self_missing[1] = {(rank + 1) % size}, twice[2] = {rank, rank};
    chorus_comm *bad = (chorus_comm *)1;
    ASSERT_EQ(chorus_comm_create_group(world, 1, self_missing, 1, &bad), CHORUS_ERR_INVALID_ARG);
    ASSERT(bad == NULL);
    printf("comm_group: %s\n", chorus_last_error(world));
    ASSERT_EQ(chorus_comm_create_group(world, 2, twice, 1, &bad), CHORUS_ERR_INVALID_ARG);
    printf("comm_group: %s\n", chorus_last_error(world));
    if (g) chorus_finalize(g);
    if (twin) chorus_finalize(twin);
    chorus_finalize(world);
    printf("comm_group: ok\n");
    return 0;
}
