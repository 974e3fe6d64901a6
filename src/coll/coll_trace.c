/*
 * coll_trace.c - CHORUS_TIMELINE for the collectives, whoever calls them (a program, the
 * trainer's fused or per-layer modes, the torch.distributed backend's worker thread, the
 * engine): one complete event per call on a row per communicator, in the rank's trace file
 * (base/trace.h) that the engine's rows share. A call made inside another traced call of the
 * same thread is part of it and is not traced again.
 */
#include <stdio.h>

#include "base/trace.h"
#include "coll/coll.h"

static _Thread_local int depth; /* traced calls running on this thread */

/* First call on c: join the file, or warn once why not. */
static void trace_join(chorus_comm *c)
{
    c->trace_state = -1;
    const char *pattern = c->cfg.timeline;
    int me = c->world[c->rank];
    char why[800];
    int rc = chorus__trace_acquire(pattern, me, &c->trace, why, sizeof(why));
    if (rc == -1 && (chorus__log_init() != CHORUS_LOG_NONE || !c->cfg.debug))
        chorus__log(CHORUS_LOG_WARN, CHORUS_LOG_COLL,
                    "CHORUS_TIMELINE: rank %d %s; this run has no timeline of rank %d", me, why,
                    me);
    if (!c->trace) return;
    char row[160];
    snprintf(row, sizeof(row), "collectives (communicator %llx, %d ranks)",
             (unsigned long long)c->id, c->size);
    c->trace_row = chorus__trace_row(c->trace, row);
    c->trace_state = 1;
}

double chorus__coll_trace_begin(chorus_comm *c)
{
    if (c->trace_state == 0) trace_join(c);
    if (c->trace_state < 0 || depth > 0) return 0;
    depth++;
    return chorus__now();
}

void chorus__coll_trace_end(chorus_comm *c, double t0, const char *what, const char *algo,
                            size_t bytes, chorus_dtype t, chorus_result r)
{
    if (t0 == 0) return;
    depth--;
    if (c->size == 1) algo = "local"; /* a copy, whatever the rules would pick */
    double t1 = chorus__now();
    long long a = chorus__trace_us(c->trace, t0), b = chorus__trace_us(c->trace, t1);
    chorus__trace_event(c->trace, c->trace_row,
                        "\"name\":\"%s\",\"cat\":\"collective\",\"ph\":\"X\",\"ts\":%lld,"
                        "\"dur\":%lld,\"args\":{\"bytes\":%zu,\"algorithm\":\"%s\","
                        "\"dtype\":\"%s\",\"seq\":%llu%s%s%s}",
                        what, a, b > a ? b - a : 0, bytes, algo, chorus__dtype_name((int)t),
                        (unsigned long long)c->seq, r == CHORUS_OK ? "" : ",\"result\":\"",
                        r == CHORUS_OK ? "" : chorus_strerror(r), r == CHORUS_OK ? "" : "\"");
}
