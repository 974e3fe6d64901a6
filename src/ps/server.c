/*
 * server.c - the parameter server's serving loop: receive a header from any worker, apply a
 * push (at once, or once per round in sync mode), answer a pull (at once, after its round, or
 * once the staleness bound allows), until every worker has said goodbye. The optimizers are
 * the trainer's (include/chorus/optim.h), so that a sync run gives the same bits as the
 * trainer's allreduce mode.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ps/ps_int.h"
#include "chorus/optim.h"
#include "reduce/reduce.h"

static void apply(chorus_ps *ps, ps_key *k, const float *g, float lr)
{
    k->t++;
    const chorus_ps_opts *o = &ps->o;
    if (o->optim == CHORUS_PS_ADAMW)
        chorus_adamw_update(k->param, g, k->m, k->v, k->mcount, lr, o->beta1, o->beta2, o->eps,
                            o->weight_decay, k->t);
    else
        chorus_sgd_update(k->param, g, k->m, k->mcount, lr, o->momentum, o->nesterov,
                          o->weight_decay);
    ps->st.updates++;
}

/* Widens the received wire gradient into dst (float32). */
static void widen(const chorus_ps *ps, const void *wire, float *dst, size_t n)
{
    const uint16_t *h = wire;
    if (ps->o.grad_dtype == CHORUS_FLOAT16)
        for (size_t i = 0; i < n; i++) dst[i] = chorus__f16_to_f32(h[i]);
    else if (ps->o.grad_dtype == CHORUS_BFLOAT16)
        for (size_t i = 0; i < n; i++) dst[i] = chorus__bf16_to_f32(h[i]);
    else
        memcpy(dst, wire, n * sizeof(float));
}

static chorus_result on_gone(chorus_ps *ps, int worker);

/* Async and SSP: worker died (its connection is gone, the job is not): log it, and go on as
 * if it had left. */
static chorus_result worker_lost(chorus_ps *ps, int worker)
{
    if (ps->gone[worker]) return CHORUS_OK;
    CHORUS_NOTE(CHORUS_LOG_ALL, "server %d: worker %d (rank %d) is lost (%s); going on without it",
                ps->rank, worker, ps->nservers + worker, chorus_last_error(ps->comm));
    ps->st.workers_lost++;
    return on_gone(ps, worker);
}

/* The fewest pushes of k among the workers still training (UINT64_MAX when none is). */
static uint64_t slowest(const chorus_ps *ps, const ps_key *k)
{
    uint64_t lo = UINT64_MAX;
    for (int w = 0; w < ps->nworkers; w++)
        if (!ps->gone[w] && k->wpush[w] < lo) lo = k->wpush[w];
    return lo;
}

/* Whether a pull of k by a worker that has pushed it `clock` times may be answered now. */
static int pull_ready(const chorus_ps *ps, const ps_key *k, uint64_t clock)
{
    if (ps->o.mode == CHORUS_PS_SYNC) return k->applied >= clock;
    if (ps->o.mode == CHORUS_PS_ASYNC) return 1;
    uint64_t lo = slowest(ps, k);
    return lo == UINT64_MAX || clock <= lo + (uint64_t)ps->o.staleness;
}

static chorus_result answer_pull(chorus_ps *ps, ps_key *k, int worker, uint64_t clock)
{
    uint64_t lo = slowest(ps, k);
    if (lo != UINT64_MAX && clock > lo && clock - lo > ps->st.max_staleness)
        ps->st.max_staleness = clock - lo;
    int slot = (int)(k - ps->keys);
    chorus_result r = chorus_send(ps->comm, k->param, k->mcount, CHORUS_FLOAT32,
                                  ps->nservers + worker, PS_TAG_REPLY + slot);
    if (r == CHORUS_ERR_PEER_LOST && ps->o.mode != CHORUS_PS_SYNC) return worker_lost(ps, worker);
    if (r != CHORUS_OK)
        return chorus__fail(&ps->err, r, "server %d answering worker %d (rank %d): %s", ps->rank,
                            worker, ps->nservers + worker, chorus_last_error(ps->comm));
    ps->st.pulls++;
    ps->st.bytes_pulled += k->mcount * sizeof(float);
    ps->st.worker_bytes_pulled[worker] += k->mcount * sizeof(float);
    return CHORUS_OK;
}

