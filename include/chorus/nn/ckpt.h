/*
 * chorus/nn/ckpt.h - the trainer's checkpoints (nn.h): training state, the versioned payload,
 * saving and loading through the library's checkpoint container. Included by chorus/nn.h, which
 * states the library's conventions (errors, threading).
 */
#ifndef CHORUS_NN_CKPT_H
#define CHORUS_NN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "chorus/nn/model.h"
#include "chorus/nn/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_CKPT_H */
