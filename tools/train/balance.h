/*
 * balance.h - chorus-train's per-worker monitoring and dynamic load balancing (allreduce
 * mode): every few steps the ranks exchange what each measured (forward/backward time, time
 * in collectives, samples), rank 0 names a rank that is far slower than the others and why,
 * and with --balance dynamic every rank computes the same new shares of the global batch from
 * those numbers (nn_balance_shares) and hands them to the sampler. docs/LOAD_BALANCING.md.
 */
#ifndef CHORUS_TRAIN_BALANCE_H
#define CHORUS_TRAIN_BALANCE_H

#include <stdio.h>

#include "chorus/nn.h"

typedef struct train_balance train_balance;

/* What the trainer asks for. */
typedef struct balance_opts {
    int dynamic;         /* --balance dynamic: shares follow the measured speeds */
    int every;           /* --balance-every: steps between re-balancings (and gathers) */
    int monitor_every;   /* gathers also every this many steps (the progress line's cadence) */
    const char *fixed;   /* --balance-shares "a,b,...": fixed uneven shares (tests), or NULL */
    size_t global_batch; /* G */
    const char *unit;    /* what a sample is, in the lines: "samples", "windows" (NULL: samples) */
    int rank, world;     /* among the training ranks */
} balance_opts;

/* Sets up monitoring (always) and balancing over d for sampler s (both must outlive it; s's
 * shares are set from here on). Fails (NULL, *why filled) on a bad --balance-shares or a global
 * batch smaller than the ranks under --balance dynamic. */
train_balance *balance_create(const balance_opts *o, nn_dist *d, nn_sampler *s, char *why,
                              size_t whylen);
void balance_destroy(train_balance *b);

/* The largest share a rank can be given: what the batch buffers must hold. */
size_t balance_capacity(const train_balance *b);

/* Records one step of this rank: seconds of forward and backward, seconds blocked in
 * collectives, samples taken. */
void balance_record(train_balance *b, double compute_s, double wait_s, size_t samples);

/* After optimizer step `global_step` (counted from 1): at the gather cadence, exchanges the
 * window's numbers (one allreduce of 5 doubles per rank, collective: every rank calls it at
 * the same steps), judges the slowest rank and, when dynamic, sets new shares. Returns
 * CHORUS_OK, or the allreduce's error (nn_last_error() says which peer). */
chorus_result balance_after_step(train_balance *b, uint64_t global_step);

/* Rank 0: the progress line's suffix, e.g. " | rank 1 is 2.0x slower than the median:
 * compute-bound", or "" when no rank is. */
const char *balance_note(const train_balance *b);

/* Rank 0: when this step gathered, writes ",\"ranks\":[...]" (and the slow rank) into the
 * metrics line being written to f; nothing otherwise. */
void balance_write_metrics(const train_balance *b, FILE *f);

/* Rank 0: a line describing the balancing, after the header; and at the end of the run the
 * per-rank summary over the whole run with the straggler named, if any. */
void balance_describe(const train_balance *b);
void balance_report(const train_balance *b);

/* Rank 0, --balance dynamic: saves the shares and the smoothed speeds beside the trainer's
 * checkpoint of `step` in dir (other runs save nothing). Returns 0, or -1 with the reason in
 * why. */
int balance_save(const train_balance *b, const char *dir, uint64_t step, char *why, size_t len);

/* --resume (collective): rank 0 reads the shares saved with checkpoint `step` and every rank
 * takes them, when this run balances dynamically and the job has as many ranks; otherwise the
 * shares start even (rank 0 says why). Returns the broadcast's error, else CHORUS_OK. */
chorus_result balance_resume(train_balance *b, const char *dir, uint64_t step);

/* Current shares (world entries), for tests and messages. */
const size_t *balance_shares(const train_balance *b);

/* --straggler-timeout S under --mode ps-*: a worker whose exchange with the servers (push of
 * its gradient, pull of the parameters) took more than S seconds reports it on stderr, saying
 * what held it back in that mode; at most one line per `quiet_steps` steps (the rest are
 * counted into the next line). *last and *missed carry that state between calls. A report,
 * not a bound: docs/LOAD_BALANCING.md says why the servers do not stop waiting. */
void balance_ps_wait_report(int worker, const char *mode, int staleness, uint64_t step,
                            double waited, double timeout, uint64_t quiet_steps, uint64_t *last,
                            uint64_t *missed);

#endif
