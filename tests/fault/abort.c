/*
 * abort.c - chorus_comm_abort ends a communicator without waiting on anyone:
 *   chorus-run -np 3 abort
 * Rank 2 stops itself (SIGSTOP) right after joining; rank 1 then aborts the communicator
 * (returns at once although a peer is stopped and another waits for it) and finalizes;
 * rank 0, blocked in an allreduce, gets CHORUS_ERR_ABORTED naming rank 1, aborts its broken
 * communicator too (a no-op that must not block), wakes rank 2 (SIGCONT), whose next call
 * fails at once with the same error. Every rank exits 0 when all of that holds.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static char proc_state(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return '?';
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] && p[2] ? p[2] : '?';
}

int main(void)
{
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    int rank = chorus_rank(c);
    test_rank = rank;
    ASSERT_EQ(chorus_size(c), 3);
    int32_t pids[3], me = (int32_t)getpid();
    ASSERT_OK(chorus_allgather(c, &me, pids, 1, CHORUS_INT32));
    float x[64] = {0};
    if (rank == 2) {
        raise(SIGSTOP);
        /* woken by rank 0 after the abort: the communicator is broken */
        chorus_result r = chorus_allreduce(c, x, x, 64, CHORUS_FLOAT32, CHORUS_SUM);
        ASSERT(r != CHORUS_OK);
        printf("rank 2: after SIGCONT: %s: %s\n", chorus_strerror(r), chorus_last_error(c));
    } else if (rank == 1) {
        for (int i = 0; i < 2000 && proc_state(pids[2]) != 'T'; i++) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
        ASSERT_EQ(proc_state(pids[2]), 'T');
        ASSERT_OK(chorus_comm_abort(c));
        chorus_result r = chorus_allreduce(c, x, x, 64, CHORUS_FLOAT32, CHORUS_SUM);
        ASSERT_EQ(r, CHORUS_ERR_ABORTED);
        printf("rank 1: aborted with rank 2 stopped; later calls fail at once: %s\n",
               chorus_last_error(c));
    } else {
        chorus_result r = chorus_allreduce(c, x, x, 64, CHORUS_FLOAT32, CHORUS_SUM);
        printf("rank 0: allreduce: %s: %s\n", chorus_strerror(r), chorus_last_error(c));
        ASSERT(r == CHORUS_ERR_ABORTED || r == CHORUS_ERR_PEER_LOST);
        ASSERT_STR_CONTAINS(chorus_last_error(c), "rank 1");
        ASSERT_OK(chorus_comm_abort(c)); /* already broken: returns at once */
        kill(pids[2], SIGCONT);
    }
    ASSERT_OK(chorus_finalize(c));
    return 0;
}
