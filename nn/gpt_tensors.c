/*
 * gpt_tensors.c - the GPT's gradient as the tensors it is made of (nn_gpt_grad_tensors): each
 * weight a matrix of its own shape, each bias and LayerNorm parameter a vector, for a
 * compressor that needs each matrix (PowerSGD: nn_dist_set_tensors). The layout is that of
 * the parameter groups (gpt.c: point_params).
 */
#include <stdio.h>

#include "chorus/nn.h"

typedef struct listing {
    nn_grad_tensor *out; /* NULL: count only */
    int n;
} listing;

static void add(listing *s, const char *prefix, const char *name, size_t off, size_t rows,
                size_t cols)
{
    if (s->out) {
        nn_grad_tensor *t = &s->out[s->n];
        snprintf(t->name, sizeof(t->name), "%s%s", prefix, name);
        t->off = off;
        t->rows = rows;
        t->cols = cols;
    }
    s->n++;
}

/* Block l's twelve tensors from off (a linear layer's weight (out, in), then its bias). */
static void add_block(listing *s, const nn_gpt *g, int l, size_t off)
{
    size_t C = (size_t)g->c.d_model, Cl = (size_t)g->c_local, Fl = (size_t)g->ff_local;
    const struct {
        const char *name;
        size_t rows, cols;
    } t[12] = {{"ln1.weight", 1, C},    {"ln1.bias", 1, C},     {"qkv.weight", 3 * Cl, C},
               {"qkv.bias", 1, 3 * Cl}, {"proj.weight", C, Cl}, {"proj.bias", 1, C},
               {"ln2.weight", 1, C},    {"ln2.bias", 1, C},     {"fc.weight", Fl, C},
               {"fc.bias", 1, Fl},      {"fc2.weight", C, Fl},  {"fc2.bias", 1, C}};
    char prefix[24];
    snprintf(prefix, sizeof(prefix), "block%d.", l);
    for (int i = 0; i < 12; i++) {
        add(s, prefix, t[i].name, off, t[i].rows, t[i].cols);
        off += t[i].rows * t[i].cols;
    }
}

int nn_gpt_grad_tensors(const nn_gpt *g, nn_grad_tensor *out)
{
    listing s = {out, 0};
    size_t C = (size_t)g->c.d_model;
    const nn_layer *G = g->m->layers;
    if (g->grp_emb >= 0) {
        size_t off = G[g->grp_emb].param_off;
        add(&s, "", "wte", off, (size_t)g->c.vocab, C);
        if (g->lo == 0) add(&s, "", "wpe", off + (size_t)g->c.vocab * C, (size_t)g->c.context, C);
    }
    for (int l = g->lo; l < g->hi; l++)
        add_block(&s, g, l, G[g->grp_block + (l - g->lo)].param_off);
    if (g->grp_lnf >= 0) {
        add(&s, "", "lnf.weight", G[g->grp_lnf].param_off, 1, C);
        add(&s, "", "lnf.bias", G[g->grp_lnf].param_off + C, 1, C);
    }
    return s.n;
}
