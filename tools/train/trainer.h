/*
 * trainer.h - chorus-train's parts over one private header: the options (options.c), what a
 * run holds (struct trainer), and the mode interface (struct train_mode) that each way of
 * training implements in a file of its own: mode_allreduce.c (data parallel, with
 * compression and the load balancer), mode_split.c (--tensor-parallel, --zero),
 * mode_pipeline.c (--pipeline-stages) and mode_ps.c (--mode ps-*); --model gpt's in
 * mode_gpt.c, mode_gpt_pipe.c and mode_gpt_ps.c. modes.c registers them;
 * main.c runs the steps of a run and calls the mode where the ways differ.
 */
#ifndef CHORUS_TRAIN_TRAINER_H
#define CHORUS_TRAIN_TRAINER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "balance.h"
#include "chorus.h"
#include "chorus/nn.h"
#include "common.h"
#include "record.h"
#include "split.h"
#include "tb.h"

typedef struct opts {
    const char *model;
    int epochs;
    int batch; /* global */
    float lr;
    uint64_t seed;
    int threads;
    int accum;
    float warmup_epochs;
    const char *schedule;
    int scale_lr;
    const char *optim;
    float momentum, wd, dropout;
    int nesterov;
    const char *ckpt_dir;
    long ckpt_every;
    int resume;
    const char *metrics;
    long max_steps;
    const char *data;
    const char *dump;
    const char *sync;
    long bucket_kb;
    int no_eval;
    int log_every;
    const char *mode; /* allreduce, ps-sync, ps-async, ps-ssp */
    int servers, staleness;
    const char *ps_grad; /* float32, float16, bfloat16 */
    double time_limit;   /* seconds of training, 0: none */
    train_par par;       /* --tensor-parallel, --zero, --recompute, --max-memory-mb */
    /* TensorBoard event files go there, or NULL */
    const char *tensorboard;
    const char *compress; /* gradient compression spec (nn_dist_set_compression) */
    long eval_every;      /* test-set evaluation every N steps (0: per epoch only) */

    /* per-rank monitoring and load balancing (balance.c) */
    const char *balance;        /* static, dynamic */
    int balance_every;          /* steps between re-balancings */
    const char *balance_shares; /* fixed uneven shares (tests of the weighting), or NULL */
    double straggler_timeout;   /* ps-*: report exchanges longer than this (s), 0: never */

    int pipe_stages;           /* --pipeline-stages P, 0: no pipeline */
    int microbatches;          /* --microbatches M per step and pipeline */
    const char *pipe_schedule; /* --schedule gpipe|1f1b */

    long check_div;      /* --check-divergence N: compare the replicas every N steps (0: off) */
    const char *perturb; /* --test-perturb RANK:STEP[:TENSOR] (tests only), or NULL */

    /* --model gpt (mode_gpt.c) */
    const char *preset; /* --preset tiny|gpt2-124m, or NULL: tiny */
    nn_gpt_config gpt;  /* the shape: --layers --d-model --heads --context --vocab over the
                         * preset's (0: the preset's) */
    float clip;         /* --clip-grad: the gradients' global norm is cut to this (0: off) */
    int sample;         /* --sample N: bytes of text rank 0 generates at the end */
} opts;

typedef struct train_mode train_mode;

/* Everything a run holds, shared by the steps of main.c. */
typedef struct trainer {
    opts o;
    const train_mode *mode; /* how this run trains (modes.c) */
    void *mode_data;        /* the mode's own state, or NULL */
    chorus_comm *comm;
    nn_dist dist;
    int rank, world;
    nn_dataset train, test;
    nn_sampler sampler;
    size_t max_local; /* largest share of a global batch on one rank */
    int max_batch;    /* the model's batch capacity (micro-batches and evaluation chunks) */
    nn_model *m;
    nn_optim opt;
    nn_train_state st;
    size_t steps_per_epoch;
    uint64_t total_steps; /* where the run stops (epochs or --max-steps) */
    FILE *metrics;
    int tty;
    float *x, *dl; /* (max_batch, features), (max_batch, classes) */
    int32_t *y;    /* (max_batch) */
    /* progress of this process (for speed and ETA) */
    double t_start, train_time, step_wait, samples_done;
    double spent; /* --time-limit: the fraction of the budget used before this step */
    uint64_t steps_done;
    double last_test_acc;  /* -1 until evaluated */
    double eval_s;         /* --eval-every: seconds spent in those evaluations */
    train_tb tb;           /* TensorBoard scalars (train_tb.c) */
    uint64_t tb_pushed;    /* bytes pushed before this step (modes with traffic) */
    int sps_workers;       /* 0: samples_done is the job's; else how many workers it counts */
    int apart;             /* the workers never meet once training has started (ps-async, ps-ssp):
                            * worker 0 alone evaluates and reports */
    train_balance *bal;    /* per-rank monitoring and load balancing, or NULL */
    nn_model *own;         /* the model this rank updates (t->m, or a pipeline stage's) */
    chorus_comm *replicas; /* the ranks that hold the same parameters as this one */
    int first_layer;       /* own's first layer in the whole model */
    uint64_t div_checked;  /* --check-divergence: 1 + the last step compared */
    double div_s;          /* --check-divergence: seconds spent comparing (part of train_time) */
    uint64_t div_n;        /* --check-divergence: comparisons made */
    rec_config rec;        /* the options that decide the result (train_record.c) */
    int comp_state;        /* --compress keeps memory: every rank saves its own with a checkpoint */
    struct train_gpt *gpt; /* --model gpt: the model, its text and buffers (mode_gpt.c) */
} trainer;

