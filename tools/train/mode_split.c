/*
 * mode_split.c - data parallelism over a model split across ranks: --tensor-parallel T cuts
 * the linear layers over T ranks of a replica, --zero shards the optimizer state (1) and the
 * gradients (2) over the replicas (split.c). Like allreduce otherwise.
 */
#include <stdio.h>

#include "chorus.h"
#include "trainer.h"

static int wanted(const opts *o)
{
    return o->par.tp > 1 || o->par.zero;
}

/* --zero: the sharded gradient sum starts with the last backward pass. */
static void begin_backward(trainer *t)
{
    par_begin_backward(&t->o.par, t->m);
}

/* ZeRO sums the gradients itself (nn_zero): its own clock, not nn_dist's. */
void split_comm_line(trainer *t)
{
    const opts *o = &t->o;
    if (!o->par.zero) {
        allreduce_comm_line(t);
        return;
    }
    if (t->rank != 0 || t->world <= 1 || t->steps_done == 0) return;
    const nn_zero *z = &o->par.zs;
    double k = z->steps ? 1e3 / (double)z->steps : 0.0;
    printf("communication (--zero %d, %d ranks): %s took %.2f ms per step\n", o->par.zero, t->world,
           o->par.zero >= 2 ? "reduce-scattering the gradients, layer by layer in the "
                              "backward pass,"
                            : "allreducing the gradients",
           k * (z->comm_s - z->gather_s));
}

const train_mode mode_split = {
    .name = "split",
    .wanted = wanted,
    .share = "rank",
    .ckpt_note = "",
    DATA_PARALLEL_HOOKS,
    WHOLE_MODEL_HOOKS,
    .begin_backward = begin_backward,
    .comm_line = split_comm_line,
};
