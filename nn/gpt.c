/*
 * gpt.c - a GPT in plain C over the BLAS (include/chorus/nn/gpt.h): each kernel below is one
 * function with its forward and backward side by side, shapes in the comments (B sequences of
 * T tokens, width C, NH heads of HS = C/NH, vocabulary V, N = B*T positions). Matrix products
 * are cblas_sgemm on row-major arrays; linear weights are (out, in) as in torch.nn.Linear.
 * Backward functions ADD to parameter gradients and, where said, to input gradients.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/nn.h"
#include "nn_internal.h"

#define LN_EPS 1e-5f

/* What one block's forward keeps for its backward. */
typedef struct gpt_layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
    float *qkv;                       /* (N,3C) */
    float *att;                       /* (B,NH,T,T) attention probabilities */
    float *atty;                      /* (N,C) heads' outputs side by side */
    float *res2;                      /* (N,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N,C), (N), (N) */
    float *fch, *fchg;                /* (N,4C) MLP hidden before and after GELU */
    float *res3;                      /* (N,C) the block's output */
} gpt_layer_acts;

struct nn_gpt_acts {
    float *encoded;                   /* (N,C) embeddings: the first block's input */
    gpt_layer_acts *l;                /* (layers) */
    float *lnf, *lnf_mean, *lnf_rstd; /* (N,C), (N), (N) */
    float *logits;                    /* (N,V); after nn_gpt_loss their gradient */
    /* backward scratch */
    float *dres;     /* (N,C) gradient of the residual stream */
    float *dln;      /* (N,C) gradient of a LayerNorm's output */
    float *datty;    /* (N,C) */
    float *dqkv;     /* (N,3C) */
    float *dfch;     /* (N,4C) */
    float *dscores;  /* (T,T) one head's score gradient */
    int32_t *tokens; /* (N) the last forward's input */
    float *mem;      /* the one allocation the above point into */
};

/* ---- kernels --------------------------------------------------------------------------- */

/* out (N,C) = wte[token] + wpe[position]; tokens (B,T). */
static void encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                            int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *te = wte + (size_t)tokens[b * T + t] * C, *pe = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) o[i] = te[i] + pe[i];
        }
}

/* dwte, dwpe += the rows of dout (N,C) at each position's token and position. */
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                             int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *dte = dwte + (size_t)tokens[b * T + t] * C, *dpe = dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {
                dte[i] += d[i];
                dpe[i] += d[i];
            }
        }
}

/* LayerNorm over each row of C, forward and backward: nn__layernorm_* (gpt_rows.c). */
static void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                              const float *b, int N, int C)
{
    nn__layernorm_forward(out, mean, rstd, in, w, b, N, C, LN_EPS);
}

/* out (N,OUT) = in (N,IN) W^T + bias, W (OUT,IN). */
static void matmul_forward(float *out, const float *in, const float *w, const float *bias, int N,
                           int IN, int OUT)
{
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OUT, bias, (size_t)OUT * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OUT, IN, 1.0f, in, IN, w, IN, 1.0f, out,
                OUT);
}

/* din (N,IN) = dout W (set, not added); dw (OUT,IN) += dout^T in; dbias += dout's column sums. */
static void matmul_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                            const float *w, int N, int IN, int OUT)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN, OUT, 1.0f, dout, OUT, w, IN, 0.0f,
                din, IN);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, N, 1.0f, dout, OUT, in, IN, 1.0f,
                dw, IN);
    nn__bias_grad(dbias, dout, N, OUT);
}

/* Causal self-attention. qkv (B,T,3C) holds each position's query, key and value, head h at
 * columns h*HS of each; out (B,T,C) the heads' outputs side by side; att (B,NH,T,T) keeps
 * softmax(q k^T / sqrt(HS)) with the future (j > i) masked to 0. */
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    int HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * HS, *k = q + C, *v = q + 2 * C;
            float *p = att + ((size_t)b * NH + h) * T * T;
            /* scores (T,T) = q k^T * scale */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, scale, q, C3, k, C3,
                        0.0f, p, T);
            nn__softmax_causal(p, T); /* row softmax over j <= i */
            /* out (T,HS) = p v */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, 1.0f, p, T, v, C3,
                        0.0f, out + (size_t)b * T * C + h * HS, C);
        }
}

/* dqkv (B,T,3C) = the gradient through attention of dout (B,T,C) (set, not added), from the
 * forward's qkv and att; ds (T,T) is scratch. */
