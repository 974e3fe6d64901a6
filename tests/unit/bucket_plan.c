/*
 * bucket_plan.c - chorus_engine_bucket_plan: the walk from the last item down, the closing
 * rule (a bucket closes once it holds its cap), the first bucket's own cap, items of 0 bytes,
 * cap 0, and the errors a caller sees.
 */
#include <string.h>

#include "chorus/engine.h"
#include "harness.h"

static void expect(const size_t *bytes, int n, size_t cap, size_t first, const int *want,
                   int want_n)
{
    int got[64], nb = -7;
    ASSERT(n <= 64);
    memset(got, 0x55, sizeof(got));
    ASSERT_OK(chorus_engine_bucket_plan(bytes, n, cap, first, got, &nb));
    ASSERT_EQ(nb, want_n);
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i])
            test_fail(__FILE__, __LINE__, "item %d: bucket %d, expected %d (cap %zu, first %zu)", i,
                      got[i], want[i], cap, first);
    }
}

static void test_rules(void)
{
    /* backward order is 5,4,...,0: the last items fill bucket 0 */
    const size_t b[] = {400, 100, 100, 300, 50, 60};
    /* cap 200: {5:60,4:50,3:300} reaches 410 >= 200 and closes; {2,1} = 200 closes; {0} */
    expect(b, 6, 200, 200, (const int[]){2, 1, 1, 0, 0, 0}, 3);
    /* cap 0: one bucket per item, the last item first */
    expect(b, 6, 0, 0, (const int[]){5, 4, 3, 2, 1, 0}, 6);
    /* a cap larger than everything: one bucket */
    expect(b, 6, 1 << 20, 1 << 20, (const int[]){0, 0, 0, 0, 0, 0}, 1);
    /* a small first bucket (DDP's idea: the first allreduce starts early), then big ones */
    expect(b, 6, 1 << 20, 1, (const int[]){1, 1, 1, 1, 1, 0}, 2);
    /* exactly at the cap closes: {5:60,4:50} = 110 */
    expect(b, 6, 110, 110, (const int[]){3, 2, 2, 1, 0, 0}, 4);
    /* items of 0 bytes (layers without parameters, frozen ones) take no part */
    const size_t z[] = {0, 8, 0, 8, 0};
    expect(z, 5, 8, 8, (const int[]){-1, 1, -1, 0, -1}, 2);
    expect(z, 5, 100, 100, (const int[]){-1, 0, -1, 0, -1}, 1);
    /* nothing at all */
    const size_t none[] = {0, 0};
    expect(none, 2, 8, 8, (const int[]){-1, -1}, 0);
    int nb = -1;
    ASSERT_OK(chorus_engine_bucket_plan(NULL, 0, 8, 8, NULL, &nb));
    ASSERT_EQ(nb, 0);
    /* nbuckets may be NULL */
    int one[1];
    const size_t b1[] = {3};
    ASSERT_OK(chorus_engine_bucket_plan(b1, 1, 8, 8, one, NULL));
    ASSERT_EQ(one[0], 0);
}

static void test_errors(void)
{
    int out[2], nb = 9;
    const size_t b[] = {1, 2};
    ASSERT_EQ(chorus_engine_bucket_plan(b, -1, 8, 8, out, &nb), CHORUS_ERR_INVALID_ARG);
    ASSERT_EQ(nb, 0);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "n = -1");
    ASSERT_EQ(chorus_engine_bucket_plan(NULL, 2, 8, 8, out, &nb), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "bytes NULL");
    ASSERT_EQ(chorus_engine_bucket_plan(b, 2, 8, 8, NULL, &nb), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "bucket_of NULL");
}

int main(void)
{
    test_rules();
    test_errors();
    printf("bucket_plan: ok\n");
    return 0;
}
