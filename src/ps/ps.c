/*
 * ps.c - the parameter server's set-up and its worker side: the split into servers and
 * workers, key registration with placement balanced by bytes, and non-blocking push and pull
 * over point-to-point messages (include/chorus/ps.h). The serving loop is in server.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "coll/comm.h"
#include "ps/ps_int.h"
#include "reduce/reduce.h"

/* A key is cut into one slice per server when each slice would hold at least this many
 * floats; smaller keys go whole to one server. */
#define PS_SPLIT_MIN 4096

static _Thread_local chorus_errbuf create_err;

struct chorus_ps_handle {
    chorus_ps *ps;
    int n;               /* requests in rq */
    chorus_request **rq; /* two per slice for a push (header, data), two for a pull */
    int64_t (*hdr)[PS_HDR_WORDS];
    uint16_t *wire; /* a push's gradient narrowed to float16/bfloat16, or NULL */
};

void chorus_ps_opts_default(chorus_ps_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
    o->version = CHORUS_PS_OPTS_VERSION;
    const chorus_config *cfg = chorus__config();
    o->nservers = cfg->ps_servers > 0 ? (int)cfg->ps_servers : 1; /* chorus-run --servers */
    o->mode = CHORUS_PS_SYNC;
    o->staleness = 2;
    o->optim = CHORUS_PS_SGD;
    o->momentum = 0.9f;
    o->nesterov = 1;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->grad_dtype = CHORUS_FLOAT32;
}

const char *chorus_ps_mode_name(int mode)
{
    static const char *const names[] = {"sync", "async", "ssp"};
    return mode >= 0 && mode < 3 ? names[mode] : NULL;
}

static chorus_result check_opts(const chorus_ps_opts *o, int size)
{
    chorus_errbuf *e = &create_err;
    if (o->size != sizeof(*o) || o->version != CHORUS_PS_OPTS_VERSION)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_create: options of size %zu version %d; this library "
                            "knows size %zu version %d (fill them with chorus_ps_opts_default)",
                            o->size, o->version, sizeof(*o), CHORUS_PS_OPTS_VERSION);
    if (!chorus_ps_mode_name((int)o->mode))
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_create: unknown mode %d (sync, async or ssp)", (int)o->mode);
    if (o->optim != CHORUS_PS_SGD && o->optim != CHORUS_PS_ADAMW)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_create: unknown optimizer %d (sgd or adamw)", (int)o->optim);
    if (o->grad_dtype != CHORUS_FLOAT32 && o->grad_dtype != CHORUS_FLOAT16 &&
        o->grad_dtype != CHORUS_BFLOAT16) {
        const char *n = chorus_dtype_name((int)o->grad_dtype);
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_create: gradients travel as float32, float16 or bfloat16, "
                            "not %s",
                            n ? n : "an unknown dtype");
    }
    if (o->staleness < 0)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "chorus_ps_create: staleness %d is negative",
                            o->staleness);
    if (!(o->clip_norm >= 0.0f) || !isfinite(o->clip_norm))
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_create: clip_norm %g is not a finite norm >= 0 (0: off)",
                            (double)o->clip_norm);
    if (o->clip_norm > 0.0f && o->mode != CHORUS_PS_SYNC)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_create: clip_norm is for sync mode; in %s mode each push "
                            "is applied alone, and its worker, which holds the whole gradient, "
                            "clips it before pushing",
                            chorus_ps_mode_name((int)o->mode));
    if (size < 2) /* no count of servers works: say so rather than offer 1..0 */
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_create: a job of 1 rank has no room for a parameter "
                            "server: it needs at least 2 ranks (1 server and 1 worker)");
    if (o->nservers < 1 || o->nservers >= size)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_create: %d server%s in a job of %d rank%s leaves %s; "
                            "use 1..%d servers",
                            o->nservers, o->nservers == 1 ? "" : "s", size, size == 1 ? "" : "s",
                            o->nservers < 1 ? "no server" : "no worker", size - 1);
    if (size - o->nservers > CHORUS_PS_MAX_WORKERS)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_create: %d workers; at most %d are supported",
                            size - o->nservers, CHORUS_PS_MAX_WORKERS);
    return CHORUS_OK;
}