static chorus_result defer(ps_key *k, int worker, int type, uint64_t clock, float lr,
                           const float *grad)
{
    ps_defer *d = calloc(1, sizeof(*d));
    if (!d) return CHORUS_ERR_NOMEM;
    *d = (ps_defer){worker, type, clock, lr, NULL, NULL};
    if (grad) {
        if (!(d->grad = malloc(k->mcount * sizeof(float)))) {
            free(d);
            return CHORUS_ERR_NOMEM;
        }
        memcpy(d->grad, grad, k->mcount * sizeof(float));
    }
    ps_defer **tail = &k->deferred;
    while (*tail) tail = &(*tail)->next;
    *tail = d;
    return CHORUS_OK;
}

/* Sync: the round is complete when every worker still training has pushed it. */
static int round_complete(const chorus_ps *ps, const ps_key *k)
{
    int any = 0;
    for (int w = 0; w < ps->nworkers; w++) {
        if (k->have[w])
            any = 1;
        else if (!ps->gone[w])
            return 0;
    }
    return any;
}

/* Sync with clip_norm: the round's summed gradient of k (this server's slice: sum) cut to the
 * global norm clip_norm. A key held whole takes its own norm; a key cut across the servers
 * takes every server's sum of squares of its slice, sent point-to-point on a tag of the key's own
 * (rounds of two keys never meet; a pair's messages keep their order, so round n meets round n),
 * each server's sent before it waits for the others', and added in server order on every server:
 * all take the same norm and scale by the same factor, the trainer's (float)(clip / norm). */
static chorus_result clip_round(chorus_ps *ps, ps_key *k, float *sum)
{
    int K = k->nslices, tag = PS_TAG_NORM + (int)(k - ps->keys);
    double mine = 0, total = 0;
    for (size_t i = 0; i < k->mcount; i++) mine += (double)sum[i] * sum[i];
    double *part = malloc((size_t)K * sizeof(double));
    chorus_request **rq = calloc((size_t)K, sizeof(*rq));
    chorus_result r = part && rq ? CHORUS_OK : CHORUS_ERR_NOMEM;
    for (int s = 0; s < K && r == CHORUS_OK; s++) {
        int peer = k->slices[s].server; /* a key held whole: this server alone */
        if (peer != ps->server)
            r = chorus_isend(ps->comm, &mine, 1, CHORUS_FLOAT64, peer, tag, &rq[s]);
    }
    for (int s = 0; s < K && r == CHORUS_OK; s++) {
        int peer = k->slices[s].server;
        r = peer == ps->server ? (part[s] = mine, CHORUS_OK)
                               : chorus_recv(ps->comm, &part[s], 1, CHORUS_FLOAT64, peer, tag);
    }
    for (int s = 0; s < K && rq; s++) {
        chorus_status st;
        chorus_result w = rq[s] ? chorus_wait(rq[s], &st) : CHORUS_OK;
        if (r == CHORUS_OK) r = w;
    }
    for (int s = 0; s < K && r == CHORUS_OK; s++) total += part[s];
    free(part);
    free(rq);
    if (r != CHORUS_OK)
        return chorus__fail(&ps->err, r,
                            "server %d: the gradient norm of key %d with the other servers: %s",
                            ps->rank, k->key, chorus_last_error(ps->comm));
    double norm = sqrt(total);
    ps->st.last_norm = norm;
    if (norm > (double)ps->o.clip_norm) {
        float c = (float)((double)ps->o.clip_norm / norm);
        for (size_t i = 0; i < k->mcount; i++) sum[i] *= c;
        ps->st.clipped++;
    }
    return CHORUS_OK;
}

/* Sync: sums the round's gradients in worker order (as the allreduce folds in rank order),
 * cuts the sum to clip_norm, and applies it with the lowest worker's learning rate. */
static chorus_result close_round(chorus_ps *ps, ps_key *k)
{
    size_t n = k->mcount;
    float *sum = NULL, lr = 0.0f;
    for (int w = 0; w < ps->nworkers; w++) {
        if (!k->have[w]) continue;
        float *g = k->acc + (size_t)w * n;
        if (!sum) {
            sum = g;
            lr = k->lrs[w];
        } else {
            for (size_t i = 0; i < n; i++) sum[i] += g[i];
        }
        k->have[w] = 0;
    }
    if (ps->o.clip_norm > 0.0f) CHORUS_CHECK(clip_round(ps, k, sum));
    apply(ps, k, sum, lr);
    k->applied++;
    return CHORUS_OK;
}

/* Sync: takes one worker's gradient for the current round. */
static void take(ps_key *k, int worker, const float *g, float lr)
{
    memcpy(k->acc + (size_t)worker * k->mcount, g, k->mcount * sizeof(float));
    k->lrs[worker] = lr;
    k->have[worker] = 1;
}

