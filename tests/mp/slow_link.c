/* slow_link.c - an allreduce that is slow but keeps moving must not time out: run with a small
 * CHORUS_TIMEOUT_S over a link throttled below what the whole transfer needs in that time
 * (tests/net/slow_link.sh). The result is checked exactly.
 * Usage: slow_link COUNT (ranks from the environment, torchrun style) */
#include <stdlib.h>

#include "base/base.h"
#include "harness.h"

int main(int argc, char **argv)
{
    ASSERT(argc == 2);
    size_t count = (size_t)atol(argv[1]);
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    test_rank = chorus_rank(c);
    int n = chorus_size(c);
    float *x = malloc(count * sizeof(float));
    ASSERT(x);
    for (size_t i = 0; i < count; i++) x[i] = (float)((i % 7) + test_rank);
    double t0 = chorus__now();
    chorus_result r = chorus_allreduce(c, x, x, count, CHORUS_FLOAT32, CHORUS_SUM);
    double dt = chorus__now() - t0;
    if (r != CHORUS_OK)
        test_fail(__FILE__, __LINE__, "allreduce failed after %.1f s: %s: %s", dt,
                  chorus_strerror(r), chorus_last_error(c));
    for (size_t i = 0; i < count; i++) ASSERT_EQ(x[i], (float)(n * (int)(i % 7) + n * (n - 1) / 2));
    printf("slow_link: rank %d: allreduce of %zu floats took %.1f s, results exact\n", test_rank,
           count, dt);
    chorus_finalize(c);
    free(x);
    return 0;
}