static void attention_backward(float *dqkv, float *ds, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH)
{
    int HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t at = (size_t)b * T * C3 + h * HS;
            const float *q = qkv + at, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + at, *dk = dq + C, *dv = dq + 2 * C;
            const float *p = att + ((size_t)b * NH + h) * T * T;
            const float *dy = dout + (size_t)b * T * C + h * HS;
            /* dp (T,T) = dy v^T; dv (T,HS) = p^T dy */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, 1.0f, dy, C, v, C3, 0.0f,
                        ds, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, 1.0f, p, T, dy, C, 0.0f,
                        dv, C3);
            /* through the softmax: ds = p * (dp - sum_j p dp), row by row (masked p are 0) */
            nn__softmax_causal_backward(ds, p, T);
            /* dq = ds k * scale; dk = ds^T q * scale */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, scale, ds, T, k, C3,
                        0.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, scale, ds, T, q, C3,
                        0.0f, dk, C3);
        }
}

/* ---- the model ------------------------------------------------------------------------- */

/* One block's parameters on this rank (its shard with tensor parallelism). */
static size_t block_params(const nn_gpt *g)
{
    size_t C = (size_t)g->c.d_model, Cl = (size_t)g->c_local, Fl = (size_t)g->ff_local;
    return 2 * C + (3 * Cl * C + 3 * Cl) + (C * Cl + C) + 2 * C + (Fl * C + Fl) + (C * Fl + C);
}

/* Sums buf (n floats) over the tensor-parallel ranks in place; the first failure is latched
 * in m->comm_err (later sums of a failed model are skipped). */
static void tp_sum(nn_gpt *g, float *buf, size_t n, const char *what)
{
    if (g->tp_size == 1 || g->m->comm_err) return;
    chorus_result r = chorus_allreduce(g->tp_comm, buf, buf, n, CHORUS_FLOAT32, CHORUS_SUM);
    if (r != CHORUS_OK)
        g->m->comm_err = nn__fail(r, "GPT tensor parallel %s (%d ranks): %s", what, g->tp_size,
                                  chorus_last_error(g->tp_comm));
}

/* A row-parallel linear layer into the residual stream: out (N,OUT) = the sum over the ranks
 * of in (N,IN) W^T, W (OUT,IN) this rank's columns, plus the bias (whole, added once after the
 * sum), plus res (N,OUT). */
static void row_forward(nn_gpt *g, float *out, const float *in, const float *w, const float *bias,
                        const float *res, int N, int IN, int OUT)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OUT, IN, 1.0f, in, IN, w, IN, 0.0f, out,
                OUT);
    tp_sum(g, out, (size_t)N * OUT, "row-parallel forward");
    nn__add_bias_residual(out, bias, res, N, OUT);
}

chorus_result nn_gpt_preset(const char *name, nn_gpt_config *c)
{
    if (!strcmp(name, "tiny")) {
        *c = (nn_gpt_config){.layers = 4, .d_model = 128, .heads = 4, .context = 64, .vocab = 256};
        return CHORUS_OK;
    }
    if (!strcmp(name, "gpt2-124m")) {
        *c = (nn_gpt_config){
            .layers = 12, .d_model = 768, .heads = 12, .context = 1024, .vocab = 50257};
        return CHORUS_OK;
    }
    return nn__fail(CHORUS_ERR_INVALID_ARG,
                    "unknown GPT preset '%s' (the presets: tiny, gpt2-124m)", name);
}

/* Points p's views into the groups of g->m (their parameters, or with grads their
 * gradients): each group's views from its layer's w or dw, laid out as the layer says; what a
 * stage does not hold is NULL. */
