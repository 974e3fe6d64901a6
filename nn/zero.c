/*
 * zero.c - sharded optimizer state (ZeRO stage 1) and sharded gradients (stage 2), after
 * DeepSpeed's ZeRO: every rank keeps the whole parameters but updates only its chunks of
 * them, so it holds optimizer state (and at stage 2 summed gradients) for 1/p of the model;
 * an all-gather then gives every rank the whole updated parameters.
 *
 * The parameters are cut into segments of at most NN_ZERO_BUCKET floats that never cross a
 * layer (so that stage 2 can reduce a layer's gradient the moment backward finished it);
 * each segment is cut into p chunks of ceil(len/p) floats. The reduce-scatter and the
 * allreduce of libchorus both fold in rank order, and the updates (include/chorus/optim.h) are
 * element-wise, so every parameter gets the bits plain data parallelism would give it.
 *
 * With nn_zero_overlap a thread all-gathers the segments in layer order while the next
 * forward pass runs; the forward hook makes each layer wait only for its own segments.
 *
 * Stage 3 keeps no whole parameters: a layer's segments are all-gathered from the ranks'
 * chunks into one buffer just before the layer runs, forward or backward (the forward hook),
 * and the next layer's gather overwrites them.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chorus/nn.h"
#include "nn_internal.h"
#include "chorus/optim.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The segments of layer L (in model->params) into out[] when out is not NULL; returns their
 * count. */
static int layer_segments(const nn_layer *L, int size, nn_zero_seg *out)
{
    size_t max_len = (NN_ZERO_BUCKET / (size_t)size) * (size_t)size;
    if (max_len == 0) max_len = (size_t)size;
    int k = 0;
    for (size_t a = 0; a < L->nparams; a += max_len, k++) {
        if (!out) continue;
        size_t len = L->nparams - a < max_len ? L->nparams - a : max_len;
        out[k].off = L->param_off + a;
        out[k].len = len;
        out[k].chunk = (len + (size_t)size - 1) / (size_t)size;
    }
    return k;
}

/* This rank's part of segment s: [lo, lo+*n) in model->params (n may be short or 0). */
static size_t own_range(const nn_zero_seg *s, int rank, size_t *n)
{
    size_t lo = (size_t)rank * s->chunk;
    size_t hi = lo + s->chunk < s->len ? lo + s->chunk : s->len;
    *n = hi > lo ? hi - lo : 0;
    return s->off + lo;
}

size_t nn_zero_shard_count(const nn_model *m, int rank, int size)
{
    (void)rank; /* every rank keeps a whole chunk per segment, the last ranks' padded */
    size_t total = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const nn_layer *L = &m->layers[i];
        size_t max_len = (NN_ZERO_BUCKET / (size_t)size) * (size_t)size;
        if (max_len == 0) max_len = (size_t)size;
        for (size_t a = 0; a < L->nparams; a += max_len) {
            size_t len = L->nparams - a < max_len ? L->nparams - a : max_len;
            total += (len + (size_t)size - 1) / (size_t)size;
        }
    }
    return total;
}

static float *zalloc(nn_zero *z, nn_mem_part p, size_t n)
{
    float *q = calloc(n ? n : 1, sizeof(float));
    if (q && z->mem) nn_mem_add(z->mem, p, n * sizeof(float));
    return q;
}

static void gather_hook(nn_model *m, int layer, void *arg);

/* Stage 3: this rank's chunks of m->params into z->pshard, m->params freed, the layers'
 * parameter views into z->pbuf (a buffer of z->gbuf_n floats: the largest layer, padded). */
