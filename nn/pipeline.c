/*
 * pipeline.c - pipeline-parallel training of an nn_model: the layers cut into stages on
 * consecutive ranks, a step's micro-batches run by a chorus/pipeline.h schedule, activations
 * forward and their gradients backward with non-blocking point-to-point, and the grid of
 * communicators that combines it with data parallelism (docs/PARALLELISM.md).
 *
 * Every micro-batch in flight needs its own activations until its backward: a stash slot is
 * a replica of the stage model whose parameters and gradients are the stage model's (so
 * backward passes accumulate into one gradient buffer) but whose layer outputs, caches and
 * backward scratch are its own, plus the received input and output gradient. Slots are made
 * on first need and reused, so the ones held are the most that were ever in flight.
 */
#include <malloc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chorus/nn.h"
#include "nn_internal.h"

enum { TAG_ACT = 0, TAG_GRAD = 1 }; /* tag = 2 * micro-batch + kind */

typedef struct pipe_slot {
    nn_model *m;             /* replica: own activations, the stage's params and grads */
    float *xin;              /* (B, in) received input (stages after the first) */
    float *gout;             /* (B, out) gradient of the output: received, or dlogits */
    chorus_request *send[2]; /* activations out, input gradient out: done before reuse */
    int micro;               /* the micro-batch using it, -1 when free */
    size_t bytes;            /* what its buffers hold, measured with malloc_usable_size */
} pipe_slot;

