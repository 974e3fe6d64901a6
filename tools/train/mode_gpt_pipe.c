/*
 * mode_gpt_pipe.c - --model gpt --pipeline-stages P: the GPT's blocks cut into P stages on
 * consecutive ranks (nn/gpt.c's stages: the embeddings and the first blocks on stage 0; the
 * last blocks, the final LayerNorm and the output layer on the last), the world (data-parallel
 * replicas) x P as for a stack of layers (mode_pipeline.c). A step's windows go through in
 * --microbatches by the --schedule's table (chorus/pipeline.h): the residual stream
 * (micro-batch, context, d-model) forward to the next stage, its gradient back, with
 * non-blocking point-to-point, the receive of a stage's next input posted before it computes.
 * Each micro-batch in flight keeps its activations in a replica of the stage's model that
 * shares its parameters and gradient (nn_gpt_create_replica), made on first need; with
 * --recompute each keeps its blocks' outputs and one block's inner activations, the rest
 * computed again in backward (nn_gpt_set_recompute).
 *
 * After the passes each stage's gradient is summed over its replicas, the two copies of the
 * token embedding (stage 0's input, the last stage's tied output layer) add each other's
 * gradient, so that they take the same update and stay equal (Megatron's scheme), and the
 * global norm for --clip-grad is the root of the stages' sums of squares (the embedding
 * counted once). Checkpoints, --dump-params and the sample at the end gather the stages into
 * the whole model (t->m), which rank 0 saves as an unsplit run does; --resume slices it again.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "gpt_train.h"
#include "pipe_report.h"

/* One micro-batch's room on a stage. */
typedef struct stash {
    nn_gpt *g;               /* slot 0: the stage's own model; the others its replicas */
    float *xin;              /* (max_micro, T, C) the input received (after stage 0) */
    float *gout;             /* (max_micro, T, C) the output's gradient (before the last) */
    chorus_request *send[2]; /* the output sent forward, the input's gradient sent back */
    int micro;               /* the micro-batch in it, -1 when free */
} stash;

typedef struct gpt_pipe {
    chorus_comm *pipe, *dp;                     /* this pipeline's stages; this stage's replicas */
    int stage, stages, replica, replicas, base; /* base: the world rank of stage 0 */
    int lo, hi;                                 /* this stage's blocks */
    int max_micro, T, C;
    chorus_pipe_schedule sched;
    stash *slots;
    int nslots;
    int *slot_of;          /* (micro) the slot of a micro-batch in flight, or -1 */
    chorus_request **recv; /* (micro) the posted receive of its input or output gradient */
    int32_t *x, *y;        /* (max_local, T) the replica's windows of the step */
    float *tie;            /* (vocab, C) the other copy's token-embedding gradient */
    nn_optim opt;          /* the stage's optimizer (t->opt is the whole model's) */
    int inflight;
    nn_pipe_stats st; /* what it measured, for the report */
} gpt_pipe;

static gpt_pipe *pipe_of(const trainer *t)
{
    return t->mode_data;
}

static int wanted(const opts *o)
{
    return !strcmp(o->model, "gpt") && o->pipe_stages > 0;
}

/* Stage s's blocks: the layers as evenly as they go, the later stages the larger. */
static void cut(int layers, int stages, int s, int *lo, int *hi)
{
    *lo = (int)((long)s * layers / stages);
    *hi = (int)((long)(s + 1) * layers / stages);
}

/* Stops with a failed exchange's message, naming this stage and the peer's (micro: the
 * micro-batch, or -1 outside a step's). */
static void peer_die(const gpt_pipe *p, chorus_result r, int peer, const char *what, int micro)
{
    char which[48] = "";
    if (micro >= 0) snprintf(which, sizeof(which), " of micro-batch %d", micro);
    die("pipeline stage %d (rank %d): %s%s, stage %d (rank %d) %s: %s (%s)", p->stage,
        p->base + p->stage, what, which, peer, p->base + peer,
        r == CHORUS_ERR_MISMATCH ? "does not match it" : "is gone", chorus_strerror(r),
        chorus_last_error(p->pipe));
}

