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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "trainer.h"

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

/* --accum passes over t->m: forward and backward of this rank's share of the step, in
 * micro-batches whose gradients add up. */
static void accum_forward_backward(trainer *t, const uint32_t *idx, size_t nloc, float scale,
                                   double stats[3])
{
    const opts *o = &t->o;
    nn_model *m = t->m;
    size_t off = 0;
    for (int k = 0; k < o->accum; k++) {
        size_t nb = nloc / (size_t)o->accum + ((size_t)k < nloc % (size_t)o->accum);
        m->step = t->st.global_step * (uint64_t)o->accum + (uint64_t)k;
        nn_dataset_batch(&t->train, idx + off, (int)nb, t->x, t->y);
        const float *z = nn_forward(m, t->x, (int)nb);
        int hits = 0;
        stats[0] += nn_xent(z, t->y, (int)nb, t->train.nclasses, scale, t->dl, &hits);
        stats[1] += hits;
        /* The last pass completes the gradients: in engine mode each layer's goes to
         * the other ranks the moment it is done; earlier passes only accumulate. */
        if (k + 1 == o->accum) nn_dist_begin_backward(&t->dist, m);
        if (k + 1 == o->accum && t->mode->begin_backward) t->mode->begin_backward(t);
        nn_backward(m, t->dl, (int)nb);
        off += nb;
    }
    stats[2] = (double)nloc;
}

/* A loss that is not a number stops every rank (each has the same sum) before it reaches
 * the metrics or a checkpoint. */
static void check_finite(trainer *t, const double stats[3], float lr)
{
    if (isfinite(stats[0]) && isfinite(lr)) return;
    if (t->rank) { /* rank 0 says why and exits first: wait for that (the barrier fails) */
        chorus_barrier(t->comm);
        exit(1);
    }
    die("step %llu: the loss is %s: training diverged (learning rate %g); stopping before "
        "it is written to metrics or checkpoints. Lower --lr",
        (unsigned long long)t->st.global_step + 1, isnan(stats[0]) ? "NaN" : "infinite",
        (double)lr);
}

/* One optimizer step: forward and backward over this rank's share of global step `step`
 * (in --accum micro-batches), the gradients synchronised, the update; then rank 0's metrics
 * line, progress line and step checkpoint. */
static void train_step(trainer *t, uint64_t epoch, size_t step, epoch_stats *ep)
{
    const train_mode *mode = t->mode;
    nn_dist *d = &t->dist;
    nn_train_state *st = &t->st;
    double t0 = now_s();
    step_clock c0 = {d->wait_s, d->grad_wait_s, d->comm_s, d->hidden_s, d->in_backward};
    step_figures f = {.stats = {0, 0, 0}};
    f.lr = lr_at(&t->o, st->global_step, t->steps_per_epoch, t->world, t->spent);
    const uint32_t *idx;
    f.nloc = nn_sampler_batch(&t->sampler, step, &idx, &f.gcount);
    float scale = 1.0f / (float)f.gcount;
    nn_zero_grad(t->m);
    if (mode->forward_backward)
        mode->forward_backward(t, idx, f.nloc, scale, f.stats);
    else
        accum_forward_backward(t, idx, f.nloc, scale, f.stats);
    double t_fb = now_s() - t0; /* forward and backward of this rank's share */
    mode->sync(t, f.lr, f.stats, &f.gcount);
    check_finite(t, f.stats, f.lr);
    if (mode->step) mode->step(t, f.lr);
    st->global_step++;
    if (mode->replicas_agree) after_update(t);
    st->epoch = step + 1 == t->steps_per_epoch ? epoch + 1 : epoch;
    st->step_in_epoch = step + 1 == t->steps_per_epoch ? 0 : step + 1;
    f.t1 = now_s(), f.dt = f.t1 - t0;
    t->train_time += f.dt;
    t->step_wait += d->wait_s - c0.wait;
    t->steps_done++;
    t->samples_done += (double)f.gcount;
    if (t->bal) {
        balance_record(t->bal, t_fb, d->wait_s - c0.wait, f.nloc);
        if (balance_after_step(t->bal, st->global_step)) die("%s", nn_last_error());
        t->train_time += now_s() - f.t1; /* the gather counts as training time */
    }
    ep->loss += f.stats[0];
    ep->hits += f.stats[1];
    ep->n += f.stats[2];
    report_step(t, epoch, step, ep, &f, &c0);
    if (t->o.ckpt_every && st->global_step % (uint64_t)t->o.ckpt_every == 0) mode->save(t);
}

/* --time-limit: whether training stops now. Each worker of a parameter server decides alone
 * (it leaves the servers after, so nobody waits for it); allreduce ranks agree, since they
 * must all stop at the same step. */
static int out_of_time(trainer *t)
{
    if (t->o.time_limit <= 0) return 0;
    double v[2] = {now_s() - t->t_start, 0}; /* time spent; ranks that are over it */
    v[1] = v[0] >= t->o.time_limit;
    if (t->mode->agree_stop) {
        if (nn_dist_sum(&t->dist, v, 2)) die("%s", nn_last_error());
        v[0] /= t->world; /* the ranks' mean: one learning rate for all */
    }
    t->spent = v[0] / t->o.time_limit;
    return v[1] > 0;
}

/* --eval-every N: a test-set evaluation every N steps, reported with the training time so
 * far, the evaluations left out (time to accuracy). */
static void eval_periodic(trainer *t)
{
    if (!t->o.eval_every || !t->mode->periodic_eval ||
        t->st.global_step % (uint64_t)t->o.eval_every)
        return;
    double t0 = now_s(), loss = 0;
    double acc = t->mode->evaluate ? t->mode->evaluate(t, &loss) : evaluate_model(t, &loss);
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
    if (ckpt) t->mode->save(t);
    return stop;
}

/* Step: release everything and leave the job. */
static void finish(trainer *t)
{
    metrics_written(&t->metrics, t->o.metrics, 1);
    train_tb_close(&t->tb);
    nn_dist_finalize(&t->dist);
    if (t->mode->finish) t->mode->finish(t);
    free(t->x);
    free(t->y);
    free(t->dl);
    nn_optim_free(&t->opt);
    balance_destroy(t->bal);
    nn_sampler_free(&t->sampler);
    nn_model_destroy(t->m);
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
    t.mode = train_mode_of(&t.o);
    start_job(&t);
    load_data(&t);
    build(&t);
    if (t.mode->start && t.mode->start(&t)) { /* a server has served */
        finish(&t);
        return 0;
    }
    if (t.o.resume) restore_checkpoint(&t);
    if (t.o.resume && t.bal && balance_resume(t.bal, t.o.ckpt_dir, t.st.global_step))
        die("%s", nn_last_error());
    if (t.o.ckpt_dir) claim_checkpoint_dir(&t);
    prepare_run(&t);
    for (uint64_t epoch = t.st.epoch; epoch < (uint64_t)t.o.epochs; epoch++)
        if (train_epoch(&t, epoch)) break;
    if (t.mode->end) t.mode->end(&t);
    report_final_test(&t);
    par_sync(&t.o.par, t.m);
    report(&t);
    par_free(&t.o.par);
    finish(&t);
    return 0;
}
