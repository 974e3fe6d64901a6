/*
 * nn_balance.c - dynamic load balancing's share rule and the sampler under uneven shares:
 * shares are integers that sum exactly to the global batch, never below the minimum, in
 * proportion to the speeds (within one sample of the exact quota); and with any shares, set
 * before any step, every sample of an epoch is seen exactly once, each rank taking exactly its
 * share of every full step.
 */
#include <math.h>
#include <string.h>

#include "chorus/nn.h"
#include "harness.h"

static void test_apportion_exact_and_proportional(void)
{
    nn_rng r;
    nn_rng_seed(&r, 42);
    size_t out[16];
    double w[16];
    for (int trial = 0; trial < 2000; trial++) {
        int n = 1 + (int)nn_rng_below(&r, 16);
        size_t total = (size_t)n + nn_rng_below(&r, 1000);
        size_t min_each = nn_rng_below(&r, total / (size_t)n + 1);
        double sum = 0;
        for (int i = 0; i < n; i++) sum += w[i] = nn_rng_below(&r, 4) ? nn_rng_uniform(&r) : 0.0;
        ASSERT_NN_OK(nn_balance_apportion(w, n, total, min_each, out));
        size_t got = 0;
        for (int i = 0; i < n; i++) {
            got += out[i];
            ASSERT(out[i] >= min_each);
        }
        ASSERT_EQ(got, total);
        /* without a minimum, every part is within one sample of its exact quota */
        ASSERT_NN_OK(nn_balance_apportion(w, n, total, 0, out));
        for (int i = 0; i < n; i++) {
            double q = sum > 0 ? (double)total * w[i] / sum : (double)total / n;
            ASSERT(fabs((double)out[i] - q) < 1.0 + 1e-9);
        }
    }
    /* ties of the fractional parts go to the lower index: 10 over three equal weights */
    double eq[3] = {1, 1, 1};
    ASSERT_NN_OK(nn_balance_apportion(eq, 3, 10, 0, out));
    ASSERT_EQ(out[0], 4);
    ASSERT_EQ(out[1], 3);
    ASSERT_EQ(out[2], 3);
    double bad[2] = {1, -1};
    ASSERT_EQ(nn_balance_apportion(bad, 2, 10, 0, out), CHORUS_ERR_INVALID_ARG);
    ASSERT_EQ(nn_balance_apportion(eq, 3, 5, 2, out), CHORUS_ERR_INVALID_ARG);
}

static void test_shares_follow_speed(void)
{
    size_t out[4];
    /* rank 1 takes twice as long per sample: a third of the batch */
    double t2[2] = {1e-3, 2e-3};
    ASSERT_NN_OK(nn_balance_shares(t2, 2, 256, out));
    ASSERT_EQ(out[0], 171);
    ASSERT_EQ(out[1], 85);
    /* a rank a thousand times slower keeps the minimum, floor(G / (4 world)) */
    double t4[4] = {1e-3, 1e-3, 1.0, 1e-3};
    ASSERT_NN_OK(nn_balance_shares(t4, 4, 256, out));
    ASSERT_EQ(nn_balance_min_share(256, 4), 16);
    ASSERT_EQ(out[2], 16);
    ASSERT_EQ(out[0] + out[1] + out[2] + out[3], 256);
    ASSERT_EQ(nn_balance_max_share(256, 4), 256 - 3 * 16);
    /* an unmeasured rank (time 0) gets the minimum too; a tiny batch at least 1 each */
    double t3[3] = {0, 1e-3, 1e-3};
    ASSERT_NN_OK(nn_balance_shares(t3, 3, 3, out));
    ASSERT_EQ(out[0], 1);
    ASSERT_EQ(out[1] + out[2], 2);
    /* fewer samples than ranks cannot be balanced */
    ASSERT_EQ(nn_balance_shares(t3, 3, 2, out), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "at least one sample per rank");
}

static void test_move_only_for_a_real_gain(void)
{
    size_t even[2] = {128, 128}, near[2] = {130, 126}, third[2] = {171, 85};
    double equal[2] = {1e-3, 1.03e-3}, slow[2] = {1e-3, 2e-3}, unknown[2] = {1e-3, 0};
    /* 3% apart: the predicted saving (under 2%) is noise, the even split stays */
    ASSERT_EQ(nn_balance_worth_moving(even, near, equal, 2), 0);
    /* half speed: 256 ms -> 171 ms per 1000 samples' worth, a real gain */
    ASSERT_EQ(nn_balance_worth_moving(even, third, slow, 2), 1);
    ASSERT_EQ(nn_balance_worth_moving(third, even, slow, 2), 0);
    ASSERT_EQ(nn_balance_worth_moving(even, third, unknown, 2), 1);
}

/* A gain under NN_BALANCE_MIN_GAIN moves the shares only when NN_BALANCE_PERSIST windows in a
 * row each predict it on their own; noise that points both ways does not. */
