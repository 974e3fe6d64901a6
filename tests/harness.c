/* harness.c - failure reporting and file/shell helpers for the tests (see harness.h). */
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

int test_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    fprintf(stderr, "$ %s\n", cmd);
    int rc = system(cmd);
    return rc >= 0 && (rc & 0x7f) == 0 ? (rc >> 8) & 0xff : -1;
}

long test_slurp(const char *path, char **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        fclose(f);
        return -1;
    }
    b[n] = 0;
    fclose(f);
    *out = b;
    return n;
}

int test_same_file(const char *a, const char *b)
{
    char *x, *y;
    long nx = test_slurp(a, &x), ny = test_slurp(b, &y);
    int same = nx >= 0 && nx == ny && memcmp(x, y, (size_t)nx) == 0;
    if (!same) fprintf(stderr, "  %s and %s differ (%ld and %ld bytes)\n", a, b, nx, ny);
    free(x);
    free(y);
    return same;
}

int test_file_has(const char *path, const char *text)
{
    char *x;
    int has = test_slurp(path, &x) >= 0 && strstr(x, text) != NULL;
    if (!has) fprintf(stderr, "  %s lacks \"%s\"\n", path, text);
    free(x);
    return has;
}

void test_set_config(chorus_comm *c, const char *name, const char *value)
{
    chorus_errbuf e;
    if (chorus__config_set(&c->cfg, name, value, &e) != CHORUS_OK)
        test_fail(__FILE__, __LINE__, "test_set_config: %s", e.msg);
}
