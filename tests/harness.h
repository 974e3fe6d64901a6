/*
 * harness.h - the assertion helpers of every Chorus C test (library, nn and trainer tests). A
 * failed check prints the file, the line, both values and the rank, then exits non-zero; the
 * runner shows the output.
 */
#ifndef CHORUS_TEST_HARNESS_H
#define CHORUS_TEST_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "chorus.h"

extern int test_rank; /* shown in failure messages; -1 before chorus_init */

void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

#define ASSERT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) test_fail(__FILE__, __LINE__, "assertion failed: %s", #cond);                 \
    } while (0)
#define ASSERT_EQ(a, b)                                                                            \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_)                                                                              \
            test_fail(__FILE__, __LINE__, "%s == %s failed: %lld != %lld", #a, #b, a_, b_);        \
    } while (0)
#define ASSERT_OK(call)                                                                            \
    do {                                                                                           \
        chorus_result r_ = (call);                                                                 \
        if (r_ != CHORUS_OK)                                                                       \
            test_fail(__FILE__, __LINE__, "%s returned %s", #call, chorus_strerror(r_));           \
    } while (0)
/* |a - b| <= tol (tol 0: equal), compared as doubles; NaN never passes. */
#define ASSERT_NEAR(a, b, tol)                                                                     \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);                             \
        if (!(fabs(a_ - b_) <= t_))                                                                \
            test_fail(__FILE__, __LINE__, "%s ~ %s failed: %.9g vs %.9g (tolerance %g)", #a, #b,   \
                      a_, b_, t_);                                                                 \
    } while (0)
#define ASSERT_STR_CONTAINS(s, sub)                                                                \
    do {                                                                                           \
        const char *s_ = (s);                                                                      \
        if (!s_ || !strstr(s_, sub))                                                               \
            test_fail(__FILE__, __LINE__, "'%s' does not contain '%s'", s_ ? s_ : "(null)", sub);  \
    } while (0)

#ifdef CHORUS_NN_H
/* For libchorus_nn calls: prints nn_last_error() too (include chorus/nn.h first). */
#define ASSERT_NN_OK(call)                                                                         \
    do {                                                                                           \
        chorus_result r_ = (call);                                                                 \
        if (r_ != CHORUS_OK)                                                                       \
            test_fail(__FILE__, __LINE__, "%s returned %s: %s", #call, chorus_strerror(r_),        \
                      nn_last_error());                                                            \
    } while (0)
#endif

/* Runs one test function of a program and says so on stderr (a failure has exited already). */
#define TEST_RUN(fn)                                                                               \
    do {                                                                                           \
        fn();                                                                                      \
        fprintf(stderr, "ok   %s\n", #fn);                                                         \
    } while (0)

/* Runs a shell command built from fmt (echoed to stderr); returns its exit status, or -1 when
 * it did not exit normally. */
int test_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Reads a whole file: returns its size and sets *out (malloc'ed, NUL-terminated), or returns
 * -1 with *out NULL. */
long test_slurp(const char *path, char **out);
/* Whether two files hold the same bytes (says how they differ on stderr when not). */
int test_same_file(const char *a, const char *b);
/* Whether the file contains text (says so on stderr when not). */
int test_file_has(const char *path, const char *text);

/* Deterministic pseudo-random numbers (splitmix64). */
static inline uint64_t test_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Sets a CHORUS_* variable on one communicator as if it had been in the environment at
 * chorus_init (value NULL: the default); every rank must do the same. Fails the test when the
 * value is malformed. */
void test_set_config(chorus_comm *c, const char *name, const char *value);

/* Hash of a buffer, to compare results across ranks. */
static inline uint64_t test_hash(const void *p, size_t n)
{
    return chorus__hash64(p, n);
}

#endif
