/*
 * memory.c - accounting of the bytes a rank holds for parameters, gradients, optimizer state
 * and activations: every allocation is recorded when it is made, and the peak of the total is
 * kept, so the numbers are those of the buffers that really exist.
 */
#include "chorus/nn.h"

void nn_mem_add(nn_mem *mm, nn_mem_part p, size_t n)
{
    mm->bytes[p] += n;
    size_t t = nn_mem_total(mm);
    if (t > mm->peak) mm->peak = t;
}

void nn_mem_sub(nn_mem *mm, nn_mem_part p, size_t n)
{
    mm->bytes[p] -= n < mm->bytes[p] ? n : mm->bytes[p];
}

size_t nn_mem_total(const nn_mem *mm)
{
    size_t t = 0;
    for (int p = 0; p < NN_MEM_PARTS; p++) t += mm->bytes[p];
    return t;
}

const char *nn_mem_part_name(nn_mem_part p)
{
    static const char *names[NN_MEM_PARTS] = {"params", "grads", "optimizer", "activations"};
    return (unsigned)p < NN_MEM_PARTS ? names[p] : "unknown";
}
