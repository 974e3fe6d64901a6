/*
 * mode_allreduce.c - data parallelism: every rank holds the whole model, takes its share of
 * each global batch (the load balancer may weigh the shares) and the gradients are summed over
 * the ranks (--grad-sync fused, layer or engine, optionally compressed) before every rank
 * takes the same update. Its hooks serve the splits and the pipeline too (trainer.h).
 */
#include <stdio.h>
#include <string.h>

#include "chorus.h"
#include "trainer.h"

static int wanted(const opts *o)
{
    (void)o;
    return 1; /* registered last: what no other mode takes */
}

/* Per-rank monitoring and the load balancer over the sampler (the
 * batch buffers are then sized for the largest share it may give, balance_capacity). */
void allreduce_shares(trainer *t)
{
    balance_opts bo = {.dynamic = !strcmp(t->o.balance, "dynamic"),
                       .every = t->o.balance_every,
                       .monitor_every = t->o.log_every,
                       .fixed = t->o.balance_shares,
                       .global_batch = (size_t)t->o.batch,
                       .unit = strcmp(t->o.model, "gpt") ? "samples" : "windows",
                       .rank = t->rank,
                       .world = t->world};
    char why[512];
    t->bal = balance_create(&bo, &t->dist, &t->sampler, why, sizeof(why));
    if (!t->bal) die("%s", why);
}

/* Gradient compression (--compress) over the built model. */
void allreduce_model_built(trainer *t)
{
    const opts *o = &t->o;
    if (nn_dist_set_compression(&t->dist, t->m, o->compress)) die("%s", nn_last_error());
    if (t->rank == 0 && t->dist.comp && t->world > 1)
        printf("gradient compression %s (--grad-sync %s): a rank sends %.2f%% of the dense "
               "gradient bytes per step\n",
               o->compress, o->sync, 100.0 * nn_dist_compression_ratio(&t->dist, t->m));
}

/* The splits' buffers and the memory budget (split.c). */
void allreduce_optim_built(trainer *t)
{
    par_setup(&t->o.par, t->m, &t->opt);
}

/* Rank 0's parameters to every rank. */
void allreduce_first_params(trainer *t)
{
    if (nn_dist_broadcast_params(&t->dist, t->m)) die("%s", nn_last_error());
}

/* The gradients summed over the ranks (--zero sums its own, split.c), then the step's loss,
 * hits and samples. */
void allreduce_sync(trainer *t, float lr, double stats[3], size_t *gcount)
{
    (void)lr, (void)gcount;
    if (!t->o.par.zero && nn_dist_sync_grads(&t->dist, t->m)) die("%s", nn_last_error());
    if (nn_dist_sum(&t->dist, stats, 3)) die("%s", nn_last_error());
}

/* The update, the same on every rank (ZeRO's sharded one under --zero). */
void allreduce_step(trainer *t, float lr)
{
    par_optim_step(&t->o.par, t->m, &t->opt, lr);
}

/* Rank 0 writes the whole model (every rank its compressor memory). */
void allreduce_save(trainer *t)
{
    save_whole(t);
}

/* Every rank's memory line (collective). */
void allreduce_report(trainer *t)
{
    par_report(&t->o.par, t->metrics);
}

const train_mode mode_allreduce = {
    .name = "allreduce",
    .wanted = wanted,
    .share = "rank",
    .ckpt_note = "",
    DATA_PARALLEL_HOOKS,
    WHOLE_MODEL_HOOKS,
    .comm_line = allreduce_comm_line,
};
