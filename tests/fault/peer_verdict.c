/* peer_verdict.c - rank 0 fails on its own and tells the others, who fail on its verdict: the
 * shape of a failed --resume ("cannot resume: see rank 0"). Rank 0 broadcasts that it cannot
 * go on, then takes its time (a second) before it exits with status 2, so that the others,
 * which report rank 0 as the cause (chorus_report_peer_failure) and exit with status 1 at
 * once, end first. chorus-run must still name rank 0 as the rank that failed first
 * (tests/scripts/launcher_fail.sh verdict).
 * Usage: chorus-run -np N peer_verdict */
#include <stdint.h>
#include <unistd.h>

#include "harness.h"

int main(void)
{
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    test_rank = chorus_rank(c);
    int64_t ok = test_rank != 0;
    ASSERT_OK(chorus_broadcast(c, &ok, 1, CHORUS_INT64, 0));
    if (test_rank == 0) {
        sleep(1);
        printf("rank 0: the checkpoint is damaged; cannot go on\n");
        chorus_finalize(c);
        return 2;
    }
    ASSERT(!ok);
    ASSERT(chorus_report_peer_failure(c, test_rank) == CHORUS_ERR_INVALID_ARG);
    ASSERT(chorus_report_peer_failure(c, chorus_size(c)) == CHORUS_ERR_INVALID_ARG);
    ASSERT_OK(chorus_report_peer_failure(c, 0));
    printf("rank %d: cannot go on: see rank 0\n", test_rank);
    chorus_finalize(c);
    return 1;
}
