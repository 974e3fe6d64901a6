/*
 * fuzz_compress_state.c - libFuzzer target for a compressor's saved memory
 * (chorus_compressor_load_state, src/engine/compress/state.c), which chorus-train reads back
 * from checkpoint files. The first byte picks the compressor (top-k, random-k, PowerSGD); the
 * rest is the state. Whatever is accepted is saved again, and a refused input must leave the
 * compressor able to save its (unchanged, empty) memory.
 */
#include <stdint.h>
#include <stdlib.h>

#include "chorus/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static const char *specs[] = {"topk:0.5", "randomk:0.5", "powersgd:2"};
    if (n < 1) return 0;
    chorus_compressor *c = NULL;
    if (chorus_compressor_create(specs[d[0] % 3], 0, &c) != CHORUS_OK || !c) return 0;
    chorus_result r = chorus_compressor_load_state(c, d + 1, n - 1);
    void *out = NULL;
    size_t len = 0;
    if (chorus_compressor_save_state(c, &out, &len) != CHORUS_OK) abort();
    if (r != CHORUS_OK && r != CHORUS_ERR_NOMEM && len != 8 + 32 + 8) abort(); /* still empty */
    free(out);
    chorus_compressor_destroy(c);
    return 0;
}
