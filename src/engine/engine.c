/*
 * engine.c - the training runtime's public face: starting and stopping an engine, enqueueing
 * named ops from any thread, handles, the blocking calls (join, barrier, divergence check),
 * and the engine thread's loop, which decides when the next negotiation cycle runs:
 *
 *   - work pending here while some rank had none in the last cycle: start the next cycle at
 *     once and wait inside it (the wait sleeps in the transport), so that the moment the other
 *     rank has work too, the cycle completes;
 *   - work pending on every rank: one cycle every CHORUS_CYCLE_TIME_MS, at once when every
 *     cached name is ready here (a whole step was enqueued) or a group was handed over
 *     (chorus_engine_unhold: its caller fused it), slower (20 ms) after a second without
 *     progress;
 *   - nothing pending here: sleep on the condition variable, woken by the first enqueue, with
 *     a heartbeat cycle every CHORUS_ENGINE_IDLE_MS so that peers waiting on this rank learn
 *     about shutdowns and stalls.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll/comm.h"
#include "engine/compress/compress.h"
#include "engine/engine_int.h"
#include "reduce/reduce.h"

#define STALLED_PACE_MS 20.0

/* ---- options ------------------------------------------------------------------------------ */

size_t chorus_engine_opts_size(void)
{
    return sizeof(chorus_engine_opts);
}

size_t chorus_engine_tensor_opts_size(void)
{
    return sizeof(chorus_engine_tensor_opts);
}

void chorus_engine_tensor_opts_init(chorus_engine_tensor_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
    o->version = CHORUS_ENGINE_OPTS_VERSION;
}

void chorus_engine_opts_init(chorus_engine_opts *o)
{
    const chorus_config *cfg = chorus__config();
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
    o->version = CHORUS_ENGINE_OPTS_VERSION;
    o->cycle_time_ms = cfg->cycle_time_ms;
    o->fusion_threshold = cfg->fusion_threshold;
    o->cache_capacity = (int)cfg->cache_capacity;
    o->stall_warn_s = cfg->stall_warn_s;
    o->stall_shutdown_s = cfg->stall_shutdown_s;
    o->idle_ms = cfg->engine_idle_ms;
    o->desync_s = cfg->desync_s;
    o->timeline = cfg->timeline;
    const char *c = cfg->compression;
    o->compressor = chorus__compressor_by_name(c);
    if (!o->compressor && c && *c && strcmp(c, "none"))
        CHORUS_WARN(CHORUS_LOG_ENGINE,
                    "CHORUS_COMPRESSION=%s is not known (none, fp16, bf16); "
                    "not compressing",
                    c);
}

/* ---- enqueueing --------------------------------------------------------------------------- */

static chorus_result set_err(chorus_engine *e, chorus_result r, const char *fmt, ...)
    CHORUS__PRINTF(3, 4);

static chorus_result set_err(chorus_engine *e, chorus_result r, const char *fmt, ...)
{
    char tmp[sizeof(e->last_err)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (e) {
        pthread_mutex_lock(&e->mu);
        memcpy(e->last_err, tmp, sizeof(tmp));
        pthread_mutex_unlock(&e->mu);
    }
    CHORUS_INFO(CHORUS_LOG_ENGINE, "%s", tmp);
    return r;
}

static chorus_result check_name(chorus_engine *e, const char *fn, const char *name, int internal)
{
    if (!name || !*name)
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s: the tensor name is empty", fn);
    if (strlen(name) > ENG_NAME_MAX)
        return set_err(e, CHORUS_ERR_INVALID_ARG,
                       "%s: tensor name '%.40s...' is longer than %d bytes", fn, name,
                       ENG_NAME_MAX);
    if (!internal && !strncmp(name, "chorus.", 7))
        return set_err(e, CHORUS_ERR_INVALID_ARG,
                       "%s: tensor name '%s' starts with 'chorus.', which is reserved", fn, name);
    return CHORUS_OK;
}

static chorus_result check_count(chorus_engine *e, const char *fn, const char *name, size_t count,
                                 size_t mult, chorus_dtype t)
{
    if ((unsigned)t >= CHORUS_DTYPE_COUNT)
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): unknown dtype %d", fn, name, (int)t);
    size_t n, b;
    if (chorus__mul_overflow(count, mult, &n) ||
        chorus__mul_overflow(n, chorus_dtype_size(t), &b) || b > (size_t)1 << 62)
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): %zu x %zu elements overflow", fn, name,
                       count, mult);
    return CHORUS_OK;
}

