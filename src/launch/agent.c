/*
 * agent.c - chorus-run --agent: runs one rank on another host for the launcher, relaying its
 * output, status lines and end as framed lines on stdout, and the launcher's signals to it
 * (the protocol is described in run.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "launch/launch.h"

#define AGENT_STOP_GRACE_S 2.0 /* launcher gone: SIGTERM, then SIGKILL after this */
#define AGENT_DRAIN_S      1.0 /* after the rank ended: what its pipes still hold, this long */

/* ---- the agent -------------------------------------------------------------------------- */

static int agent_sig_pipe[2] = {-1, -1};

static void agent_on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(agent_sig_pipe[1], &b, 1) < 0) { /* full: a wake-up is pending */
    }
    errno = saved;
}

/* The agent's stdin: the description, then commands; what was read past the description
 * stays in buf for the commands. */
typedef struct agent_in {
    char buf[65536];
    size_t len, pos;
    int eof;
} agent_in;

/* The next NUL-terminated string of the description (NULL at EOF or when too long). */
static char *next_str(agent_in *in)
{
    for (;;) {
        char *z = memchr(in->buf + in->pos, 0, in->len - in->pos);
        if (z) {
            char *s = in->buf + in->pos;
            in->pos = (size_t)(z - in->buf) + 1;
            return s;
        }
        if (in->eof) return NULL;
        if (in->pos > 0 && in->len == sizeof(in->buf)) return NULL; /* kept strings fill it */
        ssize_t r = read(0, in->buf + in->len, sizeof(in->buf) - in->len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) in->eof = 1;
        if (r > 0) in->len += (size_t)r;
    }
}

/* One framed line on stdout: tag, space, the payload, newline. -1 when the launcher is gone. */
static int frame(char tag, const char *s, size_t n)
{
    char head[2] = {tag, ' '};
    if (run_write_all(1, head, 2) || run_write_all(1, s, n) || run_write_all(1, "\n", 1)) return -1;
    return 0;
}

/* A pipe of the rank that the agent splits into lines. */
typedef struct relay {
    int fd;
    char tag;
    char buf[16384];
    size_t len;
} relay;

static void frame_line(void *tag, const char *s, size_t n)
{
    frame(*(char *)tag, s, n);
}

/* Reads what fd has and frames its complete lines; 0 at its end. */
static int relay_pump(relay *r)
{
    ssize_t n = read(r->fd, r->buf + r->len, sizeof(r->buf) - r->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (n <= 0) {
        if (r->len) frame(r->tag, r->buf, r->len);
        r->len = 0;
        close(r->fd);
        r->fd = -1;
        return 0;
    }
    r->len = run_lines(r->buf, r->len + (size_t)n, sizeof(r->buf), frame_line, &r->tag);
    return 1;
}

/* Commands on stdin after the description: "signal N" lines. Returns 0 at its end. The
 * description's strings, which the rank has been started with, are overwritten here. */
static int agent_commands(agent_in *in, pid_t rank)
{
    if (in->pos > 0) {
        memmove(in->buf, in->buf + in->pos, in->len - in->pos);
        in->len -= in->pos;
        in->pos = 0;
    }
    ssize_t r = in->eof ? 0 : read(0, in->buf + in->len, sizeof(in->buf) - 1 - in->len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (r <= 0) return 0;
    in->len += (size_t)r;
    in->buf[in->len] = 0;
    char *nl;
    while ((nl = memchr(in->buf, '\n', in->len))) {
        *nl = 0;
        int sig;
        if (sscanf(in->buf, "signal %d", &sig) == 1 && sig > 0 && sig < 65) {
            if (kill(-rank, sig)) kill(rank, sig);
            if (sig == SIGTERM) kill(-rank, SIGCONT);
        }
        in->len -= (size_t)(nl + 1 - in->buf);
        memmove(in->buf, nl + 1, in->len);
    }
    if (in->len >= sizeof(in->buf) - 1) in->len = 0; /* a line that never ends: drop it */
    return 1;
}

/* The received variables on top of this host's environment. */
static char **agent_env(char **recv, int nrecv, int status_fd)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **envp = calloc(n + (size_t)nrecv + 2, sizeof(char *));
    if (!envp) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t name = eq ? (size_t)(eq - environ[i]) + 1 : strlen(environ[i]);
        int replaced = !strncmp(environ[i], "CHORUS_STATUS_FD=", 17);
        for (int r = 0; r < nrecv && !replaced; r++) replaced = !strncmp(recv[r], environ[i], name);
        if (!replaced) envp[k++] = environ[i];
    }
    for (int r = 0; r < nrecv; r++) envp[k++] = recv[r];
    static char fdvar[40];
    snprintf(fdvar, sizeof(fdvar), "CHORUS_STATUS_FD=%d", status_fd);
    envp[k++] = fdvar;
    return envp;
}

