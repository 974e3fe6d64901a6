/*
 * balance.c - per-worker monitoring and dynamic load balancing for chorus-train (see
 * balance.h and docs/LOAD_BALANCING.md).
 *
 * Each rank adds up, over a window of steps, its forward/backward seconds, its seconds
 * blocked in collectives, its samples and its steps. At the gather cadence the windows of all
 * ranks meet in one allreduce (each rank fills its own row of a world x NCOLS table of zeros:
 * adding zeros is exact, so every rank gets every row bit for bit). From the same table
 * every rank then
 *   - judges the slowest rank (rank 0 prints and records the verdict): rank i's compute time
 *     per sample against the median of the other ranks' ("compute-bound"); only when no
 *     rank is compute-slow, its own communication time per step (time blocked less the time
 *     it waited for slower ranks to finish their compute) against the others'
 *     ("communication-bound"); a ratio of SLOW_RATIO or more names it;
 *   - with --balance dynamic, smooths each rank's compute time per sample (the median over the
 *     window's steps, then an exponential moving average, weight EMA_NEW for the new window)
 *     and sets the shares nn_balance_shares makes of it, in the sampler, from the next step
 *     on, when nn_balance_worth_moving says they save enough, or nn_balance_persists that a
 *     smaller saving held over the last windows.
 */
#include "balance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/checkpoint.h"

#define SLOW_RATIO   1.5 /* a rank this many times the others' median is named */
#define WARMUP_STEPS 2   /* steps of the first window, which balancing does not use */
#define EMA_NEW      0.5 /* weight of the newest window in the smoothed time per sample */
#define NCOLS        5   /* per rank: compute s, wait s, samples, steps, median s/sample */
#define STEP_KEEP    64  /* steps of a window whose time per sample the median is taken over */
#define CKPT_NAME    "balance"
#define CKPT_VERSION 1

