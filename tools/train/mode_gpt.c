/*
 * mode_gpt.c - --model gpt: a GPT (nn/gpt.c) trained on the byte tokens of Debian's fortune
 * databases (nn/text.c), data parallel. A sample is a window of --context tokens; the sampler
 * shards each global batch of windows over the ranks as it does images. Forward and backward
 * run over the GPT, whose parameters and gradients are an nn_model of parameter groups, so the
 * gradient sum (--grad-sync fused, layer or engine with its overlap and buckets), --accum, the
 * broadcast of the first parameters, checkpoints and --resume are data parallelism's own
 * (mode_allreduce.c). Before the update the summed gradient's norm, the same on every rank, is
 * cut to --clip-grad. --tensor-parallel T splits each block's heads and MLP over T ranks of a
 * replica (Megatron's; nn/gpt.c), the grid and its output as for the MLP (split.c). --zero 1|2
 * shards the parameter groups' optimizer state and gradients (nn/zero.c; the sum comes before
 * the clipping); --zero 3 the parameters too: each group is all-gathered just before forward or
 * backward reads it, into one buffer that the next group's gather overwrites, so whatever
 * reads the parameters (evaluation, sampling, checkpoints, --dump-params) runs on every rank
 * together. --recompute drops each block's inner activations (nn/gpt.c), --compress runs
 * the compressors over the gradient sum (PowerSGD each weight matrix on its own); --pipeline-stages
 * runs its blocks in stages (mode_gpt_pipe.c, with the text and the lines printed here; --recompute
 * there too). The splits this model does not have yet are refused with the reason.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "gpt_train.h"

static int wanted(const opts *o)
{
    return !strcmp(o->model, "gpt");
}

/* The GPT options given to another model. */
static void refuse_gpt_options(const opts *o)
{
    const char *given = o->preset        ? "--preset"
                        : o->gpt.layers  ? "--layers"
                        : o->gpt.d_model ? "--d-model"
                        : o->gpt.heads   ? "--heads"
                        : o->gpt.context ? "--context"
                        : o->gpt.vocab   ? "--vocab"
                        : o->clip > 0    ? "--clip-grad"
                        : o->sample > 0  ? "--sample"
                                         : NULL;
    if (given) die("%s is for --model gpt, not --model %s", given, o->model);
}

/* The shape: the preset's, each size given on the command line over it. */
static void resolve_shape(opts *o)
{
    nn_gpt_config c;
    if (nn_gpt_preset(o->preset ? o->preset : "tiny", &c)) die("--preset: %s", nn_last_error());
    if (o->gpt.layers) c.layers = o->gpt.layers;
    if (o->gpt.d_model) c.d_model = o->gpt.d_model;
    if (o->gpt.heads) c.heads = o->gpt.heads;
    if (o->gpt.context) c.context = o->gpt.context;
    if (o->gpt.vocab) c.vocab = o->gpt.vocab;
    if (c.d_model % c.heads)
        die("--d-model %d is not a multiple of --heads %d (each head takes d-model/heads "
            "features)",
            c.d_model, c.heads);
    if (c.vocab < 256)
        die("--vocab %d is too small for the byte tokens of the text (0..255): use 256 or more",
            c.vocab);
    o->gpt = c;
}

/* --balance dynamic and --balance-shares weigh the data-parallel ranks' shares of the global
 * batch of windows (mode_allreduce.c's balancer, as for the MLP); what they cannot weigh. */
static void check_balance(const opts *o)
{
    int dynamic = !strcmp(o->balance, "dynamic");
    if (!dynamic && !o->balance_shares) return;
    const char *why =
        o->pipe_stages
            ? "--pipeline-stages: the stages of a pipeline take the same micro-batches, and "
              "each would measure only its own blocks"
        : o->par.tp > 1
            ? "--tensor-parallel: the shards of a replica must take the same windows, but each "
              "shard's column of replicas would measure and weigh its own shares"
        : dynamic && o->par.zero >= 2
            ? "--zero 2 and 3: the gradient's reduce-scatter (and under --zero 3 the "
              "parameters' gathers) run inside the passes, so the time a rank measures for its "
              "passes holds its wait for the slowest rank and every rank looks as slow: use "
              "--zero 1, or fixed --balance-shares"
            : NULL;
    if (why)
        die("--model gpt: %s does not combine with %s",
            dynamic ? "--balance dynamic" : "--balance-shares", why);
}

