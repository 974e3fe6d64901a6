/*
 * setup.c - chorus-train's steps before the first training step: joining the job and
 * comparing the options across the ranks, the data, the model and optimizer, and the run's
 * first parameters, files and header line. The mode (trainer.h) does its part of each.
 */
#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus.h"
#include "trainer.h"

/* Whether --compress keeps memory between steps (error feedback, PowerSGD's Q, random-k's
 * permutation): each rank's is its own and is saved with every checkpoint. */
static int compress_keeps_state(const opts *o)
{
    return !strncmp(o->compress, "topk:", 5) || !strncmp(o->compress, "randomk:", 8) ||
           !strncmp(o->compress, "powersgd:", 9);
}

/* The shortest text that reads back as v (0.05, not 0.0500000007). */
static const char *float_text(float v, char buf[32])
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, 32, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}

/* The resolved options that decide the result (docs/TRAINING.md lists them), as compared across
 * the ranks and recorded beside the checkpoints. The length of the run (--epochs, --max-steps,
 * --time-limit) must agree across ranks but may grow on resume; the ways of splitting the same
 * computation (--pipeline-stages, --tensor-parallel, --zero, the number of ranks) too, since a
 * checkpoint is always of the whole model. */
static void describe_config(const opts *o, int world, rec_config *c)
{
    char f[6][32];
    memset(c, 0, sizeof(*c));
    int keeps = compress_keeps_state(o);
    rec_add(c, REC_RESULT, "--model", "%s", o->model);
    rec_add(c, REC_RESULT, "--batch", "%d", o->batch);
    rec_add(c, REC_RESULT, "--lr", "%s", float_text(o->lr, f[0]));
    rec_add(c, REC_RESULT, "--scale-lr", "%s", o->scale_lr ? "on" : "off");
    rec_add(c, REC_RESULT, "--lr-schedule", "%s", o->schedule);
    rec_add(c, REC_RESULT, "--warmup-epochs", "%s", float_text(o->warmup_epochs, f[1]));
    rec_add(c, REC_RESULT, "--optim", "%s", o->optim);
    if (o->clip > 0) /* only where it acts: a record written before it existed still matches */
        rec_add(c, REC_RESULT, "--clip-grad", "%s", float_text(o->clip, f[4]));
    int sgd = !strcmp(o->optim, "sgd"), ps = !!strncmp(o->mode, "allreduce", 9);
    rec_add(c, sgd ? REC_RESULT : REC_RANKS, "--momentum", "%s", float_text(o->momentum, f[2]));
    rec_add(c, REC_RESULT, "--weight-decay", "%s", float_text(o->wd, f[3]));
    rec_add(c, sgd ? REC_RESULT : REC_RANKS, "--no-nesterov", "%s", o->nesterov ? "off" : "on");
    /* a pipeline's micro-batches add up as --accum's do (a pipeline checkpoint resumes on one
     * rank with --accum M) */
    /* a pipeline's micro-batches are what --accum is without stages (train_record.c) */
    if (o->pipe_stages)
        rec_add(c, REC_RESULT, "--microbatches", "%d", o->microbatches);
    else
        rec_add(c, REC_RESULT, "--accum", "%d", o->accum);
    rec_add(c, REC_RESULT, "--compress", "%s", o->compress);
    rec_add(c, REC_RESULT, "--mode", "%s", o->mode);
    rec_add(c, ps ? REC_RESULT : REC_RANKS, "--ps-grad-dtype", "%s", o->ps_grad);
    rec_add(c, !strcmp(o->mode, "ps-ssp") ? REC_RESULT : REC_RANKS, "--staleness", "%d",
            o->staleness);
    rec_add(c, REC_NOTE, "--seed", "%llu", (unsigned long long)o->seed);
    rec_add(c, REC_RANKS, "--dropout", "%s", float_text(o->dropout, f[5])); /* see restore */
    /* with a compressor's memory, its tensors are those of the sync mode, on each rank */
    rec_add(c, keeps ? REC_RESULT : REC_RANKS, "--grad-sync", "%s", o->sync);
    rec_add(c, keeps ? REC_RESULT : REC_RANKS, "--bucket-kb", "%ld", o->bucket_kb);
    rec_add(c, keeps ? REC_RESULT : REC_BITS, "-np", "%d", world); /* the number of ranks */
    rec_add(c, REC_BITS, "--threads", "%d", o->threads);
    rec_add(c, REC_RANKS, "--epochs", "%d", o->epochs);
    rec_add(c, REC_RANKS, "--max-steps", "%ld", o->max_steps);
    rec_add(c, REC_RANKS, "--time-limit", "%.17g", o->time_limit);
    rec_add(c, REC_RANKS, "--resume", "%s", o->resume ? "on" : "off");
    rec_add(c, REC_RANKS, "--checkpoint-every", "%ld", o->ckpt_every);
    rec_add(c, REC_RANKS, "--eval-every", "%ld", o->eval_every);
    rec_add(c, REC_RANKS, "--no-eval", "%s", o->no_eval ? "on" : "off");
    rec_add(c, REC_RANKS, "--servers", "%d", o->servers);
    rec_add(c, REC_RANKS, "--tensor-parallel", "%d", o->par.tp);
    rec_add(c, REC_RANKS, "--zero", "%d", o->par.zero);
    rec_add(c, REC_RANKS, "--recompute", "%d", o->par.recompute);
    rec_add(c, REC_RANKS, "--pipeline-stages", "%d", o->pipe_stages);
    rec_add(c, REC_RANKS, "--schedule", "%s", o->pipe_schedule ? o->pipe_schedule : "-");
    rec_add(c, REC_RANKS, "--balance", "%s", o->balance);
    rec_add(c, REC_RANKS, "--balance-every", "%d", o->balance_every);
    rec_add(c, REC_RANKS, "--balance-shares", "%s", o->balance_shares ? o->balance_shares : "-");
}

