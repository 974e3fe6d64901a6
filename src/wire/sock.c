/* sock.c - blocking socket I/O with deadlines for connection set-up. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/byteorder.h"
#include "wire/sock.h"

/* Splits "host:port": the port, with the host copied to host[len]; -1 if malformed. */
static long split_hostport(const char *hostport, char *host, size_t len)
{
    const char *colon = strrchr(hostport, ':');
    if (!colon || colon == hostport || (size_t)(colon - hostport) >= len) return -1;
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    return *end || port <= 0 || port > 65535 ? -1 : port;
}

int chorus__sock_resolve(const char *hostport, struct sockaddr_in *out)
{
    char host[256];
    long port = split_hostport(hostport, host, sizeof(host));
    if (port < 0) return -1;
    memset(out, 0, sizeof(*out));
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &out->sin_addr) == 1) return 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return -1;
    out->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return 0;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

chorus_result chorus__sock_connect(const char *hostport, double deadline, int *fdp,
                                   chorus_errbuf *e)
{
    return chorus__sock_connect_ex(hostport, deadline, 1, fdp, e);
}

chorus_result chorus__sock_connect_ex(const char *hostport, double deadline, int retry_refused,
                                      int *fdp, chorus_errbuf *e)
{
    struct sockaddr_in sa;
    char host[256];
    double backoff = 0.005;
    if (split_hostport(hostport, host, sizeof(host)) < 0)
        return chorus__fail(e, CHORUS_ERR_ENV, "cannot resolve address '%s' (expected host:port)",
                            hostport);
    /* A name that does not resolve yet may soon (the DNS record of a host or pod that is still
     * starting): retried until the deadline, like a refused connection. */
    while (chorus__sock_resolve(hostport, &sa)) {
        if (!retry_refused || chorus__now() + backoff > deadline)
            return chorus__fail(e, retry_refused ? CHORUS_ERR_TIMEOUT : CHORUS_ERR_ENV,
                                "cannot resolve the host name '%s' (of %s)%s", host, hostport,
                                retry_refused ? " before the timeout: is it right, and is its DNS "
                                                "record published yet? (CHORUS_TIMEOUT_S)"
                                              : "");
        sleep_s(backoff);
        if (backoff < 0.2) backoff *= 2;
    }
    backoff = 0.005;
    int last_err = 0;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return chorus__fail(e, CHORUS_ERR_SYSTEM, "socket(): %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            *fdp = fd;
            return CHORUS_OK;
        }
        last_err = errno;
        close(fd);
        if (last_err == ECONNREFUSED && !retry_refused)
            return chorus__fail(e, CHORUS_ERR_PEER_LOST,
                                "%s refused the connection: the process that listened there has "
                                "exited",
                                hostport);
        if (last_err != ECONNREFUSED && last_err != ETIMEDOUT && last_err != EHOSTUNREACH &&
            last_err != ENETUNREACH && last_err != ECONNRESET && last_err != EINTR)
            return chorus__fail(e, CHORUS_ERR_SYSTEM, "connect to %s: %s", hostport,
                                strerror(last_err));
        if (chorus__now() + backoff > deadline)
            return chorus__fail(e, CHORUS_ERR_TIMEOUT,
                                "could not connect to %s before the timeout (last error: %s); is "
                                "rank 0 / the launcher running? (CHORUS_TIMEOUT_S)",
                                hostport, strerror(last_err));
        sleep_s(backoff);
        if (backoff < 0.2) backoff *= 2;
    }
}

chorus_result chorus__sock_listen(const char *ip, int port, int backlog, int *fdp, int *port_out,
                                  chorus_errbuf *e)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (ip && *ip) {
        if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
            return chorus__fail(e, CHORUS_ERR_ENV, "'%s' is not an IPv4 address", ip);
    } else {
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return chorus__fail(e, CHORUS_ERR_SYSTEM, "socket(): %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, backlog)) {
        int err = errno;
        close(fd);
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot listen on %s:%d: %s%s",
                            ip && *ip ? ip : "*", port, strerror(err),
                            err == EADDRNOTAVAIL ? " (that address is not on this host: check "
                                                   "MASTER_ADDR or CHORUS_IFACE)"
                                                 : "");
    }
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    if (port_out) *port_out = ntohs(sa.sin_port);
    *fdp = fd;
    return CHORUS_OK;
}