static void test_small_gain_must_persist(void)
{
    size_t even[2] = {128, 128}, next[2] = {132, 124};
    /* rank 1 6% slower: moving 4 samples to rank 0 saves about 2.7% of a step */
    double steady[3 * 2] = {1e-3, 1.06e-3, 1e-3, 1.065e-3, 1e-3, 1.055e-3};
    double g = nn_balance_gain(even, next, steady, 2);
    ASSERT_EQ(g > NN_BALANCE_SMALL_GAIN && g < NN_BALANCE_MIN_GAIN, 1);
    ASSERT_EQ(nn_balance_worth_moving(even, next, steady, 2), 0);
    ASSERT_EQ(nn_balance_persists(even, next, steady, 3, 2), 1);
    /* fewer windows than NN_BALANCE_PERSIST are not enough */
    ASSERT_EQ(nn_balance_persists(even, next, steady, 2, 2), 0);
    /* one window of the three pointing the other way (equal ranks' noise): hold */
    double noisy[3 * 2] = {1e-3, 1.06e-3, 1.03e-3, 1e-3, 1e-3, 1.06e-3};
    ASSERT_EQ(nn_balance_persists(even, next, noisy, 3, 2), 0);
    /* a window where the ranks measured nearly equal: hold */
    double flat[3 * 2] = {1e-3, 1.06e-3, 1e-3, 1.01e-3, 1e-3, 1.06e-3};
    ASSERT_EQ(nn_balance_persists(even, next, flat, 3, 2), 0);
    /* an unmeasured rank in a window predicts nothing */
    double gap[3 * 2] = {1e-3, 1.06e-3, 1e-3, 0, 1e-3, 1.06e-3};
    ASSERT_EQ(nn_balance_persists(even, next, gap, 3, 2), 0);
    /* moving back costs: a negative gain */
    ASSERT_EQ(nn_balance_gain(next, even, steady, 2) < 0, 1);
}

/* One epoch over `world` samplers whose shares are redrawn before every step (the trainer
 * changes them only every N steps; any step is the harder case). */
static void epoch_with_shares(size_t n, size_t G, int world, nn_rng *r, int *seen)
{
    nn_sampler s[8];
    size_t sh[8];
    for (int k = 0; k < world; k++) ASSERT_NN_OK(nn_sampler_init(&s[k], n, G, k, world, 3));
    memset(seen, 0, n * sizeof(int));
    size_t steps = nn_sampler_steps(&s[0]);
    for (size_t st = 0; st < steps; st++) {
        double w[8];
        for (int k = 0; k < world; k++) w[k] = nn_rng_uniform(r);
        size_t min = nn_rng_below(r, 2) ? nn_balance_min_share(G, world) : 0;
        ASSERT_NN_OK(nn_balance_apportion(w, world, G, min, sh));
        size_t total = 0, g = 0;
        for (int k = 0; k < world; k++) {
            ASSERT_NN_OK(nn_sampler_set_shares(&s[k], sh));
            const uint32_t *idx;
            size_t c = nn_sampler_batch(&s[k], st, &idx, &g);
            ASSERT(c <= nn_sampler_max_local(&s[k]));
            if (g == G) ASSERT_EQ(c, sh[k]);
            for (size_t i = 0; i < c; i++) seen[idx[i]]++;
            total += c;
        }
        ASSERT_EQ(total, g);
    }
    for (int k = 0; k < world; k++) nn_sampler_free(&s[k]);
}

static void test_sampler_once_per_epoch_with_shares(void)
{
    enum { N = 1003 };
    static int seen[N];
    nn_rng r;
    nn_rng_seed(&r, 7);
    for (int trial = 0; trial < 200; trial++) {
        int world = 1 + (int)nn_rng_below(&r, 8);
        size_t G = (size_t)world + nn_rng_below(&r, 300);
        epoch_with_shares(N, G, world, &r, seen);
        for (int i = 0; i < N; i++)
            if (seen[i] != 1) ASSERT_EQ(seen[i], 1); /* names the count when it fails */
    }
    /* shares that do not sum to G are refused and change nothing; NULL restores the even split */
    nn_sampler s;
    ASSERT_NN_OK(nn_sampler_init(&s, 100, 10, 1, 2, 1));
    size_t bad[2] = {3, 3}, good[2] = {8, 2};
    ASSERT_EQ(nn_sampler_set_shares(&s, bad), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(nn_last_error(), "sum to 6, not to the global batch 10");
    const uint32_t *idx, *idx0;
    ASSERT_EQ(nn_sampler_batch(&s, 0, &idx, NULL), 5);
    ASSERT_NN_OK(nn_sampler_set_shares(&s, good));
    ASSERT_EQ(nn_sampler_batch(&s, 0, &idx0, NULL), 2);
    ASSERT(idx0 == s.perm + 8);
    ASSERT_EQ(nn_sampler_max_local(&s), 8);
    ASSERT_NN_OK(nn_sampler_set_shares(&s, NULL));
    ASSERT_EQ(nn_sampler_batch(&s, 0, &idx, NULL), 5);
    nn_sampler_free(&s);
}

int main(void)
{
    TEST_RUN(test_apportion_exact_and_proportional);
    TEST_RUN(test_shares_follow_speed);
    TEST_RUN(test_move_only_for_a_real_gain);
    TEST_RUN(test_small_gain_must_persist);
    TEST_RUN(test_sampler_once_per_epoch_with_shares);
    return 0;
}
