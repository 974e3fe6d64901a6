/*
 * config.c - the table of CHORUS_* variables, parsed strictly into a typed chorus_config, and
 * the one place in Chorus that reads the process environment.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
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
#define CHORUS__CFG_KIND_POSNUM   CHORUS_CFG_POSNUM, NULL
#define CHORUS__CFG_KIND_LIST(ch) CHORUS_CFG_LIST, ch
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

/* The process's own settings (chorus_config_set), over the environment: name and value both
 * interned, a removed setting's value NULL. */
typedef struct setting {
    struct setting *next;
    const char *name, *value;
} setting;

static setting *settings;
static pthread_mutex_t settings_mu = PTHREAD_MUTEX_INITIALIZER;

/* The setting of name, or NULL when the process made none. */
static setting *setting_of(const char *name)
{
    setting *s = settings;
    while (s && strcmp(s->name, name)) s = s->next;
    return s;
}

const char *chorus__env(const char *name)
{
    pthread_mutex_lock(&settings_mu);
    setting *s = setting_of(name);
    const char *set = s ? s->value : NULL;
    pthread_mutex_unlock(&settings_mu);
    if (set) return set;
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

void chorus__job_vars_read(chorus_job_vars *v)
{
#define CHORUS_JOB_VAR(name, who) v->name = chorus__env(#name);
#include "base/config_table.h"
#undef CHORUS_JOB_VAR
}

extern char **environ;

const char *chorus__env_entry(size_t i)
{
    for (size_t k = 0; environ && environ[k]; k++)
        if (k == i) return environ[k];
    return NULL;
}

const char *chorus__cfg_type_name(const chorus_cfg_entry *e)
{
    static const char *const words[] = {"text",  "secret", "integer",  "number", "0/1",
                                        "bytes", "name",   "positive", "names"};
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

int chorus__parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, long *out)
{
    return chorus__parse_int(s, 0, LONG_MAX, out);
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

/* The canonical spelling of the choice equal to s (of n bytes; case does not matter), or
 * NULL. */
static const char *parse_choice_n(const char *s, size_t n, const char *choices)
{
    for (const char *p = choices; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && !strncasecmp(p, s, n)) {
            char canon[64];
            snprintf(canon, sizeof(canon), "%.*s", (int)len, p);
            return intern(canon);
        }
        if (!comma) break;
        p = comma + 1;
    }
    return NULL;
}

static const char *parse_choice(const char *s, const char *choices)
{
    return parse_choice_n(s, strlen(s), choices);
}

/* A comma-separated list of choices ("INIT,coll"), kept in canonical spelling; NULL when a
 * name is not a choice or the list is empty. */
static const char *parse_list(const char *s, const char *choices)
{
    char out[256];
    size_t o = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *c = parse_choice_n(p, len, choices);
        if (!c || o + strlen(c) + 2 > sizeof(out)) return NULL;
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%s", o ? "," : "", c);
        if (!comma) break;
        p = comma + 1;
    }
    return intern(out);
}

static const char *expected(const chorus_cfg_entry *e)
{
    switch (e->kind) {
    case CHORUS_CFG_INT: return "is not a non-negative integer";
    case CHORUS_CFG_DOUBLE: return "is not a non-negative number";
    case CHORUS_CFG_POSNUM: return "is not a positive number (above 0, e.g. 30 or 2.5)";
    case CHORUS_CFG_BOOL: return "is not a boolean (0/1, true/false, yes/no, on/off)";
    case CHORUS_CFG_BYTES:
        return "is not a size in bytes (a non-negative integer, optionally with K, M or G)";
    case CHORUS_CFG_ENUM: return "is not one of";
    case CHORUS_CFG_LIST: return "is not a comma-separated list of";
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
    case CHORUS_CFG_LIST:
        v.s = t ? parse_list(t, e->choices) : NULL, n = sizeof(v.s);
        bad = t && !v.s;
        break;
    case CHORUS_CFG_INT: v.l = -1, n = sizeof(v.l), bad = t && parse_int(t, &v.l); break;
    case CHORUS_CFG_DOUBLE: v.d = 0, n = sizeof(v.d), bad = t && parse_double(t, &v.d); break;
    case CHORUS_CFG_POSNUM:
        v.d = 0, n = sizeof(v.d), bad = t && (parse_double(t, &v.d) || v.d <= 0);
        break;
    case CHORUS_CFG_BOOL: v.b = 0, n = sizeof(v.b), bad = t && parse_bool(t, &v.b); break;
    case CHORUS_CFG_BYTES: v.z = 0, n = sizeof(v.z), bad = t && chorus__parse_bytes(t, &v.z); break;
    }
    if (bad || !n) return -1;
    memcpy((char *)cfg + e->offset, &v, n);
    return 0;
}

/* Stores text (the value of the variable `from`) into the row t of cfg; when it does not
 * parse, the default instead, and the reason in e (when not NULL). */
static chorus_result set_row_from(const chorus_cfg_entry *t, const char *from, const char *text,
                                  chorus_config *cfg, chorus_errbuf *e)
{
    if (!store(t, text, cfg)) return CHORUS_OK;
    store(t, NULL, cfg);
    if (e)
        snprintf(e->msg, sizeof(e->msg), "%s=%s %s%s%s", from, text, expected(t),
                 t->choices ? " " : "", t->choices ? t->choices : "");
    return CHORUS_ERR_INVALID_ARG;
}

static chorus_result set_row(const chorus_cfg_entry *t, const char *text, chorus_config *cfg,
                             chorus_errbuf *e)
{
    return set_row_from(t, t->name, text, cfg, e);
}

