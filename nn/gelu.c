/*
 * gelu.c - GELU and its gradient for the GPT (nn/gpt.c), over an exp of its own that the
 * compiler vectorises, the loops built for several instruction sets (NN_CLONES).
 */
#include <stdint.h>
#include <string.h>

#include "nn_internal.h"

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* GELU, tanh form (GPT-2's): out = x/2 (1 + tanh(u)), u = s (x + 0.044715 x^3); computed as
 * x sigmoid(2u), the same function (1 + tanh(u) = 2 / (1 + e^-2u)) without tanh's
 * cancellation near 0. n values. */
NN_CLONES void nn__gelu_forward(float *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + nn__exp_approx(-2.0f * u));
    }
}

/* d (n) *= gelu'(in): the gradient through GELU, in place. With s = sigmoid(2u):
 * gelu' = s + 2 x s (1 - s) u', u' = s0 (1 + 3 0.044715 x^2). */
NN_CLONES void nn__gelu_backward(float *d, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        float s = 1.0f / (1.0f + nn__exp_approx(-2.0f * u));
        float du = GELU_S * (1.0f + 3.0f * GELU_A * x * x);
        d[i] *= s + 2.0f * x * s * (1.0f - s) * du;
    }
}
