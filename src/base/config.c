/*
 * config.c - the table of CHORUS_* variables, parsed strictly into a typed chorus_config, and
 * the one place in Chorus that reads the process environment.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"

/* kind and choices of each type of row */
#define CHORUS__CFG_KIND_STR      CHORUS_CFG_STR, NULL
#define CHORUS__CFG_KIND_SECRET   CHORUS_CFG_SECRET, NULL
#define CHORUS__CFG_KIND_INT      CHORUS_CFG_INT, NULL
#define CHORUS__CFG_KIND_DOUBLE   CHORUS_CFG_DOUBLE, NULL
#define CHORUS__CFG_KIND_BOOL     CHORUS_CFG_BOOL, NULL
#define CHORUS__CFG_KIND_BYTES    CHORUS_CFG_BYTES, NULL
#define CHORUS__CFG_KIND_ENUM(ch) CHORUS_CFG_ENUM, ch
#define CHORUS__CFG_ENTRY(...)                                                                     \
    {                                                                                              \
        __VA_ARGS__                                                                                \
    }

static const chorus_cfg_entry table[] = {
#define CHORUS_CFG(name, field, type, def, help)                                                   \
    CHORUS__CFG_ENTRY(#name, CHORUS__CFG_KIND_##type, def, help, offsetof(chorus_config, field)),
#include "base/config_table.h"
#undef CHORUS_CFG
    {NULL, CHORUS_CFG_STR, NULL, NULL, NULL, 0}};

const chorus_cfg_entry *chorus__cfg_table(void)
{
    return table;
}

const char *chorus__env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

const char *chorus__cfg_type_name(const chorus_cfg_entry *e)
{
    static const char *const words[] = {"text", "secret", "integer", "number",
                                        "0/1",  "bytes",  "name"};
    return words[e->kind];
}

/* ---- strings that live as long as the process ---------------------------------------- */

/* Every distinct value seen is kept once, so a parsed config holds no pointers into the
 * environment (which setenv may free) and can be copied without owning anything. */
typedef struct interned {
    struct interned *next;
    char s[];
} interned;

static interned *pool;
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *intern(const char *s)
{
    if (!s) return NULL;
    pthread_mutex_lock(&pool_mu);
    interned *i = pool;
    while (i && strcmp(i->s, s)) i = i->next;
    if (!i) {
        size_t n = strlen(s) + 1;
        i = malloc(sizeof(*i) + n);
        if (i) {
            memcpy(i->s, s, n);
            i->next = pool;
            pool = i;
        }
    }
    pthread_mutex_unlock(&pool_mu);
    return i ? i->s : NULL;
}

/* ---- parsing one value --------------------------------------------------------------- */

/* Each returns 0 and stores the value, or -1 when the text is not of the form. */

static int parse_int(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0) return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no",
                                                                                "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return *out = 1, 0;
        if (!strcasecmp(s, no[i])) return *out = 0, 0;
    }
    return -1;
}

int chorus__parse_bytes(const char *s, size_t *out)
{
    if (*s < '0' || *s > '9') return -1; /* no sign, no space */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    int shift = 0;
    if (*end) {
        const char *units = "KMG", *u = strchr(units, toupper((unsigned char)*end));
        if (!u || !*u || end[1]) return -1;
        shift = 10 * (int)(u - units + 1);
    }
    if (shift && v > (~0ull >> shift)) return -1;
    v <<= shift;
    if (v > (unsigned long long)SIZE_MAX) return -1;
    *out = (size_t)v;
    return 0;
}

/* The canonical choice equal to s, or NULL. */
static const char *parse_choice(const char *s, const char *choices)
{
    size_t n = strlen(s);
    for (const char *p = choices; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && !strncmp(p, s, n)) return intern(s);
        if (!comma) break;
        p = comma + 1;
    }
    return NULL;
}

static const char *expected(const chorus_cfg_entry *e)
{
    switch (e->kind) {
    case CHORUS_CFG_INT: return "is not a non-negative integer";
    case CHORUS_CFG_DOUBLE: return "is not a non-negative number";
    case CHORUS_CFG_BOOL: return "is not a boolean (0/1, true/false, yes/no, on/off)";
    case CHORUS_CFG_BYTES:
        return "is not a size in bytes (a non-negative integer, optionally with K, M or G)";
    case CHORUS_CFG_ENUM: return "is not one of";
    default: return "is not valid";
    }
}

/* Stores text (the environment's value, or the default when text is NULL) into the field of
 * e in cfg; -1 when text does not parse. Defaults always parse (checked by a unit test). */
