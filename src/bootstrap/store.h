/*
 * store.h - the rendezvous key-value store. Ranks publish their addresses and read each
 * other's; a GET waits until the key exists. Served by chorus-run, or by rank 0 in a thread
 * when another launcher started the job. Keys live in the namespace of a job id, so two jobs
 * that share a store cannot see each other's keys.
 */
#ifndef CHORUS_STORE_H
#define CHORUS_STORE_H

#include "base/base.h"

typedef struct chorus_store chorus_store;

chorus_result chorus__store_connect(const char *addr, const char *job, double deadline,
                                    chorus_store **out, chorus_errbuf *e);
chorus_result chorus__store_set(chorus_store *s, const char *key, const void *val, size_t len,
                                chorus_errbuf *e);
/* Waits for the key until the deadline; *val is malloc'ed and NUL-terminated. */
chorus_result chorus__store_get(chorus_store *s, const char *key, char **val, size_t *len,
                                double deadline, chorus_errbuf *e);
/* Like get, but does not wait: *found = 0 when the key does not exist (yet). */
chorus_result chorus__store_check(chorus_store *s, const char *key, char **val, size_t *len,
                                  int *found, chorus_errbuf *e);
chorus_result chorus__store_add(chorus_store *s, const char *key, long delta, long *out,
                                chorus_errbuf *e);
/* The local IPv4 address this rank uses to reach the store (the one peers can reach). */
int chorus__store_local_ip(chorus_store *s, char *ip, size_t len);
void chorus__store_close(chorus_store *s);

/* Address a store server should listen on (bind.c): "" for every address only with
 * CHORUS_BIND_ANY=1; else CHORUS_IFACE's address; else what store_addr's host resolves to.
 * Both variables are read from cfg (the communicator's parsed config). */
chorus_result chorus__store_bind_ip(const chorus_config *cfg, const char *store_addr, char *ip,
                                    size_t len, chorus_errbuf *e);
/* The address a store whose address nobody named (shared through PMIx) is served at:
 * CHORUS_IFACE's address, else the first IPv4 address of an interface that is up and not
 * loopback, else 127.0.0.1 (a host with no network: every rank is on it). */
chorus_result chorus__store_host_ip(const chorus_config *cfg, char *ip, size_t len,
                                    chorus_errbuf *e);
/* IPv4 address of an interface name, or the address itself. */
chorus_result chorus__iface_ip(const char *iface, char *ip, size_t len, chorus_errbuf *e);

typedef struct chorus_store_server chorus_store_server;

/* Starts a store server in a background thread on ip:port (ip NULL or "": every address;
 * port 0 = any). Clients must authenticate with CHORUS_SECRET (as set when the server starts)
 * before anything else; clients that fail are dropped and logged at WARN. */
chorus_result chorus__store_server_start(const char *ip, int port, chorus_store_server **out,
                                         int *port_out, chorus_errbuf *e);
void chorus__store_server_stop(chorus_store_server *s);

/* For the fuzzer: a server with no thread and no socket, whose clients are fds the caller
 * adds; poll_once serves what is readable (timeout_ms as poll) and returns the number of
 * clients still connected. */
chorus_store_server *chorus__store_server_new(const char *secret, size_t secret_len);
int chorus__store_server_add_client(chorus_store_server *s, int fd);
int chorus__store_server_poll_once(chorus_store_server *s, int timeout_ms);

#endif
