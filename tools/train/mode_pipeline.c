/*
 * mode_pipeline.c - --pipeline-stages P: consecutive ranks form a pipeline, each rank one
 * stage (a run of consecutive layers, nn/pipeline.c), and the world is (data-parallel
 * replicas) x P. Each pipeline takes a replica's share of a step in --microbatches, the
 * stages' gradients are summed over their replicas, and each stage updates its own
 * parameters. The whole model (t->m) is gathered for checkpoints and --dump-params, which
 * are written as an unsplit run writes them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "pipe_report.h"
#include "trainer.h"

/* This rank's stage. */
typedef struct pipeline {
    nn_pipe *pipe;
    float *x;     /* (max_local, features) the step's samples on stage 0 */
    int32_t *y;   /* (max_local) their labels */
    nn_optim opt; /* the stage's optimizer (t->opt is the whole model's, for checkpoints) */
} pipeline;

static pipeline *pipe_of(const trainer *t)
{
    return t->mode_data;
}

static int wanted(const opts *o)
{
    return o->pipe_stages > 0;
}

/* --pipeline-stages and its companions: what they combine with. */
static void check_opts(opts *o)
{
    if (!o->pipe_stages) {
        if (o->microbatches || o->pipe_schedule)
            die("--microbatches and --schedule need --pipeline-stages");
        return;
    }
    chorus_pipe_kind k;
    if (!o->pipe_schedule) o->pipe_schedule = "1f1b";
    if (chorus_pipe_kind_parse(o->pipe_schedule, &k) != CHORUS_OK)
        die("--schedule must be gpipe or 1f1b, not '%s'", o->pipe_schedule);
    if (!o->microbatches) o->microbatches = 4;
    if (o->accum > 1) die("--pipeline-stages cuts each step into --microbatches; drop --accum");
    if (strcmp(o->mode, "allreduce"))
        die("--pipeline-stages works with --mode allreduce only, not '%s'", o->mode);
    if (o->par.max_mb)
        die("--max-memory-mb does not work with --pipeline-stages yet: every stage still builds "
            "the whole model once (to initialise it from the seed and for checkpoints), so the "
            "budget could not be kept; use --tensor-parallel or --zero to fit a budget");
    int gpt = !strcmp(o->model, "gpt"); /* the GPT's stages recompute per block */
    if (o->par.tp > 1 || o->par.zero || (o->par.recompute && !gpt))
        die("--pipeline-stages does not combine with --tensor-parallel, --zero or --recompute "
            "(yet): use one way of splitting the model per run");
    if (o->balance && !strcmp(o->balance, "dynamic"))
        die("--balance dynamic does not combine with --pipeline-stages: a pipeline's stages "
            "take the same micro-batches");
}

/* This rank becomes one stage of a pipeline of consecutive ranks;
 * the sampler is redone over the data-parallel replicas (each pipeline takes a replica's
 * share of a step) and the optimizer over the stage's parameters. */
static int start(trainer *t)
{
    pipeline *p = calloc(1, sizeof(*p));
    if (!p) die("out of memory");
    t->mode_data = p;
    const opts *o = &t->o;
    int P = o->pipe_stages, M = o->microbatches, size = chorus_size(t->comm);
    chorus_pipe_kind kind;
    chorus_pipe_kind_parse(o->pipe_schedule, &kind);
    int max_micro = pipe_grid_sampler(t, P, M), D = size / P;
    if (nn_pipe_create(t->m, t->comm, P, M, kind, max_micro, &p->pipe)) die("%s", nn_last_error());
    optim_init(o, &p->opt, nn_pipe_model(p->pipe)->nparams);
    nn_pipe_stats pst;
    nn_pipe_get_stats(p->pipe, &pst);
    t->first_layer = pst.layer_lo;
    t->own = nn_pipe_model(p->pipe);
    t->replicas = nn_pipe_replicas(p->pipe);
    t->world = D; /* the learning rate scales with the data-parallel replicas (--scale-lr) */
    p->x = malloc((t->max_local ? t->max_local : 1) * nn_model_in_features(t->m) * sizeof(float));
    p->y = malloc((t->max_local ? t->max_local : 1) * sizeof(int32_t));
    if (!p->x || !p->y) die("out of memory");
    if (t->rank == 0)
        printf("pipeline: %d stages x %d replica%s (%d ranks), %d micro-batch%s of up to %d "
               "samples per step, schedule %s; layers cut by compute\n",
               P, D, D > 1 ? "s" : "", size, M, M == 1 ? "" : "es", max_micro, o->pipe_schedule);
    return 0;
}

