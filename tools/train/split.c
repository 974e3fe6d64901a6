/*
 * split.c - chorus-train's model-splitting options (see split.h): the grid
 * of ranks for --tensor-parallel, --zero's sharded update, --recompute, --model large, and
 * the memory budget and per-rank memory report.
 *
 * Grid: world rank w = d*T + t. The T ranks of one data replica d (consecutive, so they share
 * a host when they can) hold the T shards of every split layer and see the same samples; the
 * D = world/T ranks of one tensor rank t hold the same shard and average its gradients. So
 * the data-parallel machinery (sampler, gradient sum, broadcast, loss sums) runs unchanged
 * over the replicas' communicator.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "split.h"

void par_check_opts(const train_par *p, const char *model, const char *mode, const char *sync,
                    float dropout, int accum, const char *ckpt_dir, double time_limit)
{
    int split = p->tp > 1 || p->zero;
    if (p->max_mb && strcmp(mode, "allreduce"))
        die("--max-memory-mb works with --mode allreduce, not --mode %s", mode);
    if (p->tp > 1 && time_limit > 0)
        die("--tensor-parallel does not support --time-limit (the shards of a replica must stop "
            "at the same step); use --max-steps");
    if (split && strcmp(mode, "allreduce"))
        die("--tensor-parallel and --zero work with --mode allreduce, not --mode %s", mode);
    if (p->zero == 3 && strcmp(model, "gpt"))
        die("--zero 3 shards the parameters too, gathered layer by layer just before each pass "
            "reads them: that is built for --model gpt; --model %s takes --zero 1|2",
            model);
    if (ckpt_dir && (p->tp > 1 || p->zero) && strcmp(model, "gpt"))
        die("--tensor-parallel and --zero do not write checkpoints yet (each rank holds only a "
            "shard of the state; they do with --model gpt); leave out --checkpoint-dir");
    if (p->tp > 1 && !strcmp(model, "cnn"))
        die("--tensor-parallel splits the linear layers of --model mlp or large, not cnn");
    if (p->tp > 1 && dropout > 0)
        die("--tensor-parallel does not support --dropout (the split activations would need "
            "matching masks)");
    if (p->zero && strcmp(sync, "fused"))
        die("--zero reduces the gradients itself: leave --grad-sync at fused, not %s", sync);
    if (p->zero >= 2 && accum > 1)
        die("--zero %d keeps no full gradient buffer to accumulate in: use --accum 1 (or --zero "
            "1)",
            p->zero);
}

chorus_comm *par_grid(train_par *p, chorus_comm *world, const char **metrics, const char **dump)
{
    p->world = world;
    if (p->tp <= 1) {
        p->tp = 1;
        return world;
    }
    int w = chorus_rank(world), n = chorus_size(world), T = p->tp;
    if (n % T)
        die("--tensor-parallel %d does not divide the %d ranks (world = data replicas x tensor "
            "ranks)",
            T, n);
    if (chorus_comm_split(world, w / T, w % T, &p->tp_comm) != CHORUS_OK ||
        chorus_comm_split(world, w % T, w / T, &p->dp_comm) != CHORUS_OK)
        die("--tensor-parallel: splitting the ranks into a grid: %s", chorus_last_error(world));
    p->tp_rank = w % T;
    if (*dump) {
        size_t len = strlen(*dump) + 16;
        char *d = malloc(len);
        if (!d) die("out of memory");
        snprintf(d, len, "%s.tp%d", *dump, p->tp_rank);
        *dump = d; /* lives as long as the process */
    }
    if (w == 0)
        printf("chorus-train: %d ranks = %d data-parallel replica%s x %d tensor-parallel "
               "shard%s\n",
               n, n / T, n / T == 1 ? "" : "s", T, T == 1 ? "" : "s");
    if (p->tp_rank > 0) {
        *metrics = NULL;
        if (!freopen("/dev/null", "w", stdout)) die("cannot quiet the output of rank %d", w);
    }
    return p->dp_comm;
}

int par_add_layers(train_par *p, nn_model *m, const char *model, int nclasses, int *bad)
{
    /* --model large: (B,784) -> 1024 x8 -> 10, deep enough for recomputation to pay;
     * mlp: (B,784) -> 512 -> 256 -> 10 */
    static const int large[] = {1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024}, mlp[] = {512, 256};
    int is_large = !strcmp(model, "large");
    if (!is_large && p->tp <= 1) return 0;
    const int *h = is_large ? large : mlp;
    int nh = is_large ? 8 : 2;
    for (int i = 0; i < nh; i++) {
        if (p->tp <= 1)
            *bad |= nn_add_linear(m, h[i]);
        else if (i % 2 == 0) /* pairs: column then row; their ReLU acts on the split features */
            *bad |= nn_add_linear_column(m, h[i], p->tp_comm);
        else
            *bad |= nn_add_linear_row(m, h[i], p->tp_comm);
        *bad |= nn_add_relu(m);
    }
    *bad |= nn_add_linear(m, nclasses);
    return 1;
}

