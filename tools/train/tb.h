/*
 * tb.h - chorus-train's TensorBoard scalars (--tensorboard DIR, or CHORUS_TENSORBOARD):
 * the job's curves in DIR (rank 0, or worker 0 under a parameter server: loss, accuracy,
 * learning rate, samples/s, test accuracy) and each rank's own in DIR/rank<k> (its samples/s,
 * communication time, bytes sent, compression ratio). Any part of the trainer logs a scalar of
 * its own with train_tb_job or train_tb_rank.
 */
#ifndef CHORUS_TRAIN_TB_H
#define CHORUS_TRAIN_TB_H

#include <stdint.h>

#include "chorus.h"
#include "chorus/tensorboard.h"

typedef struct train_tb {
    chorus_comm *comm;
    int rank;        /* in comm: names DIR/rank<k> */
    int reporter;    /* writes the job's curves (worker 0) */
    chorus_tb *job;  /* the reporter with --tensorboard: DIR */
    chorus_tb *mine; /* with --tensorboard: DIR/rank<k>; NULL: chorus_log_scalar */
} train_tb;

/* What one optimizer step did, as the step's scalars show it. */
typedef struct train_tb_step {
    int64_t step;     /* optimizer steps done, from 1 */
    double loss, acc; /* the job's, over the global batch */
    double lr;        /* learning rate of the step */
    double samples_s; /* the job's samples per second in the step */
    double rank_samples_s;
    double comm_s;      /* this rank's seconds in gradient communication */
    double bytes_sent;  /* gradient bytes this rank gave to the step's exchange */
    double bytes_dense; /* the same gradient uncompressed (ratio = dense / sent) */
} train_tb_step;

/* Opens the writers for dir (NULL: the runtime's, CHORUS_TENSORBOARD, if set) of this rank of
 * comm (the job); reporter: this rank writes the job's curves (the trainer's rank 0, worker 0
 * under a parameter server). Returns 0, or -1 with the reason in why. */
int train_tb_open(train_tb *tb, const char *dir, chorus_comm *comm, int reporter, char *why,
                  size_t len);
/* The job's scalar (the reporter writes it; other ranks return at once). 0, or -1 with why. */
int train_tb_job(train_tb *tb, const char *tag, int64_t step, double value, char *why, size_t len);
/* This rank's scalar. 0, or -1 with why. */
int train_tb_rank(train_tb *tb, const char *tag, int64_t step, double value, char *why, size_t len);
/* The scalars of one step (train/..., rank/..., comm/...). 0, or -1 with why. */
int train_tb_log_step(train_tb *tb, const train_tb_step *s, char *why, size_t len);
/* The test-set evaluation's test/accuracy and test/loss at step. 0, or -1 with why. */
int train_tb_test(train_tb *tb, int64_t step, double acc, double loss, char *why, size_t len);
void train_tb_close(train_tb *tb);

#endif