/* Waits for a request, the time counted as waiting for a neighbour. */
static void wait_for(gpt_pipe *p, chorus_request **req, int peer, const char *what, int micro)
{
    if (!*req) return;
    double t0 = now_s();
    chorus_result r = chorus_wait(*req, NULL);
    p->st.wait_s += now_s() - t0;
    *req = NULL;
    if (r != CHORUS_OK) peer_die(p, r, peer, what, micro);
}

/* A slot's earlier sends completed (its buffers may then be written). */
static void drain(gpt_pipe *p, stash *s)
{
    wait_for(p, &s->send[0], p->stage + 1, "sending the activations", s->micro);
    wait_for(p, &s->send[1], p->stage - 1, "sending the gradient", s->micro);
}

/* A free slot for micro-batch j, made when every slot is in use. */
static stash *slot_take(gpt_pipe *p, int j)
{
    int i = 0;
    while (i < p->nslots && p->slots[i].micro >= 0) i++;
    if (i == p->nslots) {
        stash *ns = realloc(p->slots, (size_t)(p->nslots + 1) * sizeof(*ns));
        if (!ns) die("out of memory for a pipeline slot");
        p->slots = ns;
        stash *s = &p->slots[p->nslots++];
        memset(s, 0, sizeof(*s));
        s->g = nn_gpt_create_replica(p->slots[0].g);
        size_t n = (size_t)p->max_micro * (size_t)p->T * (size_t)p->C;
        s->xin = p->stage > 0 ? malloc(n * sizeof(float)) : NULL;
        s->gout = p->stage < p->stages - 1 ? malloc(n * sizeof(float)) : NULL;
        if (!s->g || (p->stage > 0 && !s->xin) || (p->stage < p->stages - 1 && !s->gout))
            die("out of memory for a pipeline slot");
    }
    stash *s = &p->slots[i];
    drain(p, s);
    s->micro = j;
    p->slot_of[j] = i;
    return s;
}

/* Windows [off, off + nb) of the step: micro-batch j's, as --accum cuts a rank's share. */
static void micro_range(int nloc, int m, int j, int *off, int *nb)
{
    int base = nloc / m, extra = nloc % m;
    *nb = base + (j < extra);
    *off = j * base + (j < extra ? j : extra);
}

static size_t act_floats(const gpt_pipe *p, int nb)
{
    return (size_t)nb * (size_t)p->T * (size_t)p->C;
}

/* Posts the receive of micro-batch j's input (a stage after the first) into its slot. */
static void post_input(gpt_pipe *p, int j, int nloc)
{
    int off, nb;
    micro_range(nloc, p->sched.micro, j, &off, &nb);
    if (nb == 0) return;
    stash *s = slot_take(p, j);
    chorus_result r = chorus_irecv(p->pipe, s->xin, act_floats(p, nb), CHORUS_FLOAT32, p->stage - 1,
                                   2 * j, &p->recv[j]);
    if (r != CHORUS_OK) peer_die(p, r, p->stage - 1, "receiving the activations", j);
}

/* The next forward at or after step k of this stage's list, its input's receive posted now
 * (stages after the first) so that it arrives while the stage computes. */
static void prefetch(gpt_pipe *p, const chorus_pipe_step *l, int k, int nloc)
{
    for (; k < p->sched.nsteps; k++) {
        if (l[k].op != CHORUS_PIPE_FWD) continue;
        if (p->slot_of[l[k].micro] < 0) post_input(p, l[k].micro, nloc);
        return;
    }
}

