/*
 * nn.h - the Chorus C neural-network library (libchorus_nn): f32 layers with forward and
 * backward passes, softmax cross-entropy, SGD and AdamW, the IDX (MNIST-format) data reader,
 * the distributed sampler, checkpoints and data-parallel gradient synchronisation; for models
 * that outgrow one rank, tensor-parallel linear layers, sharded optimizer state and gradients
 * (ZeRO), activation recomputation, and the accounting of the memory all of it takes.
 *
 * A model is a sequence of layers built with nn_model_create() and nn_add_*(), then
 * nn_model_finalize(). All parameters of a model live in ONE contiguous buffer
 * (model->params) and all gradients in another of the same layout (model->grads); each layer
 * holds views into them. That lets the runtime allreduce, fuse or overlap the gradients of
 * the whole model, or of any layer, without copies.
 *
 * Activations are row-major, batch first: an image batch is (B,C,H,W), a feature batch
 * (B,F). Shapes in comments name those dimensions.
 *
 * Errors: every function that can fail returns a chorus_result (CHORUS_OK is 0, so `if (f())`
 * tests for failure) and, on failure, leaves a one-line message naming the cause (the file and
 * byte, the checkpoint and its damage, the peer) that nn_last_error() returns. The message is
 * per thread. Functions without a chorus_result cannot fail. The library never exits the
 * process and prints nothing.
 *
 * Threading: a model, optimizer, sampler or nn_dist is used by one thread at a time; distinct
 * objects may be used from different threads.
 */
#ifndef CHORUS_NN_H
#define CHORUS_NN_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "chorus/pipeline.h"

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

/* ---- optimizers ---------------------------------------------------------------------- */

typedef enum { NN_SGD, NN_ADAMW } nn_opt_kind;

typedef struct nn_optim {
    nn_opt_kind kind;
    size_t n;           /* parameter count */
    float momentum;     /* SGD */
    int nesterov;       /* SGD */
    float weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
    float beta1, beta2, eps;
    uint64_t t; /* steps taken */
    float *m;   /* (n) SGD momentum buffer / Adam first moment */
    float *v;   /* (n) Adam second moment; NULL for SGD */
} nn_optim;

/* SGD as in PyTorch (dampening 0): g += wd*p; buf = momentum*buf + g;
 * p -= lr * (nesterov ? g + momentum*buf : buf). Errors: CHORUS_ERR_NOMEM. */
chorus_result nn_optim_init_sgd(nn_optim *o, size_t n, float momentum, int nesterov,
                                float weight_decay);
/* AdamW as in PyTorch: p *= 1 - lr*wd; m,v moments; p -= lr * mhat / (sqrt(vhat) + eps).
 * Errors: CHORUS_ERR_NOMEM. */
chorus_result nn_optim_init_adamw(nn_optim *o, size_t n, float beta1, float beta2, float eps,
                                  float weight_decay);
/* Frees the state buffers (m, v); o may then be initialised again. */
void nn_optim_free(nn_optim *o);
/* One update of params (n) from grads (n) with learning rate lr. */
void nn_optim_step(nn_optim *o, float *params, const float *grads, float lr);
/* Floats of optimizer state (m and v) for checkpoints: 0, n or 2n. */
size_t nn_optim_state_count(const nn_optim *o);

/* ---- data: IDX files (MNIST, Fashion-MNIST) ------------------------------------------ */

typedef struct nn_dataset {
    int n;           /* samples */
    int c, h, w;     /* per-sample shape: 1 x 28 x 28 */
    uint8_t *images; /* (n, c, h, w) */
    uint8_t *labels; /* (n) */
    int nclasses;    /* 10 */
    float mean, std; /* normalisation applied by nn_dataset_batch */
} nn_dataset;

