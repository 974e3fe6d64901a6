/*
 * mode_ps.c - --mode ps-sync, ps-async and ps-ssp: the job splits into parameter servers,
 * which hold the parameters and apply this run's optimizer (src/ps/), and workers, which
 * push each step's gradients and pull the parameters the servers made of them. The workers'
 * losses stay their own; under ps-async and ps-ssp the workers never meet once training has
 * started, and worker 0 alone evaluates and reports.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chorus.h"
#include "chorus/ps.h"
#include "trainer.h"

#define PS_KEY 0 /* the whole flat parameter buffer is one key, cut across the servers */

/* This rank's side of the parameter server. */
static chorus_ps *ps_of(const trainer *t)
{
    return t->mode_data;
}

static int wanted(const opts *o)
{
    return strncmp(o->mode, "ps-", 3) == 0;
}

/* Step (--mode ps-*): split the job into parameter servers and workers. The servers apply
 * this run's optimizer; a worker's rank and world below are among the workers only. */
static chorus_ps *start_ps(trainer *t)
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
    /* --clip-grad (the GPT's): in ps-sync the servers cut each round's summed gradient; in
     * ps-async and ps-ssp each worker cuts its own before pushing (mode_gpt_ps.c) */
    po.clip_norm = !strcmp(o->mode, "ps-sync") && o->clip > 0 ? o->clip : 0.0f;
    po.grad_dtype = !strcmp(o->ps_grad, "float16")    ? CHORUS_FLOAT16
                    : !strcmp(o->ps_grad, "bfloat16") ? CHORUS_BFLOAT16
                                                      : CHORUS_FLOAT32;
    chorus_ps *ps = NULL;
    chorus_result r = chorus_ps_create(t->comm, &po, &ps);
    if (r != CHORUS_OK) die("--mode %s: %s", o->mode, chorus_ps_last_error(NULL));
    if (chorus_ps_is_server(ps)) {
        t->rank = 0; /* builds the model like worker 0; trains nothing */
        t->world = chorus_ps_num_workers(ps);
    }
    return ps;
}

/* The workers' communicator (a server trains nothing: NULL). */
chorus_comm *ps_join(trainer *t, chorus_comm *grid)
{
    (void)grid;
    chorus_ps *ps = start_ps(t);
    t->mode_data = ps;
    t->apart = strcmp(t->o.mode, "ps-sync") != 0;
    t->sps_workers = 1; /* each worker counts its own samples until the end */
    return chorus_ps_is_server(ps) ? NULL : chorus_ps_worker_comm(ps);
}

/* --mode ps-*: the servers' current parameters into the model. */
void ps_pull_params(trainer *t)
{
    chorus_ps_handle *h;
    if (chorus_ps_pull(ps_of(t), PS_KEY, t->m->params, t->m->nparams, &h) != CHORUS_OK ||
        chorus_ps_wait(h) != CHORUS_OK)
        die("pulling the parameters: %s", chorus_ps_last_error(ps_of(t)));
}

/* --mode ps-*: pushes this step's gradients and pulls the parameters the servers made of
 * them (sync: after every worker's push; ssp: once no more than --staleness steps ahead). */
static void ps_step(trainer *t, float lr)
{
    chorus_ps_handle *h[2];
    double t0 = now_s();
    if (chorus_ps_push(ps_of(t), PS_KEY, t->m->grads, t->m->nparams, lr, &h[0]) != CHORUS_OK)
        die("pushing the gradients: %s", chorus_ps_last_error(ps_of(t)));
    if (chorus_ps_pull(ps_of(t), PS_KEY, t->m->params, t->m->nparams, &h[1]) != CHORUS_OK ||
        chorus_ps_wait(h[0]) != CHORUS_OK || chorus_ps_wait(h[1]) != CHORUS_OK)
        die("exchanging with the parameter servers: %s", chorus_ps_last_error(ps_of(t)));
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
    if (chorus_ps_register(ps_of(t), PS_KEY, t->m->nparams, t->m->params) != CHORUS_OK)
        die("registering the parameters: %s", chorus_ps_last_error(ps_of(t)));
}

/* Step (--mode ps-*, server ranks): serve until every worker is done, then report this
 * server's memory and each worker's traffic (stdout, and a line of --metrics). */