static void point_params(const nn_gpt *g, nn_gpt_params *p, int grads)
{
    size_t C = (size_t)g->c.d_model, Cl = (size_t)g->c_local, Fl = (size_t)g->ff_local;
    const nn_layer *G = g->m->layers;
    p->wte = p->wpe = p->lnfw = p->lnfb = NULL;
    if (g->grp_emb >= 0) {
        p->wte = grads ? G[g->grp_emb].dw : G[g->grp_emb].w;
        if (g->lo == 0) p->wpe = p->wte + (size_t)g->c.vocab * C;
    }
    for (int l = g->lo; l < g->hi; l++) {
        int i = g->grp_block + (l - g->lo);
        float *q = grads ? G[i].dw : G[i].w;
        nn_gpt_block *k = &p->blocks[l];
        k->ln1w = q, q += C;
        k->ln1b = q, q += C;
        k->qkvw = q, q += 3 * Cl * C;
        k->qkvb = q, q += 3 * Cl;
        k->projw = q, q += C * Cl;
        k->projb = q, q += C;
        k->ln2w = q, q += C;
        k->ln2b = q, q += C;
        k->fcw = q, q += Fl * C;
        k->fcb = q, q += Fl;
        k->fc2w = q, q += C * Fl;
        k->fc2b = q;
    }
    if (g->grp_lnf >= 0) {
        p->lnfw = grads ? G[g->grp_lnf].dw : G[g->grp_lnf].w;
        p->lnfb = p->lnfw + C;
    }
}

void nn_gpt_point_grads(nn_gpt *g)
{
    point_params(g, &g->g, 1);
}

void nn_gpt_point_params(nn_gpt *g)
{
    point_params(g, &g->p, 0);
}

/* The parameters as an nn_model of parameter groups (gpt.h: nn_gpt.m): the shapes go into its
 * layers so that its signature (checkpoints) tells one configuration from another. A stage's
 * groups are those it holds, in the whole model's order: the embeddings (a later last stage:
 * the token embedding alone), its blocks, the final LayerNorm. */
static chorus_result make_param_model(nn_gpt *g)
{
    const nn_gpt_config *c = &g->c;
    size_t C = (size_t)c->d_model;
    int first = g->lo == 0, last = g->hi == c->layers;
    g->grp_emb = first || last ? 0 : -1;
    g->grp_block = first || last ? 1 : 0;
    g->grp_lnf = last ? g->grp_block + (g->hi - g->lo) : -1;
    nn_model *m = g->m = nn_model_create(c->context, 1, 1);
    int nl = g->grp_block + (g->hi - g->lo) + last;
    if (!m || !(m->layers = calloc((size_t)nl, sizeof(nn_layer))))
        return nn__fail(CHORUS_ERR_NOMEM, "nn_gpt_create: out of memory");
    m->nlayers = m->cap = nl;
    size_t off = 0;
    for (int i = 0; i < nl; i++) {
        nn_layer *L = &m->layers[i];
        L->kind = i == g->grp_lnf ? NN_LAYERNORM : NN_LINEAR;
        L->nparams = i == g->grp_emb   ? ((size_t)c->vocab + (first ? (size_t)c->context : 0)) * C
                     : i == g->grp_lnf ? 2 * C
                                       : block_params(g);
        L->in_c = L->out_c = c->d_model, L->in_h = L->out_h = c->heads;
        L->in_w = L->out_w = i == g->grp_emb ? c->vocab : g->tp_size;
        L->param_off = off;
        off += L->nparams;
    }
    m->nparams = off;
    m->max_batch = g->max_batch;
    m->params = calloc(off, sizeof(float));
    m->grads = calloc(off, sizeof(float));
    g->p.blocks = calloc((size_t)c->layers, sizeof(nn_gpt_block));
    g->g.blocks = calloc((size_t)c->layers, sizeof(nn_gpt_block));
    if (!m->params || !m->grads || !g->p.blocks || !g->g.blocks)
        return nn__fail(CHORUS_ERR_NOMEM, "nn_gpt_create: out of memory for %zu parameters", off);
    for (int i = 0; i < nl; i++) {
        m->layers[i].w = m->params + m->layers[i].param_off;
        m->layers[i].dw = m->grads + m->layers[i].param_off;
    }
    point_params(g, &g->p, 0);
    point_params(g, &g->g, 1);
    return CHORUS_OK;
}

static float *take(float **cur, size_t n)
{
    float *p = *cur;
    *cur += n;
    return p;
}

/* Carves the activations and scratch out of one allocation (floats counted by a dry run when
 * base is NULL). Returns the floats used. */
