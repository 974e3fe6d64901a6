/*
 * nn_test.h - small assertion macros for the nn tests (tests/unit/nn_*.c). A failed check
 * prints the file, line, expression and values, and makes the program exit non-zero; the
 * test goes on so one run shows every failure.
 */
#ifndef CHORUS_NN_TEST_H
#define CHORUS_NN_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int nt_failures;
static int nt_checks;

#define NT_CHECK(cond)                                                                             \
    do {                                                                                           \
        nt_checks++;                                                                               \
        if (!(cond)) {                                                                             \
            nt_failures++;                                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define NT_EQ_INT(a, b)                                                                            \
    do {                                                                                           \
        long long nt_a = (long long)(a), nt_b = (long long)(b);                                    \
        nt_checks++;                                                                               \
        if (nt_a != nt_b) {                                                                        \
            nt_failures++;                                                                         \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b,  \
                    nt_a, nt_b);                                                                   \
        }                                                                                          \
    } while (0)

/* |a - b| <= tol */
#define NT_NEAR(a, b, tol)                                                                         \
    do {                                                                                           \
        double nt_a = (double)(a), nt_b = (double)(b);                                             \
        nt_checks++;                                                                               \
        if (!(fabs(nt_a - nt_b) <= (tol))) {                                                       \
            nt_failures++;                                                                         \
            fprintf(stderr, "%s:%d: %s ~ %s failed: %.9g vs %.9g (tol %g)\n", __FILE__, __LINE__,  \
                    #a, #b, nt_a, nt_b, (double)(tol));                                            \
        }                                                                                          \
    } while (0)

#define NT_RUN(fn)                                                                                 \
    do {                                                                                           \
        int nt_before = nt_failures;                                                               \
        fn();                                                                                      \
        fprintf(stderr, "%s %s\n", nt_failures == nt_before ? "ok  " : "FAIL", #fn);               \
    } while (0)

#define NT_DONE()                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "%d checks, %d failed\n", nt_checks, nt_failures);                         \
        return nt_failures ? 1 : 0;                                                                \
    } while (0)

/* ---- for tests that run the trainer ----------------------------------------------------- */

#include <stdarg.h>
#include <string.h>

/* Runs a shell command built from fmt; returns its exit status (-1 when it did not exit). */
__attribute__((format(printf, 1, 2), unused)) static int nt_sh(const char *fmt, ...)
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

/* Reads a whole file; returns its size in bytes, or -1. *out is malloc'd and NUL-ended. */
__attribute__((unused)) static long nt_slurp(const char *path, char **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
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

/* Whether two files hold the same bytes. */
__attribute__((unused)) static int nt_same_file(const char *a, const char *b)
{
    char *x, *y;
    long nx = nt_slurp(a, &x), ny = nt_slurp(b, &y);
    int same = nx >= 0 && nx == ny && memcmp(x, y, (size_t)nx) == 0;
    if (!same) fprintf(stderr, "  %s and %s differ (%ld and %ld bytes)\n", a, b, nx, ny);
    free(x);
    free(y);
    return same;
}

/* Whether file contains text. */
__attribute__((unused)) static int nt_file_has(const char *path, const char *text)
{
    char *x;
    int has = nt_slurp(path, &x) >= 0 && strstr(x, text) != NULL;
    if (!has) fprintf(stderr, "  %s lacks \"%s\"\n", path, text);
    free(x);
    return has;
}

#endif /* CHORUS_NN_TEST_H */