chorus_result chorus_ps_create(chorus_comm *c, const chorus_ps_opts *o, chorus_ps **out)
{
    if (out) *out = NULL;
    if (!c || !o || !out)
        return chorus__fail(&create_err, CHORUS_ERR_INVALID_ARG, "chorus_ps_create: %s is NULL",
                            !c   ? "comm"
                            : !o ? "opts"
                                 : "ps");
    CHORUS_CHECK(check_opts(o, chorus_size(c)));
    chorus_ps *ps = calloc(1, sizeof(*ps));
    if (!ps) return chorus__fail(&create_err, CHORUS_ERR_NOMEM, "chorus_ps_create: out of memory");
    ps->comm = c;
    ps->o = *o;
    ps->rank = chorus_rank(c);
    ps->size = chorus_size(c);
    ps->nservers = o->nservers;
    ps->nworkers = ps->size - o->nservers;
    ps->server = ps->rank < ps->nservers ? ps->rank : -1;
    ps->worker = ps->rank < ps->nservers ? -1 : ps->rank - ps->nservers;
    ps->load = calloc((size_t)ps->nservers, sizeof(size_t));
    ps->gone = calloc((size_t)ps->nworkers, 1);
    ps->keys = calloc(PS_MAX_KEYS, sizeof(ps_key));
    if (!ps->load || !ps->gone || !ps->keys) {
        chorus_ps_finalize(ps);
        return chorus__fail(&create_err, CHORUS_ERR_NOMEM, "chorus_ps_create: out of memory");
    }
    ps->st.nworkers = ps->nworkers;
    chorus_result r = chorus_comm_split(c, ps->server >= 0, ps->rank, &ps->side);
    if (r != CHORUS_OK) {
        chorus__fail(&create_err, r, "chorus_ps_create: splitting servers from workers: %s",
                     chorus_last_error(c));
        chorus_ps_finalize(ps);
        return r;
    }
    /* Async and SSP go on without a worker that dies: its connections may be lost without
     * breaking the job, on every rank (the workers are connected to one another too). */
    if (o->mode != CHORUS_PS_SYNC && chorus__tp_has(&c->net, CHORUS_TPCAP_EXPENDABLE))
        for (int r = ps->nservers; r < ps->size; r++)
            chorus__tp_set_expendable(&c->net, c->world[r]);
    /* ... and the launcher lets the job go on without this worker (base/status.h) */
    if (o->mode != CHORUS_PS_SYNC && ps->worker >= 0) chorus__status_expendable(c->world[c->rank]);
    CHORUS_INFO(CHORUS_LOG_INIT, "parameter server: %d server%s, %d worker%s, mode %s",
                ps->nservers, ps->nservers == 1 ? "" : "s", ps->nworkers,
                ps->nworkers == 1 ? "" : "s", chorus_ps_mode_name((int)o->mode));
    *out = ps;
    return CHORUS_OK;
}

int chorus__ps_find(const chorus_ps *ps, int key)
{
    for (int i = 0; i < ps->nkeys; i++)
        if (ps->keys[i].key == key) return i;
    return -1;
}

/* Places k's floats on the servers: one slice per server when each would hold at least
 * PS_SPLIT_MIN floats, else the whole key on the server holding the fewest bytes (the lowest
 * such server on a tie). Every rank computes the same placement. */
static chorus_result place(chorus_ps *ps, ps_key *k)
{
    int K = ps->nservers;
    int split = K > 1 && k->count / (size_t)K >= PS_SPLIT_MIN;
    k->nslices = split ? K : 1;
    k->slices = calloc((size_t)k->nslices, sizeof(ps_slice));
    if (!k->slices) return CHORUS_ERR_NOMEM;
    if (split) {
        size_t base = k->count / (size_t)K, extra = k->count % (size_t)K, off = 0;
        for (int s = 0; s < K; s++) {
            size_t n = base + ((size_t)s < extra);
            k->slices[s] = (ps_slice){s, off, n};
            ps->load[s] += n * sizeof(float);
            off += n;
        }
        return CHORUS_OK;
    }
    int best = 0;
    for (int s = 1; s < K; s++)
        if (ps->load[s] < ps->load[best]) best = s;
    k->slices[0] = (ps_slice){best, 0, k->count};
    ps->load[best] += k->count * sizeof(float);
    return CHORUS_OK;
}