struct nn_pipe {
    chorus_comm *pipe, *dp; /* this pipeline's stages; this stage's replicas */
    int stage, stages, replica, replicas, world_base;
    int lo, hi;                  /* layers [lo, hi) of the full model */
    size_t *stage_off, *stage_n; /* (stages) each stage's slice of the full parameters */
    chorus_pipe_schedule sched;
    int max_micro;
    size_t in_f, out_f;
    nn_model *layout; /* the full model's layer shapes (no buffers), for new slots */
    pipe_slot *slots;
    int nslots;
    int *slot_of;          /* (micro) slot of a micro-batch in flight, -1 */
    chorus_request **recv; /* (micro) posted receive of its input or output gradient */
    int inflight, peak_inflight;
    double step_s, wait_s;
    uint64_t steps;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Multiply-adds of layer i per sample in a training step: forward, weight gradient, and
 * input gradient (which the model's first layer does not compute); other layers count their
 * output size, forward and backward. */
static double layer_cost(const nn_layer *L, int i)
{
    double macs;
    switch (L->kind) {
    case NN_LINEAR: macs = (double)nn__in_features(L) * (double)L->out_c; break;
    case NN_CONV2D: macs = (double)L->in_c * L->k * L->k * (double)nn__out_features(L); break;
    default: return 2.0 * (double)nn__out_features(L);
    }
    return (i == 0 ? 2.0 : 3.0) * macs;
}

/* Cuts n layers into p consecutive non-empty groups minimising the largest group's cost
 * (exact, by dynamic programming); first[s] is group s's first layer, first[p] = n. */
static chorus_result balance(const nn_model *full, int p, int *first)
{
    int n = full->nlayers;
    double *pre = calloc((size_t)n + 1, sizeof(double));
    double *best = malloc((size_t)(p + 1) * (size_t)(n + 1) * sizeof(double));
    int *cut = malloc((size_t)(p + 1) * (size_t)(n + 1) * sizeof(int));
    if (!pre || !best || !cut) {
        free(pre);
        free(best);
        free(cut);
        return nn__fail(CHORUS_ERR_NOMEM, "pipeline: out of memory");
    }
    for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + layer_cost(&full->layers[i], i);
#define AT(a, k, i) a[(size_t)(k) * (size_t)(n + 1) + (size_t)(i)]
    /* best(k, i): the least largest cost of the first i layers in k groups */
    for (int i = 0; i <= n; i++) AT(best, 1, i) = pre[i];
    for (int k = 2; k <= p; k++)
        for (int i = k; i <= n; i++) {
            AT(best, k, i) = -1;
            for (int j = k - 1; j < i; j++) {
                double c = AT(best, k - 1, j), last = pre[i] - pre[j];
                if (last > c) c = last;
                if (AT(best, k, i) < 0 || c < AT(best, k, i)) {
                    AT(best, k, i) = c;
                    AT(cut, k, i) = j;
                }
            }
        }
    first[p] = n;
    for (int k = p, i = n; k >= 2; k--) {
        i = AT(cut, k, i);
        first[k - 1] = i;
    }
    first[0] = 0;
#undef AT
    free(pre);
    free(best);
    free(cut);
    return CHORUS_OK;
}

/* A model of layers [lo, hi) of full, same kinds and shapes, finalized for max_batch. */
static chorus_result slice_model(const nn_model *full, int lo, int hi, int max_batch,
                                 nn_model **out)
{
    const nn_layer *F = &full->layers[lo];
    nn_model *m = nn_model_create(F->in_c, F->in_h, F->in_w);
    if (!m) return nn__fail(CHORUS_ERR_NOMEM, "pipeline: out of memory");
    chorus_result r = CHORUS_OK;
    for (int i = lo; i < hi && r == CHORUS_OK; i++) {
        const nn_layer *L = &full->layers[i];
        switch (L->kind) {
        case NN_LINEAR: r = nn_add_linear(m, L->out_c); break;
        case NN_CONV2D: r = nn_add_conv2d(m, L->out_c, L->k, L->stride, L->pad); break;
        case NN_MAXPOOL2D: r = nn_add_maxpool2d(m, L->k, L->stride); break;
        case NN_RELU: r = nn_add_relu(m); break;
        case NN_GELU: r = nn_add_gelu(m); break;
        case NN_DROPOUT: r = nn_add_dropout(m, L->p); break;
        case NN_FLATTEN: r = nn_add_flatten(m); break;
        case NN_LAYERNORM: r = nn_add_layernorm(m); break;
        default: r = nn__fail(CHORUS_ERR_INVALID_ARG, "pipeline: unknown layer kind"); break;
        }
    }
    if (r == CHORUS_OK) r = nn_model_finalize(m, max_batch);
    if (r != CHORUS_OK) {
        nn_model_destroy(m);
        return r;
    }
    m->seed = full->seed;
    m->training = full->training;
    m->rank = full->rank;
    *out = m;
    return CHORUS_OK;
}

static size_t usable(const void *ptr)
{
    return ptr ? malloc_usable_size((void *)ptr) : 0;
}

/* Bytes of a slot's own buffers (not the shared parameters and gradients). */
static size_t slot_bytes(const pipe_slot *s)
{
    size_t b = usable(s->xin) + usable(s->gout) + usable(s->m->dbuf[0]) + usable(s->m->dbuf[1]);
    for (int i = 0; i < s->m->nlayers; i++) {
        const nn_layer *L = &s->m->layers[i];
        b += usable(L->buf) + usable(L->cache) + usable(L->scratch) + usable(L->idx);
    }
    return b;
}

static void slot_free(nn_pipe *p, pipe_slot *s)
{
    if (s != &p->slots[0] && s->m) { /* a replica borrows slot 0's parameters */
        s->m->params = NULL;
        s->m->grads = NULL;
    }
    nn_model_destroy(s->m);
    free(s->xin);
    free(s->gout);
}

/* A new slot: slot 0 owns the stage's parameters, later ones point at them. */
static chorus_result slot_add(nn_pipe *p)
{
    pipe_slot *ns = realloc(p->slots, (size_t)(p->nslots + 1) * sizeof(*ns));
    if (!ns) return nn__fail(CHORUS_ERR_NOMEM, "pipeline: out of memory for a stash slot");
    p->slots = ns;
    pipe_slot *s = &p->slots[p->nslots];
    memset(s, 0, sizeof(*s));
    s->micro = -1;
    chorus_result r = slice_model(p->layout, p->lo, p->hi, p->max_micro, &s->m);
    if (r != CHORUS_OK) return r;
    size_t B = (size_t)p->max_micro;
    if (p->stage > 0) s->xin = malloc(B * p->in_f * sizeof(float));
    s->gout = malloc(B * p->out_f * sizeof(float));
    if ((p->stage > 0 && !s->xin) || !s->gout) {
        slot_free(p, s);
        return nn__fail(CHORUS_ERR_NOMEM, "pipeline: out of memory for a stash slot");
    }
    if (p->nslots > 0) {
        nn_model *own = p->slots[0].m, *m = s->m;
        free(m->params);
        free(m->grads);
        m->params = own->params;
        m->grads = own->grads;
        for (int i = 0; i < m->nlayers; i++) {
            m->layers[i].w = own->layers[i].w;
            m->layers[i].b = own->layers[i].b;
            m->layers[i].dw = own->layers[i].dw;
            m->layers[i].db = own->layers[i].db;
        }
    }
    s->bytes = slot_bytes(s);
    p->nslots++;
    return CHORUS_OK;
}

/* Sets the message for a failed point-to-point call with neighbour stage `peer`. */
static chorus_result peer_fail(nn_pipe *p, chorus_result r, int peer, const char *what, int micro)
{
    /* a neighbour that sent something else is there, and not "gone" */
    const char *state = r == CHORUS_ERR_MISMATCH ? "does not match it" : "is gone";
    return nn__fail(
        r, "pipeline stage %d (rank %d): %s of micro-batch %d, stage %d (rank %d) %s: %s (%s)",
        p->stage, p->world_base + p->stage, what, micro, peer, p->world_base + peer, state,
        chorus_strerror(r), chorus_last_error(p->pipe));
}

/* Sets the message for a failed collective over the pipeline (whose rank i is stage i) or,
 * with dp set, over the replicas of this stage (whose rank i is replica i): the library's
 * detail numbers ranks within that communicator, so the message says how they map. */
static chorus_result group_fail(nn_pipe *p, chorus_result r, int dp, const char *what)
{
    if (dp)
        return nn__fail(r,
                        "pipeline stage %d (rank %d): %s: %s (there, rank i is replica i of "
                        "stage %d: world rank i*%d+%d)",
                        p->stage, p->world_base + p->stage, what, chorus_last_error(p->dp),
                        p->stage, p->stages, p->stage);
    return nn__fail(r,
                    "pipeline stage %d (rank %d): %s: %s (there, rank i is stage i: world rank "
                    "%d+i)",
                    p->stage, p->world_base + p->stage, what, chorus_last_error(p->pipe),
                    p->world_base);
}

/* Completes a slot's earlier sends (its buffers are then free to overwrite). */
static chorus_result slot_drain(nn_pipe *p, pipe_slot *s)
{
    for (int k = 0; k < 2; k++) {
        if (!s->send[k]) continue;
        double t0 = now_s();
        chorus_result r = chorus_wait(s->send[k], NULL);
        p->wait_s += now_s() - t0;
        s->send[k] = NULL;
        if (r != CHORUS_OK)
            return peer_fail(p, r, k == 0 ? p->stage + 1 : p->stage - 1,
                             k == 0 ? "sending the activations" : "sending the gradient", s->micro);
    }
    return CHORUS_OK;
}

/* A free slot for micro-batch j (made when every slot is in use). */
static chorus_result slot_take(nn_pipe *p, int j)
{
    int i = 0;
    while (i < p->nslots && p->slots[i].micro >= 0) i++;
    if (i == p->nslots) {
        chorus_result r = slot_add(p);
        if (r != CHORUS_OK) return r;
    }
    chorus_result r = slot_drain(p, &p->slots[i]);
    if (r != CHORUS_OK) return r;
    p->slots[i].micro = j;
    p->slot_of[j] = i;
    return CHORUS_OK;
}

void nn_pipe_destroy(nn_pipe *p)
{
    if (!p) return;
    for (int i = 0; i < p->nslots; i++) {
        for (int k = 0; k < 2; k++)
            if (p->slots[i].send[k]) chorus_wait(p->slots[i].send[k], NULL);
    }
    if (p->recv)
        for (int j = 0; j < p->sched.micro; j++)
            if (p->recv[j]) chorus_wait(p->recv[j], NULL);
    for (int i = p->nslots - 1; i >= 0; i--) slot_free(p, &p->slots[i]);
    free(p->slots);
    free(p->slot_of);
    free(p->recv);
    free(p->stage_off);
    free(p->stage_n);
    chorus_pipe_schedule_free(&p->sched);
    nn_model_destroy(p->layout);
    if (p->pipe) chorus_finalize(p->pipe);
    if (p->dp) chorus_finalize(p->dp);
    free(p);
}

/* The full model's layer shapes without any buffer, kept to make the stash replicas of
 * layers [lo, hi) on demand. */
static chorus_result keep_layout(nn_pipe *p, const nn_model *full)
{
    nn_model *m = nn_model_create(full->in_c, full->in_h, full->in_w);
    if (!m) return nn__fail(CHORUS_ERR_NOMEM, "pipeline: out of memory");
    m->layers = malloc((size_t)full->nlayers * sizeof(nn_layer));
    if (!m->layers) {
        nn_model_destroy(m);
        return nn__fail(CHORUS_ERR_NOMEM, "pipeline: out of memory");
    }
    for (int i = 0; i < full->nlayers; i++) {
        nn_layer L = full->layers[i];
        L.w = L.b = L.dw = L.db = L.out = L.buf = L.cache = L.scratch = NULL;
        L.in = NULL;
        L.idx = NULL;
        m->layers[i] = L;
    }
    m->nlayers = m->cap = full->nlayers;
    m->seed = full->seed;
    m->training = full->training;
    m->rank = full->rank;
    p->layout = m;
    return CHORUS_OK;
}

chorus_result nn_pipe_create(const nn_model *full, chorus_comm *world, int stages, int micro,
                             chorus_pipe_kind kind, int max_micro, nn_pipe **out)
{
    if (!out) return nn__fail(CHORUS_ERR_INVALID_ARG, "nn_pipe_create: out is NULL");
    *out = NULL;
    if (!full || !full->params || !world || stages < 1 || micro < 1 || max_micro < 1)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_pipe_create: needs a finalized model, a communicator, and stages, "
                        "micro-batches and micro-batch size of at least 1");
    int size = chorus_size(world), rank = chorus_rank(world);
    if (stages > full->nlayers)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "the model has %d layers: it cannot be cut into %d pipeline stages",
                        full->nlayers, stages);
    if (size % stages)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "%d pipeline stages do not divide the %d ranks: the world must be "
                        "(data-parallel replicas) x (stages)",
                        stages, size);
    nn_pipe *p = calloc(1, sizeof(*p));
    if (!p) return nn__fail(CHORUS_ERR_NOMEM, "pipeline: out of memory");
    p->stages = stages;
    p->stage = rank % stages;
    p->replicas = size / stages;
    p->replica = rank / stages;
    p->world_base = rank - p->stage;
    p->max_micro = max_micro;
    chorus_result r;
    int *first = malloc((size_t)(stages + 1) * sizeof(int));
    p->stage_off = malloc((size_t)stages * sizeof(size_t));
    p->stage_n = malloc((size_t)stages * sizeof(size_t));
    p->slot_of = malloc((size_t)micro * sizeof(int));
    p->recv = calloc((size_t)micro, sizeof(*p->recv));
    if (!first || !p->stage_off || !p->stage_n || !p->slot_of || !p->recv) {
        r = nn__fail(CHORUS_ERR_NOMEM, "pipeline: out of memory");
        goto fail;
    }
    if ((r = balance(full, stages, first)) != CHORUS_OK) goto fail;
    for (int s = 0; s < stages; s++) {
        const nn_layer *a = &full->layers[first[s]];
        const nn_layer *z = &full->layers[first[s + 1] - 1];
        p->stage_off[s] = a->param_off;
        p->stage_n[s] = z->param_off + z->nparams - a->param_off;
    }
    p->lo = first[p->stage];
    p->hi = first[p->stage + 1];
    p->in_f = nn__in_features(&full->layers[p->lo]);
    p->out_f = nn__out_features(&full->layers[p->hi - 1]);
    for (int j = 0; j < micro; j++) p->slot_of[j] = -1;
    if ((r = chorus_pipe_schedule_init(&p->sched, kind, stages, micro)) != CHORUS_OK) {
        r = nn__fail(r, "pipeline: cannot build the %s schedule of %d stages and %d micro-batches",
                     chorus_pipe_kind_name(kind) ? chorus_pipe_kind_name(kind) : "unknown", stages,
                     micro);
        goto fail;
    }
    /* the grid: pipelines of consecutive ranks, and the replicas of each stage */
    if ((r = chorus_comm_split(world, p->replica, p->stage, &p->pipe)) != CHORUS_OK ||
        (r = chorus_comm_split(world, p->stage, p->replica, &p->dp)) != CHORUS_OK) {
        r = nn__fail(r, "pipeline: cannot split the ranks into pipelines: %s",
                     chorus_last_error(world));
        goto fail;
    }
    if ((r = keep_layout(p, full)) != CHORUS_OK || (r = slot_add(p)) != CHORUS_OK) goto fail;
    nn_pipe_slice(p, full->params, p->slots[0].m->params);
    free(first);
    *out = p;
    return CHORUS_OK;
