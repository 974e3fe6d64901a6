/*
 * reduce.c - the reduction kernels. One macro instantiates a loop per (type, op); the loops
 * have no branches in their bodies so gcc -O2 -ftree-vectorize (enabled per function below)
 * turns them into SIMD code.
 */
#include <math.h>
#include <string.h>

#include "reduce/reduce.h"

#define VEC __attribute__((optimize("tree-vectorize")))

/* ---- f16 / bf16 conversion (round to nearest even) ------------------------------------ */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float chorus__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {                                                     /* zero / subnormal */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t chorus__f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan (keep nan quiet and non-zero) */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                  /* below 2^-14: subnormal or 0 */
        float v = bits_f32(ax);
        /* v * 2^24 rounded to nearest even integer is the subnormal mantissa */
        float m = nearbyintf(v * 0x1p24f);
        return (uint16_t)(sign | (uint16_t)m);
    }
    uint32_t mant_odd = (ax >> 13) & 1;
    ax += 0xfffu + mant_odd; /* round to nearest even at bit 13 */
    return (uint16_t)(sign | (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ff));
}

float chorus__bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t chorus__f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* ---- kernels ---------------------------------------------------------------------------- */

#define OP_SUM(x, y) ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
#define OP_MIN(x, y) ((y) < (x) ? (y) : (x))
#define OP_MAX(x, y) ((y) > (x) ? (y) : (x))

#define KERNEL(name, T, OP)                                                                        \
    static VEC void name(void *dst_, const void *a_, const void *b_, size_t n)                     \
    {                                                                                              \
        T *dst = dst_;                                                                             \
        const T *a = a_, *b = b_;                                                                  \
        for (size_t i = 0; i < n; i++) dst[i] = (T)OP(a[i], b[i]);                                 \
    }