static int is_float(chorus_dtype t)
{
    return t == CHORUS_FLOAT16 || t == CHORUS_BFLOAT16 || t == CHORUS_FLOAT32 ||
           t == CHORUS_FLOAT64;
}

static chorus_result check_scale(chorus_engine *e, const char *fn, const char *name, chorus_dtype t,
                                 const chorus_engine_tensor_opts *o, eng_meta *m)
{
    m->prescale = o && o->prescale != 0 ? o->prescale : 1.0;
    m->postscale = o && o->postscale != 0 ? o->postscale : 1.0;
    if ((m->prescale != 1.0 || m->postscale != 1.0) && !is_float(t))
        return set_err(e, CHORUS_ERR_INVALID_ARG,
                       "%s('%s'): prescale/postscale need a float dtype, not %s", fn, name,
                       chorus__dtype_name(t));
    return CHORUS_OK;
}

/* Queues r (its name, meta and buffers set) and makes its handle. */
static chorus_result enqueue(chorus_engine *e, eng_req *r, const chorus_engine_tensor_opts *o,
                             chorus_engine_handle **hout)
{
    if (hout) *hout = NULL;
    r->h = chorus__handle_new(r->name, o, hout != NULL);
    if (!r->h) {
        chorus__req_free(r);
        return set_err(e, CHORUS_ERR_NOMEM, "out of memory");
    }
    r->t_enqueue = chorus__now();
    if (o && r->m.kind != EK_JOIN) r->m.shape = o->shape_tag;
    r->slot = -1;
    r->pidx = (size_t)-1;
    pthread_mutex_lock(&e->mu);
    chorus_result res = CHORUS_OK;
    int taken = 0;
    if (e->stopped || e->shutdown_req) {
        res = e->stopped ? e->stop_res : CHORUS_ERR_ABORTED;
        snprintf(e->last_err, sizeof(e->last_err), "cannot enqueue '%s': %s", r->name,
                 e->stopped ? e->stop_msg : "the engine is shutting down");
    } else if (e->join_pending) {
        res = CHORUS_ERR_INVALID_ARG;
        snprintf(e->last_err, sizeof(e->last_err),
                 "cannot enqueue '%s': this rank has called chorus_engine_join and it has not "
                 "returned yet",
                 r->name);
    } else if (r->m.kind != EK_JOIN && (taken = chorus__names_take(e->names, r->h)) > 0) {
        res = CHORUS_ERR_INVALID_ARG;
        snprintf(e->last_err, sizeof(e->last_err),
                 "cannot enqueue '%s': an op with this name is still pending on this rank (a "
                 "name holds one op until its handle is waited for, polled to its end or "
                 "released)",
                 r->name);
    } else if (taken < 0) {
        res = CHORUS_ERR_NOMEM;
        snprintf(e->last_err, sizeof(e->last_err), "out of memory");
    }
    if (res != CHORUS_OK) {
        pthread_mutex_unlock(&e->mu);
        CHORUS_INFO(CHORUS_LOG_ENGINE, "%s", e->last_err);
        r->h->refs = 1;
        chorus__handle_unref(r->h);
        chorus__req_free(r);
        return res;
    }
    if (r->m.kind == EK_JOIN) e->join_pending = 1;
    if (e->q_tail)
        e->q_tail->next = r;
    else
        e->q_head = r;
    e->q_tail = r;
    e->q_len++;
    if (e->sleeping && !e->hold && (e->q_len >= e->wake_at || r->m.kind == EK_JOIN))
        pthread_cond_signal(&e->cv);
    if (hout) *hout = r->h;
    pthread_mutex_unlock(&e->mu);
    return CHORUS_OK;
}

chorus_result chorus_engine_hold(chorus_engine *e)
{
    if (!e)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_engine_hold: engine is NULL");
    pthread_mutex_lock(&e->mu);
    e->hold++;
    pthread_mutex_unlock(&e->mu);
    return CHORUS_OK;
}

