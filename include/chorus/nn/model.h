/*
 * chorus/nn/model.h - the layers and models of libchorus_nn (nn.h): the error message, random
 * numbers, layer kinds, nn_model, building, the forward and backward passes and the loss. Included
 * by chorus/nn.h, which states the library's conventions (errors, threading).
 */
#ifndef CHORUS_NN_MODEL_H
#define CHORUS_NN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The message of the last nn_* call that failed on this thread ("" when none has). Valid until
 * the next failing nn_* call on this thread. The thread form of the convention of
 * include/chorus.h: nn keeps no message per object. */
const char *nn_last_error(void);

/* ---- random numbers ------------------------------------------------------------------ */

/* splitmix64: small, fast, and good enough for initialisation, shuffling and dropout. Its
 * whole state is one integer, so it is trivial to checkpoint. */
typedef struct nn_rng {
    uint64_t s;
} nn_rng;

/* Sets the state from seed (any value). */
void nn_rng_seed(nn_rng *r, uint64_t seed);
/* The next 64 random bits; advances the state. */
uint64_t nn_rng_next(nn_rng *r);
/* Uniform in [0, 1). */
float nn_rng_uniform(nn_rng *r);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t nn_rng_below(nn_rng *r, uint64_t n);
/* Mixes several words into one seed (for per-epoch, per-rank, per-step streams). */
uint64_t nn_seed_mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

/* ---- layers and models --------------------------------------------------------------- */

typedef enum {
    NN_LINEAR,
    NN_CONV2D,
    NN_MAXPOOL2D,
    NN_RELU,
    NN_GELU,
    NN_DROPOUT,
    NN_FLATTEN,
    NN_LAYERNORM,
    NN_KIND_COUNT
} nn_kind;

typedef struct nn_layer {
    nn_kind kind;
    int in_c, in_h, in_w;    /* per-sample input shape; features are (F) = (F,1,1) */
    int out_c, out_h, out_w; /* per-sample output shape */
    int k, stride, pad;      /* conv2d and maxpool2d window */
    float p;                 /* dropout probability */
    int inplace;             /* relu/dropout write over their input */
    size_t param_off;        /* offset of this layer's parameters in model->params */
    size_t nparams;          /* weight count + bias count */
    float *w, *b;            /* views into model->params: weight, bias (gamma, beta) */
    float *dw, *db;          /* views into model->grads, same layout */
    const float *in;         /* input of the last forward: (B, in) */
    float *out;              /* output of the last forward: (B, out) */
    float *buf;              /* owned output buffer (unused when in place or flatten) */
    float *cache;            /* conv2d: column gradients (C*k*k, OH*OW); layernorm: mean,
                                rstd (B, 2); dropout: scale mask (B, F) */
    float *scratch;          /* conv2d: im2col columns of one sample (C*k*k, OH*OW) */
    int32_t *idx;            /* maxpool2d: argmax within the input plane (B, C, OH, OW) */
    /* tensor parallelism (nn_add_linear_column / nn_add_linear_row), 0 otherwise */
    int tp;               /* nn_tp_mode */
    chorus_comm *tp_comm; /* the ranks that share this layer */
    int tp_rank, tp_size; /* this rank's slice of the unsplit layer, and the slice count */
    int recompute_end;    /* activation recomputation: this layer ends a segment */
    int buf_pooled;       /* buf is a view into model->act_pool (not owned) */
} nn_layer;

struct nn_model;
/* Called by nn_backward right after layer `layer` has added its parameter gradients: from then
 * on, in this backward pass, nothing writes that layer's dw and db (an overlapping runtime may
 * start sending them while the layers below are still being differentiated). */
typedef void (*nn_grad_hook)(struct nn_model *m, int layer, void *arg);

typedef struct nn_model {
    int nlayers, cap;
    nn_layer *layers;
    int in_c, in_h, in_w;   /* per-sample input shape */
    int max_batch;          /* largest batch forward() accepts, fixed by finalize */
    size_t nparams;         /* total parameter count */
    float *params;          /* (nparams) every parameter, layer after layer */
    float *grads;           /* (nparams) gradients, same layout */
    float *dbuf[2];         /* ping-pong buffers for gradients w.r.t. activations */
    int training;           /* dropout active when set */
    uint64_t seed;          /* dropout streams derive from seed, rank and step */
    uint64_t step;          /* set by the trainer before forward() */
    int rank;               /* set by the trainer before forward() */
    nn_grad_hook grad_hook; /* when set, called by nn_backward per layer with parameters */
    void *grad_hook_arg;
    /* set before nn_model_finalize: */
    int recompute;   /* activation recomputation, segments of about this many layers (0 off) */
    int no_grads;    /* finalize allocates no gradient buffer: the caller points the layers'
                        dw/db (sharded gradients, nn_zero stage 2) */
    float *act_pool; /* recomputation: the activation buffers one segment reuses */
    size_t recompute_saved; /* set by finalize: activation bytes recomputation does not keep
                               (0: with these layers it keeps them all, changing nothing) */
    chorus_result comm_err; /* first failed collective in forward/backward (tensor parallel) */
    struct nn_mem *mem;     /* when set, finalize records its buffers there (nn_mem_*) */
    nn_grad_hook fwd_hook;  /* when set, called by nn_forward before each layer with
                               parameters (it may wait for them: nn_zero's all-gather) */
    void *fwd_hook_arg;
} nn_model;

