/*
 * pipeline.h - pipeline-parallel schedules: which micro-batch each stage of a pipeline runs
 * forward or backward, in what order (docs/PARALLELISM.md).
 *
 * A model cut into p stages runs on p consecutive ranks; a step's batch is cut into m
 * micro-batches. Stage s runs forward(j) once stage s-1 has sent it the activations of j, and
 * backward(j) once stage s+1 has sent back their gradient (the last stage: once its own
 * forward(j) is done). A schedule is a plain table, per stage the ordered list of {FWD|BWD,
 * micro-batch}, that a test can print and check and a runtime can follow:
 *
 *   GPipe  every forward, then every backward (in micro-batch order): stage s holds the
 *          activations of all m micro-batches at once.
 *   1F1B   p - s - 1 warm-up forwards, then one forward one backward in turn, then the
 *          remaining backwards (cool-down): at most p - s micro-batches in flight on stage s.
 *
 * Both have the bubble (p-1)/(m+p-1) when a forward and a backward cost the same; 1F1B only
 * bounds the activation memory. Backwards run in micro-batch order in both, so the
 * gradients of the m micro-batches are added in the same order as a single rank's.
 *
 * Plain data and arithmetic: no communication, nothing is printed unless asked. Part of
 * libchorus_nn (nn/schedule.c), whose pipeline stages (chorus/nn/pipeline.h) follow it.
 */
#ifndef CHORUS_PIPELINE_H
#define CHORUS_PIPELINE_H

#include <stddef.h>
#include <stdio.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CHORUS_PIPE_GPIPE, CHORUS_PIPE_1F1B, CHORUS_PIPE_KIND_COUNT } chorus_pipe_kind;

typedef enum { CHORUS_PIPE_FWD, CHORUS_PIPE_BWD } chorus_pipe_op;

/* One entry of a stage's list. */
typedef struct chorus_pipe_step {
    chorus_pipe_op op;
    int micro; /* 0..m-1 */
} chorus_pipe_step;

typedef struct chorus_pipe_schedule {
    chorus_pipe_kind kind;
    int stages, micro;       /* p, m */
    int nsteps;              /* steps per stage: 2m */
    chorus_pipe_step *steps; /* (stages, nsteps): stage s's list at steps + s * nsteps */
} chorus_pipe_schedule;

/* What chorus_pipe_simulate found: every step costs one time unit. */
typedef struct chorus_pipe_sim {
    int makespan;      /* time units until the last stage of the last backward is done */
    int *busy;         /* (stages) units each stage computed: 2m */
    int *max_inflight; /* (stages) most micro-batches forwarded but not yet backwarded */
    double *bubble;    /* (stages) idle share of the makespan: (makespan - busy) / makespan */
} chorus_pipe_sim;

/* The name of a kind ("gpipe", "1f1b"), or NULL outside the enumeration. */
const char *chorus_pipe_kind_name(chorus_pipe_kind k);

/* Parses "gpipe" or "1f1b" into *k. Returns CHORUS_OK, or CHORUS_ERR_INVALID_ARG for any
 * other text (or a NULL argument). */
chorus_result chorus_pipe_kind_parse(const char *name, chorus_pipe_kind *k);

/* Builds the schedule of kind for stages >= 1 and micro >= 1 into *s (free with
 * chorus_pipe_schedule_free). Errors: CHORUS_ERR_INVALID_ARG (a count below 1 or a product
 * too large, an unknown kind; *s is then zeroed), CHORUS_ERR_NOMEM. */
chorus_result chorus_pipe_schedule_init(chorus_pipe_schedule *s, chorus_pipe_kind kind, int stages,
                                        int micro);
/* Frees what chorus_pipe_schedule_init allocated; a zeroed schedule is ignored. */
void chorus_pipe_schedule_free(chorus_pipe_schedule *s);

/* Stage s's list (nsteps entries). s must be in [0, stages). */
const chorus_pipe_step *chorus_pipe_stage_steps(const chorus_pipe_schedule *s, int stage);

/* Runs the schedule as a timed simulation with unit-cost steps: each stage takes its next
 * step as soon as what it needs is done (forward(j) on the stage before, backward(j) on the
 * stage after or, on the last stage, its own forward(j)). Checks on the way that every stage
 * runs every micro-batch forward once and backward once, the forward first, and that no stage
 * waits forever. Fills *sim (free with chorus_pipe_sim_free). Errors: CHORUS_ERR_INVALID_ARG
 * with a one-line reason in why (len bytes; may be NULL), e.g. "stage 1 step 3: backward of
 * micro-batch 2 before its forward" or "deadlock: stage 0 waits at step 4 (backward of
 * micro-batch 0)"; CHORUS_ERR_NOMEM. */
chorus_result chorus_pipe_simulate(const chorus_pipe_schedule *s, chorus_pipe_sim *sim, char *why,
                                   size_t len);
/* Frees what chorus_pipe_simulate allocated. */
void chorus_pipe_sim_free(chorus_pipe_sim *sim);

/* The bubble fraction of a pipeline of p stages and m micro-batches: (p-1)/(m+p-1). */
double chorus_pipe_bubble_formula(int stages, int micro);

/* Prints the schedule to f, one line per stage ("stage 0: F0 F1 B0 F2 B1 ..."). */
void chorus_pipe_schedule_print(const chorus_pipe_schedule *s, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_PIPELINE_H */
