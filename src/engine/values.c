/*
 * values.c - what the engine does to element values outside the core's reductions: scaling
 * (prescale, postscale), the identity element of each op (what a rank that joined
 * contributes). Scaling and identities are dtype
 * facts and belong with the dtype table once there is one.
 */
#include <math.h>
#include <string.h>

#include "engine/engine_int.h"
#include "reduce/reduce.h"

/* ---- scaling and identities --------------------------------------------------------------- */

void chorus__scale(void *dst, const void *src, size_t n, chorus_dtype t, double f)
{
    switch (t) {
    case CHORUS_FLOAT32: {
        float *d = dst;
        const float *s = src;
        float ff = (float)f;
        for (size_t i = 0; i < n; i++) d[i] = s[i] * ff;
        break;
    }
    case CHORUS_FLOAT64: {
        double *d = dst;
        const double *s = src;
        for (size_t i = 0; i < n; i++) d[i] = s[i] * f;
        break;
    }
    case CHORUS_FLOAT16: {
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = chorus__f32_to_f16(chorus__f16_to_f32(s[i]) * (float)f);
        break;
    }
    case CHORUS_BFLOAT16: {
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = chorus__f32_to_bf16(chorus__bf16_to_f32(s[i]) * (float)f);
        break;
    }
    default:
        if (dst != src) memmove(dst, src, n * chorus_dtype_size(t));
        break;
    }
}

#define FILL(T, v)                                                                                 \
    do {                                                                                           \
        T *p = dst, x = (v);                                                                       \
        for (size_t i = 0; i < n; i++) p[i] = x;                                                   \
    } while (0)

void chorus__fill_identity(void *dst, size_t n, chorus_dtype t, chorus_op op)
{
    if (op == CHORUS_SUM || op == CHORUS_AVG) {
        memset(dst, 0, n * chorus_dtype_size(t)); /* 0 and +0.0 are all-zero bits */
        return;
    }
    int hi = op == CHORUS_MIN; /* min: the largest value; max: the smallest; prod: 1 */
    switch (t) {
    case CHORUS_INT8: FILL(int8_t, op == CHORUS_PROD ? 1 : hi ? INT8_MAX : INT8_MIN); break;
    case CHORUS_UINT8: FILL(uint8_t, op == CHORUS_PROD ? 1 : hi ? UINT8_MAX : 0); break;
    case CHORUS_INT32: FILL(int32_t, op == CHORUS_PROD ? 1 : hi ? INT32_MAX : INT32_MIN); break;
    case CHORUS_INT64: FILL(int64_t, op == CHORUS_PROD ? 1 : hi ? INT64_MAX : INT64_MIN); break;
    case CHORUS_FLOAT16: FILL(uint16_t, op == CHORUS_PROD ? 0x3c00 : hi ? 0x7c00 : 0xfc00); break;
    case CHORUS_BFLOAT16: FILL(uint16_t, op == CHORUS_PROD ? 0x3f80 : hi ? 0x7f80 : 0xff80); break;
    case CHORUS_FLOAT32: FILL(float, op == CHORUS_PROD ? 1.0f : hi ? INFINITY : -INFINITY); break;
    case CHORUS_FLOAT64: FILL(double, op == CHORUS_PROD ? 1.0 : hi ? INFINITY : -INFINITY); break;
    default: break;
    }
}
