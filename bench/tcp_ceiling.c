/*
 * tcp_ceiling.c - how fast can two processes on this host move bytes over loopback TCP?
 *
 *   cc -O2 -o tcp_ceiling bench/tcp_ceiling.c && ./tcp_ceiling [MiB...]
 *
 * Two processes pinned to CPUs 0 and 1 (as chorus-run and mpirun pin two ranks) exchange N
 * bytes: one way only, and both ways at once over one connection and over two (one per
 * direction). An allreduce of S bytes over 2 ranks must move S bytes each way (S/2 for the
 * reduce-scatter, S/2 for the allgather), so S / (both-ways bytes per second) is the least time
 * any TCP allreduce can take here; docs/PERFORMANCE.md compares against it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void tune(int fd)
{
    int one = 1, buf = 4 << 20;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    fcntl(fd, F_SETFL, O_NONBLOCK);
}

/* Sends n bytes on sfd (if send) while receiving n bytes on rfd (if recv). */
static void move(int sfd, int rfd, char *sb, char *rb, size_t n, int send_, int recv_)
{
    size_t so = send_ ? 0 : n, ro = recv_ ? 0 : n;
    while (so < n || ro < n) {
        struct pollfd p[2] = {{sfd, so < n ? POLLOUT : 0, 0}, {rfd, ro < n ? POLLIN : 0, 0}};
        poll(p, 2, -1);
        if (so < n) {
            ssize_t w = send(sfd, sb + so, n - so > (1 << 19) ? 1 << 19 : n - so, MSG_DONTWAIT);
            if (w > 0) so += (size_t)w;
        }
        ssize_t r;
        while (ro < n && (r = recv(rfd, rb + ro, n - ro, MSG_DONTWAIT)) > 0) ro += (size_t)r;
    }
}

/* mode 0: one way (child sends), 1: both ways over one connection, 2: over two */
static double measure(int mode, size_t n)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 4) ||
        getsockname(ls, (struct sockaddr *)&a, &l)) {
        perror("tcp_ceiling: listen");
        exit(1);
    }
    int fds[2] = {-1, -1}, pipefd[2];
    if (pipe(pipefd)) exit(1);
    pid_t pid = fork();
    int child = pid == 0;
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(child, &cs);
    sched_setaffinity(0, sizeof(cs), &cs);
    for (int k = 0; k < (mode == 2 ? 2 : 1); k++) {
        if (child) {
            fds[k] = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(fds[k], (struct sockaddr *)&a, sizeof(a))) exit(1);
        } else {
            fds[k] = accept(ls, NULL, NULL);
        }
        tune(fds[k]);
    }
    int sfd = fds[0], rfd = mode == 2 ? fds[1] : fds[0];
    if (mode == 2 && child) {
        sfd = fds[1];
        rfd = fds[0];
    }
    char *sb = malloc(n), *rb = malloc(n);
    memset(sb, 1, n);
    memset(rb, 0, n);
    int snd = mode ? 1 : child, rcv = mode ? 1 : !child;
    for (int i = 0; i < 2; i++) move(sfd, rfd, sb, rb, n, snd, rcv);
    int iters = 8;
    double t = now();
    for (int i = 0; i < iters; i++) move(sfd, rfd, sb, rb, n, snd, rcv);
    t = (now() - t) / iters;
    if (child) {
        if (write(pipefd[1], &t, sizeof(t)) < 0) exit(1);
        _exit(0);
    }
    double tc;
    if (read(pipefd[0], &tc, sizeof(tc)) != sizeof(tc)) tc = t;
    waitpid(pid, NULL, 0);
    close(ls);
    close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
    close(pipefd[0]);
    close(pipefd[1]);
    free(sb);
    free(rb);
    return t > tc ? t : tc;
}

int main(int argc, char **argv)
{
    static const char *names[] = {"one way", "both ways, one connection",
                                  "both ways, two connections"};
    printf("# loopback TCP, 2 processes pinned to CPUs 0 and 1; GB/s per direction (GB = 1e9)\n");
    printf("# %8s %28s %12s %10s\n", "MiB", "pattern", "time(ms)", "GB/s");
    for (int i = 1; i < argc || i == 1; i++) {
        size_t mib = argc > 1 ? (size_t)atol(argv[i]) : 16;
        for (int mode = 0; mode < 3; mode++) {
            double t = measure(mode, mib << 20);
            printf("  %8zu %28s %12.2f %10.2f\n", mib, names[mode], t * 1e3,
                   (double)(mib << 20) / t / 1e9);
        }
    }
    return 0;
}