/* Step (before anything is split or trained): every rank must hold the same options that
 * decide the result; rank 0 then checks the checkpoint directory: a fresh run may not mix with
 * another run's checkpoints, a --resume may not change an option the checkpoints depend on.
 * Every rank stops with the same message. */
static void check_config(trainer *t)
{
    opts *o = &t->o;
    describe_config(o, chorus_size(t->comm), &t->rec);
    t->comp_state = compress_keeps_state(o);
    char why[3072] = "", note[1024] = "";
    int r = rec_agree(&t->rec, t->comm, why, sizeof(why));
    if (r < 0) die("%s", why);
    if (r > 0)
        die("the ranks disagree on options that change the result (compared before the first "
            "step): %s. Start every rank with the same options",
            why);
    char verdict[sizeof(why)] = "";
    /* a directory that cannot be read is reported by the steps that use it */
    if (g_rank == 0 && o->ckpt_dir &&
        rec_check_dir(&t->rec, o->ckpt_dir, o->resume, why, sizeof(why), note, sizeof(note)) == 1)
        snprintf(verdict, sizeof(verdict), "%s%s", o->resume ? "cannot resume: " : "", why);
    if (chorus_broadcast(t->comm, verdict, sizeof(verdict), CHORUS_UINT8, 0) != CHORUS_OK)
        die("checking --checkpoint-dir: %s", chorus_last_error(t->comm));
    verdict[sizeof(verdict) - 1] = '\0';
    /* rank 0's verdict: the others say it too, and tell the launcher that rank 0 is the cause
     * (else the first to exit would be named as the job's failure) */
    if (verdict[0] && g_rank != 0) chorus_report_peer_failure(t->comm, 0);
    if (verdict[0]) die("%s", verdict);
    if (note[0]) fprintf(stderr, "chorus-train: note: %s\n", note);
    char seed[64];
    if (o->ckpt_dir && o->resume && !rec_saved_value(o->ckpt_dir, "--seed", seed, sizeof(seed)))
        rec_set(&t->rec, "--seed", seed); /* recorded as the run goes on with it */
}

