/*
 * conn.c - the connection mesh: creating the net and its listening socket, opening
 * CHORUS_TCP_LANES connections per pair of ranks (rank r connects to lower ranks and accepts
 * higher ones; each connection proves the job's secret and says hello naming its rank and
 * lane), and closing: goodbyes on every lane, draining what the peers have not yet
 * acknowledged, and freeing what is left.
 */
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/tcp/net_internal.h"
#include "wire/sock.h"

/* The most connections the default lane count may open per rank (3 per peer, else 1). */
#define AUTO_LANE_SOCKETS 512

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

chorus_result chorus__net_create(const chorus_config *cfg, int rank, int size, const char *job,
                                 const char *bind_ip, chorus_net **out, char *addr, size_t addr_len,
                                 chorus_errbuf *e)
{
    chorus_net *n = calloc(1, sizeof(*n));
    if (!n) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    /* 0: three lanes (on loopback one stream is one core's copy; three took 2-32 MiB
     * allreduces to 1.3-1.9x one lane's speed, docs/PERFORMANCE.md) while they cost at most
     * AUTO_LANE_SOCKETS connections per rank, well inside the usual limit of 1024 open files */
    if (cfg->tcp_lanes >= 1)
        n->nlanes = (int)cfg->tcp_lanes;
    else
        n->nlanes = cfg->tcp_lanes == 0 && 3L * (size - 1) <= AUTO_LANE_SOCKETS ? 3 : 1;
    n->stripe_min = cfg->tcp_stripe_min;
    n->stripe_max = cfg->tcp_stripe_max;
    if (cfg->tcp_lanes > CHORUS_WIRE_LANES_MAX) {
        free(n);
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "CHORUS_TCP_LANES=%ld: at most %d",
                            cfg->tcp_lanes, CHORUS_WIRE_LANES_MAX);
    }
    n->peers = calloc((size_t)size, sizeof(peer));
    lane *lanes = calloc((size_t)size * (size_t)n->nlanes, sizeof(lane));
    if (!n->peers || !lanes) {
        free(n->peers);
        free(lanes);
        free(n);
        return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    }
    for (int p = 0; p < size; p++) {
        n->peers[p].lanes = lanes + (size_t)p * (size_t)n->nlanes;
        for (int l = 0; l < n->nlanes; l++) n->peers[p].lanes[l].fd = -1;
    }
    n->rank = rank;
    n->size = size;
    n->refs = 1;
    n->listen_fd = -1;
    n->broken_rank = -1;
    n->max_msg = (uint64_t)cfg->max_message;
    n->spin_us = (int)cfg->spin_us;
    n->hb_interval = cfg->heartbeat_s;
    n->hb_timeout = cfg->heartbeat_timeout_s;
    if (cfg->timeout_s > 0 && n->hb_timeout > cfg->timeout_s) {
        /* A heartbeat deadline cut short by CHORUS_TIMEOUT_S keeps four pings inside it: with
         * only two, a live peer whose watchdog waited its turn for a core on a busy machine
         * would be taken for a silent one. */
        n->hb_timeout = cfg->timeout_s;
        if (n->hb_interval > n->hb_timeout / 4) n->hb_interval = n->hb_timeout / 4;
    }
    snprintf(n->job, sizeof(n->job), "%s", job);
    chorus__auth_key_from_env(&n->key);
    pthread_mutex_init(&n->mu, NULL);
    n->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (n->epfd < 0) {
        chorus__net_release(n);
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "epoll_create1: %s", strerror(errno));
    }
    int port = 0;
    if (size > 1) {
        chorus_result r =
            chorus__sock_listen(bind_ip, 0, size * n->nlanes + 16, &n->listen_fd, &port, e);
        if (r != CHORUS_OK) {
            chorus__net_release(n);
            return r;
        }
    }
    snprintf(addr, addr_len, "%s:%d", bind_ip && *bind_ip ? bind_ip : "127.0.0.1", port);
    *out = n;
    return CHORUS_OK;
}

