/*
 * autotune.c - CHORUS_AUTOTUNE: in the first steps of training the engine tries settings and
 * keeps the fastest, one dimension after another (coordinate search): first the allreduce
 * algorithms this communicator has, then fusion thresholds with the best algorithm, then cycle
 * times with both.
 *
 * A step is counted where every rank sees it: each execution of one marker name (the first
 * allreduce agreed through the response cache, so one that recurs), which is in the agreed list
 * of the same cycle on every rank. A candidate is applied on every rank right after the marker's
 * cycle, runs one step to settle, then CHORUS_AUTOTUNE_STEPS measured steps (time from marker to
 * marker on rank 0: compute, waiting and communication, what a step costs the user); its score
 * is the median. At the end of a dimension rank 0 names the fastest candidate and broadcasts its
 * index, so that every rank applies the same one at the same cycle: the ranks' collectives stay
 * in step, and since every candidate algorithm gives all ranks the same bits (one rank's fold,
 * or the same fold order everywhere), the ranks stay bitwise identical while tuning.
 * Everything here runs on the engine thread.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "engine/engine_int.h"

enum { STAGE_ALGO, STAGE_FUSION, STAGE_CYCLE, NSTAGES };

static const char *const stage_name[NSTAGES] = {"allreduce algorithm", "fusion threshold",
                                                "cycle time"};

/* "auto" is the rules of src/coll/select.c (no algorithm forced). */
static const char *algo_label(const char *a)
{
    return a ? a : "auto";
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Adds v to the sorted set vals[0..*n) (no duplicates). */
static void add_size(size_t *vals, int *n, size_t v)
{
    int i = 0;
    while (i < *n && vals[i] < v) i++;
    if (i < *n && vals[i] == v) return;
    memmove(vals + i + 1, vals + i, (size_t)(*n - i) * sizeof(*vals));
    vals[i] = v;
    (*n)++;
}

static void add_ms(double *vals, int *n, double v)
{
    int i = 0;
    while (i < *n && vals[i] < v - 1e-9) i++;
    if (i < *n && vals[i] < v + 1e-9) return;
    memmove(vals + i + 1, vals + i, (size_t)(*n - i) * sizeof(*vals));
    vals[i] = v;
    (*n)++;
}

/* Applies an allreduce algorithm of the table's candidates (NULL: the rules). */
static void set_algo(chorus_engine *e, const char *algo)
{
    if (chorus__select_force(e->comm, CHORUS_COLL_ALLREDUCE, algo) != CHORUS_OK)
        CHORUS_WARN(CHORUS_LOG_ENGINE, "autotune: %s", chorus_last_error(e->comm));
}

/* The candidates of the current stage, around the best values so far. */
static void stage_candidates(chorus_engine *e)
{
    eng_tune *t = &e->tune;
    t->ncand = 0;
    switch (t->stage) {
    case STAGE_ALGO:
        if (!t->algo_forced)
            t->ncand = chorus__select_candidates(e->comm, CHORUS_COLL_ALLREDUCE, CHORUS_MEM_HOST,
                                                 t->algo, ENG_TUNE_MAXC);
        if (t->ncand < 2) t->ncand = 0;
        break;
    case STAGE_FUSION: {
        static const size_t tries[] = {0, (size_t)1 << 20, (size_t)4 << 20, (size_t)16 << 20,
                                       (size_t)64 << 20};
        for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++)
            add_size(t->fusion, &t->ncand, tries[i]);
        add_size(t->fusion, &t->ncand, t->best_fusion);
        break;
    }
    case STAGE_CYCLE: {
        static const double tries[] = {0.5, 1, 2, 5};
        for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++)
            add_ms(t->cycle, &t->ncand, tries[i]);
        add_ms(t->cycle, &t->ncand, t->best_cycle);
        break;
    }
    }
}

/* Candidate i of the current stage, with the best values of the other dimensions. */
static void apply(chorus_engine *e, int i)
{
    eng_tune *t = &e->tune;
    e->o.fusion_threshold = t->stage == STAGE_FUSION ? t->fusion[i] : t->best_fusion;
    e->o.cycle_time_ms = t->stage == STAGE_CYCLE ? t->cycle[i] : t->best_cycle;
    if (!t->algo_forced) set_algo(e, t->stage == STAGE_ALGO ? t->algo[i] : t->best_algo);
}