/* Integer sums and products wrap (computed unsigned so overflow is defined). */
#define KERNELS_INT(T, U)                                                                          \
    static VEC void sum_##T(void *dst_, const void *a_, const void *b_, size_t n)                  \
    {                                                                                              \
        T *dst = dst_;                                                                             \
        const T *a = a_, *b = b_;                                                                  \
        for (size_t i = 0; i < n; i++) dst[i] = (T)((U)a[i] + (U)b[i]);                            \
    }                                                                                              \
    static VEC void prod_##T(void *dst_, const void *a_, const void *b_, size_t n)                 \
    {                                                                                              \
        T *dst = dst_;                                                                             \
        const T *a = a_, *b = b_;                                                                  \
        for (size_t i = 0; i < n; i++) dst[i] = (T)((U)a[i] * (U)b[i]);                            \
    }                                                                                              \
    KERNEL(min_##T, T, OP_MIN)                                                                     \
    KERNEL(max_##T, T, OP_MAX)

KERNELS_INT(int8_t, uint32_t)
KERNELS_INT(uint8_t, uint32_t)
KERNELS_INT(int32_t, uint32_t)
KERNELS_INT(int64_t, uint64_t)
KERNEL(sum_float, float, OP_SUM)
KERNEL(prod_float, float, OP_PROD)
KERNEL(min_float, float, OP_MIN)
KERNEL(max_float, float, OP_MAX)
KERNEL(sum_double, double, OP_SUM)
KERNEL(prod_double, double, OP_PROD)
KERNEL(min_double, double, OP_MIN)
KERNEL(max_double, double, OP_MAX)

/* Half types: widen a block to f32, combine, narrow. Blocks keep the work in L1. */
#define HALF_KERNEL(name, TO32, FROM32, OP)                                                        \
    static VEC void name(void *dst_, const void *a_, const void *b_, size_t n)                     \
    {                                                                                              \
        uint16_t *dst = dst_;                                                                      \
        const uint16_t *a = a_, *b = b_;                                                           \
        for (size_t i = 0; i < n; i++) {                                                           \
            float x = TO32(a[i]), y = TO32(b[i]);                                                  \
            dst[i] = FROM32(OP(x, y));                                                             \
        }                                                                                          \
    }
HALF_KERNEL(sum_f16, chorus__f16_to_f32, chorus__f32_to_f16, OP_SUM)
HALF_KERNEL(prod_f16, chorus__f16_to_f32, chorus__f32_to_f16, OP_PROD)
HALF_KERNEL(min_f16, chorus__f16_to_f32, chorus__f32_to_f16, OP_MIN)
HALF_KERNEL(max_f16, chorus__f16_to_f32, chorus__f32_to_f16, OP_MAX)
HALF_KERNEL(sum_bf16, chorus__bf16_to_f32, chorus__f32_to_bf16, OP_SUM)
HALF_KERNEL(prod_bf16, chorus__bf16_to_f32, chorus__f32_to_bf16, OP_PROD)
HALF_KERNEL(min_bf16, chorus__bf16_to_f32, chorus__f32_to_bf16, OP_MIN)
HALF_KERNEL(max_bf16, chorus__bf16_to_f32, chorus__f32_to_bf16, OP_MAX)

typedef void (*kernel_fn)(void *, const void *, const void *, size_t);

/* [dtype][op] with op in SUM PROD MIN MAX (AVG uses SUM) */
static const kernel_fn kernels[CHORUS_DTYPE_COUNT][4] = {
    [CHORUS_INT8] = {sum_int8_t, prod_int8_t, min_int8_t, max_int8_t},
    [CHORUS_UINT8] = {sum_uint8_t, prod_uint8_t, min_uint8_t, max_uint8_t},
    [CHORUS_INT32] = {sum_int32_t, prod_int32_t, min_int32_t, max_int32_t},
    [CHORUS_INT64] = {sum_int64_t, prod_int64_t, min_int64_t, max_int64_t},
    [CHORUS_FLOAT16] = {sum_f16, prod_f16, min_f16, max_f16},
    [CHORUS_BFLOAT16] = {sum_bf16, prod_bf16, min_bf16, max_bf16},
    [CHORUS_FLOAT32] = {sum_float, prod_float, min_float, max_float},
    [CHORUS_FLOAT64] = {sum_double, prod_double, min_double, max_double},
};

void chorus__reduce(void *dst, const void *a, const void *b, size_t n, chorus_dtype t, chorus_op op)
{
    int o = op == CHORUS_AVG ? CHORUS_SUM : (int)op;
    kernels[t][o](dst, a, b, n);
}

#define DIV_LOOP(T, expr)                                                                          \
    do {                                                                                           \
        T *p = buf;                                                                                \
        for (size_t i = 0; i < n; i++) p[i] = (T)(expr);                                           \
    } while (0)

void chorus__reduce_finish(void *buf, size_t n, chorus_dtype t, chorus_op op, int nranks)
{
    if (op != CHORUS_AVG || nranks <= 1) return;
    switch (t) {
    case CHORUS_INT8: DIV_LOOP(int8_t, p[i] / nranks); break;
    case CHORUS_UINT8: DIV_LOOP(uint8_t, p[i] / nranks); break;
    case CHORUS_INT32: DIV_LOOP(int32_t, p[i] / nranks); break;
    case CHORUS_INT64: DIV_LOOP(int64_t, p[i] / nranks); break;
    case CHORUS_FLOAT32: DIV_LOOP(float, p[i] / (float)nranks); break;
    case CHORUS_FLOAT64: DIV_LOOP(double, p[i] / (double)nranks); break;
    case CHORUS_FLOAT16:
        DIV_LOOP(uint16_t, chorus__f32_to_f16(chorus__f16_to_f32(p[i]) / (float)nranks));
        break;
    case CHORUS_BFLOAT16:
        DIV_LOOP(uint16_t, chorus__f32_to_bf16(chorus__bf16_to_f32(p[i]) / (float)nranks));
        break;
    default: break;
    }
}
