/*
 * nn_gpt.c - the GPT of nn/gpt.c. Without arguments: its checks of its own (shapes refused with
 * their message, the parameter count of GPT-2 small, backward passes accumulating, the gradient
 * hook's order, a loss that falls under training). With a directory: writes a small model's
 * weights, one batch, its loss and every gradient there, for tests/python/gpt_torch.py to
 * compare with the same model in PyTorch; with --tp or --pipe and a directory, on 2 ranks, the
 * same for the model split by tensor parallelism or cut into 2 pipeline stages; with --zero1 or
 * --zero2, on 2 ranks, for the model trained under ZeRO-1 or ZeRO-2, with the parameters after
 * one AdamW step.
 */
#include <cblas.h>

#include "chorus/nn.h"
#include "harness.h"

static const nn_gpt_config small = {
    .layers = 2, .d_model = 32, .heads = 4, .context = 16, .vocab = 256};

/* Weights from the model's initialisation, moved off it (every LayerNorm gain not 1, every
 * bias not 0) so that each gradient of the comparison is a real one. */
static nn_gpt *make_model(const nn_gpt_config *c, int B, uint64_t seed)
{
    nn_gpt *g = nn_gpt_create(c, B);
    ASSERT(g != NULL);
    ASSERT_NN_OK(nn_gpt_init_params(g, seed));
    nn_rng r;
    nn_rng_seed(&r, seed + 1);
    for (size_t i = 0; i < g->m->nparams; i++)
        g->m->params[i] += 0.1f * (nn_rng_uniform(&r) - 0.5f);
    return g;
}

static void random_tokens(int32_t *t, size_t n, int vocab, uint64_t seed)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)nn_rng_below(&r, (uint64_t)vocab);
}

static void write_file(const char *dir, const char *name, const void *p, size_t bytes)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ASSERT(f != NULL);
    ASSERT_EQ(fwrite(p, 1, bytes, f), bytes);
    ASSERT_EQ(fclose(f), 0);
}

/* The batch of the comparisons, into g: forward, loss (returned, the mean), backward. */
static double one_step(nn_gpt *g, int32_t *tok, int32_t *tgt)
{
    const int B = 3, T = small.context;
    random_tokens(tok, (size_t)B * T, small.vocab, 11);
    random_tokens(tgt, (size_t)B * T, small.vocab, 12);
    nn_zero_grad(g->m);
    nn_gpt_forward(g, tok, B, T);
    double loss = nn_gpt_loss(g, tgt, 1.0f / (float)(B * T), NULL) / (B * T);
    nn_gpt_backward(g);
    return loss;
}

/* --tp DIR: this rank's shard of the model of dump(), one step, its gradients. */
static int dump_tp(const char *dir)
{
    chorus_comm *comm;
    ASSERT_OK(chorus_init(&comm));
    int rank = chorus_rank(comm);
    test_rank = rank;
    nn_gpt *whole = make_model(&small, 3, 7);
    nn_gpt *g = nn_gpt_create_tp(&small, 3, comm);
    ASSERT(g != NULL);
    /* the split model's own initialisation is the shard of the unsplit one's */
    nn_gpt *unsplit = nn_gpt_create(&small, 1);
    ASSERT(unsplit != NULL);
    ASSERT_NN_OK(nn_gpt_init_params(unsplit, 8));
    ASSERT_NN_OK(nn_gpt_init_params(g, 8));
    float *mine = malloc(g->m->nparams * sizeof(float));
    ASSERT(mine != NULL);
    memcpy(mine, g->m->params, g->m->nparams * sizeof(float));
    nn_gpt_copy_shard(g, unsplit);
    ASSERT(!memcmp(mine, g->m->params, g->m->nparams * sizeof(float)));
    free(mine);
    nn_gpt_destroy(unsplit);
    nn_gpt_copy_shard(g, whole);
    int32_t tok[3 * 16], tgt[3 * 16];
    double loss = one_step(g, tok, tgt);
    ASSERT_OK(nn_model_comm_status(g->m));
    char name[64], text[64];
    snprintf(name, sizeof(name), "grads.%d.f32", rank);
    write_file(dir, name, g->m->grads, g->m->nparams * sizeof(float));
    snprintf(name, sizeof(name), "loss.%d.txt", rank);
    int n = snprintf(text, sizeof(text), "%.17g\n", loss);
    write_file(dir, name, text, (size_t)n);
    printf("nn_gpt: rank %d of %d wrote its shard's gradients (%zu of %zu parameters) to %s\n",
           rank, g->tp_size, g->m->nparams, whole->m->nparams, dir);
    nn_gpt_destroy(g);
    nn_gpt_destroy(whole);
    chorus_finalize(comm);
    return 0;
}

