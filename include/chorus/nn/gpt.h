/*
 * chorus/nn/gpt.h - a GPT (decoder-only transformer) for libchorus_nn (nn.h): token and position
 * embeddings, pre-norm blocks (LayerNorm, causal multi-head self-attention, GELU MLP, residual
 * connections), a final LayerNorm and an output layer tied to the token embedding, trained with
 * softmax cross-entropy on the next token. Forward and backward are written in C over the BLAS
 * (nn/gpt.c). Included by chorus/nn.h, which states the library's conventions (errors, threading).
 */
#ifndef CHORUS_NN_GPT_H
#define CHORUS_NN_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "chorus/nn/dist.h"
#include "chorus/nn/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nn_gpt_config {
    int layers;  /* transformer blocks */
    int d_model; /* width of the residual stream (C) */
    int heads;   /* attention heads; d_model is a multiple of it */
    int context; /* longest sequence (T) */
    int vocab;   /* token ids are in [0, vocab) */
} nn_gpt_config;

/* The named shapes: "tiny" (4 blocks, width 128, 4 heads, context 64, vocabulary 256: trains in
 * minutes on two cores) and "gpt2-124m" (GPT-2 small: 12 blocks, 768, 12 heads, 1024, 50257).
 * Errors: CHORUS_ERR_INVALID_ARG for another name (the message lists these). */
chorus_result nn_gpt_preset(const char *name, nn_gpt_config *c);

/* One block's parameters (or gradients, the same views into the gradient buffer). Linear
 * weights are (out, in), row-major, as torch.nn.Linear's: y = x W^T + b. */
typedef struct nn_gpt_block {
    float *ln1w, *ln1b;   /* (C) LayerNorm before attention */
    float *qkvw, *qkvb;   /* (3C, C), (3C): queries, keys, values, heads side by side in each */
    float *projw, *projb; /* (C, C), (C): attention output */
    float *ln2w, *ln2b;   /* (C) LayerNorm before the MLP */
    float *fcw, *fcb;     /* (4C, C), (4C) */
    float *fc2w, *fc2b;   /* (C, 4C), (C) */
} nn_gpt_block;

/* The whole model's parameters (or gradients); with tensor parallelism, this rank's shard:
 * qkvw (3 C/tp, C) (its heads' rows of each of q, k, v), qkvb (3 C/tp), projw (C, C/tp),
 * fcw (4C/tp, C), fcb (4C/tp), fc2w (C, 4C/tp); the rest whole. */
typedef struct nn_gpt_params {
    float *wte;           /* (vocab, C) token embedding, also the output layer's weight */
    float *wpe;           /* (context, C) position embedding */
    nn_gpt_block *blocks; /* (layers) */
    float *lnfw, *lnfb;   /* (C) final LayerNorm */
} nn_gpt_params;

struct nn_gpt_acts; /* what forward keeps for backward (nn/gpt.c) */

typedef struct nn_gpt {
    nn_gpt_config c;
    /* The parameters and gradients as a model of libchorus_nn, so that gradient
     * synchronisation (nn_dist), checkpoints and the optimizers work on them unchanged: one
     * contiguous buffer each, in groups that m->layers describe: layer 0 the embeddings (wte,
     * wpe), layer 1 + l block l, the last the final LayerNorm. Its layers cannot run
     * nn_forward: use nn_gpt_forward. nn_backward's grad_hook is honoured: nn_gpt_backward
     * calls m->grad_hook once per group as soon as its gradient is complete (the final
     * LayerNorm, the blocks last first, then the embeddings). */
    nn_model *m;
    nn_gpt_params p, g; /* views into m->params and m->grads */
    int max_batch;      /* sequences per forward */
    /* Megatron tensor parallelism over tp_comm's tp_size ranks (1: none): this rank holds heads
     * [tp_rank * H/tp, (tp_rank + 1) * H/tp) of every block, their rows of the QKV weight
     * and columns of the attention output (column- then row-parallel), and
     * 1/tp of the MLP's hidden units (rows of fc, columns of fc2). Embeddings, LayerNorms and
     * the biases of the two row-parallel layers are whole on every rank, with equal
     * gradients. One allreduce per sublayer forward (the row-parallel output) and backward
     * (the column-parallel input's gradient); a failure is latched in m->comm_err. */
    chorus_comm *tp_comm;
    int tp_rank, tp_size;
    int c_local;  /* C / tp: this rank's attention width (its heads' queries, keys, values) */
    int ff_local; /* 4C / tp: this rank's MLP hidden units */
    /* A pipeline stage (nn_gpt_create_stage) holds blocks [lo, hi) of the c.layers (the whole
     * model: [0, layers)). The first stage (lo 0) holds the embeddings and takes tokens; a
     * later stage takes the residual stream of the stage before. The last (hi layers) holds
     * the final LayerNorm and the output layer, with a copy of the token embedding it is tied
     * to when it is not also the first: the copies stay equal when they start equal and their
     * gradients are summed before each update (Megatron's way). m's groups are the ones held,
     * in the whole model's order: grp_emb the embeddings (or -1), grp_block block lo,
     * grp_lnf the final LayerNorm (or -1). */
    int lo, hi;
    int grp_emb, grp_block, grp_lnf;
    int borrowed;       /* nn_gpt_create_replica: m's parameters and gradients are another's */
    const float *input; /* the last forward's input (N,C): the embeddings, or a later stage's */
    int B, T;           /* the shape of the last forward */
    const int32_t *tokens;
    struct nn_gpt_acts *a;
    size_t act_bytes; /* bytes of activations and backward scratch held */
    int recompute;    /* nn_gpt_set_recompute: blocks keep only their outputs */
} nn_gpt;