struct train_balance {
    balance_opts o;
    nn_dist *d;
    nn_sampler *s;
    int fixed;             /* --balance-shares: shares set once, never re-balanced */
    size_t *shares;        /* (world) current shares of a full global step */
    double *ema;           /* (world) smoothed compute seconds per sample; 0: not yet measured */
    double win[NCOLS];     /* this rank's current window */
    double per[STEP_KEEP]; /* its steps' compute seconds per sample (the last STEP_KEEP) */
    int nper;              /* steps recorded in per (a ring once full) */
    double *hist;          /* (NN_BALANCE_PERSIST, world) the last windows' medians, oldest first */
    int nhist;             /* rows of hist filled since the shares last moved */
    double *all;           /* (world, NCOLS) the last gathered windows */
    double *run;           /* (world, NCOLS) sums of all gathered windows */
    int fresh;             /* the last step gathered */
    uint64_t gathers;      /* windows gathered so far */
    char note[192];        /* progress-line suffix (rank 0) */
    char verdict[160];     /* the last window's slow rank, "" when none */
    int slow_rank;
    double slow_factor;
    const char *slow_reason;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[j] for j != skip (n >= 2 values in all); tmp holds n doubles. */
static double median_others(const double *v, int n, int skip, double *tmp)
{
    int k = 0;
    for (int j = 0; j < n; j++)
        if (j != skip) tmp[k++] = v[j];
    qsort(tmp, (size_t)k, sizeof(double), cmp_double);
    return k % 2 ? tmp[k / 2] : 0.5 * (tmp[k / 2 - 1] + tmp[k / 2]);
}

/* The slowest rank of table t (world rows of NCOLS) by the rule at the top of the file:
 * returns its rank and sets *factor and *reason, or -1 when no rank is SLOW_RATIO times the
 * others' median. */
static int judge(const double *t, int world, double *factor, const char **reason)
{
    if (world < 2) return -1;
    double *per = malloc(4 * (size_t)world * sizeof(double));
    if (!per) return -1;
    double *own = per + world, *tmp = own + world, *fb = tmp + world, slowest_fb = 0;
    for (int i = 0; i < world; i++) {
        const double *r = t + (size_t)i * NCOLS;
        double steps = r[3] > 0 ? r[3] : 1;
        per[i] = r[2] > 0 ? r[0] / r[2] : 0;
        fb[i] = r[0] / steps;
        if (fb[i] > slowest_fb) slowest_fb = fb[i];
    }
    for (int i = 0; i < world; i++) {
        double steps = t[(size_t)i * NCOLS + 3] > 0 ? t[(size_t)i * NCOLS + 3] : 1;
        double w = t[(size_t)i * NCOLS + 1] / steps - (slowest_fb - fb[i]);
        own[i] = w > 0 ? w : 0;
    }
    /* Compute first: a rank slow in its compute is slow in the work of its collectives too
     * (a starved CPU reduces and copies slowly as well), so the others wait longer than the
     * compute gap and their "own" communication is overestimated. Only when no rank is
     * compute-slow does a communication time name anyone. */
    int worst = -1;
    double best = SLOW_RATIO;
    for (int i = 0; i < world; i++) {
        double mc = median_others(per, world, i, tmp);
        double rc = mc > 0 ? per[i] / mc : 0;
        if (rc >= best) worst = i, best = rc, *reason = "compute-bound";
    }
    int compute_slow = worst >= 0;
    for (int i = 0; i < world && !compute_slow; i++) {
        double mo = median_others(own, world, i, tmp);
        /* communication counts only when it is a real part of the rank's step */
        double ro = mo > 0 && own[i] > 0.1 * fb[i] ? own[i] / mo : 0;
        if (ro >= best) worst = i, best = ro, *reason = "communication-bound";
    }
    free(per);
    *factor = best;
    return worst;
}

static int parse_fixed(train_balance *b, const char *text, char *why, size_t len)
{
    const char *p = text;
    size_t sum = 0;
    for (int r = 0; r < b->o.world; r++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || (*end != ',' && *end != '\0') ||
            (*end == '\0' && r + 1 < b->o.world) || (*end == ',' && r + 1 == b->o.world)) {
            snprintf(why, len,
                     "--balance-shares %s: give %d non-negative counts separated by commas, one "
                     "per rank, summing to the global batch %zu",
                     text, b->o.world, b->o.global_batch);
            return -1;
        }
        b->shares[r] = (size_t)v;
        sum += (size_t)v;
        p = end + 1;
    }
    if (sum != b->o.global_batch) {
        snprintf(why, len,
                 "--balance-shares %s: the shares sum to %zu, not to the global batch %zu", text,
                 sum, b->o.global_batch);
        return -1;
    }
    return 0;
}

train_balance *balance_create(const balance_opts *o, nn_dist *d, nn_sampler *s, char *why,
                              size_t whylen)
{
    train_balance *b = calloc(1, sizeof(*b));
    size_t w = (size_t)o->world;
    if (b) {
        b->shares = calloc(w, sizeof(size_t));
        b->ema = calloc(w, sizeof(double));
        b->all = calloc(w * NCOLS, sizeof(double));
        b->run = calloc(w * NCOLS, sizeof(double));
        b->hist = calloc(w * NN_BALANCE_PERSIST, sizeof(double));
    }
    if (!b || !b->shares || !b->ema || !b->all || !b->run || !b->hist) {
        snprintf(why, whylen, "out of memory for the load balancer");
        balance_destroy(b);
        return NULL;
    }
    b->o = *o;
    if (!b->o.unit) b->o.unit = "samples";
    b->d = d;
    b->s = s;
    b->slow_rank = -1;
    if (o->fixed) {
        b->fixed = 1;
        int bad = parse_fixed(b, o->fixed, why, whylen);
        if (!bad && nn_sampler_set_shares(s, b->shares)) {
            snprintf(why, whylen, "%s", nn_last_error());
            bad = 1;
        }
        if (bad) {
            balance_destroy(b);
            return NULL;
        }
    } else if (o->dynamic && o->global_batch < w) {
        snprintf(why, whylen,
                 "--balance dynamic needs a global batch of at least one sample per rank "
                 "(--batch %zu, %d ranks)",
                 o->global_batch, o->world);
        balance_destroy(b);
        return NULL;
    } else {
        /* the even split the sampler makes by itself */
        for (size_t r = 0; r < w; r++)
            b->shares[r] = o->global_batch / w + (r < o->global_batch % w);
    }
    return b;
}