static void run_forward(trainer *t, gpt_pipe *p, int j, int nloc, float scale, double stats[3])
{
    int off, nb, last = p->stage == p->stages - 1;
    micro_range(nloc, p->sched.micro, j, &off, &nb);
    if (nb == 0) return; /* a share smaller than the micro-batches: both ends skip it */
    stash *s;
    const float *out;
    if (p->stage == 0) {
        s = slot_take(p, j);
        out = nn_gpt_stage_forward(s->g, p->x + (size_t)off * p->T, NULL, nb, p->T);
    } else {
        wait_for(p, &p->recv[j], p->stage - 1, "receiving the activations", j);
        s = &p->slots[p->slot_of[j]];
        out = nn_gpt_stage_forward(s->g, NULL, s->xin, nb, p->T);
    }
    if (++p->inflight > p->st.peak_inflight) p->st.peak_inflight = p->inflight;
    if (last) {
        long hits = 0;
        stats[0] += nn_gpt_loss(s->g, p->y + (size_t)off * p->T, scale / (float)p->T, &hits);
        stats[1] += (double)hits;
        return;
    }
    chorus_result r = chorus_isend(p->pipe, out, act_floats(p, nb), CHORUS_FLOAT32, p->stage + 1,
                                   2 * j, &s->send[0]);
    if (r != CHORUS_OK) peer_die(p, r, p->stage + 1, "sending the activations", j);
    r = chorus_irecv(p->pipe, s->gout, act_floats(p, nb), CHORUS_FLOAT32, p->stage + 1, 2 * j + 1,
                     &p->recv[j]);
    if (r != CHORUS_OK) peer_die(p, r, p->stage + 1, "receiving the gradient", j);
    (void)t;
}

static void run_backward(gpt_pipe *p, int j, int nloc)
{
    int off, nb;
    micro_range(nloc, p->sched.micro, j, &off, &nb);
    if (nb == 0) return;
    if (p->stage < p->stages - 1)
        wait_for(p, &p->recv[j], p->stage + 1, "receiving the gradient", j);
    stash *s = &p->slots[p->slot_of[j]];
    const float *dx = nn_gpt_stage_backward(s->g, s->gout);
    if (p->stage > 0) {
        chorus_result r = chorus_isend(p->pipe, dx, act_floats(p, nb), CHORUS_FLOAT32, p->stage - 1,
                                       2 * j + 1, &s->send[1]);
        if (r != CHORUS_OK) peer_die(p, r, p->stage - 1, "sending the gradient", j);
    }
    s->micro = -1; /* free once its sends are done (slot_take drains them) */
    p->slot_of[j] = -1;
    p->inflight--;
}

/* This stage's forwards and backwards of the step's micro-batches, in its schedule's order
 * (loss, hits and tokens counted on the last stage). */
static void forward_backward(trainer *t, const uint32_t *idx, size_t nloc, float scale,
                             double stats[3])
{
    gpt_pipe *p = pipe_of(t);
    gpt_windows(t->gpt, &t->gpt->train, idx, nloc, p->x, p->y);
    nn_zero_grad(p->slots[0].g->m);
    chorus_result r = chorus_barrier(p->pipe); /* the step starts together on every stage */
    if (r != CHORUS_OK)
        die("pipeline stage %d: starting a step: %s", p->stage, chorus_last_error(p->pipe));
    double t0 = now_s();
    const chorus_pipe_step *l = chorus_pipe_stage_steps(&p->sched, p->stage);
    for (int k = 0; k < p->sched.nsteps; k++) {
        if (p->stage > 0) prefetch(p, l, k, (int)nloc);
        if (p->stage > 0 && l[k].op == CHORUS_PIPE_FWD) prefetch(p, l, k + 1, (int)nloc);
        if (l[k].op == CHORUS_PIPE_FWD)
            run_forward(t, p, l[k].micro, (int)nloc, scale, stats);
        else
            run_backward(p, l[k].micro, (int)nloc);
    }
    for (int i = 0; i < p->nslots; i++) drain(p, &p->slots[i]);
    double t1 = now_s(); /* the stage idles until the whole pipeline is done: bubble too */
    r = chorus_barrier(p->pipe);
    if (r != CHORUS_OK)
        die("pipeline stage %d: ending a step: %s", p->stage, chorus_last_error(p->pipe));
    double t2 = now_s();
    p->st.wait_s += t2 - t1;
    p->st.step_s += t2 - t0;
    p->st.steps++;
    stats[2] = p->stage == p->stages - 1 ? (double)nloc * p->T : 0;
}