/* Opens lane l to rank p: connects, proves the secret, says hello (rank, lane, lane count). */
static chorus_result connect_to(chorus_net *n, int p, int l, const char *addr, double deadline,
                                chorus_errbuf *e)
{
    int fd;
    /* Peers publish their address after they listen: a refusal means that peer is gone. */
    chorus_result cr = chorus__sock_connect_ex(addr, deadline, 0, &fd, e);
    if (cr != CHORUS_OK) {
        char msg[sizeof(e->msg)];
        snprintf(msg, sizeof(msg), "%s", e->msg);
        return chorus__fail(e, cr, "rank %d cannot connect to rank %d (host %s): %s", n->rank, p,
                            chorus__net_host(n, p), msg);
    }
    char what[200];
    snprintf(what, sizeof(what), "rank %d (host %s) at %s", p, chorus__net_host(n, p), addr);
    chorus_result ar = chorus__auth_connect(fd, &n->key, deadline, what, e);
    if (ar != CHORUS_OK) {
        close(fd);
        return ar;
    }
    chorus_wire_hello hello = {.rank = n->rank,
                               .size = n->size,
                               .lane = l,
                               .lanes = n->nlanes,
                               .stripe_min = n->stripe_min,
                               .stripe_max = n->stripe_max};
    snprintf(hello.job, sizeof(hello.job), "%s", n->job);
    unsigned char payload[CHORUS_WIRE_HELLO_LEN];
    chorus__wire_encode_hello(&hello, payload);
    chorus_wire_hdr h = {.type = CHORUS_MSG_HELLO, .len = sizeof(payload)};
    int rc = chorus__sock_send_msg(fd, &h, payload, deadline);
    unsigned char *ack = NULL;
    char why[200] = "";
    if (rc == 0)
        rc = chorus__sock_recv_msg(fd, &h, &ack, CHORUS_WIRE_ABORT_MAX, deadline, why, sizeof(why));
    chorus_wire_abort refusal;
    int refused = rc == 0 && h.type == CHORUS_MSG_ABORT &&
                  chorus__wire_decode_abort(ack, h.len, &refusal) == CHORUS_OK;
    free(ack);
    if (refused) { /* a rank of the job that cannot work with this one, and says why */
        close(fd);
        return chorus__fail(e, (chorus_result)refusal.result, "%s", refusal.why);
    }
    if (rc == -3 && n->key.set) {
        close(fd);
        return chorus__fail(e, CHORUS_ERR_AUTH,
                            "rank %d at %s closed the connection after our authentication "
                            "proof: it does not accept our CHORUS_SECRET",
                            p, addr);
    }
    if (rc || h.type != CHORUS_MSG_HELLO_ACK) {
        close(fd);
        return chorus__fail(e, rc == -2 ? CHORUS_ERR_TIMEOUT : CHORUS_ERR_PEER_LOST,
                            "handshake with rank %d at %s failed: %s", p, addr,
                            rc ? why : "unexpected reply");
    }
    n->peers[p].lanes[l].fd = fd;
    return CHORUS_OK;
}

/* Accepts one connection and checks its hello. Returns the peer's rank or -1 at the deadline
 * (*res CHORUS_ERR_TIMEOUT). A connection that fails the checks is refused (closed and
 * logged; a rank of the job that opens another number of lanes is told why) and set-up goes
 * on. */
