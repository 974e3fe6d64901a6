/*
 * fuzz_fixup.h - the input convention of the fuzz targets that have a "fix-up" mode: the first
 * byte picks the mode (bit 0: let the target fix up checksums or fields that must match, so
 * the checks behind them are reached), the rest is the image, copied to a buffer of exactly
 * its size so that AddressSanitizer sees any read past its end.
 */
#ifndef CHORUS_FUZZ_FIXUP_H
#define CHORUS_FUZZ_FIXUP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Returns the malloc'ed image (free it) and its length in *len, *fix the mode; NULL for an
 * empty input or when out of memory. */
static inline unsigned char *fuzz_image(const uint8_t *d, size_t n, int *fix, size_t *len)
{
    if (n < 1) return NULL;
    *fix = d[0] & 1;
    *len = n - 1;
    unsigned char *b = malloc(n - 1 ? n - 1 : 1);
    if (b) memcpy(b, d + 1, n - 1);
    return b;
}

#endif