static int shard_params(nn_zero *z, nn_model *m)
{
    if (!(z->pshard = zalloc(z, NN_MEM_PARAMS, z->shard_n))) return -1;
    if (!(z->pbuf = zalloc(z, NN_MEM_PARAMS, z->gbuf_n))) return -1;
    for (int s = 0; s < z->nseg; s++) {
        size_t n, at = own_range(&z->seg[s], z->rank, &n);
        memcpy(z->pshard + z->seg[s].shard_off, m->params + at, n * sizeof(float));
    }
    free(m->params);
    m->params = NULL;
    if (z->mem) nn_mem_sub(z->mem, NN_MEM_PARAMS, m->nparams * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *L = &m->layers[i];
        if (!L->nparams) continue;
        L->w = z->pbuf;
        L->b = z->pbuf + (L->nparams - nn__bias_count(L));
    }
    m->fwd_hook = gather_hook;
    m->fwd_hook_arg = z;
    return 0;
}

chorus_result nn_zero_init(nn_zero *z, nn_model *m, chorus_comm *comm, int stage, nn_mem *mem)
{
    memset(z, 0, sizeof(*z));
    if (stage < 1 || stage > 3 || !m->params || (stage >= 2) != (m->no_grads != 0))
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_zero_init: stage %d (1, 2 or 3; stages 2 and 3 need a model "
                        "finalized with no_grads, and its parameters)",
                        stage);
    z->stage = stage;
    z->comm = comm;
    z->rank = comm ? chorus_rank(comm) : 0;
    z->size = comm ? chorus_size(comm) : 1;
    z->mem = mem;
    for (int i = 0; i < m->nlayers; i++) z->nseg += layer_segments(&m->layers[i], z->size, NULL);
    z->seg = calloc((size_t)z->nseg + 1, sizeof(*z->seg));
    z->first_seg = calloc((size_t)m->nlayers + 1, sizeof(int));
    z->resident = -1;
    if (!z->seg || !z->first_seg) goto nomem;
    int k = 0;
    size_t maxchunk = 1, maxlayer = 0;
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *L = &m->layers[i];
        int ns = layer_segments(L, z->size, z->seg + k);
        z->first_seg[i] = k;
        /* stage 2: the layer's gradient, padded so its last segment is whole chunks */
        size_t padded =
            ns ? z->seg[k + ns - 1].off - L->param_off + z->seg[k + ns - 1].chunk * (size_t)z->size
               : 0;
        if (padded > maxlayer) maxlayer = padded;
        for (int s = k; s < k + ns; s++) {
            z->seg[s].shard_off = z->shard_n;
            z->shard_n += z->seg[s].chunk;
            if (z->seg[s].chunk > maxchunk) maxchunk = z->seg[s].chunk;
        }
        k += ns;
    }
    z->first_seg[m->nlayers] = k;
    z->scratch_n = stage == 3 ? 0 : maxchunk * (size_t)(z->size + 1);
    if (stage < 3 && !(z->scratch = zalloc(z, NN_MEM_PARAMS, z->scratch_n))) goto nomem;
    z->gbuf_n = stage >= 2 ? maxlayer : 0;
    /* stage 3 first: the whole parameters are freed before the gradient buffers exist */
    if (stage == 3 && shard_params(z, m)) goto nomem;
    if (stage >= 2) {
        if (!(z->gbuf = zalloc(z, NN_MEM_GRADS, z->gbuf_n))) goto nomem;
        if (!(z->gshard = zalloc(z, NN_MEM_GRADS, z->shard_n))) goto nomem;
        for (int i = 0; i < m->nlayers; i++) {
            nn_layer *L = &m->layers[i];
            if (!L->nparams) continue;
            L->dw = z->gbuf;
            L->db = z->gbuf + (L->nparams - nn__bias_count(L));
        }
    }
    return CHORUS_OK;
nomem:
    nn_zero_free(z);
    return nn__fail(CHORUS_ERR_NOMEM, "nn_zero_init: out of memory");
}

static void stop_gather(nn_zero *z);

void nn_zero_free(nn_zero *z)
{
    stop_gather(z);
    free(z->seg);
    free(z->first_seg);
    free(z->gshard);
    free(z->gbuf);
    free(z->scratch);
    free(z->pshard);
    free(z->pbuf);
    z->seg = NULL;
    z->first_seg = NULL;
    z->gshard = z->gbuf = z->scratch = z->pshard = z->pbuf = NULL;
}

