/*
 * pipe_report.h - chorus-train's pipeline-parallel reporting (--pipeline-stages): the
 * per-rank memory lines, the measured bubble beside the formula, and their metrics lines.
 */
#ifndef CHORUS_TRAIN_PIPE_REPORT_H
#define CHORUS_TRAIN_PIPE_REPORT_H

#include <stdio.h>

#include "chorus/nn.h"

/* Collective over world: gathers every rank's nn_pipe_stats (of an nn_pipe, or of the GPT's
 * stages, mode_gpt_pipe.c) and optimizer bytes; rank 0
 * (is_root) prints, per rank, "memory rank R: params X MiB, grads X MiB, optimizer X MiB,
 * activations X MiB (peak X MiB)" and the measured bubble beside (p-1)/(m+p-1), and appends a
 * {"pipeline":...} line then a final {"memory":[...]} line (bytes) to metrics when it is not
 * NULL. Returns CHORUS_OK or the allgather's error (message in nn_last_error() is not set:
 * the caller reads chorus_last_error(world)). */
chorus_result train_pipe_report(const nn_pipe_stats *st, chorus_comm *world, const nn_optim *opt,
                                int is_root, const char *schedule, int micro, FILE *metrics);

#endif /* CHORUS_TRAIN_PIPE_REPORT_H */