fail:
    free(first);
    nn_pipe_destroy(p);
    return r;
}

nn_model *nn_pipe_model(nn_pipe *p)
{
    return p->slots[0].m;
}

chorus_comm *nn_pipe_replicas(nn_pipe *p)
{
    return p->dp;
}

/* Rows [off, off+nb) of the step: micro-batch j's share, as chorus-train --accum cuts it. */
static void micro_range(int nloc, int m, int j, int *off, int *nb)
{
    int base = nloc / m, extra = nloc % m;
    *nb = base + (j < extra);
    *off = j * base + (j < extra ? j : extra);
}

/* Posts the receive of micro-batch j's input (a stage after the first), taking its slot. */
static chorus_result post_input(nn_pipe *p, int j, int nloc)
{
    int off, nb;
    micro_range(nloc, p->sched.micro, j, &off, &nb);
    chorus_result r = slot_take(p, j);
    if (r != CHORUS_OK) return r;
    pipe_slot *s = &p->slots[p->slot_of[j]];
    r = chorus_irecv(p->pipe, s->xin, (size_t)nb * p->in_f, CHORUS_FLOAT32, p->stage - 1,
                     2 * j + TAG_ACT, &p->recv[j]);
    return r == CHORUS_OK ? r : peer_fail(p, r, p->stage - 1, "receiving the activations", j);
}

