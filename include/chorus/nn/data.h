/*
 * chorus/nn/data.h - training data (nn.h): IDX files (MNIST, Fashion-MNIST) and the distributed
 * sampler. Included by chorus/nn.h, which states the library's conventions (errors, threading).
 */
#ifndef CHORUS_NN_DATA_H
#define CHORUS_NN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_DATA_H */
