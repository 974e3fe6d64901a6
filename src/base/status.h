/*
 * status.h - the rank's side of a channel to its launcher. chorus-run gives every rank the
 * write end of a pipe (CHORUS_STATUS_FD); when the rank's communication fails the library
 * writes one line there, so that the launcher can tell the rank that failed first, by its own
 * failure, from the ranks that failed because they lost it:
 *
 *   failed <rank> <blamed> <result name> <reason>\n
 *
 * <rank> is the rank that writes (its world rank), <blamed> the rank it holds responsible (a
 * lost, timed-out or aborting peer), or -1 when the failure is its own (a mismatch it saw, an
 * abort it asked for, a bad argument that broke the communicator), <reason> the message the
 * rank's call fails with, on one line and cut to the line's size (the launcher shows it when
 * it had to stop the rank before the rank could print it). A rank that fails because
 * it was told another rank failed (chorus_report_peer_failure) writes
 *
 *   failed <rank> <peer> PEER_FAILED\n
 *
 * and a rank whose loss the job tolerates (a worker of an asynchronous parameter server:
 * chorus_ps_create) says so once, before anything can fail:
 *
 *   expendable <rank>\n
 *
 * so that the launcher lets the job go on without it. The pipe also tells the rank that its
 * launcher is gone: the read end then closes.
 */
#ifndef CHORUS_STATUS_H
#define CHORUS_STATUS_H

#include "base/base.h"

/* A status line's size at most, newline included: one write below PIPE_BUF, so atomic. */
#define CHORUS_STATUS_LINE_MAX 512

/* Writes the failed line above to CHORUS_STATUS_FD when it is set (never blocks; does nothing
 * otherwise); why may be NULL. Async-signal-unsafe, thread-safe; called when a communicator
 * first breaks. */
void chorus__status_failed(int rank, int blamed, chorus_result r, const char *why);

/* The PEER_FAILED and expendable lines above (same properties as chorus__status_failed). */
void chorus__status_peer_failed(int rank, int peer);
void chorus__status_expendable(int rank);

/* A rank must not outlive its launcher. chorus-run's ranks die with it (a parent-death
 * signal), but a process the rank started (a program run through a shell script) does not:
 * when the launcher has closed the status pipe (it died), this kills the calling process.
 * Cheap (one poll); the transport's watchdog calls it on every tick. */
void chorus__status_check_launcher(void);

#endif