static size_t carve_acts(nn_gpt *g, float *base)
{
    struct nn_gpt_acts *a = g->a;
    size_t C = (size_t)g->c.d_model, T = (size_t)g->c.context, Cl = (size_t)g->c_local;
    size_t N = (size_t)g->max_batch * T, NHl = (size_t)(g->c.heads / g->tp_size);
    size_t Fl = (size_t)g->ff_local;
    float *cur = base;
    a->encoded = g->lo == 0 ? take(&cur, N * C) : NULL; /* a later stage's input is given */
    for (int l = g->lo; l < g->hi; l++) {
        gpt_layer_acts *k = &a->l[l];
        if (g->recompute && l > g->lo) { /* the first block's inner activations, its output */
            *k = a->l[g->lo];
            k->res3 = take(&cur, N * C);
            continue;
        }
        k->ln1 = take(&cur, N * C), k->ln1_mean = take(&cur, N), k->ln1_rstd = take(&cur, N);
        k->qkv = take(&cur, 3 * N * Cl);
        k->att = take(&cur, (size_t)g->max_batch * NHl * T * T);
        k->atty = take(&cur, N * Cl), k->res2 = take(&cur, N * C);
        k->ln2 = take(&cur, N * C), k->ln2_mean = take(&cur, N), k->ln2_rstd = take(&cur, N);
        k->fch = take(&cur, N * Fl), k->fchg = take(&cur, N * Fl);
        k->res3 = take(&cur, N * C);
    }
    if (g->hi == g->c.layers) { /* the last stage's head */
        a->lnf = take(&cur, N * C), a->lnf_mean = take(&cur, N), a->lnf_rstd = take(&cur, N);
        a->logits = take(&cur, N * (size_t)g->c.vocab);
    }
    a->dres = take(&cur, N * C), a->dln = take(&cur, N * C), a->datty = take(&cur, N * Cl);
    a->dqkv = take(&cur, 3 * N * Cl), a->dfch = take(&cur, N * Fl);
    a->dscores = take(&cur, T * T);
    return (size_t)(cur - base);
}

static void free_acts(struct nn_gpt_acts *a)
{
    if (!a) return;
    free(a->l);
    free(a->mem);
    free(a->tokens);
    free(a);
}

/* g->a for g's shape and g->recompute. Errors: CHORUS_ERR_NOMEM (g->a NULL). */
static chorus_result alloc_acts(nn_gpt *g)
{
    const nn_gpt_config *c = &g->c;
    struct nn_gpt_acts *a = g->a = calloc(1, sizeof(*g->a));
    if (a) a->l = calloc((size_t)c->layers, sizeof(gpt_layer_acts));
    size_t n = a && a->l ? carve_acts(g, NULL) : 0;
    if (n) a->mem = malloc(n * sizeof(float));
    size_t ntok = (size_t)g->max_batch * (size_t)c->context;
    if (n && a->mem) a->tokens = malloc(ntok * sizeof(int32_t));
    if (!n || !a->mem || !a->tokens) {
        free_acts(a);
        g->a = NULL;
        return nn__fail(CHORUS_ERR_NOMEM,
                        "nn_gpt_create: out of memory for %zu floats of activations", n);
    }
    carve_acts(g, a->mem);
    g->act_bytes = n * sizeof(float) + ntok * sizeof(int32_t);
    return CHORUS_OK;
}

chorus_result nn_gpt_set_recompute(nn_gpt *g, int on)
{
    struct nn_gpt_acts *old = g->a;
    int was = g->recompute;
    g->recompute = on != 0;
    if (alloc_acts(g)) {
        g->a = old, g->recompute = was;
        return CHORUS_ERR_NOMEM;
    }
    free_acts(old);
    return CHORUS_OK;
}

nn_gpt *nn_gpt_create(const nn_gpt_config *c, int max_batch)
{
    return nn_gpt_create_tp(c, max_batch, NULL);
}

