/*
 * cast.c - the built-in "fp16" and "bf16" compressors: float32/float64 tensors travel and are
 * reduced as IEEE half precision or bfloat16, then widened back; one reduce round, fused with
 * every other reduction of that wire dtype and op. Other dtypes are left alone (an empty
 * plan). The two differ only in the wire dtype, which is their state.
 */
#include <string.h>

#include "engine/compress/compress.h"
#include "reduce/reduce.h"

static chorus_dtype wire_dtype(const void *st)
{
    return *(const chorus_dtype *)st;
}

static chorus_result cast_plan(void *st, const char *tensor, size_t count, chorus_dtype t,
                               chorus_op op, chorus_compress_plan *plan)
{
    (void)tensor;
    memset(plan, 0, sizeof(*plan));
    if (t != CHORUS_FLOAT32 && t != CHORUS_FLOAT64) return CHORUS_OK; /* left alone */
    plan->nrounds = 1;
    plan->round[0] = (chorus_round){CHORUS_ROUND_REDUCE, op == CHORUS_AVG ? CHORUS_SUM : op,
                                    wire_dtype(st), count};
    return CHORUS_OK;
}

/* out[i] = CONV(in[i]) for n elements; the element types are fixed per loop so that the
 * loops vectorise. */
#define CAST_LOOP(OUT_T, IN_T, CONV)                                                               \
    do {                                                                                           \
        OUT_T *o_ = out;                                                                           \
        const IN_T *i_ = in;                                                                       \
        for (size_t k = 0; k < n; k++) o_[k] = CONV(i_[k]);                                        \
    } while (0)
#define TO_BF16(x) chorus__f32_to_bf16((float)(x))
#define TO_F16(x)  chorus__f32_to_f16((float)(x))

static void narrow(const void *in, void *out, size_t n, chorus_dtype t, int bf)
{
    if (t == CHORUS_FLOAT32 && bf)
        CAST_LOOP(uint16_t, float, TO_BF16);
    else if (t == CHORUS_FLOAT32)
        CAST_LOOP(uint16_t, float, TO_F16);
    else if (bf)
        CAST_LOOP(uint16_t, double, TO_BF16);
    else
        CAST_LOOP(uint16_t, double, TO_F16);
}

static void widen(const void *in, void *out, size_t n, chorus_dtype t, int bf)
{
    if (t == CHORUS_FLOAT32 && bf)
        CAST_LOOP(float, uint16_t, chorus__bf16_to_f32);
    else if (t == CHORUS_FLOAT32)
        CAST_LOOP(float, uint16_t, chorus__f16_to_f32);
    else if (bf)
        CAST_LOOP(double, uint16_t, chorus__bf16_to_f32);
    else
        CAST_LOOP(double, uint16_t, chorus__f16_to_f32);
}

static chorus_result cast_prepare(void *st, const chorus_compress_call *c, const void *src,
                                  void *wire)
{
    narrow(src, wire, c->count, c->dtype, wire_dtype(st) == CHORUS_BFLOAT16);
    return CHORUS_OK;
}

static chorus_result cast_finish(void *st, const chorus_compress_call *c, const void *wire,
                                 void *dst)
{
    widen(wire, dst, c->count, c->dtype, wire_dtype(st) == CHORUS_BFLOAT16);
    return CHORUS_OK;
}

static chorus_dtype f16_wire = CHORUS_FLOAT16, bf16_wire = CHORUS_BFLOAT16;
static const chorus_compressor fp16_comp = {"fp16", &f16_wire, cast_plan, cast_prepare,
                                            cast_finish};
static const chorus_compressor bf16_comp = {"bf16", &bf16_wire, cast_plan, cast_prepare,
                                            cast_finish};

const chorus_compressor *chorus_compressor_fp16(void)
{
    return &fp16_comp;
}

const chorus_compressor *chorus_compressor_bf16(void)
{
    return &bf16_comp;
}
