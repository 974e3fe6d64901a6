/*
 * reduce.c - the reduction kernels. One macro instantiates a loop per (type, op); the loops
 * have no branches in their bodies so gcc -O2 -ftree-vectorize (enabled per function below)
 * turns them into SIMD code.
 */
#include <math.h>
#include <string.h>

#include "reduce/reduce.h"

/* Generic kernels are built for AVX-512, AVX2 and baseline x86-64, picked at load time (an
 * ifunc). ThreadSanitizer's runtime is not up yet when ifunc resolvers run, so its builds
 * get the baseline only. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define VEC __attribute__((optimize("tree-vectorize"), target_clones("avx512f", "avx2", "default")))
#else
#define VEC __attribute__((optimize("tree-vectorize")))
#endif

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

#define OP_SUM(x, y)  ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
#define OP_MIN(x, y)  ((y) < (x) ? (y) : (x))
#define OP_MAX(x, y)  ((y) > (x) ? (y) : (x))
#define OP_BAND(x, y) ((x) & (y))
#define OP_BOR(x, y)  ((x) | (y))
#define OP_BXOR(x, y) ((x) ^ (y))

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
    KERNEL(max_##T, T, OP_MAX)                                                                     \
    KERNEL(band_##T, T, OP_BAND)                                                                   \
    KERNEL(bor_##T, T, OP_BOR)                                                                     \
    KERNEL(bxor_##T, T, OP_BXOR)

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

/* Half types: widen to f32, combine, round back to nearest even. The conversions are written
 * without branches so the loops vectorise; f16 uses the F16C instructions where the CPU has
 * them (the same IEEE rounding, so the same bits as the portable loop). */
static inline float f16_to_f32_inline(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    /* normal: rebias; inf/nan: all-ones exponent; zero/subnormal: man * 2^-24 exactly */
    uint32_t normal = sign | ((exp + 112) << 23) | (man << 13);
    uint32_t special = sign | 0x7f800000u | (man << 13);
    float sub = (float)man * 0x1p-24f;
    uint32_t subbits = sign | f32_bits(sub);
    return bits_f32(exp == 0x1f ? special : exp == 0 ? subbits : normal);
}

static inline float bf16_to_f32_inline(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16_inline(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t nan = (x >> 16) | 0x40, rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

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

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
/* OP_MIN(x, y) is y < x ? y : x, which is exactly minps(y, x); likewise for max. */
#define V_SUM(x, y)  _mm256_add_ps(x, y)
#define V_PROD(x, y) _mm256_mul_ps(x, y)
#define V_MIN(x, y)  _mm256_min_ps(y, x)
#define V_MAX(x, y)  _mm256_max_ps(y, x)
#define F16C_KERNEL(name, VOP)                                                                     \
    __attribute__((target("avx,f16c"))) static void name(void *dst_, const void *a_,               \
                                                         const void *b_, size_t n)                 \
    {                                                                                              \
        uint16_t *dst = dst_;                                                                      \
        const uint16_t *a = a_, *b = b_;                                                           \
        size_t i = 0;                                                                              \
        for (; i + 8 <= n; i += 8) {                                                               \
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));                 \
            __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));                 \
            _mm_storeu_si128((__m128i *)(dst + i),                                                 \
                             _mm256_cvtps_ph(VOP(x, y), _MM_FROUND_TO_NEAREST_INT));               \
        }                                                                                          \
        if (i < n) { /* the tail through the same instructions (same NaN payloads) */              \
            uint16_t ta[8] = {0}, tb[8] = {0}, td[8];                                              \
            memcpy(ta, a + i, (n - i) * 2);                                                        \
            memcpy(tb, b + i, (n - i) * 2);                                                        \
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)ta));                      \
            __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tb));                      \
            _mm_storeu_si128((__m128i *)td,                                                        \
                             _mm256_cvtps_ph(VOP(x, y), _MM_FROUND_TO_NEAREST_INT));               \
            memcpy(dst + i, td, (n - i) * 2);                                                      \
        }                                                                                          \
    }
