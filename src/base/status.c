/* status.c - the rank's failure line to its launcher (status.h). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"

/* Writes one line of at most CHORUS_STATUS_LINE_MAX - 1 bytes to the status pipe, if there is
 * one. */
static void status_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void status_line(const char *fmt, ...)
{
    long fd = chorus__config()->status_fd;
    if (fd < 0) return;
    char line[CHORUS_STATUS_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n <= 0 || (size_t)n >= sizeof(line)) return;
    /* One write under PIPE_BUF bytes is atomic; the pipe is non-blocking, so a launcher that
     * stopped reading costs the line, never a hang. */
    ssize_t w;
    do {
        w = write((int)fd, line, (size_t)n);
    } while (w < 0 && errno == EINTR);
}

void chorus__status_failed(int rank, int blamed, chorus_result r, const char *why)
{
    /* the reason on one line, cut to what the line holds (it is the rank's own message too,
     * which the rank prints in full unless it is stopped first) */
    char text[CHORUS_STATUS_LINE_MAX - 96];
    size_t k = 0;
    for (const char *c = why ? why : ""; *c && k + 1 < sizeof(text); c++)
        text[k++] = *c == '\n' || *c == '\r' || *c == '\t' ? ' ' : *c;
    if (why && why[k] && k >= 3) memcpy(text + k - 3, "...", 3);
    text[k] = '\0';
    status_line("failed %d %d %s%s%s\n", rank, blamed, chorus_result_name(r), k ? " " : "", text);
}

void chorus__status_peer_failed(int rank, int peer)
{
    status_line("failed %d %d PEER_FAILED\n", rank, peer);
}

void chorus__status_expendable(int rank)
{
    status_line("expendable %d\n", rank);
}

void chorus__status_check_launcher(void)
{
    long fd = chorus__config()->status_fd;
    if (fd < 0) return;
    /* The write end of a pipe polls as an error once no process holds the read end. */
    struct pollfd p = {.fd = (int)fd, .events = 0};
    if (poll(&p, 1, 0) == 1 && (p.revents & POLLERR)) kill(getpid(), SIGKILL);
}
