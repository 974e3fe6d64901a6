/*
 * mode_gpt_ps.c - --model gpt --mode ps-sync|ps-async|ps-ssp: the GPT trained against the
 * parameter server. The split into servers and workers, the push and pull of the whole model
 * as one key, the servers' AdamW, their shards in checkpoints and --resume are mode_ps.c's
 * (src/ps/); each worker's windows, forward and backward, the validation and the sample at
 * the end are mode_gpt.c's. Each step's learning rate (warm-up, then cosine) travels with the
 * push, as for the MLP.
 *
 * Gradient clipping by global norm (--clip-grad) is where the gradient the update applies is
 * whole: in ps-sync the servers cut each round's summed gradient, its norm taken from every
 * server's sum of squares of its slice (chorus_ps_opts.clip_norm), so that the update is data
 * parallelism's; in ps-async and ps-ssp every push is applied alone, and each worker cuts its
 * own gradient to the norm before pushing it, as asynchronous workers clip their own gradients
 * before applying them.
 */
#include <string.h>

#include "chorus.h"
#include "gpt_train.h"

static int wanted(const opts *o)
{
    return !strcmp(o->model, "gpt") && !strncmp(o->mode, "ps-", 3);
}

/* A server serves (its part is over); a worker's rank 0 describes the model and the text. */
static int start(trainer *t)
{
    if (ps_start(t)) return 1;
    gpt_say_model(t);
    return 0;
}

/* ps-async and ps-ssp: this worker's gradient cut to --clip-grad by its own global norm;
 * then the push of it and the pull of the parameters. The step's figures count this worker's
 * windows (its loss and accuracy are per token: stats[2] counts tokens). */
static void sync(trainer *t, float lr, double stats[3], size_t *gcount)
{
    train_gpt *s = t->gpt;
    if (strcmp(t->o.mode, "ps-sync")) {
        if (nn_gpt_grad_norm(s->g, &s->grad_norm)) die("%s", nn_last_error());
        if (t->o.clip > 0 && s->grad_norm > t->o.clip) {
            float k = (float)(t->o.clip / s->grad_norm);
            float *g = t->m->grads;
            for (size_t i = 0; i < t->m->nparams; i++) g[i] *= k;
        }
    }
    ps_sync(t, lr, stats, gcount);
    *gcount = (size_t)stats[2] / (size_t)s->g->c.context;
}

/* After the summary: tokens/s over the workers and the sample (worker 0). */
static void say_end(trainer *t)
{
    gpt_say_end(t, t->gpt->g, 0);
}

static void finish(trainer *t)
{
    ps_finish(t);
    gpt_finish(t);
}

const train_mode mode_gpt_ps = {
    .name = "gpt-ps",
    .wanted = wanted,
    .share = "rank",
    .ckpt_note = " (and the servers' shards beside it)",
    .join = ps_join,
    .start = start,
    .first_params = ps_first_params,
    .job_text = ps_job_text,
    .forward_backward = gpt_forward_backward,
    .sync = sync,
    .traffic = ps_traffic,
    .save = ps_save,
    .refresh = ps_pull_params,
    .evaluate = gpt_evaluate,
    .end = ps_end,
    .comm_line = ps_comm_line,
    .report = say_end,
    .finish = finish,
};