/* --pipe DIR: the model of dump() cut into 2 pipeline stages (the embeddings and block 0 on
 * rank 0; block 1, the final LayerNorm and the tied output layer on rank 1), one step over
 * the batch as 2 micro-batches of 2 and 1 sequences run GPipe's way (both forwards, then both
 * backwards, the second in a replica of the stage), the residual stream sent forward and its
 * gradient back, the two copies of the token embedding adding each other's gradient; each
 * rank writes its stage's gradients (rank 1 the loss). */
static int dump_pipe(const char *dir)
{
    chorus_comm *comm;
    ASSERT_OK(chorus_init(&comm));
    int rank = chorus_rank(comm), T = small.context, C = small.d_model, nb[2] = {2, 1};
    test_rank = rank;
    ASSERT_EQ(chorus_size(comm), 2);
    nn_gpt *whole = make_model(&small, 3, 7);
    nn_gpt *g = nn_gpt_create_stage(&small, 2, rank, rank + 1);
    ASSERT(g != NULL);
    nn_gpt *mb[2] = {g, nn_gpt_create_replica(g)};
    ASSERT(mb[1] != NULL && mb[1]->m->params == g->m->params);
    /* the stage's own initialisation is its part of the unsplit model's */
    nn_gpt *unsplit = nn_gpt_create(&small, 1);
    ASSERT(unsplit != NULL);
    ASSERT_NN_OK(nn_gpt_init_params(unsplit, 8));
    ASSERT_NN_OK(nn_gpt_init_params(g, 8));
    float *mine = malloc(g->m->nparams * sizeof(float));
    ASSERT(mine != NULL);
    memcpy(mine, g->m->params, g->m->nparams * sizeof(float));
    nn_gpt_copy_stage(g, unsplit->m->params);
    ASSERT(!memcmp(mine, g->m->params, g->m->nparams * sizeof(float)));
    free(mine);
    nn_gpt_destroy(unsplit);
    nn_gpt_copy_stage(g, whole->m->params);
    int32_t tok[3 * 16], tgt[3 * 16];
    random_tokens(tok, sizeof(tok) / sizeof(tok[0]), small.vocab, 11);
    random_tokens(tgt, sizeof(tgt) / sizeof(tgt[0]), small.vocab, 12);
    float *x[2], *d[2];
    for (int j = 0; j < 2; j++) {
        x[j] = malloc((size_t)nb[j] * T * C * sizeof(float));
        d[j] = malloc((size_t)nb[j] * T * C * sizeof(float));
        ASSERT(x[j] != NULL && d[j] != NULL);
    }
    nn_zero_grad(g->m);
    double loss = 0;
    for (int j = 0, off = 0; j < 2; off += nb[j], j++) { /* forwards */
        size_t n = (size_t)nb[j] * T * C;
        if (rank == 0) {
            const float *out = nn_gpt_stage_forward(mb[j], tok + off * T, NULL, nb[j], T);
            ASSERT_OK(chorus_send(comm, out, n, CHORUS_FLOAT32, 1, j));
        } else {
            ASSERT_OK(chorus_recv(comm, x[j], n, CHORUS_FLOAT32, 0, j));
            nn_gpt_stage_forward(mb[j], NULL, x[j], nb[j], T);
            loss += nn_gpt_loss(mb[j], tgt + off * T, 1.0f / (float)(3 * T), NULL) / (3 * T);
        }
    }
    for (int j = 0; j < 2; j++) { /* backwards */
        size_t n = (size_t)nb[j] * T * C;
        if (rank == 0) {
            ASSERT_OK(chorus_recv(comm, d[j], n, CHORUS_FLOAT32, 1, 2 + j));
            ASSERT(nn_gpt_stage_backward(mb[j], d[j]) == NULL);
        } else {
            const float *dx = nn_gpt_stage_backward(mb[j], NULL);
            ASSERT(dx != NULL);
            ASSERT_OK(chorus_send(comm, dx, n, CHORUS_FLOAT32, 0, 2 + j));
        }
    }
    size_t nw = (size_t)small.vocab * C; /* the tie: each copy adds the other's gradient */
    float *other = malloc(nw * sizeof(float));
    ASSERT(other != NULL);
    chorus_request *req;
    ASSERT_OK(chorus_isend(comm, g->g.wte, nw, CHORUS_FLOAT32, 1 - rank, 4, &req));
    ASSERT_OK(chorus_recv(comm, other, nw, CHORUS_FLOAT32, 1 - rank, 4));
    ASSERT_OK(chorus_wait(req, NULL));
    for (size_t i = 0; i < nw; i++) g->g.wte[i] += other[i];
    char name[64], text[64];
    snprintf(name, sizeof(name), "grads.pipe.%d.f32", rank);
    write_file(dir, name, g->m->grads, g->m->nparams * sizeof(float));
    int n = snprintf(text, sizeof(text), "%.17g\n", loss);
    if (rank == 1) write_file(dir, "loss.pipe.txt", text, (size_t)n);
    printf("nn_gpt: pipeline stage %d of 2 (blocks %d-%d) wrote its gradients (%zu of %zu "
           "parameters) to %s\n",
           rank, g->lo, g->hi - 1, g->m->nparams, whole->m->nparams, dir);
    for (int j = 0; j < 2; j++) free(x[j]), free(d[j]);
    free(other);
    nn_gpt_destroy(mb[1]);
    nn_gpt_destroy(g);
    nn_gpt_destroy(whole);
    chorus_finalize(comm);
    return 0;
}

