/*
 * chorus/nn/balance.h - the load balancer's share rule (nn.h).
 * Included by chorus/nn.h, which states the library's conventions (errors, threading).
 */
#ifndef CHORUS_NN_BALANCE_H
#define CHORUS_NN_BALANCE_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rule every rank (and every front end) applies to the same numbers, so that all get the
 * same shares; docs/LOAD_BALANCING.md restates it for other implementations. */

/* Smallest share dynamic balancing gives a rank of `world` out of a global batch of G:
 * max(1, floor(G / (4 world))), so no rank ever gets nothing and every rank keeps being
 * measured; 0 when G < world (the even split then leaves some ranks without samples). */
size_t nn_balance_min_share(size_t global_batch, int world);
/* Largest share dynamic balancing can give one rank: G - (world-1) * min share. */
size_t nn_balance_max_share(size_t global_batch, int world);
/* Splits total into n integers out[0..n-1] that sum exactly to total, in proportion to the
 * weights w (>= 0; all zero: equally), none below min_each:
 *   1. quotas q_i = R * w_i / S over the parts not held, where R is total less min_each for
 *      each held part and S the sum of their weights (double precision, index order);
 *   2. every part whose quota is below min_each is held at min_each; repeat 1-2 until none is;
 *   3. out_i = floor(q_i) for the others, and the R - sum(floor) samples left go one each to
 *      the largest fractional parts q_i - floor(q_i), ties to the lower index.
 * Errors: CHORUS_ERR_INVALID_ARG (n <= 0, total < n*min_each, a weight negative or not
 * finite), CHORUS_ERR_NOMEM. */
chorus_result nn_balance_apportion(const double *w, int n, size_t total, size_t min_each,
                                   size_t *out);
/* The shares of a global batch of G samples for n ranks whose measured compute times per
 * sample are sec_per_sample[0..n-1]: nn_balance_apportion with weights 1/sec_per_sample (0
 * for a time that is not a positive finite number) and the minimum nn_balance_min_share.
 * Errors: CHORUS_ERR_INVALID_ARG when G < n, CHORUS_ERR_NOMEM. */
chorus_result nn_balance_shares(const double *sec_per_sample, int n, size_t global_batch,
                                size_t *out);

/* Fraction of a step's compute time that new shares must be predicted to save before they
 * replace the current ones: below it the measured differences are mostly noise, and chasing
 * them would make equal ranks unequal. */
#define NN_BALANCE_MIN_GAIN 0.05
/* Whether shares `next` should replace `current` for n ranks with the given times per
 * sample: 1 when the predicted compute time of a step, max_i(share_i * sec_per_sample_i),
 * falls below (1 - NN_BALANCE_MIN_GAIN) times the current one's, or when a rank's time is not
 * yet a positive finite number; else 0. */
int nn_balance_worth_moving(const size_t *current, const size_t *next, const double *sec_per_sample,
                            int n);
/* A smaller gain is taken too when it persists: NN_BALANCE_PERSIST windows in a row, each
 * measured on its own, predict that `next` saves more than NN_BALANCE_SMALL_GAIN of a step.
 * Noise between equal ranks seldom points the same way so many windows running; a steady
 * difference (a core shared with other work, a slower core) always does. */
#define NN_BALANCE_SMALL_GAIN 0.015
#define NN_BALANCE_PERSIST    3
/* The fraction of a step's predicted compute time, max_i(share_i * sec_per_sample_i), that
 * `next` saves over `current` (negative when it costs more); 0 when the current time is 0. */
double nn_balance_gain(const size_t *current, const size_t *next, const double *sec_per_sample,
                       int n);
/* 1 when each of the k windows' times per sample (rows of n in `windows`, oldest first)
 * predicts a gain of `next` over `current` above NN_BALANCE_SMALL_GAIN (nn_balance_gain), and k
 * is at least NN_BALANCE_PERSIST; else 0. A window with a time that is not a positive finite
 * number predicts nothing. */
int nn_balance_persists(const size_t *current, const size_t *next, const double *windows, int k,
                        int n);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_BALANCE_H */
