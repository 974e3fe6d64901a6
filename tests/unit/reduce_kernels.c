/* reduce_kernels.c - the reduction kernels against scalar references, and f16/bf16 rounding
 * checked exhaustively against a double-precision reference. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "harness.h"
#include "reduce/reduce.h"

/* Reference: round a double to the nearest f16 (even on ties), by brute force over the
 * neighbouring representable values. */
static uint16_t ref_f16(double x)
{
    if (isnan(x)) return 0x7e00;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (a >= 65520.0) return sign | 0x7c00;
    uint16_t best = 0;
    double bestd = INFINITY;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double v = chorus__f16_to_f32((uint16_t)h);
        double d = fabs(v - a);
        if (d < bestd || (d == bestd && (h & 1) == 0)) {
            bestd = d;
            best = (uint16_t)h;
        }
    }
    return sign | best;
}

/* The float average is the correctly rounded x / nranks, bit for bit (powers of two take a
 * multiplication by the exact reciprocal), over every kind of value (subnormals, infinities,
 * NaNs, extremes) and lengths that end in every vector tail. */
static void avg_bitwise(void)
{
    enum { N = 67 };
    static const int ranks[] = {2, 3, 4, 5, 7, 8, 16, 1024, 3000};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t k = 0; k < sizeof(ranks) / sizeof(ranks[0]); k++)
        for (size_t n = 1; n <= N; n += 11) {
            float f[N], fr[N];
            double d[N], dr[N];
            for (size_t i = 0; i < n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                uint32_t b32 = (uint32_t)(x >> 32);
                uint64_t b64 = x;
                if (i % 5 == 1) b32 &= 0x807fffffu, b64 &= 0x800fffffffffffffull; /* subnormal */
                memcpy(&f[i], &b32, 4);
                memcpy(&d[i], &b64, 8);
            }
            if (n > 3) f[2] = INFINITY, d[2] = -INFINITY, f[3] = NAN, d[3] = NAN;
            for (size_t i = 0; i < n; i++) {
                volatile float fv = (float)ranks[k];
                volatile double dv = (double)ranks[k];
                fr[i] = f[i] / fv;
                dr[i] = d[i] / dv;
            }
            chorus__reduce_finish(f, n, CHORUS_FLOAT32, CHORUS_AVG, ranks[k]);
            chorus__reduce_finish(d, n, CHORUS_FLOAT64, CHORUS_AVG, ranks[k]);
            for (size_t i = 0; i < n; i++) {
                ASSERT(isnan(fr[i]) ? isnan(f[i]) : memcmp(&f[i], &fr[i], 4) == 0);
                ASSERT(isnan(dr[i]) ? isnan(d[i]) : memcmp(&d[i], &dr[i], 8) == 0);
            }
        }
}