static void describe(const chorus_engine *e, const eng_tune *t, int i, char *out, size_t len)
{
    switch (t->stage) {
    case STAGE_ALGO: snprintf(out, len, "%s", algo_label(t->algo[i])); break;
    case STAGE_FUSION: snprintf(out, len, "%zu B", t->fusion[i]); break;
    default: snprintf(out, len, "%g ms", t->cycle[i]); break;
    }
    (void)e;
}

/* Starts the next stage that has at least two candidates, or ends the tuning. */
static void next_stage(chorus_engine *e)
{
    eng_tune *t = &e->tune;
    for (t->stage++; t->stage < NSTAGES; t->stage++) {
        stage_candidates(e);
        if (t->ncand >= 2) break;
    }
    t->cand = 0;
    t->trial_step = 0;
    if (t->stage < NSTAGES) {
        apply(e, 0);
        return;
    }
    t->active = 0;
    e->o.fusion_threshold = t->best_fusion;
    e->o.cycle_time_ms = t->best_cycle;
    if (!t->algo_forced) set_algo(e, t->best_algo);
    const char *alg = chorus__select_forced(e->comm, CHORUS_COLL_ALLREDUCE);
    double took = chorus__now() - t->t_start;
    if (e->rank == 0) {
        char line[600];
        snprintf(line, sizeof(line),
                 "autotune: chose allreduce %s%s, fusion threshold %zu B, cycle time %g ms after "
                 "%d trials in %lld steps (%.1f s): %.2f ms per step (median), against %.2f ms "
                 "with the starting settings (allreduce %s, fusion threshold %zu B, cycle time "
                 "%g ms)",
                 algo_label(alg), t->algo_forced ? " (forced by CHORUS_ALGO_ALLREDUCE)" : "",
                 e->o.fusion_threshold, e->o.cycle_time_ms, t->trials, t->nsteps - t->start_step,
                 took, t->best_score * 1e3, t->base_score * 1e3, algo_label(t->start_algo),
                 t->start_fusion, t->start_cycle);
        CHORUS_INFO(CHORUS_LOG_ENGINE, "%s", line);
        /* asked for by the user: shown at the default log level too */
        const char *df = chorus__config()->debug_file;
        if (!CHORUS__LOG_ON(CHORUS_LOG_INFO) || (df && *df))
            fprintf(stderr, "CHORUS rank 0: %s\n", line);
    }
    CHORUS_INFO(CHORUS_LOG_ENGINE,
                "autotune: rank %d applies allreduce %s, fusion threshold %zu B, cycle time %g ms",
                e->rank, algo_label(alg), e->o.fusion_threshold, e->o.cycle_time_ms);
}

/* The current stage measured every candidate: rank 0 names the fastest, every rank takes it. */
static chorus_result end_stage(chorus_engine *e)
{
    eng_tune *t = &e->tune;
    int64_t win = 0;
    for (int i = 1; i < t->ncand; i++)
        if (t->score[i] < t->score[win]) win = i;
    chorus_result r = chorus_broadcast(e->comm, &win, 1, CHORUS_INT64, 0);
    if (r != CHORUS_OK) return r;
    if (win < 0 || win >= t->ncand)
        return chorus__eng_err(e, CHORUS_ERR_PROTOCOL,
                               "autotune: rank 0 chose candidate %lld of %d", (long long)win,
                               t->ncand);
    if (e->rank == 0 && CHORUS__LOG_ON(CHORUS_LOG_INFO)) {
        char list[700], d[64];
        size_t o = 0;
        for (int i = 0; i < t->ncand && o + 80 < sizeof(list); i++) {
            describe(e, t, i, d, sizeof(d));
            o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s %.2f ms", i ? ", " : "", d,
                                  t->score[i] * 1e3);
        }
        describe(e, t, (int)win, d, sizeof(d));
        CHORUS_INFO(CHORUS_LOG_ENGINE,
                    "autotune: %s: %s (median step time over %d step%s): %s is fastest",
                    stage_name[t->stage], list, t->steps, t->steps == 1 ? "" : "s", d);
    }
    switch (t->stage) {
    case STAGE_ALGO: t->best_algo = t->algo[win]; break;
    case STAGE_FUSION: t->best_fusion = t->fusion[win]; break;
    default: t->best_cycle = t->cycle[win]; break;
    }
    t->best_score = t->score[win];
    next_stage(e);
    return CHORUS_OK;
}

