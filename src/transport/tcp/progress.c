/*
 * progress.c - driving the net: epoll progress with the mutex dropped while sleeping, waits
 * that end when enough requests are done, at their deadline, or when the net breaks, and the
 * timeouts, which blame the rank that made no progress (the one silent for several heartbeat
 * intervals, else the one waited for).
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "transport/tcp/net_internal.h"

void tcp_handle_events(chorus_net *n, struct epoll_event *ev, int nev)
{
    for (int i = 0; i < nev && n->broken == CHORUS_OK; i++) {
        int p = (int)(uint32_t)ev[i].data.u64, l = (int)(ev[i].data.u64 >> 32);
        if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) tcp_read_lane(n, p, l);
        if (n->broken == CHORUS_OK && (ev[i].events & EPOLLOUT)) tcp_flush_sends(n, p, l);
    }
}

/* Sleeps in epoll_wait for at most ms with mu dropped (so that other threads can drive the
 * net meanwhile), then handles what is ready. mu is held on entry and on return. */
static void poll_unlocked(chorus_net *n, int ms)
{
    struct epoll_event ev[32];
    pthread_mutex_unlock(&n->mu);
    int nev = epoll_wait(n->epfd, ev, 32, ms);
    /* While polling, let a runnable peer on the same core go first: on a busy machine
     * its message is what we are waiting for. */
    if (nev == 0 && ms == 0) sched_yield();
    pthread_mutex_lock(&n->mu);
    if (nev > 0) tcp_handle_events(n, ev, nev);
}

/* How long to sleep next: 0 while spinning (CHORUS_SPIN_US), else until the deadline, at most
 * 100 ms so that a break by another thread is seen promptly. */
static int sleep_ms(double now, double spin_until, double deadline)
{
    int ms = now < spin_until ? 0 : (int)((deadline - now) * 1000) + 1;
    return ms > 100 ? 100 : ms;
}

/* Has p said goodbye on every lane? Each lane's goodbye follows that lane's data, but the lanes
 * are separate streams: lane 0's can arrive while slices of p's last messages are still on
 * their way on the others. Only then has everything p sent been read. */
static int finalized(const chorus_net *n, int p)
{
    const peer *pe = &n->peers[p];
    if (!pe->bye) return 0;
    for (int l = 1; l < n->nlanes; l++)
        if (!pe->lanes[l].bye) return 0;
    return 1;
}

/* Request r waits on a peer that has finalized (or, from any source, on peers that all have):
 * it can never complete, so the net breaks now instead of at the deadline. mu held. */
static void check_bye(chorus_net *n, const chorus_req *r)
{
    char why[300];
    if (r->peer == CHORUS__NET_ANY) {
        for (int p = 0; p < n->size; p++)
            if (p != n->rank && !finalized(n, p) && !n->peers[p].lost) return;
        snprintf(why, sizeof(why),
                 "every other rank has already finalized, but rank %d still waits in a receive "
                 "from any rank",
                 n->rank);
        tcp_break_locked(n, -1, CHORUS_ERR_PEER_LOST, why, why);
        return;
    }
    if (!finalized(n, r->peer)) return;
    snprintf(why, sizeof(why),
             "rank %d (host %s) has already finalized, but rank %d still expects it in "
             "a collective or send/recv",
             r->peer, chorus__net_host(n, r->peer), n->rank);
    tcp_break_locked(n, r->peer, CHORUS_ERR_PEER_LOST, why, why);
}

/* When a wait on a live peer times out, the rank to blame is the one that made no progress:
 * with the watchdog on, every live peer sends something (a ping at least) every
 * CHORUS_HEARTBEAT_S, so a peer silent for several intervals is stopped or hung, while the
 * awaited one, heard from lately, is most likely waiting for it too. Returns that silent
 * peer (the longest silent) when the awaited one (waited_for, or -1 for any) was heard from
 * lately; else -1. mu held. */
static int silent_peer(chorus_net *n, int waited_for, double *silent_s)
{
    if (n->hb_interval <= 0 || !n->hb_started) return -1;
    double now = chorus__now(), limit = 3 * n->hb_interval;
    if (waited_for >= 0 && now - n->peers[waited_for].last_rx > limit) return -1;
    int q = -1;
    for (int p = 0; p < n->size; p++) {
        peer *pe = &n->peers[p];
        if (p == n->rank || pe->lanes[0].fd < 0 || pe->bye || now - pe->last_rx <= limit) continue;
        if (q < 0 || pe->last_rx < n->peers[q].last_rx) q = p;
    }
    if (q >= 0) *silent_s = now - n->peers[q].last_rx;
    return q;
}