/* Stage 2, after backward finished layer `layer`: its gradient (in gbuf) is reduce-scattered
 * segment by segment into this rank's chunks, and gbuf is cleared for the next layer. */
static void reduce_layer(nn_model *m, int layer, void *arg)
{
    nn_zero *z = arg;
    nn_layer *L = &m->layers[layer];
    double t0 = now_s();
    size_t used = 0;
    for (int s = 0; s < z->nseg && !z->err; s++) {
        nn_zero_seg *g = &z->seg[s];
        if (g->off < L->param_off || g->off >= L->param_off + L->nparams) continue;
        float *src = z->gbuf + (g->off - L->param_off);
        chorus_result r = chorus_reduce_scatter(z->comm, src, z->gshard + g->shard_off, g->chunk,
                                                CHORUS_FLOAT32, CHORUS_SUM);
        if (r)
            z->err = nn__fail(r, "ZeRO-%d gradient reduce-scatter of layer %d (%s): %s", z->stage,
                              layer, nn_kind_name(L->kind), chorus_last_error(z->comm));
        used = g->off - L->param_off + g->chunk * (size_t)z->size;
    }
    memset(z->gbuf, 0, used * sizeof(float));
    z->comm_s += now_s() - t0;
}

void nn_zero_begin_backward(nn_zero *z, nn_model *m)
{
    if (z->stage == 1) return;
    if (z->size == 1 && z->stage == 2) {
        m->grad_hook = NULL;
        return;
    }
    m->grad_hook = reduce_layer;
    m->grad_hook_arg = z;
}

/* This rank's update of segment s from the summed gradient g of its chunk. */
static void update_chunk(const nn_zero *z, const nn_zero_seg *s, nn_model *m, nn_optim *o,
                         const float *g, float lr)
{
    size_t n, at = own_range(s, z->rank, &n);
    float *p = z->stage == 3 ? z->pshard + s->shard_off : m->params + at;
    float *mo = o->m ? o->m + s->shard_off : NULL;
    if (!n) return;
    if (o->kind == NN_SGD)
        chorus_sgd_update(p, g, mo, n, lr, o->momentum, o->nesterov, o->weight_decay);
    else
        chorus_adamw_update(p, g, mo, o->v + s->shard_off, n, lr, o->beta1, o->beta2, o->eps,
                            o->weight_decay, o->t);
}

/* Every rank's chunks of segment s into every rank's parameters. */
static chorus_result gather_segment(nn_zero *z, chorus_comm *comm, const nn_zero_seg *s,
                                    nn_model *m)
{
    size_t n, at = own_range(s, z->rank, &n);
    float *send = z->scratch + s->chunk * (size_t)z->size, *recv = z->scratch;
    memcpy(send, m->params + at, n * sizeof(float));
    memset(send + n, 0, (s->chunk - n) * sizeof(float));
    chorus_result r = chorus_allgather(comm, send, recv, s->chunk, CHORUS_FLOAT32);
    if (r) return nn__fail(r, "ZeRO parameter all-gather: %s", chorus_last_error(comm));
    memcpy(m->params + s->off, recv, s->len * sizeof(float));
    return CHORUS_OK;
}

/* The all-gather thread and what it shares with the caller (under mu). */
struct nn_zero_gather {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    chorus_comm *comm; /* split from z->comm: the caller's collectives may run meanwhile */
    nn_zero *z;
    nn_model *m;
    int *need;      /* per layer: segments gathered before its forward may run */
    int done;       /* segments of the current round gathered */
    uint64_t round; /* rounds asked for */
    uint64_t taken; /* rounds the thread has started */
    int quit;
    double busy_s; /* time in all-gathers not yet added to z->comm_s */
    chorus_result err;
    char msg[1024];
};