/* The tied token embedding: stage 0 and the last stage swap their gradients of it and each
 * adds the other's (the same sum on both: addition commutes, bit for bit). */
static void tie_grads(gpt_pipe *p)
{
    nn_gpt *g = p->slots[0].g;
    int last = p->stages - 1;
    if (p->stages == 1 || (p->stage != 0 && p->stage != last)) return;
    int peer = p->stage == 0 ? last : 0;
    size_t n = (size_t)g->c.vocab * (size_t)g->c.d_model;
    int tag = 2 * p->sched.micro;
    chorus_request *req = NULL;
    chorus_result r = chorus_isend(p->pipe, g->g.wte, n, CHORUS_FLOAT32, peer, tag, &req);
    if (r == CHORUS_OK) r = chorus_recv(p->pipe, p->tie, n, CHORUS_FLOAT32, peer, tag);
    if (req) {
        chorus_result w = chorus_wait(req, NULL);
        if (r == CHORUS_OK) r = w;
    }
    if (r != CHORUS_OK) peer_die(p, r, peer, "summing the tied token embedding's gradient", -1);
    for (size_t i = 0; i < n; i++) g->g.wte[i] += p->tie[i];
}

/* The stage's gradient summed over its replicas and across the tie, timed as the blocking
 * --grad-sync modes time theirs; then the step's figures summed over the world. */
static void sync(trainer *t, float lr, double stats[3], size_t *gcount)
{
    (void)lr, (void)gcount;
    gpt_pipe *p = pipe_of(t);
    nn_model *m = p->slots[0].g->m;
    double t0 = now_s();
    chorus_result r = p->replicas == 1 ? CHORUS_OK
                                       : chorus_allreduce(p->dp, m->grads, m->grads, m->nparams,
                                                          CHORUS_FLOAT32, CHORUS_SUM);
    if (r != CHORUS_OK)
        die("pipeline stage %d (rank %d): summing the gradients over its %d replicas: %s", p->stage,
            p->base + p->stage, p->replicas, chorus_last_error(p->dp));
    tie_grads(p);
    double dt = now_s() - t0;
    t->dist.comm_s += dt;
    t->dist.wait_s += dt;
    t->dist.grad_wait_s += dt;
    if (nn_dist_sum(&t->dist, stats, 3)) die("%s", nn_last_error());
}

/* The global norm over every stage (the same on all), the gradient cut to --clip-grad, and
 * the stage's update. */
static void step(trainer *t, float lr)
{
    gpt_pipe *p = pipe_of(t);
    nn_gpt *g = p->slots[0].g;
    double sq = 0;
    if (nn_gpt_grad_sumsq(g, &sq)) die("%s", nn_last_error());
    chorus_result r = chorus_allreduce(p->pipe, &sq, &sq, 1, CHORUS_FLOAT64, CHORUS_SUM);
    if (r != CHORUS_OK)
        die("pipeline stage %d: the gradient norm over the stages: %s", p->stage,
            chorus_last_error(p->pipe));
    t->gpt->grad_norm = sqrt(sq);
    if (t->o.clip > 0 && t->gpt->grad_norm > t->o.clip) {
        float k = (float)(t->o.clip / t->gpt->grad_norm);
        for (size_t i = 0; i < g->m->nparams; i++) g->m->grads[i] *= k;
    }
    nn_optim_step(&p->opt, g->m->params, g->m->grads, lr);
}

/* This stage's part of whole (laid out as the whole model's parameters) into part. */
static void slice(const gpt_pipe *p, const trainer *t, const float *whole, float *part)
{
    size_t off[2], n[2], k = nn_gpt_stage_ranges(&t->o.gpt, p->lo, p->hi, off, n);
    for (size_t i = 0, at = 0; i < k; at += n[i], i++)
        memcpy(part + at, whole + off[i], n[i] * sizeof(float));
}

/* Collective over the pipeline: every stage's part (of the parameters, or of optimizer state
 * laid out as them) into whole, on every stage; the token embedding from stage 0. */
