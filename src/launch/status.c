/*
 * status.c - what the ranks say: each worker's streams and status pipe watched by the
 * supervision loop, and the status-pipe lines (base/status.h) taken into the outcome of the
 * run: who failed first, whom it blamed, who is expendable.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "launch/launch.h"

/* A rank of a plain job failed at time now (an error reported, or an exit): the first
 * failure starts the grace the others get before they are stopped. */
void note_failure(worker *w, outcome *out, int index, double now)
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
int lost_the_servers(const job *j, const worker *w)
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
        int end = 0;
        if (!p->reported &&
            sscanf(p->buf, "failed %d %d %47s%n", &rank, &blamed, what, &end) == 3) {
            p->reported = 1;
            const char *why = p->buf + end;
            while (*why == ' ') why++;
            snprintf(p->why, sizeof(p->why), "%s", why);
            p->blamed = blamed;
            if (j->nnodes > 1) { /* global ranks: this node's as its workers, others apart */
                p->blamed = blamed >= j->base && blamed < j->base + j->np ? blamed - j->base : -1;
                if (blamed >= 0 && p->blamed < 0) p->blamed_far = blamed;
            }
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
void read_status(job *j, int index, outcome *out)
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
void tolerate(job *j, worker *w, outcome *out)
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
