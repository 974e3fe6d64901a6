/* hash.c - the one 64-bit hash of Chorus (communicator ids, engine maps and divergence checks,
 * elastic layouts, test checksums). */
#include <string.h>

#include "base/base.h"

uint64_t chorus__hash64_seed(uint64_t seed, const void *p, size_t n)
{
    const unsigned char *b = p;
    /* A multiply-xorshift mix per 8-byte word, then a final avalanche of the last bytes. */
    uint64_t h = seed ^ 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h ^= w * 0xc2b2ae3d27d4eb4full;
        h = (h << 31 | h >> 33) * 0x9e3779b97f4a7c15ull;
    }
    uint64_t w = 0;
    for (size_t k = 0; i < n; i++, k++) w |= (uint64_t)b[i] << (8 * k);
    h ^= w * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}
