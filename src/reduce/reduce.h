/*
 * reduce.h - typed reduction kernels: dst = a op b, elementwise, for every dtype and op.
 * Written as simple loops over restrict-free but alias-safe code that the compiler
 * vectorises; f16 and bf16 are widened to f32, combined, and rounded to nearest even.
 */
#ifndef CHORUS_REDUCE_H
#define CHORUS_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

/* dst[i] = a[i] op b[i]; dst may be a or b. CHORUS_AVG combines like CHORUS_SUM (the division
 * is chorus__reduce_finish's). */
void chorus__reduce(void *dst, const void *a, const void *b, size_t n, chorus_dtype t,
                    chorus_op op);

/* After the last combine: CHORUS_AVG divides by nranks; other ops do nothing. */
void chorus__reduce_finish(void *buf, size_t n, chorus_dtype t, chorus_op op, int nranks);

float chorus__f16_to_f32(uint16_t h);
uint16_t chorus__f32_to_f16(float f);
float chorus__bf16_to_f32(uint16_t h);
uint16_t chorus__f32_to_bf16(float f);

/* dst[i] = src[i] * f for float dtypes, through float32 for the 16-bit ones (dst may equal src);
 * other dtypes are copied unchanged. */
void chorus__reduce_scale(void *dst, const void *src, size_t n, chorus_dtype t, double f);

#endif
