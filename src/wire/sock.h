/*
 * sock.h - blocking socket helpers with deadlines, used while setting connections up
 * (rendezvous store, transport handshake). Steady-state traffic goes through the
 * non-blocking transport instead.
 */
#ifndef CHORUS_SOCK_H
#define CHORUS_SOCK_H

#include <netinet/in.h>

#include "base/base.h"
#include "wire/wire.h"

/* "host:port" -> IPv4 address (host may be a name). Returns 0 or -1. */
int chorus__sock_resolve(const char *hostport, struct sockaddr_in *out);

/* Connects, retrying refused/unreachable until the deadline (a peer that starts late is
 * normal). */
chorus_result chorus__sock_connect(const char *hostport, double deadline, int *fd,
                                   chorus_errbuf *e);

/* The same; with retry_refused 0 a refused connection fails at once (CHORUS_ERR_PEER_LOST):
 * for addresses published only after their listener was up, where a refusal means the
 * listener is gone. */
chorus_result chorus__sock_connect_ex(const char *hostport, double deadline, int retry_refused,
                                      int *fd, chorus_errbuf *e);

/* Listens on ip (NULL or "" = every address) and port (0 = any); returns the port bound. */
chorus_result chorus__sock_listen(const char *ip, int port, int backlog, int *fd, int *port_out,
                                  chorus_errbuf *e);

/* TCP_NODELAY and CHORUS_SOCKET_BUF-sized buffers. */
void chorus__sock_tune(int fd);

/* Results: 0 done, -1 error (errno set), -2 deadline passed, -3 peer closed. */
int chorus__sock_write_all(int fd, const void *buf, size_t len, double deadline);
int chorus__sock_read_all(int fd, void *buf, size_t len, double deadline);

/* One framed message: header + payload. recv allocates the payload (len bounded by max_len)
 * and validates the header through wire.c; *why says what was wrong. */
int chorus__sock_send_msg(int fd, const chorus_wire_hdr *h, const void *payload, double deadline);
int chorus__sock_recv_msg(int fd, chorus_wire_hdr *h, unsigned char **payload, uint64_t max_len,
                          double deadline, char *why, size_t why_len);

/* Local IPv4 address of a connected socket ("a.b.c.d"). */
int chorus__sock_local_ip(int fd, char *out, size_t len);
/* Describes a sock_* negative result. */
const char *chorus__sock_errstr(int rc);

#endif