static void serve_params(trainer *t)
{
    if (chorus_ps_serve(ps_of(t)) != CHORUS_OK)
        die("parameter server: %s", chorus_ps_last_error(ps_of(t)));
    chorus_ps_stats st;
    chorus_ps_get_stats(ps_of(t), &st);
    char per[2048] = "";
    size_t len = 0;
    for (int w = 0; w < st.nworkers && len < sizeof(per) - 64; w++)
        len += (size_t)snprintf(per + len, sizeof(per) - len, "%s%.1f/%.1f", w ? ", " : "",
                                (double)st.worker_bytes_pushed[w] / 1048576.0,
                                (double)st.worker_bytes_pulled[w] / 1048576.0);
    char clip[128] = "";
    if (!strcmp(t->o.mode, "ps-sync") && t->o.clip > 0)
        snprintf(clip, sizeof(clip),
                 "; %llu of its rounds' summed gradients cut to norm %g, the last norm %.3f",
                 (unsigned long long)st.clipped, (double)t->o.clip, st.last_norm);
    printf("server %d (%s): %.2f MiB of parameters and optimizer state; %llu update%s; %llu "
           "pull%s delayed, largest lead %llu step%s; MiB pushed/pulled per worker: %s%s\n",
           g_rank, t->o.mode, (double)st.server_bytes / 1048576.0, (unsigned long long)st.updates,
           st.updates == 1 ? "" : "s", (unsigned long long)st.pulls_delayed,
           st.pulls_delayed == 1 ? "" : "s", (unsigned long long)st.max_staleness,
           st.max_staleness == 1 ? "" : "s", per, clip);
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

/* --mode ps-* --resume: worker 0 has the servers load their shards of the step the trainer
 * resumed from (saved before the trainer's own checkpoint of that step), and every worker
 * waits for that before its first pull. */
static void resume_shards(trainer *t)
{
    if (!t->o.resume || t->st.global_step == 0) return;
    int64_t moved = 0; /* 1: rank 0 went back to an older step (its state follows) */
    if (t->rank == 0) {
        char first[1024] = "";
        while (chorus_ps_load(ps_of(t), t->o.ckpt_dir, t->st.global_step) != CHORUS_OK) {
            /* damaged shards: the newest older step whose shards and trainer checkpoint are
             * all intact, said so (the servers said what is wrong with theirs) */
            if (!first[0]) snprintf(first, sizeof(first), "%s", chorus_ps_last_error(ps_of(t)));
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

/* Every rank registers the parameters; a server then serves until every worker is done
 * (1: its part of the job is over). */
int ps_start(trainer *t)
{
    register_params(t);
    if (!chorus_ps_is_server(ps_of(t))) return 0;
    serve_params(t);
    return 1;
}

/* The servers' parameters (of the resumed step, with --resume). */
void ps_first_params(trainer *t)
{
    resume_shards(t);
    ps_pull_params(t);
}

void ps_job_text(const trainer *t, char *ranks, size_t rlen, char *servers, size_t slen)
{
    (void)ranks, (void)rlen;
    int n = chorus_ps_num_servers(ps_of(t));
    snprintf(servers, slen, " and %d server%s (--mode %s)", n, n > 1 ? "s" : "", t->o.mode);
}

/* Loss and accuracy stay this worker's own: the workers do not meet; the step's figures
 * count this worker's samples (stats[2]). */
void ps_sync(trainer *t, float lr, double stats[3], size_t *gcount)
{
    if (!isfinite(stats[0]) || !isfinite(lr))
        die("step %llu: the loss is %s: training diverged (learning rate %g). Lower --lr",
            (unsigned long long)t->st.global_step + 1, isnan(stats[0]) ? "NaN" : "infinite",
            (double)lr);
    ps_step(t, lr);
    *gcount = (size_t)stats[2];
}

void ps_traffic(const trainer *t, uint64_t *pushed, uint64_t *pulled)
{
    chorus_ps_stats st;
    chorus_ps_get_stats(ps_of(t), &st);
    *pushed = st.bytes_pushed;
    *pulled = st.bytes_pulled;
}

/* Every server's shard first, so that a step the trainer's checkpoint names always has its
 * shards on disk; then worker 0's checkpoint. */
void ps_save(trainer *t)
{
    if (t->rank != 0) return;
    if (chorus_ps_save(ps_of(t), t->o.ckpt_dir, t->st.global_step) != CHORUS_OK)
        die("%s", chorus_ps_last_error(ps_of(t)));
    save_whole(t);
}

/* After training: a worker takes the final parameters and leaves, so that the others'
 * rounds and staleness bound no longer count it. */
void ps_end(trainer *t)
{
    ps_pull_params(t);
    if (chorus_ps_leave(ps_of(t)) != CHORUS_OK) die("%s", chorus_ps_last_error(ps_of(t)));
    /* the summary's samples/s counts every worker, as allreduce's does; apart, a worker
     * that was lost leaves the survivors' own counts */
    double mine = t->samples_done;
    if (nn_dist_sum(&t->dist, &t->samples_done, 1)) {
        if (!t->apart) die("%s", nn_last_error());
        t->samples_done = mine;
        if (t->rank == 0)
            printf("note: %s; samples/s below counts worker 0 alone\n", nn_last_error());
    } else {
        t->sps_workers = t->world;
    }
}

/* Worker 0's traffic with the servers. */
void ps_comm_line(trainer *t)
{
    const opts *o = &t->o;
    const nn_dist *d = &t->dist;
    if (t->rank != 0 || t->steps_done == 0) return;
    chorus_ps_stats st;
    chorus_ps_get_stats(ps_of(t), &st);
    int n = chorus_ps_num_servers(ps_of(t));
    printf("communication (--mode %s, %d server%s, %d workers): this worker pushed %.1f MiB "
           "and pulled %.1f MiB; exchanging with the servers took %.2f ms per step\n",
           o->mode, n, n > 1 ? "s" : "", t->world, (double)st.bytes_pushed / 1048576.0,
           (double)st.bytes_pulled / 1048576.0, 1e3 * d->comm_s / (double)t->steps_done);
}

/* A server has served its last worker; only a worker's failure to leave is an error. */
void ps_finish(trainer *t)
{
    int worker = !chorus_ps_is_server(ps_of(t));
    if (chorus_ps_finalize(ps_of(t)) != CHORUS_OK && worker)
        die("leaving the parameter server: %s", chorus_ps_last_error(NULL));
}

const train_mode mode_ps = {
    .name = "ps",
    .wanted = wanted,
    .share = "rank",
    .ckpt_note = " (and the servers' shards beside it)",
    .join = ps_join,
    .start = ps_start,
    .first_params = ps_first_params,
    .job_text = ps_job_text,
    .sync = ps_sync,
    .traffic = ps_traffic,
    .save = ps_save,
    .refresh = ps_pull_params,
    .end = ps_end,
    .comm_line = ps_comm_line,
    .finish = ps_finish,
};