/* --pipeline-stages, after the parameters (and a resumed optimizer state) reached every rank:
 * this stage's slices of them; the whole model's optimizer state is then dropped. */
static void take_state(trainer *t)
{
    pipeline *p = pipe_of(t);
    nn_model *sm = nn_pipe_model(p->pipe);
    nn_pipe_slice(p->pipe, t->m->params, sm->params);
    if (t->opt.m) nn_pipe_slice(p->pipe, t->opt.m, p->opt.m);
    if (t->opt.v) nn_pipe_slice(p->pipe, t->opt.v, p->opt.v);
    p->opt.t = t->opt.t;
    nn_optim_free(&t->opt);
}

/* The whole model's parameters from rank 0, then this stage's slices of them. */
static void first_params(trainer *t)
{
    allreduce_first_params(t);
    take_state(t);
}

/* A pipeline's replicas hold its ranks: say ranks, not replicas. */
static void job_text(const trainer *t, char *ranks, size_t rlen, char *servers, size_t slen)
{
    (void)servers, (void)slen;
    int size = chorus_size(t->comm);
    snprintf(ranks, rlen, "%d rank%s (%d pipeline replica%s of %d stages)", size,
             size > 1 ? "s" : "", t->world, t->world > 1 ? "s" : "", t->o.pipe_stages);
}

/* --pipeline-stages: this stage's forwards and backwards of the step's micro-batches (loss
 * and hits in stats on the last stage, which alone counts the samples). */
static void forward_backward(trainer *t, const uint32_t *idx, size_t nloc, float scale,
                             double stats[3])
{
    pipeline *p = pipe_of(t);
    nn_dataset_batch(&t->train, idx, (int)nloc, p->x, p->y);
    if (nn_pipe_step(p->pipe, p->x, p->y, (int)nloc, scale, t->st.global_step, stats))
        die("%s", nn_last_error());
    nn_pipe_stats st;
    nn_pipe_get_stats(p->pipe, &st);
    stats[2] = st.stage == st.stages - 1 ? (double)nloc : 0;
}

/* --pipeline-stages: sums the stage's gradients over its replicas, timed as the blocking
 * --grad-sync modes time theirs (for the communication line); then the step's figures. */
static void sync(trainer *t, float lr, double stats[3], size_t *gcount)
{
    (void)lr, (void)gcount;
    double t0 = now_s();
    chorus_result r = nn_pipe_sync_grads(pipe_of(t)->pipe);
    double dt = now_s() - t0;
    t->dist.comm_s += dt;
    t->dist.wait_s += dt;
    t->dist.grad_wait_s += dt;
    if (r) die("%s", nn_last_error());
    if (nn_dist_sum(&t->dist, stats, 3)) die("%s", nn_last_error());
}

/* The stage's own parameters. */
static void step(trainer *t, float lr)
{
    pipeline *p = pipe_of(t);
    nn_model *um = nn_pipe_model(p->pipe);
    nn_optim_step(&p->opt, um->params, um->grads, lr);
}

/* --pipeline-stages: every stage's parameters into t->m (for evaluation and --dump-params). */
static void gather(trainer *t)
{
    pipeline *p = pipe_of(t);
    if (nn_pipe_gather(p->pipe, nn_pipe_model(p->pipe)->params, t->m->params))
        die("%s", nn_last_error());
}