/* Server: the state of its slice of k, starting from init (or zeros). */
static chorus_result hold_slice(chorus_ps *ps, ps_key *k, const float *init)
{
    for (int s = 0; s < k->nslices; s++)
        if (k->slices[s].server == ps->server) {
            k->mine = 1;
            k->moff = k->slices[s].off;
            k->mcount = k->slices[s].count;
        }
    if (!k->mine) return CHORUS_OK;
    size_t n = k->mcount, W = (size_t)ps->nworkers;
    int adam = ps->o.optim == CHORUS_PS_ADAMW;
    int mom = adam || ps->o.momentum != 0.0f;
    int sync = ps->o.mode == CHORUS_PS_SYNC;
    k->param = malloc(n * sizeof(float));
    k->m = mom ? calloc(n, sizeof(float)) : NULL;
    k->v = adam ? calloc(n, sizeof(float)) : NULL;
    k->wpush = calloc(W, sizeof(uint64_t));
    k->acc = sync ? malloc(W * n * sizeof(float)) : NULL;
    k->lrs = sync ? calloc(W, sizeof(float)) : NULL;
    k->have = sync ? calloc(W, 1) : NULL;
    if (!k->param || (mom && !k->m) || (adam && !k->v) || !k->wpush ||
        (sync && (!k->acc || !k->lrs || !k->have)))
        return CHORUS_ERR_NOMEM;
    if (init)
        memcpy(k->param, init + k->moff, n * sizeof(float));
    else
        memset(k->param, 0, n * sizeof(float));
    ps->st.server_bytes += n * sizeof(float) * (1 + (size_t)mom + (size_t)adam + (sync ? W : 0));
    size_t wire = n * chorus_dtype_size(ps->o.grad_dtype);
    if (wire > ps->wire_cap) {
        void *b = realloc(ps->wire, wire);
        if (!b) return CHORUS_ERR_NOMEM;
        ps->st.server_bytes += wire - ps->wire_cap;
        ps->wire = b;
        ps->wire_cap = wire;
    }
    return CHORUS_OK;
}

/* Checks that every rank registers the same key with the same count, naming the first rank
 * that differs from rank 0. */
static chorus_result agree_key(chorus_ps *ps, int key, size_t count)
{
    int64_t mine[2] = {key, (int64_t)count};
    int64_t *all = malloc((size_t)ps->size * 2 * sizeof(int64_t));
    if (!all) return chorus__fail(&ps->err, CHORUS_ERR_NOMEM, "chorus_ps_register: out of memory");
    chorus_result r = chorus_allgather(ps->comm, mine, all, 2, CHORUS_INT64);
    if (r != CHORUS_OK) {
        chorus__fail(&ps->err, r, "chorus_ps_register: %s", chorus_last_error(ps->comm));
        free(all);
        return r;
    }
    for (int i = 1; i < ps->size; i++)
        if (all[2 * i] != all[0] || all[2 * i + 1] != all[1]) {
            r = chorus__fail(&ps->err, CHORUS_ERR_MISMATCH,
                             "chorus_ps_register: rank %d registered key %lld of %lld floats, "
                             "rank 0 key %lld of %lld floats: every rank must register the same "
                             "keys in the same order",
                             i, (long long)all[2 * i], (long long)all[2 * i + 1], (long long)all[0],
                             (long long)all[1]);
            break;
        }
    free(all);
    return r;
}

chorus_result chorus_ps_register(chorus_ps *ps, int key, size_t count, const float *init)
{
    if (!ps) return CHORUS_ERR_INVALID_ARG;
    /* Bad arguments are refused after the agreement, so that every rank fails together. */
    CHORUS_CHECK(agree_key(ps, key, count));
    if (key < 0 || count == 0)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_register: key %d with %zu floats: keys are >= 0 and hold "
                            "at least one float",
                            key, count);
    if (chorus__ps_find(ps, key) >= 0)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_register: key %d is already registered", key);
    if (ps->nkeys == PS_MAX_KEYS)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG, "chorus_ps_register: at most %d keys",
                            PS_MAX_KEYS);
    ps_key *k = &ps->keys[ps->nkeys++];
    k->key = key;
    k->count = count;
    if (place(ps, k) != CHORUS_OK || (ps->server >= 0 && hold_slice(ps, k, init) != CHORUS_OK))
        return chorus__fail(&ps->err, CHORUS_ERR_NOMEM,
                            "chorus_ps_register: out of memory for key %d (%zu floats)", key,
                            count);
    return CHORUS_OK;
}

int chorus_ps_is_server(const chorus_ps *ps)
{
    return ps && ps->server >= 0;
}

int chorus_ps_worker_index(const chorus_ps *ps)
{
    return ps ? ps->worker : -1;
}

int chorus_ps_num_workers(const chorus_ps *ps)
{
    return ps ? ps->nworkers : 0;
}