/* bf16 with AVX2: widen by shifting, combine, round to nearest even (NaN stays quiet). */
__attribute__((target("avx2"))) static inline __m256 bf16x8_load(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
__attribute__((target("avx2"))) static inline void bf16x8_store(uint16_t *p, __m256 v)
{
    __m256i x = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(x, 16);
    __m256i odd = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i rnd = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    __m256i nanv = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                       _mm256_set1_epi32(0x7f800000));
    __m256i r = _mm256_blendv_epi8(rnd, nanv, isnan);
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(r));
}
#define BF16_AVX2_KERNEL(name, VOP)                                                                \
    __attribute__((target("avx2"))) static void name(void *dst_, const void *a_, const void *b_,   \
                                                     size_t n)                                     \
    {                                                                                              \
        uint16_t *dst = dst_;                                                                      \
        const uint16_t *a = a_, *b = b_;                                                           \
        size_t i = 0;                                                                              \
        for (; i + 8 <= n; i += 8)                                                                 \
            bf16x8_store(dst + i, VOP(bf16x8_load(a + i), bf16x8_load(b + i)));                    \
        if (i < n) {                                                                               \
            uint16_t ta[8] = {0}, tb[8] = {0}, td[8];                                              \
            memcpy(ta, a + i, (n - i) * 2);                                                        \
            memcpy(tb, b + i, (n - i) * 2);                                                        \
            bf16x8_store(td, VOP(bf16x8_load(ta), bf16x8_load(tb)));                               \
            memcpy(dst + i, td, (n - i) * 2);                                                      \
        }                                                                                          \
    }
BF16_AVX2_KERNEL(sum_bf16_avx2, V_SUM)
BF16_AVX2_KERNEL(prod_bf16_avx2, V_PROD)
BF16_AVX2_KERNEL(min_bf16_avx2, V_MIN)
BF16_AVX2_KERNEL(max_bf16_avx2, V_MAX)
F16C_KERNEL(sum_f16c, V_SUM)
F16C_KERNEL(prod_f16c, V_PROD)
F16C_KERNEL(min_f16c, V_MIN)
F16C_KERNEL(max_f16c, V_MAX)
#endif

HALF_KERNEL(sum_f16, f16_to_f32_inline, chorus__f32_to_f16, OP_SUM)
HALF_KERNEL(prod_f16, f16_to_f32_inline, chorus__f32_to_f16, OP_PROD)
HALF_KERNEL(min_f16, f16_to_f32_inline, chorus__f32_to_f16, OP_MIN)
HALF_KERNEL(max_f16, f16_to_f32_inline, chorus__f32_to_f16, OP_MAX)
HALF_KERNEL(sum_bf16, bf16_to_f32_inline, f32_to_bf16_inline, OP_SUM)
HALF_KERNEL(prod_bf16, bf16_to_f32_inline, f32_to_bf16_inline, OP_PROD)
HALF_KERNEL(min_bf16, bf16_to_f32_inline, f32_to_bf16_inline, OP_MIN)
HALF_KERNEL(max_bf16, bf16_to_f32_inline, f32_to_bf16_inline, OP_MAX)

typedef void (*kernel_fn)(void *, const void *, const void *, size_t);

/* [dtype][op] (AVG uses SUM's; the bitwise ops exist for integer dtypes only, which the
 * callers check: chorus__op_is_bitwise) */
#define INT_KERNELS(T)                                                                             \
    {                                                                                              \
        [CHORUS_SUM] = sum_##T, [CHORUS_PROD] = prod_##T, [CHORUS_MIN] = min_##T,                  \
        [CHORUS_MAX] = max_##T, [CHORUS_BAND] = band_##T, [CHORUS_BOR] = bor_##T,                  \
        [CHORUS_BXOR] = bxor_##T                                                                   \
    }
static const kernel_fn kernels[CHORUS_DTYPE_COUNT][CHORUS_OP_COUNT] = {
    [CHORUS_INT8] = INT_KERNELS(int8_t),
    [CHORUS_UINT8] = INT_KERNELS(uint8_t),
    [CHORUS_INT32] = INT_KERNELS(int32_t),
    [CHORUS_INT64] = INT_KERNELS(int64_t),
    [CHORUS_FLOAT16] = {sum_f16, prod_f16, min_f16, max_f16},
    [CHORUS_BFLOAT16] = {sum_bf16, prod_bf16, min_bf16, max_bf16},
    [CHORUS_FLOAT32] = {sum_float, prod_float, min_float, max_float},
    [CHORUS_FLOAT64] = {sum_double, prod_double, min_double, max_double},
};