void balance_destroy(train_balance *b)
{
    if (!b) return;
    free(b->shares);
    free(b->ema);
    free(b->all);
    free(b->run);
    free(b->hist);
    free(b);
}

size_t balance_capacity(const train_balance *b)
{
    if (b->fixed) return nn_sampler_max_local(b->s);
    if (b->o.dynamic) return nn_balance_max_share(b->o.global_batch, b->o.world);
    return nn_sampler_max_local(b->s);
}

const size_t *balance_shares(const train_balance *b)
{
    return b->shares;
}

void balance_record(train_balance *b, double compute_s, double wait_s, size_t samples)
{
    b->win[0] += compute_s;
    b->win[1] += wait_s;
    b->win[2] += (double)samples;
    b->win[3] += 1;
    if (samples > 0) b->per[b->nper++ % STEP_KEEP] = compute_s / (double)samples;
    if (b->nper >= 2 * STEP_KEEP) b->nper -= STEP_KEEP; /* same slot next, still full */
}

/* The median of this rank's recorded steps' compute seconds per sample (0 when none): one step
 * that another process held up, or that lost a scheduler time slice more than the others, does
 * not move it, where it moves the window's mean. Resets the record. */
static double window_median(train_balance *b)
{
    int k = b->nper < STEP_KEEP ? b->nper : STEP_KEEP;
    b->nper = 0;
    if (k == 0) return 0;
    qsort(b->per, (size_t)k, sizeof(double), cmp_double);
    return k % 2 ? b->per[k / 2] : 0.5 * (b->per[k / 2 - 1] + b->per[k / 2]);
}

/* The window's medians (each rank's time per sample) as the newest row of the history of
 * windows since the shares last moved, the oldest row dropped when it is full. */
static void remember(train_balance *b, const double *sec)
{
    size_t w = (size_t)b->o.world;
    if (b->nhist == NN_BALANCE_PERSIST) {
        memmove(b->hist, b->hist + w, (NN_BALANCE_PERSIST - 1) * w * sizeof(double));
        b->nhist--;
    }
    memcpy(b->hist + (size_t)b->nhist * w, sec, w * sizeof(double));
    b->nhist++;
}

/* Dynamic: fold the gathered windows' medians into the smoothed times and set the new shares
 * when they are predicted to save NN_BALANCE_MIN_GAIN of a step, or a smaller gain that the
 * last NN_BALANCE_PERSIST windows each predict on their own (nn_balance_persists). */
static chorus_result rebalance(train_balance *b)
{
    int w = b->o.world;
    double *sec = malloc(2 * (size_t)w * sizeof(double));
    if (!sec) return CHORUS_ERR_NOMEM;
    double *raw = sec + w;
    for (int i = 0; i < w; i++) {
        const double *r = b->all + (size_t)i * NCOLS;
        raw[i] = r[4] > 0 ? r[4] : r[2] > 0 ? r[0] / r[2] : 0;
        if (raw[i] > 0)
            b->ema[i] = b->ema[i] > 0 ? (1 - EMA_NEW) * b->ema[i] + EMA_NEW * raw[i] : raw[i];
        sec[i] = b->ema[i];
    }
    remember(b, raw);
    size_t *next = malloc((size_t)w * sizeof(size_t));
    chorus_result rc = next ? nn_balance_shares(sec, w, b->o.global_batch, next) : CHORUS_ERR_NOMEM;
    int move = rc == CHORUS_OK && memcmp(next, b->shares, (size_t)w * sizeof(size_t)) &&
               (nn_balance_worth_moving(b->shares, next, sec, w) ||
                (nn_balance_gain(b->shares, next, sec, w) > NN_BALANCE_SMALL_GAIN &&
                 nn_balance_persists(b->shares, next, b->hist, b->nhist, w)));
    if (move) {
        memcpy(b->shares, next, (size_t)w * sizeof(size_t));
        rc = nn_sampler_set_shares(b->s, b->shares);
        b->nhist = 0; /* the next small move needs windows measured at these shares */
    }
    free(next);
    free(sec);
    return rc;
}

