/*
 * fuzz_idx.c - libFuzzer target for the IDX (MNIST / Fashion-MNIST) reader of the trainer,
 * nn_idx_read (nn/data.c): the input is the file, plain or gzip-compressed; the first byte
 * picks 1 (labels) or 3 (images) dimensions. An accepted file's shape must match the bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static char path[256];
    if (!path[0])
        snprintf(path, sizeof(path), "%s/chorus-fuzz-idx-%d",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    if (n < 1) return 0;
    int dims = d[0] & 1 ? 3 : 1;
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n > 1 && fwrite(d + 1, 1, n - 1, f) != n - 1) abort();
    fclose(f);
    uint8_t *data = NULL;
    int shape[3] = {0, 0, 0};
    if (nn_idx_read(path, dims, &data, shape) == CHORUS_OK) {
        size_t total = (size_t)shape[0] * (dims == 3 ? (size_t)shape[1] * (size_t)shape[2] : 1);
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < total; i++) sink ^= data[i];
        (void)sink;
        free(data);
    }
    unlink(path);
    return 0;
}
