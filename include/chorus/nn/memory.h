/*
 * chorus/nn/memory.h - the accounting of the bytes a rank holds, by part (nn.h).
 * Included by chorus/nn.h, which states the library's conventions (errors, threading).
 */
#ifndef CHORUS_NN_MEMORY_H
#define CHORUS_NN_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_MEMORY_H */