chorus_result balance_after_step(train_balance *b, uint64_t global_step)
{
    b->fresh = 0;
    int balancing = b->o.dynamic && !b->fixed;
    /* The first WARMUP_STEPS steps of a process are a window of their own, gathered and set
     * aside, so that the first shares come from the next window and not a whole one later. */
    int due = global_step % (uint64_t)b->o.monitor_every == 0 ||
              (balancing && global_step % (uint64_t)b->o.every == 0) ||
              (balancing && b->gathers == 0 && b->win[3] >= WARMUP_STEPS);
    if (!due || b->o.world < 2) return CHORUS_OK;
    size_t n = (size_t)b->o.world * NCOLS;
    b->win[4] = window_median(b);
    memset(b->all, 0, n * sizeof(double));
    memcpy(b->all + (size_t)b->o.rank * NCOLS, b->win, sizeof(b->win));
    chorus_result rc = nn_dist_sum(b->d, b->all, (int)n);
    if (rc != CHORUS_OK) return rc;
    memset(b->win, 0, sizeof(b->win));
    for (size_t i = 0; i < n; i++) b->run[i] += b->all[i];
    b->fresh = 1;
    b->gathers++;
    const char *reason = "";
    double f = 0;
    b->slow_rank = judge(b->all, b->o.world, &f, &reason);
    b->slow_factor = f;
    b->slow_reason = reason;
    b->note[0] = '\0';
    if (b->slow_rank >= 0)
        snprintf(b->note, sizeof(b->note), " | rank %d is %.1fx slower than the median: %s",
                 b->slow_rank, f, reason);
    /* The first window holds the warm-up (first touches of the buffers, cold caches, rank 0's
     * header): it would mislead the balance, so balancing starts from the second. */
    if (balancing && b->gathers > 1) return rebalance(b);
    return CHORUS_OK;
}

const char *balance_note(const train_balance *b)
{
    return b->note;
}

void balance_write_metrics(const train_balance *b, FILE *f)
{
    if (!b->fresh) return;
    fprintf(f, ",\"ranks\":[");
    for (int i = 0; i < b->o.world; i++) {
        const double *r = b->all + (size_t)i * NCOLS;
        double steps = r[3] > 0 ? r[3] : 1, busy = r[0] + r[1];
        fprintf(f,
                "%s{\"rank\":%d,\"compute_s\":%.6f,\"wait_s\":%.6f,\"samples_per_s\":%.1f,"
                "\"share\":%zu}",
                i ? "," : "", i, r[0] / steps, r[1] / steps, busy > 0 ? r[2] / busy : 0.0,
                b->shares[i]);
    }
    fprintf(f, "],\"slow_rank\":%d", b->slow_rank);
    if (b->slow_rank >= 0)
        fprintf(f, ",\"slow_factor\":%.2f,\"slow_reason\":\"%s\"", b->slow_factor, b->slow_reason);
}

void balance_describe(const train_balance *b)
{
    if (b->o.rank != 0) return;
    if (b->fixed) {
        printf("load balancing: fixed shares");
        for (int i = 0; i < b->o.world; i++) printf(" %zu", b->shares[i]);
        printf(" of each global batch (--balance-shares)\n");
    } else if (b->o.dynamic) {
        printf("load balancing: dynamic, each rank's share of the global batch of %zu follows "
               "its measured speed (re-balanced every %d steps, at least %zu %s each)\n",
               b->o.global_batch, b->o.every, nn_balance_min_share(b->o.global_batch, b->o.world),
               b->o.unit);
    }
    fflush(stdout);
}