/* What the GPT does not run with yet, each with its reason. */
static void check_opts(opts *o)
{
    if (!wanted(o)) {
        refuse_gpt_options(o);
        return;
    }
    resolve_shape(o);
    check_balance(o);
    const char *why =
        o->pipe_stages && o->par.tp > 1
            ? "--pipeline-stages with --tensor-parallel: a stage's blocks are not split over "
              "tensor-parallel ranks yet; use one of them"
        : o->pipe_stages && o->par.zero
            ? "--pipeline-stages with --zero: a stage's optimizer state is not sharded over its "
              "replicas yet; use one of them"
        : o->par.zero && o->par.tp > 1
            ? "--zero with --tensor-parallel: the gradient norm for clipping is not yet taken "
              "over shards of both kinds; use one of them"
        : o->par.recompute > 0
            ? "--recompute=K keeps every K-th layer of a stack; the GPT recomputes every block: "
              "give --recompute alone"
        : o->par.zero == 3 && (o->check_div || o->perturb)
            ? "--check-divergence compares the replicas' whole parameters; under --zero 3 each "
              "rank holds only its chunks of them"
        : o->dropout > 0 ? "--dropout: the GPT has no dropout"
                         : NULL;
    if (why)
        die("--model gpt trains data parallel, with --tensor-parallel, --zero, --recompute, "
            "--compress, --pipeline-stages and the parameter server (--mode ps-*) only for now "
            "(chorus-run -np N, with --accum, --grad-sync, --checkpoint-dir): %s",
            why);
    if (o->pipe_stages > o->gpt.layers)
        die("--pipeline-stages %d: the GPT has %d blocks, and a stage takes at least one",
            o->pipe_stages, o->gpt.layers);
    if (o->par.tp > 1 && o->gpt.heads % o->par.tp)
        die("--tensor-parallel %d: the GPT's %d heads do not divide among %d ranks (each rank "
            "takes whole heads)",
            o->par.tp, o->gpt.heads, o->par.tp);
}

void gpt_windows(const train_gpt *s, const nn_text *text, const uint32_t *idx, size_t n, int32_t *x,
                 int32_t *y)
{
    int T = s->g->c.context;
    for (size_t i = 0; i < n; i++)
        nn_text_window(text, T, idx[i], x + i * (size_t)T, y + i * (size_t)T);
}

/* Windows idx[0..n) of text into s->x and s->y. */
static void gather(train_gpt *s, const nn_text *text, const uint32_t *idx, size_t n)
{
    gpt_windows(s, text, idx, n, s->x, s->y);
}

void gpt_load(trainer *t)
{
    train_gpt *s = t->gpt = calloc(1, sizeof(*s));
    if (!s) die("out of memory");
    if (nn_text_load_fortunes(t->o.data, &s->train, &s->val)) die("%s", nn_last_error());
    int T = t->o.gpt.context;
    size_t ntrain = nn_text_windows(&s->train, T), nval = nn_text_windows(&s->val, T);
    if (!ntrain || !nval)
        die("the text is too short for --context %d: %zu training and %zu held-out bytes", T,
            s->train.n, s->val.n);
    t->train.n = (int)ntrain;
    t->test.n = (int)nval;
    t->train.nclasses = t->test.nclasses = t->o.gpt.vocab;
    s->unigram = nn_text_unigram_loss(&s->train, &s->val);
}

/* With --tensor-parallel every rank keeps its shard of the unsplit model's initialisation, so
 * that the split model starts where the unsplit one does. */