chorus_result chorus_engine_unhold(chorus_engine *e)
{
    if (!e)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_engine_unhold: engine is NULL");
    pthread_mutex_lock(&e->mu);
    int held = e->hold > 0;
    if (held && --e->hold == 0 && e->q_head) {
        e->group_ready = 1; /* fused by its caller: no reason to wait for more */
        if (e->sleeping) pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (!held)
        return set_err(e, CHORUS_ERR_INVALID_ARG,
                       "chorus_engine_unhold: the engine is not held (more unholds than holds)");
    return CHORUS_OK;
}

static eng_req *req_new(chorus_engine *e, const char *name, int kind, chorus_dtype t)
{
    eng_req *r = calloc(1, sizeof(*r));
    if (r) r->name = strdup(name);
    if (!r || !r->name) {
        free(r);
        set_err(e, CHORUS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->m.kind = (uint8_t)kind;
    r->m.dtype = (uint8_t)t;
    r->m.prescale = r->m.postscale = 1.0;
    return r;
}

/* A tensor opts struct of another layout (a binding built against another version) is
 * refused; all zeros in size and version is a zero-initialised C struct of this layout. */
static chorus_result check_topts(chorus_engine *e, const char *fn,
                                 const chorus_engine_tensor_opts *o)
{
    if (!o || (o->size == 0 && o->version == 0) ||
        (o->size == sizeof(*o) && o->version == CHORUS_ENGINE_OPTS_VERSION))
        return CHORUS_OK;
    return set_err(e, CHORUS_ERR_INVALID_ARG,
                   "%s: chorus_engine_tensor_opts of size %zu and version %u, but this library "
                   "has size %zu and version %u (call chorus_engine_tensor_opts_init, or "
                   "rebuild against this chorus/engine.h)",
                   fn, o->size, o->version, sizeof(*o), (unsigned)CHORUS_ENGINE_OPTS_VERSION);
}

#define ENGINE_CHECK(fn)                                                                           \
    do {                                                                                           \
        if (h) *h = NULL;                                                                          \
        if (!e)                                                                                    \
            return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,                     \
                                "%s: engine is NULL", fn);                                         \
        CHORUS_CHECK(check_topts(e, fn, opts));                                                    \
    } while (0)

/* The compressor's plan for a tensor, checked: 1 to CHORUS_COMPRESS_MAX_ROUNDS rounds (or
 * none), known dtypes and ops, gathers only for sums and averages. */
static chorus_result plan_of(chorus_engine *e, const char *fn, const char *name,
                             const chorus_compressor *c, size_t count, chorus_dtype t, chorus_op op,
                             chorus_compress_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    if (!c->name || !*c->name || strlen(c->name) > ENG_COMP_MAX || !c->plan || !c->prepare ||
        !c->finish)
        return set_err(e, CHORUS_ERR_INVALID_ARG,
                       "%s('%s'): the compressor needs a name of 1 to %d characters and plan, "
                       "prepare and finish functions",
                       fn, name, ENG_COMP_MAX);
    chorus_result r = c->plan(c->state, name, count, t, op, plan);
    if (r != CHORUS_OK)
        return set_err(e, CHORUS_ERR_INVALID_ARG,
                       "%s('%s'): compressor %s has no plan for %zu %s (%s)", fn, name, c->name,
                       count, chorus__dtype_name(t), chorus_strerror(r));
    if (plan->nrounds < 0 || plan->nrounds > CHORUS_COMPRESS_MAX_ROUNDS)
        return set_err(e, CHORUS_ERR_INVALID_ARG,
                       "%s('%s'): compressor %s planned %d rounds (at most %d)", fn, name, c->name,
                       plan->nrounds, CHORUS_COMPRESS_MAX_ROUNDS);
    for (int i = 0; i < plan->nrounds; i++) {
        const chorus_round *x = &plan->round[i];
        if ((unsigned)x->wire_dtype >= CHORUS_DTYPE_COUNT ||
            (x->kind != CHORUS_ROUND_REDUCE && x->kind != CHORUS_ROUND_GATHER))
            return set_err(e, CHORUS_ERR_INVALID_ARG,
                           "%s('%s'): compressor %s gave round %d kind %d and dtype %d", fn, name,
                           c->name, i, (int)x->kind, (int)x->wire_dtype);
        if (x->kind == CHORUS_ROUND_REDUCE &&
            ((unsigned)x->op >= CHORUS_OP_COUNT || x->op == CHORUS_AVG))
            return set_err(e, CHORUS_ERR_INVALID_ARG,
                           "%s('%s'): compressor %s: round %d reduces with op %d (sum, min, max "
                           "or prod; the engine averages the output)",
                           fn, name, c->name, i, (int)x->op);
        if (x->kind == CHORUS_ROUND_GATHER && op != CHORUS_SUM && op != CHORUS_AVG)
            return set_err(e, CHORUS_ERR_INVALID_ARG,
                           "%s('%s'): compressor %s gathers, so only sum and avg are possible, "
                           "not %s",
                           fn, name, c->name, chorus__op_name(op));
        size_t b;
        if (chorus__mul_overflow(x->wire_count, chorus_dtype_size(x->wire_dtype), &b) ||
            b > (size_t)1 << 40)
            return set_err(e, CHORUS_ERR_INVALID_ARG,
                           "%s('%s'): compressor %s: round %d of %zu elements is too large", fn,
                           name, c->name, i, x->wire_count);
    }
    return CHORUS_OK;
}

chorus_result chorus_engine_allreduce(chorus_engine *e, const char *name, const void *send,
                                      void *recv, size_t count, chorus_dtype t, chorus_op op,
                                      const chorus_engine_tensor_opts *opts,
                                      chorus_engine_handle **h)
{
    static const char fn[] = "chorus_engine_allreduce";
    ENGINE_CHECK(fn);
    CHORUS_CHECK(check_name(e, fn, name, 0));
    CHORUS_CHECK(check_count(e, fn, name, count, 1, t));
    if ((unsigned)op >= CHORUS_OP_COUNT)
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): unknown op %d", fn, name, (int)op);
    if (chorus__op_is_bitwise(op) && chorus__dtype_is_float(t))
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): op %s needs an integer dtype, not %s",
                       fn, name, chorus__op_name(op), chorus__dtype_name((int)t));
    if (count && (!send || !recv))
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): NULL buffer with count %zu", fn, name,
                       count);
    eng_meta m = {0};
    CHORUS_CHECK(check_scale(e, fn, name, t, opts, &m));
    const chorus_compressor *c = opts && opts->compressor ? opts->compressor : NULL;
    if (!c && !(opts && opts->no_compression)) c = e->o.compressor;
    chorus_compress_plan plan;
    if (c) CHORUS_CHECK(plan_of(e, fn, name, c, count, t, op, &plan));
    if (c && plan.nrounds == 0) c = NULL; /* the compressor leaves this tensor alone */
    eng_req *r = req_new(e, name, EK_ALLREDUCE, t);
    if (!r) return CHORUS_ERR_NOMEM;
    r->m.op = (uint8_t)op;
    r->m.count = count;
    r->m.prescale = m.prescale;
    r->m.postscale = m.postscale;
    r->comp = c;
    if (c) {
        snprintf(r->m.comp, sizeof(r->m.comp), "%s", c->name);
        r->m.nrounds = (uint8_t)plan.nrounds;
        for (int i = 0; i < plan.nrounds; i++)
            r->m.rounds[i] =
                (eng_round){(uint8_t)plan.round[i].kind, (uint8_t)plan.round[i].op,
                            (uint8_t)plan.round[i].wire_dtype, plan.round[i].wire_count};
    }
    r->send = send;
    r->recv = recv;
    return enqueue(e, r, opts, h);
}