/* nn_gpt_create_tp and nn_gpt_create_stage: blocks [lo, hi) split over tp_comm. */
static nn_gpt *create(const nn_gpt_config *c, int max_batch, chorus_comm *tp_comm, int lo, int hi)
{
    int tp = tp_comm ? chorus_size(tp_comm) : 1;
    if (c->layers <= 0 || c->d_model <= 0 || c->heads <= 0 || c->context <= 0 || c->vocab <= 0 ||
        max_batch < 0) {
        nn__fail(CHORUS_ERR_INVALID_ARG,
                 "nn_gpt_create: every size must be positive (layers %d, d_model %d, heads %d, "
                 "context %d, vocab %d, batch %d)",
                 c->layers, c->d_model, c->heads, c->context, c->vocab, max_batch);
        return NULL;
    }
    if (c->d_model % c->heads) {
        nn__fail(CHORUS_ERR_INVALID_ARG,
                 "nn_gpt_create: d_model %d is not a multiple of the %d heads", c->d_model,
                 c->heads);
        return NULL;
    }
    if (c->heads % tp) {
        nn__fail(CHORUS_ERR_INVALID_ARG,
                 "nn_gpt_create: the %d heads do not divide among %d tensor-parallel ranks",
                 c->heads, tp);
        return NULL;
    }
    if (lo < 0 || hi > c->layers || lo >= hi) {
        nn__fail(CHORUS_ERR_INVALID_ARG,
                 "nn_gpt_create_stage: blocks [%d, %d) are not a non-empty range of the %d", lo, hi,
                 c->layers);
        return NULL;
    }
    nn_gpt *g = calloc(1, sizeof(*g));
    if (!g) return nn__fail(CHORUS_ERR_NOMEM, "nn_gpt_create: out of memory"), NULL;
    g->c = *c;
    g->max_batch = max_batch;
    g->tp_comm = tp > 1 ? tp_comm : NULL;
    g->tp_size = tp;
    g->tp_rank = tp > 1 ? chorus_rank(tp_comm) : 0;
    g->c_local = c->d_model / tp;
    g->ff_local = 4 * c->d_model / tp;
    g->lo = lo, g->hi = hi;
    if (make_param_model(g)) return nn_gpt_destroy(g), NULL;
    if (max_batch > 0 && alloc_acts(g)) return nn_gpt_destroy(g), NULL;
    return g;
}

nn_gpt *nn_gpt_create_tp(const nn_gpt_config *c, int max_batch, chorus_comm *tp_comm)
{
    return create(c, max_batch, tp_comm, 0, c->layers);
}

nn_gpt *nn_gpt_create_stage(const nn_gpt_config *c, int max_batch, int lo, int hi)
{
    return create(c, max_batch, NULL, lo, hi);
}

nn_gpt *nn_gpt_create_replica(const nn_gpt *owner)
{
    nn_gpt *g = create(&owner->c, owner->max_batch, NULL, owner->lo, owner->hi);
    if (!g) return NULL;
    if (owner->recompute && nn_gpt_set_recompute(g, 1)) return nn_gpt_destroy(g), NULL;
    nn_model *m = g->m;
    free(m->params);
    free(m->grads);
    m->params = owner->m->params;
    m->grads = owner->m->grads;
    for (int i = 0; i < m->nlayers; i++) {
        m->layers[i].w = owner->m->layers[i].w;
        m->layers[i].dw = owner->m->layers[i].dw;
    }
    point_params(g, &g->p, 0);
    point_params(g, &g->g, 1);
    g->borrowed = 1;
    return g;
}

size_t nn_gpt_stage_ranges(const nn_gpt_config *c, int lo, int hi, size_t off[2], size_t n[2])
{
    size_t C = (size_t)c->d_model, V = (size_t)c->vocab, bp = 12 * C * C + 13 * C;
    size_t blocks = (V + (size_t)c->context) * C, k = 0;       /* where block 0 starts */
    if (lo > 0 && hi == c->layers) off[k] = 0, n[k++] = V * C; /* the tied copy */
    off[k] = lo == 0 ? 0 : blocks + (size_t)lo * bp;
    n[k] = (size_t)(hi - lo) * bp + (lo == 0 ? blocks : 0) + (hi == c->layers ? 2 * C : 0);
    return k + 1;
}

void nn_gpt_destroy(nn_gpt *g)
{
    if (!g) return;
    free_acts(g->a);
    free(g->p.blocks);
    free(g->g.blocks);
    if (g->borrowed && g->m) g->m->params = g->m->grads = NULL; /* the owner's */
    nn_model_destroy(g->m);
    free(g);
}

/* n values from N(0, std^2), by Box-Muller over r. */
static void fill_normal(float *p, size_t n, float std, nn_rng *r)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - (double)nn_rng_uniform(r), u2 = (double)nn_rng_uniform(r);
        double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
        p[i] = (float)(rad * cos(th)) * std;
        if (i + 1 < n) p[i + 1] = (float)(rad * sin(th)) * std;
    }
}

static void fill(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++) p[i] = v;
}

/* With tensor parallelism or as a pipeline stage: the unsplit model's parameters alone (no
 * activations), initialised, and this rank's shard or stage of them, so that the split model
 * starts where the unsplit one does. */