/* Waits for micro-batch j's posted receive. */
static chorus_result wait_recv(nn_pipe *p, int j, int peer, const char *what)
{
    double t0 = now_s();
    chorus_result r = chorus_wait(p->recv[j], NULL);
    p->wait_s += now_s() - t0;
    p->recv[j] = NULL;
    return r == CHORUS_OK ? r : peer_fail(p, r, peer, what, j);
}

typedef struct step_args {
    const float *x;
    const int32_t *y;
    int nloc;
    float scale;
    uint64_t step;
    double *stats;
} step_args;

static chorus_result run_forward(nn_pipe *p, int j, const step_args *a)
{
    int off, nb, last = p->stage == p->stages - 1;
    micro_range(a->nloc, p->sched.micro, j, &off, &nb);
    chorus_result r;
    const float *in;
    if (p->stage == 0) {
        if ((r = slot_take(p, j)) != CHORUS_OK) return r;
        in = a->x + (size_t)off * p->in_f;
    } else {
        if ((r = wait_recv(p, j, p->stage - 1, "receiving the activations")) != CHORUS_OK) return r;
        in = p->slots[p->slot_of[j]].xin;
    }
    pipe_slot *s = &p->slots[p->slot_of[j]];
    if (++p->inflight > p->peak_inflight) p->peak_inflight = p->inflight;
    s->m->step = a->step * (uint64_t)p->sched.micro + (uint64_t)j;
    const float *z = nn_forward(s->m, in, nb);
    if (last) {
        int hits = 0;
        a->stats[0] += nn_xent(z, a->y + off, nb, (int)p->out_f, a->scale, s->gout, &hits);
        a->stats[1] += hits;
        return CHORUS_OK;
    }
    r = chorus_isend(p->pipe, z, (size_t)nb * p->out_f, CHORUS_FLOAT32, p->stage + 1,
                     2 * j + TAG_ACT, &s->send[0]);
    if (r != CHORUS_OK) return peer_fail(p, r, p->stage + 1, "sending the activations", j);
    /* the gradient of this micro-batch may come any time now */
    r = chorus_irecv(p->pipe, s->gout, (size_t)nb * p->out_f, CHORUS_FLOAT32, p->stage + 1,
                     2 * j + TAG_GRAD, &p->recv[j]);
    return r == CHORUS_OK ? r : peer_fail(p, r, p->stage + 1, "receiving the gradient", j);
}

