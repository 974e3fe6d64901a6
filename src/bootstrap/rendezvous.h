/*
 * rendezvous.h - how the ranks of a job find each other: the store (served here or elsewhere,
 * or found through a file on one host), every rank's listening address and host identity
 * published and gathered, and the TCP mesh connected. What it returns is all a communicator
 * needs to start: the connections and which ranks share a host.
 */
#ifndef CHORUS_RENDEZVOUS_H
#define CHORUS_RENDEZVOUS_H

#include "bootstrap/env.h"
#include "transport/tcp/net.h"

typedef struct chorus_rdzv {
    chorus_net *net; /* the connected mesh (one reference, the caller's) */
    int *host;       /* [job size], filled: rank -> host index (equal index: same host) */
    int nhosts;
    int local_rank, local_size; /* the job's when given, else computed from the hosts */
} chorus_rdzv;

/* Runs the rendezvous of job: on success out->net is connected to every rank and out->host,
 * nhosts, local_rank, local_size are set (out->host must point to job->size ints). Ranks
 * count as one host when their chorus__host_id is equal (host name, boot id and network
 * namespace). Every wait ends by CHORUS_TIMEOUT_S; errors name the rank that did not show up
 * (CHORUS_ERR_TIMEOUT, CHORUS_ERR_PROTOCOL, CHORUS_ERR_ENV for a bad CHORUS_IFACE ...) and
 * leave nothing behind (store served here stopped, rendezvous file removed). Called once per
 * job by one thread of each rank. */
chorus_result chorus__rendezvous(const chorus_job *job, chorus_rdzv *out, chorus_errbuf *e);

#endif
