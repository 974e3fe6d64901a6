/*
 * state.c - chorus-train's checkpoints: the model's options written beside them, --resume
 * (rank 0 loads, every rank gets its verdict and the state), and the writing of the whole
 * model's checkpoint (a mode's save hook decides who writes, trainer.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "chorus/checkpoint.h"
#include "gpt_train.h"
#include "trainer.h"

/* The options that shape the model, as written next to the checkpoints ("--model mlp
 * --dropout 0.2"): a resume with other ones is refused saying what differs. */
#define ARCH_NAME "model"
static void arch_text(const opts *o, char *out, size_t len)
{
    if (!strcmp(o->model, "gpt"))
        snprintf(out, len,
                 "--model gpt --layers %d --d-model %d --heads %d --context %d --vocab %d",
                 o->gpt.layers, o->gpt.d_model, o->gpt.heads, o->gpt.context, o->gpt.vocab);
    else
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

/* Under the GPT's --tensor-parallel the first replica's shards (t->rank 0 of each shard's
 * data-parallel ranks) take n bytes of world rank 0, which alone reads and writes the
 * checkpoints, before their data-parallel broadcasts. */
static void tp_share(trainer *t, void *buf, size_t n)
{
    if (!gpt_tp_whole(t) || t->rank != 0) return;
    if (chorus_broadcast(t->o.par.tp_comm, buf, n, CHORUS_UINT8, 0))
        die("--tensor-parallel: sharing a checkpoint's state: %s",
            chorus_last_error(t->o.par.tp_comm));
}

/* The rank that reads and writes the checkpoints: rank 0, world rank 0 under the GPT's
 * --tensor-parallel. */
static int ckpt_lead(const trainer *t)
{
    return t->rank == 0 && (!gpt_tp_whole(t) || t->o.par.tp_rank == 0);
}

/* Step (--checkpoint-dir): rank 0 writes the model's options beside the checkpoints now, so
 * that a directory it cannot write to is refused before training, not at the first save. */
void claim_checkpoint_dir(trainer *t)
{
    char arch[128], why[1024] = "";
    int64_t ok = 1;
    arch_text(&t->o, arch, sizeof(arch));
    int lead = ckpt_lead(t);
    if (lead &&
        chorus_checkpoint_save(t->o.ckpt_dir, ARCH_NAME, 0, arch, strlen(arch), 1) != CHORUS_OK) {
        snprintf(why, sizeof(why), "%s", chorus_last_error(NULL));
        ok = 0;
    }
    if (lead && ok && rec_save(&t->rec, t->o.ckpt_dir, why, sizeof(why))) ok = 0;
    tp_share(t, &ok, sizeof(ok));
    if (nn_dist_broadcast_bytes(&t->dist, &ok, sizeof(ok))) die("%s", nn_last_error());
    if (!ok && t->rank != 0) chorus_report_peer_failure(t->dist.comm, 0); /* its verdict */
    if (!ok)
        die("cannot write checkpoints to --checkpoint-dir %s (checked before training): %s",
            t->o.ckpt_dir, lead ? why : "see rank 0");
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
void share_resumed_state(trainer *t)
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
    if (t->o.par.zero) /* each rank its chunks of the optimizer state (and of the parameters) */
        par_whole_scatter(&t->o.par, t->m, &t->opt);
    else if ((ns && nn_dist_broadcast_bytes(d, t->opt.m, ns * sizeof(float))) ||
             (t->opt.v && nn_dist_broadcast_bytes(d, t->opt.v, t->opt.n * sizeof(float))))
        die("%s", nn_last_error());
    t->m->seed = st->rng;
    t->sampler.seed = st->seed;
    if (t->comp_state) restore_compressor(t);
}

/* Step (--resume): rank 0 loads the newest valid checkpoint and every rank gets its verdict,
 * then the training state and optimizer state (the parameters follow with the broadcast of
 * rank 0's parameters in prepare_run; under --zero 3 rank 0 loads into whole buffers and
 * every rank takes its chunks of them now). */
void restore_checkpoint(trainer *t)
{
    nn_dist *d = &t->dist;
    nn_train_state *st = &t->st;
    int64_t loaded = 0;
    nn_ckpt_info info = {0};
    char why[1024] = "";
    int whole = t->o.par.zero && t->rank == 0;
    int lead = ckpt_lead(t), tp = gpt_tp_whole(t) && t->rank == 0;
    if (whole) par_whole_open(&t->o.par, t->m, &t->opt);
    if (tp && lead) gpt_tp_open(t); /* the whole model's buffers in t->m and t->opt */
    if (lead) {
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
    tp_share(t, &loaded, sizeof(loaded));
    if (nn_dist_broadcast_bytes(d, &loaded, sizeof(loaded))) die("%s", nn_last_error());
    if (loaded < 0 && t->rank != 0) chorus_report_peer_failure(d->comm, 0); /* its verdict */
    if (loaded < 0) die("cannot resume: %s", lead ? why : "see rank 0");
    if (loaded == 1 && tp) { /* each shard of the first replica its part of the whole */
        gpt_tp_move(t, 0);
        uint64_t sig = st->model_sig; /* the shard's, not the whole model's */
        tp_share(t, st, sizeof(*st));
        tp_share(t, &t->opt.t, sizeof(t->opt.t));
        if (!lead) st->model_sig = sig;
    }
    if (tp && lead) gpt_tp_close(t);
    if (loaded == 1) {
        share_resumed_state(t);
        if (lead)
            printf("resumed from %s: epoch %llu, step %llu\n", info.path,
                   (unsigned long long)st->epoch + 1, (unsigned long long)st->global_step);
    } else if (t->rank == 0) {
        printf("no checkpoint in %s yet; starting from scratch\n", t->o.ckpt_dir);
    }
    if (whole) par_whole_close(&t->o.par, t->m, &t->opt);
}

/* Rank 0's line for a checkpoint it has written (the progress line on a terminal is redrawn
 * after it). */
void say_checkpoint(const trainer *t)
{
    char path[4200];
    if (chorus_checkpoint_path(t->o.ckpt_dir, NN_CKPT_NAME, t->st.global_step, path,
                               sizeof(path)) != CHORUS_OK)
        snprintf(path, sizeof(path), "%s", t->o.ckpt_dir);
    printf("%scheckpoint step %llu written to %s%s%s\n", t->tty ? "\r" : "",
           (unsigned long long)t->st.global_step, path, t->mode->ckpt_note, t->tty ? "\033[K" : "");
    fflush(stdout);
}

/* The step's checkpoint of the whole model: every rank's compressor memory (when it keeps
 * some), then rank 0's load balancer shares and trainer checkpoint. Called on every rank. */
void save_whole(trainer *t)
{
    if (t->rank != 0 && !t->comp_state) return;
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
    char why[1024];
    if (t->bal && balance_save(t->bal, t->o.ckpt_dir, t->st.global_step, why, sizeof(why)))
        die("saving the load balancer's shares: %s", why);
    if (nn_ckpt_save(t->o.ckpt_dir, t->m, &t->opt, &t->st)) die("%s", nn_last_error());
    say_checkpoint(t);
}