/* Horovod's variables for the rows that mean the same, so that a horovod.torch job keeps its
 * settings: read when the CHORUS_* variable itself is not set. `value`, when not NULL, is
 * what the row gets when the Horovod variable is 1 (a switch rather than a value); `unset`,
 * when not NULL, is a Horovod value that sets nothing (HOROVOD_TIMELINE=DYNAMIC: no timeline
 * until the program starts one with start_timeline(file)). The other HOROVOD_* variables have
 * no Chorus meaning (docs/ENVIRONMENT.md lists them). */
static const struct {
    const char *row, *horovod, *value, *unset;
} horovod_alias[] = {
    {"CHORUS_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", NULL, NULL},
    {"CHORUS_CYCLE_TIME_MS", "HOROVOD_CYCLE_TIME", NULL, NULL},
    {"CHORUS_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", NULL, NULL},
    {"CHORUS_STALL_WARN_S", "HOROVOD_STALL_CHECK_TIME_SECONDS", NULL, NULL},
    {"CHORUS_STALL_WARN_S", "HOROVOD_STALL_CHECK_DISABLE", "0", NULL},
    {"CHORUS_STALL_SHUTDOWN_S", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", NULL, NULL},
    {"CHORUS_TIMELINE", "HOROVOD_TIMELINE", NULL, "DYNAMIC"},
    {"CHORUS_AUTOTUNE", "HOROVOD_AUTOTUNE", NULL, NULL},
};

/* The text for row t and the variable it came from: CHORUS_*, else a Horovod alias. */
const char *chorus__cfg_row_text(const chorus_cfg_entry *t, const char **from)
{
    const char *v = chorus__env(t->name);
    *from = t->name;
    for (size_t i = 0; !v && i < sizeof(horovod_alias) / sizeof(horovod_alias[0]); i++) {
        if (strcmp(horovod_alias[i].row, t->name)) continue;
        const char *h = chorus__env(horovod_alias[i].horovod);
        if (!h || (horovod_alias[i].value && strcmp(h, "1")) ||
            (horovod_alias[i].unset && !strcmp(h, horovod_alias[i].unset)))
            continue;
        *from = horovod_alias[i].horovod;
        v = horovod_alias[i].value ? horovod_alias[i].value : h;
    }
    return v;
}

chorus_result chorus__config_parse(chorus_config *cfg, chorus_errbuf *e)
{
    chorus_result r = CHORUS_OK;
    memset(cfg, 0, sizeof(*cfg));
    for (const chorus_cfg_entry *t = table; t->name; t++) {
        const char *from, *text = chorus__cfg_row_text(t, &from);
        if (set_row_from(t, from, text, cfg, r == CHORUS_OK ? e : NULL) != CHORUS_OK)
            r = CHORUS_ERR_INVALID_ARG;
    }
    return r;
}

const char *chorus__config_text(const char *name, const char **from)
{
    const char *ignored;
    for (const chorus_cfg_entry *t = table; name && t->name; t++)
        if (!strcmp(t->name, name)) return chorus__cfg_row_text(t, from ? from : &ignored);
    return NULL;
}

chorus_result chorus__config_set(chorus_config *cfg, const char *name, const char *value,
                                 chorus_errbuf *e)
{
    for (const chorus_cfg_entry *t = table; t->name; t++)
        if (name && !strcmp(t->name, name)) return set_row(t, value, cfg, e);
    if (e) snprintf(e->msg, sizeof(e->msg), "%s is not a Chorus variable", name ? name : "(null)");
    return CHORUS_ERR_INVALID_ARG;
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

const char *chorus__config_complaint(void)
{
    pthread_once(&once, parse_process);
    return process_bad ? process_err.msg : NULL;
}

/* ---- the public reader and writer --------------------------------------------------- */

int chorus_config_is_set(const char *name)
{
    return name && chorus__env(name) != NULL;
}

const char *chorus_config_get(const char *name)
{
    return name ? intern(chorus__env(name)) : NULL;
}

static int job_var(const char *name)
{
    static const char *const names[] = {
#define CHORUS_JOB_VAR(n, who) #n,
#include "base/config_table.h"
#undef CHORUS_JOB_VAR
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(names[i], name)) return 1;
    return 0;
}

/* chorus_config_set's work, without logging (config_log.c reports the failure): checks and
 * records the process's setting of name; on failure the reason in why. */
chorus_result chorus__config_setting(const char *name, const char *value, chorus_errbuf *why)
{
    if (!name) {
        snprintf(why->msg, sizeof(why->msg), "chorus_config_set: name is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    const chorus_cfg_entry *t = table;
    while (t->name && strcmp(t->name, name)) t++;
    if (!t->name && !job_var(name)) {
        snprintf(why->msg, sizeof(why->msg),
                 "chorus_config_set: %s is not a Chorus variable (chorus-run --help-env lists "
                 "them)",
                 name);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (value && !*value) value = NULL;
    chorus_config scratch;
    chorus_errbuf bad;
    if (value && t->name && set_row(t, value, &scratch, &bad) != CHORUS_OK) {
        snprintf(why->msg, sizeof(why->msg), "chorus_config_set: %.480s", bad.msg);
        return CHORUS_ERR_INVALID_ARG;
    }
    const char *iname = intern(name), *ivalue = intern(value);
    setting *s = NULL;
    if (iname && (!value || ivalue)) {
        pthread_mutex_lock(&settings_mu);
        s = setting_of(name);
        if (!s && (s = malloc(sizeof(*s)))) {
            s->name = iname;
            s->next = settings;
            settings = s;
        }
        if (s) s->value = ivalue;
        pthread_mutex_unlock(&settings_mu);
    }
    if (s) return CHORUS_OK;
    snprintf(why->msg, sizeof(why->msg), "out of memory");
    return CHORUS_ERR_NOMEM;
}
