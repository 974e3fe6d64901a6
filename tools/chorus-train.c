/*
 * chorus-train - data-parallel training of an MLP or a small CNN on Fashion-MNIST with
 * libchorus_nn, on one process or many (chorus-run -np N chorus-train ...).
 *
 * Every rank holds the whole model. Rank 0's initial parameters are broadcast; each global
 * batch is split across the ranks by the distributed sampler; the gradients are summed
 * (nn_dist_sync_grads, the loss gradient already scaled by 1/global batch) and every rank
 * takes the same optimizer step, so the parameters stay bitwise identical. With
 * --grad-sync engine each layer's gradient is handed to the training runtime as soon as the
 * backward pass has produced it, so its allreduce overlaps the rest of backward. Rank 0
 * prints progress, writes metrics and checkpoints.
 */
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "chorus/checkpoint.h"
#include "chorus/engine.h"
#include "chorus/nn.h"
#include "chorus/ps.h"
#include "train_parallel.h"
#include "train_tb.h"
#include "train_balance.h"
#include "train_pipe.h"
#include "train_diverge.h"
#include "train_record.h"

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

    /* per-rank monitoring and load balancing (tools/train_balance.c) */
    const char *balance;        /* static, dynamic */
    int balance_every;          /* steps between re-balancings */
    const char *balance_shares; /* fixed uneven shares (tests of the weighting), or NULL */
    double straggler_timeout;   /* ps-*: report exchanges longer than this (s), 0: never */

    int pipe_stages;           /* --pipeline-stages P, 0: no pipeline */
    int microbatches;          /* --microbatches M per step and pipeline */
    const char *pipe_schedule; /* --schedule gpipe|1f1b */

    long check_div;      /* --check-divergence N: compare the replicas every N steps (0: off) */
    const char *perturb; /* --test-perturb RANK:STEP[:TENSOR] (tests only), or NULL */
} opts;

static int g_rank;

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "chorus-train[%d]: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chorus-train [options]            (one process)\n"
            "       chorus-run -np N chorus-train [options]\n"
            "Trains on Fashion-MNIST with data-parallel gradient averaging.\n"
            "  --model mlp|cnn        784-512-256-10 MLP, or 2x(conv3x3,relu,pool)+2 linear "
            "(mlp)\n"
            "  --epochs N             passes over the training set (mlp 10, cnn 8)\n"
            "  --batch G              GLOBAL batch per optimizer step, split across ranks "
            "(256)\n"
            "  --accum K              split each rank's share into K micro-batches whose\n"
            "                         gradients accumulate (same result, less memory) (1)\n"
            "  --optim sgd|adamw      (sgd: with momentum, Nesterov)\n"
            "  --lr X                 peak learning rate (sgd: mlp 0.1, cnn 0.05, large 0.01;\n"
            "                         adamw 0.001)\n"
            "  --scale-lr             multiply --lr by the number of ranks (linear scaling, for\n"
            "                         when --batch grows with the ranks)\n"
            "  --lr-schedule S        cosine|step|const after warm-up (cosine); step: x0.1 at\n"
            "                         50%% and 75%% of training\n"
            "  --warmup-epochs E      linear warm-up from 0 over E epochs (0)\n"
            "  --momentum M --weight-decay W --no-nesterov --dropout P\n"
            "                         (momentum: 0.9; ps-async and ps-ssp: 0.8)\n"
            "  --seed S               initialisation, shuffling and dropout (1)\n"
            "  --threads T            BLAS threads per rank (1)\n"
            "  --data DIR             Fashion-MNIST directory (" NN_FASHION_DEFAULT_DIR ")\n"
            "  --checkpoint-dir D     save checkpoints there (each epoch, and see below); a\n"
            "                         fresh run refuses a D holding another run's checkpoints\n"
            "  --checkpoint-every N   also every N optimizer steps\n"
            "  --resume               continue from the newest valid checkpoint in D; refused\n"
            "                         when an option that changes the result differs from the\n"
            "                         checkpoint's (docs/TRAINING.md lists them)\n"
            "  --metrics FILE         JSON line per step: loss, acc, lr, samples/s, comm wait\n"
            "  --max-steps N          stop after N optimizer steps in all\n"
            "  --dump-params FILE     write each rank's final parameters to FILE.<rank>\n"
            "  --check-divergence N   every N steps, compare the parameters of the ranks that\n"
            "                         should hold equal ones (one allgather of a 64-bit hash\n"
            "                         per tensor); a difference stops the run, before any\n"
            "                         checkpoint, naming the tensor, the ranks and the step\n"
            "                         (0: off) (0)\n"
            "  --test-perturb R:S[:T] FOR TESTS ONLY: world rank R changes the first element\n"
            "                         of tensor T (e.g. layer2.linear.bias; default the\n"
            "                         first) after step S, so that --check-divergence finds it\n"
            "  --grad-sync fused|layer|engine  after backward, one allreduce over the whole\n"
            "                         contiguous gradient buffer (fused) or one per layer; or\n"
            "                         each layer's allreduce started by the training engine\n"
            "                         as soon as backward produced it, overlapping the rest\n"
            "                         of backward (engine) (fused)\n"
            "  --bucket-kb N          engine: send consecutive layers as one tensor until it\n"
            "                         holds N KiB (0: one tensor per layer) (0)\n"
            "  --log-every N          progress line every N steps when not on a terminal "
            "(50)\n"
            "  --no-eval              skip the test-set evaluation (for timing runs)\n"
            "  --mode M               allreduce: every rank trains and gradients are averaged;\n"
            "                         ps-sync|ps-async|ps-ssp: the first --servers ranks hold\n"
            "                         the parameters and apply the optimizer, the others push\n"
            "                         gradients and pull parameters: every step in step\n"
            "                         (sync), never waiting (async) or at most --staleness\n"
            "                         steps ahead of the slowest worker (ssp) (allreduce)\n"
            "  --servers K            ps modes: parameter servers (chorus-run --servers K,\n"
            "                         else 1)\n"
            "  --staleness S          ps-ssp: steps a worker may run ahead (2)\n"
            "  --ps-grad-dtype T      ps: gradients travel as float32, float16 or bfloat16\n"
            "                         (float32)\n"
            "  --time-limit S         every rank stops training after S seconds, and the\n"
            "                         learning-rate schedule runs over those S seconds instead\n"
            "                         of --epochs; one test-set evaluation at the end instead\n"
            "                         of one per epoch (for comparing modes at equal time)\n"
            "  --compress C           gradient compression with error feedback, every\n"
            "                         --grad-sync mode: none|fp16|bf16|topk:R|randomk:R|\n"
            "                         powersgd:N (R: fraction of elements sent, N: rank) (none)\n"
            "  --eval-every N         also evaluate on the test set every N steps; the\n"
            "                         line and the metrics give the training time so far\n"
            "                         (evaluations excluded), for time-to-accuracy (0)\n"
            "  --model large          784-1024x8-10 MLP (8.2M parameters), for the options below\n"
            "  --tensor-parallel T    split the MLP's hidden layers over T ranks in column/row\n"
            "                         pairs; the world is data replicas x T (1)\n"
            "  --zero 1|2             shard the optimizer state (1) and the summed gradients (2)\n"
            "                         over the data-parallel ranks (0)\n"
            "  --recompute[=K]        keep only every K-th layer's activations and recompute\n"
            "                         the rest in backward (K: about sqrt(layers))\n"
            "  --max-memory-mb N      refuse to start when a rank's planned memory exceeds N MiB\n"
            "  --tensorboard DIR      TensorBoard event files: the job's curves in DIR, each\n"
            "                         rank's own in DIR/rank<k> (tensorboard --logdir DIR)\n"
            "  --balance static|dynamic  split each global batch evenly (static) or in\n"
            "                         proportion to each rank's measured speed (dynamic)\n"
            "                         (static)\n"
            "  --balance-every N      dynamic: re-balance every N steps (10)\n"
            "  --straggler-timeout S  ps-*: a worker reports each exchange with the servers\n"
            "                         that took longer than S seconds, and why (allreduce\n"
            "                         names slow ranks in the progress line by itself)\n"
            "  --pipeline-stages P    cut the model's layers into P stages on consecutive\n"
            "                         ranks (balanced by compute); the world is\n"
            "                         (data-parallel replicas) x P ranks\n"
            "  --microbatches M       pipeline: micro-batches per step (4)\n"
            "  --schedule S           pipeline: gpipe (all forwards, then all backwards) or\n"
            "                         1f1b (bounded activation memory) (1f1b)\n"
            "  --version              print the version and exit\n");
}

/* --pipeline-stages and its companions: what they combine with. */
static void check_pipeline_opts(opts *o)
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
    if (o->par.tp > 1 || o->par.zero || o->par.recompute)
        die("--pipeline-stages does not combine with --tensor-parallel, --zero or --recompute "
            "(yet): use one way of splitting the model per run");
    if (o->balance && !strcmp(o->balance, "dynamic"))
        die("--balance dynamic does not combine with --pipeline-stages: a pipeline's stages "
            "take the same micro-batches");
}

/* The long name of option value c in the table lo. */
static const char *opt_name(const struct option *lo, int c)
{
    for (; lo->name; lo++)
        if (lo->val == c) return lo->name;
    return "?";
}

/* --compress: a spec the library knows, in a mode that reduces gradients with allreduce. */
static void check_compress(const opts *o)
{
    chorus_compressor *c = NULL;
    if (chorus_compressor_create(o->compress, 0, &c) != CHORUS_OK)
        die("--compress: %s", chorus_last_error(NULL));
    chorus_compressor_destroy(c);
    if (c && strcmp(o->mode, "allreduce"))
        die("--compress is for --mode allreduce (the parameter server has --ps-grad-dtype)");
    if (c && o->par.zero)
        die("--compress does not combine with --zero (its reduce-scatter shards the gradients)");
    if (c && (o->pipe_stages || o->par.tp > 1))
        die("--compress does not combine with --pipeline-stages or --tensor-parallel yet: "
            "compress the gradients of plain data parallelism");
}

