/*
 * elastic_sgd.c - a small data-parallel "SGD" loop on a vector, for fault injection.
 *
 *   chorus-run [--elastic ...] -np N elastic_sgd [--steps S] [--commit K] [--dim D]
 *                                                 [--step-ms MS] [--tag TAG]
 *                                                 [--hold-at S --hold-sizes N1,N2,...]
 *
 * Each step the global batch of 24 samples is sharded over the ranks (sample i belongs to
 * rank i % size), every rank sums integer-valued gradients of its samples, an allreduce sums
 * the shards, and w -= sum / 64. Integers and a power-of-two learning rate make every sum
 * exact, so the result does not depend on how many ranks there were at which step: every
 * worker checks at the end that its parameters are bit for bit those of a serial reference.
 * A replayed or skipped step, or state taken from a stale rank, would change them.
 *
 * The state (w, step) is committed every K steps. Each worker checks that after re-forming
 * it never resumes before its own last commit.
 *
 * --hold-at S --hold-sizes 3,2: from the first commit at or after step S on, the ranks stay
 * at each commit point (committing again every MS milliseconds) until the job has had each
 * of these sizes in turn (here: grown to 3, then shrunk to 2). A test that changes the
 * membership during the run then waits for what it waits for (a worker starting and joining,
 * on a machine however loaded), not for a number of steps guessed to last long enough. The
 * decision is collective (the largest "still holding" of every rank), so the ranks never
 * disagree on it; the test's own time limit bounds the wait. Lines printed for the test
 * scripts:
 *   started worker W pid P            at start
 *   gen G size N rank R step S        after each (re)formation (joined: first time)
 *   commit S                          (rank 0 only)
 *   shm-id HEX                        the communicator id, to check /dev/shm afterwards
 *   final step S hash H ok            at the end
 * Without --elastic the first failure ends the program with status 3 and a line
 *   error: <code>: <detail>
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus/elastic.h"
#include "coll/comm.h"
#include "harness.h"

#define BATCH 24

typedef struct ctx {
    int64_t step; /* state */
    double *w;    /* state */
    double *g;
    int dim, steps, commit_every, step_ms;
    int64_t hold_at;            /* --hold-at; -1: never hold */
    int holds[8], nholds, seen; /* --hold-sizes, and how many of them the job has had */
    int64_t my_last_commit;     /* step of this worker's last commit, -1 */
    long last_gen;
    int rank, size;
} ctx;

static double grad(int64_t i, int64_t step, int j, double wj)
{
    int64_t q = (int64_t)floor(wj * 4.0);
    int64_t m = ((q % 3) + 3) % 3;
    return (double)(((i * 131 + step * 17 + (int64_t)j * 7) % 23) - 11 + m);
}

static void init_w(double *w, int dim)
{
    for (int j = 0; j < dim; j++) w[j] = (double)((j * 37) % 11) - 5.0;
}

static chorus_result reset(chorus_elastic *el, chorus_comm *c, void *arg)
{
    ctx *x = arg;
    x->rank = chorus_rank(c);
    x->size = chorus_size(c);
    long gen = chorus_elastic_generation(el);
    printf("gen %ld size %d rank %d step %lld%s\n", gen, x->size, x->rank, (long long)x->step,
           x->last_gen == 0 && gen > 1 ? " joined" : "");
    printf("shm-id %016llx\n", (unsigned long long)c->id);
    fflush(stdout);
    /* never back past this worker's own last commit */
    if (x->my_last_commit >= 0 && x->step < x->my_last_commit)
        test_fail(__FILE__, __LINE__, "resumed at step %lld, before my last commit at %lld",
                  (long long)x->step, (long long)x->my_last_commit);
    if (x->step % x->commit_every != 0)
        test_fail(__FILE__, __LINE__, "resumed at step %lld, not a commit point",
                  (long long)x->step);
    x->last_gen = gen;
    if (x->seen < x->nholds && x->size == x->holds[x->seen]) x->seen++;
    return CHORUS_OK;
}

/* Collective: does some rank still wait for a size of --hold-sizes at this commit point? */
static chorus_result holding(chorus_comm *c, ctx *x, int *hold)
{
    *hold = 0;
    if (x->hold_at < 0 || x->step < x->hold_at) return CHORUS_OK;
    int32_t h = x->seen < x->nholds;
    chorus_result r = chorus_allreduce(c, &h, &h, 1, CHORUS_INT32, CHORUS_MAX);
    *hold = h;
    return r;
}

