/*
 * schedule.c - pipeline schedules (GPipe, 1F1B) as plain tables, and their timed simulation
 * with unit-cost steps: the checks a runtime relies on (every micro-batch forward before its
 * backward, no stage waiting forever) and the numbers a user compares (in-flight
 * activations, bubble). The stages that follow a schedule are in pipeline.c.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/pipeline.h"

const char *chorus_pipe_kind_name(chorus_pipe_kind k)
{
    switch (k) {
    case CHORUS_PIPE_GPIPE: return "gpipe";
    case CHORUS_PIPE_1F1B: return "1f1b";
    default: return NULL;
    }
}

chorus_result chorus_pipe_kind_parse(const char *name, chorus_pipe_kind *k)
{
    if (!name || !k) return CHORUS_ERR_INVALID_ARG;
    for (int i = 0; i < CHORUS_PIPE_KIND_COUNT; i++)
        if (!strcmp(name, chorus_pipe_kind_name((chorus_pipe_kind)i))) {
            *k = (chorus_pipe_kind)i;
            return CHORUS_OK;
        }
    return CHORUS_ERR_INVALID_ARG;
}

/* GPipe: F0..F(m-1), then B0..B(m-1). */
static void fill_gpipe(chorus_pipe_step *st, int m)
{
    for (int j = 0; j < m; j++) st[j] = (chorus_pipe_step){CHORUS_PIPE_FWD, j};
    for (int j = 0; j < m; j++) st[m + j] = (chorus_pipe_step){CHORUS_PIPE_BWD, j};
}

/* 1F1B on stage s of p: w = min(p-s-1, m) warm-up forwards, then F(w+i) B(i) pairs while
 * forwards remain, then the last w backwards. */
static void fill_1f1b(chorus_pipe_step *st, int p, int s, int m)
{
    int w = p - s - 1 < m ? p - s - 1 : m, n = 0;
    for (int j = 0; j < w; j++) st[n++] = (chorus_pipe_step){CHORUS_PIPE_FWD, j};
    for (int i = 0; i + w < m; i++) {
        st[n++] = (chorus_pipe_step){CHORUS_PIPE_FWD, w + i};
        st[n++] = (chorus_pipe_step){CHORUS_PIPE_BWD, i};
    }
    for (int j = m - w; j < m; j++) st[n++] = (chorus_pipe_step){CHORUS_PIPE_BWD, j};
}

chorus_result chorus_pipe_schedule_init(chorus_pipe_schedule *s, chorus_pipe_kind kind, int stages,
                                        int micro)
{
    if (!s) return CHORUS_ERR_INVALID_ARG;
    memset(s, 0, sizeof(*s));
    if (stages < 1 || micro < 1 || !chorus_pipe_kind_name(kind) ||
        (size_t)stages * (size_t)micro > (size_t)INT_MAX / 4)
        return CHORUS_ERR_INVALID_ARG;
    s->steps = malloc((size_t)stages * 2 * (size_t)micro * sizeof(*s->steps));
    if (!s->steps) return CHORUS_ERR_NOMEM;
    s->kind = kind;
    s->stages = stages;
    s->micro = micro;
    s->nsteps = 2 * micro;
    for (int st = 0; st < stages; st++) {
        chorus_pipe_step *l = s->steps + (size_t)st * (size_t)s->nsteps;
        if (kind == CHORUS_PIPE_GPIPE)
            fill_gpipe(l, micro);
        else
            fill_1f1b(l, stages, st, micro);
    }
    return CHORUS_OK;
}

void chorus_pipe_schedule_free(chorus_pipe_schedule *s)
{
    if (!s) return;
    free(s->steps);
    memset(s, 0, sizeof(*s));
}

const chorus_pipe_step *chorus_pipe_stage_steps(const chorus_pipe_schedule *s, int stage)
{
    return s->steps + (size_t)stage * (size_t)s->nsteps;
}

double chorus_pipe_bubble_formula(int stages, int micro)
{
    return (double)(stages - 1) / (double)(micro + stages - 1);
}