static void gather(gpt_pipe *p, const trainer *t, const float *part, float *whole)
{
    for (int s = 0; s < p->stages; s++) {
        int lo, hi;
        cut(t->o.gpt.layers, p->stages, s, &lo, &hi);
        size_t off[2], n[2], k = nn_gpt_stage_ranges(&t->o.gpt, lo, hi, off, n);
        for (size_t i = 0, at = 0; i < k; at += n[i], i++) {
            if (s == p->stage) memcpy(whole + off[i], part + at, n[i] * sizeof(float));
            if (s > 0 && k == 2 && i == 0) continue; /* the tied copy, equal to stage 0's */
            chorus_result r = chorus_broadcast(p->pipe, whole + off[i], n[i], CHORUS_FLOAT32, s);
            if (r != CHORUS_OK)
                die("pipeline stage %d: gathering the stages' parameters: %s", p->stage,
                    chorus_last_error(p->pipe));
        }
    }
}

/* This rank becomes a stage of a pipeline of consecutive ranks; the sampler is redone over
 * the data-parallel replicas (each pipeline takes a replica's share of a step). */
static int start(trainer *t)
{
    gpt_pipe *p = calloc(1, sizeof(*p));
    if (!p) die("out of memory");
    t->mode_data = p;
    const opts *o = &t->o;
    int P = o->pipe_stages, M = o->microbatches, size = chorus_size(t->comm);
    int wrank = chorus_rank(t->comm);
    p->max_micro = pipe_grid_sampler(t, P, M);
    gpt_say_model(t);
    p->stages = P, p->stage = wrank % P, p->replicas = size / P, p->replica = wrank / P;
    p->base = wrank - p->stage;
    p->T = o->gpt.context, p->C = o->gpt.d_model;
    cut(o->gpt.layers, P, p->stage, &p->lo, &p->hi);
    chorus_pipe_kind kind;
    chorus_pipe_kind_parse(o->pipe_schedule, &kind);
    if (chorus_pipe_schedule_init(&p->sched, kind, P, M)) die("%s", nn_last_error());
    if (chorus_comm_split(t->comm, p->replica, p->stage, &p->pipe) ||
        chorus_comm_split(t->comm, p->stage, p->replica, &p->dp))
        die("cannot split the ranks into pipelines: %s", chorus_last_error(t->comm));
    p->slots = calloc(1, sizeof(stash));
    p->slot_of = malloc((size_t)M * sizeof(int));
    p->recv = calloc((size_t)M, sizeof(*p->recv));
    size_t nt = (t->max_local ? t->max_local : 1) * (size_t)p->T;
    p->x = malloc(nt * sizeof(int32_t));
    p->y = malloc(nt * sizeof(int32_t));
    if (!p->slots || !p->slot_of || !p->recv || !p->x || !p->y) die("out of memory");
    for (int j = 0; j < M; j++) p->slot_of[j] = -1;
    stash *s = &p->slots[0];
    p->nslots = 1;
    s->micro = -1;
    s->g = nn_gpt_create_stage(&o->gpt, p->max_micro, p->lo, p->hi);
    size_t n = act_floats(p, p->max_micro);
    s->xin = p->stage > 0 ? malloc(n * sizeof(float)) : NULL;
    s->gout = p->stage < P - 1 ? malloc(n * sizeof(float)) : NULL;
    if (!s->g) die("%s", nn_last_error());
    if (o->par.recompute && nn_gpt_set_recompute(s->g, 1)) /* its replicas follow it */
        die("--recompute: %s", nn_last_error());
    if ((p->stage > 0 && !s->xin) || (p->stage < P - 1 && !s->gout)) die("out of memory");
    if (p->stage == 0 || p->stage == P - 1) {
        p->tie = malloc((size_t)o->gpt.vocab * (size_t)p->C * sizeof(float));
        if (!p->tie) die("out of memory");
    }
    optim_init(o, &p->opt, s->g->m->nparams);
    /* the whole model's gradient is never used: its parameters are gathered into */
    free(t->m->grads);
    t->m->grads = NULL;
    t->own = s->g->m;
    t->replicas = p->dp;
    t->first_layer = p->lo == 0 ? 0 : 1 + p->lo;
    t->world = p->replicas; /* the learning rate scales with the replicas (--scale-lr) */
    if (t->rank == 0)
        printf("pipeline: %d stages x %d replica%s (%d ranks), %d micro-batch%s of up to %d "
               "windows per step, schedule %s; the GPT's %d blocks cut %d-%d on stage 0 (with "
               "the embeddings), the tied output layer on stage %d\n",
               P, p->replicas, p->replicas > 1 ? "s" : "", size, M, M == 1 ? "" : "es",
               p->max_micro, o->pipe_schedule, o->gpt.layers, p->lo, p->hi - 1, P - 1);
    return 0;
}

