/*
 * split.h - chorus-train's model-splitting options: the data x tensor grid of ranks
 * (--tensor-parallel), sharded optimizer state and gradients (--zero), activation
 * recomputation (--recompute), the large model, and the memory budget and report
 * (--max-memory-mb). Used by tools/train/ only.
 */
#ifndef CHORUS_TRAIN_SPLIT_H
#define CHORUS_TRAIN_SPLIT_H

#include <stdio.h>

#include "chorus.h"
#include "chorus/nn.h"
#include "common.h"

typedef struct train_par {
    /* options */
    int tp;        /* --tensor-parallel T (1: none) */
    int zero;      /* --zero 1|2|3 (0: none) */
    int recompute; /* --recompute[=K]: 0 off, -1 about sqrt(layers), else K */
    long max_mb;   /* --max-memory-mb (0: no budget) */
    /* the grid: world rank = data rank * T + tensor rank */
    chorus_comm *world, *tp_comm, *dp_comm;
    int tp_rank;
    nn_zero zs;
    nn_mem mem; /* this rank's buffers */
    /* --zero, rank 0, while a checkpoint is written or read: the whole model's buffers in the
     * model (--zero 3) and optimizer, their shards kept here (par_whole_open) */
    int whole_open;
    float *whole_params;
    size_t whole_bytes;
    nn_optim shard_opt;
} train_par;

/* Refuses option combinations the splits do not support, with the reason. */
void par_check_opts(const train_par *p, const char *model, const char *mode, const char *sync,
                    float dropout, int accum, const char *ckpt_dir, double time_limit);
/* Splits world into the grid and returns the communicator of the data-parallel replicas of this
 * rank's shard (world itself without --tensor-parallel). Only the first shard of each replica
 * writes: the others' stdout goes to /dev/null, their --metrics is dropped, and their
 * --dump-params FILE becomes FILE.tp<t> (then .<data rank>), which *dump points to. */
chorus_comm *par_grid(train_par *p, chorus_comm *world, const char **metrics, const char **dump);
/* Appends the layers of --model large, or of an MLP split by --tensor-parallel; 0 when the model
 * is neither (the trainer builds it), else 1 with *bad set on a failure. */
int par_add_layers(train_par *p, nn_model *m, const char *model, int nclasses, int *bad);
/* Before nn_model_finalize: memory accounting, recomputation, no gradient buffer at stage 2. */
void par_before_finalize(train_par *p, nn_model *m);
/* Floats of optimizer state per vector this rank needs. */
size_t par_optim_count(const train_par *p, const nn_model *m);
/* After the optimizer is initialised: ZeRO's buffers, the optimizer's bytes, and the budget:
 * every rank's planned peak is compared with --max-memory-mb and the run refused, naming the
 * parts and what would make it fit, when one rank's does not fit. Collective over the world. */
void par_setup(train_par *p, nn_model *m, const nn_optim *o);
/* Before the last backward pass of a step. */
void par_begin_backward(train_par *p, nn_model *m);
/* After the backward pass: a failed tensor-parallel collective stops the run; then the
 * update (ZeRO's sharded one, or the plain optimizer step). */
void par_optim_step(train_par *p, nn_model *m, nn_optim *o, float lr);
/* After training: the parameters whole on every rank (--zero all-gathers them behind the
 * next forward pass; the last step's must land before they are read). */
void par_sync(train_par *p, nn_model *m);
/* At the end, collective over the world: rank 0 prints every rank's memory line and writes
 * the {"memory":[...]} line to metrics (may be NULL). */
void par_report(train_par *p, FILE *metrics);
/* --zero's checkpoints are of the whole model, as every other run's (so that a run resumes
 * with another number of ranks, or without ZeRO): rank 0 holds the whole parameters and
 * optimizer state while it writes or reads one. par_whole_open (rank 0 only) gives o (and,
 * under --zero 3, m; at stages 1 and 2 the parameters are whole already) whole buffers in
 * place of the shards, which it keeps (nn_mem records them while open);
 * par_whole_close frees them and puts the shards back (the step count o->t kept).
 * par_whole_gather and par_whole_scatter (collective over the data-parallel ranks, rank 0's
 * buffers open) move the ranks' chunks to rank 0's whole buffers and back. */
void par_whole_open(train_par *p, nn_model *m, nn_optim *o);
void par_whole_close(train_par *p, nn_model *m, nn_optim *o);
void par_whole_gather(train_par *p, nn_model *m, nn_optim *o);
void par_whole_scatter(train_par *p, nn_model *m, nn_optim *o);
/* Frees the ZeRO buffers and the grid's communicators. */
void par_free(train_par *p);

#endif /* CHORUS_TRAIN_SPLIT_H */
