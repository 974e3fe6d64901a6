/*
 * fuzz_nn_ckpt.c - libFuzzer target for the trainer's checkpoint payload decoder,
 * nn_ckpt_decode (nn/checkpoint.c), the bytes found inside a valid checkpoint container. The
 * first byte picks the mode: raw bytes, or the same bytes with the header fields that must
 * match the model (magic, version, optimizer, sizes, signature) fixed up by the harness so
 * that the checks behind them are reached. A refused payload must leave the model untouched.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_fixup.h"
#include "chorus/nn.h"

static void put32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, 4); /* the payload is little-endian, as is every target we build for */
}
static void put64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static nn_model *m;
    static nn_optim o;
    if (!m) {
        m = nn_model_create(2, 1, 1);
        if (!m || nn_add_linear(m, 2) || nn_model_finalize(m, 1) ||
            nn_optim_init_sgd(&o, m->nparams, 0.9f, 0, 0.0f))
            abort();
    }
    int fix;
    unsigned char *b = fuzz_image(d, n, &fix, &n);
    if (!b) return 0;
    if (fix && n >= 88) {
        memcpy(b, "CHNNSTAT", 8);
        put32(b + 8, 1);
        put32(b + 12, (uint32_t)o.kind);
        put64(b + 16, m->nparams);
        put64(b + 24, nn_optim_state_count(&o));
        put64(b + 80, nn_model_signature(m));
    }
    for (size_t i = 0; i < m->nparams; i++) m->params[i] = -7.0f;
    nn_train_state st;
    if (nn_ckpt_decode(b, n, m, &o, &st) == CHORUS_OK) {
        if (n != nn_ckpt_payload_size(m, &o)) abort();
    } else {
        for (size_t i = 0; i < m->nparams; i++)
            if (m->params[i] != -7.0f) abort(); /* a refused payload modified the model */
    }
    free(b);
    return 0;
}