static chorus_result init_part(nn_gpt *g, uint64_t seed)
{
    nn_gpt w = {.c = g->c, .max_batch = 0, .tp_size = 1, .hi = g->c.layers};
    w.c_local = g->c.d_model, w.ff_local = 4 * g->c.d_model;
    chorus_result r = make_param_model(&w);
    if (r == CHORUS_OK) r = nn_gpt_init_params(&w, seed);
    if (r == CHORUS_OK && g->tp_size > 1) nn_gpt_copy_shard(g, &w);
    if (r == CHORUS_OK && g->tp_size == 1) nn_gpt_copy_stage(g, w.m->params);
    free(w.p.blocks);
    free(w.g.blocks);
    nn_model_destroy(w.m);
    g->m->seed = seed;
    return r;
}

void nn_gpt_copy_stage(nn_gpt *g, const float *whole)
{
    size_t off[2], n[2], at = 0, k = nn_gpt_stage_ranges(&g->c, g->lo, g->hi, off, n);
    for (size_t i = 0; i < k; at += n[i], i++)
        memcpy(g->m->params + at, whole + off[i], n[i] * sizeof(float));
}

chorus_result nn_gpt_init_params(nn_gpt *g, uint64_t seed)
{
    if (g->tp_size > 1 || g->lo > 0 || g->hi < g->c.layers) return init_part(g, seed);
    size_t C = (size_t)g->c.d_model;
    float std = 0.02f, res_std = 0.02f / sqrtf(2.0f * (float)g->c.layers);
    nn_rng r;
    nn_rng_seed(&r, nn_seed_mix(seed, 0x67707400, 0, 0));
    memset(g->m->params, 0, g->m->nparams * sizeof(float));
    fill_normal(g->p.wte, (size_t)g->c.vocab * C, std, &r);
    fill_normal(g->p.wpe, (size_t)g->c.context * C, std, &r);
    for (int l = 0; l < g->c.layers; l++) {
        nn_gpt_block *k = &g->p.blocks[l];
        fill(k->ln1w, C, 1.0f);
        fill(k->ln2w, C, 1.0f);
        size_t Cl = (size_t)g->c_local, Fl = (size_t)g->ff_local;
        fill_normal(k->qkvw, 3 * Cl * C, std, &r);
        fill_normal(k->projw, C * Cl, res_std, &r);
        fill_normal(k->fcw, Fl * C, std, &r);
        fill_normal(k->fc2w, C * Fl, res_std, &r);
    }
    fill(g->p.lnfw, C, 1.0f);
    g->m->seed = seed;
    return CHORUS_OK;
}

/* One block's forward: x (N,C) in, a->res3 out. */
static void block_forward(nn_gpt *g, int l, const float *x)
{
    const nn_gpt_block *p = &g->p.blocks[l];
    gpt_layer_acts *a = &g->a->l[l];
    int B = g->B, T = g->T, C = g->c.d_model, N = B * T, Cl = g->c_local, Fl = g->ff_local;
    /* attention: QKV column-parallel (this rank's heads), the output row-parallel */
    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C);
    matmul_forward(a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * Cl);
    attention_forward(a->atty, a->att, a->qkv, B, T, Cl, g->c.heads / g->tp_size);
    row_forward(g, a->res2, a->atty, p->projw, p->projb, x, N, Cl, C); /* + the residual */
    /* MLP: fc column-parallel (this rank's hidden units), fc2 row-parallel */
    layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C);
    matmul_forward(a->fch, a->ln2, p->fcw, p->fcb, N, C, Fl);
    nn__gelu_forward(a->fchg, a->fch, (size_t)N * Fl);
    row_forward(g, a->res3, a->fchg, p->fc2w, p->fc2b, a->res2, N, Fl, C);
}

/* Before group `group`'s parameters are read, in forward and in backward: the model's forward
 * hook (ZeRO-1/2's wait for their all-gather; ZeRO-3's all-gather of them). */
static void group_ready(nn_gpt *g, int group)
{
    if (g->m->fwd_hook) g->m->fwd_hook(g->m, group, g->m->fwd_hook_arg);
}

