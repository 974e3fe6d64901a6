/* event_loop.c - base/loop.c: ready descriptors get their callbacks once per round; one that
 * a callback unwatched in the round gets none, nor does a new watch of its number; timers run
 * once, after their deadline, and not when cancelled; a round never returns before its
 * deadline unless something ran; run stops when asked or at its deadline. */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "base/base.h"
#include "base/loop.h"
#include "harness.h"

typedef struct seen {
    int calls, last_fd, last_revents;
    int unwatch; /* a descriptor the callback unwatches, closes and opens again (-1: none) */
    int reopened[2];
    double at; /* when a timer ran */
} seen;

static void on_fd(chorus_loop *l, int fd, int revents, void *arg)
{
    seen *s = arg;
    s->calls++;
    s->last_fd = fd;
    s->last_revents = revents;
    if (s->unwatch >= 0) {
        chorus__loop_unwatch(l, s->unwatch);
        close(s->unwatch);
        /* the lowest free number is the one just closed: the new pipe's read end takes it */
        ASSERT_EQ(pipe(s->reopened), 0);
        ASSERT_EQ(s->reopened[0], s->unwatch);
        ASSERT_EQ(write(s->reopened[1], "y", 1), 1);
        ASSERT_EQ(chorus__loop_watch(l, s->reopened[0], POLLIN, on_fd, s), 0);
        s->unwatch = -1;
    }
}

static void on_timer(chorus_loop *l, void *arg)
{
    seen *s = arg;
    s->calls++;
    s->at = chorus__now();
    chorus__loop_stop(l);
}

int main(void)
{
    chorus_loop *l = chorus__loop_new();
    ASSERT(l);
    ASSERT_EQ(chorus__loop_watching(l), 0);
    errno = 0;
    ASSERT_EQ(chorus__loop_watch(l, -1, POLLIN, on_fd, NULL), -1);
    ASSERT_EQ(errno, EINVAL);

    /* nothing ready: the round lasts until its deadline and runs nothing */
    double deadline = chorus__now() + 0.05;
    ASSERT_EQ(chorus__loop_run_once(l, deadline), 0);
    ASSERT(chorus__now() >= deadline);
    ASSERT_EQ(chorus__loop_run(l, chorus__now() + 0.02), 1);

    /* a ready pipe: its callback, with POLLIN, once per round while it stays readable */
    int a[2], b[2];
    ASSERT_EQ(pipe(a), 0);
    ASSERT_EQ(pipe(b), 0);
    seen sa = {.unwatch = -1}, sb = {.unwatch = -1};
    ASSERT_EQ(chorus__loop_watch(l, a[0], POLLIN, on_fd, &sa), 0);
    ASSERT_EQ(chorus__loop_watch(l, b[0], POLLIN, on_fd, &sb), 0);
    ASSERT_EQ(chorus__loop_watching(l), 2);
    ASSERT_EQ(write(a[1], "x", 1), 1);
    ASSERT_EQ(chorus__loop_run_once(l, chorus__now() + 30), 1);
    ASSERT_EQ(sa.calls, 1);
    ASSERT_EQ(sa.last_fd, a[0]);
    ASSERT(sa.last_revents & POLLIN);
    ASSERT_EQ(sb.calls, 0);
    ASSERT_EQ(chorus__loop_run_once(l, chorus__now() + 30), 1);
    ASSERT_EQ(sa.calls, 2);

    /* a's callback unwatches b, ready in the same round, and watches a new pipe that takes b's
     * number and is ready too: neither gets a callback in this round; the new one in the next */
    char c;
    ASSERT_EQ(read(a[0], &c, 1), 1);
    ASSERT_EQ(write(a[1], "x", 1), 1);
    ASSERT_EQ(write(b[1], "x", 1), 1);
    ASSERT(a[0] < b[0]); /* a's callback runs first: the round goes by descriptor */
    sa.unwatch = b[0];
    sa.calls = 0;
    ASSERT_EQ(chorus__loop_run_once(l, chorus__now() + 30), 1);
    ASSERT_EQ(sa.calls, 1);
    ASSERT_EQ(sb.calls, 0);
    ASSERT_EQ(read(a[0], &c, 1), 1);
    ASSERT_EQ(chorus__loop_run_once(l, chorus__now() + 30), 1);
    ASSERT_EQ(sa.calls, 2);
    ASSERT_EQ(sa.last_fd, sa.reopened[0]);
    chorus__loop_unwatch(l, sa.reopened[0]);
    chorus__loop_unwatch(l, sa.reopened[0]); /* twice: nothing */
    ASSERT_EQ(chorus__loop_watching(l), 1);

    /* a descriptor far above the others: the table grows */
    int high = dup2(a[0], 300);
    ASSERT_EQ(high, 300);
    seen sh = {.unwatch = -1};
    ASSERT_EQ(chorus__loop_watch(l, high, POLLIN, on_fd, &sh), 0);
    chorus__loop_unwatch(l, a[0]);
    ASSERT_EQ(write(a[1], "x", 1), 1);
    ASSERT_EQ(chorus__loop_run_once(l, chorus__now() + 30), 1);
    ASSERT_EQ(sh.calls, 1);
    ASSERT_EQ(sh.last_fd, 300);
    ASSERT_EQ(read(high, &c, 1), 1);
    chorus__loop_unwatch(l, high);
    ASSERT_EQ(chorus__loop_watching(l), 0);

    /* timers: the cancelled one never runs; the other runs once, after its deadline, and
     * stops run */
    seen t1 = {.unwatch = -1}, t2 = {.unwatch = -1};
    double due = chorus__now() + 0.03;
    int id1 = chorus__loop_timer(l, due, on_timer, &t1);
    int id2 = chorus__loop_timer(l, due - 0.01, on_timer, &t2);
    ASSERT(id1 > 0 && id2 > 0 && id1 != id2);
    chorus__loop_cancel(l, id2);
    ASSERT_EQ(chorus__loop_run(l, chorus__now() + 60), 0);
    ASSERT_EQ(t1.calls, 1);
    ASSERT(t1.at >= due);
    ASSERT_EQ(t2.calls, 0);
    chorus__loop_cancel(l, id1); /* ran already: nothing */
    ASSERT_EQ(chorus__loop_run(l, chorus__now() + 0.02), 1);
    ASSERT_EQ(t1.calls, 1);

    chorus__loop_free(l);
    close(a[0]), close(a[1]), close(b[1]), close(sa.reopened[0]), close(sa.reopened[1]);
    close(high);
    printf("event_loop: ok\n");
    return 0;
}