/* Step: join the job (chorus_init), set up gradient synchronisation and BLAS threads. */
void start_job(trainer *t)
{
    chorus_result cr = chorus_init(&t->comm);
    if (cr != CHORUS_OK)
        die("chorus_init failed: %s (%s)", chorus_strerror(cr), chorus_last_error(NULL));
    train_set_rank(chorus_rank(t->comm));
    check_config(t);
    openblas_set_num_threads(t->o.threads);
    chorus_comm *train_comm = par_grid(&t->o.par, t->comm, &t->o.metrics, &t->o.dump);
    if (t->mode->join) train_comm = t->mode->join(t, train_comm);
    if (!train_comm) return; /* a server: trains nothing */
    nn_sync_mode mode = !strcmp(t->o.sync, "fused")   ? NN_SYNC_FUSED
                        : !strcmp(t->o.sync, "layer") ? NN_SYNC_LAYER
                                                      : NN_SYNC_ENGINE;
    if (nn_dist_init(&t->dist, train_comm, mode)) die("%s", nn_last_error());
    t->dist.bucket_bytes = (size_t)t->o.bucket_kb * 1024;
    t->replicas = t->dist.comm;
    t->rank = t->dist.rank;
    t->world = t->dist.size;
}

/* Step: read the train and test splits of Fashion-MNIST (or the model's own data). */
void load_data(trainer *t)
{
    const train_model *model = train_model_named(t->o.model);
    if (model->load) {
        model->load(t);
        return;
    }
    if (nn_fashion_load(t->o.data, 1, &t->train)) die("%s", nn_last_error());
    if (nn_fashion_load(t->o.data, 0, &t->test)) die("%s", nn_last_error());
}

/* --mode and the splits: the run's optimizer over n parameters into opt. */
void optim_init(const opts *o, nn_optim *opt, size_t n)
{
    chorus_result r = !strcmp(o->optim, "adamw")
                          ? nn_optim_init_adamw(opt, n, 0.9f, 0.999f, 1e-8f, o->wd)
                          : nn_optim_init_sgd(opt, n, o->momentum, o->nesterov, o->wd);
    if (r) die("out of memory for the optimizer");
}

/* The layers of --model (models.c), finalized for max_batch samples. */
static nn_model *build_model(opts *o, const nn_dataset *ds, int max_batch)
{
    nn_model *m = nn_model_create(ds->c, ds->h, ds->w);
    if (!m) die("out of memory");
    int bad = train_model_named(o->model)->add(m, o, ds->nclasses);
    if (bad) die("internal error: model shapes do not fit (%s)", nn_last_error());
    par_before_finalize(&o->par, m);
    if (nn_model_finalize(m, max_batch)) die("out of memory for the model (%s)", nn_last_error());
    return m;
}

/* Step: the sampler, the model (initialised from the seed), the optimizer and the initial
 * training state. */
void build(trainer *t)
{
    opts *o = &t->o;
    if (nn_sampler_init(&t->sampler, (size_t)t->train.n, (size_t)o->batch, t->rank, t->world,
                        o->seed))
        die("cannot set up the sampler (batch %d, %d rank%s)", o->batch, t->world,
            t->world == 1 ? "" : "s");
    t->max_local = nn_sampler_max_local(&t->sampler);
    if (t->mode->shares) t->mode->shares(t);
    size_t cap = t->bal ? balance_capacity(t->bal) : t->max_local; /* largest share */
    int max_micro = (int)((cap + (size_t)o->accum - 1) / (size_t)o->accum);
    if (max_micro < 1) max_micro = 1;
    /* Evaluation runs in chunks of max_batch; keep them reasonably large. */
    t->max_batch = max_micro < 256 ? 256 : max_micro;
    const train_model *model = train_model_named(o->model);
    t->m = model->make ? model->make(t, max_micro) : build_model(o, &t->train, t->max_batch);
    t->own = t->m;
    if (t->mode->model_built) t->mode->model_built(t);
    if (!model->make) nn_model_init_params(t->m, o->seed);
    t->m->rank = t->rank;
    optim_init(o, &t->opt, par_optim_count(&o->par, t->m));
    if (t->mode->optim_built) t->mode->optim_built(t);
    memset(&t->st, 0, sizeof(t->st));
    t->st.seed = o->seed;
    t->st.rng = o->seed;
    t->st.model_sig = nn_model_signature(t->m);
}

