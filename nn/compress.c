/*
 * compress.c - gradient compression for the trainer's data parallelism: the compressor made
 * from a spec, the matrix view PowerSGD takes of each layer, the blocking modes' compressed
 * allreduces (the engine mode hands the compressor to the engine in dist.c), PowerSGD over a
 * model's own tensors (nn_dist_set_tensors) and the ratio of bytes sent that the metrics
 * report.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/engine.h"
#include "chorus/nn.h"
#include "nn_internal.h"

/* The name a layer's gradient travels under: kind and ordinal among the layers of its kind
 * ("linear3"), as dist.c names the engine's one-layer buckets. */
static void layer_name(const nn_model *m, int layer, char *buf, size_t n)
{
    int ord = 0;
    for (int i = 0; i <= layer; i++) ord += m->layers[i].kind == m->layers[layer].kind;
    snprintf(buf, n, "%s%d", nn_kind_name(m->layers[layer].kind), ord);
}

/* A layer's weight is (out_c, rest): its columns are rest, and the bias (out_c more) adds
 * rows. 0 when the parameters do not split that way. */
static size_t layer_cols(const nn_layer *L)
{
    size_t out = (size_t)L->out_c;
    if (!out || L->nparams <= out || (L->nparams - out) % out) return 0;
    return (L->nparams - out) / out;
}

int nn__dist_by_tensor(const nn_dist *d)
{
    return d->comp && d->ntensors && strncmp(d->comp->name, "powersgd", 8) == 0;
}

chorus_result nn_dist_set_compression(nn_dist *d, const nn_model *m, const char *spec)
{
    chorus_compressor_destroy(d->comp);
    d->comp = NULL;
    chorus_result r = chorus_compressor_create(spec, 0, &d->comp);
    if (r != CHORUS_OK)
        return nn__fail(r, "--compress %s: %s", spec ? spec : "(null)", chorus_last_error(NULL));
    int own = nn__dist_by_tensor(d); /* PowerSGD over the model's tensors */
    for (int i = 0; own && i < d->ntensors; i++) {
        const nn_grad_tensor *t = &d->tensors[i];
        if (t->rows > 1 && chorus_compressor_set_cols(d->comp, t->name, t->cols) != CHORUS_OK)
            return nn__fail(CHORUS_ERR_NOMEM, "nn_dist_set_compression: out of memory");
    }
    for (int i = 0; d->comp && !own && i < m->nlayers; i++) {
        size_t cols = layer_cols(&m->layers[i]);
        char name[32];
        layer_name(m, i, name, sizeof(name));
        if (cols && chorus_compressor_set_cols(d->comp, name, cols) != CHORUS_OK)
            return nn__fail(CHORUS_ERR_NOMEM, "nn_dist_set_compression: out of memory");
    }
    return CHORUS_OK;
}

/* Whether the gradient travels as one tensor: fused mode, except for PowerSGD, which needs
 * each layer's matrix (the whole buffer folded into one square matrix has no low-rank
 * structure, and training with it diverges). */
static int one_tensor(const nn_dist *d)
{
    return d->mode == NN_SYNC_FUSED && strncmp(d->comp->name, "powersgd", 8) != 0;
}

chorus_result nn_dist_set_tensors(nn_dist *d, const nn_grad_tensor *t, int n)
{
    size_t nvec = 0;
    for (int i = 0; i < n; i++) nvec += t[i].rows == 1 ? t[i].cols : 0;
    free(d->tensors);
    free(d->vec);
    d->tensors = malloc((size_t)n * sizeof(*t));
    d->vec = malloc((nvec ? nvec : 1) * sizeof(float));
    d->ntensors = d->tensors && d->vec ? n : 0;
    d->vec_n = nvec;
    if (!d->ntensors) return nn__fail(CHORUS_ERR_NOMEM, "nn_dist_set_tensors: out of memory");
    memcpy(d->tensors, t, (size_t)n * sizeof(*t));
    return CHORUS_OK;
}

