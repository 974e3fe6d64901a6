/*
 * nn_internal.h - helpers shared by the files of libchorus_nn; not installed.
 */
#ifndef CHORUS_NN_INTERNAL_H
#define CHORUS_NN_INTERNAL_H

#include <stdarg.h>
#include <stdio.h>

#include "chorus/nn.h"

static inline size_t nn__in_features(const nn_layer *L)
{
    return (size_t)L->in_c * (size_t)L->in_h * (size_t)L->in_w;
}

static inline size_t nn__out_features(const nn_layer *L)
{
    return (size_t)L->out_c * (size_t)L->out_h * (size_t)L->out_w;
}

/* Biases (or LayerNorm betas) at the end of a layer's parameters. */
static inline size_t nn__bias_count(const nn_layer *L)
{
    switch (L->kind) {
    case NN_LINEAR:
    case NN_CONV2D: return (size_t)L->out_c;
    case NN_LAYERNORM: return L->nparams / 2;
    default: return 0;
    }
}

/* Formats a message into err (when not NULL) and returns -1. */
__attribute__((format(printf, 3, 4))) static inline int nn__fail(char *err, size_t errlen,
                                                                 const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#endif /* CHORUS_NN_INTERNAL_H */
