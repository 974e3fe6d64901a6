/*
 * dist.c - data-parallel synchronisation for the trainer: broadcast of the initial
 * parameters and the summing of the gradients over the ranks. The only file of libchorus_nn
 * that talks to the communicator or to the training runtime.
 *
 * Three ways to sum the gradients (nn_sync_mode):
 *   fused  - after backward, one blocking chorus_allreduce over the whole gradient buffer;
 *   layer  - after backward, one blocking chorus_allreduce per layer, last layer first;
 *   engine - during backward: nn_backward calls a hook after each layer, which enqueues that
 *            layer's gradient (weights and biases, contiguous) with the engine under the
 *            layer's name ("linear3", "conv2d2"); the engine thread negotiates and reduces it
 *            while the main thread differentiates the layers below. nn_dist_sync_grads then
 *            waits for every handle. Under PowerSGD over a model's own tensors
 *            (nn_dist_set_tensors) the hook enqueues each tensor of the layer instead.
 * Every mode sums in place with CHORUS_SUM, so at two ranks (a + b) all three give the same
 * bits.
 *
 * Timing, for the metrics: wait_s / grad_wait_s is the time the caller was blocked (exposed
 * communication); comm_s is how long gradient communication took in wall time: in engine mode
 * the time at least one gradient tensor was on its way, from its enqueue to the end of its
 * handle (recorded by the handles' callbacks on the engine thread); hidden_s is the part of
 * that before the caller started to wait, less the time the caller's thread was off the CPU
 * meanwhile (when cores are scarce the engine thread takes the caller's core, and that is
 * not overlap): the part that overlapped backward, a lower bound.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chorus/engine.h"
#include "chorus/nn.h"
#include "nn_internal.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread. */
static double thread_cpu_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One tensor handed to the engine: the gradients of layers lo..hi, which are one contiguous
 * range of model->grads (layers lie in order in it). Enqueued when backward finishes layer lo
 * (it runs from the last layer down), so the bucket's layers are all final by then. */
typedef struct grad_bucket {
    int lo, hi;
    size_t off, count;
    int dense; /* a vector of nn_dist_set_tensors under PowerSGD: sent uncompressed */
    char name[200];
    chorus_engine_handle *h;  /* enqueued this step, or NULL */
    double t_enq;             /* when it was enqueued */
    double t_end;             /* when its handle ended (set by the callback, under x->mu) */
    struct nn_dist_engine *x; /* for the callback */
} grad_bucket;

/* Engine mode state. The buckets are the main thread's; the fields under mu are shared with
 * the callbacks, which run on the engine thread. */
struct nn_dist_engine {
    chorus_engine *eng;
    int nlayers;          /* of the model the buckets were made for; 0 before the first step */
    int nbuckets;         /* last layer's bucket first */
    grad_bucket *b;       /* (nbuckets) */
    int *bucket_of_lo;    /* (nlayers) bucket whose lowest layer this is, or -1 */
    int *nbuckets_of_lo;  /* (nlayers) how many buckets from bucket_of_lo it closes (1; PowerSGD
                             over the model's tensors: the layer's tensors) */
    int enqueued;         /* handles enqueued this step */
    double t_first;       /* wall time of the first enqueue of this step */
    double cpu_first;     /* the caller's thread CPU time then */
    char hook_err[512];   /* an enqueue that failed inside backward */
    chorus_result hook_r; /* and its result */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ended; /* callbacks seen this step (under mu) */
};

static chorus_result failed(nn_dist *d, const char *what, chorus_result r)
{
    return nn__fail(r, "%s failed: %s (%s)", what, chorus_strerror(r), chorus_last_error(d->comm));
}

chorus_result nn_dist_init(nn_dist *d, chorus_comm *comm, nn_sync_mode mode)
{
    d->comm = comm;
    d->rank = comm ? chorus_rank(comm) : 0;
    d->size = comm ? chorus_size(comm) : 1;
    d->mode = mode;
    d->wait_s = d->comm_s = d->grad_wait_s = d->hidden_s = 0.0;
    d->in_backward = 0;
    d->eng = NULL;
    d->bucket_bytes = 0;
    d->comp = NULL;
    d->tensors = NULL;
    d->ntensors = 0;
    d->vec = NULL;
    d->vec_n = 0;
    if (mode != NN_SYNC_ENGINE || d->size == 1) return CHORUS_OK;
    struct nn_dist_engine *x = calloc(1, sizeof(*x));
    if (!x) return nn__fail(CHORUS_ERR_NOMEM, "nn_dist_init: out of memory");
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    d->eng = x;
    chorus_engine_opts eo;
    chorus_engine_opts_init(&eo);
    /* A step enqueues a handful of tensors, each as soon as it exists: negotiate at once
     * rather than gathering them for a cycle (CHORUS_CYCLE_TIME_MS still overrides). */
    if (!chorus_config_is_set("CHORUS_CYCLE_TIME_MS")) eo.cycle_time_ms = 0.0;
    chorus_result r = chorus_engine_start(comm, &eo, &x->eng);
    if (r != CHORUS_OK) {
        failed(d, "starting the training engine", r);
        nn_dist_finalize(d);
        return r;
    }
    return CHORUS_OK;
}