/* Sums of one epoch so far, over all ranks. */
typedef struct epoch_stats {
    double loss, hits, n, last_print;
} epoch_stats;

/* The clocks of gradient synchronisation (nn_dist) when a step began. */
typedef struct step_clock {
    double wait, grad_wait, comm, hidden;
    uint64_t in_backward;
} step_clock;

/* What a step measured: loss, hits and samples summed over the ranks (stats), its learning
 * rate, the samples its figures count (gcount) and this rank's (nloc), when it ended (t1)
 * and how long it took (dt). */
typedef struct step_figures {
    double stats[3];
    float lr;
    size_t gcount, nloc;
    double t1, dt;
} step_figures;

/*
 * A way of training: where the ways differ, the steps of a run (main.c, setup.c, report.c)
 * call these. A NULL hook does nothing (or, where said, the common behaviour). The hooks run
 * on every rank of the job unless said otherwise.
 */
struct train_mode {
    const char *name;
    /* Whether this mode runs the options; the first registered mode that wants them runs. */
    int (*wanted)(const opts *o);
    /* Refuses the options this mode cannot run with (every mode's, on every run, in parse). */
    void (*check_opts)(opts *o);
    const char *share;     /* what takes a share of a global batch: "rank" or "replica" */
    const char *ckpt_note; /* said after a written checkpoint's path ("" for none) */
    int replicas_agree;    /* the replicas hold bitwise equal parameters (--check-divergence) */
    int agree_stop;        /* --time-limit: the ranks stop at the same step */
    int periodic_eval;     /* --eval-every evaluates */

    /* -- setting up -- */
    /* After the grid of --tensor-parallel: the communicator the gradients are summed over,
     * or NULL when this rank trains nothing (a parameter server). NULL hook: grid. */
    chorus_comm *(*join)(trainer *t, chorus_comm *grid);
    void (*shares)(trainer *t);      /* before the model: who takes which share of a batch */
    void (*model_built)(trainer *t); /* after the model is built (gradient compression) */
    void (*optim_built)(trainer *t); /* after the optimizer (sharded state, memory budget) */
    /* After the model and optimizer; 1 when this rank's part of the job is over. */
    int (*start)(trainer *t);
    /* The initial (or resumed) parameters on every rank that trains. */
    void (*first_params)(trainer *t);
    /* Rank 0's header line: "N ranks" (filled in already) and the servers' part (""). */
    void (*job_text)(const trainer *t, char *ranks, size_t rlen, char *servers, size_t slen);

    /* -- a step -- */
    /* Forward and backward over idx[0..nloc), gradients scaled by `scale`; loss, hits and
     * samples counted into stats. NULL: --accum passes over t->m (main.c). */
    void (*forward_backward)(trainer *t, const uint32_t *idx, size_t nloc, float scale,
                             double stats[3]);
    void (*begin_backward)(trainer *t); /* before the last backward pass of a step */
    /* The gradients (and stats) synchronised; *gcount: the samples the step's figures count. */
    void (*sync)(trainer *t, float lr, double stats[3], size_t *gcount);
    void (*step)(trainer *t, float lr); /* the optimizer's update */
    /* This worker's bytes pushed and pulled so far (NULL: the gradient is exchanged whole). */
    void (*traffic)(const trainer *t, uint64_t *pushed, uint64_t *pulled);
    /* A checkpoint of the current step, called on every rank (the mode decides who writes). */
    void (*save)(trainer *t);

    /* -- evaluation and the end -- */
    void (*refresh)(trainer *t); /* the newest parameters into t->m before evaluating */
    /* Test accuracy (loss in *loss). NULL: every rank a slice of the test set (report.c). */
    double (*evaluate)(trainer *t, double *loss);
    void (*end)(trainer *t);       /* after the last step, before the last evaluation */
    void (*comm_line)(trainer *t); /* rank 0's communication line of the summary */
    void (*report)(trainer *t);    /* after the summary, before --dump-params */
    void (*finish)(trainer *t);    /* frees the mode's state */
};

/* A model --model names (models.c). */
typedef struct train_model {
    const char *name;
    int epochs;    /* default --epochs */
    float lr;      /* default --lr with --optim sgd */
    float dropout; /* default --dropout */
    float adam_lr; /* default --lr with --optim adamw */
    /* Appends the layers to m (whose per-sample input is the data set's) with nclasses
     * outputs; nonzero when one did not fit. */
    int (*add)(nn_model *m, opts *o, int nclasses);
    /* A model that is not a stack of layers: its data into t->train and t->test (their n
     * samples, nclasses outputs) instead of Fashion-MNIST's, and its model, built for
     * max_batch samples and initialised from --seed, instead of add's. NULL: add's. */
    void (*load)(trainer *t);
    nn_model *(*make)(trainer *t, int max_batch);
} train_model;

