/* survivor_blame.c - allreduces of changing sizes until one fails; for a rank killed from
 * outside (tests/scripts/survivor_blame.sh) at any moment. Each rank prints its pid once
 * running, and the error when a call fails, then exits 3; with `silent` it prints nothing when
 * a call fails and waits to be stopped (a rank that dies before it can print its error:
 * tests/scripts/launcher_reported.sh). With `large` every call is 64 MiB, so that a kill
 * most likely lands while the ranks copy each other's memory (single copy).
 * Usage: chorus-run -np N survivor_blame [silent] [large] */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "harness.h"

int main(int argc, char **argv)
{
    int silent = 0, large = 0;
    for (int i = 1; i < argc; i++) {
        silent |= !strcmp(argv[i], "silent");
        large |= !strcmp(argv[i], "large");
    }
    static const size_t counts[] = {1, 1000, 250000, 1000000, 64};
    const size_t big = (size_t)16 << 20;
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    test_rank = chorus_rank(c);
    float *x = calloc(large ? big : 1000000, sizeof(float));
    ASSERT(x);
    printf("rank %d pid %d running\n", test_rank, (int)getpid());
    fflush(stdout);
    double start = chorus__now();
    for (int it = 0;; it++) {
        size_t n = large ? big : counts[it % 5];
        chorus_result r = chorus_allreduce(c, x, x, n, CHORUS_FLOAT32, CHORUS_SUM);
        if (r != CHORUS_OK) {
            while (silent) pause();
            printf("rank %d: allreduce of %zu failed: %s: %s\n", test_rank, n, chorus_strerror(r),
                   chorus_last_error(c));
            chorus_finalize(c);
            free(x);
            return 3;
        }
        if (chorus__now() - start > 60) test_fail(__FILE__, __LINE__, "no failure seen");
    }
}