static chorus_result train(chorus_elastic *el, chorus_comm *c, void *arg)
{
    ctx *x = arg;
    while (x->step < x->steps) {
        for (int j = 0; j < x->dim; j++) {
            double s = 0;
            for (int i = x->rank; i < BATCH; i += x->size) s += grad(i, x->step, j, x->w[j]);
            x->g[j] = s;
        }
        chorus_result r =
            chorus_allreduce(c, x->g, x->g, (size_t)x->dim, CHORUS_FLOAT64, CHORUS_SUM);
        if (r != CHORUS_OK) return r;
        for (int j = 0; j < x->dim; j++) x->w[j] -= x->g[j] / 64.0;
        x->step++;
        if (x->step_ms) {
            struct timespec ts = {0, (long)x->step_ms * 1000000L};
            nanosleep(&ts, NULL);
        }
        for (int hold = x->step % x->commit_every == 0, again = 0; hold; again = 1) {
            r = chorus_elastic_commit(el);
            /* the copy is taken even when the membership check then fails */
            if (r == CHORUS_OK || r == CHORUS_ERR_MEMBERSHIP) x->my_last_commit = x->step;
            if (x->rank == 0 && r == CHORUS_OK && !again) {
                printf("commit %lld\n", (long long)x->step);
                fflush(stdout);
            }
            if (r != CHORUS_OK) return r;
            if ((r = holding(c, x, &hold)) != CHORUS_OK) return r;
            if (hold && x->step_ms) {
                struct timespec ts = {0, (long)x->step_ms * 1000000L};
                nanosleep(&ts, NULL);
            }
        }
    }
    return CHORUS_OK;
}

int main(int argc, char **argv)
{
    ctx x = {.dim = 1000,
             .steps = 60,
             .commit_every = 5,
             .step_ms = 20,
             .my_last_commit = -1,
             .hold_at = -1};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps"))
            x.steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--commit"))
            x.commit_every = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dim"))
            x.dim = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--step-ms"))
            x.step_ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--hold-at"))
            x.hold_at = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--hold-sizes")) {
            char *p = argv[i + 1], *end;
            for (x.nholds = 0; *p && x.nholds < 8; p = *end ? end + 1 : end) {
                x.holds[x.nholds++] = (int)strtol(p, &end, 10);
                if (end == p) return 2;
            }
        } else if (!strcmp(argv[i], "--tag")) { /* only marks the process for the test scripts */
        } else {
            fprintf(stderr, "elastic_sgd: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (x.dim < 1 || x.steps < 1 || x.commit_every < 1) return 2;
    x.w = calloc((size_t)x.dim, sizeof(double));
    x.g = calloc((size_t)x.dim, sizeof(double));
    init_w(x.w, x.dim);
    chorus_elastic *el;
    ASSERT_OK(chorus_elastic_create(&el));
    /* the worker id of an elastic job; the rank chorus-run gives a plain one */
    int wid = chorus_elastic_worker_id(el);
    if (wid < 0 && getenv("CHORUS_RANK")) wid = atoi(getenv("CHORUS_RANK"));
    printf("started worker %d pid %d\n", wid, (int)getpid());
    fflush(stdout);
    ASSERT_OK(chorus_elastic_register(el, "w", x.w, sizeof(double) * (size_t)x.dim));
    ASSERT_OK(chorus_elastic_register(el, "step", &x.step, sizeof(x.step)));
    chorus_result r = chorus_elastic_run(el, train, reset, &x);
    if (r != CHORUS_OK) {
        printf("error: %s: %s\n", chorus_strerror(r), chorus_elastic_last_error(el));
        fflush(stdout);
        chorus_elastic_destroy(el);
        return r == CHORUS_ERR_MEMBERSHIP ? 0 : 3;
    }
    /* serial reference over the whole batch */
    double *ref = calloc((size_t)x.dim, sizeof(double));
    init_w(ref, x.dim);
    for (int64_t s = 0; s < x.steps; s++)
        for (int j = 0; j < x.dim; j++) {
            double sum = 0;
            for (int i = 0; i < BATCH; i++) sum += grad(i, s, j, ref[j]);
            ref[j] -= sum / 64.0;
        }
    int same = memcmp(ref, x.w, sizeof(double) * (size_t)x.dim) == 0;
    printf("final step %lld hash %016llx %s\n", (long long)x.step,
           (unsigned long long)test_hash(x.w, sizeof(double) * (size_t)x.dim),
           same ? "ok" : "DIFFERS FROM THE SERIAL REFERENCE");
    fflush(stdout);
    chorus_elastic_destroy(el);
    free(ref);
    free(x.w);
    free(x.g);
    return same && x.step == x.steps ? 0 : 1;
}
