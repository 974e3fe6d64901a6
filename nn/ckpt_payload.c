/*
 * ckpt_payload.c - what a training checkpoint holds: parameters, optimizer state and where
 * the run stands (epoch, sampler position, step, seeds, model signature), encoded as a
 * versioned payload (layout in chorus/nn.h) and decoded with every field checked. It touches
 * no file (checkpoint.c stores the payload in the library's checkpoint container), so the
 * decoder can be fuzzed on its own (tests/fuzz/fuzz_nn_ckpt.c).
 */
#include <string.h>

#include "chorus/nn.h"
#include "nn_internal.h"

#define PAYLOAD_MAGIC   "CHNNSTAT"
#define PAYLOAD_VERSION 1u
#define PAYLOAD_HDR     88

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint payloads store floats in little-endian order; this target is not"
#endif

/* The payload header, stored as laid out in memory (little-endian, checked above). */
typedef struct payload_header {
    char magic[8];
    uint32_t version, opt_kind;
    uint64_t nparams, nstate, opt_t;
    uint64_t st[6]; /* epoch, step_in_epoch, global_step, seed, rng, model signature */
} payload_header;

_Static_assert(sizeof(payload_header) == PAYLOAD_HDR, "checkpoint payload header layout");

/* Floats of o->m and o->v that are saved (0 when the buffer does not exist). */
static size_t moments(const nn_optim *o, size_t *nm, size_t *nv)
{
    *nm = o->m ? o->n : 0;
    *nv = o->v ? o->n : 0;
    return *nm + *nv;
}

size_t nn_ckpt_payload_size(const nn_model *m, const nn_optim *o)
{
    size_t nm, nv;
    return PAYLOAD_HDR + (m->nparams + moments(o, &nm, &nv)) * sizeof(float);
}

chorus_result nn_ckpt_encode(const nn_model *m, const nn_optim *o, const nn_train_state *st,
                             void *buf, size_t len)
{
    size_t need = nn_ckpt_payload_size(m, o), nm, nv;
    if (len < need)
        return nn__fail(CHORUS_ERR_INVALID_ARG, "nn_ckpt_encode: %zu bytes, the payload needs %zu",
                        len, need);
    payload_header h = {
        .version = PAYLOAD_VERSION,
        .opt_kind = (uint32_t)o->kind,
        .nparams = m->nparams,
        .nstate = moments(o, &nm, &nv),
        .opt_t = o->t,
        .st = {st->epoch, st->step_in_epoch, st->global_step, st->seed, st->rng, st->model_sig}};
    memcpy(h.magic, PAYLOAD_MAGIC, 8);
    unsigned char *p = buf;
    memcpy(p, &h, sizeof(h));
    p += PAYLOAD_HDR;
    memcpy(p, m->params, m->nparams * sizeof(float));
    p += m->nparams * sizeof(float);
    if (nm) memcpy(p, o->m, nm * sizeof(float));
    p += nm * sizeof(float);
    if (nv) memcpy(p, o->v, nv * sizeof(float));
    return CHORUS_OK;
}

chorus_result nn_ckpt_decode(const void *buf, size_t len, nn_model *m, nn_optim *o,
                             nn_train_state *st)
{
    const unsigned char *p = buf;
    if (len < 8 || memcmp(p, PAYLOAD_MAGIC, 8))
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "not a chorus-train checkpoint payload (no %s magic)", PAYLOAD_MAGIC);
    if (len < PAYLOAD_HDR)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "truncated payload: %zu bytes, shorter than its %d-byte header", len,
                        PAYLOAD_HDR);
    payload_header h;
    memcpy(&h, p, sizeof(h));
    if (h.version != PAYLOAD_VERSION)
        return nn__fail(CHORUS_ERR_INVALID_ARG, "payload version %u, this build reads version %u",
                        h.version, PAYLOAD_VERSION);
    if (h.nparams != m->nparams)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "written for a different model (%llu parameters, this model has %zu)",
                        (unsigned long long)h.nparams, m->nparams);
    if (h.st[5] != nn_model_signature(m))
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "written for a different model: as many parameters (%zu) but other "
                        "layers (their kinds, order, shapes or dropout differ)",
                        m->nparams);
    size_t nm, nv;
    if (h.opt_kind != (uint32_t)o->kind || h.nstate != moments(o, &nm, &nv))
        return nn__fail(CHORUS_ERR_INVALID_ARG, "written for a different optimizer");
    size_t need = nn_ckpt_payload_size(m, o);
    if (len != need)
        return nn__fail(CHORUS_ERR_INVALID_ARG, "%s payload: %zu bytes, expected %zu",
                        len < need ? "truncated" : "oversized", len, need);
    o->t = h.opt_t;
    st->epoch = h.st[0];
    st->step_in_epoch = h.st[1];
    st->global_step = h.st[2];
    st->seed = h.st[3];
    st->rng = h.st[4];
    st->model_sig = h.st[5];
    p += PAYLOAD_HDR;
    memcpy(m->params, p, m->nparams * sizeof(float));
    p += m->nparams * sizeof(float);
    if (nm) memcpy(o->m, p, nm * sizeof(float));
    p += nm * sizeof(float);
    if (nv) memcpy(o->v, p, nv * sizeof(float));
    return CHORUS_OK;
}

int nn__ckpt_payload_step(const void *buf, size_t len, uint64_t *step)
{
    payload_header h;
    if (len < PAYLOAD_HDR) return 0;
    memcpy(&h, buf, sizeof(h));
    if (memcmp(h.magic, PAYLOAD_MAGIC, 8)) return 0;
    *step = h.st[2];
    return 1;
}