static void parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof(*o));
    o->model = "mlp";
    o->epochs = -1;
    o->batch = 256;
    o->lr = -1.0f;
    o->seed = 1;
    o->threads = 1;
    o->accum = 1;
    o->schedule = "cosine";
    o->optim = "sgd";
    o->momentum = -1; /* by mode, below */
    o->wd = -1.0f;
    o->dropout = -1.0f;
    o->nesterov = 1;
    o->sync = "fused";
    o->log_every = 50;
    o->mode = "allreduce";
    o->servers = 0; /* chorus-run --servers K, else 1 */
    o->staleness = 2;
    o->ps_grad = "float32";
    o->compress = "none";
    o->balance = "static";
    o->balance_every = 10;
    enum {
        O_MODEL = 256,
        O_EPOCHS,
        O_BATCH,
        O_LR,
        O_SEED,
        O_THREADS,
        O_ACCUM,
        O_WARM,
        O_SCHED,
        O_SCALE,
        O_OPTIM,
        O_MOM,
        O_WD,
        O_NONEST,
        O_DROP,
        O_CKDIR,
        O_CKEVERY,
        O_RESUME,
        O_METRICS,
        O_MAXSTEPS,
        O_DATA,
        O_DUMP,
        O_SYNC,
        O_BUCKET,
        O_LOGEVERY,
        O_NOEVAL,
        O_MODE,
        O_SERVERS,
        O_STALE,
        O_PSGRAD,
        O_TIME,
        O_COMPRESS,
        O_EVALEVERY,
        O_HELP,
        O_TP,
        O_ZERO,
        O_RECOMP,
        O_MAXMEM,
        O_TB,
        O_BALANCE,
        O_BALEVERY,
        O_BALSHARES,
        O_STRAGGLER,
        O_PSTAGES,
        O_MICRO,
        O_PSCHED,
        O_CHECKDIV,
        O_PERTURB
    };
    static const struct option lo[] = {{"model", 1, 0, O_MODEL},
                                       {"epochs", 1, 0, O_EPOCHS},
                                       {"batch", 1, 0, O_BATCH},
                                       {"lr", 1, 0, O_LR},
                                       {"seed", 1, 0, O_SEED},
                                       {"threads", 1, 0, O_THREADS},
                                       {"accum", 1, 0, O_ACCUM},
                                       {"warmup-epochs", 1, 0, O_WARM},
                                       {"lr-schedule", 1, 0, O_SCHED},
                                       {"scale-lr", 0, 0, O_SCALE},
                                       {"optim", 1, 0, O_OPTIM},
                                       {"momentum", 1, 0, O_MOM},
                                       {"weight-decay", 1, 0, O_WD},
                                       {"no-nesterov", 0, 0, O_NONEST},
                                       {"dropout", 1, 0, O_DROP},
                                       {"checkpoint-dir", 1, 0, O_CKDIR},
                                       {"checkpoint-every", 1, 0, O_CKEVERY},
                                       {"resume", 0, 0, O_RESUME},
                                       {"metrics", 1, 0, O_METRICS},
                                       {"max-steps", 1, 0, O_MAXSTEPS},
                                       {"data", 1, 0, O_DATA},
                                       {"dump-params", 1, 0, O_DUMP},
                                       {"check-divergence", 1, 0, O_CHECKDIV},
                                       {"test-perturb", 1, 0, O_PERTURB},
                                       {"grad-sync", 1, 0, O_SYNC},
                                       {"bucket-kb", 1, 0, O_BUCKET},
                                       {"log-every", 1, 0, O_LOGEVERY},
                                       {"no-eval", 0, 0, O_NOEVAL},
                                       {"mode", 1, 0, O_MODE},
                                       {"servers", 1, 0, O_SERVERS},
                                       {"staleness", 1, 0, O_STALE},
                                       {"ps-grad-dtype", 1, 0, O_PSGRAD},
                                       {"time-limit", 1, 0, O_TIME},
                                       {"compress", 1, 0, O_COMPRESS},
                                       {"eval-every", 1, 0, O_EVALEVERY},
                                       {"tensorboard", 1, 0, O_TB},
                                       {"balance", 1, 0, O_BALANCE},
                                       {"balance-every", 1, 0, O_BALEVERY},
                                       {"balance-shares", 1, 0, O_BALSHARES},
                                       {"straggler-timeout", 1, 0, O_STRAGGLER},
                                       {"pipeline-stages", 1, 0, O_PSTAGES},
                                       {"microbatches", 1, 0, O_MICRO},
                                       {"schedule", 1, 0, O_PSCHED},
                                       {"help", 0, 0, O_HELP},
                                       {"tensor-parallel", 1, 0, O_TP},
                                       {"zero", 1, 0, O_ZERO},
                                       {"recompute", 2, 0, O_RECOMP},
                                       {"max-memory-mb", 1, 0, O_MAXMEM},
                                       {0, 0, 0, 0}};
    int c;
    char *end;
#define NUM(dst, conv, lo_ok)                                                                      \
    do {                                                                                           \
        errno = 0;                                                                                 \
        dst = conv;                                                                                \
        if (errno || *end || end == optarg || !(lo_ok))                                            \
            die("bad value '%s' for --%s (see --help)", optarg, opt_name(lo, c));                  \
    } while (0)
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case O_MODEL: o->model = optarg; break;
        case O_EPOCHS: NUM(o->epochs, (int)strtol(optarg, &end, 10), o->epochs > 0); break;
        case O_BATCH: NUM(o->batch, (int)strtol(optarg, &end, 10), o->batch > 0); break;
        case O_LR:
            NUM(o->lr, strtof(optarg, &end), o->lr > 0);
            if (!isfinite(o->lr)) die("--lr %s: the learning rate must be a finite number", optarg);
            break;
        case O_SEED: NUM(o->seed, strtoull(optarg, &end, 10), 1); break;
        case O_THREADS: NUM(o->threads, (int)strtol(optarg, &end, 10), o->threads > 0); break;
        case O_ACCUM: NUM(o->accum, (int)strtol(optarg, &end, 10), o->accum > 0); break;
        case O_WARM: NUM(o->warmup_epochs, strtof(optarg, &end), o->warmup_epochs >= 0); break;
        case O_SCHED: o->schedule = optarg; break;
        case O_SCALE: o->scale_lr = 1; break;
        case O_OPTIM: o->optim = optarg; break;
        case O_MOM: NUM(o->momentum, strtof(optarg, &end), o->momentum >= 0); break;
        case O_WD: NUM(o->wd, strtof(optarg, &end), o->wd >= 0); break;
        case O_NONEST: o->nesterov = 0; break;
        case O_DROP:
            NUM(o->dropout, strtof(optarg, &end), o->dropout >= 0 && o->dropout < 1);
            break;
        case O_CKDIR: o->ckpt_dir = optarg; break;
        case O_CKEVERY: NUM(o->ckpt_every, strtol(optarg, &end, 10), o->ckpt_every >= 0); break;
        case O_RESUME: o->resume = 1; break;
        case O_METRICS: o->metrics = optarg; break;
        case O_MAXSTEPS: NUM(o->max_steps, strtol(optarg, &end, 10), o->max_steps > 0); break;
        case O_DATA: o->data = optarg; break;
        case O_DUMP: o->dump = optarg; break;
        case O_CHECKDIV: NUM(o->check_div, strtol(optarg, &end, 10), o->check_div >= 0); break;
        case O_PERTURB:
            if (!diverge_perturb_valid(optarg))
                die("--test-perturb '%s': expected RANK:STEP[:TENSOR]", optarg);
            o->perturb = optarg;
            break;
        case O_SYNC: o->sync = optarg; break;
        case O_BUCKET: NUM(o->bucket_kb, strtol(optarg, &end, 10), o->bucket_kb >= 0); break;
        case O_LOGEVERY: NUM(o->log_every, (int)strtol(optarg, &end, 10), o->log_every > 0); break;
        case O_NOEVAL: o->no_eval = 1; break;
        case O_MODE: o->mode = optarg; break;
        case O_SERVERS: NUM(o->servers, (int)strtol(optarg, &end, 10), o->servers > 0); break;
        case O_STALE: NUM(o->staleness, (int)strtol(optarg, &end, 10), o->staleness >= 0); break;
        case O_PSGRAD: o->ps_grad = optarg; break;
        case O_TIME: NUM(o->time_limit, strtod(optarg, &end), o->time_limit > 0); break;
        case O_COMPRESS: o->compress = optarg; break;
        case O_EVALEVERY: NUM(o->eval_every, strtol(optarg, &end, 10), o->eval_every >= 0); break;
        case O_TB: o->tensorboard = optarg; break;
        case O_BALANCE: o->balance = optarg; break;
        case O_BALEVERY:
            NUM(o->balance_every, (int)strtol(optarg, &end, 10), o->balance_every > 0);
            break;
        case O_BALSHARES: o->balance_shares = optarg; break;
        case O_STRAGGLER:
            NUM(o->straggler_timeout, strtod(optarg, &end), o->straggler_timeout > 0);
            break;
        case O_PSTAGES:
            NUM(o->pipe_stages, (int)strtol(optarg, &end, 10), o->pipe_stages > 0);
            break;
        case O_MICRO:
            NUM(o->microbatches, (int)strtol(optarg, &end, 10), o->microbatches > 0);
            break;
        case O_PSCHED: o->pipe_schedule = optarg; break;
        case O_HELP:
        case 'h': usage(stdout); exit(0);
        case O_TP: NUM(o->par.tp, (int)strtol(optarg, &end, 10), o->par.tp > 0); break;
        case O_ZERO:
            NUM(o->par.zero, (int)strtol(optarg, &end, 10), o->par.zero >= 0 && o->par.zero <= 2);
            break;
        case O_RECOMP:
            o->par.recompute = -1;
            if (optarg) NUM(o->par.recompute, (int)strtol(optarg, &end, 10), o->par.recompute > 0);
            break;
        case O_MAXMEM: NUM(o->par.max_mb, strtol(optarg, &end, 10), o->par.max_mb > 0); break;
        default: usage(stderr); exit(2);
        }
    }