chorus_result chorus_engine_broadcast(chorus_engine *e, const char *name, void *buf, size_t count,
                                      chorus_dtype t, int root,
                                      const chorus_engine_tensor_opts *opts,
                                      chorus_engine_handle **h)
{
    static const char fn[] = "chorus_engine_broadcast";
    ENGINE_CHECK(fn);
    CHORUS_CHECK(check_name(e, fn, name, 0));
    CHORUS_CHECK(check_count(e, fn, name, count, 1, t));
    if (root < 0 || root >= e->size)
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): root %d is out of range (size %d)", fn,
                       name, root, e->size);
    if (count && !buf)
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): NULL buffer with count %zu", fn, name,
                       count);
    eng_req *r = req_new(e, name, EK_BROADCAST, t);
    if (!r) return CHORUS_ERR_NOMEM;
    r->m.root = root;
    r->m.count = count;
    r->send = buf;
    r->recv = buf;
    return enqueue(e, r, opts, h);
}

chorus_result chorus_engine_allgather(chorus_engine *e, const char *name, const void *send,
                                      size_t rows, size_t row_count, chorus_dtype t,
                                      const chorus_engine_tensor_opts *opts,
                                      chorus_engine_handle **h)
{
    static const char fn[] = "chorus_engine_allgather";
    ENGINE_CHECK(fn);
    CHORUS_CHECK(check_name(e, fn, name, 0));
    CHORUS_CHECK(check_count(e, fn, name, rows, row_count, t));
    CHORUS_CHECK(check_count(e, fn, name, rows * row_count, (size_t)e->size, t));
    if (rows && row_count && !send)
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): NULL buffer with %zu rows", fn, name,
                       rows);
    eng_req *r = req_new(e, name, EK_ALLGATHER, t);
    if (!r) return CHORUS_ERR_NOMEM;
    r->m.count = row_count;
    r->rows = rows;
    r->send = send;
    return enqueue(e, r, opts, h);
}

