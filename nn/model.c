/*
 * model.c - building a sequential model: appending layers, working out shapes, and
 * allocating the one contiguous parameter buffer, the one gradient buffer of the same
 * layout, and the activation buffers for a maximum batch size.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/nn.h"
#include "nn_internal.h"

nn_model *nn_model_create(int c, int h, int w)
{
    if (c <= 0 || h <= 0 || w <= 0) return NULL;
    nn_model *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->in_c = c;
    m->in_h = h;
    m->in_w = w;
    m->training = 1;
    return m;
}

void nn_model_destroy(nn_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *L = &m->layers[i];
        if (!L->buf_pooled) free(L->buf);
        free(L->cache);
        free(L->scratch);
        free(L->idx);
    }
    free(m->layers);
    free(m->params);
    free(m->grads);
    free(m->dbuf[0]);
    free(m->dbuf[1]);
    free(m->act_pool);
    free(m);
}

const char *nn_kind_name(nn_kind k)
{
    static const char *names[NN_KIND_COUNT] = {"linear", "conv2d",  "maxpool2d", "relu",
                                               "gelu",   "dropout", "flatten",   "layernorm"};
    return (unsigned)k < NN_KIND_COUNT ? names[k] : "unknown";
}

/* Appends a layer whose input is the current output shape; NULL (with the message set) when
 * out of memory or after finalize. */
static nn_layer *push(nn_model *m, nn_kind kind)
{
    if (m->params) {
        nn__fail(CHORUS_ERR_INVALID_ARG, "nn_add_%s: the model is already finalized",
                 nn_kind_name(kind));
        return NULL;
    }
    if (m->nlayers == m->cap) {
        int cap = m->cap ? 2 * m->cap : 8;
        nn_layer *l = realloc(m->layers, (size_t)cap * sizeof(*l));
        if (!l) {
            nn__fail(CHORUS_ERR_NOMEM, "nn_add_%s: out of memory", nn_kind_name(kind));
            return NULL;
        }
        m->layers = l;
        m->cap = cap;
    }
    nn_layer *L = &m->layers[m->nlayers];
    memset(L, 0, sizeof(*L));
    L->kind = kind;
    if (m->nlayers == 0) {
        L->in_c = m->in_c;
        L->in_h = m->in_h;
        L->in_w = m->in_w;
    } else {
        nn_layer *P = &m->layers[m->nlayers - 1];
        L->in_c = P->out_c;
        L->in_h = P->out_h;
        L->in_w = P->out_w;
    }
    L->out_c = L->in_c;
    L->out_h = L->in_h;
    L->out_w = L->in_w;
    m->nlayers++;
    return L;
}

chorus_result nn_add_linear(nn_model *m, int out_features)
{
    if (out_features <= 0)
        return nn__fail(CHORUS_ERR_INVALID_ARG, "nn_add_linear: %d output features", out_features);
    nn_layer *L = push(m, NN_LINEAR);
    if (!L) return m->params ? CHORUS_ERR_INVALID_ARG : CHORUS_ERR_NOMEM;
    size_t in = nn__in_features(L);
    L->out_c = out_features;
    L->out_h = L->out_w = 1;
    L->nparams = in * (size_t)out_features + (size_t)out_features;
    return CHORUS_OK;
}

chorus_result nn_add_conv2d(nn_model *m, int out_channels, int k, int stride, int pad)
{
    if (out_channels <= 0 || k <= 0 || stride <= 0 || pad < 0)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_add_conv2d: bad arguments (%d channels, kernel %d, stride %d, pad %d)",
                        out_channels, k, stride, pad);
    nn_layer *L = push(m, NN_CONV2D);
    if (!L) return m->params ? CHORUS_ERR_INVALID_ARG : CHORUS_ERR_NOMEM;
    L->k = k;
    L->stride = stride;
    L->pad = pad;
    int oh = (L->in_h + 2 * pad - k) / stride + 1;
    int ow = (L->in_w + 2 * pad - k) / stride + 1;
    if (L->in_h + 2 * pad < k || L->in_w + 2 * pad < k || oh <= 0 || ow <= 0) {
        m->nlayers--;
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_add_conv2d: a %dx%d kernel (pad %d) does not fit the %dx%d input", k, k,
                        pad, L->in_h, L->in_w);
    }
    L->out_c = out_channels;
    L->out_h = oh;
    L->out_w = ow;
    L->nparams = (size_t)out_channels * (size_t)L->in_c * (size_t)(k * k) + (size_t)out_channels;
    return CHORUS_OK;
}

chorus_result nn_add_maxpool2d(nn_model *m, int k, int stride)
{
    if (k <= 0 || stride <= 0)
        return nn__fail(CHORUS_ERR_INVALID_ARG, "nn_add_maxpool2d: window %d, stride %d", k,
                        stride);
    nn_layer *L = push(m, NN_MAXPOOL2D);
    if (!L) return m->params ? CHORUS_ERR_INVALID_ARG : CHORUS_ERR_NOMEM;
    if (L->in_h < k || L->in_w < k) {
        m->nlayers--;
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_add_maxpool2d: a %dx%d window does not fit the %dx%d input", k, k,
                        L->in_h, L->in_w);
    }
    L->k = k;
    L->stride = stride;
    L->out_h = (L->in_h - k) / stride + 1;
    L->out_w = (L->in_w - k) / stride + 1;
    return CHORUS_OK;
}