/* Exits as the rank did: its exit status, or the signal that killed it. */
static int exit_like(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        kill(getpid(), sig);
        return 128 + sig;
    }
    return 1;
}

/* The job an agent received. Its strings live in in->buf. */
typedef struct agent_job {
    const char *label;
    char host[256];
    agent_in *in;
    const char *cwd;
    char **argv; /* the program and its arguments, NULL-terminated */
    char **env;  /* the rank's variables from the launcher */
    int nenv;
} agent_job;

/* Reads the description on stdin into a (see run.h). 0, or 2 with the reason said. */
static int agent_read_job(agent_job *a)
{
    char *s = next_str(a->in);
    if (!s || strcmp(s, AGENT_MAGIC)) {
        fprintf(stderr,
                "chorus-run --agent %s: expected a job description from chorus-run on stdin "
                "(this mode is started by chorus-run -H over the remote shell)\n",
                a->label);
        return 2;
    }
    char *count;
    long nargs = 0;
    a->cwd = next_str(a->in);
    count = next_str(a->in);
    if (!a->cwd || !count || chorus__parse_int(count, 1, 1 << 20, &nargs)) {
        fprintf(stderr, "chorus-run --agent %s: malformed job description\n", a->label);
        return 2;
    }
    a->argv = calloc((size_t)nargs + 1, sizeof(char *));
    a->env = calloc(4096, sizeof(char *));
    if (!a->argv || !a->env) {
        fprintf(stderr, "chorus-run --agent %s: out of memory\n", a->label);
        return 2;
    }
    for (long i = 0; i < nargs; i++)
        if (!(a->argv[i] = next_str(a->in))) {
            fprintf(stderr, "chorus-run --agent %s: malformed job description\n", a->label);
            return 2;
        }
    for (;;) {
        char *v = next_str(a->in);
        if (!v) {
            fprintf(stderr, "chorus-run --agent %s: the job description ended early\n", a->label);
            return 2;
        }
        if (!*v) return 0;
        if (a->nenv < 4095) a->env[a->nenv++] = v;
    }
}

/* Starts the rank with its streams on out, errp and stp (the parent's ends are closed here).
 * Returns its pid, or -1 with the reason said. */
static pid_t agent_start_rank(agent_job *a, int out[2], int errp[2], int stp[2])
{
    char **envp = agent_env(a->env, a->nenv, stp[1]);
    if (!envp) return -1;
    char execfail[300];
    snprintf(execfail, sizeof(execfail), "chorus-run: cannot run '%s' on %s (exec failed)\n",
             a->argv[0], a->host);
    /* The rank dies with its agent: nothing is left on this host when the agent is killed.
     * The launcher's commands on the agent's stdin are not the rank's. */
    run_child c = {.argv = a->argv,
                   .envp = envp,
                   .in = RUN_DEVNULL,
                   .out = out[1],
                   .err = errp[1],
                   .keep = stp[1],
                   .death_sig = SIGKILL,
                   .execfail = execfail};
    pid_t pid = spawn_process(&c);
    if (pid < 0) perror("chorus-run --agent: fork");
    free(envp);
    close(out[1]);
    close(errp[1]);
    close(stp[1]);
    return pid;
}

/* What the agent's loop works on while the rank runs. */
typedef struct agent_state {
    agent_in *in;
    pid_t pid;
    int running;
    relay *r; /* the rank's stdout, stderr and status pipe */
} agent_state;

/* A pipe of the rank is readable, or at its end. */
static void on_relay(chorus_loop *l, int fd, int revents, void *arg)
{
    (void)revents;
    relay *r = arg;
    if (!relay_pump(r)) chorus__loop_unwatch(l, fd);
}

/* The rank has not ended AGENT_STOP_GRACE_S after the launcher went. */
static void on_stop_grace(chorus_loop *l, void *arg)
{
    (void)l;
    agent_state *a = arg;
    if (a->running) kill(-a->pid, SIGKILL);
}

/* A command from the launcher on stdin, or its end. */
static void on_commands(chorus_loop *l, int fd, int revents, void *arg)
{
    (void)revents;
    agent_state *a = arg;
    if (agent_commands(a->in, a->pid)) return;
    chorus__loop_unwatch(l, fd); /* the launcher, or its connection, is gone: stop the rank */
    if (a->running) kill(-a->pid, SIGTERM), kill(-a->pid, SIGCONT);
    chorus__loop_timer(l, chorus__now() + AGENT_STOP_GRACE_S, on_stop_grace, a);
}

