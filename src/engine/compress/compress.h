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

#endif