nn_model *gpt_make(trainer *t, int max_batch)
{
    train_gpt *s = t->gpt;
    chorus_comm *tp = t->o.par.tp > 1 ? t->o.par.tp_comm : NULL;
    /* --pipeline-stages: the whole model's parameters alone, for the stages to start from and
     * to gather into for checkpoints, --dump-params and sampling (mode_gpt_pipe.c) */
    s->g = nn_gpt_create_tp(&t->o.gpt, t->o.pipe_stages ? 0 : max_batch, tp);
    if (!s->g || nn_gpt_init_params(s->g, t->o.seed)) die("%s", nn_last_error());
    if (t->o.pipe_stages) return s->g->m;
    if (t->o.par.recompute) { /* every block's inner activations dropped after forward */
        size_t all = s->g->act_bytes;
        if (nn_gpt_set_recompute(s->g, 1)) die("--recompute: %s", nn_last_error());
        s->g->m->recompute_saved = all - s->g->act_bytes;
    }
    size_t n = (size_t)max_batch * (size_t)t->o.gpt.context;
    s->x = malloc(n * sizeof(int32_t));
    s->y = malloc(n * sizeof(int32_t));
    if (!s->x || !s->y) die("out of memory");
    nn_mem *mm = &t->o.par.mem;
    nn_model *m = s->g->m;
    nn_mem_add(mm, NN_MEM_PARAMS, m->nparams * sizeof(float));
    if (t->o.par.zero >= 2) { /* ZeRO-2/3 keep one group's gradient and their chunks of the sum */
        free(m->grads);
        m->grads = NULL;
        m->no_grads = 1;
        for (int i = 0; i < m->nlayers; i++) m->layers[i].dw = NULL;
    } else {
        nn_mem_add(mm, NN_MEM_GRADS, m->nparams * sizeof(float));
    }
    nn_mem_add(mm, NN_MEM_ACTIVATIONS, s->g->act_bytes + 2 * n * sizeof(int32_t));
    return s->g->m;
}

void gpt_say_model(const trainer *t)
{
    const train_gpt *s = t->gpt;
    const nn_gpt_config *c = &s->g->c;
    if (t->rank == 0)
        printf("gpt: %d layers, d-model %d, %d heads, context %d, vocab %d; text %s: %zu "
               "training bytes (%d windows), %zu held-out bytes (%d windows); a unigram model "
               "scores %.4f nats per token on them\n",
               c->layers, c->d_model, c->heads, c->context, c->vocab,
               t->o.data ? t->o.data : NN_FORTUNES_DEFAULT_DIR, s->train.n, t->train.n, s->val.n,
               t->test.n, s->unigram);
    const char *core = chorus_config_get("OPENBLAS_CORETYPE");
    if (t->rank == 0)
        printf("gpt: OpenBLAS runs its %s kernels%s%s%s\n", nn_blas_kernel(),
               core ? " (OPENBLAS_CORETYPE=" : "", core ? core : "", core ? ")" : "");
    if (t->rank == 0 && nn_blas_misses_avx512())
        printf("gpt: note: they use no AVX-512, which this CPU has: OPENBLAS_CORETYPE=SkylakeX "
               "runs OpenBLAS's AVX-512 kernels (about twice the GEMM rate)%s\n",
               core ? ", as may leaving OPENBLAS_CORETYPE unset" : "");
}

/* --compress powersgd: each weight matrix of the GPT compressed on its own, in every
 * --grad-sync mode (mode_allreduce.c sets the compressor up). */
static void model_built(trainer *t)
{
    if (!strncmp(t->o.compress, "powersgd", 8)) {
        nn_gpt *g = t->gpt->g;
        int n = nn_gpt_grad_tensors(g, NULL);
        nn_grad_tensor *v = malloc((size_t)n * sizeof(*v));
        if (!v) die("out of memory");
        nn_gpt_grad_tensors(g, v);
        if (nn_dist_set_tensors(&t->dist, v, n)) die("%s", nn_last_error());
        free(v);
    }
    allreduce_model_built(t);
}

static int start(trainer *t)
{
    gpt_say_model(t);
    return 0;
}

/* This rank's windows of the step, in --accum micro-batches whose gradients add up; the loss
 * gradient is that of the mean over the global step's tokens. */