/* The AdamW step of --zero: learning rate, betas, eps, weight decay (written to adamw.txt for
 * the torch reference). */
static const float zero_adamw[5] = {0.01f, 0.9f, 0.999f, 1e-8f, 0.1f};

/* This rank's ZeRO shard of a stage-2 gradient: the segments' layout beside the chunks. */
static void write_zero_shard(const char *dir, const nn_zero *z, int stage, int rank)
{
    char name[64];
    snprintf(name, sizeof(name), "segs.zero%d.%d.txt", stage, rank);
    size_t cap = (size_t)z->nseg * 96 + 1, n = 0; /* 4 numbers of at most 20 digits a line */
    char *text = malloc(cap);
    ASSERT(text != NULL);
    for (int i = 0; i < z->nseg; i++)
        n += (size_t)snprintf(text + n, cap - n, "%zu %zu %zu %zu\n", z->seg[i].off, z->seg[i].len,
                              z->seg[i].chunk, z->seg[i].shard_off);
    write_file(dir, name, text, n);
    free(text);
    snprintf(name, sizeof(name), "grads.zero%d.%d.f32", stage, rank);
    write_file(dir, name, z->gshard, z->shard_n * sizeof(float));
}

/* --zero1 DIR, --zero2 DIR: the model of dump() trained data parallel on 2 ranks under ZeRO
 * stage 1 or 2 (nn/zero.c), rank 0 the batch's first 2 sequences, rank 1 the third, the loss
 * gradient that of the mean over all 3; each rank writes its part of the loss, the summed
 * gradient it holds (stage 1: the whole; stage 2: its chunks, with their layout) and the
 * whole parameters after one AdamW step on its chunks and the all-gather. */
static int dump_zero(const char *dir, int stage)
{
    chorus_comm *comm;
    ASSERT_OK(chorus_init(&comm));
    int rank = chorus_rank(comm), T = small.context, first = rank ? 2 : 0, nb = rank ? 1 : 2;
    test_rank = rank;
    ASSERT_EQ(chorus_size(comm), 2);
    nn_gpt *g = make_model(&small, 3, 7);
    nn_model *m = g->m;
    if (stage == 2) { /* as the trainer does: one group's gradient buffer, nn_zero's */
        free(m->grads);
        m->grads = NULL;
        m->no_grads = 1;
        for (int i = 0; i < m->nlayers; i++) m->layers[i].dw = NULL;
    }
    nn_zero z;
    ASSERT_NN_OK(nn_zero_init(&z, m, comm, stage, NULL));
    nn_gpt_point_grads(g);
    nn_gpt_point_params(g);
    nn_optim o;
    const float *h = zero_adamw;
    ASSERT_NN_OK(nn_optim_init_adamw(&o, nn_zero_shard_count(m, rank, 2), h[1], h[2], h[3], h[4]));
    int32_t tok[3 * 16], tgt[3 * 16];
    random_tokens(tok, sizeof(tok) / sizeof(tok[0]), small.vocab, 11);
    random_tokens(tgt, sizeof(tgt) / sizeof(tgt[0]), small.vocab, 12);
    nn_zero_grad(m);
    nn_gpt_forward(g, tok + first * T, nb, T);
    double loss = nn_gpt_loss(g, tgt + first * T, 1.0f / (float)(3 * T), NULL) / (3 * T);
    nn_zero_begin_backward(&z, m);
    nn_gpt_backward(g);
    ASSERT_OK(z.err);
    ASSERT_NN_OK(nn_zero_sum_grads(&z, m));
    char name[64], text[160];
    if (stage == 1) {
        snprintf(name, sizeof(name), "grads.zero1.%d.f32", rank);
        write_file(dir, name, m->grads, m->nparams * sizeof(float));
    } else {
        write_zero_shard(dir, &z, stage, rank);
    }
    ASSERT_NN_OK(nn_zero_step(&z, m, &o, h[0]));
    ASSERT_NN_OK(nn_zero_wait(&z, m));
    snprintf(name, sizeof(name), "params.zero%d.%d.f32", stage, rank);
    write_file(dir, name, m->params, m->nparams * sizeof(float));
    snprintf(name, sizeof(name), "loss.zero%d.%d.txt", stage, rank);
    int n = snprintf(text, sizeof(text), "%.17g\n", loss);
    write_file(dir, name, text, (size_t)n);
    n = snprintf(text, sizeof(text), "%.9g %.9g %.9g %.9g %.9g\n", h[0], h[1], h[2], h[3], h[4]);
    if (rank == 0) write_file(dir, "adamw.txt", text, (size_t)n);
    printf("nn_gpt: ZeRO-%d rank %d of 2 wrote its gradients (%zu of %zu parameters) and the "
           "parameters after one AdamW step to %s\n",
           stage, rank, stage == 1 ? m->nparams : z.shard_n, m->nparams, dir);
    nn_optim_free(&o);
    nn_zero_free(&z);
    nn_gpt_destroy(g);
    chorus_finalize(comm);
    return 0;
}

