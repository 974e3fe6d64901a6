/*
 * shm_jobs.c - one job of several running at once on the host: N rounds of allreduce,
 * broadcast and allgather over shared memory with inputs derived from SALT, each result
 * checked exactly. Two jobs with different salts started together would see wrong sums if
 * their segments were ever shared (names carry the job's id and a random nonce).
 *
 *   chorus-run -np P shm_jobs SALT ROUNDS
 */
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "harness.h"

int main(int argc, char **argv)
{
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    int me = chorus_rank(c), n = chorus_size(c);
    test_rank = me;
    ASSERT(n < 2 || c->shm != NULL);
    int64_t salt = argc > 1 ? atoll(argv[1]) : 1;
    int rounds = argc > 2 ? atoi(argv[2]) : 100;
    size_t count = 40000; /* pipelined: above the one-shot limit */
    int64_t *x = malloc(count * sizeof(int64_t)), *all = malloc(sizeof(int64_t) * (size_t)n);
    for (int it = 0; it < rounds; it++) {
        for (size_t i = 0; i < count; i++) x[i] = salt * 1000003 + it * 31 + (int64_t)i + me;
        ASSERT_OK(chorus_allreduce(c, x, x, count, CHORUS_INT64, CHORUS_SUM));
        for (size_t i = 0; i < count; i += 997) {
            int64_t want = n * (salt * 1000003 + it * 31 + (int64_t)i) + (int64_t)n * (n - 1) / 2;
            if (x[i] != want)
                test_fail(__FILE__, __LINE__, "job salt %lld round %d: x[%zu] = %lld, want %lld",
                          (long long)salt, it, i, (long long)x[i], (long long)want);
        }
        int64_t v = me == it % n ? salt * 7 + it : -1;
        ASSERT_OK(chorus_broadcast(c, &v, 1, CHORUS_INT64, it % n));
        ASSERT_EQ(v, salt * 7 + it);
        v = salt * 100 + me;
        ASSERT_OK(chorus_allgather(c, &v, all, 1, CHORUS_INT64));
        for (int r = 0; r < n; r++) ASSERT_EQ(all[r], salt * 100 + r);
    }
    if (me == 0) printf("shm_jobs: salt %lld: %d rounds correct\n", (long long)salt, rounds);
    free(x);
    free(all);
    chorus_finalize(c);
    return 0;
}
