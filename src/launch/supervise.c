/*
 * supervise.c - watching the ranks: rounds of the event loop over their streams and status
 * pipes (status.c), signals forwarded, ended ranks reaped, the grace after a failure, the
 * stop, --timeout.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>

#include "launch/launch.h"

static int sig_pipe[2];
static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
    int saved = errno;
    got_signal = sig;
    unsigned char b = (unsigned char)sig;
    if (write(sig_pipe[1], &b, 1) < 0) { /* pipe full: a wake-up is already pending */
    }
    errno = saved;
}

/* The signal pipe is readable: a signal arrived (got_signal says which). */
static void on_signal_pipe(chorus_loop *l, int fd, int revents, void *arg)
{
    (void)l, (void)revents, (void)arg;
    unsigned char b[64];
    while (read(fd, b, sizeof(b)) > 0) { /* drain wake-ups */
    }
}

int supervise_begin(job *j)
{
    if (!(j->loop = chorus__loop_new())) return -1;
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK)) return -1;
    if (chorus__loop_watch(j->loop, sig_pipe[0], POLLIN, on_signal_pipe, NULL)) return -1;
    run_catch_signals(on_signal);
    return 0;
}

/* Reaps ended workers and notices stopped (hung) or continued ones: a plain job records its
 * first failure; an elastic one poisons the failed worker's generation so the others re-form. */
static void reap(job *j, outcome *out)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
        if (pid <= 0) break;
        for (int r = 0; r < j->nw; r++) {
            worker *w = &j->w[r];
            if (w->pid != pid || !w->running) continue;
            if (WIFSTOPPED(status)) {
                w->stopped = w->was_stopped = 1;
                w->stopped_at = chorus__now();
                break;
            }
            if (WIFCONTINUED(status)) {
                w->stopped = 0;
                break;
            }
            w->running = 0;
            w->stopped = 0;
            if (w->s[0].demux) drain_worker(j, w); /* its agent's last lines: the rank's end */
            if (w->has_agent_status) status = w->agent_status;
            w->status = status;
            if (w->agent_in >= 0) close(w->agent_in);
            w->agent_in = -1;
            if (!j->elastic) {
                read_status(j, r, out); /* what it said before it ended */
                if (!out->stopping && failed_status(status) && w->st.expendable &&
                    !lost_the_servers(j, w)) {
                    tolerate(j, w, out);
                } else if (!out->stopping && failed_status(status)) {
                    w->failed_alone = 1;
                    note_failure(w, out, r, chorus__now());
                }
                break;
            }
            char how[128];
            describe_status(status, how, sizeof(how));
            if (w->leaving || out->stopping) break;
            if (!failed_status(status)) {
                j->completing = 1; /* a worker finished: the job is ending */
                break;
            }
            out->last_failed = r;
            j->unreplaced++;
            if (w->rank >= 0) poison(j, j->formed, w->rank);
            if (w->killed) break; /* kill_worker said why */
            elastic_failed(j, w, status, how);
        }
    }
}

static void stop_all(job *j, outcome *out, double now)
{
    out->stopping = 1;
    out->term_time = now;
    signal_all(j, SIGTERM);
}

/* A plain job whose only running ranks are stopped (SIGSTOP), every other rank having ended,
 * would wait for them for ever: after `grace` seconds so, each is said, and stopped: a failure
 * of the job, or, for a rank whose loss the job tolerates (an asynchronous parameter-server
 * worker that its servers already went on without), a loss it finished without. */