static void *gather_main(void *arg)
{
    struct nn_zero_gather *g = arg;
    nn_zero *z = g->z;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->quit && g->taken == g->round) pthread_cond_wait(&g->cv, &g->mu);
        if (g->taken == g->round) break; /* quit, and no round pending */
        g->taken = g->round;
        pthread_mutex_unlock(&g->mu);
        for (int s = 0; s < z->nseg; s++) {
            double t0 = now_s();
            chorus_result r = gather_segment(z, g->comm, &z->seg[s], g->m);
            pthread_mutex_lock(&g->mu);
            g->busy_s += now_s() - t0;
            if (r && !g->err) {
                g->err = r;
                snprintf(g->msg, sizeof(g->msg), "%s", nn_last_error());
            }
            g->done = r ? z->nseg : s + 1; /* a failure releases every waiter */
            pthread_cond_broadcast(&g->cv);
            pthread_mutex_unlock(&g->mu);
            if (r) break;
        }
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* Waits, with the thread's mutex held, until `need` segments of the round are gathered; the
 * time spent waiting goes to z->wait_s. Returns the thread's error, if any. */
static chorus_result wait_done(nn_zero *z, int need)
{
    struct nn_zero_gather *g = z->bg;
    double t0 = now_s();
    int waited = 0;
    while (g->done < need && !g->err) {
        pthread_cond_wait(&g->cv, &g->mu);
        waited = 1;
    }
    if (waited) z->wait_s += now_s() - t0;
    z->comm_s += g->busy_s;
    z->gather_s += g->busy_s;
    g->busy_s = 0;
    return g->err;
}

/* nn_forward's hook: layer `layer` runs once its segments are here. */
static void wait_layer(nn_model *m, int layer, void *arg)
{
    nn_zero *z = arg;
    pthread_mutex_lock(&z->bg->mu);
    chorus_result r = wait_done(z, z->bg->need[layer]);
    if (r && !m->comm_err) m->comm_err = nn__fail(r, "%s", z->bg->msg);
    pthread_mutex_unlock(&z->bg->mu);
}

chorus_result nn_zero_overlap(nn_zero *z, nn_model *m)
{
    if (z->bg || z->size == 1 || z->stage == 3) return CHORUS_OK; /* stage 3 gathers per layer */
    struct nn_zero_gather *g = calloc(1, sizeof(*g));
    if (!g || !(g->need = calloc((size_t)m->nlayers, sizeof(int)))) {
        free(g);
        return nn__fail(CHORUS_ERR_NOMEM, "nn_zero_overlap: out of memory");
    }
    for (int s = 0; s < z->nseg; s++)
        for (int i = 0; i < m->nlayers; i++) {
            const nn_layer *L = &m->layers[i];
            if (z->seg[s].off >= L->param_off && z->seg[s].off < L->param_off + L->nparams)
                g->need[i] = s + 1;
        }
    chorus_result r = chorus_comm_split(z->comm, 0, z->rank, &g->comm);
    if (r) {
        free(g->need);
        free(g);
        return nn__fail(r, "nn_zero_overlap: %s", chorus_last_error(z->comm));
    }
    g->z = z;
    g->m = m;
    g->done = z->nseg; /* the parameters are whole until the first step */
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->th, NULL, gather_main, g)) {
        chorus_finalize(g->comm);
        free(g->need);
        free(g);
        return nn__fail(CHORUS_ERR_SYSTEM, "nn_zero_overlap: cannot start a thread");
    }
    z->bg = g;
    m->fwd_hook = wait_layer;
    m->fwd_hook_arg = z;
    return CHORUS_OK;
}

chorus_result nn_zero_wait(nn_zero *z, nn_model *m)
{
    if (!z->bg) return CHORUS_OK;
    pthread_mutex_lock(&z->bg->mu);
    chorus_result r = wait_done(z, z->nseg);
    if (r) nn__fail(r, "%s", z->bg->msg);
    pthread_mutex_unlock(&z->bg->mu);
    if (r && !m->comm_err) m->comm_err = r;
    return r;
}

/* Ends the all-gather thread after its current round. */
static void stop_gather(nn_zero *z)
{
    struct nn_zero_gather *g = z->bg;
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->quit = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    chorus_finalize(g->comm);
    free(g->need);
    free(g);
    z->bg = NULL;
}

