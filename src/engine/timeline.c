/*
 * timeline.c - the engine's Chrome trace (CHORUS_TIMELINE): a JSON array of trace events
 * that chrome://tracing and Perfetto open. One row (tid) per tensor, named by a metadata event
 * the first time the tensor appears; complete events ("ph":"X") for the phases of each op
 * (NEGOTIATE, QUEUE, MEMCPY_IN_FUSION_BUFFER, the collective, MEMCPY_OUT_FUSION_BUFFER) and
 * an instant event on row 0 per cycle. Written by the engine thread only; the closing bracket
 * is written at shutdown, so the file is valid JSON once the engine has stopped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"

static void put_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void sep(eng_timeline *t)
{
    fputs(t->first ? "\n" : ",\n", t->f);
    t->first = 0;
}

int chorus__tl_open(eng_timeline *t, const char *path, int rank)
{
    memset(t, 0, sizeof(*t));
    t->f = fopen(path, "w");
    if (!t->f) return -1;
    t->first = 1;
    t->pid = rank;
    t->t0 = chorus__now();
    fputc('[', t->f);
    sep(t);
    fprintf(t->f,
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
            "\"args\":{\"name\":\"chorus engine rank %d\"}}",
            rank, rank);
    sep(t);
    fprintf(t->f,
            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
            "\"args\":{\"name\":\"cycles\"}}",
            rank);
    return 0;
}

void chorus__tl_close(eng_timeline *t)
{
    if (!t->f) return;
    fputs("\n]\n", t->f);
    fclose(t->f);
    t->f = NULL;
    chorus__map_free(&t->rows);
}

static int row(eng_timeline *t, const char *name)
{
    intptr_t v = (intptr_t)chorus__map_get(&t->rows, name);
    if (v) return (int)v;
    int id = ++t->nrows;
    if (chorus__map_put(&t->rows, name, (void *)(intptr_t)id) != 0) return 0;
    sep(t);
    fprintf(t->f,
            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
            t->pid, id);
    put_json_string(t->f, name);
    fputs("}}", t->f);
    return id;
}

static long long us(const eng_timeline *t, double s)
{
    return (long long)((s - t->t0) * 1e6);
}

void chorus__tl_span(eng_timeline *t, const char *name, const char *what, double t_start,
                     double t_end, const char *args_json)
{
    if (!t->f) return;
    int id = row(t, name);
    long long a = us(t, t_start), b = us(t, t_end);
    sep(t);
    fprintf(t->f, "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%lld,\"dur\":%lld",
            what, t->pid, id, a, b > a ? b - a : 0);
    if (args_json) fprintf(t->f, ",\"args\":%s", args_json);
    fputc('}', t->f);
}

void chorus__tl_instant(eng_timeline *t, const char *what, double ts, const char *args_json)
{
    if (!t->f) return;
    sep(t);
    fprintf(t->f, "{\"name\":\"%s\",\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":0,\"ts\":%lld",
            what, t->pid, us(t, ts));
    if (args_json) fprintf(t->f, ",\"args\":%s", args_json);
    fputc('}', t->f);
}

void chorus__tl_flush(eng_timeline *t, double now)
{
    if (!t->f || now - t->last_flush < 0.5) return;
    fflush(t->f);
    t->last_flush = now;
}
