/*
 * registry.c - the built-in compressors by name, for CHORUS_COMPRESSION.
 */
#include <string.h>

#include "engine/compress/compress.h"

const chorus_compressor *chorus__compressor_by_name(const char *name)
{
    if (!name || !*name || !strcmp(name, "none")) return NULL;
    if (!strcmp(name, "fp16")) return chorus_compressor_fp16();
    if (!strcmp(name, "bf16")) return chorus_compressor_bf16();
    return NULL;
}