static int accept_one(chorus_net *n, double deadline, chorus_result *res)
{
    *res = CHORUS_OK;
    for (;;) {
        double left = deadline - chorus__now();
        if (left <= 0) {
            *res = CHORUS_ERR_TIMEOUT;
            return -1;
        }
        struct pollfd pfd = {.fd = n->listen_fd, .events = POLLIN};
        int pr = poll(&pfd, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
        if (pr <= 0) continue;
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        int fd = accept4(n->listen_fd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
        if (fd < 0) continue;
        char from[64];
        inet_ntop(AF_INET, &sa.sin_addr, from, sizeof(from));
        /* A real peer sends its hello at once; do not let a silent client hold set-up up. */
        double hd = chorus__now() + 5.0;
        if (hd > deadline) hd = deadline;
        chorus_wire_hdr h;
        unsigned char *payload = NULL;
        char why[200] = "";
        /* The secret first: nothing else is read from a connection that cannot prove it. */
        int rc = chorus__auth_accept(fd, &n->key, hd, why, sizeof(why)) ? -5 : 0;
        if (rc == 0)
            rc = chorus__sock_recv_msg(fd, &h, &payload, CHORUS_WIRE_HELLO_LEN, hd, why,
                                       sizeof(why));
        chorus_wire_hello hello;
        const char *bad = NULL;
        if (rc)
            bad = why;
        else if (h.type == CHORUS_MSG_AUTH_HELLO)
            bad = "it wants to authenticate, but CHORUS_SECRET is not set on this rank";
        else if (h.type != CHORUS_MSG_HELLO ||
                 chorus__wire_decode_hello(payload, h.len, &hello) != CHORUS_OK)
            bad = "not a valid hello";
        else if (strcmp(hello.job, n->job))
            bad = "belongs to another job";
        else if (hello.size != n->size)
            bad = "disagrees on the world size";
        else if ((hello.lanes != n->nlanes ||
                  (n->nlanes > 1 &&
                   (hello.stripe_min != n->stripe_min || hello.stripe_max != n->stripe_max))) &&
                 hello.rank > n->rank) {
            /* a rank of this job (it proved the secret and names the job) configured
             * differently: it is told why (an abort instead of the acknowledgement) and fails
             * at once; this rank remembers why, for its own error at the deadline */
            free(payload);
            chorus_wire_abort a = {.failed_rank = -1, .result = CHORUS_ERR_INVALID_ARG};
            if (hello.lanes != n->nlanes)
                snprintf(a.why, sizeof(a.why),
                         "rank %d opens %d TCP lanes per pair of ranks, rank %d opens %d: "
                         "CHORUS_TCP_LANES must be the same on every rank",
                         hello.rank, hello.lanes, n->rank, n->nlanes);
            else
                snprintf(a.why, sizeof(a.why),
                         "rank %d stripes collectives of %llu to %llu bytes over its TCP lanes, "
                         "rank %d of %llu to %llu: CHORUS_TCP_STRIPE_MIN and "
                         "CHORUS_TCP_STRIPE_MAX must be the same on every rank",
                         hello.rank, (unsigned long long)hello.stripe_min,
                         (unsigned long long)hello.stripe_max, n->rank,
                         (unsigned long long)n->stripe_min, (unsigned long long)n->stripe_max);
            snprintf(n->refusal, sizeof(n->refusal), "%s", a.why);
            CHORUS_WARN(CHORUS_LOG_TCP, "refused a connection from %s:%d: %s", from,
                        ntohs(sa.sin_port), a.why);
            unsigned char ab[CHORUS_WIRE_ABORT_MAX];
            chorus_wire_hdr ah = {.type = CHORUS_MSG_ABORT,
                                  .len = chorus__wire_encode_abort(&a, ab)};
            chorus__sock_send_msg(fd, &ah, ab, hd);
            close(fd);
            continue;
        } else if (hello.rank <= n->rank || n->peers[hello.rank].lanes[hello.lane].fd >= 0)
            bad = "claims a rank that should not connect here";
        free(payload);
        if (bad) {
            CHORUS_WARN(CHORUS_LOG_TCP, "refused a connection from %s:%d: %s", from,
                        ntohs(sa.sin_port), bad);
            close(fd);
            continue;
        }
        chorus_wire_hdr ack = {.type = CHORUS_MSG_HELLO_ACK};
        if (chorus__sock_send_msg(fd, &ack, NULL, deadline)) {
            close(fd);
            continue;
        }
        n->peers[hello.rank].lanes[hello.lane].fd = fd;
        return hello.rank;
    }
}

chorus_result chorus__net_connect_all(chorus_net *n, char *const *addrs, char *const *hosts,
                                      double deadline, chorus_errbuf *e)
{
    for (int p = 0; p < n->size; p++)
        snprintf(n->peers[p].host, sizeof(n->peers[p].host), "%s", hosts ? hosts[p] : "?");
    for (int p = 0; p < n->rank; p++)
        for (int l = 0; l < n->nlanes; l++)
            CHORUS_CHECK(connect_to(n, p, l, addrs[p], deadline, e));
    for (int got = (n->rank + 1) * n->nlanes; got < n->size * n->nlanes; got++) {
        chorus_result r;
        if (accept_one(n, deadline, &r) < 0) {
            int missing = -1;
            for (int p = n->rank + 1; p < n->size && missing < 0; p++)
                for (int l = 0; l < n->nlanes; l++)
                    if (n->peers[p].lanes[l].fd < 0) missing = p;
            return chorus__fail(e, r,
                                "rank %d timed out waiting for rank %d (host %s) to connect%s%s",
                                n->rank, missing, chorus__net_host(n, missing),
                                n->refusal[0] ? "; refused earlier: " : "", n->refusal);
        }
    }
    if (n->listen_fd >= 0) {
        close(n->listen_fd);
        n->listen_fd = -1;
    }
    for (int p = 0; p < n->size; p++)
        for (int l = 0; l < n->nlanes && p != n->rank; l++) {
            int fd = n->peers[p].lanes[l].fd;
            chorus__sock_tune(fd);
            set_nonblock(fd);
            struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tcp_lane_tag(p, l)};
            if (epoll_ctl(n->epfd, EPOLL_CTL_ADD, fd, &ev))
                return chorus__fail(e, CHORUS_ERR_SYSTEM, "epoll_ctl: %s", strerror(errno));
        }
    CHORUS_INFO(CHORUS_LOG_TCP, "rank %d connected to %d peer%s over %d TCP lane%s each", n->rank,
                n->size - 1, n->size == 2 ? "" : "s", n->nlanes, n->nlanes == 1 ? "" : "s");
    tcp_watchdog_start(n);
    return CHORUS_OK;
}

void chorus__net_retain(chorus_net *n)
{
    __atomic_add_fetch(&n->refs, 1, __ATOMIC_ACQ_REL);
}

/* Before closing a healthy net: waits until the peers' kernels have acknowledged everything
 * this rank wrote (a fast rank's last segments may still be on a slow link), reading and
 * dropping what arrives meanwhile, since closing a socket with unread data resets the
 * connection and throws away what was still queued. Gives up on a peer that closed or that
 * took nothing for ABORT_FLUSH_S (or CHORUS_TIMEOUT_S when shorter). */
static void drain_before_close(chorus_net *n)
{
    double timeout_s = chorus__timeout_s();
    if (timeout_s > ABORT_FLUSH_S) timeout_s = ABORT_FLUSH_S;
    double deadline = chorus__now() + timeout_s;
    char sink[4096];
    for (int i = 0; i < n->size * n->nlanes; i++) {
        lane *pe = &n->peers[i / n->nlanes].lanes[i % n->nlanes];
        if (pe->fd < 0) continue;
        int last = -1, outq;
        while (ioctl(pe->fd, SIOCOUTQ, &outq) == 0 && outq > 0 && chorus__now() < deadline) {
            if (outq != last) deadline = chorus__now() + timeout_s;
            last = outq;
            ssize_t k;
            while ((k = recv(pe->fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0) {
            }
            if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                break; /* the peer closed: nothing more can be delivered */
            struct pollfd pf = {.fd = pe->fd, .events = POLLIN};
            poll(&pf, 1, 10);
        }
    }
}

void chorus__net_release(chorus_net *n)
{
    if (!n || __atomic_sub_fetch(&n->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    tcp_watchdog_stop(n);
    unsigned char bye[CHORUS_WIRE_HDR_LEN];
    chorus_wire_hdr h = {.type = CHORUS_MSG_BYE};
    chorus__wire_encode_hdr(&h, bye);
    for (int i = 0; i < n->size * n->nlanes; i++) {
        lane *pe = &n->peers[i / n->nlanes].lanes[i % n->nlanes];
        /* Say goodbye (on every lane) so the peer knows our closing is no failure; skipped
         * when a partial message is still queued (the peer could not parse it) or the net is
         * broken. */
        if (pe->fd >= 0 && n->broken == CHORUS_OK && !pe->sq_head)
            if (send(pe->fd, bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* gone */
            }
    }
    if (n->broken == CHORUS_OK) drain_before_close(n);
    for (int p = 0; p < n->size; p++) {
        peer *pe = &n->peers[p];
        for (int l = 0; l < n->nlanes; l++) {
            lane *ln = &pe->lanes[l];
            if (ln->fd >= 0) close(ln->fd);
            free(ln->stage);
            /* the slices of striped sends that never went out belong to the lane (lane 0's
             * queue holds the callers' requests, which may be gone by now: never touched) */
            for (chorus_req *r = l ? ln->sq_head : NULL, *nx; r; r = nx) {
                nx = r->next;
                if (r != &ln->ping) free(r);
            }
            for (lchunk *c = ln->cq_head, *nx; c; c = nx) {
                nx = c->next;
                free(c->early);
                free(c);
            }
        }
        for (stripe *st = pe->stripes, *nx; st; st = nx) {
            nx = st->next;
            free(st);
        }
        for (umsg *u = pe->uq_head, *nx; u; u = nx) {
            nx = u->next;
            free(u->data);
            free(u);
        }
    }
    if (n->listen_fd >= 0) close(n->listen_fd);
    if (n->epfd >= 0) close(n->epfd);
    pthread_mutex_destroy(&n->mu);
    if (n->peers) free(n->peers[0].lanes);
    free(n->peers);
    free(n->lost_notice);
    free(n);
}