/* --pipeline-stages, before a checkpoint (collective over the pipeline): every stage's
 * parameters and optimizer state into the whole model's t->m and t->opt, which rank 0 saves
 * as an unsplit run would (so either kind of run resumes from it). */
static void gather_state(trainer *t)
{
    pipeline *p = pipe_of(t);
    nn_optim_free(&t->opt);
    optim_init(&t->o, &t->opt, t->m->nparams);
    gather(t);
    if ((p->opt.m && nn_pipe_gather(p->pipe, p->opt.m, t->opt.m)) ||
        (p->opt.v && nn_pipe_gather(p->pipe, p->opt.v, t->opt.v)))
        die("%s", nn_last_error());
    t->opt.t = p->opt.t;
}

/* Every rank gathers; rank 0 writes the whole model's checkpoint. */
static void save(trainer *t)
{
    gather_state(t);
    int writer = t->rank == 0;
    if (writer && nn_ckpt_save(t->o.ckpt_dir, t->m, &t->opt, &t->st)) die("%s", nn_last_error());
    if (writer) say_checkpoint(t);
    nn_optim_free(&t->opt);
}

/* --pipeline-stages: test accuracy through the pipeline (no rank holds the whole model):
 * each pipeline takes a slice of the test set, as evaluate_model() gives each rank one. */
static double stage_evaluate(trainer *t, double *loss_out)
{
    pipeline *p = pipe_of(t);
    nn_pipe_stats st;
    nn_pipe_get_stats(p->pipe, &st);
    size_t n = (size_t)t->test.n, per = (n + (size_t)st.replicas - 1) / (size_t)st.replicas;
    size_t lo = per * (size_t)st.replica, hi = lo + per < n ? lo + per : n;
    size_t chunk = t->max_local ? t->max_local : 1;
    double acc[3] = {0, 0, 0};
    uint32_t *idx = malloc(chunk * sizeof(uint32_t));
    if (!idx) die("out of memory");
    for (size_t s = lo; s < hi; s += chunk) {
        int B = (int)(hi - s < chunk ? hi - s : chunk);
        for (int i = 0; i < B; i++) idx[i] = (uint32_t)(s + (size_t)i);
        nn_dataset_batch(&t->test, idx, B, p->x, p->y);
        if (nn_pipe_evaluate(p->pipe, p->x, p->y, B, acc)) die("%s", nn_last_error());
        if (st.stage == st.stages - 1) acc[2] += B;
    }
    free(idx);
    if (nn_dist_sum(&t->dist, acc, 3)) die("%s", nn_last_error());
    *loss_out = acc[0] / acc[2];
    return acc[1] / acc[2];
}

/* Rank 0's memory and bubble lines for every rank; for --dump-params, every stage's
 * parameters into t->m. */
static void stage_report(trainer *t)
{
    pipeline *p = pipe_of(t);
    nn_pipe_stats st;
    nn_pipe_get_stats(p->pipe, &st);
    if (train_pipe_report(&st, t->comm, &p->opt, t->rank == 0, t->o.pipe_schedule,
                          t->o.microbatches, t->metrics))
        die("gathering the pipeline report: %s", chorus_last_error(t->comm));
    if (t->o.dump) gather(t);
}

static void finish(trainer *t)
{
    pipeline *p = pipe_of(t);
    if (!p) return;
    nn_optim_free(&p->opt);
    nn_pipe_destroy(p->pipe);
    free(p->x);
    free(p->y);
    free(p);
    t->mode_data = NULL;
}

const train_mode mode_pipeline = {
    .name = "pipeline",
    .wanted = wanted,
    .check_opts = check_opts,
    .share = "replica",
    .ckpt_note = "",
    DATA_PARALLEL_HOOKS,
    .start = start,
    .first_params = first_params,
    .job_text = job_text,
    .forward_backward = forward_backward,
    .sync = sync,
    .step = step,
    .save = save,
    .evaluate = stage_evaluate,
    .comm_line = allreduce_comm_line,
    .report = stage_report,
    .finish = finish,
};
