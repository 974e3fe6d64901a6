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

#endif /* CHORUS_NN_TEST_H */