const float *nn_gpt_stage_forward(nn_gpt *g, const int32_t *tokens, const float *x, int B, int T)
{
    struct nn_gpt_acts *a = g->a;
    int C = g->c.d_model, N = B * T;
    g->B = B, g->T = T;
    if (g->lo == 0) {
        memcpy(a->tokens, tokens, (size_t)N * sizeof(int32_t));
        group_ready(g, g->grp_emb);
        encoder_forward(a->encoded, a->tokens, g->p.wte, g->p.wpe, B, T, C);
        x = a->encoded;
    }
    g->input = x;
    for (int l = g->lo; l < g->hi; l++) {
        group_ready(g, g->grp_block + (l - g->lo));
        block_forward(g, l, x);
        x = a->l[l].res3;
    }
    if (g->hi < g->c.layers) return x; /* the residual stream, for the next stage */
    group_ready(g, g->grp_lnf);
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, g->p.lnfw, g->p.lnfb, N, C);
    /* logits (N,V) = lnf wte^T: the output layer is the token embedding (a later last stage's
     * tied copy; under ZeRO-3 gathered again, the blocks having used the buffer since) */
    group_ready(g, g->grp_emb);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, g->c.vocab, C, 1.0f, a->lnf, C,
                g->p.wte, C, 0.0f, a->logits, g->c.vocab);
    return a->logits;
}

const float *nn_gpt_forward(nn_gpt *g, const int32_t *tokens, int B, int T)
{
    return nn_gpt_stage_forward(g, tokens, NULL, B, T);
}

double nn_gpt_loss(nn_gpt *g, const int32_t *targets, float grad_scale, long *hits)
{
    int V = g->c.vocab, N = g->B * g->T;
    double loss = 0;
    for (int n = 0; n < N; n++) {
        float *z = g->a->logits + (size_t)n * V;
        int best = 0, y = targets[n];
        for (int v = 1; v < V; v++) best = z[v] > z[best] ? v : best;
        if (hits) *hits += best == y;
        loss += nn__xent_row(z, V, y, grad_scale); /* z becomes its gradient */
    }
    return loss;
}

/* One block's backward: a->dres holds the gradient of its output and becomes that of its input
 * x; the parameter gradients are added. */
static void block_backward(nn_gpt *g, int l, const float *x)
{
    const nn_gpt_block *p = &g->p.blocks[l];
    nn_gpt_block *d = &g->g.blocks[l];
    const gpt_layer_acts *a = &g->a->l[l];
    struct nn_gpt_acts *s = g->a;
    int B = g->B, T = g->T, C = g->c.d_model, N = B * T, Cl = g->c_local, Fl = g->ff_local;
    /* MLP: res3 = res2 + fc2(gelu(fc(ln2(res2)))); the ranks' parts of dln add up */
    matmul_backward(s->dfch, d->fc2w, d->fc2b, s->dres, a->fchg, p->fc2w, N, Fl, C);
    nn__gelu_backward(s->dfch, a->fch, (size_t)N * Fl);
    matmul_backward(s->dln, d->fcw, d->fcb, s->dfch, a->ln2, p->fcw, N, C, Fl);
    tp_sum(g, s->dln, (size_t)N * C, "MLP backward");
    nn__layernorm_backward(s->dres, d->ln2w, d->ln2b, s->dln, a->res2, p->ln2w, a->ln2_mean,
                           a->ln2_rstd, N, C);
    /* attention: res2 = x + proj(attention(qkv(ln1(x)))) */
    matmul_backward(s->datty, d->projw, d->projb, s->dres, a->atty, p->projw, N, Cl, C);
    attention_backward(s->dqkv, s->dscores, s->datty, a->qkv, a->att, B, T, Cl,
                       g->c.heads / g->tp_size);
    matmul_backward(s->dln, d->qkvw, d->qkvb, s->dqkv, a->ln1, p->qkvw, N, C, 3 * Cl);
    tp_sum(g, s->dln, (size_t)N * C, "attention backward");
    nn__layernorm_backward(s->dres, d->ln1w, d->ln1b, s->dln, x, p->ln1w, a->ln1_mean, a->ln1_rstd,
                           N, C);
}

static void group_done(nn_gpt *g, int group)
{
    if (g->m->grad_hook) g->m->grad_hook(g->m, group, g->m->grad_hook_arg);
}

