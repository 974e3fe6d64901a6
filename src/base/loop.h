/*
 * loop.h - one small event loop, in the manner of Redis's ae and libuv: a descriptor is
 * watched with a callback, a timer is a deadline with a callback, and a round waits (poll)
 * until a watched descriptor is ready, a timer is due or the round's own deadline passes, then
 * runs the callbacks of what is ready. The rendezvous store's thread, chorus-run's
 * supervision of its ranks and the agent that runs a rank on another host each serve from one.
 *
 * A loop belongs to the thread that runs it: no call is thread-safe, and a callback must not
 * run a round of its own loop. Callbacks may watch and unwatch descriptors and add and cancel
 * timers, their own included; a descriptor unwatched during a round gets no callback for what
 * was ready on it before (nor does another watch of the same number made after it, until the
 * next round). A round waits no longer than its deadline or the nearest timer; a deadline of
 * INFINITY is only for a loop that something always wakes (the store's wake pipe).
 */
#ifndef CHORUS_BASE_LOOP_H
#define CHORUS_BASE_LOOP_H

typedef struct chorus_loop chorus_loop;

/* Called when fd is ready: revents as poll(2) reports them (POLLIN, POLLOUT, POLLHUP, ...). */
typedef void (*chorus_loop_fd_fn)(chorus_loop *l, int fd, int revents, void *arg);

/* Called once, when the timer's deadline has passed. */
typedef void (*chorus_loop_timer_fn)(chorus_loop *l, void *arg);

/* A loop watching nothing, or NULL when out of memory. */
chorus_loop *chorus__loop_new(void);

/* Frees the loop; the descriptors it watched stay open (they are the callers'). */
void chorus__loop_free(chorus_loop *l);

/* Watches fd for events (POLLIN, POLLOUT) with fn(arg); replaces an earlier watch of fd.
 * 0, or -1 (errno: EINVAL for a negative fd, ENOMEM). */
int chorus__loop_watch(chorus_loop *l, int fd, short events, chorus_loop_fd_fn fn, void *arg);

/* Stops watching fd (nothing when it is not watched). Call it before closing fd. */
void chorus__loop_unwatch(chorus_loop *l, int fd);

/* The number of descriptors watched. */
int chorus__loop_watching(const chorus_loop *l);

/* Calls fn(arg) once when chorus__now() passes deadline. Returns the timer's id (> 0), or -1
 * when out of memory. */
int chorus__loop_timer(chorus_loop *l, double deadline, chorus_loop_timer_fn fn, void *arg);

/* Cancels a timer that has not run (nothing for an id that ran or was cancelled). */
void chorus__loop_cancel(chorus_loop *l, int id);

/* One round: waits until a watched descriptor is ready, a timer is due or chorus__now()
 * passes deadline (a deadline already passed: looks without waiting), then runs the callbacks
 * of the ready descriptors and of the due timers. Returns how many ran, or -1 when poll
 * failed (errno; an interrupted wait is a round in which nothing ran). */
int chorus__loop_run_once(chorus_loop *l, double deadline);

/* Rounds until chorus__loop_stop is called (by a callback) or deadline passes. Returns 0 when
 * stopped, 1 at the deadline, -1 when poll failed (errno). */
int chorus__loop_run(chorus_loop *l, double deadline);

/* Makes chorus__loop_run return after the round in progress. */
void chorus__loop_stop(chorus_loop *l);

#endif