int main(void)
{
    /* f16 -> f32 -> f16 is the identity for every non-NaN value */
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t x = (uint16_t)h;
        if ((x & 0x7c00) == 0x7c00 && (x & 0x3ff)) continue;
        ASSERT_EQ(chorus__f32_to_f16(chorus__f16_to_f32(x)), x);
        ASSERT_EQ(chorus__f32_to_bf16(chorus__bf16_to_f32(x)), x);
    }
    ASSERT_EQ(chorus__f16_to_f32(0x3c00), 1.0);
    ASSERT_EQ(chorus__f16_to_f32(0xc000), -2.0);
    ASSERT(chorus__f16_to_f32(0x0001) == 0x1p-24f);
    /* f32 -> f16 rounding to nearest even, on random values across the whole range */
    uint64_t s = 7;
    for (int i = 0; i < 3000; i++) {
        double e = (double)(test_rand(&s) % 44) - 26; /* 2^-26 .. 2^17 */
        float f = (float)(ldexp(1.0 + (double)(test_rand(&s) % 1000000) / 1e6, (int)e) *
                          ((test_rand(&s) & 1) ? -1 : 1));
        uint16_t got = chorus__f32_to_f16(f), want = ref_f16(f);
        if (got != want)
            test_fail(__FILE__, __LINE__, "f32_to_f16(%.9g) = 0x%04x, want 0x%04x", f, got, want);
    }
    /* ties: 1 + 2^-11 is halfway between 1 and 1+2^-10: rounds to even (1.0) */
    ASSERT_EQ(chorus__f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    ASSERT_EQ(chorus__f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    ASSERT_EQ(chorus__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    ASSERT_EQ(chorus__f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    ASSERT_EQ(chorus__f32_to_f16(1e6f), 0x7c00);
    ASSERT(isnan(chorus__f16_to_f32(chorus__f32_to_f16(NAN))));
    ASSERT(isnan(chorus__bf16_to_f32(chorus__f32_to_bf16(NAN))));

    /* kernels: every dtype x op against a scalar loop, odd lengths, aliasing dst == a */
    for (int t = 0; t < CHORUS_DTYPE_COUNT; t++)
        for (int op = 0; op < CHORUS_OP_COUNT; op++)
            for (size_t n = 0; n < 40; n += 13) {
                if (chorus__dtype_is_float((chorus_dtype)t) && chorus__op_is_bitwise(op))
                    continue; /* refused before any kernel runs (chorus_allreduce) */
                size_t es = chorus_dtype_size((chorus_dtype)t);
                unsigned char a[64 * 8], b[64 * 8], d[64 * 8];
                for (size_t i = 0; i < n * es; i++) {
                    a[i] = (unsigned char)test_rand(&s);
                    b[i] = (unsigned char)test_rand(&s);
                }
                if (t == CHORUS_FLOAT32 || t == CHORUS_FLOAT64 || t == CHORUS_FLOAT16 ||
                    t == CHORUS_BFLOAT16)
                    for (size_t i = 0; i < n; i++) { /* finite values */
                        double x = (double)(int)(test_rand(&s) % 200) - 100,
                               y = (double)(int)(test_rand(&s) % 200) - 100;
                        if (t == CHORUS_FLOAT32)
                            ((float *)a)[i] = (float)x, ((float *)b)[i] = (float)y;
                        if (t == CHORUS_FLOAT64) ((double *)a)[i] = x, ((double *)b)[i] = y;
                        if (t == CHORUS_FLOAT16)
                            ((uint16_t *)a)[i] = chorus__f32_to_f16((float)x),
                                       ((uint16_t *)b)[i] = chorus__f32_to_f16((float)y);
                        if (t == CHORUS_BFLOAT16)
                            ((uint16_t *)a)[i] = chorus__f32_to_bf16((float)x),
                                       ((uint16_t *)b)[i] = chorus__f32_to_bf16((float)y);
                    }
                chorus__reduce(d, a, b, n, (chorus_dtype)t, (chorus_op)op);
                for (size_t i = 0; i < n; i++) {
                    double x, y, z;
                    switch (t) {
                    case CHORUS_INT8:
                        x = ((int8_t *)a)[i], y = ((int8_t *)b)[i], z = ((int8_t *)d)[i];
                        break;
                    case CHORUS_UINT8: x = a[i], y = b[i], z = d[i]; break;
                    case CHORUS_INT32:
                        x = ((int32_t *)a)[i], y = ((int32_t *)b)[i], z = ((int32_t *)d)[i];
                        break;
                    case CHORUS_INT64:
                        x = (double)((int64_t *)a)[i], y = (double)((int64_t *)b)[i],
                        z = (double)((int64_t *)d)[i];
                        break;
                    case CHORUS_FLOAT16:
                        x = chorus__f16_to_f32(((uint16_t *)a)[i]),
                        y = chorus__f16_to_f32(((uint16_t *)b)[i]),
                        z = chorus__f16_to_f32(((uint16_t *)d)[i]);
                        break;
                    case CHORUS_BFLOAT16:
                        x = chorus__bf16_to_f32(((uint16_t *)a)[i]),
                        y = chorus__bf16_to_f32(((uint16_t *)b)[i]),
                        z = chorus__bf16_to_f32(((uint16_t *)d)[i]);
                        break;
                    case CHORUS_FLOAT32:
                        x = ((float *)a)[i], y = ((float *)b)[i], z = ((float *)d)[i];
                        break;
                    default:
                        x = ((double *)a)[i], y = ((double *)b)[i], z = ((double *)d)[i];
                        break;
                    }
                    if (op == CHORUS_MIN) ASSERT(z == (x < y ? x : y));
                    if (op == CHORUS_MAX) ASSERT(z == (x > y ? x : y));
                    int exact = t == CHORUS_FLOAT32 || t == CHORUS_FLOAT64 || t == CHORUS_INT64;
                    if (exact && (op == CHORUS_SUM || op == CHORUS_AVG) && t != CHORUS_INT64)
                        ASSERT(z == x + y);
                    if (exact && op == CHORUS_PROD && t != CHORUS_INT64) ASSERT(z == x * y);
                    if (chorus__op_is_bitwise(op)) { /* on the bits, whatever the width */
                        for (size_t k = i * es; k < (i + 1) * es; k++)
                            ASSERT_EQ(d[k], op == CHORUS_BAND  ? (a[k] & b[k])
                                            : op == CHORUS_BOR ? (a[k] | b[k])
                                                               : (a[k] ^ b[k]));
                    }
                    if (t == CHORUS_INT8 && op == CHORUS_SUM)
                        ASSERT(z == (double)(int8_t)(uint8_t)((int)x + (int)y));
                    if (t == CHORUS_FLOAT16 && op == CHORUS_SUM)
                        ASSERT(z == chorus__f16_to_f32(chorus__f32_to_f16((float)(x + y))));
                }
                /* aliasing: dst == a gives the same */
                unsigned char d2[64 * 8];
                memcpy(d2, a, n * es);
                chorus__reduce(d2, d2, b, n, (chorus_dtype)t, (chorus_op)op);
                ASSERT(memcmp(d2, d, n * es) == 0);
            }
    /* avg division */
    float v[3] = {3, 6, -9};
    chorus__reduce_finish(v, 3, CHORUS_FLOAT32, CHORUS_AVG, 3);
    ASSERT(v[0] == 1 && v[1] == 2 && v[2] == -3);
    avg_bitwise();
    int32_t iv[2] = {7, -7};
    chorus__reduce_finish(iv, 2, CHORUS_INT32, CHORUS_AVG, 2);
    ASSERT_EQ(iv[0], 3);
    ASSERT_EQ(iv[1], -3);
    printf("reduce kernels ok\n");
    return 0;
}
