/*
 * options.c - chorus-train's command line: --help, the option table, and the checks of what
 * combines with what (a mode's own checks are its check_opts, trainer.h).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "chorus/engine.h"
#include "diverge.h"
#include "trainer.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chorus-train [options]            (one process)\n"
            "       chorus-run -np N chorus-train [options]\n"
            "Trains on Fashion-MNIST (or, --model gpt, on text) with data-parallel gradient\n"
            "averaging.\n"
            "  --model mlp|cnn|gpt    784-512-256-10 MLP, or 2x(conv3x3,relu,pool)+2 linear, or\n"
            "                         a GPT on the fortune databases (below) (mlp)\n"
            "  --epochs N             passes over the training set (mlp 10, cnn 8, gpt 1)\n"
            "  --batch G              GLOBAL batch per optimizer step, split across ranks "
            "(256;\n"
            "                         gpt: windows of --context tokens, 32)\n"
            "  --accum K              split each rank's share into K micro-batches whose\n"
            "                         gradients accumulate (same result, less memory) (1)\n"
            "  --optim sgd|adamw      (sgd: with momentum, Nesterov; gpt: adamw)\n"
            "  --lr X                 peak learning rate (sgd: mlp 0.1, cnn 0.05, large 0.01;\n"
            "                         adamw 0.001, gpt 0.002)\n"
            "  --scale-lr             multiply --lr by the number of ranks (linear scaling, for\n"
            "                         when --batch grows with the ranks)\n"
            "  --lr-schedule S        cosine|step|const after warm-up (cosine); step: x0.1 at\n"
            "                         50%% and 75%% of training\n"
            "  --warmup-epochs E      linear warm-up from 0 over E epochs (0; gpt 0.05)\n"
            "  --momentum M --weight-decay W --no-nesterov --dropout P\n"
            "                         (momentum: 0.9; ps-async and ps-ssp: 0.8)\n"
            "  --seed S               initialisation, shuffling and dropout (1)\n"
            "  --threads T            BLAS threads per rank (1)\n"
            "  --data DIR             Fashion-MNIST directory (" NN_FASHION_DEFAULT_DIR ");\n"
            "                         gpt: the fortune databases' (" NN_FORTUNES_DEFAULT_DIR ")\n"
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
            "  --zero 1|2|3           shard the optimizer state (1), the summed gradients (2)\n"
            "                         and the parameters (3: --model gpt; each block gathered\n"
            "                         just before forward and backward read it) over the\n"
            "                         data-parallel ranks (0)\n"
            "  --recompute[=K]        keep only every K-th layer's activations and recompute\n"
            "                         the rest in backward (K: about sqrt(layers); gpt: every\n"
            "                         block's inner activations, no K)\n"
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
            "                         (data-parallel replicas) x P ranks; gpt: its blocks\n"
            "                         evenly, the embeddings on the first stage, the final\n"
            "                         LayerNorm and the tied output layer on the last\n"
            "  --microbatches M       pipeline: micro-batches per step (4)\n"
            "  --schedule S           pipeline: gpipe (all forwards, then all backwards) or\n"
            "                         1f1b (bounded activation memory) (1f1b)\n"
            "  --model gpt            token and position embeddings, pre-norm transformer\n"
            "                         blocks, tied output layer; byte tokens of the fortune\n"
            "                         databases in --data (" NN_FORTUNES_DEFAULT_DIR "),\n"
            "                         every 20th fortune held out for validation\n"
            "  --preset P             gpt: tiny (4 layers, d-model 128, 4 heads, context 64,\n"
            "                         vocab 256) or gpt2-124m (12, 768, 12, 1024, 50257) (tiny)\n"
            "  --layers N --d-model C --heads H --context T --vocab V\n"
            "                         gpt: the shape, each over the preset's\n"
            "  --clip-grad X          cut the gradient's global norm to X (0: off) (gpt 1);\n"
            "                         ps-sync: the servers cut the summed gradient,\n"
            "                         ps-async|ps-ssp: each worker its own\n"
            "  --sample N             gpt: rank 0 prints N bytes of generated text at the end\n"
            "                         (400)\n"
            "  --version              print the version and exit\n");
}

/* The long options, each with the value getopt_long returns for it. */
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
    O_PERTURB,
    O_PRESET,
    O_LAYERS,
    O_DMODEL,
    O_HEADS,
    O_CONTEXT,
    O_VOCAB,
    O_CLIP,
    O_SAMPLE
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
                                   {"preset", 1, 0, O_PRESET},
                                   {"layers", 1, 0, O_LAYERS},
                                   {"d-model", 1, 0, O_DMODEL},
                                   {"heads", 1, 0, O_HEADS},
                                   {"context", 1, 0, O_CONTEXT},
                                   {"vocab", 1, 0, O_VOCAB},
                                   {"clip-grad", 1, 0, O_CLIP},
                                   {"sample", 1, 0, O_SAMPLE},
                                   {0, 0, 0, 0}};

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

/* The defaults of the options that have one (some are resolved after parsing, by model and
 * mode). */
static void set_defaults(opts *o)
{
    memset(o, 0, sizeof(*o));
    o->model = "mlp";
    o->epochs = -1;
    o->batch = 0;             /* 256; --model gpt 32 */
    o->warmup_epochs = -1.0f; /* 0; --model gpt 0.05 */
    o->clip = -1.0f;          /* off; --model gpt 1 */
    o->sample = -1;           /* --model gpt 400 */
    o->lr = -1.0f;
    o->seed = 1;
    o->threads = 1;
    o->accum = 1;
    o->schedule = "cosine";
    o->optim = NULL;  /* sgd; adamw for --model gpt */
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
}