static int store(const chorus_cfg_entry *e, const char *text, chorus_config *cfg)
{
    const char *t = text ? text : e->def;
    union {
        const char *s;
        long l;
        double d;
        int b;
        size_t z;
    } v;
    size_t n = 0;
    int bad = 0;
    switch (e->kind) {
    case CHORUS_CFG_STR:
    case CHORUS_CFG_SECRET: v.s = intern(t), n = sizeof(v.s); break;
    case CHORUS_CFG_ENUM:
        v.s = t ? parse_choice(t, e->choices) : NULL, n = sizeof(v.s);
        bad = t && !v.s;
        break;
    case CHORUS_CFG_INT: v.l = -1, n = sizeof(v.l), bad = t && parse_int(t, &v.l); break;
    case CHORUS_CFG_DOUBLE: v.d = 0, n = sizeof(v.d), bad = t && parse_double(t, &v.d); break;
    case CHORUS_CFG_BOOL: v.b = 0, n = sizeof(v.b), bad = t && parse_bool(t, &v.b); break;
    case CHORUS_CFG_BYTES: v.z = 0, n = sizeof(v.z), bad = t && chorus__parse_bytes(t, &v.z); break;
    }
    if (bad || !n) return -1;
    memcpy((char *)cfg + e->offset, &v, n);
    return 0;
}

/* Stores text into the row t of cfg; when it does not parse, the default instead, and the
 * reason in e (when not NULL). */
static chorus_result set_row(const chorus_cfg_entry *t, const char *text, chorus_config *cfg,
                             chorus_errbuf *e)
{
    if (!store(t, text, cfg)) return CHORUS_OK;
    store(t, NULL, cfg);
    if (e)
        snprintf(e->msg, sizeof(e->msg), "%s=%s %s%s%s", t->name, text, expected(t),
                 t->kind == CHORUS_CFG_ENUM ? " " : "",
                 t->kind == CHORUS_CFG_ENUM ? t->choices : "");
    return CHORUS_ERR_INVALID_ARG;
}

chorus_result chorus__config_parse(chorus_config *cfg, chorus_errbuf *e)
{
    chorus_result r = CHORUS_OK;
    memset(cfg, 0, sizeof(*cfg));
    for (const chorus_cfg_entry *t = table; t->name; t++)
        if (set_row(t, chorus__env(t->name), cfg, r == CHORUS_OK ? e : NULL) != CHORUS_OK)
            r = CHORUS_ERR_INVALID_ARG;
    return r;
}

chorus_result chorus__config_set(chorus_config *cfg, const char *name, const char *value,
                                 chorus_errbuf *e)
{
    for (const chorus_cfg_entry *t = table; t->name; t++)
        if (name && !strcmp(t->name, name)) return set_row(t, value, cfg, e);
    if (e) snprintf(e->msg, sizeof(e->msg), "%s is not a Chorus variable", name ? name : "(null)");
    return CHORUS_ERR_INVALID_ARG;
}

chorus_result chorus__config_load(chorus_config *cfg, chorus_errbuf *e)
{
    chorus_errbuf why;
    if (chorus__config_parse(cfg, &why) != CHORUS_OK)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "invalid environment: %s", why.msg);
    chorus__config_log_set();
    return CHORUS_OK;
}

/* ---- the process-wide parse ---------------------------------------------------------- */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static chorus_config process_cfg;
static chorus_errbuf process_err;
static int process_bad;

static void parse_process(void)
{
    process_bad = chorus__config_parse(&process_cfg, &process_err) != CHORUS_OK;
}

const chorus_config *chorus__config(void)
{
    pthread_once(&once, parse_process);
    return &process_cfg;
}

const char *chorus__config_error(void)
{
    pthread_once(&once, parse_process);
    return process_bad ? process_err.msg : NULL;
}

void chorus__config_log_set(void)
{
    static int logged;
    if (__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED)) return;
    for (const chorus_cfg_entry *t = table; t->name; t++) {
        const char *v = chorus__env(t->name);
        if (!v) continue;
        if (t->kind == CHORUS_CFG_SECRET)
            CHORUS_INFO(CHORUS_LOG_INIT, "%s=(%zu bytes, not shown) (set)", t->name, strlen(v));
        else
            CHORUS_INFO(CHORUS_LOG_INIT, "%s=%s (set)", t->name, v);
    }
}

/* ---- the one public reader ----------------------------------------------------------- */

int chorus_config_is_set(const char *name)
{
    return name && chorus__env(name) != NULL;
}