int chorus_ps_num_servers(const chorus_ps *ps)
{
    return ps ? ps->nservers : 0;
}

chorus_comm *chorus_ps_worker_comm(chorus_ps *ps)
{
    return ps && ps->worker >= 0 ? ps->side : NULL;
}

/* The checks push and pull share; sets *k to the key. */
static chorus_result check_call(chorus_ps *ps, const char *call, int key, const void *buf,
                                size_t count, chorus_ps_handle **h, ps_key **k)
{
    if (!ps) return CHORUS_ERR_INVALID_ARG;
    if (h) *h = NULL;
    if (ps->worker < 0)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG,
                            "%s: rank %d is a server; only workers push and pull", call, ps->rank);
    if (ps->left)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG,
                            "%s: worker %d has left the parameter server", call, ps->worker);
    if (!h || !buf)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG, "%s: %s is NULL", call,
                            !h ? "handle" : "buffer");
    int i = chorus__ps_find(ps, key);
    if (i < 0)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG,
                            "%s: key %d is not registered (%d key%s registered)", call, key,
                            ps->nkeys, ps->nkeys == 1 ? "" : "s");
    *k = &ps->keys[i];
    if (count != (*k)->count)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG,
                            "%s: key %d holds %zu floats, the call gave %zu", call, key,
                            (*k)->count, count);
    return CHORUS_OK;
}

static chorus_ps_handle *handle_new(chorus_ps *ps, int nslices)
{
    chorus_ps_handle *h = calloc(1, sizeof(*h));
    if (!h) return NULL;
    h->ps = ps;
    h->rq = calloc(2 * (size_t)nslices, sizeof(*h->rq));
    h->hdr = calloc((size_t)nslices, sizeof(*h->hdr));
    if (!h->rq || !h->hdr) {
        free(h->rq);
        free(h->hdr);
        free(h);
        return NULL;
    }
    return h;
}

static void handle_free(chorus_ps_handle *h)
{
    free(h->rq);
    free(h->hdr);
    free(h->wire);
    free(h);
}

/* Posts one slice's header to its server. */
static chorus_result send_header(chorus_ps *ps, chorus_ps_handle *h, int s, int type,
                                 const ps_key *k, uint64_t clock, float lr)
{
    int64_t *hd = h->hdr[s];
    uint32_t bits;
    memcpy(&bits, &lr, sizeof(bits));
    hd[0] = type;
    hd[1] = k->key;
    hd[2] = (int64_t)clock;
    hd[3] = (int64_t)bits;
    return chorus_isend(ps->comm, hd, PS_HDR_WORDS, CHORUS_INT64, k->slices[s].server, PS_TAG_HDR,
                        &h->rq[h->n++]);
}

/* Completes what h posted after a failure, keeping the first error. */
static chorus_result fail_handle(chorus_ps *ps, chorus_ps_handle *h, chorus_result r,
                                 const char *call)
{
    chorus__fail(&ps->err, r, "%s: %s", call, chorus_last_error(ps->comm));
    chorus_waitall(h->n, h->rq, NULL);
    handle_free(h);
    return r;
}

chorus_result chorus_ps_push(chorus_ps *ps, int key, const float *grad, size_t count, float lr,
                             chorus_ps_handle **out)
{
    ps_key *k;
    CHORUS_CHECK(check_call(ps, "chorus_ps_push", key, grad, count, out, &k));
    if (!isfinite(lr))
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_push: key %d: the learning rate is not finite", key);
    chorus_ps_handle *h = handle_new(ps, k->nslices);
    chorus_dtype wt = ps->o.grad_dtype;
    if (h && wt != CHORUS_FLOAT32 && !(h->wire = malloc(count * sizeof(uint16_t)))) {
        handle_free(h);
        h = NULL;
    }
    if (!h) return chorus__fail(&ps->err, CHORUS_ERR_NOMEM, "chorus_ps_push: out of memory");
    if (wt == CHORUS_FLOAT16)
        for (size_t i = 0; i < count; i++) h->wire[i] = chorus__f32_to_f16(grad[i]);
    else if (wt == CHORUS_BFLOAT16)
        for (size_t i = 0; i < count; i++) h->wire[i] = chorus__f32_to_bf16(grad[i]);
    uint64_t clock = ++k->pushes;
    size_t esz = chorus_dtype_size(wt);
    for (int s = 0; s < k->nslices; s++) {
        const ps_slice *sl = &k->slices[s];
        const void *data = wt == CHORUS_FLOAT32 ? (const void *)(grad + sl->off)
                                                : (const void *)(h->wire + sl->off);
        chorus_result r = send_header(ps, h, s, PS_PUSH, k, clock, lr);
        if (r == CHORUS_OK)
            r = chorus_isend(ps->comm, data, sl->count, wt, sl->server, PS_TAG_DATA,
                             &h->rq[h->n++]);
        if (r != CHORUS_OK) return fail_handle(ps, h, r, "chorus_ps_push");
        ps->st.bytes_pushed += sl->count * esz;
    }
    ps->st.pushes++;
    *out = h;
    return CHORUS_OK;
}