void par_before_finalize(train_par *p, nn_model *m)
{
    m->mem = &p->mem;
    if (p->recompute) nn_model_set_recompute(m, p->recompute > 0 ? p->recompute : 0);
    m->no_grads = p->zero == 2;
}

size_t par_optim_count(const train_par *p, const nn_model *m)
{
    if (!p->zero) return m->nparams;
    chorus_comm *c = p->dp_comm ? p->dp_comm : p->world;
    return nn_zero_shard_count(m, chorus_rank(c), chorus_size(c));
}

#define MIB(b) ((double)(b) / 1048576.0)

/* Every rank's parts and peak, in world rank order: (world size) x 5 doubles, malloc'd. */
static double *gather_mem(train_par *p)
{
    int n = chorus_size(p->world);
    double mine[5];
    for (int i = 0; i < NN_MEM_PARTS; i++) mine[i] = (double)p->mem.bytes[i];
    mine[4] = (double)p->mem.peak;
    double *all = malloc((size_t)n * sizeof(mine));
    if (!all) die("out of memory");
    if (chorus_allgather(p->world, mine, all, 5, CHORUS_FLOAT64) != CHORUS_OK)
        die("exchanging the memory report: %s", chorus_last_error(p->world));
    return all;
}

/* "params 54.3 MiB, grads 54.3 MiB, optimizer 108.6 MiB, activations 6.0 MiB" */
static void parts_text(const double *v, char *out, size_t len)
{
    size_t k = 0;
    for (int i = 0; i < NN_MEM_PARTS && k < len; i++)
        k += (size_t)snprintf(out + k, len - k, "%s%s %.1f MiB", i ? ", " : "",
                              nn_mem_part_name((nn_mem_part)i), MIB(v[i]));
}

void par_setup(train_par *p, nn_model *m, const nn_optim *o)
{
    if (p->recompute && m->recompute_saved == 0 && chorus_rank(p->world) == 0)
        printf("chorus-train: --recompute changes nothing for this model: cut into segments of "
               "about %d of its %d layers, every activation buffer is a segment's output or in "
               "the last segment, which are kept anyway; no memory is saved\n",
               m->recompute, m->nlayers);
    nn_mem_add(&p->mem, NN_MEM_OPTIMIZER, nn_optim_state_count(o) * sizeof(float));
    if (p->zero) {
        chorus_comm *c = p->dp_comm ? p->dp_comm : p->world;
        /* ZeRO-3 keeps only its chunks: rank 0's first parameters before they are cut */
        if (p->zero == 3 && chorus_size(c) > 1 &&
            chorus_broadcast(c, m->params, m->nparams, CHORUS_FLOAT32, 0) != CHORUS_OK)
            die("--zero 3: the broadcast of the first parameters: %s", chorus_last_error(c));
        if (nn_zero_init(&p->zs, m, c, p->zero, &p->mem) || nn_zero_overlap(&p->zs, m))
            die("--zero: %s", nn_last_error());
    }
    if (p->max_mb <= 0) return;
    /* the buffers exist but their pages are untouched: a refused run never used them */
    double *all = gather_mem(p), budget = (double)p->max_mb * 1048576.0;
    int n = chorus_size(p->world), worst = 0;
    for (int r = 1; r < n; r++)
        if (all[5 * r + 4] > all[5 * worst + 4]) worst = r;
    if (all[5 * worst + 4] > budget) {
        char parts[256];
        parts_text(all + 5 * worst, parts, sizeof(parts));
        if (chorus_rank(p->world) == 0)
            die("the model does not fit --max-memory-mb %ld: rank %d would need %.1f MiB (%s). "
                "Split it: --zero 1|2 (shard the optimizer state and gradients over the "
                "data-parallel ranks), --tensor-parallel T (split the layers) or --recompute (keep "
                "fewer activations)",
                p->max_mb, worst, MIB(all[5 * worst + 4]), parts);
        exit(1);
    }
    free(all);
}

void par_begin_backward(train_par *p, nn_model *m)
{
    if (p->zero) nn_zero_begin_backward(&p->zs, m);
}

void par_optim_step(train_par *p, nn_model *m, nn_optim *o, float lr)
{
    if (nn_model_comm_status(m)) die("%s", nn_last_error());
    if (!p->zero) {
        nn_optim_step(o, m->params, m->grads, lr);
        return;
    }
    if (nn_zero_step(&p->zs, m, o, lr)) die("%s", nn_last_error());
}

void par_sync(train_par *p, nn_model *m)
{
    if (p->zero && nn_zero_wait(&p->zs, m)) die("%s", nn_last_error());
}