void nn_dist_finalize(nn_dist *d)
{
    struct nn_dist_engine *x = d->eng;
    d->eng = NULL;
    if (x) {
        for (int i = 0; i < x->nbuckets; i++) chorus_engine_release(x->b[i].h);
        if (x->eng) chorus_engine_shutdown(x->eng); /* before its compressor goes */
    }
    chorus_compressor_destroy(d->comp);
    d->comp = NULL;
    free(d->tensors);
    free(d->vec);
    d->tensors = NULL;
    d->vec = NULL;
    d->ntensors = 0;
    d->vec_n = 0;
    if (!x) return;
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    free(x->b);
    free(x->bucket_of_lo);
    free(x->nbuckets_of_lo);
    free(x);
}

chorus_result nn_dist_broadcast_params(nn_dist *d, nn_model *m)
{
    if (d->size == 1) return CHORUS_OK;
    double t0 = now_s();
    chorus_result r = chorus_broadcast(d->comm, m->params, m->nparams, CHORUS_FLOAT32, 0);
    d->wait_s += now_s() - t0;
    return r == CHORUS_OK ? CHORUS_OK : failed(d, "broadcast of the parameters", r);
}

/* Engine thread: a bucket's handle ended. */
static void on_end(chorus_engine_handle *h, chorus_result r, void *arg)
{
    (void)h;
    (void)r;
    grad_bucket *b = arg;
    struct nn_dist_engine *x = b->x;
    double t = now_s();
    pthread_mutex_lock(&x->mu);
    b->t_end = t;
    x->ended++;
    pthread_cond_signal(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

/* PowerSGD over the model's tensors (nn_dist_set_tensors): one bucket per tensor, the last
 * first, under the tensor's name, the vectors dense (the engine fuses them); a layer's
 * tensors go when backward finishes it. */
static void prepare_tensors(nn_dist *d, nn_model *m, struct nn_dist_engine *x)
{
    for (int i = 0; i < m->nlayers; i++) x->bucket_of_lo[i] = -1;
    x->nbuckets = d->ntensors;
    for (int j = 0, l = m->nlayers - 1; j < d->ntensors; j++) {
        const nn_grad_tensor *t = &d->tensors[d->ntensors - 1 - j];
        while (l > 0 && t->off < m->layers[l].param_off) l--;
        grad_bucket *b = &x->b[j];
        b->lo = b->hi = l;
        b->off = t->off;
        b->count = t->rows * t->cols;
        b->dense = t->rows == 1;
        snprintf(b->name, sizeof(b->name), "%s", t->name);
        if (x->bucket_of_lo[l] < 0) x->bucket_of_lo[l] = j;
        x->nbuckets_of_lo[l]++;
    }
    x->nlayers = m->nlayers;
}

/* Cuts the model into buckets the first time it is seen, with the library's one bucketing
 * rule (chorus_engine_bucket_plan): layers are the items, from the last layer down, a bucket
 * closing once it holds d->bucket_bytes (0: one layer per bucket). Names list the layers, e.g.
 * "linear3" or "linear2+linear3" (kind and ordinal among the layers of that kind), the same on
 * every rank. */
static chorus_result engine_prepare(nn_dist *d, nn_model *m)
{
    struct nn_dist_engine *x = d->eng;
    if (x->nlayers == m->nlayers && x->b) return CHORUS_OK;
    if (x->b)
        return nn__fail(CHORUS_ERR_INVALID_ARG, "nn_dist: one model per nn_dist in engine mode");
    char(*lname)[24] = calloc((size_t)m->nlayers, sizeof(*lname));
    size_t *bytes = malloc((size_t)m->nlayers * sizeof(size_t));
    int *plan = malloc((size_t)m->nlayers * sizeof(int));
    int own = nn__dist_by_tensor(d);
    x->b = calloc((size_t)(own ? d->ntensors : m->nlayers), sizeof(*x->b));
    x->bucket_of_lo = malloc((size_t)m->nlayers * sizeof(int));
    x->nbuckets_of_lo = calloc((size_t)m->nlayers, sizeof(int));
    int ok = lname && bytes && plan && x->b && x->bucket_of_lo && x->nbuckets_of_lo;
    if (!ok || own) {
        free(lname);
        free(bytes);
        free(plan);
        if (!ok) return nn__fail(CHORUS_ERR_NOMEM, "nn_dist: out of memory");
        prepare_tensors(d, m, x);
        return CHORUS_OK;
    }
    int count[NN_KIND_COUNT] = {0};
    for (int i = 0; i < m->nlayers; i++) {
        nn_kind k = m->layers[i].kind;
        snprintf(lname[i], sizeof(lname[i]), "%s%d", nn_kind_name(k), ++count[k]);
        x->bucket_of_lo[i] = -1;
        bytes[i] = m->layers[i].nparams * sizeof(float);
    }
    chorus_result r = chorus_engine_bucket_plan(bytes, m->nlayers, d->bucket_bytes, d->bucket_bytes,
                                                plan, &x->nbuckets);
    if (r != CHORUS_OK) {
        nn__fail(r, "nn_dist: %s", chorus_last_error(NULL));
        free(lname);
        free(bytes);
        free(plan);
        return r;
    }
    /* Buckets are runs of layers; bucket 0 holds the last ones. Walk down so that each bucket
     * is met from its highest layer. */
    for (int i = m->nlayers - 1; i >= 0; i--) {
        if (plan[i] < 0) continue;
        grad_bucket *cur = &x->b[plan[i]];
        if (cur->count == 0) cur->hi = i; /* first (highest) layer of the bucket */
        cur->lo = i;
        cur->off = m->layers[i].param_off;
        cur->count = m->layers[cur->hi].param_off + m->layers[cur->hi].nparams - cur->off;
        /* names list the layers from the lowest up: prepend "lname+" */
        size_t ln = strlen(lname[i]), cn = strlen(cur->name), add = ln + (cn ? 1 : 0);
        if (add + cn < sizeof(cur->name)) {
            memmove(cur->name + add, cur->name, cn + 1);
            memcpy(cur->name, lname[i], ln);
            if (cn) cur->name[ln] = '+';
        }
    }
    for (int j = 0; j < x->nbuckets; j++) {
        x->bucket_of_lo[x->b[j].lo] = j;
        x->nbuckets_of_lo[x->b[j].lo] = 1;
    }
    x->nlayers = m->nlayers;
    free(lname);
    free(bytes);
    free(plan);
    return 0;
}

/* Enqueues bucket j (in place, summed). */
static void engine_enqueue(nn_dist *d, nn_model *m, int j)
{
    struct nn_dist_engine *x = d->eng;
    grad_bucket *b = &x->b[j];
    if (b->h || x->hook_err[0]) return;
    b->x = x;
    b->t_enq = now_s();
    if (x->enqueued == 0) {
        x->t_first = b->t_enq;
        x->cpu_first = thread_cpu_s();
    }
    chorus_engine_tensor_opts to = {0};
    to.callback = on_end;
    to.callback_arg = b;
    to.compressor = b->dense ? NULL : d->comp;
    float *g = m->grads + b->off;
    chorus_result r = chorus_engine_allreduce(x->eng, b->name, g, g, b->count, CHORUS_FLOAT32,
                                              CHORUS_SUM, &to, &b->h);
    if (r != CHORUS_OK) {
        b->h = NULL;
        x->hook_r = r;
        snprintf(x->hook_err, sizeof(x->hook_err),
                 "gradient allreduce of '%s' could not be enqueued: %s (%s)", b->name,
                 chorus_strerror(r), chorus_engine_last_error(x->eng));
        return;
    }
    x->enqueued++;
}

static void grad_hook(nn_model *m, int layer, void *arg)
{
    nn_dist *d = arg;
    int j = d->eng->bucket_of_lo[layer];
    for (int k = 0; j >= 0 && k < d->eng->nbuckets_of_lo[layer]; k++) engine_enqueue(d, m, j + k);
}

void nn_dist_begin_backward(nn_dist *d, nn_model *m)
{
    if (!d->eng || engine_prepare(d, m)) return; /* a failure shows in nn_dist_sync_grads */
    m->grad_hook = grad_hook;
    m->grad_hook_arg = d;
}

static chorus_result engine_sync(nn_dist *d, nn_model *m)
{
    struct nn_dist_engine *x = d->eng;
    m->grad_hook = NULL;
    m->grad_hook_arg = NULL;
    chorus_result rc = engine_prepare(d, m);
    if (rc != CHORUS_OK) return rc;
    /* From here the caller waits; whatever backward did not hand over (no
     * nn_dist_begin_backward this step) goes now, exposed. */
    d->in_backward += (uint64_t)x->enqueued;
    double t0 = now_s(), cpu0 = x->enqueued ? thread_cpu_s() : 0.0;
    double off_cpu = x->enqueued ? (t0 - x->t_first) - (cpu0 - x->cpu_first) : 0.0;
    for (int j = 0; j < x->nbuckets; j++) engine_enqueue(d, m, j);
    pthread_mutex_lock(&x->mu);
    while (x->ended < x->enqueued) pthread_cond_wait(&x->cv, &x->mu);
    x->ended = 0;
    pthread_mutex_unlock(&x->mu);
    double waited = now_s() - t0;
    d->wait_s += waited;
    d->grad_wait_s += waited;
    /* Communication time: the union of the buckets' [enqueue, end] intervals, i.e. the time
     * at least one gradient was on its way. Buckets are enqueued in index order. */
    double busy = 0.0, hidden = 0.0, lo = 0.0, hi = -1.0;
    for (int j = 0; j <= x->nbuckets; j++) {
        grad_bucket *b = j < x->nbuckets ? &x->b[j] : NULL;
        if (b && !b->h) continue;
        if (!b || b->t_enq > hi) { /* close [lo, hi]; the part before t0 was hidden */
            if (hi > lo) {
                busy += hi - lo;
                if (t0 > lo) hidden += (hi < t0 ? hi : t0) - lo;
            }
            if (!b) break;
            lo = b->t_enq;
            hi = b->t_end;
        } else if (b->t_end > hi) {
            hi = b->t_end;
        }
    }
    /* Overlap needs the caller to be computing meanwhile. On a machine with no spare core the
     * engine thread runs in the caller's place for part of that time, so the time the caller
     * was off the CPU since the first enqueue is not counted as hidden (a lower bound: it
     * also discounts preemption by other processes). */
    hidden -= off_cpu > 0 ? off_cpu : 0.0;
    d->comm_s += busy;
    d->hidden_s += hidden > 0 ? hidden : 0.0;
    x->enqueued = 0;
    for (int j = 0; j < x->nbuckets; j++) {
        grad_bucket *b = &x->b[j];
        if (!b->h) continue;
        chorus_result r = chorus_engine_wait(b->h); /* ended: returns at once */
        if (r != CHORUS_OK && rc == CHORUS_OK)
            rc = nn__fail(r, "gradient allreduce failed: %s (%s)", chorus_strerror(r),
                          chorus_engine_handle_error(b->h));
        chorus_engine_release(b->h);
        b->h = NULL;
    }
    if (x->hook_err[0] && rc == CHORUS_OK) rc = nn__fail(x->hook_r, "%s", x->hook_err);
    x->hook_err[0] = 0;
    return rc;
}

chorus_result nn_dist_sync_grads(nn_dist *d, nn_model *m)
{
    if (d->size == 1) return CHORUS_OK;
    if (d->eng) return engine_sync(d, m);
    double t0 = now_s();
    chorus_result r = CHORUS_OK;
    if (d->comp) {
        r = nn__dist_compressed_sync(d, m);
    } else if (d->mode == NN_SYNC_LAYER) {
        /* Last layer first: the order backward produces them. */
        for (int i = m->nlayers - 1; i >= 0 && r == CHORUS_OK; i--) {
            nn_layer *L = &m->layers[i];
            if (!L->nparams) continue;
            r = chorus_allreduce(d->comm, L->dw, L->dw, L->nparams, CHORUS_FLOAT32, CHORUS_SUM);
        }
    } else {
        r = chorus_allreduce(d->comm, m->grads, m->grads, m->nparams, CHORUS_FLOAT32, CHORUS_SUM);
    }
    double dt = now_s() - t0;
    d->wait_s += dt;
    d->grad_wait_s += dt;
    d->comm_s += dt;
    return r == CHORUS_OK ? CHORUS_OK : failed(d, "gradient allreduce", r);
}

chorus_result nn_dist_sum(nn_dist *d, double *v, int n)
{
    if (d->size == 1) return CHORUS_OK;
    double t0 = now_s();
    chorus_result r = chorus_allreduce(d->comm, v, v, (size_t)n, CHORUS_FLOAT64, CHORUS_SUM);
    d->wait_s += now_s() - t0;
    return r == CHORUS_OK ? CHORUS_OK : failed(d, "allreduce of the counters", r);
}

chorus_result nn_dist_broadcast_bytes(nn_dist *d, void *buf, size_t n)
{
    if (d->size == 1) return CHORUS_OK;
    chorus_result r = chorus_broadcast(d->comm, buf, n, CHORUS_UINT8, 0);
    return r == CHORUS_OK ? CHORUS_OK : failed(d, "broadcast", r);
}
