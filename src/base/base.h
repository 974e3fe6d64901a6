/*
 * base.h - what every layer of libchorus uses: results with detail, logging, the config
 * table of CHORUS_* variables, clocks and checked allocation.
 */
#ifndef CHORUS_BASE_H
#define CHORUS_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#define CHORUS__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define CHORUS__UNUSED       __attribute__((unused))
#define CHORUS__LIKELY(x)    __builtin_expect(!!(x), 1)
#define CHORUS__UNLIKELY(x)  __builtin_expect(!!(x), 0)

/* ---- error detail -------------------------------------------------------------------- */

/* A place to record what went wrong: each communicator has one, chorus_init() uses a
 * thread-local one. */
typedef struct chorus_errbuf {
    char msg[512];
} chorus_errbuf;

/* Formats the detail into e (when not NULL), logs it at INFO and returns r. */
chorus_result chorus__fail(chorus_errbuf *e, chorus_result r, const char *fmt, ...)
    CHORUS__PRINTF(3, 4);

/* The thread-local buffer for errors with no communicator (chorus_init). */
chorus_errbuf *chorus__init_errbuf(void);

/* Returns on error, leaving a breadcrumb at TRACE so the log shows the path of a failure. */
#define CHORUS_CHECK(call)                                                                         \
    do {                                                                                           \
        chorus_result chorus__r = (call);                                                          \
        if (CHORUS__UNLIKELY(chorus__r != CHORUS_OK)) {                                            \
            CHORUS_TRACE(CHORUS_LOG_ALL, "%s:%d %s -> %s", __FILE__, __LINE__, #call,              \
                         chorus_strerror(chorus__r));                                              \
            return chorus__r;                                                                      \
        }                                                                                          \
    } while (0)

#define CHORUS_CHECK_GOTO(call, res, label)                                                        \
    do {                                                                                           \
        res = (call);                                                                              \
        if (CHORUS__UNLIKELY(res != CHORUS_OK)) {                                                  \
            CHORUS_TRACE(CHORUS_LOG_ALL, "%s:%d %s -> %s", __FILE__, __LINE__, #call,              \
                         chorus_strerror(res));                                                    \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- logging ------------------------------------------------------------------------- */

enum { CHORUS_LOG_NONE = 0, CHORUS_LOG_WARN = 1, CHORUS_LOG_INFO = 2, CHORUS_LOG_TRACE = 3 };

/* Subsystems, selectable with CHORUS_DEBUG_SUBSYS=INIT,COLL,... */
enum {
    CHORUS_LOG_INIT = 1 << 0,
    CHORUS_LOG_COLL = 1 << 1,
    CHORUS_LOG_TCP = 1 << 2,
    CHORUS_LOG_SHM = 1 << 3,
    CHORUS_LOG_ENGINE = 1 << 4,
    CHORUS_LOG_ELASTIC = 1 << 5,
    CHORUS_LOG_BOOT = 1 << 6,
    CHORUS_LOG_ALL = 0xffff
};

extern int chorus__log_level; /* -1 until read from CHORUS_DEBUG */
int chorus__log_init(void);
void chorus__log(int level, int subsys, const char *fmt, ...) CHORUS__PRINTF(3, 4);
/* Sets the rank shown in the prefix of this process's log lines. */
void chorus__log_set_rank(int rank);

#define CHORUS__LOG_ON(lvl)                                                                        \
    ((chorus__log_level < 0 ? chorus__log_init() : chorus__log_level) >= (lvl))
#define CHORUS_WARN(sub, ...)                                                                      \
    do {                                                                                           \
        if (CHORUS__LOG_ON(CHORUS_LOG_WARN)) chorus__log(CHORUS_LOG_WARN, sub, __VA_ARGS__);       \
    } while (0)
#define CHORUS_INFO(sub, ...)                                                                      \
    do {                                                                                           \
        if (CHORUS__LOG_ON(CHORUS_LOG_INFO)) chorus__log(CHORUS_LOG_INFO, sub, __VA_ARGS__);       \
    } while (0)
#define CHORUS_TRACE(sub, ...)                                                                     \
    do {                                                                                           \
        if (CHORUS__LOG_ON(CHORUS_LOG_TRACE)) chorus__log(CHORUS_LOG_TRACE, sub, __VA_ARGS__);     \
    } while (0)

/* ---- config table -------------------------------------------------------------------- */

typedef struct chorus_cfg_entry {
    const char *name;
    const char *def; /* NULL: unset by default */
    const char *help;
} chorus_cfg_entry;

/* The table of every CHORUS_* variable, terminated by a NULL name. */
const chorus_cfg_entry *chorus__cfg_table(void);
/* Value from the environment, else the table's default (NULL if neither). */
const char *chorus__cfg_str(const char *name);
/* Integer value; a value that is not a number falls back to the default with a warning. */
long chorus__cfg_long(const char *name);
double chorus__cfg_double(const char *name);

/* ---- clock --------------------------------------------------------------------------- */

/* Monotonic time in seconds / nanoseconds. */
double chorus__now(void);
uint64_t chorus__now_ns(void);
/* Absolute deadline CHORUS_TIMEOUT_S from now. */
double chorus__deadline(void);

/* ---- allocation ---------------------------------------------------------------------- */

void *chorus__malloc_aligned(size_t n); /* 64-byte aligned; free() it */

/* a*b with overflow check: returns 0 and sets *out on success, -1 on overflow. */
static inline int chorus__mul_overflow(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

/* ---- dtypes (dtype.c) ----------------------------------------------------------------- */

/* chorus_dtype_size (public, chorus.h) is defined in dtype.c too. */
/* "float32", ...; "unknown-dtype" out of range. */
const char *chorus__dtype_name(int dtype);
int chorus__dtype_is_float(chorus_dtype t);
/* Writes one element holding the identity of op for t (0 for sum/avg, 1 for prod, the largest
 * value or +inf for min, the smallest or -inf for max) to elem (8 bytes suffice); -1 if t or
 * op is unknown. Little-endian hosts only, as the wire format. */
int chorus__dtype_identity(chorus_dtype t, chorus_op op, void *elem);
/* dst[0..n) = the identity of op (nothing for an unknown t or op). */
void chorus__dtype_fill_identity(void *dst, size_t n, chorus_dtype t, chorus_op op);

/* Host identity: hostname, boot id and network namespace. Ranks with the same identity can
 * share memory. */
void chorus__host_id(char *out, size_t len);

#endif
