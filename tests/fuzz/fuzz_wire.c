/*
 * fuzz_wire.c - libFuzzer target for src/wire/wire.c, the parser of every transport and store
 * message: the 48-byte header (with a length bound) and the HELLO, ABORT and KV payloads.
 * The first byte picks the parser; decoded fields are re-encoded and must round-trip.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1) return 0;
    unsigned sel = d[0] % 4;
    d++;
    n--;
    char why[200];
    switch (sel) {
    case 0: {
        if (n < CHORUS_WIRE_HDR_LEN) return 0;
        chorus_wire_hdr h;
        if (chorus__wire_decode_hdr(d, 1u << 20, &h, why, sizeof(why)) == CHORUS_OK) {
            unsigned char out[CHORUS_WIRE_HDR_LEN];
            chorus__wire_encode_hdr(&h, out);
            if (memcmp(out, d, 6) || h.len > (1u << 20)) abort();
            char desc[200];
            chorus__wire_describe(&h, desc, sizeof(desc));
        }
        break;
    }
    case 1: {
        chorus_wire_hello h;
        if (chorus__wire_decode_hello(d, n, &h) == CHORUS_OK) {
            if (h.rank < 0 || h.rank >= h.size || !memchr(h.job, 0, sizeof(h.job))) abort();
            if (h.lanes < 1 || h.lanes > CHORUS_WIRE_LANES_MAX || h.lane < 0 || h.lane >= h.lanes)
                abort();
            unsigned char out[CHORUS_WIRE_HELLO_LEN];
            chorus__wire_encode_hello(&h, out);
        }
        break;
    }
    case 2: {
        chorus_wire_abort a;
        if (chorus__wire_decode_abort(d, n, &a) == CHORUS_OK) {
            size_t l = strlen(a.why);
            for (size_t i = 0; i < l; i++)
                if ((unsigned char)a.why[i] < 32 || (unsigned char)a.why[i] > 126) abort();
            if (a.result <= CHORUS_OK || a.result >= CHORUS_RESULT_COUNT) abort();
        }
        break;
    }
    default: {
        chorus_wire_kv kv;
        if (chorus__wire_decode_kv(d, n, &kv) == CHORUS_OK) {
            if ((size_t)12 + kv.key_len + kv.value_len != n) abort();
            size_t len;
            unsigned char *p =
                chorus__wire_encode_kv(kv.op, kv.key, kv.key_len, kv.value, kv.value_len, &len);
            if (!p || len != n || memcmp(p, d, n)) abort();
            free(p);
        }
        break;
    }
    }
    return 0;
}
