/*
 * balance.c - the share rule of dynamic load balancing: how a global batch of G samples is
 * cut into integer shares, one per rank, in proportion to weights (the ranks' measured
 * speeds). Every rank runs it on the same allgathered numbers and so gets the same shares;
 * docs/LOAD_BALANCING.md states the rule step by step so that other front ends (Python)
 * compute identical shares.
 */
#include <math.h>
#include <stdlib.h>

#include "chorus/nn.h"
#include "nn_internal.h"

size_t nn_balance_min_share(size_t global_batch, int world)
{
    if (world <= 0 || global_batch < (size_t)world) return 0;
    size_t q = global_batch / (4 * (size_t)world);
    return q > 0 ? q : 1;
}

size_t nn_balance_max_share(size_t global_batch, int world)
{
    if (world <= 0) return 0;
    return global_batch - (size_t)(world - 1) * nn_balance_min_share(global_batch, world);
}

/* The quotas q_i = rest * w_i / sum(w) of the parts not held at the minimum (fixed[i] 0),
 * rest being what the held parts leave; the sum is taken in index order. Returns rest. */
static size_t quotas(const double *w, int n, size_t total, size_t min_each, const char *fixed,
                     double *q)
{
    size_t rest = total, free_parts = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (fixed[i]) {
            rest -= min_each;
            continue;
        }
        free_parts++;
        sum += w[i];
    }
    for (int i = 0; i < n; i++)
        if (!fixed[i]) /* all-zero weights: equal parts */
            q[i] = sum > 0 ? (double)rest * w[i] / sum : (double)rest / (double)free_parts;
    return rest;
}

chorus_result nn_balance_apportion(const double *w, int n, size_t total, size_t min_each,
                                   size_t *out)
{
    if (!w || !out || n <= 0 || total < (size_t)n * min_each)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_balance_apportion: cannot give %d parts at least %zu each out of %zu",
                        n, min_each, total);
    for (int i = 0; i < n; i++)
        if (!(w[i] >= 0) || !isfinite(w[i]))
            return nn__fail(CHORUS_ERR_INVALID_ARG,
                            "nn_balance_apportion: weight %d is %g, not a finite number >= 0", i,
                            w[i]);
    double *q = malloc((size_t)n * sizeof(double));
    char *fixed = calloc((size_t)n, 1);
    if (!q || !fixed) {
        free(q);
        free(fixed);
        return nn__fail(CHORUS_ERR_NOMEM, "nn_balance_apportion: out of memory");
    }
    /* Parts whose quota falls below the minimum are held at it and the others share what is
     * left, until no quota is below the minimum. Not every part can fall below it (their
     * quotas sum to what is left, at least the minimum times their number), so this ends
     * within n rounds. */
    size_t rest;
    for (;;) {
        rest = quotas(w, n, total, min_each, fixed, q);
        int held = 0;
        for (int i = 0; i < n; i++)
            if (!fixed[i] && q[i] < (double)min_each) fixed[i] = 1, held = 1;
        if (!held) break;
    }
    size_t given = 0;
    for (int i = 0; i < n; i++) {
        double f = fixed[i] ? 0.0 : floor(q[i]);
        out[i] = fixed[i] ? min_each : (size_t)f;
        q[i] = fixed[i] ? -1.0 : q[i] - f; /* now the fractional part */
        given += fixed[i] ? 0 : (size_t)f;
    }
    /* Rounding can only make the floors overshoot by a sample or two: take them back from
     * the largest parts, lowest index first. */
    while (given > rest) {
        int big = 0;
        for (int i = 1; i < n; i++)
            if (out[i] > out[big]) big = i;
        out[big]--;
        given--;
    }
    /* The samples left go one each to the largest fractional parts, ties to the lower index. */
    for (; given < rest; given++) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (q[i] > q[best]) best = i;
        out[best]++;
        q[best] = -1.0;
    }
    free(q);
    free(fixed);
    return CHORUS_OK;
}

chorus_result nn_balance_shares(const double *sec_per_sample, int n, size_t global_batch,
                                size_t *out)
{
    if (!sec_per_sample || n <= 0 || global_batch < (size_t)n)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "dynamic balancing needs a global batch of at least one sample per rank "
                        "(global batch %zu, %d ranks)",
                        global_batch, n);
    double *speed = malloc((size_t)n * sizeof(double));
    if (!speed) return nn__fail(CHORUS_ERR_NOMEM, "nn_balance_shares: out of memory");
    for (int i = 0; i < n; i++) {
        double s = sec_per_sample[i];
        speed[i] = s > 0 && isfinite(s) ? 1.0 / s : 0.0; /* unmeasured: smallest share */
    }
    chorus_result r =
        nn_balance_apportion(speed, n, global_batch, nn_balance_min_share(global_batch, n), out);
    free(speed);
    return r;
}

/* The slowest rank's compute time of a step under shares (max of share * time per sample). */
static double step_time(const size_t *shares, const double *sec_per_sample, int n)
{
    double most = 0;
    for (int i = 0; i < n; i++) {
        double t = (double)shares[i] * sec_per_sample[i];
        if (t > most) most = t;
    }
    return most;
}

int nn_balance_worth_moving(const size_t *current, const size_t *next, const double *sec_per_sample,
                            int n)
{
    for (int i = 0; i < n; i++)
        if (!(sec_per_sample[i] > 0) || !isfinite(sec_per_sample[i])) return 1; /* unmeasured */
    double now = step_time(current, sec_per_sample, n);
    double then = step_time(next, sec_per_sample, n);
    return then < now * (1.0 - NN_BALANCE_MIN_GAIN);
}

double nn_balance_gain(const size_t *current, const size_t *next, const double *sec_per_sample,
                       int n)
{
    double now = step_time(current, sec_per_sample, n);
    return now > 0 ? 1.0 - step_time(next, sec_per_sample, n) / now : 0.0;
}

int nn_balance_persists(const size_t *current, const size_t *next, const double *windows, int k,
                        int n)
{
    if (k < NN_BALANCE_PERSIST) return 0;
    for (int w = 0; w < k; w++) {
        const double *t = windows + (size_t)w * (size_t)n;
        for (int i = 0; i < n; i++)
            if (!(t[i] > 0) || !isfinite(t[i])) return 0;
        if (!(nn_balance_gain(current, next, t, n) > NN_BALANCE_SMALL_GAIN)) return 0;
    }
    return 1;
}
