/*
 * rendezvous.h - how the ranks of a job find each other: the store (served here or elsewhere,
 * or found through a file on one host), every rank's listening address and host identity
 * published and gathered, and the ranks grouped by host. The transport layer is above this
 * one, so the caller creates the listening endpoint and connects the mesh between the steps:
 *
 *   chorus__rdzv_open      store up and reached; rz.ip: the address to listen on
 *   (caller)               listen on rz.ip, giving "ip:port"
 *   chorus__rdzv_exchange  publish "ip:port", gather everyone's: rz.addrs, hostnames, hosts
 *   (caller)               connect to rz.addrs
 *   chorus__rdzv_close     always, also after a failure
 */
#ifndef CHORUS_RENDEZVOUS_H
#define CHORUS_RENDEZVOUS_H

#include "bootstrap/env.h"

typedef struct chorus_store chorus_store;
typedef struct chorus_store_server chorus_store_server;

typedef struct chorus_rdzv {
    chorus_job job;           /* a copy; the store address filled in when found through a file */
    double deadline;          /* CHORUS_TIMEOUT_S after open: bounds every wait of the rendezvous */
    char ip[64];              /* after open: the address this rank should listen on */
    char **addrs;             /* after exchange: [size] "ip:port" of every rank */
    char **hostnames;         /* after exchange: [size] host name of every rank, for messages */
    const chorus_config *cfg; /* set by the caller: the communicator's parsed config */
    int *host; /* set by the caller to [size] ints; after exchange: rank -> host index
                  (equal index: same host) */
    int nhosts;
    int local_rank, local_size; /* after exchange: the job's when given, else from the hosts */
    chorus_store *store;
    chorus_store_server *server;
    char identity[32]; /* after open, when rank 0 serves the store: the job identity it made */
} chorus_rdzv;

/* Starts the rendezvous of job (of 2 ranks or more): rank 0 serves the store when the job
 * says so (and publishes its address in the rendezvous file on one host), every rank
 * connects to it and picks the address to listen on (CHORUS_IFACE, else the local address of
 * the connection to the store). rz->host must already point to job->size ints. Errors:
 * CHORUS_ERR_TIMEOUT (rank 0 never published the file, the store never answered),
 * CHORUS_ERR_ENV (CHORUS_IFACE or the store address is wrong), CHORUS_ERR_SYSTEM; in every
 * case chorus__rdzv_close must still be called. One thread per rank. */
chorus_result chorus__rdzv_open(chorus_rdzv *rz, const chorus_job *job, chorus_errbuf *e);

/* Publishes this rank's "ip:port" (addr), host name and host identity (chorus__host_id: host
 * name, boot id, network namespace), and waits for every rank's: fills addrs, hostnames,
 * host, nhosts, local_rank, local_size. Errors name the rank that never registered
 * (CHORUS_ERR_TIMEOUT) or sent a malformed record (CHORUS_ERR_PROTOCOL). */
chorus_result chorus__rdzv_exchange(chorus_rdzv *rz, const char *addr, chorus_errbuf *e);

/* When rank 0 serves the store (another job may reach it): CHORUS_ERR_ENV "rank R joined a
 * store that belongs to another job ..." if a rank of the job identity was claimed twice or a
 * second rank 0 found the address served. open and exchange check it; call it again once the
 * mesh is connected, before closing. A store that is already gone counts as no news. */
chorus_result chorus__rdzv_check_identity(chorus_rdzv *rz, chorus_errbuf *e);

/* Ends the rendezvous: closes the store connection, stops a store served here, removes the
 * rendezvous file, frees addrs and hostnames. Call it once the mesh is connected (nobody
 * needs the store after that), or after a failure. Safe on a zeroed rz. */
void chorus__rdzv_close(chorus_rdzv *rz);

#endif