/* Serves whatever deferred requests of k have become possible, in arrival order, until none
 * does (a closed round may release pushes of the next one). */
static chorus_result retry(chorus_ps *ps, ps_key *k)
{
    int progress = 1;
    while (progress) {
        progress = 0;
        for (ps_defer **pp = &k->deferred; *pp;) {
            ps_defer *d = *pp;
            int ready = d->type == PS_PULL ? pull_ready(ps, k, d->clock)
                                           : d->clock == k->applied + 1 && !k->have[d->worker];
            if (!ready) {
                pp = &d->next;
                continue;
            }
            *pp = d->next;
            chorus_result r = CHORUS_OK;
            if (d->type == PS_PULL) {
                r = answer_pull(ps, k, d->worker, d->clock);
            } else {
                take(k, d->worker, d->grad, d->lr);
                if (round_complete(ps, k)) r = close_round(ps, k);
            }
            free(d->grad);
            free(d);
            CHORUS_CHECK(r);
            progress = 1;
            break;
        }
    }
    return CHORUS_OK;
}

static chorus_result on_push(chorus_ps *ps, ps_key *k, int worker, uint64_t clock, float lr)
{
    size_t n = k->mcount, esz = chorus_dtype_size(ps->o.grad_dtype);
    int src = ps->nservers + worker;
    chorus_status st;
    chorus_request *rq;
    chorus_result r = chorus_irecv(ps->comm, ps->wire, n, ps->o.grad_dtype, src, PS_TAG_DATA, &rq);
    if (r == CHORUS_OK) r = chorus_wait(rq, &st);
    if (r == CHORUS_ERR_PEER_LOST && ps->o.mode != CHORUS_PS_SYNC) return worker_lost(ps, worker);
    if (r == CHORUS_OK && st.count != n)
        r = chorus__fail(&ps->err, CHORUS_ERR_MISMATCH,
                         "server %d: worker %d (rank %d) pushed %zu values of key %d, whose slice "
                         "here holds %zu; nothing applied",
                         ps->rank, worker, src, st.count, k->key, n);
    else if (r != CHORUS_OK)
        chorus__fail(&ps->err, r, "server %d: receiving worker %d's gradient of key %d: %s",
                     ps->rank, worker, k->key, chorus_last_error(ps->comm));
    CHORUS_CHECK(r);
    ps->st.pushes++;
    ps->st.bytes_pushed += n * esz;
    ps->st.worker_bytes_pushed[worker] += n * esz;
    k->wpush[worker]++;
    float *g = malloc(n * sizeof(float));
    if (!g) return chorus__fail(&ps->err, CHORUS_ERR_NOMEM, "server %d: out of memory", ps->rank);
    widen(ps, ps->wire, g, n);
    if (ps->o.mode != CHORUS_PS_SYNC) {
        apply(ps, k, g, lr);
    } else if (clock == k->applied + 1 && !k->have[worker]) {
        take(k, worker, g, lr);
        if (round_complete(ps, k)) r = close_round(ps, k);
    } else if (defer(k, worker, PS_PUSH, clock, lr, g) != CHORUS_OK) {
        r = chorus__fail(&ps->err, CHORUS_ERR_NOMEM, "server %d: out of memory", ps->rank);
    }
    free(g);
    CHORUS_CHECK(r);
    return retry(ps, k);
}

static chorus_result on_pull(chorus_ps *ps, ps_key *k, int worker, uint64_t clock)
{
    if (pull_ready(ps, k, clock)) return answer_pull(ps, k, worker, clock);
    ps->st.pulls_delayed++;
    if (defer(k, worker, PS_PULL, clock, 0.0f, NULL) != CHORUS_OK)
        return chorus__fail(&ps->err, CHORUS_ERR_NOMEM, "server %d: out of memory", ps->rank);
    return CHORUS_OK;
}

/* A worker is done: the rounds and bounds it held back go on without it. */
static chorus_result on_gone(chorus_ps *ps, int worker)
{
    if (ps->gone[worker]) return CHORUS_OK;
    ps->gone[worker] = 1;
    ps->ngone++;
    ps->st.workers_gone = ps->ngone;
    for (int i = 0; i < ps->nkeys; i++) {
        ps_key *k = &ps->keys[i];
        if (!k->mine) continue;
        if (ps->o.mode == CHORUS_PS_SYNC && round_complete(ps, k)) CHORUS_CHECK(close_round(ps, k));
        CHORUS_CHECK(retry(ps, k));
    }
    return CHORUS_OK;
}

