/*
 * shm_kill.c - a rank killed with SIGKILL in the middle of a shared-memory collective.
 *
 *   chorus-run -np N shm_kill VICTIM BYTES
 *
 * Every rank loops over allreduces of BYTES (float32) over shared memory; a thread of rank
 * VICTIM kills its process after a few milliseconds, so the kill lands inside a collective
 * (copying, reducing or waiting). Every survivor must return CHORUS_ERR_PEER_LOST naming the
 * victim well within CHORUS_TIMEOUT_S, and exit with status 3. Rank 0 first prints the
 * segment's name prefix ("segment /chorus-<comm id>-") so the caller can check that nothing of
 * this job is left in /dev/shm afterwards.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll/comm.h"
#include "harness.h"
#include "transport/shm/shm.h"

static void *killer(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    kill(getpid(), SIGKILL);
    return NULL;
}

int main(int argc, char **argv)
{
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    test_rank = chorus_rank(c);
    int victim = argc > 1 ? atoi(argv[1]) : 1;
    size_t count = (argc > 2 ? (size_t)atol(argv[2]) : 4 << 20) / 4;
    ASSERT(c->shm != NULL);
    if (chorus_rank(c) == 0) {
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "%s", c->shm->name);
        *strrchr(prefix, '-') = 0;
        printf("segment %s-\n", prefix);
        fflush(stdout);
    }
    float *x = calloc(count, sizeof(float));
    ASSERT(x != NULL);
    ASSERT_OK(chorus_barrier(c));
    pthread_t th;
    if (chorus_rank(c) == victim) pthread_create(&th, NULL, killer, NULL);
    double start = chorus__now();
    for (;;) {
        chorus_result r = chorus_allreduce(c, x, x, count, CHORUS_FLOAT32, CHORUS_SUM);
        if (r != CHORUS_OK) {
            double dt = chorus__now() - start;
            fprintf(stderr, "rank %d: allreduce failed after %.3fs: %s: %s\n", chorus_rank(c), dt,
                    chorus_strerror(r), chorus_last_error(c));
            char needle[32];
            snprintf(needle, sizeof(needle), "rank %d", victim);
            ASSERT_EQ(r, CHORUS_ERR_PEER_LOST);
            ASSERT_STR_CONTAINS(chorus_last_error(c), needle);
            ASSERT(dt < chorus__config()->timeout_s);
            ASSERT(chorus_allreduce(c, x, x, count, CHORUS_FLOAT32, CHORUS_SUM) != CHORUS_OK);
            chorus_finalize(c);
            free(x);
            printf("shm_kill: rank %d survived\n", test_rank);
            return 3;
        }
        if (chorus__now() - start > 60) test_fail(__FILE__, __LINE__, "no failure seen");
    }
}
