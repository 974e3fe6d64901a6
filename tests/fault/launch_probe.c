/*
 * launch_probe.c - a rank for the launcher's failure tests (tests/scripts/launcher_fail.sh):
 *
 *   launch_probe [--steps S] [--step-ms MS] [--linger S] [--job TAG] [--tag MARK]
 *
 * Joins the job, prints "ready rank R of N pid P", then runs S allreduces (0: forever), one
 * every MS milliseconds (default 10), each summing every rank's step number and checking it.
 * With --job, the ranks first gather each other's TAG and exit with status 5 and a line
 * "merged: rank R has job X, rank Q has job Y" if they differ (two jobs that formed one).
 * After S steps it prints "job TAG done" and exits 0.
 *
 * The first failed call prints "error: <code>: <detail>" on stderr; with --linger the rank
 * then goes on living for S seconds, as a program that catches the error and keeps running
 * would, before it exits with status 3. --tag only marks the process for pgrep.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static void sleep_ms(double ms)
{
    struct timespec ts = {(time_t)(ms / 1000),
                          (long)((ms - (double)(long)(ms / 1000) * 1000) * 1e6)};
    nanosleep(&ts, NULL);
}

static void failed(chorus_comm *c, chorus_result r, double linger)
{
    fprintf(stderr, "error: %s: %s\n", chorus_result_name(r), chorus_last_error(c));
    fflush(stderr);
    for (double left = linger * 1000; left > 0; left -= 100) sleep_ms(100);
    exit(3);
}

/* Every rank's job tag must be this rank's. */
static void check_job(chorus_comm *c, const char *job, double linger)
{
    char mine[32] = {0};
    snprintf(mine, sizeof(mine), "%s", job);
    int n = chorus_size(c);
    char *all = calloc((size_t)n, sizeof(mine));
    ASSERT(all);
    chorus_result r = chorus_allgather(c, mine, all, sizeof(mine), CHORUS_UINT8);
    if (r != CHORUS_OK) failed(c, r, linger);
    for (int q = 0; q < n; q++)
        if (strncmp(all + q * sizeof(mine), mine, sizeof(mine))) {
            printf("merged: rank %d has job %s, rank %d has job %.31s\n", chorus_rank(c), mine, q,
                   all + q * sizeof(mine));
            fflush(stdout);
            exit(5);
        }
    free(all);
}

int main(int argc, char **argv)
{
    long steps = 0;
    double step_ms = 10, linger = 0;
    const char *job = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps"))
            steps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--step-ms"))
            step_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--linger"))
            linger = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--job"))
            job = argv[i + 1];
        else if (strcmp(argv[i], "--tag")) {
            fprintf(stderr, "launch_probe: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    chorus_comm *c;
    chorus_result r = chorus_init(&c);
    if (r != CHORUS_OK) {
        fprintf(stderr, "error: %s: %s\n", chorus_result_name(r), chorus_last_error(NULL));
        return 3;
    }
    int rank = chorus_rank(c), size = chorus_size(c);
    test_rank = rank;
    if (job) check_job(c, job, linger);
    printf("ready rank %d of %d pid %d\n", rank, size, (int)getpid());
    fflush(stdout);
    for (long s = 1; steps == 0 || s <= steps; s++) {
        int64_t v = s, sum = 0;
        r = chorus_allreduce(c, &v, &sum, 1, CHORUS_INT64, CHORUS_SUM);
        if (r != CHORUS_OK) failed(c, r, linger);
        ASSERT_EQ(sum, s * size);
        if (step_ms > 0) sleep_ms(step_ms);
    }
    printf("job %s done\n", job ? job : "-");
    chorus_finalize(c);
    return 0;
}
