/*
 * loop.c - the event loop of loop.h. Watches live in a table indexed by descriptor (as ae
 * keeps them), from which each round builds the poll set; every watch carries a serial, so
 * that readiness seen for a watch that a callback removed or replaced in the same round is
 * dropped rather than given to its successor. Timers are a short unsorted array: the loop's
 * users keep a handful.
 */
#include "base/loop.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>

#include "base/base.h"

typedef struct watch {
    chorus_loop_fd_fn fn; /* NULL: not watched */
    void *arg;
    short events;
    unsigned serial;
} watch;

typedef struct timer {
    int id;
    double at;
    chorus_loop_timer_fn fn;
    void *arg;
} timer;

struct chorus_loop {
    watch *fds; /* by descriptor, cap of them; top: one past the highest watched */
    int cap, top, watching;
    unsigned serial;
    struct pollfd *pf; /* a round's poll set, cap of them, and the serials of its watches */
    unsigned *pf_serial;
    timer *timers;
    int ntimers, cap_timers, next_id;
    int stopped;
};

chorus_loop *chorus__loop_new(void)
{
    return calloc(1, sizeof(chorus_loop));
}

void chorus__loop_free(chorus_loop *l)
{
    if (!l) return;
    free(l->fds);
    free(l->pf);
    free(l->pf_serial);
    free(l->timers);
    free(l);
}

/* Room for descriptor fd in the table and the poll set. 0, or -1 (ENOMEM). */
static int grow(chorus_loop *l, int fd)
{
    if (fd < l->cap) return 0;
    int cap = l->cap ? l->cap : 64;
    while (cap <= fd) cap *= 2;
    watch *fds = realloc(l->fds, (size_t)cap * sizeof(*fds));
    if (fds) l->fds = fds;
    struct pollfd *pf = realloc(l->pf, (size_t)cap * sizeof(*pf));
    if (pf) l->pf = pf;
    unsigned *ps = realloc(l->pf_serial, (size_t)cap * sizeof(*ps));
    if (ps) l->pf_serial = ps;
    if (!fds || !pf || !ps) {
        errno = ENOMEM;
        return -1;
    }
    for (int i = l->cap; i < cap; i++) l->fds[i] = (watch){0};
    l->cap = cap;
    return 0;
}

int chorus__loop_watch(chorus_loop *l, int fd, short events, chorus_loop_fd_fn fn, void *arg)
{
    if (fd < 0 || !fn) {
        errno = EINVAL;
        return -1;
    }
    if (grow(l, fd)) return -1;
    if (!l->fds[fd].fn) l->watching++;
    l->fds[fd] = (watch){.fn = fn, .arg = arg, .events = events, .serial = ++l->serial};
    if (fd >= l->top) l->top = fd + 1;
    return 0;
}

void chorus__loop_unwatch(chorus_loop *l, int fd)
{
    if (fd < 0 || fd >= l->top || !l->fds[fd].fn) return;
    l->fds[fd] = (watch){0};
    l->watching--;
    while (l->top > 0 && !l->fds[l->top - 1].fn) l->top--;
}

int chorus__loop_watching(const chorus_loop *l)
{
    return l->watching;
}

int chorus__loop_timer(chorus_loop *l, double deadline, chorus_loop_timer_fn fn, void *arg)
{
    if (l->ntimers == l->cap_timers) {
        int cap = l->cap_timers ? 2 * l->cap_timers : 8;
        timer *t = realloc(l->timers, (size_t)cap * sizeof(*t));
        if (!t) return -1;
        l->timers = t;
        l->cap_timers = cap;
    }
    if (l->next_id == INT_MAX) l->next_id = 0;
    int id = ++l->next_id;
    l->timers[l->ntimers++] = (timer){.id = id, .at = deadline, .fn = fn, .arg = arg};
    return id;
}

void chorus__loop_cancel(chorus_loop *l, int id)
{
    for (int i = 0; i < l->ntimers; i++)
        if (l->timers[i].id == id) {
            l->timers[i] = l->timers[--l->ntimers];
            return;
        }
}

/* Milliseconds from now to wake for poll (-1: no deadline). */
static int wait_ms(double wake)
{
    if (isinf(wake)) return -1;
    double left = wake - chorus__now();
    if (left <= 0) return 0;
    return left * 1000 >= INT_MAX ? INT_MAX : (int)ceil(left * 1000);
}

/* Runs the timers that are due now and were there when the round began (one a callback adds
 * for a deadline already passed runs in the next round). Returns how many ran. */
static int run_timers(chorus_loop *l)
{
    int ran = 0, last_id = l->next_id;
    double now = chorus__now();
    for (int i = 0; i < l->ntimers;) {
        timer t = l->timers[i];
        if (t.at > now || t.id > last_id) {
            i++;
            continue;
        }
        l->timers[i] = l->timers[--l->ntimers]; /* gone before it runs: it may add another */
        t.fn(l, t.arg);
        ran++;
        i = 0; /* the callback may have cancelled or moved others */
    }
    return ran;
}

int chorus__loop_run_once(chorus_loop *l, double deadline)
{
    int n = 0;
    for (int fd = 0; fd < l->top; fd++)
        if (l->fds[fd].fn) {
            l->pf[n] = (struct pollfd){.fd = fd, .events = l->fds[fd].events};
            l->pf_serial[n++] = l->fds[fd].serial;
        }
    double wake = deadline;
    for (int i = 0; i < l->ntimers; i++)
        if (l->timers[i].at < wake) wake = l->timers[i].at;
    int got = poll(l->pf, (nfds_t)n, wait_ms(wake));
    if (got < 0) return errno == EINTR ? 0 : -1;
    int ran = 0;
    for (int i = 0; i < n && got > 0; i++) {
        if (!l->pf[i].revents) continue;
        got--;
        int fd = l->pf[i].fd;
        /* the table may have moved (a callback watched a higher descriptor): index it anew */
        if (fd >= l->top || !l->fds[fd].fn || l->fds[fd].serial != l->pf_serial[i]) continue;
        l->fds[fd].fn(l, fd, l->pf[i].revents, l->fds[fd].arg);
        ran++;
    }
    return ran + run_timers(l);
}

int chorus__loop_run(chorus_loop *l, double deadline)
{
    l->stopped = 0;
    while (!l->stopped) {
        if (chorus__now() >= deadline) return 1;
        if (chorus__loop_run_once(l, deadline) < 0) return -1;
    }
    l->stopped = 0;
    return 0;
}

void chorus__loop_stop(chorus_loop *l)
{
    l->stopped = 1;
}