void gpt_forward_backward(trainer *t, const uint32_t *idx, size_t nloc, float scale,
                          double stats[3])
{
    train_gpt *s = t->gpt;
    int T = s->g->c.context, K = t->o.accum;
    size_t off = 0;
    if (nloc == 0 && t->o.par.zero >= 2) {
        /* No window of the epoch's short last step fell to this rank, but ZeRO-2 and 3 gather
         * and reduce-scatter inside forward and backward, where the other ranks wait for it:
         * the passes over one window whose loss weighs 0 take part with a gradient of zeros. */
        uint32_t first = 0;
        gather(s, &s->train, &first, 1);
        nn_gpt_forward(s->g, s->x, 1, T);
        nn_gpt_loss(s->g, s->y, 0.0f, NULL);
        nn_dist_begin_backward(&t->dist, t->m);
        par_begin_backward(&t->o.par, t->m);
        nn_gpt_backward(s->g);
    }
    for (int k = 0; k < K; k++) {
        size_t nb = nloc / (size_t)K + ((size_t)k < nloc % (size_t)K);
        if (nb == 0) continue; /* the engine is then handed the gradients by the sync */
        gather(s, &s->train, idx + off, nb);
        nn_gpt_forward(s->g, s->x, (int)nb, T);
        long hits = 0;
        stats[0] += nn_gpt_loss(s->g, s->y, scale / (float)T, &hits);
        stats[1] += (double)hits;
        if (k + 1 == K) nn_dist_begin_backward(&t->dist, t->m);
        if (k + 1 == K) par_begin_backward(&t->o.par, t->m); /* --zero 2's reduce-scatter */
        nn_gpt_backward(s->g);
        off += nb;
    }
    /* a failed collective of the passes (--tensor-parallel's sums, --zero 3's gathers, ZeRO's
     * reduce-scatters) is named before the step's own collectives find the peer gone */
    chorus_result r = nn_model_comm_status(t->m);
    if (!r && t->o.par.zero >= 2) r = t->o.par.zs.err;
    if (r) die("%s", nn_last_error());
    stats[2] = (double)nloc * T; /* loss and accuracy per token */
}

/* The summed gradient, the same on every replica, cut to global norm --clip-grad (the norm of
 * the whole model's gradient: over the tensor-parallel shards too); then the update. With
 * --zero, ZeRO sums the gradient first: ZeRO-1 into every rank's whole buffer (the same norm,
 * to the bit, as plain data parallelism), ZeRO-2 and 3 into each rank's chunks (the norm from
 * their squares, added in another order). */
static void step(trainer *t, float lr)
{
    train_gpt *s = t->gpt;
    train_par *p = &t->o.par;
    if (nn_model_comm_status(t->m)) die("%s", nn_last_error());
    if (p->zero && nn_zero_sum_grads(&p->zs, t->m)) die("%s", nn_last_error());
    chorus_result r = p->zero >= 2 ? nn_zero_shard_norm(&p->zs, &s->grad_norm)
                                   : nn_gpt_grad_norm(s->g, &s->grad_norm);
    if (r) die("%s", nn_last_error());
    if (t->o.clip > 0 && s->grad_norm > t->o.clip) {
        float k = (float)(t->o.clip / s->grad_norm);
        if (p->zero) {
            nn_zero_scale_grads(&p->zs, t->m, k);
        } else {
            float *g = t->m->grads;
            for (size_t i = 0; i < t->m->nparams; i++) g[i] *= k;
        }
    }
    allreduce_step(t, lr);
}

/* The optimizer's state and ZeRO's buffers; under --zero 2 and 3 the gradient views follow the
 * layers' into ZeRO's buffer, under --zero 3 the parameter views too. */
static void optim_built(trainer *t)
{
    allreduce_optim_built(t);
    nn_gpt_point_grads(t->gpt->g);
    nn_gpt_point_params(t->gpt->g);
}

/* Rank 0's first parameters to every rank (under --zero 3 that broadcast ran before they were
 * cut into the ranks' chunks, split.c). */
static void first_params(trainer *t)
{
    if (t->o.par.zero != 3) allreduce_first_params(t);
}

/* A checkpoint of the whole model; under --zero rank 0 gathers it from every rank's chunks
 * for the moment of writing (split.h: par_whole_open), once the step's parameters are whole
 * (ZeRO-1 and 2 all-gather them behind the next forward pass). */
