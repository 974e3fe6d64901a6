/*
 * watchdog.c - finding dead and hung peers. A dead peer's socket closes (EOF/ECONNRESET), but a
 * hung one (SIGSTOP, a stuck kernel call) keeps its socket open, so a watchdog thread sends a
 * PING on every lane that has been idle for CHORUS_HEARTBEAT_S and reads whatever is pending
 * (which also keeps queued sends moving while the application computes); a peer from which
 * nothing at all arrived for CHORUS_HEARTBEAT_TIMEOUT_S is declared lost, naming its rank and
 * host, and so is one lane that fell silent while the others talk (a peer the job may lose, a
 * parameter server's worker in async or SSP mode, is then lost whichever deadline sees its
 * silence first: see timeout_locked() in progress.c). Every rank has a direct connection to
 * every other, so each survivor notices on its own.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "transport/tcp/net_internal.h"

/* Every half interval: read what is pending (progress for everyone, and fresh last_rx),
 * send a PING where nothing went out for an interval, and declare lost a peer from which
 * nothing arrived for hb_timeout. Runs until the net breaks or is released. */
static void *watchdog(void *arg)
{
    chorus_net *n = arg;
    struct epoll_event ev[32];
    pthread_mutex_lock(&n->mu);
    while (!n->hb_stop && n->broken == CHORUS_OK) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double half = n->hb_interval / 2;
        ts.tv_sec += (time_t)half;
        ts.tv_nsec += (long)((half - (double)(time_t)half) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&n->hb_cv, &n->mu, &ts);
        if (n->hb_stop || n->broken != CHORUS_OK) break;
        int nev;
        while ((nev = epoll_wait(n->epfd, ev, 32, 0)) > 0 && n->broken == CHORUS_OK)
            tcp_handle_events(n, ev, nev);
        chorus__status_check_launcher();
        double now = chorus__now();
        for (int p = 0; p < n->size && n->broken == CHORUS_OK; p++) {
            if (p == n->rank || n->peers[p].bye) continue;
            peer *pe = &n->peers[p];
            char what[240];
            int silent = pe->lanes[0].fd >= 0 && now - pe->last_rx > n->hb_timeout;
            if (silent) {
                snprintf(what, sizeof(what),
                         "nothing arrived from it for %.1f s, not even a heartbeat: the process "
                         "is hung or stopped (SIGSTOP?) or its host is unreachable "
                         "(CHORUS_HEARTBEAT_TIMEOUT_S)",
                         now - pe->last_rx);
                tcp_peer_lost(n, p, what);
                continue;
            }
            /* every lane is watched on its own too: one that fell silent while the others
             * still talk is the peer lost. An idle lane hears a ping only once an interval,
             * so a lane gets two intervals more than the peer as a whole. */
            for (int l = 0; l < n->nlanes && n->broken == CHORUS_OK && !pe->lost; l++) {
                lane *ln = &pe->lanes[l];
                if (ln->fd < 0 || ln->bye) continue;
                if (!silent && now - ln->last_rx > n->hb_timeout + 2 * n->hb_interval) {
                    snprintf(what, sizeof(what),
                             "nothing arrived on its TCP lane %d of %d for %.1f s, not even a "
                             "heartbeat, while its other lanes still talk: that connection is "
                             "broken (CHORUS_HEARTBEAT_TIMEOUT_S)",
                             l, n->nlanes, now - ln->last_rx);
                    tcp_peer_lost(n, p, what);
                    break;
                }
                if (!ln->sq_head && now - ln->last_tx >= n->hb_interval) {
                    chorus_req *r = &ln->ping;
                    memset(r, 0, sizeof(*r));
                    r->is_send = 1;
                    r->peer = p;
                    r->h.type = CHORUS_MSG_PING;
                    chorus__wire_encode_hdr(&r->h, r->hbytes);
                    ln->sq_head = ln->sq_tail = r;
                    tcp_flush_sends(n, p, l);
                }
            }
        }
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

void tcp_watchdog_start(chorus_net *n)
{
    if (n->hb_interval <= 0 || n->size < 2) return;
    if (n->hb_timeout < 2 * n->hb_interval) n->hb_timeout = 2 * n->hb_interval;
    double now = chorus__now();
    for (int p = 0; p < n->size; p++) {
        n->peers[p].last_rx = now;
        for (int l = 0; l < n->nlanes; l++)
            n->peers[p].lanes[l].last_rx = n->peers[p].lanes[l].last_tx = now;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&n->hb_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (chorus__thread_start(&n->hb_thread, watchdog, n) == 0)
        n->hb_started = 1;
    else
        pthread_cond_destroy(&n->hb_cv);
}

void tcp_watchdog_stop(chorus_net *n)
{
    if (!n->hb_started) return;
    pthread_mutex_lock(&n->mu);
    n->hb_stop = 1;
    pthread_cond_signal(&n->hb_cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->hb_thread, NULL);
    pthread_cond_destroy(&n->hb_cv);
    n->hb_started = 0;
}
