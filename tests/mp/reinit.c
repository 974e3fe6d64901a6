/* reinit.c - one process forms a world, finalizes it and forms a second one in the same job:
 * each world's allreduce is correct, and the second world meets at its own store (under mpirun
 * across hosts, a fresh address shared through PMIx; tests/net/mpirun.sh). */
#include "harness.h"

int main(void)
{
    for (int round = 0; round < 2; round++) {
        chorus_comm *c;
        ASSERT_OK(chorus_init(&c));
        int n = chorus_size(c), me = test_rank = chorus_rank(c);
        int32_t v = me + 1 + 100 * round, sum = 0;
        ASSERT_OK(chorus_allreduce(c, &v, &sum, 1, CHORUS_INT32, CHORUS_SUM));
        ASSERT_EQ(sum, n * (n + 1) / 2 + 100 * round * n);
        if (me == 0) printf("reinit: world %d of %d ranks ok\n", round + 1, n);
        chorus_finalize(c);
    }
    return 0;
}
