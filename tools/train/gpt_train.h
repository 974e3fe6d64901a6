/*
 * gpt_train.h - what --model gpt's modes share: mode_gpt.c (data and tensor parallel, ZeRO)
 * holds the text and the lines a GPT run prints; mode_gpt_pipe.c (--pipeline-stages) runs the
 * GPT's blocks in stages over them; mode_gpt_ps.c (--mode ps-*) trains it against the
 * parameter server with mode_ps.c's hooks. Used by tools/train/ only.
 */
#ifndef CHORUS_TRAIN_GPT_TRAIN_H
#define CHORUS_TRAIN_GPT_TRAIN_H

#include "trainer.h"

typedef struct train_gpt {
    nn_gpt *g; /* the model (under --pipeline-stages: the whole model's parameters only) */
    nn_text train, val;
    int32_t *x, *y;   /* (g->max_batch, context) a batch of windows and their next tokens */
    double unigram;   /* the unigram model's validation loss (nats per token) */
    double grad_norm; /* the last step's gradient norm, before clipping */
    /* --tensor-parallel, world rank 0, while a checkpoint is written or read: the whole model
     * (t->m is its model, t->opt its optimizer state) and this shard's optimizer, kept */
    nn_gpt *tp_w;
    nn_optim tp_opt;
} train_gpt;

extern const train_mode mode_gpt; /* mode_gpt_pipe.c ends with its finish */

/* Windows idx[0..n) of text: their tokens into x and next tokens into y, (n, context) each. */
void gpt_windows(const train_gpt *s, const nn_text *text, const uint32_t *idx, size_t n, int32_t *x,
                 int32_t *y);
/* Rank 0's line on the model and the text. */
void gpt_say_model(const trainer *t);
/* The held-out windows [*lo, *hi) this one of `parts` takes. */
void gpt_val_slice(const trainer *t, int part, int parts, size_t *lo, size_t *hi);
/* acc (loss sum, hits, tokens) summed over t->dist's ranks; rank 0 says the validation line.
 * Returns the next-byte accuracy, the loss per token in *loss. */
double gpt_say_validation(trainer *t, double acc[3], double *loss);
/* The tokens/s line and --sample bytes drawn from g (the whole model), rank 0 printing them
 * (with tensor parallelism every shard of replica 0 draws; every_rank: every rank draws, its
 * forward passes collective, as under --zero 3). */
void gpt_say_end(trainer *t, nn_gpt *g, int every_rank);

/* mode_gpt.c's hooks that the GPT under the parameter server (mode_gpt_ps.c) runs too: this
 * rank's windows forward and backward (trainer.h, forward_backward), the held-out windows
 * (apart: worker 0 alone takes them all), and freeing t->gpt. */
void gpt_forward_backward(trainer *t, const uint32_t *idx, size_t nloc, float scale,
                          double stats[3]);
double gpt_evaluate(trainer *t, double *loss);
void gpt_finish(trainer *t);

/* gpt_tp_ckpt.c: checkpoints of the whole model under --tensor-parallel. gpt_tp_whole: this
 * run's checkpoints go through them. gpt_tp_open and gpt_tp_close (world rank 0 only) put the
 * whole model's parameters and optimizer state in t->m and t->opt in place of the shard's,
 * and back. gpt_tp_move (the ranks of the first replica, t->rank 0: collective over its
 * tensor-parallel ranks) gathers every shard's parameters and optimizer state into the whole
 * (to_whole) or gives every shard its part of it. */
int gpt_tp_whole(const trainer *t);
void gpt_tp_open(trainer *t);
void gpt_tp_close(trainer *t);
void gpt_tp_move(trainer *t, int to_whole);

#endif /* CHORUS_TRAIN_GPT_TRAIN_H */