static chorus_result run_backward(nn_pipe *p, int j, const step_args *a)
{
    int off, nb;
    micro_range(a->nloc, p->sched.micro, j, &off, &nb);
    chorus_result r;
    if (p->stage < p->stages - 1 &&
        (r = wait_recv(p, j, p->stage + 1, "receiving the gradient")) != CHORUS_OK)
        return r;
    pipe_slot *s = &p->slots[p->slot_of[j]];
    if (p->stage == 0) {
        nn_backward(s->m, s->gout, nb);
    } else {
        const float *dx = nn_backward_input(s->m, s->gout, nb);
        r = chorus_isend(p->pipe, dx, (size_t)nb * p->in_f, CHORUS_FLOAT32, p->stage - 1,
                         2 * j + TAG_GRAD, &s->send[1]);
        if (r != CHORUS_OK) return peer_fail(p, r, p->stage - 1, "sending the gradient", j);
    }
    s->micro = -1; /* free once its sends are done (slot_take drains them) */
    p->slot_of[j] = -1;
    p->inflight--;
    return CHORUS_OK;
}

/* The next forward at or after step k of this stage's list whose input is not yet posted,
 * posted now (stages after the first): the receive runs while the stage computes. */
static chorus_result prefetch(nn_pipe *p, const chorus_pipe_step *l, int k, int nloc)
{
    for (; k < p->sched.nsteps; k++) {
        if (l[k].op != CHORUS_PIPE_FWD) continue;
        int j = l[k].micro;
        if (p->slot_of[j] >= 0) return CHORUS_OK; /* posted already */
        return post_input(p, j, nloc);
    }
    return CHORUS_OK;
}

