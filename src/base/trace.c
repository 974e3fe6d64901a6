/*
 * trace.c - the process's Chrome trace files (trace.h). Every file this process traces into
 * is on one list under one lock: the collectives of several communicators and the engine
 * thread write events into the same file from different threads, each event whole. The
 * closing bracket is written when the last holder releases the file and again at exit; a
 * holder that comes later seeks back over it and goes on, so the file is valid JSON whenever
 * nobody holds it. Events are flushed at most every half second.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/trace.h"

struct chorus_trace {
    struct chorus_trace *next;
    char path[512];
    FILE *f;       /* NULL when the file could not be opened */
    char why[700]; /* why it could not */
    int refs;
    int first;  /* no event written yet */
    int closed; /* the bracket is written at offset end */
    long end;
    int rank, nrows;
    int write_failed; /* a write or flush failed: said once, the file is incomplete */
    double t0, last_flush;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static chorus_trace *g_traces;
static int g_atexit;

static const char CLOSE[] = "\n]\n";

/* Under g_mu: flushes t's buffered events; the first failure (a full disk, a quota) is said
 * once, naming the file, as a note the user sees without CHORUS_DEBUG: the run goes on, but
 * its timeline is incomplete and no later event is written. */
static void flush_checked(chorus_trace *t)
{
    if (fflush(t->f) == 0 && !ferror(t->f)) return;
    int err = errno;
    if (t->write_failed) return;
    t->write_failed = 1;
    CHORUS_NOTE(CHORUS_LOG_COLL,
                "CHORUS_TIMELINE: cannot write the timeline file %s: %s; the file is "
                "incomplete and this run writes no more events to it",
                t->path, strerror(err ? err : EIO));
}

/* Under g_mu: writes the bracket so that the file is valid JSON from here. */
static void close_bracket(chorus_trace *t)
{
    if (!t->f || t->closed || t->write_failed) return;
    t->end = ftell(t->f);
    fputs(CLOSE, t->f);
    flush_checked(t);
    t->closed = 1;
}

static void close_all_at_exit(void)
{
    pthread_mutex_lock(&g_mu);
    for (chorus_trace *t = g_traces; t; t = t->next) close_bracket(t);
    pthread_mutex_unlock(&g_mu);
}

static void expand(char *out, size_t len, const char *pattern, int rank)
{
    size_t o = 0;
    for (const char *p = pattern; *p && o + 16 < len; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            o += (size_t)snprintf(out + o, len - o, "%d", rank);
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = 0;
}

/* Under g_mu: the separator before an event, reopening a closed file after its last event. */
static void sep(chorus_trace *t)
{
    if (t->closed) {
        fseek(t->f, t->end, SEEK_SET);
        t->closed = 0;
    }
    fputs(t->first ? "\n" : ",\n", t->f);
    t->first = 0;
}

static chorus_trace *open_trace(const char *path, int rank)
{
    chorus_trace *t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    snprintf(t->path, sizeof(t->path), "%s", path);
    t->rank = rank;
    t->first = 1;
    t->t0 = chorus__now();
    t->f = fopen(path, "w");
    if (!t->f) {
        snprintf(t->why, sizeof(t->why), "cannot write the timeline file %s: %s", path,
                 strerror(errno));
    } else {
        fputc('[', t->f);
        sep(t);
        fprintf(t->f,
                "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                "\"args\":{\"name\":\"chorus rank %d\"}}",
                rank, rank);
    }
    t->next = g_traces;
    g_traces = t;
    if (!g_atexit) {
        atexit(close_all_at_exit);
        g_atexit = 1;
    }
    return t;
}

int chorus__trace_acquire(const char *pattern, int rank, chorus_trace **out, char *why, size_t len)
{
    *out = NULL;
    if (!pattern || !*pattern || (!strstr(pattern, "%r") && rank != 0)) return 0;
    char path[512];
    expand(path, sizeof(path), pattern, rank);
    pthread_mutex_lock(&g_mu);
    chorus_trace *t = g_traces;
    while (t && strcmp(t->path, path) != 0) t = t->next;
    if (!t) t = open_trace(path, rank);
    int rc = 0;
    if (!t || !t->f) {
        snprintf(why, len, "%s", t ? t->why : "out of memory");
        rc = t && t->refs < 0 ? -2 : -1;
        if (t) t->refs = -1; /* the failure is known: later acquires return -2 */
    } else {
        t->refs++;
        *out = t;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void chorus__trace_release(chorus_trace *t)
{
    if (!t) return;
    pthread_mutex_lock(&g_mu);
    if (--t->refs == 0) close_bracket(t);
    pthread_mutex_unlock(&g_mu);
}

const char *chorus__trace_path(const chorus_trace *t)
{
    return t->path;
}

int chorus__trace_row(chorus_trace *t, const char *name)
{
    char q[600];
    chorus__json_string(q, sizeof(q), name);
    pthread_mutex_lock(&g_mu);
    int id = ++t->nrows;
    if (t->write_failed) {
        pthread_mutex_unlock(&g_mu);
        return id;
    }
    sep(t);
    fprintf(t->f,
            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":%s}}",
            t->rank, id, q);
    pthread_mutex_unlock(&g_mu);
    return id;
}

void chorus__trace_event(chorus_trace *t, int tid, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_mu);
    if (t->write_failed) {
        pthread_mutex_unlock(&g_mu);
        va_end(ap);
        return;
    }
    sep(t);
    fprintf(t->f, "{\"pid\":%d,\"tid\":%d,", t->rank, tid);
    vfprintf(t->f, fmt, ap);
    fputc('}', t->f);
    double now = chorus__now();
    if (now - t->last_flush >= 0.5) { /* a run that hangs or dies still leaves its events */
        flush_checked(t);
        t->last_flush = now;
    }
    pthread_mutex_unlock(&g_mu);
    va_end(ap);
}

void chorus__trace_flush(chorus_trace *t)
{
    pthread_mutex_lock(&g_mu);
    flush_checked(t);
    pthread_mutex_unlock(&g_mu);
}

long long chorus__trace_us(const chorus_trace *t, double s)
{
    return (long long)((s - t->t0) * 1e6);
}

void chorus__json_string(char *out, size_t len, const char *s)
{
    size_t o = 0;
    if (len < 3) {
        if (len) out[0] = 0;
        return;
    }
    out[o++] = '"';
    for (; *s && o + 8 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(out + o, len - o, "\\%c", c);
        else if (c < 0x20)
            o += (size_t)snprintf(out + o, len - o, "\\u%04x", c);
        else
            out[o++] = (char)c;
    }
    out[o++] = '"';
    out[o] = 0;
}
