/*
 * half.c - what the 16-bit cast compressors (fp16.c, bf16.c) share: narrowing float32/float64
 * to 16-bit floats and widening back, and their one-round plan.
 */
#include <string.h>

#include "engine/compress/compress.h"
#include "reduce/reduce.h"

void chorus__half_narrow(const void *src, uint16_t *wire, size_t n, chorus_dtype t, int bf)
{
    if (t == CHORUS_FLOAT32) {
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            wire[i] = bf ? chorus__f32_to_bf16(s[i]) : chorus__f32_to_f16(s[i]);
    } else {
        const double *s = src;
        for (size_t i = 0; i < n; i++)
            wire[i] = bf ? chorus__f32_to_bf16((float)s[i]) : chorus__f32_to_f16((float)s[i]);
    }
}

void chorus__half_widen(const uint16_t *wire, void *dst, size_t n, chorus_dtype t, int bf)
{
    if (t == CHORUS_FLOAT32) {
        float *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = bf ? chorus__bf16_to_f32(wire[i]) : chorus__f16_to_f32(wire[i]);
    } else {
        double *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = bf ? chorus__bf16_to_f32(wire[i]) : chorus__f16_to_f32(wire[i]);
    }
}

chorus_result chorus__half_plan(size_t count, chorus_dtype t, chorus_op op, chorus_dtype w,
                                chorus_compress_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    if (t != CHORUS_FLOAT32 && t != CHORUS_FLOAT64) return CHORUS_OK; /* left alone */
    plan->nrounds = 1;
    plan->round[0] =
        (chorus_round){CHORUS_ROUND_REDUCE, op == CHORUS_AVG ? CHORUS_SUM : op, w, count};
    return CHORUS_OK;
}
