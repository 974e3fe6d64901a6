/*
 * fail.h - how one transport learns that the job's communication broke elsewhere, without
 * knowing which transport broke. Shared memory waits on flags in memory; a peer lost over TCP,
 * a timeout or a mismatch found there would not show in those flags, so a shared-memory wait
 * also asks the watch it was given whether the job is still healthy.
 */
#ifndef CHORUS_TRANSPORT_FAIL_H
#define CHORUS_TRANSPORT_FAIL_H

#include "base/base.h"

/* A transport's failure state, as seen by another: check(arg, e) returns CHORUS_OK while it is
 * healthy, else the error that broke it with its reason in e. Must be cheap and thread-safe.
 * check NULL: nothing to watch. */
typedef struct chorus_fail_watch {
    chorus_result (*check)(void *arg, chorus_errbuf *e);
    void *arg;
} chorus_fail_watch;

/* What w says: CHORUS_OK when there is nothing to watch or it is healthy. */
static inline chorus_result chorus__fail_watch_check(const chorus_fail_watch *w, chorus_errbuf *e)
{
    return w->check ? w->check(w->arg, e) : CHORUS_OK;
}

#endif
