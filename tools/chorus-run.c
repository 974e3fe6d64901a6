/*
 * chorus-run - starts the ranks of a Chorus job on this host.
 *
 *   chorus-run -np N [options] [--] program [args...]
 *
 * Serves the rendezvous store, starts N processes with their CHORUS_* environment, prefixes
 * each output line with the rank, forwards SIGINT/SIGTERM, and when one rank fails gives the
 * others a moment to report the failure, stops them, and exits with the failing rank's status
 * and a line saying which rank failed and how.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "bootstrap/store.h"

typedef struct stream {
    int fd;
    FILE *out;
    char buf[65536];
    size_t len;
} stream;

typedef struct rank_proc {
    pid_t pid;
    int running;
    int status;
    stream s[2]; /* stdout, stderr */
} rank_proc;

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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chorus-run -np N [options] [--] program [args...]\n"
            "\n"
            "Starts N ranks of a Chorus job on this host.\n"
            "\n"
            "options:\n"
            "  -np N, -n N      number of ranks (required)\n"
            "  --no-prefix      do not prefix output lines with [rank]\n"
            "  --timeout S      stop the whole job after S seconds (exit status 124)\n"
            "  --grace S        after a rank fails, give the others S seconds to exit on their own\n"
            "                   before stopping them (default 5)\n"
            "  --help-env       print the CHORUS_* environment variables and their defaults\n"
            "  -h, --help       this help\n");
}

static void help_env(void)
{
    printf("%-26s %-12s %s\n", "VARIABLE", "DEFAULT", "MEANING");
    for (const chorus_cfg_entry *e = chorus__cfg_table(); e->name; e++)
        printf("%-26s %-12s %s\n", e->name, e->def ? e->def : "-", e->help);
}

/* Is prog something execvp can run? Sets *why when not. */
static int runnable(const char *prog, char *why, size_t len)
{
    struct stat st;
    if (strchr(prog, '/')) {
        if (stat(prog, &st)) {
            snprintf(why, len, "%s", strerror(errno));
            return 0;
        }
        if (S_ISDIR(st.st_mode) || access(prog, X_OK)) {
            snprintf(why, len, "%s", S_ISDIR(st.st_mode) ? "is a directory" : "is not executable");
            return 0;
        }
        return 1;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    char *copy = strdup(path), *save = NULL;
    int found = 0, noexec = 0;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char full[4096];
        snprintf(full, sizeof(full), "%s/%s", *d ? d : ".", prog);
        if (stat(full, &st) == 0 && !S_ISDIR(st.st_mode)) {
            if (access(full, X_OK) == 0)
                found = 1;
            else
                noexec = 1;
        }
    }
    free(copy);
    if (!found) snprintf(why, len, "%s", noexec ? "is not executable" : "command not found in PATH");
    return found;
}

static void emit(stream *s, int rank, int prefix, const char *line, size_t n)
{
    if (prefix)
        fprintf(s->out, "[%d] %.*s\n", rank, (int)n, line);
    else
        fprintf(s->out, "%.*s\n", (int)n, line);
}