#if defined(__x86_64__)
/* CPUID leaf 1, ECX bit 29; read directly because clang's __builtin_cpu_supports does not
 * know the "f16c" feature name. */
static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

void chorus__reduce(void *dst, const void *a, const void *b, size_t n, chorus_dtype t, chorus_op op)
{
    int o = op == CHORUS_AVG ? CHORUS_SUM : (int)op;
#if defined(__x86_64__)
    static const kernel_fn f16c[4] = {sum_f16c, prod_f16c, min_f16c, max_f16c};
    static const kernel_fn bf16[4] = {sum_bf16_avx2, prod_bf16_avx2, min_bf16_avx2, max_bf16_avx2};
    static int have_f16c = -1, have_avx2 = -1;
    if (t == CHORUS_FLOAT16) {
        if (have_f16c < 0) have_f16c = cpu_has_f16c() && __builtin_cpu_supports("avx");
        if (have_f16c) {
            f16c[o](dst, a, b, n);
            return;
        }
    }
    if (t == CHORUS_BFLOAT16) {
        if (have_avx2 < 0) have_avx2 = __builtin_cpu_supports("avx2");
        if (have_avx2) {
            bf16[o](dst, a, b, n);
            return;
        }
    }
#endif
    kernels[t][o](dst, a, b, n);
}

#define DIV_LOOP(T, expr)                                                                          \
    do {                                                                                           \
        T *p = buf;                                                                                \
        for (size_t i = 0; i < n; i++) p[i] = (T)(expr);                                           \
    } while (0)

/* The float averages, vectorised. Where nranks is a power of two its reciprocal is exact, and
 * x * 2^-k is then the same correctly rounded number as x / 2^k (bit for bit, subnormals,
 * infinities and NaNs included), at the cost of a multiplication instead of a division. */
static VEC void div_f32(float *p, size_t n, int nranks)
{
    if ((nranks & (nranks - 1)) == 0) {
        float r = 1.0f / (float)nranks;
        for (size_t i = 0; i < n; i++) p[i] = p[i] * r;
    } else {
        float d = (float)nranks;
        for (size_t i = 0; i < n; i++) p[i] = p[i] / d;
    }
}

static VEC void div_f64(double *p, size_t n, int nranks)
{
    if ((nranks & (nranks - 1)) == 0) {
        double r = 1.0 / (double)nranks;
        for (size_t i = 0; i < n; i++) p[i] = p[i] * r;
    } else {
        double d = (double)nranks;
        for (size_t i = 0; i < n; i++) p[i] = p[i] / d;
    }
}

void chorus__reduce_finish(void *buf, size_t n, chorus_dtype t, chorus_op op, int nranks)
{
    if (op != CHORUS_AVG || nranks <= 1) return;
    switch (t) {
    case CHORUS_INT8: DIV_LOOP(int8_t, p[i] / nranks); break;
    case CHORUS_UINT8: DIV_LOOP(uint8_t, p[i] / nranks); break;
    case CHORUS_INT32: DIV_LOOP(int32_t, p[i] / nranks); break;
    case CHORUS_INT64: DIV_LOOP(int64_t, p[i] / nranks); break;
    case CHORUS_FLOAT32: div_f32(buf, n, nranks); break;
    case CHORUS_FLOAT64: div_f64(buf, n, nranks); break;
    case CHORUS_FLOAT16:
        DIV_LOOP(uint16_t, chorus__f32_to_f16(chorus__f16_to_f32(p[i]) / (float)nranks));
        break;
    case CHORUS_BFLOAT16:
        DIV_LOOP(uint16_t, chorus__f32_to_bf16(chorus__bf16_to_f32(p[i]) / (float)nranks));
        break;
    default: break;
    }
}

/* ---- scaling ------------------------------------------------------------------------------ */

void chorus__reduce_scale(void *dst, const void *src, size_t n, chorus_dtype t, double f)
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
