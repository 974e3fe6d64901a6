/*
 * fp16.c - the built-in "fp16" compressor: float32/float64 tensors travel and are reduced as
 * IEEE half precision (float16), then widened back; one reduce round, fused with every other
 * reduction of that wire dtype and op. Other dtypes are left alone (an empty plan).
 */
#include "engine/compress/compress.h"

static chorus_result fp16_plan(void *st, const char *tensor, size_t count, chorus_dtype t,
                               chorus_op op, chorus_compress_plan *plan)
{
    (void)st, (void)tensor;
    return chorus__half_plan(count, t, op, CHORUS_FLOAT16, plan);
}

static chorus_result fp16_prepare(void *st, const chorus_compress_call *c, const void *src,
                                  void *wire)
{
    (void)st;
    chorus__half_narrow(src, wire, c->count, c->dtype, 0);
    return CHORUS_OK;
}

static chorus_result fp16_finish(void *st, const chorus_compress_call *c, const void *wire,
                                 void *dst)
{
    (void)st;
    chorus__half_widen(wire, dst, c->count, c->dtype, 0);
    return CHORUS_OK;
}

static const chorus_compressor fp16_comp = {"fp16", NULL, fp16_plan, fp16_prepare, fp16_finish};

const chorus_compressor *chorus_compressor_fp16(void)
{
    return &fp16_comp;
}
