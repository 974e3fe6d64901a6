/* harness.c - failure reporting for the test helpers. */
#include <stdarg.h>

#include "coll/comm.h"
#include "harness.h"

int test_rank = -1;

void test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d (rank %d): ", file, line, test_rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    exit(1);
}

void test_set_config(chorus_comm *c, const char *name, const char *value)
{
    chorus_errbuf e;
    if (chorus__config_set(&c->cfg, name, value, &e) != CHORUS_OK)
        test_fail(__FILE__, __LINE__, "test_set_config: %s", e.msg);
}