static chorus_result fail(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static chorus_result fail(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return CHORUS_ERR_INVALID_ARG;
}

static const char *op_word(chorus_pipe_op op)
{
    return op == CHORUS_PIPE_FWD ? "forward" : "backward";
}

/* Each stage's list: every micro-batch forward once and backward once, forward first. seen
 * is scratch of (micro) ints. */
static chorus_result check_lists(const chorus_pipe_schedule *s, int *seen, char *why, size_t len)
{
    for (int st = 0; st < s->stages; st++) {
        const chorus_pipe_step *l = chorus_pipe_stage_steps(s, st);
        memset(seen, 0, (size_t)s->micro * sizeof(int));
        for (int k = 0; k < s->nsteps; k++) {
            int j = l[k].micro;
            if (j < 0 || j >= s->micro)
                return fail(why, len, "stage %d step %d: micro-batch %d out of range", st, k, j);
            int want = l[k].op == CHORUS_PIPE_FWD ? 0 : 1;
            if (seen[j] != want)
                return fail(why, len, "stage %d step %d: %s of micro-batch %d %s", st, k,
                            op_word(l[k].op), j,
                            seen[j] > want ? "a second time" : "before its forward");
            seen[j]++;
        }
    }
    return CHORUS_OK;
}

void chorus_pipe_sim_free(chorus_pipe_sim *sim)
{
    if (!sim) return;
    free(sim->busy);
    free(sim->max_inflight);
    free(sim->bubble);
    memset(sim, 0, sizeof(*sim));
}

/* The end time of what step l[k] of stage st waits for, or -1 while that is not done. fend
 * and bend are (stages, micro) end times, -1 when not run. */
static int dep_end(const chorus_pipe_schedule *s, int st, chorus_pipe_step step, const int *fend,
                   const int *bend)
{
    int m = s->micro, j = step.micro;
    if (step.op == CHORUS_PIPE_FWD) return st == 0 ? 0 : fend[(st - 1) * m + j];
    if (st == s->stages - 1) return fend[st * m + j];
    return bend[(st + 1) * m + j];
}

chorus_result chorus_pipe_simulate(const chorus_pipe_schedule *s, chorus_pipe_sim *sim, char *why,
                                   size_t len)
{
    if (!s || !sim || !s->steps) return fail(why, len, "no schedule");
    memset(sim, 0, sizeof(*sim));
    int p = s->stages, m = s->micro;
    size_t pm = (size_t)p * (size_t)m;
    int *fend = malloc(pm * sizeof(int)), *bend = malloc(pm * sizeof(int));
    int *next = calloc((size_t)p, sizeof(int)), *live = calloc((size_t)p, sizeof(int));
    int *seen = calloc((size_t)m, sizeof(int));
    sim->busy = calloc((size_t)p, sizeof(int));
    sim->max_inflight = calloc((size_t)p, sizeof(int));
    sim->bubble = calloc((size_t)p, sizeof(double));
    chorus_result r = CHORUS_OK;
    if (!fend || !bend || !next || !live || !seen || !sim->busy || !sim->max_inflight ||
        !sim->bubble) {
        r = CHORUS_ERR_NOMEM;
        goto out;
    }
    if ((r = check_lists(s, seen, why, len)) != CHORUS_OK) goto out;
    for (size_t i = 0; i < pm; i++) fend[i] = bend[i] = -1;
    int left = p * s->nsteps, t = 0;
    while (left > 0) {
        int ran = 0;
        for (int st = 0; st < p; st++) {
            if (next[st] == s->nsteps) continue;
            chorus_pipe_step step = chorus_pipe_stage_steps(s, st)[next[st]];
            int e = dep_end(s, st, step, fend, bend);
            if (e < 0 || e > t) continue; /* what it needs is not done by time t */
            int *end = step.op == CHORUS_PIPE_FWD ? fend : bend;
            end[st * m + step.micro] = t + 1;
            live[st] += step.op == CHORUS_PIPE_FWD ? 1 : -1;
            if (live[st] > sim->max_inflight[st]) sim->max_inflight[st] = live[st];
            sim->busy[st]++;
            next[st]++;
            left--;
            ran = 1;
        }
        t++;
        if (!ran) {
            /* nothing ran and nothing is running: no stage can ever go on */
            for (int st = 0; st < p; st++)
                if (next[st] < s->nsteps) {
                    chorus_pipe_step step = chorus_pipe_stage_steps(s, st)[next[st]];
                    r = fail(why, len, "deadlock: stage %d waits at step %d (%s of micro-batch %d)",
                             st, next[st], op_word(step.op), step.micro);
                    goto out;
                }
        }
    }
    sim->makespan = t;
    for (int st = 0; st < p; st++) sim->bubble[st] = (double)(t - sim->busy[st]) / (double)t;
out:
    free(fend);
    free(bend);
    free(next);
    free(live);
    free(seen);
    if (r != CHORUS_OK) chorus_pipe_sim_free(sim);
    return r;
}

void chorus_pipe_schedule_print(const chorus_pipe_schedule *s, FILE *f)
{
    for (int st = 0; st < s->stages; st++) {
        fprintf(f, "stage %d:", st);
        const chorus_pipe_step *l = chorus_pipe_stage_steps(s, st);
        for (int k = 0; k < s->nsteps; k++)
            fprintf(f, " %c%d", l[k].op == CHORUS_PIPE_FWD ? 'F' : 'B', l[k].micro);
        fputc('\n', f);
    }
}
