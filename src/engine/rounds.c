/*
 * rounds.c - one allreduce's part in a round of the cycle. A plain allreduce is one reduce
 * round of its own dtype (the input, prescaled, goes in; the result comes out). A compressed
 * one runs the rounds of its compressor's plan (include/chorus/engine.h), one per pass of
 * execute.c: prepare writes this rank's part from the input and the compressor's state, the
 * exchange runs (fused with others for a reduce, alone for a gather), finish consumes the
 * result. After the last round the engine averages and postscales the output and ends the
 * handle. A rank that joined, or a tensor whose compressor failed in an earlier round, gives
 * the identity of the round's op, so every rank makes the same calls.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"
#include "reduce/reduce.h"

eng_round chorus__round_of(const chorus_engine *e, const eng_exec *x)
{
    const eng_meta *m = &x->m;
    if (m->nrounds) return m->rounds[x->round];
    /* An average over every rank is left to the core, which divides in the pass that writes
     * the result; with joined ranks (their part is zeros) the engine sums and divides by every
     * rank, as Horovod. */
    chorus_op op = m->op == CHORUS_AVG && chorus__eng_active(e) == e->size
                       ? CHORUS_AVG
                       : chorus__eng_red_op(m->op);
    return (eng_round){ENG_ROUND_REDUCE, (uint8_t)op, m->dtype, m->count};
}

int chorus__round_in_place(const eng_exec *x)
{
    return x->req && !x->m.nrounds && x->m.prescale == 1.0;
}

/* The caller's input, prescaled when asked. A compressed tensor keeps its prescaled copy
 * until the request ends (later rounds read it again). NULL when out of memory. */
static const void *round_input(eng_req *r)
{
    if (r->m.prescale == 1.0) return r->send;
    if (r->input) return r->input;
    size_t b = r->m.count * chorus_dtype_size((chorus_dtype)r->m.dtype);
    void *tmp = malloc(b ? b : 1);
    if (!tmp) return NULL;
    chorus__reduce_scale(tmp, r->send, r->m.count, (chorus_dtype)r->m.dtype, r->m.prescale);
    r->input = tmp;
    return tmp;
}

static void call_of(const chorus_engine *e, const eng_exec *x, chorus_compress_call *c,
                    chorus_round *cr)
{
    const eng_round *w = &x->m.rounds[x->round];
    *cr = (chorus_round){(chorus_round_kind)w->kind, (chorus_op)w->op, (chorus_dtype)w->wdtype,
                         (size_t)w->wcount};
    *c = (chorus_compress_call){x->req->name,
                                (size_t)x->m.count,
                                (chorus_dtype)x->m.dtype,
                                (chorus_op)x->m.op,
                                x->round,
                                cr,
                                0,
                                NULL,
                                chorus__eng_active(e)};
}

static void comp_failed(eng_req *r, chorus_result res, const char *what, int round)
{
    if (r->cres != CHORUS_OK) return;
    r->cres = res;
    snprintf(r->cerr, sizeof(r->cerr), "compressor %s failed to %s round %d of '%s' (%s)",
             r->m.comp, what, round, r->name, chorus_strerror(res));
}

void chorus__round_prepare(chorus_engine *e, eng_exec *x, void *wire)
{
    eng_round w = chorus__round_of(e, x);
    eng_req *r = x->req;
    int fill = !r || (r->comp && r->cres != CHORUS_OK);
    if (!fill && r->comp) {
        chorus_compress_call c;
        chorus_round cr;
        call_of(e, x, &c, &cr);
        const void *src = round_input(r);
        chorus_result res =
            src ? r->comp->prepare(r->comp->state, &c, src, wire) : CHORUS_ERR_NOMEM;
        if (res != CHORUS_OK) {
            comp_failed(r, res, "prepare", x->round);
            fill = 1;
        }
    } else if (!fill) {
        if (r->m.prescale != 1.0)
            chorus__reduce_scale(wire, r->send, r->m.count, (chorus_dtype)r->m.dtype,
                                 r->m.prescale);
        else if (wire != r->send)
            memcpy(wire, r->send, r->m.count * chorus_dtype_size((chorus_dtype)r->m.dtype));
    }
    if (!fill) return;
    if (w.kind == ENG_ROUND_GATHER)
        memset(wire, 0, w.wcount * chorus_dtype_size((chorus_dtype)w.wdtype));
    else
        chorus__dtype_fill_identity(wire, w.wcount, (chorus_dtype)w.wdtype,
                                    chorus__eng_red_op(w.op));
}

int chorus__round_finish(chorus_engine *e, eng_exec *x, const void *wire, int nparts,
                         const unsigned char *valid)
{
    eng_req *r = x->req;
    if (!r) return 0;
    const eng_meta *m = &x->m;
    if (r->comp && r->cres == CHORUS_OK) {
        chorus_compress_call c;
        chorus_round cr;
        call_of(e, x, &c, &cr);
        c.nparts = nparts;
        c.part_valid = valid;
        chorus_result res = r->comp->finish(r->comp->state, &c, wire, r->recv);
        if (res != CHORUS_OK) comp_failed(r, res, "finish", x->round);
    } else if (!r->comp && wire != r->recv && m->count) {
        memcpy(r->recv, wire, m->count * chorus_dtype_size((chorus_dtype)m->dtype));
    }
    return !m->nrounds || x->round + 1 == m->nrounds;
}

void chorus__round_end(chorus_engine *e, eng_exec *x)
{
    eng_req *r = x->req;
    if (!r) return;
    chorus_result res = r->comp ? r->cres : CHORUS_OK;
    if (res == CHORUS_OK) chorus__eng_post(e, &x->m, r->recv, x->m.count);
    chorus__eng_complete(e, r, res, r->cerr);
}

chorus_result chorus__round_gather(chorus_engine *e, eng_exec *x)
{
    int n = e->size;
    eng_round w = chorus__round_of(e, x);
    chorus_dtype wt = (chorus_dtype)w.wdtype;
    size_t wb = w.wcount * chorus_dtype_size(wt);
    double t0 = chorus__now();
    char *all = chorus__eng_grow(&e->scratch2, &e->scratch2_cap, (size_t)n * wb);
    unsigned char *valid = malloc((size_t)n);
    if (!all || !valid) {
        free(valid);
        return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory for a gather of %zu bytes",
                               (size_t)n * wb);
    }
    char *mine = all + (size_t)e->rank * wb;
    chorus__round_prepare(e, x, mine);
    double t1 = chorus__now();
    chorus_result res = chorus_allgather(e->comm, mine, all, w.wcount, wt);
    double t2 = chorus__now();
    if (res != CHORUS_OK) {
        free(valid);
        return res;
    }
    for (int p = 0; p < n; p++) valid[p] = !e->joined[p];
    eng_req *r = x->req;
    if (r) {
        chorus__eng_tl_pre(e, x, t0);
        chorus__tl_span(&e->tl, x->name, "COMPRESS", t0, t1, NULL);
        chorus__tl_span(&e->tl, x->name, "ALLGATHER", t1, t2, NULL);
    }
    int last = chorus__round_finish(e, x, all, n, valid);
    if (r) chorus__tl_span(&e->tl, x->name, "DECOMPRESS", t2, chorus__now(), NULL);
    if (last) chorus__round_end(e, x);
    free(valid);
    return CHORUS_OK;
}