/* Option c with its argument optarg into o. */
static void take(opts *o, int c)
{
    char *end;
#define NUM(dst, conv, lo_ok)                                                                      \
    do {                                                                                           \
        errno = 0;                                                                                 \
        dst = conv;                                                                                \
        if (errno || *end || end == optarg || !(lo_ok))                                            \
            die("bad value '%s' for --%s (see --help)", optarg, opt_name(lo, c));                  \
    } while (0)
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
    case O_DROP: NUM(o->dropout, strtof(optarg, &end), o->dropout >= 0 && o->dropout < 1); break;
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
    case O_PSTAGES: NUM(o->pipe_stages, (int)strtol(optarg, &end, 10), o->pipe_stages > 0); break;
    case O_MICRO: NUM(o->microbatches, (int)strtol(optarg, &end, 10), o->microbatches > 0); break;
    case O_PSCHED: o->pipe_schedule = optarg; break;
    case O_HELP:
    case 'h': usage(stdout); exit(0);
    case O_TP: NUM(o->par.tp, (int)strtol(optarg, &end, 10), o->par.tp > 0); break;
    case O_ZERO:
        NUM(o->par.zero, (int)strtol(optarg, &end, 10), o->par.zero >= 0 && o->par.zero <= 3);
        break;
    case O_RECOMP:
        o->par.recompute = -1;
        if (optarg) NUM(o->par.recompute, (int)strtol(optarg, &end, 10), o->par.recompute > 0);
        break;
    case O_MAXMEM: NUM(o->par.max_mb, strtol(optarg, &end, 10), o->par.max_mb > 0); break;
    case O_PRESET: o->preset = optarg; break;
    case O_LAYERS: NUM(o->gpt.layers, (int)strtol(optarg, &end, 10), o->gpt.layers > 0); break;
    case O_DMODEL: NUM(o->gpt.d_model, (int)strtol(optarg, &end, 10), o->gpt.d_model > 0); break;
    case O_HEADS: NUM(o->gpt.heads, (int)strtol(optarg, &end, 10), o->gpt.heads > 0); break;
    case O_CONTEXT: NUM(o->gpt.context, (int)strtol(optarg, &end, 10), o->gpt.context > 0); break;
    case O_VOCAB: NUM(o->gpt.vocab, (int)strtol(optarg, &end, 10), o->gpt.vocab > 0); break;
    case O_CLIP: NUM(o->clip, strtof(optarg, &end), o->clip >= 0); break;
    case O_SAMPLE: NUM(o->sample, (int)strtol(optarg, &end, 10), o->sample >= 0); break;
    default: usage(stderr); exit(2);
    }
#undef NUM
}

/* The names of the models: "mlp, cnn or large". */
static const char *model_names(void)
{
    static char names[256];
    size_t n = 0, len = 0;
    while (train_models[n].name) n++;
    for (size_t i = 0; i < n && len < sizeof(names); i++)
        len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s",
                                i == 0       ? ""
                                : i + 1 == n ? " or "
                                             : ", ",
                                train_models[i].name);
    return names;
}

/* The values of the options that name a choice, and what combines with what. */
static void check_choices(opts *o)
{
    if (!o->compress[0])
        die("--compress must be none, fp16, bf16, topk:R, randomk:R or powersgd:N, not ''");
    if (o->dump && !o->dump[0]) die("--dump-params needs a file name, not ''");
    if (!train_model_named(o->model)) die("--model must be %s, not '%s'", model_names(), o->model);
    if (!o->optim) o->optim = strcmp(o->model, "gpt") ? "sgd" : "adamw";
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
    for (const train_mode *const *m = train_modes; *m; m++)
        if ((*m)->check_opts) (*m)->check_opts(o);
    if (o->ckpt_every && !o->ckpt_dir) die("--checkpoint-every needs --checkpoint-dir");
}

/* The defaults that depend on the model, the optimizer and the mode. */
static void resolve(opts *o)
{
    const train_model *model = train_model_named(o->model);
    int adam = !strcmp(o->optim, "adamw");
    if (o->epochs < 0) o->epochs = model->epochs;
    if (o->lr < 0) o->lr = adam ? model->adam_lr : model->lr;
    int gpt = !strcmp(o->model, "gpt");
    if (!o->batch) o->batch = gpt ? 32 : 256;
    if (o->warmup_epochs < 0) o->warmup_epochs = gpt ? 0.05f : 0.0f;
    if (o->clip < 0) o->clip = gpt ? 1.0f : 0.0f;
    if (o->sample < 0) o->sample = gpt ? 400 : 0;
    /* Asynchronous updates add momentum of their own: each gradient was taken at parameters
     * a few updates old, which acts like a heavier momentum term (docs/PARAMETER_SERVER.md
     * shows the measurements behind 0.8). */
    if (o->momentum < 0)
        o->momentum = !strcmp(o->mode, "ps-async") || !strcmp(o->mode, "ps-ssp") ? 0.8f : 0.9f;
    if (o->wd < 0) o->wd = adam ? 1e-2f : 5e-4f;
    if (o->dropout < 0) o->dropout = model->dropout;
    par_check_opts(&o->par, o->model, o->mode, o->sync, o->dropout, o->accum, o->ckpt_dir,
                   o->time_limit);
}

void parse(int argc, char **argv, opts *o)
{
    set_defaults(o);
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) take(o, c);
    if (optind < argc) die("unexpected argument '%s' (see --help)", argv[optind]);
    check_choices(o);
    resolve(o);
}
