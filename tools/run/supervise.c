/*
 * supervise.c - watching the ranks: the event loop over their streams and status pipes, signals
 * forwarded, ended ranks reaped, the grace after a failure, the stop, --timeout.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "run.h"

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

void signal_all(job *j, int sig)
{
    for (int i = 0; i < j->nw; i++)
        if (j->w[i].running && j->w[i].agent_in >= 0 && sig != SIGKILL) {
            /* A remote rank: its agent forwards the signal. Signalling the remote shell here
             * would only cut the connection (ssh does not pass signals on). */
            run_agent_signal(j->w[i].agent_in, sig);
        } else if (j->w[i].running) {
            /* Each rank leads its own process group: signal the whole group, so that a
             * rank started through a shell script does not leave its children running (and
             * holding the output pipes open). */
            if (kill(-j->w[i].pid, sig)) kill(j->w[i].pid, sig);
            if (sig == SIGTERM && j->w[i].stopped) kill(-j->w[i].pid, SIGCONT);
        }
}

/* A worker whose process has ended is not left, even before the event loop reaps it (workers
 * that end together are reaped one at a time): waitid with WNOWAIT looks without reaping. */
static int has_ended(const worker *w)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           si.si_pid == w->pid;
}

int count_alive(const job *j)
{
    int n = 0;
    for (int i = 0; i < j->nw; i++) n += j->w[i].running && !j->w[i].leaving;
    return n;
}

/* The workers still running at this instant (count_alive counts those not yet reaped). */
int count_left(const job *j)
{
    int n = 0;
    for (int i = 0; i < j->nw; i++)
        n += j->w[i].running && !j->w[i].leaving && !has_ended(&j->w[i]);
    return n;
}

/* A rank of a plain job failed at time now (an error reported, or an exit): the first
 * failure starts the grace the others get before they are stopped. */
static void note_failure(worker *w, outcome *out, int index, double now)
{
    if (!w->fail_time) w->fail_time = now;
    if (out->failed < 0 && !out->stopping) {
        out->failed = index;
        out->fail_time = now;
    }
}

/* Did expendable worker w fail because it lost a rank that is not expendable (a parameter
 * server that died, or stopped responding), with no other expendable rank left running or
 * finished? Then the job cannot go on: no worker is left to serve, and going on would wait
 * for ever for a stopped server. (While another worker runs, a worker cut off from the
 * servers is a loss the job tolerates: the servers go on with the others.) */
static int lost_the_servers(const job *j, const worker *w)
{
    int b = w->st.blamed, needed = 0;
    if (!w->st.reported || b < 0 || b == w->wid) return 0;
    for (int r = 0; r < j->nw; r++)
        if (j->w[r].wid == b) needed = !j->w[r].st.expendable;
    if (!needed) return 0;
    for (int r = 0; r < j->nw; r++) {
        const worker *o = &j->w[r];
        if (o == w || !o->st.expendable) continue;
        if (o->running || (!o->tolerated && !failed_status(o->status))) return 0;
    }
    return 1;
}

/* Takes the complete lines of what a rank wrote on its status pipe (here, or relayed by its
 * agent): "failed <rank> <blamed> <result>" lines (base/status.h). The first one counts. */
static void parse_status(job *j, int index, outcome *out)
{
    worker *w = &j->w[index];
    status_pipe *p = &w->st;
    char *nl;
    while ((nl = strchr(p->buf, '\n'))) {
        *nl = 0;
        int rank, blamed;
        char what[48];
        if (!p->reported && sscanf(p->buf, "failed %d %d %47s", &rank, &blamed, what) == 3) {
            p->reported = 1;
            p->blamed = blamed;
            snprintf(p->what, sizeof(p->what), "%s", what);
            /* an expendable rank's failure is its own end's: the job may go on without it */
            if (!j->elastic && !p->expendable) note_failure(w, out, index, chorus__now());
        } else if (sscanf(p->buf, "expendable %d", &rank) == 1) {
            p->expendable = 1;
        }
        p->len -= (size_t)(nl + 1 - p->buf);
        memmove(p->buf, nl + 1, p->len + 1);
    }
}

/* Reads what a rank wrote on its status pipe, and takes its lines (parse_status). */
static void read_status(job *j, int index, outcome *out)
{
    worker *w = &j->w[index];
    status_pipe *p = &w->st;
    if (w->s[0].demux) { /* relayed by its agent on its stdout */
        drain_worker(j, w);
        parse_status(j, index, out);
        return;
    }
    while (p->fd >= 0) {
        ssize_t r = read(p->fd, p->buf + p->len, sizeof(p->buf) - 1 - p->len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) break;
        if (r <= 0 || p->len + (size_t)r >= sizeof(p->buf) - 1) {
            chorus__loop_unwatch(j->loop, p->fd);
            close(p->fd); /* end of file, or a rank that writes garbage: stop listening */
            p->fd = -1;
            break;
        }
        p->len += (size_t)r;
        p->buf[p->len] = 0;
        parse_status(j, index, out);
    }
}

/* A stream or the status pipe of a worker is readable (or at its end). */
static void on_worker_fd(chorus_loop *l, int fd, int revents, void *arg)
{
    (void)l, (void)revents;
    job *j = arg;
    for (int r = 0; r < j->nw; r++) {
        worker *w = &j->w[r];
        if (fd == w->st.fd)
            read_status(j, r, j->out);
        else if (fd == w->s[0].fd || fd == w->s[1].fd)
            pump(j, w, fd == w->s[1].fd);
        else
            continue;
        if (w->s[0].demux) parse_status(j, r, j->out);
        return;
    }
}

void watch_worker(job *j, worker *w)
{
    /* The status pipe is watched but not awaited: a rank's children may hold it open. */
    int fds[3] = {w->s[0].fd, w->s[1].fd, w->st.fd};
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0) chorus__loop_watch(j->loop, fds[i], POLLIN, on_worker_fd, j);
}

void unwatch_workers(job *j)
{
    for (int r = 0; r < j->nw; r++) {
        chorus__loop_unwatch(j->loop, j->w[r].s[0].fd);
        chorus__loop_unwatch(j->loop, j->w[r].s[1].fd);
        chorus__loop_unwatch(j->loop, j->w[r].st.fd);
    }
}

/* An expendable rank of a plain job failed (an asynchronous parameter-server worker): the job
 * goes on without it, as the job itself does, and the summary names it at the end. */
static void tolerate(job *j, worker *w, outcome *out)
{
    char how[128], name[320];
    w->tolerated = 1;
    w->fail_time = chorus__now();
    if (out->tolerated < 0) out->tolerated = (int)(w - j->w);
    describe_status(w->status, how, sizeof(how));
    fprintf(stderr,
            "chorus-run: %s %s; the job goes on without it (it declared that the job tolerates "
            "its loss: a parameter-server worker in async or ssp mode)\n",
            rank_name(j, (int)(w - j->w), name, sizeof(name)), how);
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