chorus_result nn_pipe_step(nn_pipe *p, const float *x, const int32_t *y, int nloc, float grad_scale,
                           uint64_t step, double stats[2])
{
    if (nloc < 0 || (nloc + p->sched.micro - 1) / p->sched.micro > p->max_micro)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "pipeline: %d samples cannot be cut into %d micro-batches of at most %d",
                        nloc, p->sched.micro, p->max_micro);
    step_args a = {x, y, nloc, grad_scale, step, stats};
    nn_model *own = p->slots[0].m;
    nn_zero_grad(own);
    chorus_result r = chorus_barrier(p->pipe); /* the step starts together on every stage */
    if (r != CHORUS_OK) return group_fail(p, r, 0, "starting a step");
    double t0 = now_s();
    const chorus_pipe_step *l = chorus_pipe_stage_steps(&p->sched, p->stage);
    for (int k = 0; k < p->sched.nsteps; k++) {
        if (p->stage > 0 && (r = prefetch(p, l, k, nloc)) != CHORUS_OK) return r;
        if (p->stage > 0 && l[k].op == CHORUS_PIPE_FWD && (r = prefetch(p, l, k + 1, nloc)))
            return r;
        r = l[k].op == CHORUS_PIPE_FWD ? run_forward(p, l[k].micro, &a)
                                       : run_backward(p, l[k].micro, &a);
        if (r != CHORUS_OK) return r;
    }
    for (int i = 0; i < p->nslots; i++)
        if ((r = slot_drain(p, &p->slots[i])) != CHORUS_OK) return r;
    /* the stage idles until the whole pipeline is done: that is bubble too */
    double t1 = now_s();
    r = chorus_barrier(p->pipe);
    if (r != CHORUS_OK) return group_fail(p, r, 0, "ending a step");
    double t2 = now_s();
    p->wait_s += t2 - t1;
    p->step_s += t2 - t0;
    p->steps++;
    return CHORUS_OK;
}

