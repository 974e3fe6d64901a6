/*
 * direct.c - chorus_compressed_allreduce: a compressor's plan run on the calling thread, round
 * by round, with the core's blocking collectives (no engine, no fusion). For callers that
 * reduce at a known point of their step, as the C trainer's fused and per-layer modes do.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/compress/compress.h"

static chorus_result comp_err(chorus_compressor *c, const char *tensor, const char *what, int round,
                              chorus_result r)
{
    return chorus__fail(chorus__init_errbuf(), r,
                        "compressor %s failed to %s round %d of '%s' (%s)", c->name, what, round,
                        tensor, chorus_strerror(r));
}

/* One round: prepare this rank's part, exchange it, finish. */
static chorus_result run_round(chorus_comm *comm, chorus_compressor *c, chorus_compress_call *cc,
                               const void *src, void *dst, char *buf)
{
    const chorus_round *x = cc->r;
    size_t wb = x->wire_count * chorus_dtype_size(x->wire_dtype);
    int n = chorus_size(comm);
    char *mine = x->kind == CHORUS_ROUND_GATHER ? buf + (size_t)chorus_rank(comm) * wb : buf;
    chorus_result r = c->prepare(c->state, cc, src, mine);
    if (r != CHORUS_OK) return comp_err(c, cc->tensor, "prepare", cc->round, r);
    if (x->kind == CHORUS_ROUND_GATHER) {
        r = chorus_allgather(comm, mine, buf, x->wire_count, x->wire_dtype);
        cc->nparts = n;
    } else {
        r = chorus_allreduce(comm, buf, buf, x->wire_count, x->wire_dtype, x->op);
    }
    if (r != CHORUS_OK) return r;
    r = c->finish(c->state, cc, buf, dst);
    return r == CHORUS_OK ? r : comp_err(c, cc->tensor, "finish", cc->round, r);
}

chorus_result chorus_compressed_allreduce(chorus_comm *comm, chorus_compressor *c,
                                          const char *tensor, const void *send, void *recv,
                                          size_t count, chorus_dtype t, chorus_op op)
{
    chorus_compress_plan plan = {0};
    if (c && (!tensor || !c->plan))
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_compressed_allreduce: NULL tensor name or plan function");
    if (c) {
        chorus_result r = c->plan(c->state, tensor, count, t, op, &plan);
        if (r != CHORUS_OK) return r;
    }
    if (plan.nrounds < 1 || plan.nrounds > CHORUS_COMPRESS_MAX_ROUNDS)
        return chorus_allreduce(comm, send, recv, count, t, op);
    int n = chorus_size(comm);
    size_t big = 0;
    for (int i = 0; i < plan.nrounds; i++) {
        const chorus_round *x = &plan.round[i];
        size_t b = x->wire_count * chorus_dtype_size(x->wire_dtype);
        if (x->kind == CHORUS_ROUND_GATHER) b *= (size_t)n;
        if (b > big) big = b;
    }
    char *buf = malloc(big ? big : 1);
    if (!buf) return CHORUS_ERR_NOMEM;
    chorus_result r = CHORUS_OK;
    for (int i = 0; i < plan.nrounds && r == CHORUS_OK; i++) {
        chorus_compress_call cc = {tensor, count, t, op, i, &plan.round[i], 0, NULL, n};
        r = run_round(comm, c, &cc, send, recv, buf);
    }
    free(buf);
    if (r == CHORUS_OK && op == CHORUS_AVG) {
        float *o = recv; /* the compressors above take float32 only */
        if (t == CHORUS_FLOAT32)
            for (size_t i = 0; i < count; i++) o[i] /= (float)n;
    }
    return r;
}