void balance_report(const train_balance *b)
{
    if (b->o.rank != 0 || b->o.world < 2 || b->run[3] <= 0) return;
    printf("per rank over the run:");
    for (int i = 0; i < b->o.world; i++) {
        const double *r = b->run + (size_t)i * NCOLS;
        double steps = r[3] > 0 ? r[3] : 1, busy = r[0] + r[1];
        printf("%s rank %d %.2f ms compute + %.2f ms waiting per step, %.0f %s/s, share %zu",
               i ? ";" : "", i, 1e3 * r[0] / steps, 1e3 * r[1] / steps,
               busy > 0 ? r[2] / busy : 0.0, b->o.unit, b->shares[i]);
    }
    printf("\n");
    double f = 0;
    const char *reason = "";
    int slow = judge(b->run, b->o.world, &f, &reason);
    if (slow >= 0)
        printf("straggler: rank %d was %.1fx slower than the median over the run: %s%s\n", slow, f,
               reason,
               b->o.dynamic || b->fixed ? ""
                                        : " (--balance dynamic gives it a smaller share of each "
                                          "batch)");
    fflush(stdout);
}

int balance_save(const train_balance *b, const char *dir, uint64_t step, char *why, size_t len)
{
    if (!b->o.dynamic || b->fixed) return 0; /* even or given shares: nothing to keep */
    char text[8192];
    size_t n = (size_t)snprintf(text, sizeof(text), "chorus-train balance %d\nworld %d\nshares",
                                CKPT_VERSION, b->o.world);
    for (int i = 0; i < b->o.world && n < sizeof(text); i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, " %zu", b->shares[i]);
    if (n < sizeof(text)) n += (size_t)snprintf(text + n, sizeof(text) - n, "\nsec_per_sample");
    for (int i = 0; i < b->o.world && n < sizeof(text); i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, " %a", b->ema[i]);
    if (n < sizeof(text)) n += (size_t)snprintf(text + n, sizeof(text) - n, "\n");
    if (n >= sizeof(text)) {
        snprintf(why, len, "too many ranks to save their shares (%d)", b->o.world);
        return -1;
    }
    if (chorus_checkpoint_save(dir, CKPT_NAME, step, text, n, NN_CKPT_KEEP) != CHORUS_OK) {
        snprintf(why, len, "%s", chorus_last_error(NULL));
        return -1;
    }
    return 0;
}

/* Rank 0: reads the shares saved with checkpoint `step` into shares/ema; 0, or -1 with the
 * reason they cannot be used. */
static int load_saved(const train_balance *b, const char *dir, uint64_t step, uint64_t *shares,
                      double *ema, char *why, size_t len)
{
    uint64_t got;
    void *data = NULL;
    size_t n = 0;
    if (chorus_checkpoint_load(dir, CKPT_NAME, &got, &data, &n) != CHORUS_OK || got != step) {
        snprintf(why, len, "no shares were saved with step %llu", (unsigned long long)step);
        free(data);
        return -1;
    }
    char *text = malloc(n + 1);
    if (!text) {
        free(data);
        snprintf(why, len, "out of memory");
        return -1;
    }
    memcpy(text, data, n);
    text[n] = '\0';
    free(data);
    int version = 0, world = 0, off = 0, ok = 1;
    char *p = text;
    if (sscanf(p, "chorus-train balance %d\nworld %d\nshares%n", &version, &world, &off) != 2 ||
        version != CKPT_VERSION)
        ok = 0;
    else if (world != b->o.world)
        ok = -1;
    uint64_t sum = 0;
    for (int i = 0; ok == 1 && i < world; i++) {
        p += off;
        unsigned long long v;
        if (sscanf(p, " %llu%n", &v, &off) != 1) ok = 0;
        shares[i] = v;
        sum += v;
    }
    if (ok == 1) {
        p += off;
        off = 0;
        if (sscanf(p, " sec_per_sample%n", &off) != 0 || off == 0) ok = 0;
    }
    for (int i = 0; ok == 1 && i < world; i++) {
        p += off;
        if (sscanf(p, " %la%n", &ema[i], &off) != 1) ok = 0;
    }
    free(text);
    if (ok == 1 && sum != b->o.global_batch) ok = -2;
    if (ok == 0)
        snprintf(why, len, "the saved shares of step %llu cannot be read",
                 (unsigned long long)step);
    if (ok == -1)
        snprintf(why, len, "the shares of step %llu are for %d ranks, this job has %d",
                 (unsigned long long)step, world, b->o.world);
    if (ok == -2)
        snprintf(why, len, "the shares of step %llu are for a global batch of %llu, not %zu",
                 (unsigned long long)step, (unsigned long long)sum, b->o.global_batch);
    return ok == 1 ? 0 : -1;
}