/* One more step under the current candidate, dt seconds long on this rank. */
static chorus_result trial_step(chorus_engine *e, double dt)
{
    eng_tune *t = &e->tune;
    t->trial_step++;
    if (t->trial_step == 1) return CHORUS_OK; /* settling: the switch happened in it */
    t->samples[t->trial_step - 2] = dt;
    if (t->trial_step < 1 + t->steps) return CHORUS_OK;
    qsort(t->samples, (size_t)t->steps, sizeof(double), cmp_double);
    double med = t->steps % 2 ? t->samples[t->steps / 2]
                              : 0.5 * (t->samples[t->steps / 2 - 1] + t->samples[t->steps / 2]);
    t->score[t->cand] = med;
    t->trials++;
    if (t->base_score < 0 && e->o.fusion_threshold == t->start_fusion &&
        e->o.cycle_time_ms == t->start_cycle &&
        chorus__select_forced(e->comm, CHORUS_COLL_ALLREDUCE) == t->start_algo)
        t->base_score = med; /* the starting settings' trial */
    if (e->rank == 0) {
        char d[64];
        describe(e, t, t->cand, d, sizeof(d));
        CHORUS_INFO(CHORUS_LOG_ENGINE, "autotune: trial %d, %s %s: %.2f ms per step", t->trials,
                    stage_name[t->stage], d, med * 1e3);
    }
    t->trial_step = 0;
    if (++t->cand < t->ncand) {
        apply(e, t->cand);
        return CHORUS_OK;
    }
    return end_stage(e);
}

/* The marker: the first allreduce of the list that came through the response cache. */
static const eng_exec *find_marker(eng_tune *t, const eng_exec *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (x[i].m.kind != EK_ALLREDUCE) continue;
        if (t->marker[0]) {
            if (!strcmp(t->marker, x[i].name)) return &x[i];
        } else if (x[i].cached) {
            snprintf(t->marker, sizeof(t->marker), "%s", x[i].name);
            return &x[i];
        }
    }
    return NULL;
}

chorus_result chorus__tune_cycle(chorus_engine *e, const eng_exec *x, size_t n)
{
    eng_tune *t = &e->tune;
    if (!t->active || !n) return CHORUS_OK;
    if (!find_marker(t, x, n)) {
        /* a marker that stopped recurring (a name used twice, then never): choose again */
        if (++t->cycles_unmarked > 1000) {
            t->marker[0] = 0;
            t->last_mark = 0;
            t->trial_step = 0;
            t->cycles_unmarked = 0;
        }
        return CHORUS_OK;
    }
    t->cycles_unmarked = 0;
    double now = chorus__now(), dt = now - t->last_mark;
    int first = t->last_mark == 0;
    t->last_mark = now;
    t->nsteps++;
    if (first) return CHORUS_OK;
    if (t->stage < 0) { /* warm-up with the starting settings */
        if (t->nsteps < t->warmup + 1) return CHORUS_OK;
        t->start_step = t->nsteps;
        t->t_start = now;
        CHORUS_INFO(CHORUS_LOG_ENGINE, "autotune: starting after %lld warm-up steps (marker '%s')",
                    t->nsteps - 1, t->marker);
        next_stage(e);
        return CHORUS_OK;
    }
    return trial_step(e, dt);
}

chorus_result chorus__tune_check(const chorus_config *cfg, char *why, size_t len)
{
    if (!cfg->autotune) return CHORUS_OK;
    if (cfg->autotune_steps < 1 || cfg->autotune_steps > ENG_TUNE_MAX_STEPS) {
        snprintf(why, len,
                 "CHORUS_AUTOTUNE_STEPS=%ld: the measured steps per candidate must be 1 to %d",
                 cfg->autotune_steps, ENG_TUNE_MAX_STEPS);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (cfg->autotune_warmup > 1000) {
        snprintf(why, len, "CHORUS_AUTOTUNE_WARMUP=%ld: the warm-up steps must be 0 to 1000",
                 cfg->autotune_warmup);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

void chorus__tune_start(chorus_engine *e, int on, int steps, int warmup, int algo_forced)
{
    eng_tune *t = &e->tune;
    memset(t, 0, sizeof(*t));
    if (!on) return;
    t->active = 1;
    t->stage = -1;
    t->steps = steps;
    t->warmup = warmup;
    t->algo_forced = algo_forced;
    t->best_fusion = t->start_fusion = e->o.fusion_threshold;
    t->best_cycle = t->start_cycle = e->o.cycle_time_ms;
    t->best_algo = t->start_algo = chorus__select_forced(e->comm, CHORUS_COLL_ALLREDUCE);
    t->base_score = -1;
    CHORUS_INFO(CHORUS_LOG_ENGINE,
                "autotune: on: %d warm-up steps, then %d measured steps per candidate (rank 0 "
                "measures and decides)",
                warmup, steps);
}
