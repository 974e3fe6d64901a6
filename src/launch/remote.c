/*
 * remote.c - the agent protocol (described in run.h) as both sides use it: the remote-shell
 * command that starts an agent, the job sent on its stdin, signals for its rank, lines split
 * out of a stream, and the signal handlers that wake a loop.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "launch/launch.h"

#define WRITE_STALL_S 30.0 /* a reader that takes nothing for this long is given up */

char **run_rsh_argv(const char *rsh, const char *host, const char *self, const char *label)
{
    size_t words = 0;
    for (const char *c = rsh; *c; c++)
        if (*c != ' ' && *c != '\t' && (c == rsh || c[-1] == ' ' || c[-1] == '\t')) words++;
    if (!words) return NULL;
    size_t n = words + 5, size = n * sizeof(char *) + strlen(rsh) + 1;
    char **v = malloc(size);
    if (!v) return NULL;
    char *copy = (char *)(v + n), *save = NULL;
    memcpy(copy, rsh, strlen(rsh) + 1);
    size_t k = 0;
    for (char *t = strtok_r(copy, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) v[k++] = t;
    v[k++] = (char *)host;
    v[k++] = (char *)self;
    v[k++] = "--agent";
    v[k++] = (char *)label;
    v[k] = NULL;
    return v;
}

size_t run_lines(char *buf, size_t len, size_t cap,
                 void (*line)(void *ctx, const char *s, size_t n), void *ctx)
{
    size_t start = 0;
    for (size_t i = 0; i < len; i++)
        if (buf[i] == '\n') {
            line(ctx, buf + start, i - start);
            start = i + 1;
        }
    if (start == 0 && len == cap) { /* a very long line: passed on in pieces */
        line(ctx, buf, len);
        start = len;
    }
    memmove(buf, buf + start, len - start);
    return len - start;
}

/* Writes all of buf; on a non-blocking fd waits at most WRITE_STALL_S without progress (a
 * remote shell that never reads its stdin), then fails with ETIMEDOUT. */
int run_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    double last = chorus__now();
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (poll(&pf, 1, 1000) < 0 && errno != EINTR) return -1;
            if (chorus__now() - last > WRITE_STALL_S) {
                errno = ETIMEDOUT;
                return -1;
            }
            continue;
        }
        last = chorus__now();
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int send_str(int fd, const char *s)
{
    return run_write_all(fd, s, strlen(s) + 1);
}

int run_agent_send(int fd, const char *cwd, char *const *argv, char *const *envp)
{
    int argc = 0;
    while (argv[argc]) argc++;
    char count[16];
    snprintf(count, sizeof(count), "%d", argc);
    if (send_str(fd, AGENT_MAGIC) || send_str(fd, cwd) || send_str(fd, count)) return -1;
    for (int i = 0; i < argc; i++)
        if (send_str(fd, argv[i])) return -1;
    for (int i = 0; envp[i]; i++)
        if (send_str(fd, envp[i])) return -1;
    return send_str(fd, "");
}

void run_agent_signal(int fd, int sig)
{
    char line[32];
    int n = snprintf(line, sizeof(line), "signal %d\n", sig);
    if (fd >= 0 && write(fd, line, (size_t)n) < 0) { /* gone, or full: the agent is stuck */
    }
}

void run_catch_signals(void (*handler)(int))
{
    struct sigaction sa = {.sa_handler = handler};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}
