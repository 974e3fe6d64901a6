/*
 * report.c - what chorus-train says: the metrics file, the progress and epoch lines, the
 * TensorBoard scalars of each step, test-set evaluation, and the summary at the end.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "trainer.h"

/* --metrics: after each record, the line is on its way to the file, or the run stops naming
 * the file and what the system said (a full disk, /dev/full), not with a file cut mid-record.
 * Closes the file too when closing. */
void metrics_written(FILE **f, const char *path, int closing)
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

/* Share of the gradient communication time that overlapped backward. */
double hidden_share(const nn_dist *d)
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

/* What a samples/s figure counts, said under --mode ps-* (its workers count their own
 * samples until the end, where they are summed): "" in allreduce mode, where every figure is
 * the whole job's. */
static const char *sps_whose(const trainer *t, char *buf, size_t len)
{
    if (!t->sps_workers) return "";
    if (t->sps_workers > 1)
        snprintf(buf, len, " (%d workers together)", t->sps_workers);
    else
        snprintf(buf, len, " (worker 0 alone)");
    return buf;
}

/* Test accuracy: each rank evaluates its slice of the test set; counts are summed. Alone, this
 * rank evaluates the whole set and meets nobody (t->apart). */
double evaluate_model(trainer *t, double *loss_out)
{
    nn_model *m = t->m;
    nn_dist *d = &t->dist;
    const nn_dataset *test = &t->test;
    float *x = t->x;
    int32_t *y = t->y;
    int alone = t->apart;
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

/* After a step: rank 0's metrics record and progress line, and the step's TensorBoard
 * scalars. c0: the synchronisation clocks when the step began; t1: when it ended, dt long. */
void report_step(trainer *t, uint64_t epoch, size_t step, epoch_stats *ep, const step_figures *f,
                 const step_clock *c0)
{
    const opts *o = &t->o;
    const nn_dist *d = &t->dist;
    const nn_train_state *st = &t->st;
    const double *stats = f->stats;
    float lr = f->lr;
    size_t gcount = f->gcount, nloc = f->nloc;
    double t1 = f->t1, dt = f->dt;
    double sps = t->samples_done / t->train_time;
    uint64_t pushed = 0, pulled = 0; /* this worker's totals */
    if (t->mode->traffic) t->mode->traffic(t, &pushed, &pulled);
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
                    d->wait_s - c0->wait, d->comm_s - c0->comm, d->hidden_s - c0->hidden,
                    d->grad_wait_s - c0->grad_wait,
                    (unsigned long long)(d->in_backward - c0->in_backward), o->mode,
                    (unsigned long long)pushed, (unsigned long long)pulled);
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
    double dense = (double)t->m->nparams * sizeof(float);
    double sent = t->mode->traffic ? (double)(pushed - t->tb_pushed) : dense;
    t->tb_pushed = pushed;
    train_tb_step ts = {.step = (int64_t)st->global_step,
                        .loss = stats[0] / stats[2],
                        .acc = stats[1] / stats[2],
                        .lr = lr,
                        .samples_s = (double)gcount / dt,
                        .rank_samples_s = (double)nloc / dt,
                        .comm_s = d->comm_s - c0->comm,
                        .bytes_sent = sent,
                        .bytes_dense = dense};
    char tb_why[600];
    if (train_tb_log_step(&t->tb, &ts, tb_why, sizeof(tb_why))) die("%s", tb_why);
}

/* A test-set evaluation (after an epoch or at the end): its TensorBoard scalars. */
static void tb_test(trainer *t, double loss)
{
    char tb_why[600];
    if (train_tb_test(&t->tb, (int64_t)t->st.global_step, t->last_test_acc, loss, tb_why,
                      sizeof(tb_why)))
        die("%s", tb_why);
}

/* The mode's evaluation, or every rank's slice of the test set. */
static double evaluate(trainer *t, double *loss)
{
    return t->mode->evaluate ? t->mode->evaluate(t, loss) : evaluate_model(t, loss);
}

/* Step: the test-set evaluation after an epoch and rank 0's epoch line. */
void report_epoch(trainer *t, uint64_t epoch, const epoch_stats *ep)
{
    const opts *o = &t->o;
    nn_dist *d = &t->dist;
    double test_loss = 0;
    int eval = !o->no_eval && o->time_limit <= 0;      /* --time-limit: once, at the end */
    if (t->apart && t->rank != 0) eval = 0;            /* worker 0 reports */
    if (t->mode->refresh && eval) t->mode->refresh(t); /* async workers may hold older ones */
    if (eval) t->last_test_acc = evaluate(t, &test_loss);
    if (eval) tb_test(t, test_loss);
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

/* --time-limit: the one evaluation, at the end. */
void report_final_test(trainer *t)
{
    if (t->o.time_limit <= 0 || t->o.no_eval || (t->apart && t->rank != 0)) return;
    double test_loss = 0;
    t->last_test_acc = evaluate(t, &test_loss);
    if (t->rank == 0)
        printf("after %.1f s: test loss %.4f acc %.4f\n", now_s() - t->t_start, test_loss,
               t->last_test_acc);
    tb_test(t, test_loss);
}

/* The data-parallel communication line of the summary (rank 0, several ranks). */
void allreduce_comm_line(trainer *t)
{
    const opts *o = &t->o;
    nn_dist *d = &t->dist;
    if (t->rank != 0 || t->world <= 1 || t->steps_done == 0) return;
    double steps = (double)t->steps_done, hid = d->hidden_s;
    char overlap[160];
    if (hid > 0)
        snprintf(overlap, sizeof(overlap), "%.2f ms (%.0f%%) of it ran behind the backward pass",
                 1e3 * hid / steps, 100.0 * hidden_share(d));
    else
        snprintf(overlap, sizeof(overlap), "none of it ran behind the backward pass%s",
                 strcmp(o->sync, "engine") ? " (--grad-sync engine overlaps it)" : "");
    printf("communication (--grad-sync %s, %d ranks): averaging the gradients took %.2f ms "
           "per step, of which training waited %.2f ms; %s. Waiting on other ranks in all "
           "collectives: %.1f%% of training time\n",
           o->sync, t->world, 1e3 * d->comm_s / steps, 1e3 * d->grad_wait_s / steps, overlap,
           t->train_time > 0 ? 100.0 * t->step_wait / t->train_time : 0.0);
}

/* Step: rank 0's summary (gradient synchronisation, final accuracy and speed), and each
 * rank's final parameters for --dump-params. */
void report(trainer *t)
{
    const opts *o = &t->o;
    if (t->mode->comm_line) t->mode->comm_line(t);
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
    if (t->mode->report) t->mode->report(t);
    if (o->dump) {
        char path[4096];
        snprintf(path, sizeof(path), "%s.%d", o->dump, t->rank);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(t->m->params, sizeof(float), t->m->nparams, f) != t->m->nparams ||
            fclose(f))
            die("cannot write %s: %s", path, strerror(errno));
    }
}