static void left_stopped(job *j, outcome *out, double now, double grace, double *since)
{
    int stopped = 0, ended = 0;
    for (int r = 0; r < j->nw; r++) {
        if (j->w[r].running && !j->w[r].stopped) {
            *since = 0;
            return;
        }
        stopped += j->w[r].running;
        ended += !j->w[r].running;
    }
    if (!stopped || !ended) {
        *since = 0;
        return;
    }
    if (!*since) *since = now;
    if (now - *since <= grace) return;
    for (int r = 0; r < j->nw; r++) {
        worker *w = &j->w[r];
        if (!w->running) continue;
        char name[320];
        fprintf(stderr,
                "chorus-run: %s is stopped (SIGSTOP?) and every other rank has ended; "
                "stopping it%s\n",
                rank_name(j, r, name, sizeof(name)),
                w->st.expendable ? ": the job finished without it (a parameter-server worker "
                                   "whose loss the job tolerates)"
                                 : "");
        if (w->st.expendable) {
            w->tolerated = 1;
            w->fail_time = now;
            if (out->tolerated < 0) out->tolerated = r;
        } else {
            note_failure(w, out, r, now);
        }
    }
    stop_all(j, out, now);
}

/* A SIGINT, SIGTERM or SIGHUP arrived: passed on to the ranks (a second one kills them). */
static void forward_signal(job *j, outcome *out)
{
    if (got_signal != SIGINT && got_signal != SIGTERM && got_signal != SIGHUP) return;
    int sig = got_signal;
    got_signal = 0;
    out->interrupted++;
    signal_all(j, out->interrupted > 1 ? SIGKILL : sig);
    if (!out->stopping) {
        out->stopping = 1;
        out->term_time = chorus__now();
    }
}

/* An elastic job's membership, and its end when too few workers are left. */
static void elastic_step(job *j, outcome *out, double now)
{
    int alive = count_alive(j);
    int rc = elastic_tick(j);
    if (!rc && alive == 0 && !j->completing && !(j->unreplaced > 0 && may_replace(j))) {
        int any_running = 0;
        for (int r = 0; r < j->nw; r++) any_running |= j->w[r].running;
        if (!any_running) {
            if (j->repeating)
                fprintf(stderr, "chorus-run: elastic: no worker is left; stopping (a "
                                "replacement failed as the worker before it did)\n");
            else
                fprintf(stderr,
                        "chorus-run: elastic: no worker is left; stopping "
                        "(--max-restarts %d reached)\n",
                        j->max_restarts);
            rc = 1;
        }
    }
    if (rc) {
        out->job_failed = 1;
        stop_all(j, out, now);
    }
}

/* Step 5: until every rank has ended and its output is drained, forwards output, signals and
 * failures: a plain job's ranks are stopped `grace` seconds after one fails; an elastic job
 * re-forms (elastic_tick). Stopping ranks get SIGKILL after 3 seconds. Returns -1 when
 * every rank has ended, 1 when the loop fails. */
int supervise(job *j, const run_opts *o, outcome *out)
{
    double start = j->started, all_stopped_since = 0;
    j->out = out;
    for (;;) {
        int open_streams = 0, running = 0;
        for (int r = 0; r < j->nw; r++) {
            running += j->w[r].running;
            open_streams += (j->w[r].s[0].fd >= 0) + (j->w[r].s[1].fd >= 0);
        }
        if (running == 0 && open_streams == 0) break;
        /* a round: the ranks' output, status lines and signals, or 100 ms without any */
        if (chorus__loop_run_once(j->loop, chorus__now() + 0.1) < 0) break;
        forward_signal(j, out);
        reap(j, out);
        double now = chorus__now();
        if (j->elastic && !out->stopping) elastic_step(j, out, now);
        if (!j->elastic && !out->stopping && running > 0)
            left_stopped(j, out, now, o->grace, &all_stopped_since);
        if (!j->elastic && out->failed >= 0 && !out->stopping && running > 0 &&
            now - out->fail_time > o->grace)
            stop_all(j, out, now);
        if (o->timeout > 0 && !out->stopping && running > 0 && now - start > o->timeout) {
            fprintf(stderr, "chorus-run: the job exceeded --timeout %gs; stopping all ranks\n",
                    o->timeout);
            out->timed_out = 1;
            stop_all(j, out, now);
        }
        if (out->stopping && running > 0 && now - out->term_time > 3) signal_all(j, SIGKILL);
    }
    j->out = NULL;
    return -1;
}
