/* survivor_blame.c - allreduces of changing sizes until one fails; for a rank killed from
 * outside (tests/scripts/survivor_blame.sh) at any moment. Each rank prints its pid once
 * running, and the error when a call fails, then exits 3; with `silent` it prints nothing when
 * a call fails and waits to be stopped (a rank that dies before it can print its error:
 * tests/scripts/launcher_reported.sh).
 * Usage: chorus-run -np N survivor_blame [silent] */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "harness.h"

int main(int argc, char **argv)
{
    int silent = argc > 1 && !strcmp(argv[1], "silent");
    static const size_t counts[] = {1, 1000, 250000, 1000000, 64};
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    test_rank = chorus_rank(c);
    float *x = calloc(1000000, sizeof(float));
    ASSERT(x);
    printf("rank %d pid %d running\n", test_rank, (int)getpid());
    fflush(stdout);
    double start = chorus__now();
    for (int it = 0;; it++) {
        size_t n = counts[it % 5];
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