chorus_result chorus_ps_pull(chorus_ps *ps, int key, float *dst, size_t count,
                             chorus_ps_handle **out)
{
    ps_key *k;
    CHORUS_CHECK(check_call(ps, "chorus_ps_pull", key, dst, count, out, &k));
    chorus_ps_handle *h = handle_new(ps, k->nslices);
    if (!h) return chorus__fail(&ps->err, CHORUS_ERR_NOMEM, "chorus_ps_pull: out of memory");
    int slot = (int)(k - ps->keys);
    k->pulls++;
    for (int s = 0; s < k->nslices; s++) {
        const ps_slice *sl = &k->slices[s];
        chorus_result r = chorus_irecv(ps->comm, dst + sl->off, sl->count, CHORUS_FLOAT32,
                                       sl->server, PS_TAG_REPLY + slot, &h->rq[h->n++]);
        if (r == CHORUS_OK) r = send_header(ps, h, s, PS_PULL, k, k->pushes, 0.0f);
        if (r != CHORUS_OK) return fail_handle(ps, h, r, "chorus_ps_pull");
        ps->st.bytes_pulled += sl->count * sizeof(float);
    }
    ps->st.pulls++;
    *out = h;
    return CHORUS_OK;
}

chorus_result chorus_ps_wait(chorus_ps_handle *h)
{
    if (!h) return CHORUS_ERR_INVALID_ARG;
    chorus_ps *ps = h->ps;
    chorus_result r = chorus_waitall(h->n, h->rq, NULL);
    if (r != CHORUS_OK)
        chorus__fail(&ps->err, r, "parameter server transfer failed: %s",
                     chorus_last_error(ps->comm));
    handle_free(h);
    return r;
}

void chorus_ps_get_stats(const chorus_ps *ps, chorus_ps_stats *s)
{
    if (ps && s) *s = ps->st;
}

/* Worker: one goodbye header to every server. */
static chorus_result say_bye(chorus_ps *ps)
{
    chorus_result first = CHORUS_OK;
    int64_t hd[PS_HDR_WORDS] = {PS_BYE, -1, 0, 0};
    for (int s = 0; s < ps->nservers; s++) {
        chorus_result r = chorus_send(ps->comm, hd, PS_HDR_WORDS, CHORUS_INT64, s, PS_TAG_HDR);
        if (r != CHORUS_OK && first == CHORUS_OK) {
            first = r;
            chorus__fail(&ps->err, r, "chorus_ps_finalize: telling server %d: %s", s,
                         chorus_last_error(ps->comm));
        }
    }
    return first;
}

chorus_result chorus_ps_leave(chorus_ps *ps)
{
    if (!ps) return CHORUS_ERR_INVALID_ARG;
    if (ps->worker < 0)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_leave: rank %d is a server", ps->rank);
    if (ps->left) return CHORUS_OK;
    ps->left = 1;
    return say_bye(ps);
}

chorus_result chorus_ps_finalize(chorus_ps *ps)
{
    if (!ps) return CHORUS_OK;
    chorus_result r = ps->worker >= 0 && ps->keys && !ps->left ? say_bye(ps) : CHORUS_OK;
    for (int i = 0; i < ps->nkeys; i++) {
        ps_key *k = &ps->keys[i];
        free(k->slices);
        free(k->param);
        free(k->m);
        free(k->v);
        free(k->wpush);
        free(k->acc);
        free(k->lrs);
        free(k->have);
        for (ps_defer *d = k->deferred, *nx; d; d = nx) {
            nx = d->next;
            free(d->grad);
            free(d);
        }
    }
    if (ps->side) chorus_finalize(ps->side);
    free(ps->keys);
    free(ps->load);
    free(ps->gone);
    free(ps->wire);
    free(ps);
    return r;
}

const char *chorus_ps_last_error(const chorus_ps *ps)
{
    return ps ? ps->err.msg : create_err.msg;
}