size_t chorus_engine_reduce_scatter_count(const chorus_engine *e, size_t count)
{
    return e ? chorus__chunk_cnt(count, e->size, e->rank) : 0;
}

chorus_result chorus_engine_reduce_scatter(chorus_engine *e, const char *name, const void *send,
                                           void *recv, size_t count, chorus_dtype t, chorus_op op,
                                           const chorus_engine_tensor_opts *opts,
                                           chorus_engine_handle **h)
{
    static const char fn[] = "chorus_engine_reduce_scatter";
    ENGINE_CHECK(fn);
    CHORUS_CHECK(check_name(e, fn, name, 0));
    CHORUS_CHECK(check_count(e, fn, name, count, 1, t));
    if ((unsigned)op >= CHORUS_OP_COUNT)
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): unknown op %d", fn, name, (int)op);
    if (chorus__op_is_bitwise(op) && chorus__dtype_is_float(t))
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): op %s needs an integer dtype, not %s",
                       fn, name, chorus__op_name(op), chorus__dtype_name((int)t));
    if (count && !send)
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): NULL send buffer with count %zu", fn,
                       name, count);
    if (chorus_engine_reduce_scatter_count(e, count) && !recv)
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): NULL recv buffer", fn, name);
    eng_meta m = {0};
    CHORUS_CHECK(check_scale(e, fn, name, t, opts, &m));
    eng_req *r = req_new(e, name, EK_REDUCESCATTER, t);
    if (!r) return CHORUS_ERR_NOMEM;
    r->m.op = (uint8_t)op;
    r->m.count = count;
    r->m.prescale = m.prescale;
    r->m.postscale = m.postscale;
    r->send = send;
    r->recv = recv;
    return enqueue(e, r, opts, h);
}

chorus_result chorus_engine_alltoall(chorus_engine *e, const char *name, const void *send,
                                     void *recv, size_t count, chorus_dtype t,
                                     const chorus_engine_tensor_opts *opts,
                                     chorus_engine_handle **h)
{
    static const char fn[] = "chorus_engine_alltoall";
    ENGINE_CHECK(fn);
    CHORUS_CHECK(check_name(e, fn, name, 0));
    CHORUS_CHECK(check_count(e, fn, name, count, 1, t));
    if (count % (size_t)e->size)
        return set_err(e, CHORUS_ERR_INVALID_ARG,
                       "%s('%s'): count %zu is not a multiple of the number of ranks (%d)", fn,
                       name, count, e->size);
    if (count && (!send || !recv))
        return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): NULL buffer with count %zu", fn, name,
                       count);
    eng_req *r = req_new(e, name, EK_ALLTOALL, t);
    if (!r) return CHORUS_ERR_NOMEM;
    r->m.count = count;
    r->send = send;
    r->recv = recv;
    return enqueue(e, r, opts, h);
}

/* ---- blocking calls ----------------------------------------------------------------------- */

static chorus_result wait_sync(chorus_engine *e, chorus_engine_handle *hd, int *last_rank)
{
    chorus_result r = chorus_engine_wait(hd);
    if (r != CHORUS_OK) set_err(e, r, "%s", chorus_engine_handle_error(hd));
    if (last_rank) *last_rank = hd->last_rank;
    chorus_engine_release(hd);
    return r;
}

chorus_result chorus_engine_join(chorus_engine *e, int *last_rank)
{
    if (last_rank) *last_rank = -1;
    if (!e)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_engine_join: engine is NULL");
    eng_req *r = req_new(e, "chorus.join", EK_JOIN, CHORUS_UINT8);
    if (!r) return CHORUS_ERR_NOMEM;
    chorus_engine_handle *hd;
    CHORUS_CHECK(enqueue(e, r, NULL, &hd));
    return wait_sync(e, hd, last_rank);
}

