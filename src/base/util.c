/* util.c - clocks, aligned allocation and host identity. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

double chorus__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t chorus__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double chorus__timeout_s(void)
{
    double t = chorus__config()->timeout_s;
    return t > 0 ? t : 300;
}

double chorus__deadline(void)
{
    return chorus__now() + chorus__timeout_s();
}

void *chorus__malloc_aligned(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64)) return NULL;
    return p;
}

void chorus__host_id(char *out, size_t len)
{
    char host[256] = "unknown", boot[64] = "", *nl;
    gethostname(host, sizeof(host) - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof(boot), f)) boot[0] = 0;
        fclose(f);
    }
    if ((nl = strchr(boot, '\n'))) *nl = 0;
    /* Ranks in different network namespaces are treated as different hosts, which is what
     * namespaces are used for (simulated hosts in tests). */
    struct stat st;
    unsigned long long netns =
        stat("/proc/self/ns/net", &st) == 0 ? (unsigned long long)st.st_ino : 0;
    snprintf(out, len, "%s/%s/%llu", host, boot, netns);
}

int chorus__thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    /* The new thread inherits the mask: asynchronous signals stay with the application's
     * threads (its handlers never run on a library thread); faults still reach the thread that
     * caused them. */
    sigset_t all, old;
    sigfillset(&all);
    static const int sync_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT};
    for (size_t i = 0; i < sizeof(sync_sigs) / sizeof(sync_sigs[0]); i++)
        sigdelset(&all, sync_sigs[i]);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int r = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}
