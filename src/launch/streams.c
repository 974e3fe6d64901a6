/*
 * streams.c - the ranks' output: lines prefixed with the rank, --log-dir files, the last lines
 * kept for the failure summary, and the agent's framed lines taken apart.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "launch/launch.h"

/* Writes one line of a rank's output, and keeps it in t. */
int run_rank_base;

static void emit(stream *s, tail *t, int rank, int prefix, const char *line, size_t n)
{
    if (n < TAIL_WIDTH)
        snprintf(t->line[t->next], TAIL_WIDTH, "%.*s", (int)n, line);
    else /* the first bytes, and how much is missing (the whole line went to the console) */
        snprintf(t->line[t->next], TAIL_WIDTH, "%.*s... [cut: the line has %zu bytes]",
                 TAIL_WIDTH - 64, line, n);
    t->next = (t->next + 1) % TAIL_LINES;
    if (t->count < TAIL_LINES) t->count++;
    if (s->out && prefix)
        fprintf(s->out, "[%d] %.*s\n", rank + run_rank_base, (int)n, line);
    else if (s->out)
        fprintf(s->out, "%.*s\n", (int)n, line);
    if (s->log) fprintf(s->log, "%.*s\n", (int)n, line);
    size_t blank = 0;
    while (blank < n && (line[blank] == ' ' || line[blank] == '\t' || line[blank] == '\r')) blank++;
    if (blank < n) snprintf(s->last, sizeof(s->last), "%.*s", (int)n, line);
}

/* A line of stream s: on the console and in the log, or, for a remote rank's agent, routed by
 * its tag (run.h): the rank's stdout and stderr lines, its status-pipe lines (kept
 * for read_status), its pid, its stops and continues, and its end. */
static void deliver(stream *s, tail *t, int rank, int prefix, const char *line, size_t n)
{
    worker *w = s->demux;
    if (!w || n < 2 || line[1] != ' ') {
        emit(s, t, rank, prefix, line, n);
        return;
    }
    const char *v = line + 2;
    size_t vn = n - 2;
    status_pipe *p = &w->st;
    switch (line[0]) {
    case '1': emit(&w->s[0], t, rank, prefix, v, vn); break;
    case '2': emit(&w->s[1], t, rank, prefix, v, vn); break;
    case 'S':
        if (p->len + vn + 2 < sizeof(p->buf)) {
            memcpy(p->buf + p->len, v, vn);
            p->len += vn;
            p->buf[p->len++] = '\n';
            p->buf[p->len] = 0;
        }
        break;
    case 'P': w->remote_pid = (pid_t)atoi(v); break;
    case 'X':
        w->agent_status = atoi(v);
        w->has_agent_status = 1;
        break;
    case 'T': /* as reap() notes a rank of this host stopped or continued */
        w->stopped = w->was_stopped = 1;
        w->stopped_at = chorus__now();
        break;
    case 'C': w->stopped = 0; break;
    default: emit(s, t, rank, prefix, line, n);
    }
}

/* Flushes what was written for s, so that the console and the log file follow the rank line
 * by line. */
static void flush_stream(stream *s)
{
    if (s->out) fflush(s->out);
    if (s->log) fflush(s->log);
}

typedef struct pump_ctx {
    stream *s;
    tail *t;
    int rank, prefix;
} pump_ctx;

static void deliver_line(void *ctx, const char *line, size_t n)
{
    pump_ctx *c = ctx;
    deliver(c->s, c->t, c->rank, c->prefix, line, n);
}

/* Reads what is available; writes complete lines. Returns 0 at EOF. */
int pump(job *j, worker *w, int stream_index)
{
    stream *s = &w->s[stream_index];
    tail *t = &w->tail;
    int rank = w->wid, prefix = j->prefix;
    ssize_t r = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (r <= 0) {
        if (s->len) deliver(s, t, rank, prefix, s->buf, s->len);
        s->len = 0;
        flush_stream(s);
        if (s->log) fclose(s->log);
        s->log = NULL;
        if (j->loop) chorus__loop_unwatch(j->loop, s->fd);
        close(s->fd);
        s->fd = -1;
        return 0;
    }
    pump_ctx c = {s, t, rank, prefix};
    s->len = run_lines(s->buf, s->len + (size_t)r, sizeof(s->buf), deliver_line, &c);
    flush_stream(s);
    return 1;
}

/* --log-dir: opens DIR/attempt_<n>/<worker>/<name>.log for a stream of worker wid. */
static FILE *open_log(const job *j, int wid, const char *name)
{
    char dir[4096], path[4160];
    snprintf(dir, sizeof(dir), "%s/attempt_%d/%d", j->log_dir, j->attempt, wid);
    snprintf(path, sizeof(path), "%s/%s.log", dir, name);
    FILE *f = chorus__mkdir_p(dir) ? NULL : fopen(path, "we");
    if (!f) fprintf(stderr, "chorus-run: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

/* With --log-dir, where the streams of worker w go: a file each (streams named by
 * --redirects only there, those named by --tee there and on the console). A file that cannot
 * be written leaves its stream on the console, after a line saying so. */
void route_streams(const job *j, worker *w)
{
    static const char *const names[2] = {"stdout", "stderr"};
    for (int s = 0; s < 2 && j->log_dir; s++) {
        int bit = 1 << s;
        if (!((j->redirects | j->tee) & bit)) continue;
        w->s[s].log = open_log(j, w->wid, names[s]);
        if (w->s[s].log && (j->redirects & bit) && !(j->tee & bit)) w->s[s].out = NULL;
    }
}

/* Pumps what the pipes of an ended worker still hold, so that its last line is known. */
void drain_worker(job *j, worker *w)
{
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 64 && w->s[s].fd >= 0; i++) {
            struct pollfd p = {.fd = w->s[s].fd, .events = POLLIN};
            if (poll(&p, 1, 0) <= 0) break;
            pump(j, w, s);
        }
}