/* models.c: the models, ended by a row without a name, and the one named name (or NULL). */
extern const train_model train_models[];
const train_model *train_model_named(const char *name);

/* modes.c: the registered modes, NULL-terminated, and the one that runs o. */
extern const train_mode *const train_modes[];
const train_mode *train_mode_of(const opts *o);

/* options.c */
void parse(int argc, char **argv, opts *o);

/* setup.c: the steps before training, in order. */
void start_job(trainer *t);
void load_data(trainer *t);
void build(trainer *t);
void prepare_run(trainer *t);
/* The run's optimizer over n parameters into o. */
void optim_init(const opts *o, nn_optim *opt, size_t n);
/* --pipeline-stages P (M micro-batches) over this job's ranks, consecutive ranks a pipeline:
 * dies unless P divides them; the sampler redone over the size/P data-parallel replicas (this
 * rank's replica: rank/P). Returns the micro-batch size at most (at least 1). */
int pipe_grid_sampler(trainer *t, int P, int M);

/* state.c: checkpoints. */
void restore_checkpoint(trainer *t);
void claim_checkpoint_dir(trainer *t);
/* --resume: rank 0's loaded training and optimizer state to every rank. */
void share_resumed_state(trainer *t);
/* The whole model's checkpoint from this rank (rank 0; with a compressor's memory every rank
 * saves its own first). */
void save_whole(trainer *t);
/* Rank 0's line for a checkpoint it has written. */
void say_checkpoint(const trainer *t);

/* report.c */
void metrics_written(FILE **f, const char *path, int closing);
double evaluate_model(trainer *t, double *loss_out);
double hidden_share(const nn_dist *d);
/* After a step: rank 0's metrics record and progress line, and the TensorBoard scalars. */
void report_step(trainer *t, uint64_t epoch, size_t step, epoch_stats *ep, const step_figures *f,
                 const step_clock *c0);
/* After an epoch: the test-set evaluation and rank 0's epoch line. */
void report_epoch(trainer *t, uint64_t epoch, const epoch_stats *ep);
/* --time-limit: the one evaluation, at the end. */
void report_final_test(trainer *t);
/* Rank 0's summary and each rank's final parameters for --dump-params. */
void report(trainer *t);
/* The data-parallel communication line (allreduce, pipeline, tensor parallel). */
void allreduce_comm_line(trainer *t);
/* The communication line of --zero's own gradient sum, else allreduce's (mode_split.c). */
void split_comm_line(trainer *t);

/* checks.c: --check-divergence and the test-only perturbation. */
/* The replicas compared at this step (once); a divergence stops every rank. */
void verify_replicas(trainer *t);
/* After a step's update: the perturbation, then the replicas compared when due. */
void after_update(trainer *t);

/* mode_allreduce.c: the data-parallel hooks other modes share. */
void allreduce_shares(trainer *t);
void allreduce_model_built(trainer *t);
void allreduce_optim_built(trainer *t);
void allreduce_first_params(trainer *t);
void allreduce_sync(trainer *t, float lr, double stats[3], size_t *gcount);
void allreduce_step(trainer *t, float lr);
void allreduce_save(trainer *t);
void allreduce_report(trainer *t);

/* mode_ps.c: the parameter-server hooks the GPT's (mode_gpt_ps.c) shares. */
chorus_comm *ps_join(trainer *t, chorus_comm *grid);
int ps_start(trainer *t);
void ps_first_params(trainer *t);
void ps_job_text(const trainer *t, char *ranks, size_t rlen, char *servers, size_t slen);
void ps_sync(trainer *t, float lr, double stats[3], size_t *gcount);
void ps_traffic(const trainer *t, uint64_t *pushed, uint64_t *pulled);
void ps_save(trainer *t);
void ps_pull_params(trainer *t);
void ps_end(trainer *t);
void ps_comm_line(trainer *t);
void ps_finish(trainer *t);

/* mode_gpt.c: --model gpt's data and model (its train_model row). */
void gpt_load(trainer *t);
nn_model *gpt_make(trainer *t, int max_batch);

/* The hooks of every mode whose replicas sum their gradients and keep equal parameters
 * (allreduce, the splits, the pipeline), as designated initializers of a train_mode. */
#define DATA_PARALLEL_HOOKS                                                                        \
    .replicas_agree = 1, .agree_stop = 1, .periodic_eval = 1, .shares = allreduce_shares,          \
    .model_built = allreduce_model_built, .optim_built = allreduce_optim_built
/* And of those whose every rank holds the whole model (allreduce, the splits). */
#define WHOLE_MODEL_HOOKS                                                                          \
    .first_params = allreduce_first_params, .sync = allreduce_sync, .step = allreduce_step,        \
    .save = allreduce_save, .report = allreduce_report

#endif /* CHORUS_TRAIN_TRAINER_H */