static void save(trainer *t)
{
    train_par *p = &t->o.par;
    if (gpt_tp_whole(t)) { /* the first replica's shards gather on world rank 0 */
        if (t->rank != 0) return;
        int lead = p->tp_rank == 0;
        if (lead) gpt_tp_open(t);
        gpt_tp_move(t, 1);
        if (lead) save_whole(t);
        if (lead) gpt_tp_close(t);
        return;
    }
    if (!p->zero) {
        save_whole(t);
        return;
    }
    par_sync(p, t->m);
    if (t->rank == 0) par_whole_open(p, t->m, &t->opt);
    par_whole_gather(p, t->m, &t->opt);
    save_whole(t);
    if (t->rank == 0) par_whole_close(p, t->m, &t->opt);
}

/* ZeRO times its own gradient sum. */
static void comm_line(trainer *t)
{
    if (t->o.par.zero)
        split_comm_line(t);
    else
        allreduce_comm_line(t);
}

void gpt_val_slice(const trainer *t, int part, int parts, size_t *lo, size_t *hi)
{
    size_t n = (size_t)t->test.n, per = (n + (size_t)parts - 1) / (size_t)parts;
    *lo = per * (size_t)part;
    *hi = *lo + per < n ? *lo + per : n;
}

double gpt_say_validation(trainer *t, double acc[3], double *loss)
{
    if (!t->apart && nn_dist_sum(&t->dist, acc, 3)) die("%s", nn_last_error());
    *loss = acc[0] / acc[2];
    if (t->rank == 0)
        printf("validation after step %llu: loss %.4f nats per token (perplexity %.2f; unigram "
               "%.4f), next-byte accuracy %.4f\n",
               (unsigned long long)t->st.global_step, *loss, exp(*loss), t->gpt->unigram,
               acc[1] / acc[2]);
    return acc[1] / acc[2];
}

/* The held-out windows, each rank a contiguous slice (apart, worker 0 all of them alone);
 * returns the next-byte accuracy and the loss per token in *loss; rank 0 says them with the
 * perplexity and the unigram baseline. */
double gpt_evaluate(trainer *t, double *loss)
{
    train_gpt *s = t->gpt;
    int T = s->g->c.context, mb = s->g->max_batch, parts = t->apart ? 1 : t->world;
    size_t lo, hi, lo0, hi0;
    gpt_val_slice(t, t->apart ? 0 : t->rank, parts, &lo, &hi);
    gpt_val_slice(t, 0, parts, &lo0, &hi0);
    size_t per = hi0 - lo0; /* the first slice, the longest */
    double acc[3] = {0, 0, 0};
    uint32_t *idx = malloc((size_t)mb * sizeof(uint32_t));
    if (!idx) die("out of memory");
    /* under --zero 3 a forward pass is collective: every rank runs as many as the first, a
     * rank past its slice a pass over one window that is not counted */
    size_t rounds = t->o.par.zero == 3 ? (per + (size_t)mb - 1) / (size_t)mb : 0;
    for (size_t w = lo, k = 0; w < hi || k < rounds; w += (size_t)mb, k++) {
        int B = w < hi ? (int)(hi - w < (size_t)mb ? hi - w : (size_t)mb) : 0;
        for (int i = 0; i < (B ? B : 1); i++) idx[i] = (uint32_t)(B ? w + (size_t)i : 0);
        gather(s, &s->val, idx, (size_t)(B ? B : 1));
        nn_gpt_forward(s->g, s->x, B ? B : 1, T);
        if (!B) continue;
        long hits = 0;
        acc[0] += nn_gpt_loss(s->g, s->y, 0.0f, &hits);
        acc[1] += (double)hits;
        acc[2] += (double)B * T;
    }
    free(idx);
    if (nn_model_comm_status(t->m)) die("%s", nn_last_error()); /* --zero 3's gathers */
    return gpt_say_validation(t, acc, loss);
}

/* Rank 0's tokens/s line: over the job's ranks, or under the parameter server over the
 * workers whose windows it counts; the last gradient norm, which in ps-sync the servers take
 * (their lines say it). */