#undef NUM
    if (optind < argc) die("unexpected argument '%s' (see --help)", argv[optind]);
    if (!o->compress[0])
        die("--compress must be none, fp16, bf16, topk:R, randomk:R or powersgd:N, not ''");
    if (o->dump && !o->dump[0]) die("--dump-params needs a file name, not ''");
    int cnn = !strcmp(o->model, "cnn");
    if (!cnn && strcmp(o->model, "mlp") && strcmp(o->model, "large"))
        die("--model must be mlp, cnn or large, not '%s'", o->model);
    if (strcmp(o->optim, "sgd") && strcmp(o->optim, "adamw"))
        die("--optim must be sgd or adamw, not '%s'", o->optim);
    if (strcmp(o->schedule, "cosine") && strcmp(o->schedule, "step") &&
        strcmp(o->schedule, "const"))
        die("--lr-schedule must be cosine, step or const, not '%s'", o->schedule);
    if (strcmp(o->sync, "layer") && strcmp(o->sync, "fused") && strcmp(o->sync, "engine"))
        die("--grad-sync must be fused, layer or engine, not '%s'", o->sync);
    if (strcmp(o->mode, "allreduce") && strcmp(o->mode, "ps-sync") && strcmp(o->mode, "ps-async") &&
        strcmp(o->mode, "ps-ssp"))
        die("--mode must be allreduce, ps-sync, ps-async or ps-ssp, not '%s'", o->mode);
    if (strcmp(o->ps_grad, "float32") && strcmp(o->ps_grad, "float16") &&
        strcmp(o->ps_grad, "bfloat16"))
        die("--ps-grad-dtype must be float32, float16 or bfloat16, not '%s'", o->ps_grad);
    check_compress(o);
    if (strcmp(o->balance, "static") && strcmp(o->balance, "dynamic"))
        die("--balance must be static or dynamic, not '%s'", o->balance);
    if ((!strcmp(o->balance, "dynamic") || o->balance_shares) && strcmp(o->mode, "allreduce"))
        die("--balance dynamic works with --mode allreduce only: parameter-server workers do "
            "not share a global batch");
    if (o->straggler_timeout > 0 && !strcmp(o->mode, "allreduce"))
        die("--straggler-timeout is for --mode ps-sync, ps-async and ps-ssp; with allreduce a "
            "rank far slower than the others is named in the progress line");
    if (o->servers && !strcmp(o->mode, "allreduce"))
        die("--servers is for --mode ps-sync, ps-async and ps-ssp (the parameter servers); with "
            "--mode allreduce every rank trains and there is no server");
    if (o->resume && !o->ckpt_dir) die("--resume needs --checkpoint-dir");
    if (o->check_div && strcmp(o->mode, "allreduce"))
        die("--check-divergence works with --mode allreduce, not --mode %s (the parameter "
            "servers hold the one copy of the parameters)",
            o->mode);
    check_pipeline_opts(o);
    if (o->ckpt_every && !o->ckpt_dir) die("--checkpoint-every needs --checkpoint-dir");
    int adam = !strcmp(o->optim, "adamw");
    if (o->epochs < 0) o->epochs = cnn ? 8 : 10;
    if (o->lr < 0) o->lr = adam ? 1e-3f : cnn ? 0.05f : !strcmp(o->model, "large") ? 0.01f : 0.1f;
    /* Asynchronous updates add momentum of their own: each gradient was taken at parameters
     * a few updates old, which acts like a heavier momentum term (docs/PARAMETER_SERVER.md
     * shows the measurements behind 0.8). */
    if (o->momentum < 0)
        o->momentum = !strcmp(o->mode, "ps-async") || !strcmp(o->mode, "ps-ssp") ? 0.8f : 0.9f;
    if (o->wd < 0) o->wd = adam ? 1e-2f : 5e-4f;
    if (o->dropout < 0) o->dropout = cnn ? 0.25f : 0.0f;
    par_check_opts(&o->par, o->model, o->mode, o->sync, o->dropout, o->accum, o->ckpt_dir,
                   o->time_limit);
}

static nn_model *build_model(opts *o, const nn_dataset *ds, int max_batch)
{
    nn_model *m = nn_model_create(ds->c, ds->h, ds->w);
    if (!m) die("out of memory");
    int bad = 0;
    if (par_add_layers(&o->par, m, o->model, ds->nclasses, &bad)) {
    } else if (!strcmp(o->model, "mlp")) {
        /* (B,784) -> 512 -> 256 -> 10 */
        bad |= nn_add_linear(m, 512) | nn_add_relu(m);
        bad |= nn_add_linear(m, 256) | nn_add_relu(m);
        if (o->dropout > 0) bad |= nn_add_dropout(m, o->dropout);
        bad |= nn_add_linear(m, ds->nclasses);
    } else {
        /* (B,1,28,28) -> (B,32,28,28) -> pool (B,32,14,14) -> (B,64,14,14) -> pool
         * (B,64,7,7) -> 128 -> 10 */
        bad |= nn_add_conv2d(m, 32, 3, 1, 1) | nn_add_relu(m) | nn_add_maxpool2d(m, 2, 2);
        bad |= nn_add_conv2d(m, 64, 3, 1, 1) | nn_add_relu(m) | nn_add_maxpool2d(m, 2, 2);
        bad |= nn_add_flatten(m) | nn_add_linear(m, 128) | nn_add_relu(m);
        if (o->dropout > 0) bad |= nn_add_dropout(m, o->dropout);
        bad |= nn_add_linear(m, ds->nclasses);
    }
    if (bad) die("internal error: model shapes do not fit (%s)", nn_last_error());
    par_before_finalize(&o->par, m);
    if (nn_model_finalize(m, max_batch)) die("out of memory for the model (%s)", nn_last_error());
    return m;
}

/* The learning rate of a step. The schedule runs over the steps of --epochs, or, with
 * --time-limit, over the time budget: `spent` is then the fraction of it used so far (the same
 * on every rank of an allreduce job), so that the rate has decayed when the time is up, as a
 * budgeted run should, whatever the number of steps that fit. */
static float lr_at(const opts *o, uint64_t step, uint64_t steps_per_epoch, int world, double spent)
{
    double base = (double)o->lr * (o->scale_lr ? world : 1);
    double total = (double)o->epochs * (double)steps_per_epoch;
    double warm = floor((double)o->warmup_epochs * (double)steps_per_epoch);
    double s = (double)step;
    if (o->time_limit > 0) { /* both as fractions of the budget */
        warm = o->warmup_epochs / (double)o->epochs, total = 1.0, s = spent;
        if (s < warm) return (float)(base * s / warm);
    }
    if (s < warm) return (float)(base * (s + 1.0) / warm);
    double t = total > warm ? (s - warm) / (total - warm) : 1.0;
    if (t > 1.0) t = 1.0;
    if (!strcmp(o->schedule, "cosine")) return (float)(base * 0.5 * (1.0 + cos(M_PI * t)));
    if (!strcmp(o->schedule, "step"))
        return (float)(base * (t >= 0.75 ? 0.01 : t >= 0.5 ? 0.1 : 1.0));
    return (float)base;
}

/* Test accuracy: each rank evaluates its slice of the test set; counts are summed. Alone, this
 * rank evaluates the whole set and meets nobody. */
static double evaluate(nn_model *m, nn_dist *d, const nn_dataset *test, float *x, int32_t *y,
                       double *loss_out, int alone)
{
    int was = m->training;
    m->training = 0;
    size_t parts = alone ? 1 : (size_t)d->size, part = alone ? 0 : (size_t)d->rank;
    size_t n = (size_t)test->n, per = (n + parts - 1) / parts;
    size_t lo = per * part, hi = lo + per < n ? lo + per : n;
    double acc[3] = {0, 0, 0};
    uint32_t *idx = malloc((size_t)m->max_batch * sizeof(uint32_t));
    if (!idx) die("out of memory");
    for (size_t s = lo; s < hi; s += (size_t)m->max_batch) {
        int B = (int)((hi - s) < (size_t)m->max_batch ? hi - s : (size_t)m->max_batch);
        for (int i = 0; i < B; i++) idx[i] = (uint32_t)(s + (size_t)i);
        nn_dataset_batch(test, idx, B, x, y);
        const float *z = nn_forward(m, x, B);
        int hits = 0;
        acc[0] += nn_xent(z, y, B, test->nclasses, 0.0f, NULL, &hits);
        acc[1] += hits;
        acc[2] += B;
    }
    free(idx);
    if (!alone && nn_dist_sum(d, acc, 3)) die("%s", nn_last_error());
    m->training = was;
    if (loss_out) *loss_out = acc[0] / acc[2];
    return acc[1] / acc[2];
}

/* Share of the gradient communication time that overlapped backward. */
static double hidden_share(const nn_dist *d)
{
    return d->comm_s > 0 ? d->hidden_s / d->comm_s : 0.0;
}

static void fmt_eta(char *buf, size_t len, double s)
{
    if (s < 0 || !isfinite(s)) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
}

/* --metrics: after each record, the line is on its way to the file, or the run stops naming
 * the file and what the system said (a full disk, /dev/full), not with a file cut mid-record.
 * Closes the file too when closing. */
static void metrics_written(FILE **f, const char *path, int closing)
{
    if (!*f) return;
    errno = 0;
    int bad = fflush(*f) != 0 || ferror(*f);
    int err = errno;
    if (closing) {
        bad |= fclose(*f) != 0;
        if (bad && !err) err = errno;
        *f = NULL;
    }
    if (bad)
        die("cannot write metrics to %s: %s", path,
            err ? strerror(err) : "a write failed (the system gave no reason)");
}

/* Everything a run holds, shared by the steps of main() below. */
typedef struct trainer {
    opts o;
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
    double last_test_acc; /* -1 until evaluated */
    double eval_s;        /* --eval-every: seconds spent in those evaluations */
    chorus_ps *ps;        /* --mode ps-*: this rank's side of the parameter server */
    train_tb tb;          /* TensorBoard scalars (train_tb.c) */
    uint64_t tb_pushed;   /* ps: bytes pushed before this step */
    int sps_workers;      /* ps: how many workers samples_done counts (1: this one's own) */
    train_balance *bal;   /* --mode allreduce: per-rank monitoring and load balancing */
    nn_pipe *pipe;        /* --pipeline-stages: this rank's stage; t->m then only evaluates */
    float *pipe_x;        /* (max_local, features) the step's samples on stage 0 */
    int32_t *pipe_y;      /* (max_local) their labels */
    nn_optim pipe_opt;    /* the stage's optimizer (t->opt is the whole model's, for checkpoints) */
    int first_layer;      /* --pipeline-stages: the stage's first layer in the whole model */
    uint64_t div_checked; /* --check-divergence: 1 + the last step compared */
    double div_s;         /* --check-divergence: seconds spent comparing (part of train_time) */
    uint64_t div_n;       /* --check-divergence: comparisons made */
    rec_config rec;       /* the options that decide the result (train_record.c) */
    int comp_state;       /* --compress keeps memory: every rank saves its own with a checkpoint */
} trainer;

/* What a samples/s figure counts, said under --mode ps-* (its workers count their own
 * samples until the end, where they are summed): "" in allreduce mode, where every figure is
 * the whole job's. */
static const char *sps_whose(const trainer *t, char *buf, size_t len)
{
    if (!t->ps) return "";
    if (t->sps_workers > 1)
        snprintf(buf, len, " (%d workers together)", t->sps_workers);
    else
        snprintf(buf, len, " (worker 0 alone)");
    return buf;
}

#define PS_KEY 0 /* the whole flat parameter buffer is one key, cut across the servers */

/* Sums of one epoch so far, over all ranks. */
typedef struct epoch_stats {
    double loss, hits, n, last_print;
} epoch_stats;

/* Whether the workers never meet once training has started (ps-async, ps-ssp): a worker that
 * dies or stops then costs the others nothing. Worker 0 alone evaluates and reports. */
static int workers_apart(const trainer *t)
{
    return t->ps && strcmp(t->o.mode, "ps-sync") != 0;
}