/* Appends a layer that needs nothing but its kind. */
static chorus_result push_plain(nn_model *m, nn_kind kind)
{
    if (push(m, kind)) return CHORUS_OK;
    return m->params ? CHORUS_ERR_INVALID_ARG : CHORUS_ERR_NOMEM;
}

chorus_result nn_add_relu(nn_model *m)
{
    return push_plain(m, NN_RELU);
}

chorus_result nn_add_gelu(nn_model *m)
{
    return push_plain(m, NN_GELU);
}

chorus_result nn_add_dropout(nn_model *m, float p)
{
    if (!(p >= 0.0f && p < 1.0f))
        return nn__fail(CHORUS_ERR_INVALID_ARG, "nn_add_dropout: probability %g is not in [0, 1)",
                        (double)p);
    nn_layer *L = push(m, NN_DROPOUT);
    if (!L) return m->params ? CHORUS_ERR_INVALID_ARG : CHORUS_ERR_NOMEM;
    L->p = p;
    return CHORUS_OK;
}

chorus_result nn_add_flatten(nn_model *m)
{
    nn_layer *L = push(m, NN_FLATTEN);
    if (!L) return m->params ? CHORUS_ERR_INVALID_ARG : CHORUS_ERR_NOMEM;
    L->out_c = (int)nn__in_features(L);
    L->out_h = L->out_w = 1;
    return CHORUS_OK;
}

chorus_result nn_add_layernorm(nn_model *m)
{
    nn_layer *L = push(m, NN_LAYERNORM);
    if (!L) return m->params ? CHORUS_ERR_INVALID_ARG : CHORUS_ERR_NOMEM;
    L->nparams = 2 * nn__in_features(L);
    return CHORUS_OK;
}

size_t nn_model_in_features(const nn_model *m)
{
    return (size_t)m->in_c * (size_t)m->in_h * (size_t)m->in_w;
}

size_t nn_model_out_features(const nn_model *m)
{
    if (m->nlayers == 0) return nn_model_in_features(m);
    return nn__out_features(&m->layers[m->nlayers - 1]);
}

static void *falloc(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

/* falloc for part p of the model's memory, recorded in m->mem when set. */
static void *falloc_part(nn_model *m, nn_mem_part p, size_t n)
{
    void *q = falloc(n);
    if (q && m->mem) nn_mem_add(m->mem, p, n * sizeof(float));
    return q;
}

/* Activation buffers of batches of B (falloc_part counts them). */
static void *aalloc(nn_model *m, size_t n)
{
    return falloc_part(m, NN_MEM_ACTIVATIONS, n);
}

chorus_result nn_model_finalize(nn_model *m, int max_batch)
{
    if (m->params || m->nlayers == 0 || max_batch <= 0)
        return nn__fail(CHORUS_ERR_INVALID_ARG, "nn_model_finalize: %s",
                        m->params         ? "already finalized"
                        : m->nlayers == 0 ? "the model has no layers"
                                          : "max_batch must be positive");
    size_t B = (size_t)max_batch, total = 0, dmax = 0;
    if (m->recompute) nn__recompute_plan(m);
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *L = &m->layers[i];
        L->param_off = total;
        total += L->nparams;
        size_t in = nn__in_features(L), out = nn__out_features(L);
        if (in > dmax) dmax = in;
        /* ReLU and dropout work in place on a buffer the model owns; only when every layer
         * before them is a flatten can their input be the caller's x. */
        int may_see_user_input = 1;
        for (int j = 0; j < i; j++)
            if (m->layers[j].kind != NN_FLATTEN) may_see_user_input = 0;
        int needs_buf = L->kind != NN_FLATTEN;
        if ((L->kind == NN_RELU || L->kind == NN_DROPOUT) && !may_see_user_input) needs_buf = 0;
        if (!needs_buf) L->buf_pooled = 0;
        if (needs_buf && !L->buf_pooled && !(L->buf = aalloc(m, B * out))) goto nomem;
        switch (L->kind) {
        case NN_CONV2D: {
            size_t rows = (size_t)L->in_c * (size_t)(L->k * L->k);
            size_t cols = (size_t)L->out_h * (size_t)L->out_w;
            if (!(L->cache = aalloc(m, rows * cols))) goto nomem;
            if (!(L->scratch = aalloc(m, rows * cols))) goto nomem;
            break;
        }
        case NN_MAXPOOL2D:
            if (!(L->idx = calloc(B * out, sizeof(int32_t)))) goto nomem;
            if (m->mem) nn_mem_add(m->mem, NN_MEM_ACTIVATIONS, B * out * sizeof(int32_t));
            break;
        case NN_LAYERNORM:
            if (!(L->cache = aalloc(m, 2 * B))) goto nomem;
            break;
        case NN_DROPOUT:
            if (!(L->cache = aalloc(m, B * in))) goto nomem;
            break;
        default: break;
        }
    }
    if (m->recompute && nn__recompute_pool(m, B)) goto nomem;
    m->nparams = total;
    m->params = falloc_part(m, NN_MEM_PARAMS, total);
    if (!m->no_grads) m->grads = falloc_part(m, NN_MEM_GRADS, total);
    m->dbuf[0] = aalloc(m, B * dmax);
    m->dbuf[1] = aalloc(m, B * dmax);
    if (!m->params || (!m->grads && !m->no_grads) || !m->dbuf[0] || !m->dbuf[1]) {
        free(m->params);
        m->params = NULL;
        goto nomem;
    }
    m->max_batch = max_batch;
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *L = &m->layers[i];
        if (!L->nparams) continue;
        size_t nb = nn__bias_count(L);
        L->w = m->params + L->param_off;
        L->b = L->w + (L->nparams - nb);
        if (!m->grads) continue;
        L->dw = m->grads + L->param_off;
        L->db = L->dw + (L->nparams - nb);
    }
    return CHORUS_OK;