chorus_result chorus_engine_barrier(chorus_engine *e)
{
    if (!e)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_engine_barrier: engine is NULL");
    eng_req *r = req_new(e, "chorus.barrier", EK_BARRIER, CHORUS_UINT8);
    if (!r) return CHORUS_ERR_NOMEM;
    chorus_engine_handle *hd;
    CHORUS_CHECK(enqueue(e, r, NULL, &hd));
    return wait_sync(e, hd, NULL);
}

chorus_result chorus_engine_check_divergence(chorus_engine *e, const char *name, const void *buf,
                                             size_t bytes, long long step)
{
    static const char fn[] = "chorus_engine_check_divergence";
    if (!e)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG, "%s: engine is NULL",
                            fn);
    CHORUS_CHECK(check_name(e, fn, name, 0));
    if (bytes && !buf) return set_err(e, CHORUS_ERR_INVALID_ARG, "%s('%s'): NULL buffer", fn, name);
    char full[ENG_NAME_MAX + 1];
    snprintf(full, sizeof(full), "chorus.divergence.%s", name);
    eng_req *r = req_new(e, full, EK_DIVERGENCE, CHORUS_INT64);
    if (!r) return CHORUS_ERR_NOMEM;
    r->m.count = 2;
    r->hash = chorus__hash64(buf, bytes);
    r->step = step;
    chorus_engine_handle *hd;
    CHORUS_CHECK(enqueue(e, r, NULL, &hd));
    return wait_sync(e, hd, NULL);
}

chorus_result chorus_engine_accumulate(void *acc, const void *grad, size_t count, chorus_dtype t)
{
    if ((unsigned)t >= CHORUS_DTYPE_COUNT)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_engine_accumulate: unknown dtype %d", (int)t);
    if (count && (!acc || !grad))
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_engine_accumulate: NULL buffer");
    if (count) chorus__reduce(acc, acc, grad, count, t, CHORUS_SUM);
    return CHORUS_OK;
}

/* ---- the engine thread -------------------------------------------------------------------- */

static void absorb(chorus_engine *e, eng_req *batch)
{
    while (batch) {
        eng_req *r = batch;
        batch = r->next;
        r->next = NULL;
        if (r->m.kind == EK_JOIN)
            e->my_join = r;
        else
            chorus__eng_pend_add(e, r);
    }
}

/* Cached names in use: those executed in the last RECENT_CYCLES cycles. A name used once
 * (a broadcast of the initial parameters, an object gathered at start) stays cached but must
 * not keep "a whole step is ready" from ever being true. */
#define RECENT_CYCLES 64
static size_t recent_slots(const chorus_engine *e)
{
    size_t n = 0;
    for (int s = 0; s < e->nslots; s++)
        if (e->slots[s].name && e->slots[s].last_cycle + RECENT_CYCLES >= e->st.cycles) n++;
    return n;
}

static void *engine_main(void *arg)
{
    chorus_engine *e = arg;
    e->last_cycle = e->last_progress = chorus__now();
    e->all_active = 1;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        eng_req *batch = NULL;
        int group = 0;
        if (!e->hold) { /* held ops stay queued until the last unhold */
            batch = e->q_head;
            e->q_head = e->q_tail = NULL;
            e->q_len = 0;
            group = e->group_ready;
            e->group_ready = 0;
        }
        int shut = e->shutdown_req;
        pthread_mutex_unlock(&e->mu);
        absorb(e, batch);
        double now = chorus__now(), deadline;
        int active = e->npend > 0 || e->my_join;
        int go = shut;
        size_t live = 0;
        if (active) {
            if (!e->all_active || group) go = 1; /* wait inside the cycle for the idle ranks */
            live = e->live_slots > 0 ? recent_slots(e) : 0;
            if (live > 0 && e->n_cached_ready >= live) go = 1;
            double iv = now - e->last_progress > 1.0 && e->o.cycle_time_ms < STALLED_PACE_MS
                            ? STALLED_PACE_MS
                            : e->o.cycle_time_ms;
            deadline = e->last_cycle + iv * 1e-3;
        } else {
            deadline = e->last_cycle + e->o.idle_ms * 1e-3;
        }
        if (!go && now < deadline) {
            pthread_mutex_lock(&e->mu);
            if ((!e->q_head || e->hold) && !e->shutdown_req) {
                size_t need = SIZE_MAX;
                if (!active)
                    need = 1;
                else if (live > 0)
                    need = live - e->n_cached_ready;
                e->wake_at = need;
                e->sleeping = 1;
                double d = deadline;
                struct timespec ts = {.tv_sec = (time_t)d,
                                      .tv_nsec = (long)((d - (double)(time_t)d) * 1e9)};
                pthread_cond_timedwait(&e->cv, &e->mu, &ts);
                e->sleeping = 0;
            }
            pthread_mutex_unlock(&e->mu);
            continue;
        }
        e->last_cycle = now;
        if (chorus__eng_cycle(e, shut)) break;
    }
    /* Stopped: what is still queued or pending ends with the reason. */
    pthread_mutex_lock(&e->mu);
    eng_req *batch = e->q_head;
    e->q_head = e->q_tail = NULL;
    e->q_len = 0;
    if (e->have_cpu_clock) {
        struct timespec ts;
        if (clock_gettime(e->cpu_clock, &ts) == 0)
            e->st.thread_cpu_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
        e->have_cpu_clock = 0;
    }
    pthread_mutex_unlock(&e->mu);
    absorb(e, batch);
    chorus__eng_fail_all(e, e->stop_res, e->stop_msg);
    chorus__tl_close(&e->tl);
    return NULL;
}