chorus_result nn_zero_sum_grads(nn_zero *z, nn_model *m)
{
    if (z->err) return z->err;
    if (z->summed) return CHORUS_OK;
    double t0 = now_s();
    if (z->stage == 1 && z->size > 1) {
        chorus_result r =
            chorus_allreduce(z->comm, m->grads, m->grads, m->nparams, CHORUS_FLOAT32, CHORUS_SUM);
        if (r) return nn__fail(r, "ZeRO-1 gradient allreduce: %s", chorus_last_error(z->comm));
    }
    if (z->stage == 2 && z->size == 1) /* no hook ran: the gradient is the layer's own */
        return nn__fail(CHORUS_ERR_INVALID_ARG, "ZeRO-2 needs more than one rank");
    z->comm_s += now_s() - t0;
    z->summed = 1;
    return CHORUS_OK;
}

chorus_result nn_zero_shard_norm(nn_zero *z, double *norm)
{
    double s = 0; /* the padding past a segment's end is zero: the layer's buffer was cleared */
    for (size_t i = 0; i < z->shard_n; i++) s += (double)z->gshard[i] * z->gshard[i];
    chorus_result r = chorus_allreduce(z->comm, &s, &s, 1, CHORUS_FLOAT64, CHORUS_SUM);
    if (r) return nn__fail(r, "ZeRO-%d gradient norm: %s", z->stage, chorus_last_error(z->comm));
    *norm = sqrt(s);
    return CHORUS_OK;
}

void nn_zero_scale_grads(nn_zero *z, nn_model *m, float k)
{
    float *g = z->stage >= 2 ? z->gshard : m->grads;
    size_t n = z->stage >= 2 ? z->shard_n : m->nparams;
    for (size_t i = 0; i < n; i++) g[i] *= k;
}

chorus_result nn_zero_step(nn_zero *z, nn_model *m, nn_optim *o, float lr)
{
    m->grad_hook = NULL;
    m->grad_hook_arg = NULL;
    if (z->err) return z->err;
    if (nn_zero_wait(z, m)) return m->comm_err; /* the last round is whole: forward waited */
    z->steps++;
    chorus_result r = nn_zero_sum_grads(z, m);
    if (r) return r;
    z->summed = 0;
    o->t++;
    for (int s = 0; s < z->nseg; s++) {
        const nn_zero_seg *g = &z->seg[s];
        size_t n, at = own_range(g, z->rank, &n);
        const float *grad = z->stage >= 2 ? z->gshard + g->shard_off : m->grads + at;
        update_chunk(z, g, m, o, grad, lr);
    }
    if (z->stage == 3) { /* the next pass gathers the updated chunks, layer by layer */
        z->resident = -1;
        return CHORUS_OK;
    }
    if (z->bg) { /* the thread gathers; the next forward waits per layer */
        pthread_mutex_lock(&z->bg->mu);
        z->bg->done = 0;
        z->bg->round++;
        pthread_cond_broadcast(&z->bg->cv);
        pthread_mutex_unlock(&z->bg->mu);
        return CHORUS_OK;
    }
    double t0 = now_s();
    for (int s = 0; s < z->nseg; s++) {
        chorus_result r = gather_segment(z, z->comm, &z->seg[s], m);
        if (r) return r;
    }
    z->comm_s += now_s() - t0;
    z->gather_s += now_s() - t0;
    return CHORUS_OK;
}

/* ---- stage 3 ---------------------------------------------------------------------------- */

/* Layer `layer`'s parameters from every rank's chunks into z->pbuf. */
static chorus_result gather_layer(nn_zero *z, nn_model *m, int layer)
{
    const nn_layer *L = &m->layers[layer];
    double t0 = now_s();
    for (int s = z->first_seg[layer]; s < z->first_seg[layer + 1]; s++) {
        const nn_zero_seg *g = &z->seg[s];
        chorus_result r =
            chorus_allgather(z->comm, z->pshard + g->shard_off, z->pbuf + (g->off - L->param_off),
                             g->chunk, CHORUS_FLOAT32);
        if (r) {
            z->resident = -1;
            return nn__fail(r, "ZeRO-3 parameter all-gather of layer %d (%s): %s", layer,
                            nn_kind_name(L->kind), chorus_last_error(z->comm));
        }
    }
    z->resident = layer;
    z->gathers++;
    z->comm_s += now_s() - t0;
    z->gather_s += now_s() - t0;
    return CHORUS_OK;
}

