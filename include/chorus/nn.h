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
 *
 * The declarations live in one header per concern under chorus/nn/, all included here (a
 * program may include just the ones it uses):
 *   model.h     the error message, random numbers, layers and models, forward and backward
 *   optim.h     SGD and AdamW
 *   data.h      IDX files (Fashion-MNIST) and the distributed sampler
 *   ckpt.h      training state and checkpoints
 *   dist.h      data-parallel gradient synchronisation and gradient compression
 *   gpt.h       a GPT (decoder-only transformer) over the BLAS
 *   memory.h    the accounting of a rank's bytes by part
 *   split.h     tensor parallelism, activation recomputation, ZeRO
 *   balance.h   the load balancer's share rule
 *   pipeline.h  pipeline parallelism
 *   text.h      text for the GPT: the fortune databases as byte tokens
 *   blas.h      which of OpenBLAS's kernels run
 */
#ifndef CHORUS_NN_H
#define CHORUS_NN_H

#include "chorus.h"
#include "chorus/nn/balance.h"
#include "chorus/nn/blas.h"
#include "chorus/nn/ckpt.h"
#include "chorus/nn/data.h"
#include "chorus/nn/dist.h"
#include "chorus/nn/gpt.h"
#include "chorus/nn/memory.h"
#include "chorus/nn/model.h"
#include "chorus/nn/optim.h"
#include "chorus/nn/pipeline.h"
#include "chorus/nn/split.h"
#include "chorus/nn/text.h"

#endif /* CHORUS_NN_H */
