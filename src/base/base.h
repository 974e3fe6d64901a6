/*
 * base.h - what every layer of libchorus uses: results with detail, logging, the config
 * table of CHORUS_* variables, clocks and checked allocation.
 */
#ifndef CHORUS_BASE_H
#define CHORUS_BASE_H

#include <stdarg.h>
#include <pthread.h>
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
/* The level used when CHORUS_DEBUG is unset (normally none): a program that wants warnings by
 * default calls it before anything is logged. */
void chorus__log_default_level(int level);
/* Sets the rank shown in the prefix of this process's log lines. */
void chorus__log_set_rank(int rank);

#define CHORUS__LOG_ON(lvl)                                                                        \
    ((chorus__log_level < 0 ? chorus__log_init() : chorus__log_level) >= (lvl))
#define CHORUS_WARN(sub, ...)                                                                      \
    do {                                                                                           \
        if (CHORUS__LOG_ON(CHORUS_LOG_WARN)) chorus__log(CHORUS_LOG_WARN, sub, __VA_ARGS__);       \
    } while (0)
/* A warning said also when CHORUS_DEBUG is unset (not when it asks for NONE): a reason the
 * user needs and would otherwise only see as an echo elsewhere (why a parameter server refused
 * a worker's request, which worker it goes on without). */
int chorus__log_note_on(void);
#define CHORUS_NOTE(sub, ...)                                                                      \
    do {                                                                                           \
        if (chorus__log_note_on()) chorus__log(CHORUS_LOG_WARN, sub, __VA_ARGS__);                 \
    } while (0)
#define CHORUS_INFO(sub, ...)                                                                      \
    do {                                                                                           \
        if (CHORUS__LOG_ON(CHORUS_LOG_INFO)) chorus__log(CHORUS_LOG_INFO, sub, __VA_ARGS__);       \
    } while (0)
#define CHORUS_TRACE(sub, ...)                                                                     \
    do {                                                                                           \
        if (CHORUS__LOG_ON(CHORUS_LOG_TRACE)) chorus__log(CHORUS_LOG_TRACE, sub, __VA_ARGS__);     \
    } while (0)

/* ---- config: the CHORUS_* variables, parsed once into typed fields ------------------ */

/* The C type of each kind of row in config_table.h. */
#define CHORUS__CFG_CTYPE_STR       const char *
#define CHORUS__CFG_CTYPE_SECRET    const char *
#define CHORUS__CFG_CTYPE_INT       long
#define CHORUS__CFG_CTYPE_DOUBLE    double
#define CHORUS__CFG_CTYPE_POSNUM    double
#define CHORUS__CFG_CTYPE_BOOL      int
#define CHORUS__CFG_CTYPE_BYTES     size_t
#define CHORUS__CFG_CTYPE_ENUM(...) const char *
#define CHORUS__CFG_CTYPE_LIST(...) const char *

/* One field per row of config_table.h, e.g. cfg.timeout_s for CHORUS_TIMEOUT_S. Strings point
 * to copies that live as long as the process, so a chorus_config can be copied freely. */
typedef struct chorus_config {
#define CHORUS_CFG(name, field, type, def, help) CHORUS__CFG_CTYPE_##type field;
#include "base/config_table.h"
#undef CHORUS_CFG
} chorus_config;

typedef enum {
    CHORUS_CFG_STR,
    CHORUS_CFG_SECRET,
    CHORUS_CFG_INT,
    CHORUS_CFG_DOUBLE,
    CHORUS_CFG_BOOL,
    CHORUS_CFG_BYTES,
    CHORUS_CFG_ENUM,
    CHORUS_CFG_POSNUM,
    CHORUS_CFG_LIST
} chorus_cfg_kind;

typedef struct chorus_cfg_entry {
    const char *name;
    chorus_cfg_kind kind;
    const char *choices; /* ENUM, LIST: the allowed names, comma-separated; else NULL */
    const char *def;     /* NULL: unset by default */
    const char *help;
    size_t offset; /* of the field in chorus_config */
} chorus_cfg_entry;

/* The table of every CHORUS_* variable, terminated by a NULL name. */
const chorus_cfg_entry *chorus__cfg_table(void);
/* The kind of a row in one word ("bytes", "number", ...), for --help-env. */
const char *chorus__cfg_type_name(const chorus_cfg_entry *e);
/* The environment's text for row t (NULL when unset or empty) and, in *from, the variable it
 * came from: the row's CHORUS_* name, else a Horovod alias (HOROVOD_FUSION_THRESHOLD, ...). */
chorus_result chorus__config_setting(const char *name, const char *value, chorus_errbuf *why);
const char *chorus__cfg_row_text(const chorus_cfg_entry *t, const char **from);

/* Parses every row from the environment now into *cfg. A malformed value (CHORUS_TIMEOUT_S=abc,
 * a negative size, an unknown name for an ENUM row) is CHORUS_ERR_INVALID_ARG with a message
 * naming the variable and its value in e (plain text: nothing is logged, so the log module
 * can use it); *cfg is then filled with defaults for the bad rows. Entry points (chorus_init,
 * chorus_elastic_create) parse this way and keep the result. Thread-safe. */
chorus_result chorus__config_parse(chorus_config *cfg, chorus_errbuf *e);