#define NN_FASHION_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/* Reads an IDX file, gzip-compressed or plain. dims: 3 for images, 1 for labels. On success
 * *data (malloc'd, caller frees) holds the bytes and shape[0..dims-1] the sizes. On failure
 * the message names the file and the byte offset (in the decompressed stream) where the
 * problem is: bad magic, wrong dimension count, implausible size, truncation, corrupt
 * compressed data (CHORUS_ERR_INVALID_ARG); a file that cannot be opened or read
 * (CHORUS_ERR_SYSTEM); CHORUS_ERR_NOMEM. */
chorus_result nn_idx_read(const char *path, int dims, uint8_t **data, int shape[3]);

/* Loads the train (train != 0) or test split of Fashion-MNIST from dir, or from
 * NN_FASHION_DEFAULT_DIR when dir is NULL. A missing directory or file gives a message
 * telling how to install the data (sudo apt-get install dataset-fashion-mnist) or where to
 * point --data (CHORUS_ERR_INVALID_ARG); otherwise the errors of nn_idx_read, and
 * CHORUS_ERR_INVALID_ARG when labels and images disagree. ds is left empty on failure. */
chorus_result nn_fashion_load(const char *dir, int train, nn_dataset *ds);
/* Frees the images and labels; a dataset left empty by a failed load may be freed too. */
void nn_dataset_free(nn_dataset *ds);

/* Gathers samples idx[0..B-1] into x (B, c, h, w) normalised as (v/255 - mean)/std, and
 * their labels into y (B). */
void nn_dataset_batch(const nn_dataset *ds, const uint32_t *idx, int B, float *x, int32_t *y);

/* ---- distributed sampler ------------------------------------------------------------- */

/* Every epoch the n sample indices are shuffled from (seed, epoch) with the same result on
 * every rank. Global step s covers positions [s*G, min((s+1)*G, n)) of that order; rank r
 * takes a contiguous slice of them whose size differs by at most one between ranks (or, after
 * nn_sampler_set_shares, of the sizes given there). So each
 * epoch every sample is seen exactly once across all ranks, the shards are disjoint, and
 * the samples of a global step do not depend on the world size. The last step of an epoch
 * may be short (uneven shards; some ranks may get none). */
typedef struct nn_sampler {
    size_t n;            /* dataset size */
    size_t global_batch; /* G */
    int rank, world;
    uint64_t seed;
    uint64_t epoch; /* the order in perm */
    uint32_t *perm; /* (n) */
    size_t *shares; /* (world) samples of a full global step per rank; NULL: the even split */
    size_t *tail;   /* (world) the same for the short last step of an epoch */
} nn_sampler;

/* Errors: CHORUS_ERR_INVALID_ARG (n 0 or above 2^32-1, global_batch 0, rank not in
 * [0, world)), CHORUS_ERR_NOMEM. */
chorus_result nn_sampler_init(nn_sampler *s, size_t n, size_t global_batch, int rank, int world,
                              uint64_t seed);
/* Frees the permutation. */
void nn_sampler_free(nn_sampler *s);
/* Shuffles the order of `epoch` from (seed, epoch): the same on every rank, any epoch in any
 * order (a resumed run sets the epoch it stopped in). */
void nn_sampler_set_epoch(nn_sampler *s, uint64_t epoch);
/* Steps per epoch: ceil(n / G). */
size_t nn_sampler_steps(const nn_sampler *s);
/* This rank's indices for global step `step` of the current epoch: returns their count
 * (<= nn_sampler_max_local) and sets *idx to point into the permutation. *global_count (when not
 * NULL) gets the number of samples of the step over all ranks. */
size_t nn_sampler_batch(const nn_sampler *s, size_t step, const uint32_t **idx,
                        size_t *global_count);
/* Largest count nn_sampler_batch can return. */
size_t nn_sampler_max_local(const nn_sampler *s);
/* Uneven shares (dynamic load balancing): from now on rank r takes shares[r] samples of each
 * full global step, contiguous and in rank order (rank 0 the first shares[0] positions of the
 * step), so every sample of an epoch is still seen exactly once whatever the shares, and may
 * change between any two steps. The short last step of an epoch (n not a multiple of G) is
 * cut in proportion to the shares by nn_balance_apportion (no minimum). shares NULL: back to
 * the even split. Errors: CHORUS_ERR_INVALID_ARG when the shares do not sum to G (the sampler
 * is then unchanged), CHORUS_ERR_NOMEM. */
chorus_result nn_sampler_set_shares(nn_sampler *s, const size_t *shares);

/* ---- checkpoints --------------------------------------------------------------------- */

/* Where training stands. Saved with the parameters and optimizer state. */
typedef struct nn_train_state {
    uint64_t epoch;         /* epoch to run next */
    uint64_t step_in_epoch; /* next global step within that epoch (the sampler position) */
    uint64_t global_step;   /* optimizer steps taken */
    uint64_t seed;          /* base seed: init, shuffling and dropout streams derive from it */
    uint64_t rng;           /* trainer RNG state */
    uint64_t model_sig;     /* hash of the architecture: refuses a checkpoint of another model */
} nn_train_state;

/* Hash of the layer kinds and shapes of a finalized model. */
uint64_t nn_model_signature(const nn_model *m);

/* Checkpoints are files of the library's checkpoint container (chorus/checkpoint.h): name
 * NN_CKPT_NAME, so <dir>/train.<step, 20 digits>.ckpt, the newest NN_CKPT_KEEP kept. The
 * container detects torn and damaged files (every truncation, every bit flip) and falls back
 * to older ones; its payload is this library's own, versioned (little-endian):
 *   0  char[8] "CHNNSTAT"      8  u32 payload version (1)   12 u32 optimizer kind
 *   16 u64 parameter count P   24 u64 optimizer state count S
 *   32 u64 optimizer steps t   40 u64[6] epoch, step_in_epoch, global_step, seed, rng,
 *                                        model signature
 *   88 f32[P] parameters, then f32[S] optimizer state (m, then v); nothing after it.
 * Checkpoints of the earlier standalone format (ckpt-<step>.chk, magic CHNNCKPT) are not read:
 * loading a directory that holds only those fails with a message saying so. */
#define NN_CKPT_NAME "train"
#define NN_CKPT_KEEP 2

/* Bytes of the payload for m and o. */
size_t nn_ckpt_payload_size(const nn_model *m, const nn_optim *o);

/* Writes the payload of (m, o, st) into buf, which holds len >= nn_ckpt_payload_size bytes.
 * Errors: CHORUS_ERR_INVALID_ARG when len is too small. */
chorus_result nn_ckpt_encode(const nn_model *m, const nn_optim *o, const nn_train_state *st,
                             void *buf, size_t len);

/* Reads a payload into m, o and st after checking its magic, version, sizes and that it was
 * written for this model (signature, parameter count) and optimizer (kind, state size).
 * Never reads outside buf[0..len). Nothing is modified when it fails.
 * Errors: CHORUS_ERR_INVALID_ARG, with the reason ("not a chorus-train checkpoint payload",
 * "payload version 9", "written for a different model (...)", "written for a different
 * optimizer", "truncated payload: ..."). */
chorus_result nn_ckpt_decode(const void *buf, size_t len, nn_model *m, nn_optim *o,
                             nn_train_state *st);

/* Saves (m, o, st) as checkpoint st->global_step in dir through chorus_checkpoint_save (atomic
 * and durable; dir is created), keeping the newest NN_CKPT_KEEP.
 * Errors: CHORUS_ERR_NOMEM, and those of chorus_checkpoint_save (the message is copied). */
chorus_result nn_ckpt_save(const char *dir, const nn_model *m, const nn_optim *o,
                           const nn_train_state *st);

/* What nn_ckpt_load_latest found. */
typedef struct nn_ckpt_info {
    int found;          /* 1: a checkpoint was loaded; 0: dir holds none (nothing modified) */
    uint64_t step;      /* the step of the one loaded */
    char path[4200];    /* its file */
    char skipped[1024]; /* newer checkpoints refused as damaged, with reasons; "" when none */
} nn_ckpt_info;

/* Loads the newest valid checkpoint in dir into m, o and st: a newer file that is torn or
 * damaged is refused, and the refusals are listed in info->skipped (e.g. "skipped damaged
 * checkpoint D/train.00000000000000000025.ckpt: payload checksum mismatch (...): damaged
 * data"). A directory that does not exist or holds no checkpoint is not an error:
 * info->found is then 0.
 * Errors (m, o and st untouched): CHORUS_ERR_INVALID_ARG when every checkpoint is damaged
 * (each named with its damage), when the newest valid one was written for another model or
 * optimizer or has a payload this version cannot read, or when dir holds only checkpoints of
 * the old format ("old format ... re-create"); CHORUS_ERR_SYSTEM when dir cannot be read;
 * CHORUS_ERR_NOMEM. */
chorus_result nn_ckpt_load_latest(const char *dir, nn_model *m, nn_optim *o, nn_train_state *st,
                                  nn_ckpt_info *info);
/* As nn_ckpt_load_latest, among the checkpoints of steps before `below` only (a resume that
 * cannot use the newest one: its parameter-server shards are damaged). None there is an
 * error (CHORUS_ERR_INVALID_ARG, "no valid checkpoint ... of a step before <below>"). */
chorus_result nn_ckpt_load_before(const char *dir, uint64_t below, nn_model *m, nn_optim *o,
                                  nn_train_state *st, nn_ckpt_info *info);

/* ---- data-parallel gradient synchronisation ------------------------------------------ */

/* The one place where the trainer talks to the communicator about gradients. */
typedef enum {
    NN_SYNC_LAYER, /* one blocking allreduce per layer that has parameters, last layer first,
                      after the backward pass */
    NN_SYNC_FUSED, /* one blocking allreduce over model->grads after the backward pass */
    NN_SYNC_ENGINE /* through the training runtime (chorus/engine.h): each layer's gradient
                      is enqueued by name as soon as backward has produced it, so it travels
                      while the layers below are differentiated; the step waits on them */
} nn_sync_mode;

struct nn_dist_engine; /* engine mode: the engine, handles and timings (nn/dist.c) */

typedef struct nn_dist {
    chorus_comm *comm;
    int rank, size;
    nn_sync_mode mode;
    double wait_s;        /* seconds the caller was blocked in collectives since init (exposed
                             communication: in engine mode only the waits on the handles) */
    double comm_s;        /* seconds gradient communication took since init: engine mode, the time
                             at least one gradient tensor was on its way (from its enqueue to the end
                             of its handle; union over the tensors of a step, summed over steps);
                             blocking modes, the time in the gradient allreduces */
    double hidden_s;      /* the part of comm_s that overlapped backward: in flight before the
                             step began to wait for the gradients, less the time the caller's
                             thread was off the CPU meanwhile (a lower bound; 0 in the blocking
                             modes) */
    double grad_wait_s;   /* the part of wait_s spent waiting for gradients */
    uint64_t in_backward; /* engine mode: gradient tensors handed to the engine during backward
                             (by the hook) rather than by nn_dist_sync_grads, since init */
    size_t bucket_bytes;  /* engine mode: consecutive layers are sent as one tensor until it
                             holds this many bytes (0, the default: one tensor per layer). Set
                             before the first step, the same on every rank. */
    struct nn_dist_engine *eng;
    struct chorus_compressor *comp; /* gradient compression (nn_dist_set_compression), or NULL */
} nn_dist;

/* Sets d up over comm (NULL: one rank, nothing to communicate). NN_SYNC_ENGINE with more than
 * one rank starts an engine (collective: every rank calls this). Errors: the engine's, and
 * CHORUS_ERR_NOMEM. */
chorus_result nn_dist_init(nn_dist *d, chorus_comm *comm, nn_sync_mode mode);
/* Stops the engine, if any (collective in engine mode). d->comm is not finalized. */
void nn_dist_finalize(nn_dist *d);
/* Copies rank 0's parameters to every rank. Errors: the broadcast's (e.g.
 * CHORUS_ERR_PEER_LOST), with the peer in nn_last_error(). */
chorus_result nn_dist_broadcast_params(nn_dist *d, nn_model *m);
/* Call before the LAST backward pass of a step (after nn_zero_grad and any earlier
 * accumulating passes). In engine mode it installs m->grad_hook so that each layer's
 * gradient is enqueued the moment backward finishes it; other modes do nothing. */
void nn_dist_begin_backward(nn_dist *d, nn_model *m);
/* Sums model->grads over the ranks, in place: the blocking modes allreduce now; engine mode
 * enqueues what backward has not (a step without nn_dist_begin_backward), waits on every
 * handle and removes the hook. The caller scales the loss gradient by 1/global batch, so the
 * sum is the gradient of the global mean loss. Errors: the allreduce's or the engine's (the
 * first failing tensor is named in nn_last_error()). */
chorus_result nn_dist_sync_grads(nn_dist *d, nn_model *m);
/* Sums n doubles over the ranks, in place (loss and accuracy counters). Errors: the
 * allreduce's. */
chorus_result nn_dist_sum(nn_dist *d, double *v, int n);
/* Broadcasts n bytes from rank 0. Errors: the broadcast's. */
chorus_result nn_dist_broadcast_bytes(nn_dist *d, void *buf, size_t n);

/* ---- gradient compression (nn/compress.c) ------------------------------------------------ */

/* Compresses the gradients with spec ("none", "fp16", "bf16", "topk:R", "randomk:R",
 * "powersgd:N": chorus_compressor_create) in every sync mode: fused compresses model->grads as
 * one tensor ("grads"; PowerSGD layer by layer, as it needs each layer's matrix), layer each
 * layer's gradient ("linear3"), engine each bucket (a bucket of several layers gets PowerSGD's
 * default square view). Layers under 1024 parameters stay dense; PowerSGD views a layer's
 * gradient as its weight matrix (out, in) with the bias as extra rows. The same spec on every
 * rank, after nn_dist_init and before the first step of m; nn_dist_finalize frees it. Errors:
 * CHORUS_ERR_INVALID_ARG for an unknown spec (nn_last_error() lists the valid ones),
 * CHORUS_ERR_NOMEM. */
chorus_result nn_dist_set_compression(nn_dist *d, const nn_model *m, const char *spec);
/* Bytes of gradient one rank sends per step with the compression set, against dense float32
 * (a step of model m); 1.0 with none. */
double nn_dist_compression_ratio(const nn_dist *d, const nn_model *m);
/* ---- memory accounting --------------------------------------------------------------- */

/* Bytes a rank holds, by part. Every allocation of a part is added with nn_mem_add and every
 * release removed with nn_mem_sub; peak is the largest total seen. */
typedef enum {
    NN_MEM_PARAMS,
    NN_MEM_GRADS,
    NN_MEM_OPTIMIZER,
    NN_MEM_ACTIVATIONS,
    NN_MEM_PARTS
} nn_mem_part;

typedef struct nn_mem {
    size_t bytes[NN_MEM_PARTS]; /* held now */
    size_t peak;                /* largest sum of bytes[] so far */
} nn_mem;

/* Records n bytes allocated (add) or released (sub) for part p, and updates the peak. */
void nn_mem_add(nn_mem *mm, nn_mem_part p, size_t n);
void nn_mem_sub(nn_mem *mm, nn_mem_part p, size_t n);
/* The sum of bytes[] held now. */
size_t nn_mem_total(const nn_mem *mm);
/* "params", "grads", "optimizer", "activations". */
const char *nn_mem_part_name(nn_mem_part p);

/* ---- tensor (intra-layer) parallelism ------------------------------------------------ */

/* Linear layers split over the ranks of a communicator tp of T ranks, as in Megatron-LM:
 *   column: the weight (Fout, Fin) is split by output features; rank t holds rows
 *           [t*Fout/T, (t+1)*Fout/T) and their biases and computes that slice of the output
 *           from the whole input. Backward: the gradient w.r.t. the input is the sum of every
 *           rank's part: one allreduce.
 *   row:    the weight is split by input features; the input is the slice a column layer
 *           produced; each rank computes a partial output x_t W_t^T, one allreduce sums them,
 *           and the (whole, replicated) bias is added once. Backward needs no communication.
 * A column layer, element-wise layers, then a row layer form a block that takes and gives the
 * whole activations with one allreduce in forward and one in backward. */
typedef enum { NN_TP_NONE, NN_TP_COLUMN, NN_TP_ROW } nn_tp_mode;

/* Appends a column-parallel Linear of out_features outputs in all (this rank computes
 * out_features / chorus_size(tp) of them). Errors: CHORUS_ERR_INVALID_ARG when out_features
 * is not a multiple of the rank count, or as nn_add_linear. */
chorus_result nn_add_linear_column(nn_model *m, int out_features, chorus_comm *tp);
/* Appends a row-parallel Linear of out_features outputs whose input is this rank's slice of
 * the features (the output of a column layer, possibly through element-wise layers).
 * Errors: CHORUS_ERR_INVALID_ARG for a bad count, or as nn_add_linear. */
chorus_result nn_add_linear_row(nn_model *m, int out_features, chorus_comm *tp);
/* CHORUS_OK, or the error of the first collective that failed inside nn_forward or
 * nn_backward since the model was built (they cannot return it; their outputs are then
 * meaningless), with its message (naming the peer) in nn_last_error(). */
chorus_result nn_model_comm_status(const nn_model *m);

/* ---- activation recomputation -------------------------------------------------------- */

/* Set before nn_model_finalize: the layers are cut into segments of about k layers (a cut
 * never falls before an in-place layer, so a segment's input is never overwritten); forward
 * keeps only each segment's output, and nn_backward recomputes a segment's activations from
 * its input before differentiating it (the last segment's are still there). The activation
 * buffers inside a segment are shared by all segments. The same computations run in the same
 * order, so gradients are bitwise those of a model that stores everything. k <= 0 chooses
 * about sqrt(layers). */
void nn_model_set_recompute(nn_model *m, int k);

/* ---- sharded optimizer state and gradients (ZeRO stage 1 and 2) ---------------------- */

/* The parameters are cut into segments of at most NN_ZERO_BUCKET floats, never across a
 * layer; rank r of p owns chunk r of each segment (ceil(len/p) floats, the last chunk maybe
 * shorter). Its optimizer state covers only its chunks (1/p of the model plus at most p-1
 * floats per segment). A step:
 *   stage 1: the gradients are allreduced (as data parallelism does); each rank updates its
 *            chunks of the parameters and optimizer state;
 *   stage 2: no full gradient buffer exists: every layer's gradient is written into one
 *            buffer of the largest layer's size, and reduce-scattered the moment backward has
 *            finished that layer (grad hook), so each rank keeps only its chunks of the summed
 *            gradients; then it updates its chunks.
 * Then every segment's chunks are all-gathered into every rank's parameters. The sums fold in
 * rank order as the allreduce's do, and the update is element-wise, so the parameters are
 * bitwise those of plain data parallelism. */
#define NN_ZERO_BUCKET (1u << 18)

typedef struct nn_zero_seg {
    size_t off, len;  /* in model->params */
    size_t chunk;     /* ceil(len / size) */
    size_t shard_off; /* of this rank's chunk in the optimizer state and gradient shard */
} nn_zero_seg;

struct nn_zero_gather; /* the all-gather thread (nn/zero.c) */

typedef struct nn_zero {
    int stage, rank, size;
    chorus_comm *comm;
    int nseg;
    nn_zero_seg *seg;
    size_t shard_n; /* floats of this rank's chunks in all */
    float *gshard;  /* stage 2: (shard_n) this rank's chunks of the summed gradients */
    float *gbuf;    /* stage 2: one layer's gradient, padded to whole chunks */
    size_t gbuf_n;
    float *scratch; /* (size+1) * largest chunk: all-gather landing and send */
    size_t scratch_n;
    chorus_result err; /* first failure in the backward hook */
    double comm_s;     /* seconds in the collectives (the all-gather thread's included) */
    double gather_s;   /* seconds the parameter all-gathers took (part of comm_s) */
    double wait_s;     /* seconds forward waited for parameters still being all-gathered */
    uint64_t steps;    /* nn_zero_step calls */
    nn_mem *mem;
    struct nn_zero_gather *bg; /* nn_zero_overlap: the all-gather thread */
} nn_zero;

/* Floats of optimizer state per state vector that rank `rank` of `size` needs for m (the
 * optimizer is initialised with this count). */
size_t nn_zero_shard_count(const nn_model *m, int rank, int size);
/* Sets z up for stage 1 or 2 over comm for the finalized model m (stage 2: m was finalized
 * with m->no_grads set, and the layers' gradient views are pointed into z's buffer). Records
 * its buffers in mem (may be NULL). Errors: CHORUS_ERR_INVALID_ARG, CHORUS_ERR_NOMEM. */
chorus_result nn_zero_init(nn_zero *z, nn_model *m, chorus_comm *comm, int stage, nn_mem *mem);
/* Frees z's buffers. */
void nn_zero_free(nn_zero *z);
/* Collective over z's communicator: from now on nn_zero_step leaves the all-gather to a thread
 * of its own (on a communicator split from z's, so the caller's collectives may run meanwhile),
 * segment by segment in layer order, and installs m->fwd_hook: the next forward waits before
 * each layer only for that layer's segments, so the all-gather of the later layers overlaps
 * the forward pass of the earlier ones. A failed all-gather is latched in m->comm_err
 * (nn_model_comm_status). Errors: the split's, CHORUS_ERR_SYSTEM (no thread). */
chorus_result nn_zero_overlap(nn_zero *z, nn_model *m);
/* Waits until the parameters are whole (before reading them outside forward: a dump, a
 * checkpoint). Errors: the all-gather's. */
chorus_result nn_zero_wait(nn_zero *z, nn_model *m);
/* Call before the backward pass of a step (one backward pass per step at stage 2): stage 2
 * installs the hook that reduce-scatters each layer's gradient. */
void nn_zero_begin_backward(nn_zero *z, nn_model *m);
/* Completes the step: the gradient reduction (stage 1), this rank's update of its chunks with
 * o (initialised with nn_zero_shard_count floats) at learning rate lr, and the all-gather of
 * the parameters. Errors: the collectives' (the peer named in nn_last_error()). */
chorus_result nn_zero_step(nn_zero *z, nn_model *m, nn_optim *o, float lr);
/* ---- load balancing: the share rule ------------------------------------------------- */

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
/* ---- pipeline parallelism (nn/pipeline.c, docs/PARALLELISM.md) ------------------------ */

/* The layers of a model cut into consecutive stages on consecutive ranks, trained on
 * micro-batches by a schedule of chorus/pipeline.h, and combined with data parallelism: a
 * world of D x P ranks is D pipelines of P consecutive ranks (rank r is stage r % P of
 * pipeline r / P), and the gradients of a stage are summed only over the D ranks holding
 * that stage. Activations go forward and their gradients back with non-blocking
 * point-to-point messages; a stage posts the receive of its next micro-batch before it
 * computes the current one. Each micro-batch in flight keeps its own activations (a stash
 * slot made the first time it is needed, so the slots a run holds are the most it ever had
 * in flight: m for GPipe, p - stage (+1 for the posted receive) for 1F1B). */
typedef struct nn_pipe nn_pipe;

/* What a rank measured, since nn_pipe_create. Bytes are of buffers actually allocated. */
typedef struct nn_pipe_stats {
    int stage, stages, replica, replicas;
    int layer_lo, layer_hi;   /* this stage runs layers [lo, hi) of the full model */
    size_t params_bytes;      /* this stage's parameters */
    size_t grads_bytes;       /* and their gradients */
    size_t activations_bytes; /* stash slots held at the peak: layer outputs, caches, the
                                 received input and output gradient of each micro-batch */
    int peak_inflight;        /* most micro-batches forwarded and not yet backwarded */
    double step_s;            /* seconds of pipeline steps (first to last micro-batch) */
    double wait_s;            /* of which waiting for a neighbour's activations, gradients,
                                 the delivery of its own sends, or the pipeline's end */
    uint64_t steps;
} nn_pipe_stats;

/* Collective over world: cuts full (a finalized model, its parameters initialised the same
 * on every rank) into `stages` stages balanced by compute (multiply-adds of a training step in
 * linear and conv2d layers: forward, weight and input gradients; other layers count their
 * output size), minimising the largest stage's, and sets this rank up as its
 * stage, for micro-batches of up to max_micro samples, m = micro per step, under schedule
 * kind. The stage copies its slice of full's parameters; full is not kept. Errors:
 * CHORUS_ERR_INVALID_ARG with the reason (a world size not a multiple of stages, more stages
 * than layers, counts below 1), the split's errors, CHORUS_ERR_NOMEM. */
chorus_result nn_pipe_create(const nn_model *full, chorus_comm *world, int stages, int micro,
                             chorus_pipe_kind kind, int max_micro, nn_pipe **out);
/* Frees the stage and its communicators (not world). Requests a failed step left pending are
 * completed first: at once when the failure broke the pipeline's communicator, else within
 * CHORUS_TIMEOUT_S. NULL is ignored. */
void nn_pipe_destroy(nn_pipe *p);

/* The stage's own model: its params and grads are the ones to update (optimizer) and to
 * report. Valid until nn_pipe_destroy. */
nn_model *nn_pipe_model(nn_pipe *p);
/* The communicator of this stage's replicas (this stage in every pipeline: the ranks whose
 * stage parameters are equal). Valid until nn_pipe_destroy. */
chorus_comm *nn_pipe_replicas(nn_pipe *p);

/* Collective over the pipeline: runs one step's forwards and backwards on nloc samples of
 * this pipeline (cut into m micro-batches of nloc/m, the first nloc%m one larger, as
 * chorus-train --accum), after zeroing the stage's gradients. x (nloc, in features) is read on
 * stage 0 only, y (nloc) on the last stage only (either may be NULL elsewhere). The last
 * stage's loss gradient is scaled by grad_scale; it adds the summed loss and hit count to
 * stats[0] and stats[1]. step seeds dropout: micro-batch k runs as step*m + k. Errors: a lost
 * or timed-out neighbour (CHORUS_ERR_PEER_LOST, CHORUS_ERR_TIMEOUT) with a message naming
 * its stage and world rank; CHORUS_ERR_NOMEM. */
chorus_result nn_pipe_step(nn_pipe *p, const float *x, const int32_t *y, int nloc, float grad_scale,
                           uint64_t step, double stats[2]);

/* Collective over the pipeline: forward only (dropout off) over n samples, in chunks of up
 * to max_micro; x (n, in features) is read on stage 0, y (n) on the last stage, which adds
 * the summed loss and hit count to stats[0] and stats[1]. Call between steps. Errors as
 * nn_pipe_step (the message gives the chunk's first sample in place of a micro-batch). */
chorus_result nn_pipe_evaluate(nn_pipe *p, const float *x, const int32_t *y, int n,
                               double stats[2]);

/* Sums the stage's gradients over the replicas of this stage (collective over them).
 * Errors: the allreduce's, with the message naming the stage. */
chorus_result nn_pipe_sync_grads(nn_pipe *p);

/* Collective over the pipeline: every stage's slice of a buffer laid out as the full model's
 * parameters (the parameters themselves, or optimizer state) into full (nparams of the full
 * model), on every rank of the pipeline; stage is this stage's slice (its model's nparams).
 * Errors: the broadcasts', with a message naming the stage. */
chorus_result nn_pipe_gather(nn_pipe *p, const float *stage, float *full);
/* This stage's slice of full (laid out as the full model's parameters) into stage. */
void nn_pipe_slice(const nn_pipe *p, const float *full, float *stage);

/* Fills *st with this rank's measurements. */
void nn_pipe_get_stats(const nn_pipe *p, nn_pipe_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_H */