chorus_result nn_pipe_evaluate(nn_pipe *p, const float *x, const int32_t *y, int n, double stats[2])
{
    nn_model *m = p->slots[0].m; /* between steps every slot is free */
    int was = m->training, last = p->stage == p->stages - 1, tag = 2 * p->sched.micro;
    chorus_result r = CHORUS_OK;
    m->training = 0;
    for (int off = 0; off < n && r == CHORUS_OK; off += p->max_micro) {
        int nb = n - off < p->max_micro ? n - off : p->max_micro;
        const float *in = x + (size_t)off * p->in_f;
        if (p->stage > 0) {
            /* not timed: the bubble is the training step's */
            r = chorus_recv(p->pipe, p->slots[0].xin, (size_t)nb * p->in_f, CHORUS_FLOAT32,
                            p->stage - 1, tag);
            if (r != CHORUS_OK) {
                r = peer_fail(p, r, p->stage - 1, "receiving the evaluation activations", off);
                break;
            }
            in = p->slots[0].xin;
        }
        const float *z = nn_forward(m, in, nb);
        if (last) {
            int hits = 0;
            stats[0] += nn_xent(z, y + off, nb, (int)p->out_f, 0.0f, NULL, &hits);
            stats[1] += hits;
        } else if ((r = chorus_send(p->pipe, z, (size_t)nb * p->out_f, CHORUS_FLOAT32, p->stage + 1,
                                    tag)) != CHORUS_OK) {
            r = peer_fail(p, r, p->stage + 1, "sending the evaluation activations", off);
        }
    }
    m->training = was;
    return r;
}

chorus_result nn_pipe_sync_grads(nn_pipe *p)
{
    if (p->replicas == 1) return CHORUS_OK;
    nn_model *own = p->slots[0].m;
    chorus_result r =
        chorus_allreduce(p->dp, own->grads, own->grads, own->nparams, CHORUS_FLOAT32, CHORUS_SUM);
    return r == CHORUS_OK ? r : group_fail(p, r, 1, "summing the gradients over its replicas");
}

chorus_result nn_pipe_gather(nn_pipe *p, const float *stage, float *full)
{
    memcpy(full + p->stage_off[p->stage], stage, p->stage_n[p->stage] * sizeof(float));
    for (int s = 0; s < p->stages; s++) {
        chorus_result r =
            chorus_broadcast(p->pipe, full + p->stage_off[s], p->stage_n[s], CHORUS_FLOAT32, s);
        if (r != CHORUS_OK) return group_fail(p, r, 0, "gathering the stages' slices");
    }
    return CHORUS_OK;
}

void nn_pipe_slice(const nn_pipe *p, const float *full, float *stage)
{
    memcpy(stage, full + p->stage_off[p->stage], p->stage_n[p->stage] * sizeof(float));
}

void nn_pipe_get_stats(const nn_pipe *p, nn_pipe_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->stage = p->stage;
    st->stages = p->stages;
    st->replica = p->replica;
    st->replicas = p->replicas;
    st->layer_lo = p->lo;
    st->layer_hi = p->hi;
    const nn_model *own = p->slots[0].m;
    st->params_bytes = usable(own->params);
    st->grads_bytes = usable(own->grads);
    for (int i = 0; i < p->nslots; i++) st->activations_bytes += p->slots[i].bytes;
    st->peak_inflight = p->peak_inflight;
    st->step_s = p->step_s;
    st->wait_s = p->wait_s;
    st->steps = p->steps;
}