/* Builds a model of shape c for batches of up to max_batch sequences (parameters zero: call
 * nn_gpt_init_params). Errors (NULL returned): CHORUS_ERR_INVALID_ARG for a shape that is not
 * positive or a width that the heads do not divide, CHORUS_ERR_NOMEM; nn_last_error() says
 * which. */
nn_gpt *nn_gpt_create(const nn_gpt_config *c, int max_batch);
/* nn_gpt_create split over the ranks of tp_comm (NULL: one rank) by Megatron's tensor
 * parallelism (nn_gpt.tp_comm). The heads must divide among the ranks (CHORUS_ERR_INVALID_ARG
 * otherwise). Every rank of tp_comm must run the same forward and backward passes. */
nn_gpt *nn_gpt_create_tp(const nn_gpt_config *c, int max_batch, chorus_comm *tp_comm);
/* Blocks [lo, hi) of a model of shape c as a pipeline stage (nn_gpt.lo): with the embeddings
 * when lo is 0, the final LayerNorm and the tied output layer when hi is c->layers. max_batch 0
 * builds the parameters alone, without activations (nothing may run forward on it).
 * Errors as nn_gpt_create, and CHORUS_ERR_INVALID_ARG for a range that is empty or outside
 * the blocks. nn_gpt_create is nn_gpt_create_stage(c, max_batch, 0, c->layers). */
nn_gpt *nn_gpt_create_stage(const nn_gpt_config *c, int max_batch, int lo, int hi);
/* A model of owner's shape (its stage, its recomputation) whose parameters and gradients are
 * owner's, with activations of its own: a pipeline keeps one per micro-batch in flight, their
 * backward passes adding into one gradient. Destroy it before owner. Errors as
 * nn_gpt_create. */
nn_gpt *nn_gpt_create_replica(const nn_gpt *owner);
/* Where the parameters of the stage of blocks [lo, hi) of shape c (not tensor-parallel) lie in
 * the unsplit model's buffer: k = 1 or 2 ranges (off[i], n[i]) returned, which are the stage's
 * own buffer in order (a later last stage: the token embedding, then its blocks and the final
 * LayerNorm). */
size_t nn_gpt_stage_ranges(const nn_gpt_config *c, int lo, int hi, size_t off[2], size_t n[2]);
/* Copies g's ranges of whole (the unsplit model's parameters) into g's parameters. */
void nn_gpt_copy_stage(nn_gpt *g, const float *whole);
/* Copies this rank's shard of the unsplit model whole (same shape, tp_size 1) into g. */
void nn_gpt_copy_shard(nn_gpt *g, const nn_gpt *whole);
/* Tensor parallelism: between shard, a vector laid out as the parameters of rank r's shard
 * (g is any rank's shard model: their layouts are the same; g->m->nparams floats), and wvec,
 * one laid out as the whole model's parameters (whole is an unsplit model of g's shape, e.g.
 * nn_gpt_create(&g->c, 0); whole->m->nparams floats): to_whole 0 copies rank r's part of
 * wvec into shard, to_whole 1 puts shard in its place in wvec (the parts every rank holds
 * whole included). Any vector so laid out moves alike: parameters, gradients, optimizer
 * state. Errors: CHORUS_ERR_INVALID_ARG (r outside the split, whole not of g's shape, g a
 * pipeline stage), CHORUS_ERR_NOMEM. */
chorus_result nn_gpt_tp_move(const nn_gpt *g, int r, float *shard, const nn_gpt *whole, float *wvec,
                             int to_whole);
/* Frees g and everything it holds. NULL is ignored. */
void nn_gpt_destroy(nn_gpt *g);