/* Sets one variable of a parsed config from text, checked as chorus__config_parse checks it
 * (value NULL: the default). For tests and tools that change a communicator's settings
 * between calls (e.g. forcing each CHORUS_ALGO_* in turn): every rank must do the same. An
 * unknown name or a malformed value is CHORUS_ERR_INVALID_ARG with the reason in e, and the
 * row then holds its default. */
chorus_result chorus__config_set(chorus_config *cfg, const char *name, const char *value,
                                 chorus_errbuf *e);

/* chorus__config_parse for an entry point: a malformed value fails with CHORUS_ERR_INVALID_ARG
 * and "invalid environment: <why>" in e (logged like any failure); on success the variables
 * that are set are logged once per process (chorus__config_log_set). */
chorus_result chorus__config_load(chorus_config *cfg, chorus_errbuf *e);

/* The process-wide parse, done on first use, for code without a communicator (logging, the
 * launcher, transports, deadlines). Malformed rows hold their defaults; chorus__config_error
 * then says why (NULL when every value was good). Thread-safe; never NULL. */
const chorus_config *chorus__config(void);
const char *chorus__config_error(void);
/* chorus__config_error without the warning about unknown names (config_log.c): the reason the
 * process-wide parse found, NULL when every value was good. */
const char *chorus__config_complaint(void);

/* Warns on stderr (whatever CHORUS_DEBUG says), once per process, about every CHORUS_* name in
 * the environment that is no row of the table ("CHORUS_TIMOUT_S is not a Chorus variable; did
 * you mean CHORUS_TIMEOUT_S?"). Names of the build, the Python package, the benchmark scripts
 * and the tests (CHORUS_SKIP_DEPS, CHORUS_LIB, CHORUS_ARGS, CHORUS_COLS, CHORUS_TEST_*) are not
 * warned about. Later calls do nothing. */
void chorus__config_warn_unknown(void);

/* Logs every CHORUS_* variable given in the environment at INFO ("CHORUS_TIMEOUT_S=20 (set)";
 * secrets by length only), once per process: later calls do nothing. */
void chorus__config_log_set(void);

/* The job variables of config_table.h (CHORUS_JOB_VAR), one field each, named as the
 * variable: v.RANK, v.SLURM_PROCID. NULL when unset or empty. */
typedef struct chorus_job_vars {
#define CHORUS_JOB_VAR(name, who) const char *name;
#include "base/config_table.h"
#undef CHORUS_JOB_VAR
} chorus_job_vars;

/* Reads every job variable from the environment now (each call reads afresh: the variables
 * describe the job at the moment it is formed). The values point into the environment and
 * hold until it changes. */
void chorus__job_vars_read(chorus_job_vars *v);

/* The text of the config table's row `name` as the parse reads it: the process's setting
 * (chorus_config_set), else the environment's, else a Horovod alias's, and in *from (when
 * not NULL) the variable it came from; NULL when unset or empty, and for a name that is no
 * row. Read now, unchecked: for code that needs the text of a variable another process will
 * parse (chorus-run checking what its ranks will read). */
const char *chorus__config_text(const char *name, const char **from);

/* Any other environment variable (PATH, ...): its value, NULL when unset or empty. The one way
 * the library reads a variable that is in neither table: a program's search path, the
 * defaults the launcher gives its ranks unless the user set them (PYTHONUNBUFFERED,
 * OMP_NUM_THREADS), a variable the user names (chorus-run -x VAR). The rows of the tables are
 * read through them (make check-structure refuses chorus__env("<a row>") outside config.c). */
const char *chorus__env(const char *name);
/* Entry i ("NAME=value") of the process environment, NULL past the last one. */
const char *chorus__env_entry(size_t i);
/* A size in bytes: digits with an optional K, M or G suffix (either case; powers of 1024).
 * 0, or -1 for anything else (a sign, a space, a fraction, an overflow). */
int chorus__parse_bytes(const char *s, size_t *out);
/* A decimal integer from lo to hi (the whole text, no spaces): 0, or -1 for anything else. */
int chorus__parse_int(const char *s, long lo, long hi, long *out);

/* ---- hashing ------------------------------------------------------------------------- */

/* 64-bit hash of n bytes, 8 at a time (fast on large buffers; any changed bit changes the
 * result). _seed continues from an earlier hash, to hash several pieces as one key. Equal on
 * every rank of a job (same build, same byte order). */
uint64_t chorus__hash64_seed(uint64_t seed, const void *p, size_t n);
static inline uint64_t chorus__hash64(const void *p, size_t n)
{
    return chorus__hash64_seed(0, p, n);
}

/* ---- clock --------------------------------------------------------------------------- */

/* Monotonic time in seconds / nanoseconds. */
double chorus__now(void);
uint64_t chorus__now_ns(void);
/* Absolute deadline CHORUS_TIMEOUT_S (the process-wide config) from now. */
double chorus__deadline(void);
/* CHORUS_TIMEOUT_S in seconds (300 when not above 0): how long a wait may go without progress. */
double chorus__timeout_s(void);

/* ---- allocation ---------------------------------------------------------------------- */

void *chorus__malloc_aligned(size_t n); /* 64-byte aligned; free() it */
/* pthread_create for the library's own threads (store server, watchdog, engine), with
 * asynchronous signals blocked in them so that the application's handlers run only on its own
 * threads. 0 or an errno value. */
int chorus__thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

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
/* 1 when op is CHORUS_BAND, CHORUS_BOR or CHORUS_BXOR (integer dtypes only). */
int chorus__op_is_bitwise(chorus_op op);
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
