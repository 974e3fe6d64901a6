/* peer_death.c - a rank killed with SIGKILL in the middle of allreduces: every other rank
 * returns an error that names the dead rank, within the timeout, and exits non-zero.
 * Usage: chorus-run -np N peer_death VICTIM [BYTES] */
#include <signal.h>
#include <unistd.h>

#include "base/base.h"
#include "harness.h"

int main(int argc, char **argv)
{
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    test_rank = chorus_rank(c);
    int victim = argc > 1 ? atoi(argv[1]) : 1;
    size_t count = argc > 2 ? (size_t)atol(argv[2]) / 4 : 1 << 20;
    float *x = calloc(count, sizeof(float));
    double start = chorus__now();
    for (int it = 0;; it++) {
        if (it == 5 && chorus_rank(c) == victim) kill(getpid(), SIGKILL);
        chorus_result r = chorus_allreduce(c, x, x, count, CHORUS_FLOAT32, CHORUS_SUM);
        if (r != CHORUS_OK) {
            double dt = chorus__now() - start;
            fprintf(stderr, "rank %d: allreduce failed after %.2fs: %s: %s\n", chorus_rank(c), dt,
                    chorus_strerror(r), chorus_last_error(c));
            char needle[32];
            snprintf(needle, sizeof(needle), "rank %d", victim);
            ASSERT(r == CHORUS_ERR_PEER_LOST || r == CHORUS_ERR_TIMEOUT);
            ASSERT_STR_CONTAINS(chorus_last_error(c), needle);
            /* a failed communicator fails fast from now on */
            ASSERT(chorus_barrier(c) != CHORUS_OK);
            chorus_finalize(c);
            free(x);
            return 3; /* the survivors' distinctive status */
        }
        if (chorus__now() - start > 60) test_fail(__FILE__, __LINE__, "no failure seen");
    }
}
