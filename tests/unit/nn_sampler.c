/*
 * nn_sampler.c - the distributed sampler: per epoch every sample is seen exactly once over
 * all ranks, shards are disjoint, the samples of each global step do not depend on the world
 * size, uneven last batches are split with at most one sample of difference, and the order
 * changes from epoch to epoch but is reproducible from the seed.
 */
#include <string.h>

#include "chorus/nn.h"
#include "harness.h"

/* Runs one epoch on `world` samplers; seen[i] counts how often sample i came up, owner[i]
 * records the rank. Returns the sum over steps of a hash of each global step's sample set
 * in rank order, which must not depend on the world size. */
static uint64_t run_epoch(size_t n, size_t G, int world, uint64_t seed, uint64_t epoch, int *seen,
                          int *owner, int *max_diff)
{
    nn_sampler s[8];
    for (int r = 0; r < world; r++) {
        ASSERT_NN_OK(nn_sampler_init(&s[r], n, G, r, world, seed));
        nn_sampler_set_epoch(&s[r], epoch);
    }
    memset(seen, 0, n * sizeof(int));
    uint64_t h = 0;
    *max_diff = 0;
    size_t steps = nn_sampler_steps(&s[0]);
    ASSERT_EQ(steps, (n + G - 1) / G);
    for (size_t st = 0; st < steps; st++) {
        size_t total = 0, lo = (size_t)-1, hi = 0;
        uint64_t pos = 0;
        for (int r = 0; r < world; r++) {
            const uint32_t *idx;
            size_t g;
            size_t c = nn_sampler_batch(&s[r], st, &idx, &g);
            ASSERT(c <= nn_sampler_max_local(&s[r]));
            ASSERT_EQ(g, st + 1 < steps ? G : n - (steps - 1) * G);
            total += c;
            if (c < lo) lo = c;
            if (c > hi) hi = c;
            for (size_t i = 0; i < c; i++) {
                seen[idx[i]]++;
                owner[idx[i]] = r;
                h += (pos++ + 1) * 0x9e3779b97f4a7c15ULL * (idx[i] + 1);
            }
        }
        ASSERT_EQ(total, st + 1 < steps ? G : n - (steps - 1) * G);
        if ((int)(hi - lo) > *max_diff) *max_diff = (int)(hi - lo);
    }
    for (int r = 0; r < world; r++) nn_sampler_free(&s[r]);
    return h;
}

static void test_once_per_epoch_any_world(void)
{
    enum { N = 1003 }; /* prime-ish: uneven everywhere */
    static int seen[N], owner[N];
    size_t G = 64;
    uint64_t ref = 0;
    for (int world = 1; world <= 7; world++) {
        int diff;
        uint64_t h = run_epoch(N, G, world, 11, 0, seen, owner, &diff);
        int once = 1;
        for (int i = 0; i < N; i++) once &= seen[i] == 1;
        ASSERT(once);
        ASSERT(diff <= 1);
        if (world == 1)
            ref = h;
        else
            ASSERT_EQ(h, ref); /* same samples per global step, in the same order */
    }
}

static void test_reshuffle_and_reproduce(void)
{
    enum { N = 500 };
    nn_sampler a, b;
    ASSERT_NN_OK(nn_sampler_init(&a, N, 50, 0, 1, 5));
    ASSERT_NN_OK(nn_sampler_init(&b, N, 50, 0, 1, 5));
    nn_sampler_set_epoch(&a, 3);
    nn_sampler_set_epoch(&b, 3);
    ASSERT(memcmp(a.perm, b.perm, N * sizeof(uint32_t)) == 0);
    nn_sampler_set_epoch(&b, 4);
    int same = 0;
    for (int i = 0; i < N; i++) same += a.perm[i] == b.perm[i];
    ASSERT(same < N / 10); /* a new order each epoch */
    /* a different seed gives a different order */
    nn_sampler c;
    ASSERT_NN_OK(nn_sampler_init(&c, N, 50, 0, 1, 6));
    nn_sampler_set_epoch(&c, 3);
    same = 0;
    for (int i = 0; i < N; i++) same += a.perm[i] == c.perm[i];
    ASSERT(same < N / 10);
    /* and not the identity */
    nn_sampler_set_epoch(&a, 0);
    same = 0;
    for (int i = 0; i < N; i++) same += a.perm[i] == (uint32_t)i;
    ASSERT(same < N / 10);
    nn_sampler_free(&a);
    nn_sampler_free(&b);
    nn_sampler_free(&c);
}

static void test_disjoint_shards_and_empty_ranks(void)
{
    /* 10 samples, global batch 4, 3 ranks: last step has 2 samples, one rank gets none. */
    int seen[10], owner[10], diff;
    run_epoch(10, 4, 3, 1, 2, seen, owner, &diff);
    for (int i = 0; i < 10; i++) ASSERT_EQ(seen[i], 1);
    nn_sampler s;
    ASSERT_NN_OK(nn_sampler_init(&s, 10, 4, 2, 3, 1));
    const uint32_t *idx;
    size_t g;
    ASSERT_NN_OK(nn_sampler_batch(&s, 2, &idx, &g));
    ASSERT_EQ(g, 2);
    ASSERT_EQ(nn_sampler_batch(&s, 0, &idx, &g), 1); /* 4 = 2 + 1 + 1 */
    ASSERT_EQ(nn_sampler_max_local(&s), 2);
    nn_sampler_free(&s);
    /* more ranks than samples in a step */
    run_epoch(5, 5, 7, 9, 0, seen, owner, &diff);
    for (int i = 0; i < 5; i++) ASSERT_EQ(seen[i], 1);
    ASSERT(diff <= 1);
    /* bad arguments are refused */
    ASSERT_EQ(nn_sampler_init(&s, 10, 4, 3, 3, 1), CHORUS_ERR_INVALID_ARG);
    ASSERT_EQ(nn_sampler_init(&s, 0, 4, 0, 1, 1), CHORUS_ERR_INVALID_ARG);
    ASSERT_EQ(nn_sampler_init(&s, 10, 0, 0, 1, 1), CHORUS_ERR_INVALID_ARG);
}

int main(void)
{
    TEST_RUN(test_once_per_epoch_any_world);
    TEST_RUN(test_reshuffle_and_reproduce);
    TEST_RUN(test_disjoint_shards_and_empty_ranks);
    return 0;
}