/* ---- start and shutdown ------------------------------------------------------------------- */

static void engine_free(chorus_engine *e)
{
    for (int i = 0; i < e->nslots; i++) free(e->slots[i].name);
    free(e->slots);
    for (size_t i = 0; i < e->ncoord; i++) {
        free(e->coord[i]->name);
        free(e->coord[i]->metas);
        free(e->coord[i]->have);
        free(e->coord[i]);
    }
    free(e->coord);
    chorus__map_free(&e->coord_map);
    chorus__map_free(&e->cache_map);
    chorus__map_free(&e->pend_map);
    chorus__names_unref(e->names);
    free(e->pend);
    free(e->joined);
    free(e->prev_joined);
    free(e->fbuf);
    free(e->scratch);
    free(e->scratch2);
    free(e->vec);
    chorus__tl_close(&e->tl);
    if (e->comm) chorus_finalize(e->comm);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

chorus_result chorus_engine_start(chorus_comm *comm, const chorus_engine_opts *opts,
                                  chorus_engine **out)
{
    if (!comm)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_engine_start: comm is NULL");
    if (!out)
        return chorus__comm_fail(comm, CHORUS_ERR_INVALID_ARG, "chorus_engine_start: out is NULL");
    *out = NULL;
    if (opts && (opts->size != sizeof(*opts) || opts->version != CHORUS_ENGINE_OPTS_VERSION))
        return chorus__comm_fail(comm, CHORUS_ERR_INVALID_ARG,
                                 "chorus_engine_start: chorus_engine_opts of size %zu and version "
                                 "%u, but this library has size %zu and version %u (fill it with "
                                 "chorus_engine_opts_init, or rebuild against this "
                                 "chorus/engine.h)",
                                 opts->size, opts->version, sizeof(*opts),
                                 (unsigned)CHORUS_ENGINE_OPTS_VERSION);
    chorus_engine *e = calloc(1, sizeof(*e));
    if (!e) return chorus__comm_fail(comm, CHORUS_ERR_NOMEM, "out of memory");
    e->names = chorus__names_new();
    if (!e->names) {
        free(e);
        return chorus__comm_fail(comm, CHORUS_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (opts)
        e->o = *opts;
    else
        chorus_engine_opts_init(&e->o);
    if (!(e->o.cycle_time_ms >= 0)) e->o.cycle_time_ms = 0;
    if (!(e->o.idle_ms > 0)) e->o.idle_ms = 200;
    if (e->o.cache_capacity < 0) e->o.cache_capacity = 0;
    if (e->o.cache_capacity > (1 << 20)) e->o.cache_capacity = 1 << 20;
    e->first_div_step = -1;
    chorus_result r = chorus_comm_split(comm, 0, chorus_rank(comm), &e->comm);
    if (r != CHORUS_OK) {
        e->comm = NULL;
        engine_free(e);
        return r;
    }
    e->rank = e->comm->rank;
    e->size = e->comm->size;
    /* Local set-up, then one allreduce so that every rank fails together or starts. */
    char why[600] = "";
    e->joined = calloc((size_t)e->size, 1);
    e->prev_joined = calloc((size_t)e->size, 1);
    if (!e->joined || !e->prev_joined) snprintf(why, sizeof(why), "out of memory");
    char tl_why[500];
    if (!why[0] &&
        chorus__tl_open(&e->tl, e->o.timeline, e->comm->world[e->rank], tl_why, sizeof(tl_why)))
        snprintf(why, sizeof(why), "rank %d %s", e->rank, tl_why);
    const chorus_config *cfg = chorus__config();
    chorus_result why_r = CHORUS_ERR_SYSTEM;
    if (!why[0] && chorus__tune_check(cfg, why, sizeof(why)) != CHORUS_OK)
        why_r = CHORUS_ERR_INVALID_ARG;
    /* every rank fuses alike: the smallest threshold wins; autotuning (agree[2..6], negated
     * where the largest wins) is on where some rank asks for it, with the same settings */
    int64_t agree[7] = {why[0] ? 0 : 1,
                        (int64_t)(e->o.fusion_threshold > ((size_t)1 << 40)
                                      ? ((size_t)1 << 40)
                                      : e->o.fusion_threshold),
                        -(int64_t)(cfg->autotune != 0),
                        (int64_t)(e->o.cycle_time_ms * 1e3 > 1e9 ? 1e9 : e->o.cycle_time_ms * 1e3),
                        -(int64_t)cfg->autotune_steps,
                        -(int64_t)cfg->autotune_warmup,
                        -(int64_t)(e->comm->cfg.algo_allreduce != NULL)};
    r = chorus_allreduce(e->comm, agree, agree, 7, CHORUS_INT64, CHORUS_MIN);
    e->o.fusion_threshold = (size_t)agree[1];
    if (r == CHORUS_OK && agree[2]) e->o.cycle_time_ms = (double)agree[3] * 1e-3;
    if (r == CHORUS_OK && agree[0])
        chorus__tune_start(e, agree[2] != 0, (int)-agree[4], (int)-agree[5], agree[6] != 0);
    if (r == CHORUS_OK && !agree[0]) {
        r = why[0] ? why_r : CHORUS_ERR_ABORTED;
        if (!why[0]) snprintf(why, sizeof(why), "another rank failed to start its engine");
    } else if (r != CHORUS_OK) {
        snprintf(why, sizeof(why), "%s", chorus_last_error(e->comm));
    }
    if (r == CHORUS_OK) {
        if (chorus__thread_start(&e->thr, engine_main, e) != 0) {
            r = CHORUS_ERR_SYSTEM;
            snprintf(why, sizeof(why), "cannot create the engine thread: %s", strerror(errno));
        }
    }
    if (r != CHORUS_OK) {
        chorus__comm_fail(comm, r, "chorus_engine_start: %s", why);
        engine_free(e);
        return r;
    }
    e->thr_started = 1;
    pthread_mutex_lock(&e->mu);
    e->have_cpu_clock = pthread_getcpuclockid(e->thr, &e->cpu_clock) == 0;
    pthread_mutex_unlock(&e->mu);
    CHORUS_INFO(CHORUS_LOG_ENGINE,
                "engine started: %d ranks, cycle %.1f ms, fusion %zu bytes, cache %d, compression "
                "%s, timeline %s, autotune %s",
                e->size, e->o.cycle_time_ms, e->o.fusion_threshold, e->o.cache_capacity,
                e->o.compressor ? e->o.compressor->name : "none",
                e->tl.tr ? chorus__trace_path(e->tl.tr) : "off", e->tune.active ? "on" : "off");
    *out = e;
    return CHORUS_OK;
}

chorus_result chorus_engine_shutdown(chorus_engine *e)
{
    if (!e)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_engine_shutdown: engine is NULL");
    pthread_mutex_lock(&e->mu);
    e->shutdown_req = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thr_started) pthread_join(e->thr, NULL);
    chorus_result r = e->stop_res == CHORUS_ERR_ABORTED ? CHORUS_OK : e->stop_res;
    engine_free(e);
    return r;
}

const char *chorus_engine_last_error(const chorus_engine *e)
{
    if (!e) return chorus__init_errbuf()->msg;
    return e->last_err[0] ? e->last_err : e->stop_msg;
}

chorus_result chorus_engine_get_stats(chorus_engine *e, chorus_engine_stats *s)
{
    if (!e || !s)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_engine_get_stats: NULL argument");
    pthread_mutex_lock(&e->mu);
    *s = e->st;
    if (e->have_cpu_clock) {
        struct timespec ts;
        if (clock_gettime(e->cpu_clock, &ts) == 0)
            s->thread_cpu_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    }
    pthread_mutex_unlock(&e->mu);
    return CHORUS_OK;
}