/* Step (--mode ps-*): split the job into parameter servers and workers. The servers apply
 * this run's optimizer; a worker's rank and world below are among the workers only. */
static void start_ps(trainer *t)
{
    const opts *o = &t->o;
    chorus_ps_opts po;
    chorus_ps_opts_default(&po);
    if (o->servers > 0) po.nservers = o->servers;
    po.mode = !strcmp(o->mode, "ps-sync")    ? CHORUS_PS_SYNC
              : !strcmp(o->mode, "ps-async") ? CHORUS_PS_ASYNC
                                             : CHORUS_PS_SSP;
    po.staleness = o->staleness;
    po.optim = !strcmp(o->optim, "adamw") ? CHORUS_PS_ADAMW : CHORUS_PS_SGD;
    po.momentum = o->momentum;
    po.nesterov = o->nesterov;
    po.weight_decay = o->wd;
    po.grad_dtype = !strcmp(o->ps_grad, "float16")    ? CHORUS_FLOAT16
                    : !strcmp(o->ps_grad, "bfloat16") ? CHORUS_BFLOAT16
                                                      : CHORUS_FLOAT32;
    chorus_result r = chorus_ps_create(t->comm, &po, &t->ps);
    if (r != CHORUS_OK) die("--mode %s: %s", o->mode, chorus_ps_last_error(NULL));
    if (chorus_ps_is_server(t->ps)) {
        t->rank = 0; /* builds the model like worker 0; trains nothing */
        t->world = chorus_ps_num_workers(t->ps);
    }
}

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
    char f[5][32];
    memset(c, 0, sizeof(*c));
    int keeps = compress_keeps_state(o);
    rec_add(c, REC_RESULT, "--model", "%s", o->model);
    rec_add(c, REC_RESULT, "--batch", "%d", o->batch);
    rec_add(c, REC_RESULT, "--lr", "%s", float_text(o->lr, f[0]));
    rec_add(c, REC_RESULT, "--scale-lr", "%s", o->scale_lr ? "on" : "off");
    rec_add(c, REC_RESULT, "--lr-schedule", "%s", o->schedule);
    rec_add(c, REC_RESULT, "--warmup-epochs", "%s", float_text(o->warmup_epochs, f[1]));
    rec_add(c, REC_RESULT, "--optim", "%s", o->optim);
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
    rec_add(c, REC_RANKS, "--dropout", "%s", float_text(o->dropout, f[4])); /* see restore */
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
static void start_job(trainer *t)
{
    chorus_result cr = chorus_init(&t->comm);
    if (cr != CHORUS_OK)
        die("chorus_init failed: %s (%s)", chorus_strerror(cr), chorus_last_error(NULL));
    g_rank = chorus_rank(t->comm);
    check_config(t);
    openblas_set_num_threads(t->o.threads);
    chorus_comm *train_comm = par_grid(&t->o.par, t->comm, &t->o.metrics, &t->o.dump);
    if (strncmp(t->o.mode, "ps-", 3) == 0) {
        start_ps(t);
        if (chorus_ps_is_server(t->ps)) return;
        train_comm = chorus_ps_worker_comm(t->ps);
    }
    nn_sync_mode mode = !strcmp(t->o.sync, "fused")   ? NN_SYNC_FUSED
                        : !strcmp(t->o.sync, "layer") ? NN_SYNC_LAYER
                                                      : NN_SYNC_ENGINE;
    if (nn_dist_init(&t->dist, train_comm, mode)) die("%s", nn_last_error());
    t->dist.bucket_bytes = (size_t)t->o.bucket_kb * 1024;
    t->rank = t->dist.rank;
    t->world = t->dist.size;
}

/* Step: read the train and test splits of Fashion-MNIST. */
static void load_data(trainer *t)
{
    if (nn_fashion_load(t->o.data, 1, &t->train)) die("%s", nn_last_error());
    if (nn_fashion_load(t->o.data, 0, &t->test)) die("%s", nn_last_error());
}

/* Step (--mode allreduce): per-rank monitoring and the load balancer over the sampler (the
 * batch buffers are then sized for the largest share it may give, balance_capacity). */
static void start_balance(trainer *t)
{
    balance_opts bo = {.dynamic = !strcmp(t->o.balance, "dynamic"),
                       .every = t->o.balance_every,
                       .monitor_every = t->o.log_every,
                       .fixed = t->o.balance_shares,
                       .global_batch = (size_t)t->o.batch,
                       .rank = t->rank,
                       .world = t->world};
    char why[512];
    t->bal = balance_create(&bo, &t->dist, &t->sampler, why, sizeof(why));
    if (!t->bal) die("%s", why);
}

/* Step: the sampler, the model (initialised from the seed), the optimizer and the initial
 * training state. */
static void build(trainer *t)
{
    opts *o = &t->o;
    if (nn_sampler_init(&t->sampler, (size_t)t->train.n, (size_t)o->batch, t->rank, t->world,
                        o->seed))
        die("cannot set up the sampler (batch %d, %d rank%s)", o->batch, t->world,
            t->world == 1 ? "" : "s");
    t->max_local = nn_sampler_max_local(&t->sampler);
    if (!t->ps) start_balance(t);
    size_t cap = t->bal ? balance_capacity(t->bal) : t->max_local; /* largest share */
    int max_micro = (int)((cap + (size_t)o->accum - 1) / (size_t)o->accum);
    if (max_micro < 1) max_micro = 1;
    /* Evaluation runs in chunks of max_batch; keep them reasonably large. */
    t->max_batch = max_micro < 256 ? 256 : max_micro;
    t->m = build_model(o, &t->train, t->max_batch);
    if (!t->ps && nn_dist_set_compression(&t->dist, t->m, o->compress)) die("%s", nn_last_error());
    if (!t->ps && t->rank == 0 && t->dist.comp && t->world > 1)
        printf("gradient compression %s (--grad-sync %s): a rank sends %.2f%% of the dense "
               "gradient bytes per step\n",
               o->compress, o->sync, 100.0 * nn_dist_compression_ratio(&t->dist, t->m));
    nn_model_init_params(t->m, o->seed);
    t->m->rank = t->rank;
    chorus_result orc = !strcmp(o->optim, "adamw")
                            ? nn_optim_init_adamw(&t->opt, par_optim_count(&o->par, t->m), 0.9f,
                                                  0.999f, 1e-8f, o->wd)
                            : nn_optim_init_sgd(&t->opt, par_optim_count(&o->par, t->m),
                                                o->momentum, o->nesterov, o->wd);
    if (orc) die("out of memory for the optimizer");
    if (!t->ps) par_setup(&o->par, t->m, &t->opt);
    memset(&t->st, 0, sizeof(t->st));
    t->st.seed = o->seed;
    t->st.rng = o->seed;
    t->st.model_sig = nn_model_signature(t->m);
}

/* The options that shape the model, as written next to the checkpoints ("--model mlp
 * --dropout 0.2"): a resume with other ones is refused saying what differs. */
#define ARCH_NAME "model"
static void arch_text(const opts *o, char *out, size_t len)
{
    snprintf(out, len, "--model %s --dropout %g", o->model, (double)o->dropout);
}

/* The options saved beside the checkpoints of t into out when they differ from this run's
 * (mine); 0 when they are the same or were not saved. */
static int other_arch(const trainer *t, char *out, size_t len, char *mine, size_t mlen)
{
    char *saved = NULL;
    size_t n = 0;
    arch_text(&t->o, mine, mlen);
    if (rec_load_text(t->o.ckpt_dir, ARCH_NAME, &saved, &n)) return 0;
    int differs = n < len && (n != strlen(mine) || memcmp(saved, mine, n));
    if (differs) snprintf(out, len, "%.*s", (int)n, (const char *)saved);
    free(saved);
    return differs;
}

/* When the checkpoints are of another model, replaces why with what differs. */
static void explain_other_model(const trainer *t, char *why, size_t len)
{
    char saved[128], mine[128];
    if (strstr(why, "different model") && other_arch(t, saved, sizeof(saved), mine, sizeof(mine)))
        snprintf(why, len,
                 "the checkpoints in %s are of a model built with %s; this run asks for %s. "
                 "Resume with the same options, or use another --checkpoint-dir",
                 t->o.ckpt_dir, saved, mine);
}

/* Step (--checkpoint-dir): rank 0 writes the model's options beside the checkpoints now, so
 * that a directory it cannot write to is refused before training, not at the first save. */
static void claim_checkpoint_dir(trainer *t)
{
    char arch[128], why[1024] = "";
    int64_t ok = 1;
    arch_text(&t->o, arch, sizeof(arch));
    if (t->rank == 0 &&
        chorus_checkpoint_save(t->o.ckpt_dir, ARCH_NAME, 0, arch, strlen(arch), 1) != CHORUS_OK) {
        snprintf(why, sizeof(why), "%s", chorus_last_error(NULL));
        ok = 0;
    }
    if (t->rank == 0 && ok && rec_save(&t->rec, t->o.ckpt_dir, why, sizeof(why))) ok = 0;
    if (nn_dist_broadcast_bytes(&t->dist, &ok, sizeof(ok))) die("%s", nn_last_error());
    if (!ok && t->rank != 0) chorus_report_peer_failure(t->dist.comm, 0); /* its verdict */
    if (!ok)
        die("cannot write checkpoints to --checkpoint-dir %s (checked before training): %s",
            t->o.ckpt_dir, t->rank == 0 ? why : "see rank 0");
}

/* --resume with a compressor's memory: every rank restores its own, saved with the step. */
static void restore_compressor(trainer *t)
{
    char why[1024];
    int mine = rec_load_compressor(t->dist.comp, t->o.ckpt_dir, t->rank, t->st.global_step, why,
                                   sizeof(why)) != 0;
    double bad = mine;
    if (nn_dist_sum(&t->dist, &bad, 1)) die("%s", nn_last_error());
    if (mine) die("cannot resume: %s", why);
    if (bad > 0) die("cannot resume: another rank could not restore its compressor state");
}

/* --resume: rank 0's loaded training and optimizer state to every rank. */
static void share_resumed_state(trainer *t)
{
    nn_dist *d = &t->dist;
    nn_train_state *st = &t->st;
    uint64_t words[7] = {st->epoch, st->step_in_epoch, st->global_step, st->seed,
                         st->rng,   st->model_sig,     t->opt.t};
    if (nn_dist_broadcast_bytes(d, words, sizeof(words))) die("%s", nn_last_error());
    st->epoch = words[0];
    st->step_in_epoch = words[1];
    st->global_step = words[2];
    st->seed = words[3];
    st->rng = words[4];
    t->opt.t = words[6];
    size_t ns = t->opt.m ? t->opt.n : 0;
    if ((ns && nn_dist_broadcast_bytes(d, t->opt.m, ns * sizeof(float))) ||
        (t->opt.v && nn_dist_broadcast_bytes(d, t->opt.v, t->opt.n * sizeof(float))))
        die("%s", nn_last_error());
    t->m->seed = st->rng;
    t->sampler.seed = st->seed;
    if (t->comp_state) restore_compressor(t);
}