/* GPT-2's initialisation, reproducible from seed: linear weights and embeddings normal with
 * standard deviation 0.02, the two projections into the residual stream (attention output,
 * MLP output) 0.02 / sqrt(2 layers); biases 0; LayerNorm gains 1, shifts 0. A model split by
 * tensor parallelism gets its shard of the unsplit model's initialisation (the unsplit
 * parameters are made for a moment, without activations). Errors: CHORUS_ERR_NOMEM (split
 * models only). */
chorus_result nn_gpt_init_params(nn_gpt *g, uint64_t seed);

/* A stage's forward: the first stage over tokens (B, T), a later one over x (B, T, C), the
 * stage before's output, which must stay unchanged until this pass's backward. Returns the
 * last stage's logits (as nn_gpt_forward), an earlier stage's output (B, T, C), valid until
 * its next forward. */
const float *nn_gpt_stage_forward(nn_gpt *g, const int32_t *tokens, const float *x, int B, int T);
/* A stage's backward after its forward (the last stage: and nn_gpt_loss), from dout (B, T, C),
 * the gradient of an earlier stage's output (ignored on the last). Adds the parameter
 * gradients as nn_gpt_backward; returns the gradient of a later stage's input x (B, T, C),
 * valid until its next backward, or NULL on the first. */
const float *nn_gpt_stage_backward(nn_gpt *g, const float *dout);
/* Forward over tokens (B, T), 1 <= T <= context, B <= max_batch. Returns the logits (B, T,
 * vocab), valid until the next forward or loss. */
const float *nn_gpt_forward(nn_gpt *g, const int32_t *tokens, int B, int T);
/* After nn_gpt_forward: the softmax cross-entropy of the logits against targets (B, T). Returns
 * the SUM over the B*T positions of -log p(target); replaces the logits with their gradient,
 * (softmax - onehot) * grad_scale, for nn_gpt_backward. Adds the positions whose most likely
 * token is the target to *hits when hits is not NULL. */
double nn_gpt_loss(nn_gpt *g, const int32_t *targets, float grad_scale, long *hits);
/* Back-propagates the loss's gradient through the last forward, ADDING the parameter gradients
 * to g->m->grads (several passes accumulate). The groups' gradients are written one group at
 * a time, the final LayerNorm's first, then the blocks from the last, the embeddings' last
 * (the tied output layer's share of them included); g->m->grad_hook, when set, is called as
 * each is finished. g->m->fwd_hook, when set, is called by forward and by backward before each
 * group's parameters are read (ZeRO-3 all-gathers them there: nn_zero_init). */
void nn_gpt_backward(nn_gpt *g);
/* Recomputation per block (on != 0): forward keeps each block's output (the next one's
 * input) and one block's inner activations, shared by all; backward runs each block's forward
 * again (the last's excepted: its are still there) before its backward, the same arithmetic,
 * so the gradients are the same bits. Reallocates the activations (g->act_bytes shrinks);
 * call before the first forward. Errors: CHORUS_ERR_NOMEM (g unchanged). */
chorus_result nn_gpt_set_recompute(nn_gpt *g, int on);
/* Points the gradient views (g->g) at the groups' m->layers[i].dw again, after they were moved
 * (ZeRO-2 points every group's at one buffer of its own, nn_zero_init). */
void nn_gpt_point_grads(nn_gpt *g);
/* The same for the parameter views (g->p), after ZeRO-3 pointed every group's m->layers[i].w
 * at its gather buffer. */
void nn_gpt_point_params(nn_gpt *g);

/* The global norm of the whole model's gradient into *norm: with tensor parallelism the split
 * tensors' squares are summed over the ranks (collective over tp_comm) and those every rank
 * holds whole counted once. Errors: the allreduce's. */
chorus_result nn_gpt_grad_norm(nn_gpt *g, double *norm);
/* The square of nn_gpt_grad_norm; a pipeline stage after the first leaves its copy of the
 * tied token embedding out (the first counts it), so that the stages' sums add up to the whole
 * model's. */
chorus_result nn_gpt_grad_sumsq(nn_gpt *g, double *sumsq);

/* The tensors the model's parameters (and gradients) are made of, in their order in m's
 * buffer: the embeddings, each block's LayerNorms, linear weights (out, in) and biases, the
 * final LayerNorm (a stage's and a tensor-parallel shard's own); vectors have rows 1. Writes
 * them to out (NULL: counts only) and returns their number. */
int nn_gpt_grad_tensors(const nn_gpt *g, nn_grad_tensor *out);

/* Draws the next token after tokens[0..n) (n >= 1; the last `context` of them are seen) from
 * softmax(logits / temperature) with the random state r. */
int32_t nn_gpt_sample_next(nn_gpt *g, const int32_t *tokens, int n, float temperature, nn_rng *r);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_GPT_H */