/* The whole model's parameters from rank 0 (and a resumed optimizer state), then this
 * stage's parts of them; the whole model's optimizer state is then dropped. */
static void first_params(trainer *t)
{
    allreduce_first_params(t);
    gpt_pipe *p = pipe_of(t);
    nn_gpt *g = p->slots[0].g;
    slice(p, t, t->m->params, g->m->params);
    if (t->opt.m) slice(p, t, t->opt.m, p->opt.m);
    if (t->opt.v) slice(p, t, t->opt.v, p->opt.v);
    p->opt.t = t->opt.t;
    nn_optim_free(&t->opt);
}

/* A pipeline's replicas hold its ranks: say ranks, not replicas. */
static void job_text(const trainer *t, char *ranks, size_t rlen, char *servers, size_t slen)
{
    (void)servers, (void)slen;
    int size = chorus_size(t->comm);
    snprintf(ranks, rlen, "%d rank%s (%d pipeline replica%s of %d stages)", size,
             size > 1 ? "s" : "", t->world, t->world > 1 ? "s" : "", t->o.pipe_stages);
}

/* Every stage's parameters and optimizer state into the whole model's t->m and t->opt,
 * which rank 0 saves as an unsplit run would (either kind of run resumes from it). */
static void save(trainer *t)
{
    gpt_pipe *p = pipe_of(t);
    optim_init(&t->o, &t->opt, t->m->nparams);
    gather(p, t, p->slots[0].g->m->params, t->m->params);
    if (p->opt.m) gather(p, t, p->opt.m, t->opt.m);
    if (p->opt.v) gather(p, t, p->opt.v, t->opt.v);
    t->opt.t = p->opt.t;
    if (t->rank == 0 && p->stage == 0) {
        if (nn_ckpt_save(t->o.ckpt_dir, t->m, &t->opt, &t->st)) die("%s", nn_last_error());
        say_checkpoint(t);
    }
    nn_optim_free(&t->opt);
}

/* The held-out windows through the pipeline, each pipeline a slice of them; the validation
 * line from the last stages' sums. */
static double evaluate(trainer *t, double *loss)
{
    gpt_pipe *p = pipe_of(t);
    stash *s = &p->slots[0]; /* between steps every slot is free */
    size_t lo, hi, mb = (size_t)p->max_micro;
    gpt_val_slice(t, p->replica, p->replicas, &lo, &hi);
    double acc[3] = {0, 0, 0};
    uint32_t *idx = malloc(mb * sizeof(uint32_t));
    if (!idx) die("out of memory");
    int tag = 2 * p->sched.micro + 1, last = p->stage == p->stages - 1;
    for (size_t w = lo; w < hi; w += mb) {
        int B = (int)(hi - w < mb ? hi - w : mb);
        for (int i = 0; i < B; i++) idx[i] = (uint32_t)(w + (size_t)i);
        gpt_windows(t->gpt, &t->gpt->val, idx, (size_t)B, p->x, p->y);
        chorus_result r = CHORUS_OK;
        if (p->stage > 0 && (r = chorus_recv(p->pipe, s->xin, act_floats(p, B), CHORUS_FLOAT32,
                                             p->stage - 1, tag)) != CHORUS_OK)
            peer_die(p, r, p->stage - 1, "receiving the evaluation activations", -1);
        const float *out = nn_gpt_stage_forward(s->g, p->x, s->xin, B, p->T);
        if (last) {
            long hits = 0;
            acc[0] += nn_gpt_loss(s->g, p->y, 0.0f, &hits);
            acc[1] += (double)hits;
            acc[2] += (double)B * p->T;
        } else if ((r = chorus_send(p->pipe, out, act_floats(p, B), CHORUS_FLOAT32, p->stage + 1,
                                    tag)) != CHORUS_OK) {
            peer_die(p, r, p->stage + 1, "sending the evaluation activations", -1);
        }
    }
    free(idx);
    return gpt_say_validation(t, acc, loss);
}

