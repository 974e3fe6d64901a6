/*
 * timeline.c - the engine's rows of the Chrome trace (CHORUS_TIMELINE, base/trace.h): one row
 * (tid) per tensor, named by a metadata event the first time the tensor appears; complete
 * events ("ph":"X") for the phases of each op (NEGOTIATE, QUEUE, MEMCPY_IN_FUSION_BUFFER, the
 * collective, MEMCPY_OUT_FUSION_BUFFER) and an instant event on row 0 per cycle. The file is
 * the process's trace of this rank, where the collectives (the engine's own included) have a
 * row per communicator; it is valid JSON once the engine and the communicators are gone.
 * Written by the engine thread only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"

int chorus__tl_open(eng_timeline *t, const char *pattern, int rank, char *why, size_t len)
{
    memset(t, 0, sizeof(*t));
    return chorus__trace_acquire(pattern, rank, &t->tr, why, len);
}

void chorus__tl_close(eng_timeline *t)
{
    if (!t->tr) return;
    chorus__trace_release(t->tr);
    t->tr = NULL;
    chorus__map_free(&t->rows);
}

static int row(eng_timeline *t, const char *name)
{
    intptr_t v = (intptr_t)chorus__map_get(&t->rows, name);
    if (v) return (int)v;
    int id = chorus__trace_row(t->tr, name);
    if (chorus__map_put(&t->rows, name, (void *)(intptr_t)id) != 0) return 0;
    return id;
}

void chorus__tl_span(eng_timeline *t, const char *name, const char *what, double t_start,
                     double t_end, const char *args_json)
{
    if (!t->tr) return;
    int id = row(t, name);
    long long a = chorus__trace_us(t->tr, t_start), b = chorus__trace_us(t->tr, t_end);
    chorus__trace_event(t->tr, id, "\"name\":\"%s\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld%s%s",
                        what, a, b > a ? b - a : 0, args_json ? ",\"args\":" : "",
                        args_json ? args_json : "");
}

void chorus__tl_instant(eng_timeline *t, const char *what, double ts, const char *args_json)
{
    if (!t->tr) return;
    chorus__trace_event(t->tr, 0, "\"name\":\"%s\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%lld%s%s", what,
                        chorus__trace_us(t->tr, ts), args_json ? ",\"args\":" : "",
                        args_json ? args_json : "");
}

void chorus__tl_flush(eng_timeline *t, double now)
{
    if (!t->tr || now - t->last_flush < 0.5) return;
    chorus__trace_flush(t->tr);
    t->last_flush = now;
}