/* The comparison's files: config.txt, params.f32, tokens.i32, targets.i32, loss.txt,
 * grads.f32. */
static int dump(const char *dir)
{
    const int B = 3, T = small.context;
    nn_gpt *g = make_model(&small, B, 7);
    int32_t tok[3 * 16], tgt[3 * 16];
    double loss = one_step(g, tok, tgt);
    char text[256];
    int n = snprintf(text, sizeof(text), "%d %d %d %d %d %d %d\n", small.layers, small.d_model,
                     small.heads, small.context, small.vocab, B, T);
    write_file(dir, "config.txt", text, (size_t)n);
    write_file(dir, "params.f32", g->m->params, g->m->nparams * sizeof(float));
    write_file(dir, "grads.f32", g->m->grads, g->m->nparams * sizeof(float));
    write_file(dir, "tokens.i32", tok, sizeof(tok));
    write_file(dir, "targets.i32", tgt, sizeof(tgt));
    n = snprintf(text, sizeof(text), "%.17g\n", loss);
    write_file(dir, "loss.txt", text, (size_t)n);
    nn_gpt_destroy(g);
    printf("nn_gpt: wrote the model and one step to %s\n", dir);
    return 0;
}

static void test_refused(void)
{
    nn_gpt_config c = small;
    c.heads = 5;
    ASSERT(nn_gpt_create(&c, 1) == NULL);
    ASSERT(strstr(nn_last_error(), "d_model 32 is not a multiple of the 5 heads") != NULL);
    c = small;
    c.layers = 0;
    ASSERT(nn_gpt_create(&c, 1) == NULL);
    ASSERT(strstr(nn_last_error(), "every size must be positive") != NULL);
    ASSERT(nn_gpt_create_stage(&small, 1, 1, 1) == NULL);
    ASSERT(strstr(nn_last_error(), "blocks [1, 1) are not a non-empty range of the 2") != NULL);
    ASSERT(nn_gpt_preset("huge", &c) == CHORUS_ERR_INVALID_ARG);
    ASSERT(strstr(nn_last_error(), "the presets: tiny, gpt2-124m") != NULL);
}

/* GPT-2 small has 124,439,808 parameters (tied output layer). */
static void test_gpt2_count(void)
{
    nn_gpt_config c;
    ASSERT_OK(nn_gpt_preset("gpt2-124m", &c));
    size_t C = (size_t)c.d_model;
    size_t n = (size_t)(c.vocab + c.context) * C + (size_t)c.layers * (12 * C * C + 13 * C) + 2 * C;
    ASSERT_EQ(n, 124439808);
}

static int hook_order[16], hook_n;
static void record_hook(nn_model *m, int layer, void *arg)
{
    (void)m, (void)arg;
    if (hook_n < 16) hook_order[hook_n] = layer;
    hook_n++;
}

/* Two backward passes of one batch give twice the gradient of one; the hook sees the groups
 * final LayerNorm, blocks last first, embeddings. */
