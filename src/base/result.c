/* result.c - result names and messages (from the one table in chorus.h) and error detail. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"

const char *chorus_strerror(chorus_result r)
{
    switch (r) {
#define CHORUS_X_STR(code, msg)                                                                    \
    case code: return #code ": " msg;
        CHORUS_RESULT_MAP(CHORUS_X_STR)
#undef CHORUS_X_STR
    default: return "unknown chorus_result";
    }
}

const char *chorus_version(void)
{
    return CHORUS_VERSION_STRING;
}

const char *chorus_result_name(int r)
{
    switch (r) {
#define CHORUS_X_NAME(code, msg)                                                                   \
    case code: return #code;
        CHORUS_RESULT_MAP(CHORUS_X_NAME)
#undef CHORUS_X_NAME
    default: return NULL;
    }
}

static _Thread_local chorus_errbuf init_err;

chorus_errbuf *chorus__init_errbuf(void)
{
    return &init_err;
}

chorus_result chorus__fail(chorus_errbuf *e, chorus_result r, const char *fmt, ...)
{
    char tmp[sizeof(e->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (e) memcpy(e->msg, tmp, sizeof(tmp));
    CHORUS_INFO(CHORUS_LOG_ALL, "error: %s", tmp);
    return r;
}
