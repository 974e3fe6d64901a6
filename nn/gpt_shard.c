/*
 * gpt_shard.c - the GPT's tensor-parallel shards against the whole model: rank r's heads of
 * Q, K and V and rows of the MLP's first layer (column-parallel), its columns of the attention
 * output and the MLP's second layer (row-parallel); the rest every rank holds whole. The
 * split model starts from its part of the unsplit initialisation (nn_gpt_copy_shard), and a
 * checkpoint moves every vector laid out as the parameters between the shards and the whole
 * (nn_gpt_tp_move). The layout is that of the parameter groups (gpt.c: point_params).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/nn.h"
#include "nn_internal.h"

/* rows x cols of src (row stride sld) into dst (row stride dld) */
static void copy_rect(float *dst, size_t dld, const float *src, size_t sld, size_t rows,
                      size_t cols)
{
    for (size_t r = 0; r < rows; r++) memcpy(dst + r * dld, src + r * sld, cols * sizeof(float));
}

/* rows x cols between a shard's rectangle (row stride sld) and the whole's (row stride wld):
 * into the whole when to_whole, else out of it */
static void move_rect(float *shard, size_t sld, float *whole, size_t wld, size_t rows, size_t cols,
                      int to_whole)
{
    if (to_whole)
        copy_rect(whole, wld, shard, sld, rows, cols);
    else
        copy_rect(shard, sld, whole, wld, rows, cols);
}

/* Tensor-parallel rank r's part of the whole model's views w and the views k of a vector laid
 * out as that rank's shard (g's layout): heads of Q, K and V and rows of the MLP's first layer
 * (column-parallel), columns of the attention output and the MLP's second layer
 * (row-parallel); the rest every rank holds whole. */
static void move_shard(const nn_gpt *g, size_t r, const nn_gpt_params *k_, const nn_gpt_params *w,
                       int to_whole)
{
    size_t C = (size_t)g->c.d_model, Cl = (size_t)g->c_local, Fl = (size_t)g->ff_local;
    move_rect(k_->wte, 0, w->wte, 0, 1, ((size_t)g->c.vocab + (size_t)g->c.context) * C, to_whole);
    move_rect(k_->lnfw, 0, w->lnfw, 0, 1, 2 * C, to_whole);
    for (int l = 0; l < g->c.layers; l++) {
        const nn_gpt_block *k = &k_->blocks[l], *f = &w->blocks[l];
        move_rect(k->ln1w, 0, f->ln1w, 0, 1, 2 * C, to_whole); /* ln1w, ln1b */
        for (size_t j = 0; j < 3; j++) {                       /* rank r's heads of q, k and v */
            move_rect(k->qkvw + j * Cl * C, C, f->qkvw + (j * C + r * Cl) * C, C, Cl, C, to_whole);
            move_rect(k->qkvb + j * Cl, 0, f->qkvb + j * C + r * Cl, 0, 1, Cl, to_whole);
        }
        move_rect(k->projw, Cl, f->projw + r * Cl, C, C, Cl, to_whole);
        move_rect(k->projb, 0, f->projb, 0, 1, 3 * C, to_whole); /* projb, ln2w, ln2b */
        move_rect(k->fcw, C, f->fcw + r * Fl * C, C, Fl, C, to_whole);
        move_rect(k->fcb, 0, f->fcb + r * Fl, 0, 1, Fl, to_whole);
        move_rect(k->fc2w, Fl, f->fc2w + r * Fl, 4 * C, C, Fl, to_whole);
        move_rect(k->fc2b, 0, f->fc2b, 0, 1, C, to_whole);
    }
}

void nn_gpt_copy_shard(nn_gpt *g, const nn_gpt *whole)
{
    move_shard(g, (size_t)g->tp_rank, &g->p, &whole->p, 0);
}

/* p's views, made over g's parameters, moved to the same places in base */
static void rebase(const nn_gpt *g, nn_gpt_params *p, float *base)
{
    ptrdiff_t d = base - g->m->params;
    p->wte += d, p->wpe += d, p->lnfw += d, p->lnfb += d;
    for (int l = 0; l < g->c.layers; l++) {
        nn_gpt_block *k = &p->blocks[l];
        float **f[] = {&k->ln1w, &k->ln1b, &k->qkvw, &k->qkvb, &k->projw, &k->projb,
                       &k->ln2w, &k->ln2b, &k->fcw,  &k->fcb,  &k->fc2w,  &k->fc2b};
        for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) *f[i] += d;
    }
}

chorus_result nn_gpt_tp_move(const nn_gpt *g, int r, float *shard, const nn_gpt *whole, float *wvec,
                             int to_whole)
{
    const nn_gpt_config *a = &g->c, *b = &whole->c;
    if (r < 0 || r >= g->tp_size || whole->tp_size != 1 || g->lo != 0 || g->hi != a->layers ||
        whole->lo != 0 || whole->hi != b->layers || a->layers != b->layers ||
        a->d_model != b->d_model || a->heads != b->heads || a->context != b->context ||
        a->vocab != b->vocab)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_gpt_tp_move: rank %d of a %d-way split of the whole model", r,
                        g->tp_size);
    nn_gpt_params k = g->p, w = whole->p;
    k.blocks = malloc((size_t)g->c.layers * sizeof(nn_gpt_block));
    w.blocks = malloc((size_t)g->c.layers * sizeof(nn_gpt_block));
    if (!k.blocks || !w.blocks) {
        free(k.blocks);
        free(w.blocks);
        return nn__fail(CHORUS_ERR_NOMEM, "nn_gpt_tp_move: out of memory");
    }
    memcpy(k.blocks, g->p.blocks, (size_t)g->c.layers * sizeof(nn_gpt_block));
    memcpy(w.blocks, whole->p.blocks, (size_t)g->c.layers * sizeof(nn_gpt_block));
    rebase(g, &k, shard);
    rebase(whole, &w, wvec);
    move_shard(g, (size_t)r, &k, &w, to_whole);
    free(k.blocks);
    free(w.blocks);
    return CHORUS_OK;
}