/* Step (--resume): rank 0 loads the newest valid checkpoint and every rank gets its verdict,
 * then the training state and optimizer state (the parameters follow with the broadcast of
 * rank 0's parameters in prepare_run). */
static void restore_checkpoint(trainer *t)
{
    nn_dist *d = &t->dist;
    nn_train_state *st = &t->st;
    int64_t loaded = 0;
    nn_ckpt_info info = {0};
    char why[1024] = "";
    if (t->rank == 0) {
        if (nn_ckpt_load_latest(t->o.ckpt_dir, t->m, &t->opt, st, &info) != CHORUS_OK) {
            snprintf(why, sizeof(why), "%s", nn_last_error());
            explain_other_model(t, why, sizeof(why));
            loaded = -1;
        } else {
            loaded = info.found;
            if (info.skipped[0])
                fprintf(stderr, "chorus-train: warning: %s; using previous %s\n", info.skipped,
                        info.path);
            char saved[128], mine[128];
            if (info.found && other_arch(t, saved, sizeof(saved), mine, sizeof(mine)))
                fprintf(stderr,
                        "chorus-train: note: the checkpoints were written with %s; this run "
                        "goes on with %s\n",
                        saved, mine);
        }
    }
    if (nn_dist_broadcast_bytes(d, &loaded, sizeof(loaded))) die("%s", nn_last_error());
    if (loaded < 0 && t->rank != 0) chorus_report_peer_failure(d->comm, 0); /* its verdict */
    if (loaded < 0) die("cannot resume: %s", t->rank == 0 ? why : "see rank 0");
    if (loaded == 1) {
        share_resumed_state(t);
        if (t->rank == 0)
            printf("resumed from %s: epoch %llu, step %llu\n", info.path,
                   (unsigned long long)st->epoch + 1, (unsigned long long)st->global_step);
    } else if (t->rank == 0) {
        printf("no checkpoint in %s yet; starting from scratch\n", t->o.ckpt_dir);
    }
}

/* --mode ps-* --resume: worker 0 has the servers load their shards of the step the trainer
 * resumed from (saved before the trainer's own checkpoint of that step), and every worker
 * waits for that before its first pull. */
static void resume_shards(trainer *t)
{
    if (!t->o.resume || t->st.global_step == 0) return;
    int64_t moved = 0; /* 1: rank 0 went back to an older step (its state follows) */
    if (t->rank == 0) {
        char first[1024] = "";
        while (chorus_ps_load(t->ps, t->o.ckpt_dir, t->st.global_step) != CHORUS_OK) {
            /* damaged shards: the newest older step whose shards and trainer checkpoint are
             * all intact, said so (the servers said what is wrong with theirs) */
            if (!first[0]) snprintf(first, sizeof(first), "%s", chorus_ps_last_error(t->ps));
            nn_ckpt_info info;
            if (nn_ckpt_load_before(t->o.ckpt_dir, t->st.global_step, t->m, &t->opt, &t->st,
                                    &info) != CHORUS_OK)
                die("cannot resume: %s; no older step has both its shards and its trainer "
                    "checkpoint intact (%s)",
                    first, nn_last_error());
            moved = 1;
        }
        if (moved)
            fprintf(stderr,
                    "chorus-train: %s; resuming from step %llu instead, the newest older step "
                    "whose shards and trainer checkpoint are all intact\n",
                    first, (unsigned long long)t->st.global_step);
        printf("servers: resumed their shards of step %llu from %s\n",
               (unsigned long long)t->st.global_step, t->o.ckpt_dir);
        fflush(stdout);
    }
    if (nn_dist_broadcast_bytes(&t->dist, &moved, sizeof(moved)))
        die("waiting for the servers' shards: %s", nn_last_error());
    if (moved) share_resumed_state(t);
}

/* --mode ps-*: the servers' current parameters into the model. */
static void pull_params(trainer *t)
{
    chorus_ps_handle *h;
    if (chorus_ps_pull(t->ps, PS_KEY, t->m->params, t->m->nparams, &h) != CHORUS_OK ||
        chorus_ps_wait(h) != CHORUS_OK)
        die("pulling the parameters: %s", chorus_ps_last_error(t->ps));
}

/* --mode ps-*: pushes this step's gradients and pulls the parameters the servers made of
 * them (sync: after every worker's push; ssp: once no more than --staleness steps ahead). */
static void ps_step(trainer *t, float lr)
{
    chorus_ps_handle *h[2];
    double t0 = now_s();
    if (chorus_ps_push(t->ps, PS_KEY, t->m->grads, t->m->nparams, lr, &h[0]) != CHORUS_OK)
        die("pushing the gradients: %s", chorus_ps_last_error(t->ps));
    if (chorus_ps_pull(t->ps, PS_KEY, t->m->params, t->m->nparams, &h[1]) != CHORUS_OK ||
        chorus_ps_wait(h[0]) != CHORUS_OK || chorus_ps_wait(h[1]) != CHORUS_OK)
        die("exchanging with the parameter servers: %s", chorus_ps_last_error(t->ps));
    t->dist.wait_s += now_s() - t0;
    t->dist.comm_s += now_s() - t0;
    static uint64_t last_report, missed;
    balance_ps_wait_report(t->rank, t->o.mode, t->o.staleness, t->st.global_step + 1, now_s() - t0,
                           t->o.straggler_timeout, (uint64_t)t->o.log_every, &last_report, &missed);
}

/* Step (--mode ps-*): every rank registers the parameters (the servers' initial values are
 * the seed's, as the workers'). */
static void register_params(trainer *t)
{
    if (chorus_ps_register(t->ps, PS_KEY, t->m->nparams, t->m->params) != CHORUS_OK)
        die("registering the parameters: %s", chorus_ps_last_error(t->ps));
}

/* Step (--mode ps-*, server ranks): serve until every worker is done, then report this
 * server's memory and each worker's traffic (stdout, and a line of --metrics). */
static void serve_params(trainer *t)
{
    if (chorus_ps_serve(t->ps) != CHORUS_OK)
        die("parameter server: %s", chorus_ps_last_error(t->ps));
    chorus_ps_stats st;
    chorus_ps_get_stats(t->ps, &st);
    char per[2048] = "";
    size_t len = 0;
    for (int w = 0; w < st.nworkers && len < sizeof(per) - 64; w++)
        len += (size_t)snprintf(per + len, sizeof(per) - len, "%s%.1f/%.1f", w ? ", " : "",
                                (double)st.worker_bytes_pushed[w] / 1048576.0,
                                (double)st.worker_bytes_pulled[w] / 1048576.0);
    printf("server %d (%s): %.2f MiB of parameters and optimizer state; %llu update%s; %llu "
           "pull%s delayed, largest lead %llu step%s; MiB pushed/pulled per worker: %s\n",
           g_rank, t->o.mode, (double)st.server_bytes / 1048576.0, (unsigned long long)st.updates,
           st.updates == 1 ? "" : "s", (unsigned long long)st.pulls_delayed,
           st.pulls_delayed == 1 ? "" : "s", (unsigned long long)st.max_staleness,
           st.max_staleness == 1 ? "" : "s", per);
    fflush(stdout);
    if (t->o.metrics) {
        FILE *f = fopen(t->o.metrics, "a");
        if (!f) die("cannot open --metrics %s: %s", t->o.metrics, strerror(errno));
        fprintf(f,
                "{\"server\":%d,\"mode\":\"%s\",\"server_bytes\":%llu,\"updates\":%llu,"
                "\"pulls_delayed\":%llu,\"max_staleness\":%llu,\"worker_bytes_pushed\":[",
                g_rank, t->o.mode, (unsigned long long)st.server_bytes,
                (unsigned long long)st.updates, (unsigned long long)st.pulls_delayed,
                (unsigned long long)st.max_staleness);
        for (int w = 0; w < st.nworkers; w++)
            fprintf(f, "%s%llu", w ? "," : "", (unsigned long long)st.worker_bytes_pushed[w]);
        fprintf(f, "],\"worker_bytes_pulled\":[");
        for (int w = 0; w < st.nworkers; w++)
            fprintf(f, "%s%llu", w ? "," : "", (unsigned long long)st.worker_bytes_pulled[w]);
        fprintf(f, "]}\n");
        metrics_written(&f, t->o.metrics, 1);
    }
}

/* Step: rank 0's parameters to everyone, the metrics file, the header line, the batch
 * buffers and the step budget. */