/* A worker asks every server to save its shard of step, or to load it back (type): do it, and
 * answer how it went. A failure is the worker's to report; serving goes on. */
static chorus_result on_shard(chorus_ps *ps, int worker, int type, uint64_t step)
{
    char dir[PS_MAX_DIR];
    int src = ps->nservers + worker;
    chorus_status st;
    chorus_request *rq;
    chorus_result r = chorus_irecv(ps->comm, dir, sizeof(dir), CHORUS_UINT8, src, PS_TAG_DATA, &rq);
    if (r == CHORUS_OK) r = chorus_wait(rq, &st);
    if (r != CHORUS_OK)
        return chorus__fail(&ps->err, r, "server %d: receiving worker %d's shard request: %s",
                            ps->rank, worker, chorus_last_error(ps->comm));
    int64_t res = CHORUS_ERR_INVALID_ARG;
    if (st.count > 0 && dir[st.count - 1] == '\0') {
        res = type == PS_SAVE ? chorus__ps_save_shard(ps, dir, step)
                              : chorus__ps_load_shard(ps, dir, step);
        if (res != CHORUS_OK) CHORUS_NOTE(CHORUS_LOG_ALL, "%s", ps->err.msg);
    }
    r = chorus_send(ps->comm, &res, 1, CHORUS_INT64, src, PS_TAG_SAVED);
    if (r != CHORUS_OK)
        return chorus__fail(&ps->err, r, "server %d: answering worker %d's shard request: %s",
                            ps->rank, worker, chorus_last_error(ps->comm));
    return CHORUS_OK;
}

/* Handles one header from worker. */
static chorus_result dispatch(chorus_ps *ps, int worker, const int64_t *hd)
{
    if (hd[0] == PS_BYE) return on_gone(ps, worker);
    if ((hd[0] == PS_SAVE || hd[0] == PS_LOAD) && hd[2] >= 0)
        return on_shard(ps, worker, (int)hd[0], (uint64_t)hd[2]);
    int i = hd[1] >= 0 && hd[1] <= INT32_MAX ? chorus__ps_find(ps, (int)hd[1]) : -1;
    if ((hd[0] != PS_PUSH && hd[0] != PS_PULL) || i < 0 || !ps->keys[i].mine || hd[2] < 0)
        return chorus__fail(&ps->err, CHORUS_ERR_MISMATCH,
                            "server %d: worker %d (rank %d) sent request %lld for key %lld, which "
                            "this server does not hold; nothing applied (do all ranks register "
                            "the same keys?)",
                            ps->rank, worker, ps->nservers + worker, (long long)hd[0],
                            (long long)hd[1]);
    ps_key *k = &ps->keys[i];
    if (hd[0] == PS_PULL) return on_pull(ps, k, worker, (uint64_t)hd[2]);
    uint32_t bits = (uint32_t)hd[3];
    float lr;
    memcpy(&lr, &bits, sizeof(lr));
    return on_push(ps, k, worker, (uint64_t)hd[2], lr);
}

chorus_result chorus_ps_serve(chorus_ps *ps)
{
    if (!ps) return CHORUS_ERR_INVALID_ARG;
    if (ps->server < 0)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG,
                            "chorus_ps_serve: rank %d is a worker", ps->rank);
    while (ps->ngone < ps->nworkers) {
        int64_t hd[PS_HDR_WORDS];
        chorus_request *rq;
        chorus_status st;
        chorus_result r = chorus_irecv(ps->comm, hd, PS_HDR_WORDS, CHORUS_INT64, CHORUS_ANY_SOURCE,
                                       PS_TAG_HDR, &rq);
        if (r == CHORUS_OK) r = chorus_wait(rq, &st);
        if (r == CHORUS_ERR_PEER_LOST && st.source >= ps->nservers) { /* async/SSP: goes on */
            CHORUS_CHECK(worker_lost(ps, st.source - ps->nservers));
            continue;
        }
        if (r == CHORUS_OK && (st.source < ps->nservers || st.count != PS_HDR_WORDS))
            return chorus__fail(&ps->err, CHORUS_ERR_MISMATCH,
                                "server %d: rank %d sent a %zu-word request; only workers "
                                "(ranks %d..%d) send requests",
                                ps->rank, st.source, st.count, ps->nservers, ps->size - 1);
        if (r != CHORUS_OK)
            return chorus__fail(&ps->err, r, "server %d: waiting for workers: %s", ps->rank,
                                chorus_last_error(ps->comm));
        CHORUS_CHECK(dispatch(ps, st.source - ps->nservers, hd));
    }
    return CHORUS_OK;
}
