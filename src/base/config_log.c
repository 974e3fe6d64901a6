/*
 * config_log.c - what the configuration tells the user: the variables that are set, logged once
 * at INFO; names in the environment that are no row of the table, warned about once (with the
 * likely row when one is close); and the entry points' parse that does both. Kept apart from
 * config.c so that the table and its parse use no logging: the log module reads its own
 * settings (CHORUS_DEBUG*) from the parsed table.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"

chorus_result chorus__config_load(chorus_config *cfg, chorus_errbuf *e)
{
    chorus_errbuf why;
    chorus__config_warn_unknown();
    if (chorus__config_parse(cfg, &why) != CHORUS_OK)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "invalid environment: %s", why.msg);
    chorus__config_log_set();
    return CHORUS_OK;
}

const char *chorus__config_error(void)
{
    const char *why = chorus__config_complaint();
    chorus__config_warn_unknown();
    return why;
}

void chorus__config_log_set(void)
{
    static int logged;
    if (__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED)) return;
    const char *level = chorus__config()->debug;
    if (CHORUS__LOG_ON(CHORUS_LOG_INFO) || (level && !strcmp(level, "VERSION")))
        chorus__log(CHORUS_LOG_INFO, CHORUS_LOG_INIT, "Chorus version %d.%d.%d",
                    CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH);
    for (const chorus_cfg_entry *t = chorus__cfg_table(); t->name; t++) {
        const char *from, *v = chorus__cfg_row_text(t, &from);
        if (!v) continue;
        if (t->kind == CHORUS_CFG_SECRET)
            CHORUS_INFO(CHORUS_LOG_INIT, "%s=(%zu bytes, not shown) (set)", t->name, strlen(v));
        else if (from != t->name)
            CHORUS_INFO(CHORUS_LOG_INIT, "%s=%s (from %s)", t->name, v, from);
        else
            CHORUS_INFO(CHORUS_LOG_INIT, "%s=%s (set)", t->name, v);
    }
}

/* ---- names that are no row of the table ---------------------------------------------- */

/* Edit distance (insertions, deletions, substitutions) between a and b, capped at 9. */
static int distance(const char *a, size_t na, const char *b)
{
    size_t nb = strlen(b);
    int row[64];
    if (na >= 64 || nb >= 64) return 9;
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j], best = diag + (toupper((unsigned char)a[i - 1]) != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[nb] < 9 ? row[nb] : 9;
}

/* Variables named CHORUS_* that belong to the build, the Python package, the benchmark scripts
 * (bench/common.sh) and the test runner, not the library. */
static int foreign_name(const char *name, size_t n)
{
    static const char *const names[] = {"CHORUS_SKIP_DEPS", "CHORUS_LIB", "CHORUS_ARGS",
                                        "CHORUS_COLS"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i]) == n && !strncmp(names[i], name, n)) return 1;
    return !strncmp(name, "CHORUS_TEST_", 12);
}

static void warn_unknown(void)
{
    /* A rank started by chorus-run: the launcher warned already, once for the job. */
    chorus_job_vars job;
    chorus__job_vars_read(&job);
    if (job.CHORUS_RANK && job.CHORUS_STORE_ADDR) return;
    const char *entry;
    for (size_t i = 0; (entry = chorus__env_entry(i)) != NULL; i++) {
        const char *eq = strchr(entry, '=');
        size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
        if (strncmp(entry, "CHORUS_", 7) || foreign_name(entry, n)) continue;
        const chorus_cfg_entry *t = chorus__cfg_table(), *near = NULL;
        int best = 4; /* a closer match than this is a likely misspelling */
        for (; t->name; t++) {
            if (strlen(t->name) == n && !strncmp(t->name, entry, n)) break;
            int d = distance(entry, n, t->name);
            if (d < best) best = d, near = t;
        }
        if (t->name) continue;
        chorus__log_init();
        chorus__log(CHORUS_LOG_WARN, CHORUS_LOG_INIT,
                    "%.*s is not a Chorus variable and is ignored%s%s%s (chorus-run --help-env "
                    "lists them)",
                    (int)n, entry, near ? "; did you mean " : "", near ? near->name : "",
                    near ? "?" : "");
    }
}

void chorus__config_warn_unknown(void)
{
    static pthread_once_t warned = PTHREAD_ONCE_INIT;
    pthread_once(&warned, warn_unknown);
}

chorus_result chorus_config_set(const char *name, const char *value)
{
    chorus_errbuf why;
    chorus_result r = chorus__config_setting(name, value, &why);
    return r == CHORUS_OK ? r : chorus__fail(chorus__init_errbuf(), r, "%s", why.msg);
}