void chorus__sock_tune(int fd)
{
    int one = 1, buf = (int)chorus__config()->socket_buf;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (buf > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    }
}

static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        double left = deadline - chorus__now();
        if (left <= 0) return -2;
        struct pollfd p = {.fd = fd, .events = ev};
        int ms = left > 1000 ? 1000000 : (int)(left * 1000) + 1;
        int r = poll(&p, 1, ms);
        if (r > 0) return 0;
        if (r < 0 && errno != EINTR) return -1;
    }
}

int chorus__sock_write_all(int fd, const void *buf, size_t len, double deadline)
{
    const char *p = buf;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int r = wait_fd(fd, POLLOUT, deadline);
            if (r) return r;
            continue;
        }
        return -1;
    }
    return 0;
}

int chorus__sock_read_all(int fd, void *buf, size_t len, double deadline)
{
    char *p = buf;
    while (len) {
        ssize_t r = recv(fd, p, len, MSG_DONTWAIT);
        if (r > 0) {
            p += r;
            len -= (size_t)r;
            continue;
        }
        if (r == 0) return -3;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int w = wait_fd(fd, POLLIN, deadline);
            if (w) return w;
            continue;
        }
        return -1;
    }
    return 0;
}

int chorus__sock_send_msg(int fd, const chorus_wire_hdr *h, const void *payload, double deadline)
{
    unsigned char hb[CHORUS_WIRE_HDR_LEN];
    chorus__wire_encode_hdr(h, hb);
    int r = chorus__sock_write_all(fd, hb, sizeof(hb), deadline);
    if (r == 0 && h->len) r = chorus__sock_write_all(fd, payload, h->len, deadline);
    return r;
}

int chorus__sock_recv_msg(int fd, chorus_wire_hdr *h, unsigned char **payload, uint64_t max_len,
                          double deadline, char *why, size_t why_len)
{
    unsigned char hb[CHORUS_WIRE_HDR_LEN];
    *payload = NULL;
    /* The magic first, on its own: a program that is not a Chorus peer is told apart by its
     * first bytes even when it sends fewer than a header and closes. */
    int r = chorus__sock_read_all(fd, hb, 4, deadline);
    uint32_t magic = chorus__get_le32(hb);
    if (!r && magic != CHORUS_WIRE_MAGIC) {
        char text[5];
        for (int i = 0; i < 4; i++) text[i] = hb[i] >= 32 && hb[i] < 127 ? (char)hb[i] : '.';
        text[4] = 0;
        snprintf(why, why_len, "bad magic 0x%08x (\"%s\"): not a Chorus peer", magic, text);
        return -4;
    }
    if (!r) r = chorus__sock_read_all(fd, hb + 4, sizeof(hb) - 4, deadline);
    if (r) {
        snprintf(why, why_len, "%s", chorus__sock_errstr(r));
        return r;
    }
    if (chorus__wire_decode_hdr(hb, max_len, h, why, why_len) != CHORUS_OK) return -4;
    if (h->len) {
        *payload = malloc(h->len);
        if (!*payload) {
            snprintf(why, why_len, "out of memory for %llu bytes", (unsigned long long)h->len);
            return -1;
        }
        r = chorus__sock_read_all(fd, *payload, h->len, deadline);
        if (r) {
            free(*payload);
            *payload = NULL;
            snprintf(why, why_len, "%s", chorus__sock_errstr(r));
            return r;
        }
    }
    return 0;
}

int chorus__sock_local_ip(int fd, char *out, size_t len)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) || sa.sin_family != AF_INET) return -1;
    return inet_ntop(AF_INET, &sa.sin_addr, out, (socklen_t)len) ? 0 : -1;
}

const char *chorus__sock_errstr(int rc)
{
    switch (rc) {
    case 0: return "ok";
    case -1: return strerror(errno);
    case -2: return "timed out";
    case -3: return "connection closed by peer";
    case -4: return "malformed message";
    default: return "unknown error";
    }
}