const float *nn_gpt_stage_backward(nn_gpt *g, const float *dout)
{
    struct nn_gpt_acts *a = g->a;
    int B = g->B, T = g->T, C = g->c.d_model, V = g->c.vocab, N = B * T;
    int last = g->hi == g->c.layers;
    if (last) {
        /* the tied output layer: dlnf (N,C) = dlogits wte (its dwte below, with the
         * embeddings': each group's gradient is written between the hooks of the groups before
         * and after it) */
        group_ready(g, g->grp_emb);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, V, 1.0f, a->logits, V,
                    g->p.wte, C, 0.0f, a->dln, C);
        memset(a->dres, 0, (size_t)N * C * sizeof(float));
        const float *top = g->hi > g->lo ? a->l[g->hi - 1].res3 : g->input;
        group_ready(g, g->grp_lnf);
        nn__layernorm_backward(a->dres, g->g.lnfw, g->g.lnfb, a->dln, top, g->p.lnfw, a->lnf_mean,
                               a->lnf_rstd, N, C);
        group_done(g, g->grp_lnf);
    } else {
        memcpy(a->dres, dout, (size_t)N * C * sizeof(float));
    }
    for (int l = g->hi - 1; l >= g->lo; l--) {
        const float *x = l > g->lo ? a->l[l - 1].res3 : g->input;
        group_ready(g, g->grp_block + (l - g->lo));
        if (g->recompute && l < g->hi - 1) block_forward(g, l, x); /* its inner acts again */
        block_backward(g, l, x);
        group_done(g, g->grp_block + (l - g->lo));
    }
    /* dwte += dlogits^T lnf, then the embeddings' rows */
    if (last)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, C, N, 1.0f, a->logits, V, a->lnf, C,
                    1.0f, g->g.wte, C);
    if (g->lo == 0) encoder_backward(g->g.wte, g->g.wpe, a->dres, a->tokens, B, T, C);
    if (g->grp_emb >= 0) group_done(g, g->grp_emb);
    return g->lo == 0 ? NULL : a->dres;
}

void nn_gpt_backward(nn_gpt *g)
{
    nn_gpt_stage_backward(g, NULL);
}

int32_t nn_gpt_sample_next(nn_gpt *g, const int32_t *tokens, int n, float temperature, nn_rng *r)
{
    int T = n < g->c.context ? n : g->c.context, V = g->c.vocab;
    const float *z = nn_gpt_forward(g, tokens + (n - T), 1, T) + (size_t)(T - 1) * V;
    float mx = z[0];
    for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)(z[v] - mx) / temperature);
    double u = (double)nn_rng_uniform(r) * sum, acc = 0;
    for (int v = 0; v < V; v++) {
        acc += exp((double)(z[v] - mx) / temperature);
        if (u < acc) return v;
    }
    return V - 1;
}

/* The sum of squares of the gradients in [a, b) of g->m->grads. */
static double sum_sq(const float *a, const float *b)
{
    double s = 0;
    for (; a < b; a++) s += (double)*a * *a;
    return s;
}

chorus_result nn_gpt_grad_sumsq(nn_gpt *g, double *sumsq)
{
    const nn_model *m = g->m;
    double whole = 0, split = 0; /* held whole on every rank; split over the ranks */
    if (g->lo == 0) /* a later stage's copy of the tied token embedding is not counted */
        whole += sum_sq(g->g.wte, g->g.wte + m->layers[g->grp_emb].nparams);
    if (g->grp_lnf >= 0) whole += sum_sq(g->g.lnfw, g->g.lnfw + 2 * (size_t)g->c.d_model);
    for (int l = g->lo; l < g->hi; l++) {
        const nn_gpt_block *d = &g->g.blocks[l];
        const nn_layer *G = &m->layers[g->grp_block + (l - g->lo)];
        const float *end = G->dw + G->nparams;
        whole += sum_sq(d->ln1w, d->qkvw) + sum_sq(d->projb, d->fcw) + sum_sq(d->fc2b, end);
        split += sum_sq(d->qkvw, d->projb) + sum_sq(d->fcw, d->fc2b);
    }
    if (g->tp_size > 1) {
        chorus_result r =
            chorus_allreduce(g->tp_comm, &split, &split, 1, CHORUS_FLOAT64, CHORUS_SUM);
        if (r != CHORUS_OK)
            return nn__fail(r, "GPT gradient norm over %d tensor-parallel ranks: %s", g->tp_size,
                            chorus_last_error(g->tp_comm));
    }
    *sumsq = whole + split;
    return CHORUS_OK;
}

chorus_result nn_gpt_grad_norm(nn_gpt *g, double *norm)
{
    double s = 0;
    chorus_result r = nn_gpt_grad_sumsq(g, &s);
    *norm = sqrt(s);
    return r;
}