/* Breaks the net because request r (or, probe, a chorus__net_probe for what r describes) made
 * no progress until its deadline. mu held. */
static void timeout_locked(chorus_net *n, const chorus_req *r, int probe)
{
    char what[160], why[480];
    double silent_s = 0;
    int q = silent_peer(n, r->peer, &silent_s);
    /* A silent peer the job may lose is lost, whether the watchdog or a deadline sees its
     * silence first: on a busy machine the two come in either order, and the verdict (the job
     * goes on without it) must not depend on which. */
    int e = q;
    if (r->peer >= 0 && r->peer != n->rank && n->hb_started &&
        chorus__now() - n->peers[r->peer].last_rx > 3 * n->hb_interval) {
        e = r->peer;
        silent_s = chorus__now() - n->peers[r->peer].last_rx;
    }
    if (e >= 0 && n->peers[e].expendable && !n->peers[e].lost && n->broken == CHORUS_OK) {
        snprintf(why, sizeof(why),
                 "nothing arrived from it for %.1f s, not even a heartbeat: the process is hung "
                 "or stopped (SIGSTOP?) or its host is unreachable (CHORUS_TIMEOUT_S)",
                 silent_s);
        tcp_peer_lost(n, e, why);
        return;
    }
    if (q >= 0 && q != r->peer) {
        snprintf(why, sizeof(why),
                 "rank %d (host %s) made no progress: nothing arrived from it for %.1f s, not "
                 "even a heartbeat, so it is stopped (SIGSTOP?) or hung; rank %d timed out "
                 "waiting %s rank %d, which is alive and waits too (CHORUS_TIMEOUT_S)",
                 q, chorus__net_host(n, q), silent_s, n->rank,
                 r->is_send ? "to send to" : "to receive from", r->peer);
        if (r->peer < 0)
            snprintf(why, sizeof(why),
                     "rank %d (host %s) made no progress: nothing arrived from it for %.1f s, "
                     "not even a heartbeat, so it is stopped (SIGSTOP?) or hung; rank %d timed "
                     "out waiting for a message from any rank (CHORUS_TIMEOUT_S)",
                     q, chorus__net_host(n, q), silent_s, n->rank);
        tcp_break_locked(n, q, CHORUS_ERR_TIMEOUT, why, why);
        return;
    }
    if (r->h.type != CHORUS_MSG_P2P) {
        chorus__wire_describe(&r->h, what, sizeof(what));
        snprintf(why, sizeof(why),
                 "rank %d timed out waiting to %s rank %d (host %s): %s; that rank is stuck "
                 "or not calling the same collectives (CHORUS_TIMEOUT_S)",
                 n->rank, r->is_send ? "send to" : "receive from", r->peer,
                 chorus__net_host(n, r->peer), what);
        tcp_break_locked(n, r->peer, CHORUS_ERR_TIMEOUT, why, why);
        return;
    }
    char tag[32] = "any tag";
    if (r->h.tag != CHORUS__NET_ANY) snprintf(tag, sizeof(tag), "tag %d", r->h.tag);
    if (probe)
        snprintf(what, sizeof(what), "a probe for a message with %s", tag);
    else
        snprintf(what, sizeof(what), "%s %s%llu %s with %s",
                 r->is_send ? "a send of" : "a receive of", r->is_send ? "" : "up to ",
                 (unsigned long long)r->h.count, chorus__dtype_name((int)((r->h.coll >> 8) & 0xff)),
                 tag);
    if (r->peer == CHORUS__NET_ANY)
        snprintf(why, sizeof(why),
                 "rank %d timed out in %s from any rank: no rank sent a matching message "
                 "(CHORUS_TIMEOUT_S)",
                 n->rank, what);
    else
        snprintf(why, sizeof(why),
                 "rank %d timed out in %s %s rank %d (host %s): that rank is stuck or did not "
                 "post the matching %s (CHORUS_TIMEOUT_S)",
                 n->rank, what, r->is_send ? "to" : "from", r->peer, chorus__net_host(n, r->peer),
                 r->is_send ? "receive" : "send");
    tcp_break_locked(n, r->peer, CHORUS_ERR_TIMEOUT, why, why);
}

/* Drives progress until need requests are done; extend_s > 0 moves the deadline on whenever a
 * request moved a byte. CHORUS_OK or the error that broke the net. */