/* Copies every vector of the tensors into d->vec (out 1) or back (out 0). */
static void pack_vectors(nn_dist *d, float *grads, int out)
{
    size_t k = 0;
    for (int i = 0; i < d->ntensors; i++) {
        const nn_grad_tensor *t = &d->tensors[i];
        if (t->rows != 1) continue;
        float *g = grads + t->off;
        memcpy(out ? d->vec + k : g, out ? g : d->vec + k, t->cols * sizeof(float));
        k += t->cols;
    }
}

/* PowerSGD over the tensors: each matrix compressed under its name, the last first (backward's
 * order), then the vectors packed into one dense sum. */
static chorus_result tensor_sync(nn_dist *d, nn_model *m)
{
    chorus_result r = CHORUS_OK;
    for (int i = d->ntensors - 1; i >= 0 && r == CHORUS_OK; i--) {
        const nn_grad_tensor *t = &d->tensors[i];
        float *g = m->grads + t->off;
        if (t->rows > 1)
            r = chorus_compressed_allreduce(d->comm, d->comp, t->name, g, g, t->rows * t->cols,
                                            CHORUS_FLOAT32, CHORUS_SUM);
    }
    if (r != CHORUS_OK || !d->vec_n) return r;
    pack_vectors(d, m->grads, 1);
    r = chorus_allreduce(d->comm, d->vec, d->vec, d->vec_n, CHORUS_FLOAT32, CHORUS_SUM);
    if (r == CHORUS_OK) pack_vectors(d, m->grads, 0);
    return r;
}

chorus_result nn__dist_compressed_sync(nn_dist *d, nn_model *m)
{
    if (nn__dist_by_tensor(d)) return tensor_sync(d, m);
    if (one_tensor(d))
        return chorus_compressed_allreduce(d->comm, d->comp, "grads", m->grads, m->grads,
                                           m->nparams, CHORUS_FLOAT32, CHORUS_SUM);
    chorus_result r = CHORUS_OK;
    for (int i = m->nlayers - 1; i >= 0 && r == CHORUS_OK; i--) { /* backward's order */
        nn_layer *L = &m->layers[i];
        char name[32];
        if (!L->nparams) continue;
        layer_name(m, i, name, sizeof(name));
        r = chorus_compressed_allreduce(d->comm, d->comp, name, L->dw, L->dw, L->nparams,
                                        CHORUS_FLOAT32, CHORUS_SUM);
    }
    return r;
}

/* Bytes this rank gives for a tensor of count floats under the plan of c. */
static double sent_bytes(chorus_compressor *c, const char *name, size_t count)
{
    chorus_compress_plan p;
    if (!c || c->plan(c->state, name, count, CHORUS_FLOAT32, CHORUS_SUM, &p) != CHORUS_OK ||
        !p.nrounds)
        return (double)count * sizeof(float);
    double b = 0;
    for (int i = 0; i < p.nrounds; i++)
        b += (double)p.round[i].wire_count * (double)chorus_dtype_size(p.round[i].wire_dtype);
    return b;
}

double nn_dist_compression_ratio(const nn_dist *d, const nn_model *m)
{
    if (!d->comp || !m->nparams) return 1.0;
    double sent = 0;
    if (nn__dist_by_tensor(d)) {
        for (int i = 0; i < d->ntensors; i++) {
            const nn_grad_tensor *t = &d->tensors[i];
            size_t n = t->rows * t->cols;
            sent += t->rows > 1 ? sent_bytes(d->comp, t->name, n) : (double)n * sizeof(float);
        }
    } else if (one_tensor(d)) {
        sent = sent_bytes(d->comp, "grads", m->nparams);
    } else { /* per layer (engine mode: per one-layer bucket, the default) */
        for (int i = 0; i < m->nlayers; i++) {
            char name[32];
            if (!m->layers[i].nparams) continue;
            layer_name(m, i, name, sizeof(name));
            sent += sent_bytes(d->comp, name, m->layers[i].nparams);
        }
    }
    return sent / ((double)m->nparams * sizeof(float));
}