/* Step: rank 0's parameters to everyone, the metrics file, the header line, the batch
 * buffers and the step budget. */
void prepare_run(trainer *t)
{
    const opts *o = &t->o;
    t->mode->first_params(t);
    t->steps_per_epoch = nn_sampler_steps(&t->sampler);
    if (t->rank == 0 && o->metrics) {
        /* Appended to, a record at a time (metrics_written flushes each whole): under --mode
         * ps-* each server adds its own line to the same file when it finishes, which a
         * buffered writer at its own offset would overwrite. The flush is where a failed
         * write shows, with the system's reason. */
        t->metrics = o->resume ? NULL : fopen(o->metrics, "w");
        if (t->metrics) fclose(t->metrics);
        t->metrics = fopen(o->metrics, "a");
        if (!t->metrics) die("cannot open --metrics %s: %s", o->metrics, strerror(errno));
        setvbuf(t->metrics, NULL, _IOFBF, 1 << 16);
    }
    char tb_why[600];
    if (train_tb_open(&t->tb, o->tensorboard, t->comm, t->rank == 0, tb_why, sizeof(tb_why)))
        die("%s", tb_why);
    t->tty = isatty(STDOUT_FILENO);
    if (t->rank == 0) {
        char servers[96] = "", ranks[96];
        snprintf(ranks, sizeof(ranks), "%d rank%s", t->world, t->world > 1 ? "s" : "");
        if (t->mode->job_text) t->mode->job_text(t, ranks, sizeof(ranks), servers, sizeof(servers));
        printf("chorus-train: %s, %zu parameters; %s x %d BLAS thread%s%s; global batch "
               "%d (%zu per %s, accum %d); %s lr %g %s%s, warm-up %g epochs; %d epochs of %zu "
               "steps\n",
               o->model, t->m->nparams, ranks, o->threads, o->threads > 1 ? "s" : "", servers,
               o->batch, t->max_local, t->mode->share, o->accum, o->optim,
               (double)o->lr * (o->scale_lr ? t->world : 1), o->schedule,
               o->scale_lr ? " (scaled by ranks)" : "", (double)o->warmup_epochs, o->epochs,
               t->steps_per_epoch);
        fflush(stdout);
    }
    size_t F = nn_model_in_features(t->m);
    t->x = malloc((size_t)t->max_batch * F * sizeof(float));
    t->y = malloc((size_t)t->max_batch * sizeof(int32_t));
    t->dl = malloc((size_t)t->max_batch * (size_t)t->train.nclasses * sizeof(float));
    if (!t->x || !t->y || !t->dl) die("out of memory");
    if (t->bal) balance_describe(t->bal);
    t->total_steps = (uint64_t)o->epochs * t->steps_per_epoch;
    if (o->max_steps > 0 && (uint64_t)o->max_steps < t->total_steps)
        t->total_steps = (uint64_t)o->max_steps;
    t->t_start = now_s();
    t->last_test_acc = -1.0;
}

int pipe_grid_sampler(trainer *t, int P, int M)
{
    const opts *o = &t->o;
    int size = chorus_size(t->comm), D = size % P ? 0 : size / P;
    if (!D)
        die("--pipeline-stages %d does not divide the %d ranks: the world must be "
            "(data-parallel replicas) x (stages)",
            P, size);
    nn_sampler_free(&t->sampler);
    if (nn_sampler_init(&t->sampler, (size_t)t->train.n, (size_t)o->batch, chorus_rank(t->comm) / P,
                        D, o->seed))
        die("cannot set up the sampler (batch %d, %d replicas)", o->batch, D);
    t->max_local = nn_sampler_max_local(&t->sampler);
    int max_micro = (int)((t->max_local + (size_t)M - 1) / (size_t)M);
    return max_micro < 1 ? 1 : max_micro;
}