/* Starts an empty model taking inputs of per-sample shape (c,h,w); features are (F,1,1).
 * Returns NULL when out of memory. */
nn_model *nn_model_create(int c, int h, int w);
/* Frees the model and every buffer it owns (forward outputs become invalid). NULL is ignored. */
void nn_model_destroy(nn_model *m);

/* Appending layers. Each uses the output shape of the layer before as its input shape.
 * Errors: CHORUS_ERR_INVALID_ARG for a bad argument, a window that does not fit the input
 * (the layer is then not added) or a model already finalized; CHORUS_ERR_NOMEM. */
chorus_result nn_add_linear(nn_model *m, int out_features); /* flattens (C,H,W) to F = C*H*W */
chorus_result nn_add_conv2d(nn_model *m, int out_channels, int k, int stride, int pad);
chorus_result nn_add_maxpool2d(nn_model *m, int k, int stride);
chorus_result nn_add_relu(nn_model *m);
chorus_result nn_add_gelu(nn_model *m);
chorus_result nn_add_dropout(nn_model *m, float p); /* 0 <= p < 1 */
chorus_result nn_add_flatten(nn_model *m);
chorus_result nn_add_layernorm(nn_model *m); /* normalises the C*H*W features of each sample */

/* Allocates the parameter, gradient and activation buffers for batches of up to max_batch
 * samples. Errors: CHORUS_ERR_INVALID_ARG (no layers, max_batch <= 0, already finalized),
 * CHORUS_ERR_NOMEM (the model is then unusable: destroy it). */
chorus_result nn_model_finalize(nn_model *m, int max_batch);

/* He-uniform weights (bound sqrt(6/fan_in)) for layers followed by relu or gelu, bound
 * 1/sqrt(fan_in) otherwise; zero biases, unit LayerNorm gain; reproducible from seed. Also stores
 * seed as the base of the dropout streams. */
void nn_model_init_params(nn_model *m, uint64_t seed);

/* Per-sample feature counts of the input and output (the output's: of the last layer). */
size_t nn_model_in_features(const nn_model *m);
size_t nn_model_out_features(const nn_model *m);

/* Runs the layers on x (B, C, H, W), B <= max_batch (B may be 0). Returns the output
 * (B, out_features), a buffer owned by the model and valid until the next forward. */
const float *nn_forward(nn_model *m, const float *x, int B);

/* Back-propagates dout (B, out_features) through the layers of the last forward, ADDING
 * the parameter gradients to model->grads (so several backward passes accumulate). The
 * gradient w.r.t. the model input is not computed. dout is not modified. Calls
 * m->grad_hook (when set) after each layer with parameters, last layer first. */
void nn_backward(nn_model *m, const float *dout, int B);
/* nn_backward that also computes the gradient w.r.t. the model input and returns it (B,
 * in_features): a buffer owned by the model, valid until the next backward (dout itself when
 * every layer is an identity). For a model that is one stage of a larger one. */
const float *nn_backward_input(nn_model *m, const float *dout, int B);

/* Sets every gradient in model->grads to 0 (before the first backward pass of a step). */
void nn_zero_grad(nn_model *m);

/* Softmax cross-entropy on logits (B, C) against labels (B). Returns the SUM over the batch
 * of -log softmax(logits)[label]; writes dlogits (B, C) = (softmax - onehot) * grad_scale
 * when dlogits is not NULL (grad_scale = 1/global batch gives the gradient of the mean);
 * adds the number of argmax hits to *correct when correct is not NULL. */
double nn_xent(const float *logits, const int32_t *labels, int B, int C, float grad_scale,
               float *dlogits, int *correct);

/* A short text name of a layer kind ("linear", "conv2d", ...). */
const char *nn_kind_name(nn_kind k);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_MODEL_H */