chorus_result balance_resume(train_balance *b, const char *dir, uint64_t step)
{
    if (b->fixed || !b->o.dynamic || step == 0) return CHORUS_OK;
    size_t w = (size_t)b->o.world;
    uint64_t *shares = calloc(w + 1, sizeof(uint64_t));
    double *ema = calloc(w, sizeof(double));
    chorus_result rc = CHORUS_ERR_NOMEM;
    if (!shares || !ema) goto out;
    char why[256] = "";
    if (b->o.rank == 0) {
        shares[w] = load_saved(b, dir, step, shares, ema, why, sizeof(why)) == 0;
        if (!shares[w]) printf("load balancing: %s: starting from even shares\n", why);
    }
    rc = nn_dist_broadcast_bytes(b->d, shares, (w + 1) * sizeof(uint64_t));
    if (rc == CHORUS_OK) rc = nn_dist_broadcast_bytes(b->d, ema, w * sizeof(double));
    if (rc != CHORUS_OK || !shares[w]) goto out;
    for (size_t i = 0; i < w; i++) {
        b->shares[i] = (size_t)shares[i];
        b->ema[i] = ema[i];
    }
    rc = nn_sampler_set_shares(b->s, b->shares);
    if (rc == CHORUS_OK && b->o.rank == 0) {
        printf("load balancing: resumed the shares");
        for (size_t i = 0; i < w; i++) printf(" %zu", b->shares[i]);
        printf(" of step %llu\n", (unsigned long long)step);
    }
out:
    free(shares);
    free(ema);
    return rc;
}

void balance_ps_wait_report(int worker, const char *mode, int staleness, uint64_t step,
                            double waited, double timeout, uint64_t quiet_steps, uint64_t *last,
                            uint64_t *missed)
{
    if (timeout <= 0 || waited <= timeout) return;
    if (*last && step < *last + quiet_steps) {
        (*missed)++;
        return;
    }
    char why[160];
    if (!strcmp(mode, "ps-sync"))
        snprintf(why, sizeof(why),
                 "the servers apply a step once every worker has pushed it: a "
                 "slower worker, a slow server or the network held this one "
                 "back");
    else if (!strcmp(mode, "ps-ssp"))
        snprintf(why, sizeof(why),
                 "a worker more than --staleness %d steps behind, a slow server or the network "
                 "held this one back",
                 staleness);
    else
        snprintf(why, sizeof(why),
                 "workers never wait for each other here: a slow server or "
                 "the network held this one back");
    char more[64] = "";
    if (*missed)
        snprintf(more, sizeof(more), " (and %llu more such steps)", (unsigned long long)*missed);
    fprintf(stderr,
            "chorus-train: worker %d: step %llu: waited %.2f s for the parameter servers, over "
            "--straggler-timeout %g%s; --mode %s: %s\n",
            worker, (unsigned long long)step, waited, timeout, more, mode, why);
    *last = step;
    *missed = 0;
}
