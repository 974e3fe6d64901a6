/*
 * recompute.c - activation recomputation (gradient checkpointing): the layers are cut into
 * segments; forward keeps only each segment's output in a buffer of its own, the activations
 * inside a segment live in one pool shared by every segment, and backward recomputes a
 * segment from its input before differentiating it. The memory of the activations drops from
 * every layer's to the segment outputs plus one segment's, for one extra forward pass.
 */
#include <math.h>
#include <stdlib.h>

#include "chorus/nn.h"
#include "nn_internal.h"

/* Whether layer i hands on its input's buffer rather than a buffer of its own: flatten, and
 * relu and dropout working in place (they do unless every layer before them is a flatten). */
static int passes_through(const nn_model *m, int i)
{
    nn_kind k = m->layers[i].kind;
    if (k == NN_FLATTEN) return 1;
    if (k != NN_RELU && k != NN_DROPOUT) return 0;
    for (int j = 0; j < i; j++)
        if (m->layers[j].kind != NN_FLATTEN) return 1;
    return 0;
}

void nn_model_set_recompute(nn_model *m, int k)
{
    if (k <= 0) k = (int)ceil(sqrt((double)m->nlayers));
    m->recompute = k < 1 ? 1 : k;
}

void nn__recompute_plan(nn_model *m)
{
    int start = 0, n = m->nlayers;
    for (int i = 0; i < n; i++) {
        m->layers[i].recompute_end = 0;
        m->layers[i].buf_pooled = 1;
    }
    for (int i = 0; i < n; i++) {
        /* a segment must not end before a layer that would overwrite its output in place */
        int cuttable = i + 1 == n || !passes_through(m, i + 1);
        if (!(i + 1 == n || (i - start + 1 >= m->recompute && cuttable))) continue;
        m->layers[i].recompute_end = 1;
        start = i + 1;
        /* the segment's output stays: the layer whose buffer holds it owns that buffer */
        int j = i;
        while (j >= 0 && passes_through(m, j)) j--;
        if (j >= 0) m->layers[j].buf_pooled = 0;
    }
}

chorus_result nn__recompute_pool(nn_model *m, size_t B)
{
    size_t *slot = calloc((size_t)m->nlayers, sizeof(size_t));
    if (!slot) return CHORUS_ERR_NOMEM;
    /* slot j of the pool: the j-th pooled buffer of a segment, as large as the largest */
    int j = 0;
    size_t pooled = 0; /* floats the pooled buffers would take each on its own */
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *L = &m->layers[i];
        size_t need = B * nn__out_features(L);
        if (L->buf_pooled) pooled += need;
        if (L->buf_pooled && slot[j] < need) slot[j] = need;
        if (L->buf_pooled) j++;
        if (L->recompute_end) j = 0;
    }
    size_t total = 0;
    for (int s = 0; s < m->nlayers; s++) {
        size_t sz = slot[s];
        slot[s] = total;
        total += sz;
    }
    m->act_pool = calloc(total ? total : 1, sizeof(float));
    if (!m->act_pool) {
        free(slot);
        return CHORUS_ERR_NOMEM;
    }
    if (m->mem) nn_mem_add(m->mem, NN_MEM_ACTIVATIONS, total * sizeof(float));
    m->recompute_saved = pooled > total ? (pooled - total) * sizeof(float) : 0;
    j = 0;
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *L = &m->layers[i];
        if (L->buf_pooled) L->buf = m->act_pool + slot[j++];
        if (L->recompute_end) j = 0;
    }
    free(slot);
    return CHORUS_OK;
}

void nn__backward_recompute(nn_model *m, const float *dout, int B)
{
    const float *dy = dout;
    int which = -1, hi = m->nlayers - 1;
    for (int last = 1; hi >= 0; last = 0) {
        int lo = hi;
        while (lo > 0 && !m->layers[lo - 1].recompute_end) lo--;
        if (!last) {
            /* the segment's input is the previous segment's output, kept; its first layer
             * does not work in place, so ownership of the input does not matter */
            int owned = 0;
            const float *cur = m->layers[lo].in;
            for (int i = lo; i <= hi; i++) cur = nn__layer_forward(m, i, cur, &owned, B);
        }
        for (int i = hi; i >= lo; i--)
            if (!(dy = nn__layer_backward(m, i, dy, &which, B, i > 0))) return;
        hi = lo - 1;
    }
}
