/*
 * fuzz_ckpt.c - libFuzzer target for checkpoint headers (src/base/atomic_file.c). The first
 * byte picks the mode: raw bytes as a file image, or the same bytes with both CRCs fixed up
 * by the harness so that the length, version and size checks behind them are reached. An
 * accepted image must describe a payload that lies inside the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_fixup.h"
#include "base/atomic_file.h"

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    int fix;
    unsigned char *b = fuzz_image(d, n, &fix, &n);
    if (!b) return 0;
    if (fix && n >= CHORUS_CKPT_HDR_LEN) {
        memcpy(b, CHORUS_CKPT_MAGIC, 8);
        put32(b + 32, chorus__crc32(0, b + CHORUS_CKPT_HDR_LEN, n - CHORUS_CKPT_HDR_LEN));
        put32(b + 44, chorus__crc32(0, b, 44));
    }
    uint64_t step;
    const unsigned char *payload;
    size_t plen;
    char why[200];
    if (chorus__ckpt_parse(b, n, &step, &payload, &plen, why, sizeof(why)) == CHORUS_OK) {
        if (payload < b || payload + plen > b + n) abort();
        volatile unsigned char sink = 0;
        for (size_t i = 0; i < plen; i++) sink ^= payload[i];
        (void)sink;
    }
    free(b);
    return 0;
}
