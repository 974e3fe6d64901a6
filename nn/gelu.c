/*
 * gelu.c - GELU and its gradient for the GPT (nn/gpt.c), over an exp of its own that the
 * compiler vectorises, the loops built for several instruction sets (NN_CLONES).
 */
#include <stdint.h>
#include <string.h>

#include "nn_internal.h"

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* e^x for x in [-87, 87] (clamped there), relative error below 2e-7: x = k ln2 + r with
 * |r| <= ln2/2, e^r by its Taylor series to r^7 (the remainder under 6e-9), 2^k put into a
 * float's exponent bits. No calls and no branches, so that the loops below vectorise (libm's
 * tanhf, a scalar call, took a third of the model's time in GELU): the clamp is done on the
 * bits (|x| as an integer orders as |x| does; a float comparison would keep the loop from
 * vectorising under the default -ftrapping-math), the rounding by adding and taking away
 * 1.5 x 2^23, which leaves the nearest integer (|x / ln2| < 126 here). */
static inline float exp_approx(float x)
{
    int32_t bits, mag;
    memcpy(&bits, &x, sizeof(bits));
    mag = bits & 0x7fffffff;
    mag = mag > 0x42ae0000 ? 0x42ae0000 : mag; /* 87.0f */
    bits = (int32_t)((uint32_t)bits & 0x80000000u) | mag;
    memcpy(&x, &bits, sizeof(x));
    float kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln2) */
    float r = x - kf * 0.693145752f - kf * 1.42860677e-6f;             /* ln2 in two parts */
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    bits = ((int32_t)kf + 127) << 23; /* 2^k */
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

/* GELU, tanh form (GPT-2's): out = x/2 (1 + tanh(u)), u = s (x + 0.044715 x^3); computed as
 * x sigmoid(2u), the same function (1 + tanh(u) = 2 / (1 + e^-2u)) without tanh's
 * cancellation near 0. n values. */
NN_CLONES void nn__gelu_forward(float *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + exp_approx(-2.0f * u));
    }
}

/* d (n) *= gelu'(in): the gradient through GELU, in place. With s = sigmoid(2u):
 * gelu' = s + 2 x s (1 - s) u', u' = s0 (1 + 3 0.044715 x^2). */
NN_CLONES void nn__gelu_backward(float *d, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        float s = 1.0f / (1.0f + exp_approx(-2.0f * u));
        float du = GELU_S * (1.0f + 3.0f * GELU_A * x * x);
        d[i] *= s + 2.0f * x * s * (1.0f - s) * du;
    }
}