static void test_accumulate_and_hook(void)
{
    nn_gpt *g = make_model(&small, 2, 3);
    int32_t tok[2 * 16], tgt[2 * 16];
    random_tokens(tok, 32, small.vocab, 5);
    random_tokens(tgt, 32, small.vocab, 6);
    nn_zero_grad(g->m);
    nn_gpt_forward(g, tok, 2, 16);
    nn_gpt_loss(g, tgt, 1.0f / 32, NULL);
    nn_gpt_backward(g);
    float *once = malloc(g->m->nparams * sizeof(float));
    memcpy(once, g->m->grads, g->m->nparams * sizeof(float));
    g->m->grad_hook = record_hook;
    nn_gpt_forward(g, tok, 2, 16);
    nn_gpt_loss(g, tgt, 1.0f / 32, NULL);
    nn_gpt_backward(g);
    for (size_t i = 0; i < g->m->nparams; i++)
        ASSERT_NEAR(g->m->grads[i], 2.0 * once[i], 1e-6 + 1e-5 * fabs(once[i]));
    ASSERT_EQ(hook_n, 4);
    ASSERT_EQ(hook_order[0], 3);
    ASSERT_EQ(hook_order[1], 2);
    ASSERT_EQ(hook_order[2], 1);
    ASSERT_EQ(hook_order[3], 0);
    free(once);
    nn_gpt_destroy(g);
}

/* Recomputation per block gives the gradients of the model that keeps every activation, to
 * the bit, with fewer activation bytes; the model's forward hook sees each group before its
 * parameters are read, in forward and in backward. */
static void test_recompute(void)
{
    const nn_gpt_config c = {.layers = 3, .d_model = 32, .heads = 4, .context = 16, .vocab = 256};
    nn_gpt *keep = make_model(&c, 3, 7), *again = make_model(&c, 3, 7);
    size_t full = again->act_bytes;
    ASSERT_NN_OK(nn_gpt_set_recompute(again, 1));
    printf("nn_gpt: recomputation per block holds %zu activation bytes instead of %zu\n",
           again->act_bytes, full);
    ASSERT(again->act_bytes < full);
    int32_t tok[3 * 16], tgt[3 * 16];
    double a = one_step(keep, tok, tgt);
    hook_n = 0;
    again->m->fwd_hook = record_hook;
    double b = one_step(again, tok, tgt);
    /* forward: embeddings, 3 blocks, final LayerNorm, the embeddings again (the tied output
     * layer); backward: the output layer, the final LayerNorm, the blocks last first */
    static const int want[] = {0, 1, 2, 3, 4, 0, 0, 4, 3, 2, 1};
    ASSERT_EQ(hook_n, 11);
    for (int i = 0; i < 11; i++) ASSERT_EQ(hook_order[i], want[i]);
    ASSERT(a == b);
    ASSERT_EQ(memcmp(keep->m->grads, again->m->grads, keep->m->nparams * sizeof(float)), 0);
    nn_gpt_destroy(keep);
    nn_gpt_destroy(again);
}

/* Plain gradient descent on one repeated batch must drive its loss down: the gradient points
 * downhill (a sign or scale error would not). */
static void test_descends(void)
{
    nn_gpt *g = make_model(&small, 2, 9);
    int32_t tok[2 * 16], tgt[2 * 16];
    random_tokens(tok, 32, 16, 1); /* a small alphabet, learnable in a few steps */
    for (int i = 0; i < 32; i++) tgt[i] = (tok[i] + 1) % 16;
    double first = 0, last = 0;
    for (int s = 0; s < 30; s++) {
        nn_zero_grad(g->m);
        nn_gpt_forward(g, tok, 2, 16);
        double l = nn_gpt_loss(g, tgt, 1.0f / 32, NULL) / 32;
        nn_gpt_backward(g);
        for (size_t i = 0; i < g->m->nparams; i++) g->m->params[i] -= 0.5f * g->m->grads[i];
        if (s == 0) first = l;
        last = l;
    }
    printf("nn_gpt: loss %.4f -> %.4f after 30 steps of gradient descent\n", first, last);
    ASSERT(last < 0.5 * first);
    nn_gpt_destroy(g);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--tp")) return dump_tp(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--pipe")) return dump_pipe(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--zero1")) return dump_zero(argv[2], 1);
    if (argc == 3 && !strcmp(argv[1], "--zero2")) return dump_zero(argv[2], 2);
    if (argc == 2) return dump(argv[1]);
    /* one BLAS thread, as chorus-train runs it: OpenBLAS's own threads hand results over in
     * ways ThreadSanitizer does not see */
    openblas_set_num_threads(1);
    test_refused();
    test_gpt2_count();
    test_accumulate_and_hook();
    test_descends();
    test_recompute();
    printf("nn_gpt: ok\n");
    return 0;
}