/* Reads what is available; writes complete lines. Returns 0 at EOF. */
static int pump(stream *s, int rank, int prefix)
{
    ssize_t r = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (r <= 0) {
        if (s->len) emit(s, rank, prefix, s->buf, s->len);
        s->len = 0;
        fflush(s->out);
        close(s->fd);
        s->fd = -1;
        return 0;
    }
    s->len += (size_t)r;
    size_t start = 0;
    for (size_t i = 0; i < s->len; i++)
        if (s->buf[i] == '\n') {
            emit(s, rank, prefix, s->buf + start, i - start);
            start = i + 1;
        }
    if (start == 0 && s->len == sizeof(s->buf)) { /* a very long line: pass it on in pieces */
        emit(s, rank, prefix, s->buf, s->len);
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    fflush(s->out);
    return 1;
}

static void describe_status(int status, char *out, size_t len)
{
    if (WIFEXITED(status))
        snprintf(out, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, len, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(out, len, "ended with wait status %d", status);
}

static int exit_code(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

static void signal_all(rank_proc *p, int n, int sig)
{
    for (int i = 0; i < n; i++)
        if (p[i].running) kill(p[i].pid, sig);
}

int main(int argc, char **argv)
{
    int np = -1, prefix = 1, ai = 1;
    double timeout = 0, grace = 5;
    for (; ai < argc; ai++) {
        const char *a = argv[ai];
        if (!strcmp(a, "--")) {
            ai++;
            break;
        } else if ((!strcmp(a, "-np") || !strcmp(a, "-n") || !strcmp(a, "--np")) && ai + 1 < argc) {
            char *end;
            np = (int)strtol(argv[++ai], &end, 10);
            if (*end || np < 1 || np > 4096) {
                fprintf(stderr, "chorus-run: -np needs a number of ranks from 1 to 4096, not '%s'\n",
                        argv[ai]);
                return 2;
            }
        } else if (!strcmp(a, "--no-prefix")) {
            prefix = 0;
        } else if (!strcmp(a, "--timeout") && ai + 1 < argc) {
            timeout = atof(argv[++ai]);
        } else if (!strcmp(a, "--grace") && ai + 1 < argc) {
            grace = atof(argv[++ai]);
        } else if (!strcmp(a, "--help-env")) {
            help_env();
            return 0;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-') {
            fprintf(stderr, "chorus-run: unknown option '%s' (see chorus-run --help)\n", a);
            return 2;
        } else {
            break;
        }
    }
    if (np < 1 || ai >= argc) {
        usage(stderr);
        fprintf(stderr, "\nchorus-run: %s\n", np < 1 ? "-np N is required" : "no program given");
        return 2;
    }
    char why[256];
    if (!runnable(argv[ai], why, sizeof(why))) {
        fprintf(stderr, "chorus-run: cannot run '%s': %s\n", argv[ai], why);
        return 127;
    }

    /* job id and store */
    unsigned char rnd[8] = {0};
    int ufd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (ufd >= 0) {
        if (read(ufd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd)) memset(rnd, 0, sizeof(rnd));
        close(ufd);
    }
    char job[64];
    snprintf(job, sizeof(job), "run-%d-%02x%02x%02x%02x%02x%02x", (int)getpid(), rnd[0], rnd[1],
             rnd[2], rnd[3], rnd[4], rnd[5]);
    chorus_store_server *server = NULL;
    chorus_errbuf err;
    int port = 0;
    if (np > 1 && chorus__store_server_start("127.0.0.1", 0, &server, &port, &err) != CHORUS_OK) {
        fprintf(stderr, "chorus-run: cannot start the rendezvous store: %s\n", err.msg);
        return 1;
    }
    char store[64];
    snprintf(store, sizeof(store), "127.0.0.1:%d", port);

    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK)) return 1;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    rank_proc *p = calloc((size_t)np, sizeof(rank_proc));
    if (!p) return 1;
    for (int r = 0; r < np; r++) {
        int out[2], errp[2];
        if (pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
            perror("chorus-run: pipe");
            signal_all(p, r, SIGKILL);
            return 1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("chorus-run: fork");
            signal_all(p, r, SIGKILL);
            return 1;
        }
        if (pid == 0) {
            dup2(out[1], 1);
            dup2(errp[1], 2);
            setpgid(0, 0); /* terminal signals reach the launcher, which forwards them */
            char v[32];
            snprintf(v, sizeof(v), "%d", r);
            setenv("CHORUS_RANK", v, 1);
            setenv("CHORUS_LOCAL_RANK", v, 1);
            snprintf(v, sizeof(v), "%d", np);
            setenv("CHORUS_SIZE", v, 1);
            setenv("CHORUS_LOCAL_SIZE", v, 1);
            setenv("CHORUS_STORE_ADDR", store, 1);
            setenv("CHORUS_JOB_ID", job, 1);
            signal(SIGPIPE, SIG_DFL);
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            execvp(argv[ai], argv + ai);
            fprintf(stderr, "chorus-run: cannot run '%s': %s\n", argv[ai], strerror(errno));
            _exit(127);
        }
        close(out[1]);
        close(errp[1]);
        p[r].pid = pid;
        p[r].running = 1;
        p[r].s[0] = (stream){.fd = out[0], .out = stdout};
        p[r].s[1] = (stream){.fd = errp[0], .out = stderr};
    }

    int running = np, failed = -1, stopping = 0, timed_out = 0, interrupted = 0;
    double start = chorus__now(), fail_time = 0, term_time = 0;
    struct pollfd *pf = calloc((size_t)(2 * np + 1), sizeof(*pf));
    int *who = calloc((size_t)(2 * np + 1), sizeof(int));
    for (;;) {
        int open_streams = 0;
        int k = 0;
        pf[k++] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
        for (int r = 0; r < np; r++)
            for (int s = 0; s < 2; s++)
                if (p[r].s[s].fd >= 0) {
                    who[k] = r * 2 + s;
                    pf[k++] = (struct pollfd){.fd = p[r].s[s].fd, .events = POLLIN};
                    open_streams++;
                }
        if (running == 0 && open_streams == 0) break;
        int n = poll(pf, (nfds_t)k, 100);
        if (n < 0 && errno != EINTR) break;
        for (int i = 1; i < k; i++)
            if (pf[i].revents) pump(&p[who[i] / 2].s[who[i] % 2], who[i] / 2, prefix);
        if (pf[0].revents) {
            unsigned char b[64];
            while (read(sig_pipe[0], b, sizeof(b)) > 0) { /* drain wake-ups */
            }
        }
        if (got_signal == SIGINT || got_signal == SIGTERM || got_signal == SIGHUP) {
            int sig = got_signal;
            got_signal = 0;
            interrupted++;
            signal_all(p, np, interrupted > 1 ? SIGKILL : sig);
            if (!stopping) {
                stopping = 1;
                term_time = chorus__now();
            }
        }
        /* reap */
        for (;;) {
            int status;
            pid_t pid = waitpid(-1, &status, WNOHANG);
            if (pid <= 0) break;
            for (int r = 0; r < np; r++)
                if (p[r].pid == pid && p[r].running) {
                    p[r].running = 0;
                    p[r].status = status;
                    running--;
                    int bad = !WIFEXITED(status) || WEXITSTATUS(status);
                    if (failed < 0 && !stopping && bad) {
                        failed = r;
                        fail_time = chorus__now();
                    } else if (failed >= 0 && !stopping && WIFSIGNALED(status) &&
                               WIFEXITED(p[failed].status)) {
                        /* Survivors exit with an error because a peer died; which of them
                         * is reaped first is chance. A rank killed by a signal that nobody
                         * here sent is the root cause. */
                        failed = r;
                    }
                }
        }
        double now = chorus__now();
        if (failed >= 0 && !stopping && running > 0 && now - fail_time > grace) {
            stopping = 1;
            term_time = now;
            signal_all(p, np, SIGTERM);
        }
        if (timeout > 0 && !stopping && running > 0 && now - start > timeout) {
            fprintf(stderr, "chorus-run: the job exceeded --timeout %gs; stopping all ranks\n",
                    timeout);
            timed_out = 1;
            stopping = 1;
            term_time = now;
            signal_all(p, np, SIGTERM);
        }
        if (stopping && running > 0 && now - term_time > 3) signal_all(p, np, SIGKILL);
    }
    free(pf);
    free(who);
    chorus__store_server_stop(server);

    int code = 0;
    if (failed >= 0) {
        char how[128];
        describe_status(p[failed].status, how, sizeof(how));
        int others = 0;
        for (int r = 0; r < np; r++)
            if (r != failed && (!WIFEXITED(p[r].status) || WEXITSTATUS(p[r].status))) others++;
        fprintf(stderr, "chorus-run: rank %d (pid %d) %s", failed, (int)p[failed].pid, how);
        if (others) fprintf(stderr, "; %d other rank%s also failed or were stopped", others,
                            others > 1 ? "s" : "");
        fprintf(stderr, "\n");
        code = exit_code(p[failed].status);
    } else if (timed_out) {
        code = 124;
    } else if (interrupted) {
        fprintf(stderr, "chorus-run: interrupted; stopped all ranks\n");
        code = 130;
    }
    free(p);
    return code;
}
