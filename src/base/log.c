/*
 * log.c - CHORUS_DEBUG logging. The level is tested before anything is formatted (see the
 * macros in base.h); lines carry host, pid and rank so interleaved output of many ranks can be
 * told apart.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

int chorus__log_level = -1;
static int log_subsys = CHORUS_LOG_ALL;
static int log_rank = -1;
static FILE *log_file;
static char log_host[64];
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

/* CHORUS_DEBUG, already checked against its list by the config: the level it asks for. */
static int parse_level(const char *s)
{
    static const struct {
        const char *name;
        int level;
    } names[] = {{"ERROR", CHORUS_LOG_WARN},
                 {"WARN", CHORUS_LOG_WARN},
                 {"INFO", CHORUS_LOG_INFO},
                 {"DEBUG", CHORUS_LOG_TRACE},
                 {"TRACE", CHORUS_LOG_TRACE}};
    for (size_t i = 0; s && i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcasecmp(s, names[i].name)) return names[i].level;
    return CHORUS_LOG_NONE; /* NONE, OFF, VERSION */
}

/* CHORUS_DEBUG_SUBSYS, already checked by the config: the bits of the names it lists. */
static int parse_subsys(const char *s)
{
    static const struct {
        const char *name;
        int bit;
    } names[] = {{"INIT", CHORUS_LOG_INIT},     {"COLL", CHORUS_LOG_COLL},
                 {"TCP", CHORUS_LOG_TCP},       {"SHM", CHORUS_LOG_SHM},
                 {"ENGINE", CHORUS_LOG_ENGINE}, {"ELASTIC", CHORUS_LOG_ELASTIC},
                 {"BOOT", CHORUS_LOG_BOOT},     {"ALL", CHORUS_LOG_ALL}};
    if (!s || !*s) return CHORUS_LOG_ALL;
    int mask = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (!strcasecmp(tok, names[i].name)) mask |= names[i].bit;
    return mask ? mask : CHORUS_LOG_ALL;
}

static void open_log_file(const char *pattern)
{
    char path[512];
    size_t o = 0;
    for (const char *p = pattern; *p && o + 64 < sizeof(path); p++) {
        if (p[0] == '%' && p[1] == 'h') {
            o += (size_t)snprintf(path + o, sizeof(path) - o, "%s", log_host);
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
            p++;
        } else {
            path[o++] = *p;
        }
    }
    path[o] = 0;
    log_file = fopen(path, "a");
    if (log_file)
        setvbuf(log_file, NULL, _IOLBF, 0);
    else /* said whatever the level: the user asked for a log and would find none */
        fprintf(stderr,
                "%s:%d CHORUS WARN CHORUS_DEBUG_FILE=%s: cannot open %s: %s; logging to "
                "stderr\n",
                log_host, (int)getpid(), pattern, path, strerror(errno));
}

static int default_level = CHORUS_LOG_NONE;
static int note_on = 1; /* CHORUS_NOTE lines: off only when CHORUS_DEBUG asks for nothing */

void chorus__log_default_level(int level)
{
    default_level = level;
}

static void log_setup(void)
{
    gethostname(log_host, sizeof(log_host) - 1);
    char *dot = strchr(log_host, '.');
    if (dot) *dot = 0;
    const chorus_config *cfg = chorus__config();
    log_subsys = parse_subsys(cfg->debug_subsys);
    if (cfg->debug_file) open_log_file(cfg->debug_file);
    int level = cfg->debug ? parse_level(cfg->debug) : default_level;
    note_on = !cfg->debug || level >= CHORUS_LOG_WARN;
    __atomic_store_n(&chorus__log_level, level, __ATOMIC_RELEASE);
}

int chorus__log_init(void)
{
    pthread_once(&log_once, log_setup);
    return __atomic_load_n(&chorus__log_level, __ATOMIC_ACQUIRE);
}

int chorus__log_note_on(void)
{
    chorus__log_init();
    return note_on;
}

void chorus__log_set_rank(int rank)
{
    log_rank = rank;
}

void chorus__log(int level, int subsys, const char *fmt, ...)
{
    static const char *names[] = {"", "WARN", "INFO", "TRACE"};
    if (!(subsys & log_subsys) && level > CHORUS_LOG_WARN) return;
    char line[1024];
    int n;
    if (log_rank >= 0)
        n = snprintf(line, sizeof(line), "%s:%d:rank %d CHORUS %s ", log_host, (int)getpid(),
                     log_rank, names[level]);
    else
        n = snprintf(line, sizeof(line), "%s:%d CHORUS %s ", log_host, (int)getpid(), names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line)) vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(log_file ? log_file : stderr, "%s\n", line);
}
