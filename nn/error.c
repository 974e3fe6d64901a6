/*
 * error.c - the error detail of libchorus_nn: every function that can fail returns a
 * chorus_result and leaves a one-line message, readable with nn_last_error() by the thread
 * that made the call.
 */
#include <stdarg.h>
#include <stdio.h>

#include "nn_internal.h"

static _Thread_local char nn_err[1024];

const char *nn_last_error(void)
{
    return nn_err;
}

chorus_result nn__fail(chorus_result r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nn_err, sizeof(nn_err), fmt, ap);
    va_end(ap);
    return r;
}