nomem:
    return nn__fail(CHORUS_ERR_NOMEM, "nn_model_finalize: out of memory for batches of %d",
                    max_batch);
}

/* Weight j of the unsplit (Fout, Fin) matrix of a linear layer whose slice L holds: the row
 * and column of its own weight j within the whole, for tensor-parallel layers. */
static size_t full_index(const nn_layer *L, size_t j)
{
    size_t in = nn__in_features(L), out = (size_t)L->out_c;
    size_t row = j / in, col = j % in;
    if (L->tp == NN_TP_COLUMN) return ((size_t)L->tp_rank * out + row) * in + col;
    if (L->tp == NN_TP_ROW) return row * in * (size_t)L->tp_size + (size_t)L->tp_rank * in + col;
    return j;
}

void nn_model_init_params(nn_model *m, uint64_t seed)
{
    m->seed = seed;
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *L = &m->layers[i];
        if (!L->nparams) continue;
        size_t nb = nn__bias_count(L), nw = L->nparams - nb;
        nn_rng r;
        nn_rng_seed(&r, nn_seed_mix(seed, 0x1a7e5, (uint64_t)i, 0));
        if (L->kind == NN_LAYERNORM) {
            for (size_t j = 0; j < nw; j++) L->w[j] = 1.0f;
        } else {
            /* He-uniform where a rectifier follows (variance 2/fan_in); the output layer gets
             * variance 1/(3 fan_in), as PyTorch's default, so the first logits are small. */
            int rectified = 0;
            for (int j = i + 1; j < m->nlayers; j++) {
                nn_kind k = m->layers[j].kind;
                if (k == NN_DROPOUT || k == NN_FLATTEN || k == NN_MAXPOOL2D) continue;
                rectified = k == NN_RELU || k == NN_GELU;
                break;
            }
            size_t fan_in = nw / (size_t)L->out_c;
            if (L->tp == NN_TP_ROW) fan_in *= (size_t)L->tp_size;
            float bound = rectified ? sqrtf(6.0f / (float)fan_in) : sqrtf(1.0f / (float)fan_in);
            if (!L->tp) {
                for (size_t j = 0; j < nw; j++)
                    L->w[j] = (2.0f * nn_rng_uniform(&r) - 1.0f) * bound;
            } else {
                /* A tensor-parallel slice takes its weights from the stream of the unsplit
                 * layer, so the split model starts as the unsplit one. */
                size_t next = 0;
                for (size_t j = 0; j < nw; j++) {
                    size_t want = full_index(L, j);
                    for (; next < want; next++) (void)nn_rng_next(&r);
                    L->w[j] = (2.0f * nn_rng_uniform(&r) - 1.0f) * bound;
                    next++;
                }
            }
        }
        for (size_t j = 0; j < nb; j++) L->b[j] = 0.0f;
    }
}

void nn_zero_grad(nn_model *m)
{
    if (m->grads) memset(m->grads, 0, m->nparams * sizeof(float)); /* else kept by nn_zero */
}

uint64_t nn_model_signature(const nn_model *m)
{
    uint64_t h = nn_seed_mix(0xc0ffee, (uint64_t)m->in_c, (uint64_t)m->in_h, (uint64_t)m->in_w);
    for (int i = 0; i < m->nlayers; i++) {
        const nn_layer *L = &m->layers[i];
        uint64_t shape =
            ((uint64_t)L->out_c << 40) ^ ((uint64_t)L->out_h << 20) ^ (uint64_t)L->out_w;
        uint64_t win = ((uint64_t)L->k << 32) ^ ((uint64_t)L->stride << 16) ^ (uint64_t)L->pad;
        h = nn_seed_mix(h, (uint64_t)L->kind, shape, win ^ L->nparams);
    }
    return h;
}
