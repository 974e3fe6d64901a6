/*
 * compress.h - the built-in compressors (one per file in this folder) and what they share.
 * Each is a chorus_compressor (include/chorus/engine.h): a plan of rounds with prepare and
 * finish functions, run by the engine thread (execute.c).
 */
#ifndef CHORUS_ENGINE_COMPRESS_H
#define CHORUS_ENGINE_COMPRESS_H

#include "base/base.h"
#include "chorus/engine.h"

/* A built-in compressor by name ("fp16", "bf16"); NULL for "", "none" or an unknown name. */
const chorus_compressor *chorus__compressor_by_name(const char *name);

/* Casts between a float32/float64 tensor and 16-bit floats (bf = 1: bfloat16, else IEEE
 * half), shared by fp16.c and bf16.c. */
void chorus__half_narrow(const void *src, uint16_t *wire, size_t n, chorus_dtype t, int bf);
void chorus__half_widen(const uint16_t *wire, void *dst, size_t n, chorus_dtype t, int bf);
/* The one-round plan of a cast to wire dtype w: a reduce with the tensor's op (sum for an
 * average) of count elements, or an empty plan for a dtype that is not float32/float64. */
chorus_result chorus__half_plan(size_t count, chorus_dtype t, chorus_op op, chorus_dtype w,
                                chorus_compress_plan *plan);

#endif
