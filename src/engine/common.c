/*
 * common.c - what the steps of a cycle share: growing a reusable buffer, the engine thread's
 * record of the failure that stops it, formatting a set of ranks, the number of ranks that
 * contribute (did not join), the finishing touches after an op's last exchange (average over
 * every rank, postscale) and the timeline spans every op starts with.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine_int.h"
#include "reduce/reduce.h"

void *chorus__eng_grow(void **buf, size_t *cap, size_t n)
{
    if (n <= *cap && *buf) return *buf;
    size_t nc = *cap ? *cap : 4096;
    while (nc < n) nc *= 2;
    void *p = chorus__malloc_aligned(nc);
    if (!p) return NULL;
    free(*buf);
    *buf = p;
    *cap = nc;
    return p;
}

chorus_result chorus__eng_err(chorus_engine *e, chorus_result r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->thr_err, sizeof(e->thr_err), fmt, ap);
    va_end(ap);
    CHORUS_INFO(CHORUS_LOG_ENGINE, "%s", e->thr_err);
    return r;
}

void chorus__fmt_ranks(const uint8_t *set, int n, int want, char *out, size_t len)
{
    int count = 0;
    for (int r = 0; r < n; r++) count += (set[r] != 0) == want;
    size_t o = (size_t)snprintf(out, len, "%s", count == 1 ? "rank " : "ranks ");
    for (int r = 0; r < n && o + 24 < len; r++) {
        if ((set[r] != 0) != want) continue;
        int s = r;
        while (r + 1 < n && (set[r + 1] != 0) == want) r++;
        o += (size_t)snprintf(out + o, len - o, out[o - 1] != ' ' ? ",%d" : "%d", s);
        if (r > s) o += (size_t)snprintf(out + o, len - o, "-%d", r);
    }
    if (o + 24 >= len) snprintf(out + o, len - o, ",...");
}

int chorus__eng_active(const chorus_engine *e)
{
    int a = e->size;
    for (int r = 0; r < e->size; r++) a -= e->joined[r];
    return a > 0 ? a : 1;
}

void chorus__eng_tl_pre(chorus_engine *e, const eng_exec *x, double start)
{
    if (!e->tl.tr || !x->req) return;
    chorus__tl_span(&e->tl, x->name, "NEGOTIATE", x->req->t_enqueue, x->req->t_agreed, NULL);
    chorus__tl_span(&e->tl, x->name, "QUEUE", x->req->t_agreed, start, NULL);
}

void chorus__eng_post(chorus_engine *e, const eng_meta *m, void *buf, size_t count)
{
    /* a plain allreduce over every rank was averaged by the core (chorus__round_of) */
    int core_avg = m->kind == EK_ALLREDUCE && !m->nrounds && chorus__eng_active(e) == e->size;
    if (m->op == CHORUS_AVG && !core_avg) /* joined ranks gave zeros: divide by every rank */
        chorus__reduce_finish(buf, count, (chorus_dtype)m->dtype, CHORUS_AVG, e->size);
    if (m->postscale != 1.0)
        chorus__reduce_scale(buf, buf, count, (chorus_dtype)m->dtype, m->postscale);
}