static chorus_result wait_core(chorus_net *n, chorus_req *const *reqs, int nreq, int need,
                               double deadline, double extend_s, chorus_errbuf *e)
{
    double spin_until = chorus__now() + n->spin_us * 1e-6;
    pthread_mutex_lock(&n->mu);
    size_t last = (size_t)-1; /* bytes the requests had moved at the last look */
    for (;;) {
        int pending = -1, ndone = 0;
        size_t moved = 0; /* to tell progress from a stall */
        for (int i = 0; i < nreq; i++) {
            moved += reqs[i]->hoff + reqs[i]->off + reqs[i]->lane_moved;
            if (reqs[i]->done)
                ndone++;
            else if (pending < 0)
                pending = i;
        }
        if (pending < 0 || ndone >= need) break; /* done, even if the net broke right after */
        if (n->broken == CHORUS_OK) check_bye(n, reqs[pending]);
        if (n->broken != CHORUS_OK) {
            chorus_result r = n->broken;
            if (e) snprintf(e->msg, sizeof(e->msg), "%s", n->broken_msg);
            pthread_mutex_unlock(&n->mu);
            return r;
        }
        double now = chorus__now();
        if (extend_s > 0 && moved != last) {
            if (last != (size_t)-1) deadline = now + extend_s;
            last = moved;
        }
        if (now > deadline) {
            timeout_locked(n, reqs[pending], 0);
            continue;
        }
        poll_unlocked(n, sleep_ms(now, spin_until, deadline));
    }
    pthread_mutex_unlock(&n->mu);
    return CHORUS_OK;
}

chorus_result chorus__net_wait(chorus_net *n, chorus_req *const *reqs, int nreq, double deadline,
                               chorus_errbuf *e)
{
    CHORUS_CHECK(wait_core(n, reqs, nreq, nreq, deadline, 0, e));
    for (int i = 0; i < nreq; i++)
        if (reqs[i]->res != CHORUS_OK) return reqs[i]->res;
    return CHORUS_OK;
}

chorus_result chorus__net_wait_some(chorus_net *n, chorus_req *const *reqs, int nreq, int need,
                                    double timeout_s, chorus_errbuf *e)
{
    return wait_core(n, reqs, nreq, need, chorus__now() + timeout_s, timeout_s, e);
}

int chorus__net_test(chorus_net *n, chorus_req *r, chorus_errbuf *e)
{
    struct epoll_event ev[32];
    pthread_mutex_lock(&n->mu);
    if (!r->done && n->broken == CHORUS_OK) {
        int nev = epoll_wait(n->epfd, ev, 32, 0);
        if (nev > 0) tcp_handle_events(n, ev, nev);
        if (!r->done && n->broken == CHORUS_OK) check_bye(n, r);
    }
    int st = r->done ? 1 : n->broken != CHORUS_OK ? -1 : 0;
    if (st < 0 && e) snprintf(e->msg, sizeof(e->msg), "%s", n->broken_msg);
    pthread_mutex_unlock(&n->mu);
    return st;
}

chorus_result chorus__net_probe(chorus_net *n, uint64_t comm_id, int peer_rank, int tag,
                                double timeout_s, int *found, chorus_wire_hdr *h, int *src,
                                chorus_errbuf *e)
{
    double now = chorus__now(), deadline = now + timeout_s, spin_until = now + n->spin_us * 1e-6;
    chorus_req want = {.peer = peer_rank,
                       .h = {.type = CHORUS_MSG_P2P, .comm_id = comm_id, .tag = tag}};
    *found = 0;
    pthread_mutex_lock(&n->mu);
    if (n->broken == CHORUS_OK) poll_unlocked(n, 0);
    for (;;) {
        umsg *u = n->broken == CHORUS_OK ? tcp_p2p_find(n, peer_rank, comm_id, tag, src, 0) : NULL;
        if (u) {
            *h = u->h;
            *found = 1;
            break;
        }
        if (n->broken == CHORUS_OK && timeout_s > 0) check_bye(n, &want);
        if (n->broken != CHORUS_OK) {
            chorus_result r = n->broken;
            if (e) snprintf(e->msg, sizeof(e->msg), "%s", n->broken_msg);
            pthread_mutex_unlock(&n->mu);
            return r;
        }
        if (timeout_s <= 0) break;
        now = chorus__now();
        if (now > deadline) {
            timeout_locked(n, &want, 1);
            continue;
        }
        poll_unlocked(n, sleep_ms(now, spin_until, deadline));
    }
    pthread_mutex_unlock(&n->mu);
    return CHORUS_OK;
}