/* A signal for the agent: passed on to the rank (SIGCHLD only wakes the loop). */
static void on_agent_signal(chorus_loop *l, int fd, int revents, void *arg)
{
    (void)l, (void)revents;
    agent_state *a = arg;
    unsigned char b[64];
    ssize_t got;
    while ((got = read(fd, b, sizeof(b))) > 0)
        for (ssize_t q = 0; q < got; q++)
            if (b[q] != SIGCHLD && a->running) kill(-a->pid, b[q]);
}

/* Relays the rank's pipes (r: stdout, stderr, status) as frames and the launcher's commands
 * to the rank until the rank has ended and its pipes are drained (or AGENT_DRAIN_S passed).
 * The end of stdin stops the rank: SIGTERM, SIGKILL after AGENT_STOP_GRACE_S. Returns the
 * rank's wait status. */
static int agent_relay(agent_in *in, pid_t pid, relay r[3])
{
    agent_state a = {.in = in, .pid = pid, .running = 1, .r = r};
    int status = 0;
    double ended_at = 0;
    chorus_loop *l = chorus__loop_new();
    int watched = l && !chorus__loop_watch(l, agent_sig_pipe[0], POLLIN, on_agent_signal, &a) &&
                  !chorus__loop_watch(l, 0, POLLIN, on_commands, &a);
    for (int i = 0; watched && i < 3; i++)
        if (r[i].fd >= 0) watched = !chorus__loop_watch(l, r[i].fd, POLLIN, on_relay, &r[i]);
    if (!watched) { /* out of memory: the rank cannot be relayed */
        perror("chorus-run --agent");
        chorus__loop_free(l);
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        return status;
    }
    for (;;) {
        int open_relays = (r[0].fd >= 0) + (r[1].fd >= 0);
        if (!a.running && (open_relays == 0 || chorus__now() - ended_at > AGENT_DRAIN_S)) break;
        if (chorus__loop_run_once(l, chorus__now() + 0.1) < 0) break;
        int st;
        while (a.running && waitpid(pid, &st, WNOHANG | WUNTRACED | WCONTINUED) == pid) {
            if (WIFSTOPPED(st) || WIFCONTINUED(st)) { /* the launcher tracks a hung rank */
                frame(WIFSTOPPED(st) ? 'T' : 'C', "", 0);
                continue;
            }
            status = st;
            a.running = 0;
            ended_at = chorus__now();
        }
    }
    chorus__loop_free(l);
    for (int i = 0; i < 3; i++)
        if (r[i].fd >= 0) relay_pump(&r[i]);
    return status;
}

int run_agent_main(int argc, char **argv)
{
    agent_job a = {.label = argc > 2 ? argv[2] : "?", .host = "?"};
    gethostname(a.host, sizeof(a.host) - 1);
    int rc = 1, out[2], errp[2], stp[2];
    a.in = calloc(1, sizeof(*a.in));
    if (a.in) rc = agent_read_job(&a);
    if (rc) goto done;
    if (chdir(a.cwd))
        fprintf(stderr,
                "chorus-run --agent %s: cannot enter %s on %s (%s); running where the remote "
                "shell started\n",
                a.label, a.cwd, a.host, strerror(errno));
    rc = 1;
    if (pipe2(agent_sig_pipe, O_CLOEXEC | O_NONBLOCK) || pipe2(out, O_CLOEXEC) ||
        pipe2(errp, O_CLOEXEC) || pipe2(stp, O_CLOEXEC | O_NONBLOCK)) {
        perror("chorus-run --agent: pipe");
        goto done;
    }
    run_catch_signals(agent_on_signal);
    pid_t pid = agent_start_rank(&a, out, errp, stp);
    if (pid < 0) goto done;
    char line[32];
    int n = snprintf(line, sizeof(line), "%d", (int)pid);
    frame('P', line, (size_t)n);
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    relay r[3] = {
        {.fd = out[0], .tag = '1'}, {.fd = errp[0], .tag = '2'}, {.fd = stp[0], .tag = 'S'}};
    int status = agent_relay(a.in, pid, r);
    kill(-pid, SIGKILL); /* what the rank left behind in its process group */
    n = snprintf(line, sizeof(line), "%d", status);
    frame('X', line, (size_t)n);
    free(a.argv);
    free(a.env);
    free(a.in);
    return exit_like(status);
done:
    free(a.argv);
    free(a.env);
    free(a.in);
    return rc;
}