static void say_speed(const trainer *t, int T)
{
    if (t->rank != 0 || t->train_time <= 0) return;
    char who[64], norm[128];
    int n = chorus_size(t->comm);
    if (!t->sps_workers)
        snprintf(who, sizeof(who), "%d rank%s", n, n > 1 ? "s" : "");
    else if (t->sps_workers > 1 || t->world == 1)
        snprintf(who, sizeof(who), "%d worker%s", t->sps_workers, t->sps_workers > 1 ? "s" : "");
    else
        snprintf(who, sizeof(who), "worker 0 alone");
    if (!strcmp(t->o.mode, "ps-sync"))
        snprintf(norm, sizeof(norm),
                 "the servers cut each step's summed gradient to norm %g (their lines say the "
                 "last norm)",
                 (double)t->o.clip);
    else
        snprintf(norm, sizeof(norm), "last gradient norm %.3f before clipping to %g",
                 t->gpt->grad_norm, (double)t->o.clip);
    printf("gpt: %.0f tokens/s over %.1f s of training (%s); %s\n",
           t->samples_done * T / t->train_time, t->train_time, who, norm);
}

void gpt_say_end(trainer *t, nn_gpt *g, int every_rank)
{
    int T = g->c.context;
    say_speed(t, T);
    if (t->o.sample <= 0 || (t->rank != 0 && !every_rank)) return;
    int n = t->o.sample + 2;
    int32_t *text = malloc((size_t)n * sizeof(int32_t));
    char *out = malloc((size_t)n + 1);
    if (!text || !out) die("out of memory");
    text[0] = '%', text[1] = '\n';
    nn_rng r;
    nn_rng_seed(&r, nn_seed_mix(t->o.seed, 0x73616d70, t->st.global_step, 0));
    for (int i = 2; i < n; i++) {
        text[i] = nn_gpt_sample_next(g, text, i, 0.8f, &r);
        if (text[i] > 255) text[i] = '?'; /* a vocabulary wider than the bytes */
        out[i - 2] = (char)text[i];
    }
    out[n - 2] = '\0';
    if (nn_model_comm_status(t->m)) die("%s", nn_last_error()); /* --zero 3's gathers */
    if (t->rank == 0)
        printf("sample (%d bytes at temperature 0.8, after a fortune separator):\n%s\n", n - 2,
               out);
    fflush(stdout);
    free(text);
    free(out);
}

/* Rank 0: tokens per second, and --sample bytes of text drawn from the model after a fortune
 * separator, at temperature 0.8 (with --tensor-parallel the shards of replica 0 draw together,
 * the same bytes: the others' output goes nowhere; under --zero 3 every rank draws, its forward
 * passes gathering the parameters with the others'); under --zero 3 with --dump-params every
 * rank's whole parameters gathered from the chunks, for the dump after this (report.c). */
static void gpt_report(trainer *t)
{
    allreduce_report(t);
    int z3 = t->o.par.zero == 3;
    gpt_say_end(t, t->gpt->g, z3);
    if (z3 && t->o.dump) {
        if (!(t->m->params = malloc(t->m->nparams * sizeof(float)))) die("out of memory");
        if (nn_zero_gather_whole(&t->o.par.zs, -1, NULL, NULL, t->m->params, NULL, NULL))
            die("%s", nn_last_error());
    }
}

/* t->m is the GPT's own parameter model, which main.c frees. */
void gpt_finish(trainer *t)
{
    train_gpt *s = t->gpt;
    if (!s) return;
    if (s->g) s->g->m = NULL;
    nn_gpt_destroy(s->g);
    nn_text_free(&s->train);
    nn_text_free(&s->val);
    free(s->x);
    free(s->y);
    free(s);
    t->gpt = NULL;
}

const train_mode mode_gpt = {
    .name = "gpt",
    .wanted = wanted,
    .check_opts = check_opts,
    .share = "rank",
    .ckpt_note = "",
    /* DATA_PARALLEL_HOOKS, with the GPT's optim_built */
    .replicas_agree = 1,
    .agree_stop = 1,
    .periodic_eval = 1,
    .shares = allreduce_shares,
    .model_built = model_built,
    .optim_built = optim_built,
    .first_params = first_params,
    .sync = allreduce_sync,
    .save = save,
    .start = start,
    .forward_backward = gpt_forward_backward,
    .step = step,
    .evaluate = gpt_evaluate,
    .comm_line = comm_line,
    .report = gpt_report,
    .finish = gpt_finish,
};