/* The model's forward hook at stage 3: the layer's parameters, unless the buffer holds them
 * already (the same layer read again: the tied output layer, a backward after its forward).
 * A failure is latched in m->comm_err; a model that failed gathers nothing more. */
static void gather_hook(nn_model *m, int layer, void *arg)
{
    nn_zero *z = arg;
    if (z->resident == layer || m->comm_err || !m->layers[layer].nparams) return;
    chorus_result r = gather_layer(z, m, layer);
    if (r) m->comm_err = r;
}

/* One vector of floats between its chunks on every rank (shard, shard_n floats) and whole on
 * rank root (root -1: every rank), segment by segment through z->pbuf: to_whole all-gathers
 * the chunks, else root's segments are broadcast and each rank keeps its chunk. */
static chorus_result move_whole(nn_zero *z, int root, float *shard, float *whole, int to_whole)
{
    /* the landing: stage 3's group buffer (its parameters then gathered again), else the
     * all-gather scratch, (size + 1) x the largest chunk */
    float *buf = z->stage == 3 ? z->pbuf : z->scratch;
    if (z->stage == 3) z->resident = -1;
    int here = root < 0 || root == z->rank;
    for (int s = 0; s < z->nseg; s++) {
        const nn_zero_seg *g = &z->seg[s];
        size_t padded = g->chunk * (size_t)z->size;
        chorus_result r;
        if (to_whole) {
            r = chorus_allgather(z->comm, shard + g->shard_off, buf, g->chunk, CHORUS_FLOAT32);
        } else {
            if (here) {
                memcpy(buf, whole + g->off, g->len * sizeof(float));
                memset(buf + g->len, 0, (padded - g->len) * sizeof(float));
            }
            r = chorus_broadcast(z->comm, buf, padded, CHORUS_FLOAT32, root);
        }
        if (r)
            return nn__fail(r, "ZeRO-%d %s the whole model: %s", z->stage,
                            to_whole ? "gathering" : "scattering", chorus_last_error(z->comm));
        if (to_whole && here) memcpy(whole + g->off, buf, g->len * sizeof(float));
        if (!to_whole)
            memcpy(shard + g->shard_off, buf + (size_t)z->rank * g->chunk,
                   g->chunk * sizeof(float));
    }
    return CHORUS_OK;
}

chorus_result nn_zero_gather_whole(nn_zero *z, int root, const float *om, const float *ov,
                                   float *whole_p, float *whole_m, float *whole_v)
{
    if (z->stage != 3 && whole_p)
        return nn__fail(CHORUS_ERR_INVALID_ARG, "nn_zero_gather_whole: parameters at stage 3");
    chorus_result r = z->stage == 3 ? move_whole(z, root, z->pshard, whole_p, 1) : CHORUS_OK;
    if (!r && om) r = move_whole(z, root, (float *)om, whole_m, 1);
    if (!r && ov) r = move_whole(z, root, (float *)ov, whole_v, 1);
    return r;
}

chorus_result nn_zero_scatter_whole(nn_zero *z, int root, const float *whole_p,
                                    const float *whole_m, const float *whole_v, float *om,
                                    float *ov)
{
    if ((z->stage != 3 && whole_p) || root < 0)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_zero_scatter_whole: parameters at stage 3, one root");
    chorus_result r =
        z->stage == 3 ? move_whole(z, root, z->pshard, (float *)whole_p, 0) : CHORUS_OK;
    if (!r && om) r = move_whole(z, root, om, (float *)whole_m, 0);
    if (!r && ov) r = move_whole(z, root, ov, (float *)whole_v, 0);
    return r;
}