static void prepare_run(trainer *t)
{
    const opts *o = &t->o;
    if (t->ps) {
        resume_shards(t);
        pull_params(t);
    } else if (nn_dist_broadcast_params(&t->dist, t->m))
        die("%s", nn_last_error());
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
        char servers[96] = "";
        if (t->ps)
            snprintf(servers, sizeof(servers), " and %d server%s (--mode %s)",
                     chorus_ps_num_servers(t->ps), chorus_ps_num_servers(t->ps) > 1 ? "s" : "",
                     o->mode);
        /* a pipeline's replicas hold its ranks: say ranks, not replicas */
        char ranks[96];
        if (t->pipe)
            snprintf(ranks, sizeof(ranks), "%d rank%s (%d pipeline replica%s of %d stages)",
                     chorus_size(t->comm), chorus_size(t->comm) > 1 ? "s" : "", t->world,
                     t->world > 1 ? "s" : "", o->pipe_stages);
        else
            snprintf(ranks, sizeof(ranks), "%d rank%s", t->world, t->world > 1 ? "s" : "");
        printf("chorus-train: %s, %zu parameters; %s x %d BLAS thread%s%s; global batch "
               "%d (%zu per %s, accum %d); %s lr %g %s%s, warm-up %g epochs; %d epochs of %zu "
               "steps\n",
               o->model, t->m->nparams, ranks, o->threads, o->threads > 1 ? "s" : "", servers,
               o->batch, t->max_local, t->pipe ? "replica" : "rank", o->accum, o->optim,
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

static void pipeline_gather_state(trainer *t);

/* Step: rank 0 saves a checkpoint of the current state. */
/* Rank 0's line for a checkpoint it has written (the progress line on a terminal is redrawn
 * after it). */
static void say_checkpoint(const trainer *t)
{
    char path[4200];
    if (chorus_checkpoint_path(t->o.ckpt_dir, NN_CKPT_NAME, t->st.global_step, path,
                               sizeof(path)) != CHORUS_OK)
        snprintf(path, sizeof(path), "%s", t->o.ckpt_dir);
    printf("%scheckpoint step %llu written to %s%s%s\n", t->tty ? "\r" : "",
           (unsigned long long)t->st.global_step, path,
           t->ps ? " (and the servers' shards beside it)" : "", t->tty ? "\033[K" : "");
    fflush(stdout);
}

static void save_checkpoint(trainer *t)
{
    if (t->pipe) { /* every rank gathers; rank 0 writes */
        pipeline_gather_state(t);
        int writer = t->rank == 0;
        if (writer && nn_ckpt_save(t->o.ckpt_dir, t->m, &t->opt, &t->st))
            die("%s", nn_last_error());
        if (writer) say_checkpoint(t);
        nn_optim_free(&t->opt);
        return;
    }
    /* every rank's compressor memory first, so that a step the trainer's checkpoint names
     * always has it on disk */
    if (t->comp_state) {
        char cwhy[1024];
        double bad = rec_save_compressor(t->dist.comp, t->o.ckpt_dir, t->rank, t->st.global_step,
                                         cwhy, sizeof(cwhy)) != 0;
        if (bad) fprintf(stderr, "chorus-train[%d]: %s\n", g_rank, cwhy);
        if (nn_dist_sum(&t->dist, &bad, 1)) die("%s", nn_last_error());
        if (bad > 0) die("a rank could not save its compressor state (see its message)");
        if (t->rank != 0) return;
    }
    /* --mode ps-*: every server's shard first, so that a step the trainer's checkpoint names
     * always has its shards on disk */
    if (t->ps && chorus_ps_save(t->ps, t->o.ckpt_dir, t->st.global_step) != CHORUS_OK)
        die("%s", chorus_ps_last_error(t->ps));
    char why[1024];
    if (t->bal && balance_save(t->bal, t->o.ckpt_dir, t->st.global_step, why, sizeof(why)))
        die("saving the load balancer's shares: %s", why);
    if (nn_ckpt_save(t->o.ckpt_dir, t->m, &t->opt, &t->st)) die("%s", nn_last_error());
    say_checkpoint(t);
}

/* --pipeline-stages: o as the run's optimizer over n parameters (the stage's, or the whole
 * model's while a checkpoint is written). */
static void pipeline_optim_init(trainer *t, nn_optim *o, size_t n)
{
    chorus_result r = !strcmp(t->o.optim, "adamw")
                          ? nn_optim_init_adamw(o, n, 0.9f, 0.999f, 1e-8f, t->o.wd)
                          : nn_optim_init_sgd(o, n, t->o.momentum, t->o.nesterov, t->o.wd);
    if (r) die("out of memory for the optimizer");
}

/* Step (--pipeline-stages): this rank becomes one stage of a pipeline of consecutive ranks;
 * the sampler is redone over the data-parallel replicas (each pipeline takes a replica's
 * share of a step) and the optimizer over the stage's parameters. */
static void start_pipeline(trainer *t)
{
    const opts *o = &t->o;
    int P = o->pipe_stages, M = o->microbatches, size = chorus_size(t->comm);
    chorus_pipe_kind kind;
    chorus_pipe_kind_parse(o->pipe_schedule, &kind);
    int D = size % P ? 0 : size / P;
    if (!D)
        die("--pipeline-stages %d does not divide the %d ranks: the world must be "
            "(data-parallel replicas) x (stages)",
            P, size);
    nn_sampler_free(&t->sampler);
    if (nn_sampler_init(&t->sampler, (size_t)t->train.n, (size_t)o->batch, t->rank / P, D, o->seed))
        die("cannot set up the sampler (batch %d, %d replicas)", o->batch, D);
    t->max_local = nn_sampler_max_local(&t->sampler);
    int max_micro = (int)((t->max_local + (size_t)M - 1) / (size_t)M);
    if (nn_pipe_create(t->m, t->comm, P, M, kind, max_micro < 1 ? 1 : max_micro, &t->pipe))
        die("%s", nn_last_error());
    pipeline_optim_init(t, &t->pipe_opt, nn_pipe_model(t->pipe)->nparams);
    nn_pipe_stats pst;
    nn_pipe_get_stats(t->pipe, &pst);
    t->first_layer = pst.layer_lo;
    t->world = D; /* the learning rate scales with the data-parallel replicas (--scale-lr) */
    t->pipe_x =
        malloc((t->max_local ? t->max_local : 1) * nn_model_in_features(t->m) * sizeof(float));
    t->pipe_y = malloc((t->max_local ? t->max_local : 1) * sizeof(int32_t));
    if (!t->pipe_x || !t->pipe_y) die("out of memory");
    if (t->rank == 0)
        printf("pipeline: %d stages x %d replica%s (%d ranks), %d micro-batch%s of up to %d "
               "samples per step, schedule %s; layers cut by compute\n",
               P, D, D > 1 ? "s" : "", size, M, M == 1 ? "" : "es", max_micro, o->pipe_schedule);
}

/* --pipeline-stages: this stage's forwards and backwards of the step's micro-batches (loss
 * and hits in stats on the last stage). */
static void pipeline_forward_backward(trainer *t, const uint32_t *idx, size_t nloc, float scale,
                                      double *stats)
{
    nn_dataset_batch(&t->train, idx, (int)nloc, t->pipe_x, t->pipe_y);
    if (nn_pipe_step(t->pipe, t->pipe_x, t->pipe_y, (int)nloc, scale, t->st.global_step, stats))
        die("%s", nn_last_error());
}

/* --pipeline-stages: sums the stage's gradients over its replicas, timed as the blocking
 * --grad-sync modes time theirs (for the communication line). */
static chorus_result pipeline_sync_grads(trainer *t)
{
    double t0 = now_s();
    chorus_result r = nn_pipe_sync_grads(t->pipe);
    double dt = now_s() - t0;
    t->dist.comm_s += dt;
    t->dist.wait_s += dt;
    t->dist.grad_wait_s += dt;
    return r;
}

/* --pipeline-stages: whether this rank counts the step's samples (the last stage does). */
static int pipeline_counts(trainer *t)
{
    nn_pipe_stats st;
    nn_pipe_get_stats(t->pipe, &st);
    return st.stage == st.stages - 1;
}

/* --pipeline-stages: every stage's parameters into t->m (for evaluation and --dump-params). */
static void pipeline_gather(trainer *t)
{
    if (nn_pipe_gather(t->pipe, nn_pipe_model(t->pipe)->params, t->m->params))
        die("%s", nn_last_error());
}

/* --pipeline-stages: test accuracy through the pipeline (no rank holds the whole model):
 * each pipeline takes a slice of the test set, as evaluate() gives each rank one. */
static double pipeline_evaluate(trainer *t, double *loss_out)
{
    nn_pipe_stats st;
    nn_pipe_get_stats(t->pipe, &st);
    size_t n = (size_t)t->test.n, per = (n + (size_t)st.replicas - 1) / (size_t)st.replicas;
    size_t lo = per * (size_t)st.replica, hi = lo + per < n ? lo + per : n;
    size_t chunk = t->max_local ? t->max_local : 1;
    double acc[3] = {0, 0, 0};
    uint32_t *idx = malloc(chunk * sizeof(uint32_t));
    if (!idx) die("out of memory");
    for (size_t s = lo; s < hi; s += chunk) {
        int B = (int)(hi - s < chunk ? hi - s : chunk);
        for (int i = 0; i < B; i++) idx[i] = (uint32_t)(s + (size_t)i);
        nn_dataset_batch(&t->test, idx, B, t->pipe_x, t->pipe_y);
        if (nn_pipe_evaluate(t->pipe, t->pipe_x, t->pipe_y, B, acc)) die("%s", nn_last_error());
        if (st.stage == st.stages - 1) acc[2] += B;
    }
    free(idx);
    if (nn_dist_sum(&t->dist, acc, 3)) die("%s", nn_last_error());
    *loss_out = acc[0] / acc[2];
    return acc[1] / acc[2];
}

/* --pipeline-stages, after the parameters (and a resumed optimizer state) reached every rank:
 * this stage's slices of them; the whole model's optimizer state is then dropped. */
static void pipeline_take_state(trainer *t)
{
    nn_model *sm = nn_pipe_model(t->pipe);
    nn_pipe_slice(t->pipe, t->m->params, sm->params);
    if (t->opt.m) nn_pipe_slice(t->pipe, t->opt.m, t->pipe_opt.m);
    if (t->opt.v) nn_pipe_slice(t->pipe, t->opt.v, t->pipe_opt.v);
    t->pipe_opt.t = t->opt.t;
    nn_optim_free(&t->opt);
}

/* --pipeline-stages, before a checkpoint (collective over the pipeline): every stage's
 * parameters and optimizer state into the whole model's t->m and t->opt, which rank 0 saves
 * as an unsplit run would (so either kind of run resumes from it). */
static void pipeline_gather_state(trainer *t)
{
    nn_optim_free(&t->opt);
    pipeline_optim_init(t, &t->opt, t->m->nparams);
    pipeline_gather(t);
    if ((t->pipe_opt.m && nn_pipe_gather(t->pipe, t->pipe_opt.m, t->opt.m)) ||
        (t->pipe_opt.v && nn_pipe_gather(t->pipe, t->pipe_opt.v, t->opt.v)))
        die("%s", nn_last_error());
    t->opt.t = t->pipe_opt.t;
}

/* --pipeline-stages: rank 0's memory and bubble lines for every rank. */
static void pipeline_report(trainer *t)
{
    if (train_pipe_report(t->pipe, t->comm, &t->pipe_opt, t->rank == 0, t->o.pipe_schedule,
                          t->o.microbatches, t->metrics))
        die("gathering the pipeline report: %s", chorus_last_error(t->comm));
}

/* --check-divergence: the replicas compared at this step (once), before the step's metrics
 * and any checkpoint of it; a divergence stops every rank. */
static void verify_replicas(trainer *t)
{
    char why[640];
    uint64_t step = t->st.global_step;
    if (!t->o.check_div || t->ps || t->div_checked == step + 1) return;
    t->div_checked = step + 1;
    nn_model *m = t->pipe ? nn_pipe_model(t->pipe) : t->m;
    if (t->o.par.zero) par_sync(&t->o.par, t->m); /* the parameters whole: after the all-gather */
    chorus_comm *group = t->pipe ? nn_pipe_replicas(t->pipe) : t->dist.comm;
    double t0 = now_s();
    if (diverge_check(t->comm, group, m, t->first_layer, step, why, sizeof(why)))
        die("%s; stopping without a checkpoint of this state", why);
    t->div_s += now_s() - t0;
    t->div_n++;
}

/* After the update of a step: the test-only perturbation (train_diverge.h), then the replicas
 * compared every --check-divergence steps and before every checkpoint. */
static void after_update(trainer *t)
{
    char why[640];
    uint64_t step = t->st.global_step, every = (uint64_t)t->o.check_div;
    long ck = t->o.ckpt_every;
    if (t->o.par.zero && t->o.perturb) par_sync(&t->o.par, t->m);
    if (diverge_perturb(t->o.perturb, t->pipe ? nn_pipe_model(t->pipe) : t->m, t->first_layer,
                        g_rank, step, why, sizeof(why)))
        die("%s", why);
    if (every && (step % every == 0 || (ck && step % (uint64_t)ck == 0))) verify_replicas(t);
}

/* One optimizer step: forward and backward over this rank's share of global step `step`
 * (in --accum micro-batches), gradient sum over the ranks, update; then rank 0's metrics
 * line, progress line and step checkpoint. */
static void train_step(trainer *t, uint64_t epoch, size_t step, epoch_stats *ep)
{
    const opts *o = &t->o;
    nn_dist *d = &t->dist;
    nn_model *m = t->m;
    nn_train_state *st = &t->st;
    int C = t->train.nclasses;
    double t0 = now_s(), w0 = d->wait_s, gw0 = d->grad_wait_s, gc0 = d->comm_s, gh0 = d->hidden_s;
    uint64_t ib0 = d->in_backward;
    float lr = lr_at(o, st->global_step, t->steps_per_epoch, t->world, t->spent);
    const uint32_t *idx;
    size_t gcount;
    size_t nloc = nn_sampler_batch(&t->sampler, step, &idx, &gcount);
    float scale = 1.0f / (float)gcount;
    double stats[3] = {0, 0, 0};
    nn_zero_grad(m);
    size_t off = 0;
    if (t->pipe) pipeline_forward_backward(t, idx, nloc, scale, stats);
    for (int k = 0; !t->pipe && k < o->accum; k++) {
        size_t nb = nloc / (size_t)o->accum + ((size_t)k < nloc % (size_t)o->accum);
        m->step = st->global_step * (uint64_t)o->accum + (uint64_t)k;
        nn_dataset_batch(&t->train, idx + off, (int)nb, t->x, t->y);
        const float *z = nn_forward(m, t->x, (int)nb);
        int hits = 0;
        stats[0] += nn_xent(z, t->y, (int)nb, C, scale, t->dl, &hits);
        stats[1] += hits;
        /* The last pass completes the gradients: in engine mode each layer's goes to
         * the other ranks the moment it is done; earlier passes only accumulate. */
        if (k + 1 == o->accum) nn_dist_begin_backward(d, m);
        if (k + 1 == o->accum) par_begin_backward(&t->o.par, m);
        nn_backward(m, t->dl, (int)nb);
        off += nb;
    }
    stats[2] = (double)nloc;
    double t_fb = now_s() - t0; /* forward and backward of this rank's share */
    if (t->pipe && !pipeline_counts(t)) stats[2] = 0;
    if (t->ps) { /* loss and accuracy stay this worker's own: the workers do not meet */
        if (!isfinite(stats[0]) || !isfinite(lr))
            die("step %llu: the loss is %s: training diverged (learning rate %g). Lower --lr",
                (unsigned long long)st->global_step + 1, isnan(stats[0]) ? "NaN" : "infinite",
                (double)lr);
        ps_step(t, lr);
        gcount = nloc;
    } else {
        if (t->pipe ? pipeline_sync_grads(t) : !o->par.zero && nn_dist_sync_grads(d, m))
            die("%s", nn_last_error());
        if (nn_dist_sum(d, stats, 3)) die("%s", nn_last_error());
    }
    if (!isfinite(stats[0]) || !isfinite(lr)) { /* every rank has the same sum: all stop */
        if (t->rank) { /* rank 0 says why and exits first: wait for that (the barrier fails) */
            chorus_barrier(t->comm);
            exit(1);
        }
        die("step %llu: the loss is %s: training diverged (learning rate %g); stopping before "
            "it is written to metrics or checkpoints. Lower --lr",
            (unsigned long long)st->global_step + 1, isnan(stats[0]) ? "NaN" : "infinite",
            (double)lr);
    }
    if (t->pipe) { /* the stage's own parameters */
        nn_model *um = nn_pipe_model(t->pipe);
        nn_optim_step(&t->pipe_opt, um->params, um->grads, lr);
    } else if (!t->ps) {
        par_optim_step(&t->o.par, m, &t->opt, lr);
    }
    st->global_step++;
    if (!t->ps) after_update(t);
    st->epoch = step + 1 == t->steps_per_epoch ? epoch + 1 : epoch;
    st->step_in_epoch = step + 1 == t->steps_per_epoch ? 0 : step + 1;
    double t1 = now_s(), dt = t1 - t0;
    t->train_time += dt;
    t->step_wait += d->wait_s - w0;
    t->steps_done++;
    t->samples_done += (double)gcount;
    if (t->bal) {
        balance_record(t->bal, t_fb, d->wait_s - w0, nloc);
        if (balance_after_step(t->bal, st->global_step)) die("%s", nn_last_error());
        t->train_time += now_s() - t1; /* the gather counts as training time */
    }
    ep->loss += stats[0];
    ep->hits += stats[1];
    ep->n += stats[2];
    double sps = t->samples_done / t->train_time;
    chorus_ps_stats ps_st = {0};
    if (t->ps) chorus_ps_get_stats(t->ps, &ps_st); /* this worker's totals */
    if (t->rank == 0) {
        if (t->metrics)
            fprintf(t->metrics,
                    "{\"step\":%llu,\"sync\":\"%s\",\"epoch\":%llu,\"loss\":%.6f,\"acc\":%."
                    "4f,\"lr\":%.6g,"
                    "\"samples_per_s\":%.1f,\"step_s\":%.6f,\"comm_wait_s\":%.6f,"
                    "\"grad_comm_s\":%.6f,\"grad_hidden_s\":%.6f,\"grad_wait_s\":%.6f,"
                    "\"grad_tensors_in_backward\":%llu,\"mode\":\"%s\",\"ps_bytes_pushed\":%llu,"
                    "\"ps_bytes_pulled\":%llu",
                    (unsigned long long)st->global_step, o->sync, (unsigned long long)epoch + 1,
                    stats[0] / stats[2], stats[1] / stats[2], (double)lr, (double)gcount / dt, dt,
                    d->wait_s - w0, d->comm_s - gc0, d->hidden_s - gh0, d->grad_wait_s - gw0,
                    (unsigned long long)(d->in_backward - ib0), o->mode,
                    (unsigned long long)ps_st.bytes_pushed, (unsigned long long)ps_st.bytes_pulled);
        if (t->metrics) {
            if (t->bal) balance_write_metrics(t->bal, t->metrics);
            fprintf(t->metrics, "}\n");
            metrics_written(&t->metrics, o->metrics, 0);
        }
        int last = step + 1 == t->steps_per_epoch || st->global_step >= t->total_steps;
        int due = t->tty ? (t1 - ep->last_print > 0.2 || last)
                         : (st->global_step % (uint64_t)o->log_every == 0);
        if (due) {
            char eta[32];
            uint64_t left = t->total_steps - st->global_step;
            fmt_eta(eta, sizeof(eta), (double)left * t->train_time / (double)t->steps_done);
            char whose[48];
            printf("%sepoch %llu/%d step %zu/%zu loss %.4f acc %.4f %.0f samples/s%s ETA "
                   "%s%s%s",
                   t->tty ? "\r" : "", (unsigned long long)epoch + 1, o->epochs, step + 1,
                   t->steps_per_epoch, ep->loss / ep->n, ep->hits / ep->n, sps,
                   sps_whose(t, whose, sizeof(whose)), eta, t->bal ? balance_note(t->bal) : "",
                   t->tty ? "\033[K" : "\n");
            fflush(stdout);
            ep->last_print = t1;
        }
    }
    /* the gradient as handed to the exchange: float32, or --ps-grad-dtype's pushes */
    double dense = (double)m->nparams * sizeof(float);
    double sent = t->ps ? (double)(ps_st.bytes_pushed - t->tb_pushed) : dense;
    t->tb_pushed = ps_st.bytes_pushed;
    train_tb_step ts = {.step = (int64_t)st->global_step,
                        .loss = stats[0] / stats[2],
                        .acc = stats[1] / stats[2],
                        .lr = lr,
                        .samples_s = (double)gcount / dt,
                        .rank_samples_s = (double)nloc / dt,
                        .comm_s = d->comm_s - gc0,
                        .bytes_sent = sent,
                        .bytes_dense = dense};
    char tb_why[600];
    if (train_tb_log_step(&t->tb, &ts, tb_why, sizeof(tb_why))) die("%s", tb_why);
    if ((t->rank == 0 || t->pipe || t->comp_state) && o->ckpt_every &&
        st->global_step % (uint64_t)o->ckpt_every == 0)
        save_checkpoint(t);
}

/* Step: the test-set evaluation after an epoch and rank 0's epoch line. */
static void report_epoch(trainer *t, uint64_t epoch, const epoch_stats *ep)
{
    const opts *o = &t->o;
    nn_dist *d = &t->dist;
    double test_loss = 0;
    int eval = !o->no_eval && o->time_limit <= 0;   /* --time-limit: once, at the end */
    if (workers_apart(t) && t->rank != 0) eval = 0; /* worker 0 reports */
    if (t->ps && eval) pull_params(t);              /* async workers may hold older ones */
    if (eval)
        t->last_test_acc =
            t->pipe ? pipeline_evaluate(t, &test_loss)
                    : evaluate(t->m, d, &t->test, t->x, t->y, &test_loss, workers_apart(t));
    char tb_why[600];
    if (eval && train_tb_test(&t->tb, (int64_t)t->st.global_step, t->last_test_acc, test_loss,
                              tb_why, sizeof(tb_why)))
        die("%s", tb_why);
    if (t->rank == 0 && eval) {
        char hid[64] = "";
        if (d->eng && d->comm_s > 0)
            snprintf(hid, sizeof(hid), ", %.0f%% of gradient comm hidden", 100.0 * hidden_share(d));
        char whose[48];
        printf("epoch %llu/%d: train loss %.4f acc %.4f | test loss %.4f acc %.4f | %.0f "
               "samples/s%s, comm wait %.1f%%%s\n",
               (unsigned long long)epoch + 1, o->epochs, ep->n ? ep->loss / ep->n : 0.0,
               ep->n ? ep->hits / ep->n : 0.0, test_loss, t->last_test_acc,
               t->samples_done / t->train_time, sps_whose(t, whose, sizeof(whose)),
               100.0 * d->wait_s / (now_s() - t->t_start), hid);
        fflush(stdout);
    }
}

/* --time-limit: whether training stops now. Each worker of a parameter server decides alone
 * (it leaves the servers after, so nobody waits for it); allreduce ranks agree, since they
 * must all stop at the same step. */
static int out_of_time(trainer *t)
{
    if (t->o.time_limit <= 0) return 0;
    double v[2] = {now_s() - t->t_start, 0}; /* time spent; ranks that are over it */
    v[1] = v[0] >= t->o.time_limit;
    if (!t->ps) {
        if (nn_dist_sum(&t->dist, v, 2)) die("%s", nn_last_error());
        v[0] /= t->world; /* the ranks' mean: one learning rate for all */
    }
    t->spent = v[0] / t->o.time_limit;
    return v[1] > 0;
}

/* Step (after training): a parameter-server worker takes the final parameters and leaves, so
 * that the others' rounds and staleness bound no longer count it; with --time-limit, the one
 * evaluation. */
static void end_training(trainer *t)
{
    if (t->ps) {
        pull_params(t);
        if (chorus_ps_leave(t->ps) != CHORUS_OK) die("%s", chorus_ps_last_error(t->ps));
        /* the summary's samples/s counts every worker, as allreduce's does; apart, a worker
         * that was lost leaves the survivors' own counts */
        double mine = t->samples_done;
        if (nn_dist_sum(&t->dist, &t->samples_done, 1)) {
            if (!workers_apart(t)) die("%s", nn_last_error());
            t->samples_done = mine;
            if (t->rank == 0)
                printf("note: %s; samples/s below counts worker 0 alone\n", nn_last_error());
        } else {
            t->sps_workers = t->world;
        }
    }
    if (t->o.time_limit <= 0 || t->o.no_eval || (workers_apart(t) && t->rank != 0)) return;
    double test_loss = 0;
    t->last_test_acc =
        t->pipe ? pipeline_evaluate(t, &test_loss)
                : evaluate(t->m, &t->dist, &t->test, t->x, t->y, &test_loss, workers_apart(t));
    if (t->rank == 0)
        printf("after %.1f s: test loss %.4f acc %.4f\n", now_s() - t->t_start, test_loss,
               t->last_test_acc);
    char tb_why[600];
    if (train_tb_test(&t->tb, (int64_t)t->st.global_step, t->last_test_acc, test_loss, tb_why,
                      sizeof(tb_why)))
        die("%s", tb_why);
}

/* --eval-every N: a test-set evaluation every N steps, reported with the training time so
 * far, the evaluations left out (time to accuracy). */
static void eval_periodic(trainer *t)
{
    if (!t->o.eval_every || t->ps || t->st.global_step % (uint64_t)t->o.eval_every) return;
    double t0 = now_s(), loss = 0;
    double acc = evaluate(t->m, &t->dist, &t->test, t->x, t->y, &loss, 0);
    double trained = t0 - t->t_start - t->eval_s;
    t->eval_s += now_s() - t0;
    if (t->rank) return;
    printf("step %llu after %.2f s of training: test loss %.4f acc %.4f\n",
           (unsigned long long)t->st.global_step, trained, loss, acc);
    if (t->metrics)
        fprintf(t->metrics,
                "{\"step\":%llu,\"train_s\":%.3f,\"test_loss\":%.6f,\"test_acc\":%.4f,"
                "\"compress\":\"%s\"}\n",
                (unsigned long long)t->st.global_step, trained, loss, acc, t->o.compress);
    metrics_written(&t->metrics, t->o.metrics, 0);
}

/* Step: one epoch from where the state stands (the sampler position after a resume), then
 * evaluation and the end-of-epoch checkpoint. Returns 1 when the step budget ran out. */
static int train_epoch(trainer *t, uint64_t epoch)
{
    const opts *o = &t->o;
    nn_sampler_set_epoch(&t->sampler, epoch);
    epoch_stats ep = {0, 0, 0, 0};
    int stop = 0;
    for (size_t step = (epoch == t->st.epoch ? t->st.step_in_epoch : 0); step < t->steps_per_epoch;
         step++) {
        if (t->st.global_step >= t->total_steps || out_of_time(t)) {
            stop = 1;
            break;
        }
        train_step(t, epoch, step, &ep);
        eval_periodic(t);
    }
    if (stop && ep.n == 0) return 1;
    if (t->rank == 0 && t->tty) printf("\n");
    report_epoch(t, epoch, &ep);
    int ckpt = o->ckpt_dir && !(o->ckpt_every && t->st.global_step % (uint64_t)o->ckpt_every == 0);
    if (ckpt) verify_replicas(t);
    if ((t->rank == 0 || t->pipe || t->comp_state) && ckpt) save_checkpoint(t);
    return stop;
}

/* Step: rank 0's summary (gradient synchronisation, final accuracy and speed), and each
 * rank's final parameters for --dump-params. */
static void report(trainer *t)
{
    const opts *o = &t->o;
    nn_dist *d = &t->dist;
    if (t->rank == 0 && t->ps && t->steps_done > 0) {
        chorus_ps_stats st;
        chorus_ps_get_stats(t->ps, &st);
        printf("communication (--mode %s, %d server%s, %d workers): this worker pushed %.1f MiB "
               "and pulled %.1f MiB; exchanging with the servers took %.2f ms per step\n",
               o->mode, chorus_ps_num_servers(t->ps), chorus_ps_num_servers(t->ps) > 1 ? "s" : "",
               t->world, (double)st.bytes_pushed / 1048576.0, (double)st.bytes_pulled / 1048576.0,
               1e3 * d->comm_s / (double)t->steps_done);
    } else if (t->rank == 0 && t->world > 1 && t->steps_done > 0 && o->par.zero) {
        /* ZeRO sums the gradients itself (nn_zero): its own clock, not nn_dist's */
        const nn_zero *z = &o->par.zs;
        double k = z->steps ? 1e3 / (double)z->steps : 0.0;
        printf("communication (--zero %d, %d ranks): %s took %.2f ms per step\n", o->par.zero,
               t->world,
               o->par.zero == 2 ? "reduce-scattering the gradients, layer by layer in the "
                                  "backward pass,"
                                : "allreducing the gradients",
               k * (z->comm_s - z->gather_s));
    } else if (t->rank == 0 && t->world > 1 && t->steps_done > 0) {
        double steps = (double)t->steps_done, hid = d->hidden_s;
        char overlap[160];
        if (hid > 0)
            snprintf(overlap, sizeof(overlap),
                     "%.2f ms (%.0f%%) of it ran behind the backward pass", 1e3 * hid / steps,
                     100.0 * hidden_share(d));
        else
            snprintf(overlap, sizeof(overlap), "none of it ran behind the backward pass%s",
                     strcmp(o->sync, "engine") ? " (--grad-sync engine overlaps it)" : "");
        printf("communication (--grad-sync %s, %d ranks): averaging the gradients took %.2f ms "
               "per step, of which training waited %.2f ms; %s. Waiting on other ranks in all "
               "collectives: %.1f%% of training time\n",
               o->sync, t->world, 1e3 * d->comm_s / steps, 1e3 * d->grad_wait_s / steps, overlap,
               t->train_time > 0 ? 100.0 * t->step_wait / t->train_time : 0.0);
    }
    if (t->bal) balance_report(t->bal);
    char wbuf[48];
    const char *whose = sps_whose(t, wbuf, sizeof(wbuf));
    if (t->rank == 0) {
        if (t->last_test_acc >= 0)
            printf("done: %llu steps, test accuracy %.4f, %.0f samples/s%s over %.1f s of "
                   "training\n",
                   (unsigned long long)t->st.global_step, t->last_test_acc,
                   t->train_time > 0 ? t->samples_done / t->train_time : 0.0, whose, t->train_time);
        else if (t->steps_done > 0)
            printf("done: %llu steps, %.0f samples/s%s over %.1f s of training (not "
                   "evaluated)\n",
                   (unsigned long long)t->st.global_step, t->samples_done / t->train_time, whose,
                   t->train_time);
        else
            printf("done: %llu steps (nothing left to train)\n",
                   (unsigned long long)t->st.global_step);
        if (t->div_n && t->train_time > 0)
            printf("divergence checks: %llu, %.3f ms each, %.3f%% of the training time\n",
                   (unsigned long long)t->div_n, 1e3 * t->div_s / (double)t->div_n,
                   100.0 * t->div_s / t->train_time);
    }
    if (t->pipe) pipeline_report(t);
    if (o->dump) {
        if (t->pipe) pipeline_gather(t);
        char path[4096];
        snprintf(path, sizeof(path), "%s.%d", o->dump, t->rank);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(t->m->params, sizeof(float), t->m->nparams, f) != t->m->nparams ||
            fclose(f))
            die("cannot write %s: %s", path, strerror(errno));
    }
}

/* Step: release everything and leave the job. */
static void finish(trainer *t)
{
    metrics_written(&t->metrics, t->o.metrics, 1);
    train_tb_close(&t->tb);
    nn_dist_finalize(&t->dist);
    /* A server has served its last worker; only a worker's failure to leave is an error. */
    int worker = t->ps && !chorus_ps_is_server(t->ps);
    if (t->ps && chorus_ps_finalize(t->ps) != CHORUS_OK && worker)
        die("leaving the parameter server: %s", chorus_ps_last_error(NULL));
    free(t->x);
    free(t->y);
    free(t->dl);
    nn_optim_free(&t->opt);
    balance_destroy(t->bal);
    nn_optim_free(&t->pipe_opt);
    nn_sampler_free(&t->sampler);
    nn_model_destroy(t->m);
    nn_pipe_destroy(t->pipe);
    free(t->pipe_x);
    free(t->pipe_y);
    nn_dataset_free(&t->train);
    nn_dataset_free(&t->test);
    chorus_finalize(t->comm);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--version"))
        return printf("chorus-train %s\n", chorus_version()) < 0;
    static trainer t;
    parse(argc, argv, &t.o);
    start_job(&t);
    load_data(&t);
    build(&t);
    if (t.o.pipe_stages) start_pipeline(&t);
    if (t.ps) register_params(&t);
    if (t.ps && chorus_ps_is_server(t.ps)) {
        serve_params(&t);
        finish(&t);
        return 0;
    }
    if (t.o.resume) restore_checkpoint(&t);
    if (t.o.resume && t.bal && balance_resume(t.bal, t.o.ckpt_dir, t.st.global_step))
        die("%s", nn_last_error());
    if (t.o.ckpt_dir) claim_checkpoint_dir(&t);
    prepare_run(&t);
    if (t.pipe) pipeline_take_state(&t);
    for (uint64_t epoch = t.st.epoch; epoch < (uint64_t)t.o.epochs; epoch++)
        if (train_epoch(&t, epoch)) break;
    end_training(&t);
    par_sync(&t.o.par, t.m);
    report(&t);
    if (!t.ps && !t.pipe) par_report(&t.o.par, t.metrics); /* a pipeline reports its own */
    par_free(&t.o.par);
    finish(&t);
    return 0;
}