/* Every rank's memory and bubble lines; the stages gathered into t->m (for --dump-params and
 * the sample, which rank 0 draws from a whole model of its own). */
static void stage_report(trainer *t)
{
    gpt_pipe *p = pipe_of(t);
    nn_gpt *g = p->slots[0].g;
    gather(p, t, g->m->params, t->m->params);
    p->st.stage = p->stage, p->st.stages = p->stages;
    p->st.replica = p->replica, p->st.replicas = p->replicas;
    p->st.layer_lo = p->lo, p->st.layer_hi = p->hi;
    p->st.params_bytes = p->st.grads_bytes = g->m->nparams * sizeof(float);
    p->st.activations_bytes = 0;
    for (int i = 0; i < p->nslots; i++) {
        const stash *s = &p->slots[i];
        size_t io = (s->xin ? 1 : 0) + (s->gout ? 1 : 0);
        p->st.activations_bytes += s->g->act_bytes + io * act_floats(p, p->max_micro) * 4;
    }
    if (train_pipe_report(&p->st, t->comm, &p->opt, t->rank == 0 && p->stage == 0,
                          t->o.pipe_schedule, t->o.microbatches, t->metrics))
        die("gathering the pipeline report: %s", chorus_last_error(t->comm));
    if (chorus_rank(t->comm) != 0) return;
    nn_gpt *whole = nn_gpt_create(&t->o.gpt, 1);
    if (!whole) die("%s", nn_last_error());
    memcpy(whole->m->params, t->m->params, t->m->nparams * sizeof(float));
    gpt_say_end(t, whole, 0);
    nn_gpt_destroy(whole);
}

/* The stage's slots and buffers (t->gpt, the text, is freed by mode_gpt's finish). */
static void finish(trainer *t)
{
    gpt_pipe *p = pipe_of(t);
    if (!p) return;
    for (int i = p->nslots - 1; i >= 0; i--) {
        stash *s = &p->slots[i];
        for (int k = 0; k < 2; k++)
            if (s->send[k]) chorus_wait(s->send[k], NULL);
        nn_gpt_destroy(s->g);
        free(s->xin);
        free(s->gout);
    }
    for (int j = 0; p->recv && j < p->sched.micro; j++)
        if (p->recv[j]) chorus_wait(p->recv[j], NULL);
    free(p->slots);
    free(p->slot_of);
    free(p->recv);
    free(p->x);
    free(p->y);
    free(p->tie);
    nn_optim_free(&p->opt);
    chorus_pipe_schedule_free(&p->sched);
    if (p->pipe) chorus_finalize(p->pipe);
    if (p->dp) chorus_finalize(p->dp);
    free(p);
    t->mode_data = NULL;
    mode_gpt.finish(t);
}

const train_mode mode_gpt_pipe = {
    .name = "gpt-pipeline",
    .wanted = wanted,
    .share = "replica",
    .ckpt_note = "",
    /* data parallelism's hooks but optim_built: the stages' optimizers are their own */
    .replicas_agree = 1,
    .agree_stop = 1,
    .periodic_eval = 1,
    .shares = allreduce_shares,
    .model_built = allreduce_model_built,
    .start = start,
    .first_params = first_params,
    .job_text = job_text,
    .forward_backward = forward_backward,
    .sync = sync,
    .step = step,
    .save = save,
    .evaluate = evaluate,
    .comm_line = allreduce_comm_line,
    .report = stage_report,
    .finish = finish,
};