void par_report(train_par *p, FILE *metrics)
{
    double *all = gather_mem(p);
    int n = chorus_size(p->world);
    if (chorus_rank(p->world) == 0 && p->zero && p->zs.steps) {
        double k = 1e3 / (double)p->zs.steps;
        if (p->zero == 3)
            printf("ZeRO-3: the parameter all-gathers, layer by layer before each pass reads "
                   "them (%.1f per step, forward and backward; evaluation and sampling passes "
                   "included), took %.2f ms per step\n",
                   (double)p->zs.gathers / (double)p->zs.steps, k * p->zs.gather_s);
        else if (p->zs.bg)
            printf("ZeRO-%d: the parameter all-gather took %.2f ms per step; the next forward "
                   "pass waited %.2f ms of it, the rest ran behind it\n",
                   p->zero, k * p->zs.gather_s, k * p->zs.wait_s);
        else
            printf("ZeRO-%d: the parameter all-gather took %.2f ms per step (one data-parallel "
                   "rank: nothing to overlap)\n",
                   p->zero, k * p->zs.gather_s);
    }
    if (chorus_rank(p->world) == 0) {
        for (int r = 0; r < n; r++) {
            char parts[256];
            parts_text(all + 5 * r, parts, sizeof(parts));
            printf("memory rank %d: %s (peak %.1f MiB)\n", r, parts, MIB(all[5 * r + 4]));
        }
        fflush(stdout);
    }
    if (metrics) {
        fprintf(metrics, "{\"memory\":[");
        for (int r = 0; r < n; r++) {
            const double *v = all + 5 * r;
            fprintf(metrics,
                    "%s{\"rank\":%d,\"params\":%.0f,\"grads\":%.0f,\"optimizer\":%.0f,"
                    "\"activations\":%.0f,\"peak\":%.0f}",
                    r ? "," : "", r, v[0], v[1], v[2], v[3], v[4]);
        }
        fprintf(metrics, "]}\n");
    }
    free(all);
}

void par_free(train_par *p)
{
    if (p->zero) nn_zero_free(&p->zs);
    if (p->tp_comm) chorus_finalize(p->tp_comm);
    if (p->dp_comm) chorus_finalize(p->dp_comm);
    p->tp_comm = p->dp_comm = NULL;
}

/* --zero's whole model, for a checkpoint. */

void par_whole_open(train_par *p, nn_model *m, nn_optim *o)
{
    int z3 = p->zero == 3;
    p->shard_opt = *o;
    p->whole_params = z3 ? calloc(m->nparams ? m->nparams : 1, sizeof(float)) : NULL;
    float *wm = o->m ? calloc(m->nparams, sizeof(float)) : NULL;
    float *wv = o->v ? calloc(m->nparams, sizeof(float)) : NULL;
    if ((z3 && !p->whole_params) || (o->m && !wm) || (o->v && !wv))
        die("--zero %d: out of memory for the whole model (%zu parameters) of a checkpoint",
            p->zero, m->nparams);
    o->m = wm, o->v = wv, o->n = m->nparams;
    size_t pb = z3 ? m->nparams * sizeof(float) : 0;
    if (z3) m->params = p->whole_params;
    p->whole_bytes = pb + ((wm ? m->nparams : 0) + (wv ? m->nparams : 0)) * sizeof(float);
    p->whole_open = 1;
    nn_mem_add(&p->mem, NN_MEM_PARAMS, pb);
    nn_mem_add(&p->mem, NN_MEM_OPTIMIZER, p->whole_bytes - pb);
}

void par_whole_close(train_par *p, nn_model *m, nn_optim *o)
{
    size_t pb = p->zero == 3 ? m->nparams * sizeof(float) : 0;
    nn_mem_sub(&p->mem, NN_MEM_PARAMS, pb);
    nn_mem_sub(&p->mem, NN_MEM_OPTIMIZER, p->whole_bytes - pb);
    free(o->m);
    free(o->v);
    uint64_t steps = o->t;
    *o = p->shard_opt;
    o->t = steps;
    if (p->zero == 3) {
        free(p->whole_params);
        m->params = p->whole_params = NULL;
    }
    p->whole_open = 0;
}

void par_whole_gather(train_par *p, nn_model *m, nn_optim *o)
{
    int open = p->whole_open; /* rank 0 */
    const nn_optim *sh = open ? &p->shard_opt : o;
    float *wp = open && p->zero == 3 ? m->params : NULL;
    if (nn_zero_gather_whole(&p->zs, 0, sh->m, sh->v, wp, open ? o->m : NULL, open ? o->v : NULL))
        die("%s", nn_last_error());
}

void par_whole_scatter(train_par *p, nn_model *m, nn_optim *o)
{
    int open = p->whole_open; /* rank 0 */
    nn_optim *sh = open ? &p->shard_opt : o;
    const float *wp = open && p->zero == 3 ? m->params : NULL;
    if (nn_zero_scatter_whole(&p->zs, 0, wp, open ? o->m : NULL, open ? o->v : NULL, sh->m, sh->v))
        die("%s", nn_last_error());
}
