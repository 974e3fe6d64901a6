/*
 * rendezvous.c - from a described job to everyone's address: serve or reach the store, pick
 * the address to listen on, publish "address, host name, host identity", read everyone
 * else's and group the ranks by host.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/rendezvous.h"
#include "bootstrap/store.h"

/* The address this rank listens on: CHORUS_IFACE (an interface name or an IPv4 address), else
 * the local address of the connection to the store, which is an address peers can reach. */
static chorus_result pick_ip(chorus_store *store, const char *iface, char *ip, size_t len,
                             chorus_errbuf *e)
{
    if (iface) return chorus__iface_ip(iface, ip, len, e);
    if (store && chorus__store_local_ip(store, ip, len) == 0) return CHORUS_OK;
    snprintf(ip, len, "127.0.0.1");
    return CHORUS_OK;
}

/* Single host, no address given: rank 0 publishes its store's address in a file. */
static chorus_result write_rdzv_file(const char *path, int port, chorus_errbuf *e)
{
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "127.0.0.1:%d\n", port);
    if (fclose(f) || rename(tmp, path)) {
        unlink(tmp);
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot write %s: %s", path, strerror(errno));
    }
    return CHORUS_OK;
}

static chorus_result read_rdzv_file(const char *path, char *addr, size_t len, double deadline,
                                    chorus_errbuf *e)
{
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f) {
            int ok = fgets(addr, (int)len, f) != NULL;
            fclose(f);
            char *nl = strchr(addr, '\n');
            if (ok && nl) {
                *nl = 0;
                return CHORUS_OK;
            }
        }
        if (chorus__now() > deadline)
            return chorus__fail(e, CHORUS_ERR_TIMEOUT,
                                "rank 0 did not publish its rendezvous address in %s before the "
                                "timeout (is rank 0 running? CHORUS_TIMEOUT_S)",
                                path);
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Ranks with equal identities share a host: host indices in order of first appearance. */
static void group_hosts(char *const *hids, int size, int rank, chorus_rdzv *out)
{
    int local_rank = 0, local_size = 0;
    out->nhosts = 0;
    for (int p = 0; p < size; p++) {
        int q = 0;
        while (q < p && strcmp(hids[q], hids[p])) q++;
        out->host[p] = q < p ? out->host[q] : out->nhosts++;
        if (!strcmp(hids[p], hids[rank])) {
            if (p < rank) local_rank++;
            local_size++;
        }
    }
    if (out->local_rank < 0) out->local_rank = local_rank;
    if (out->local_size < 0) out->local_size = local_size;
}

/* Rank 0 of a job that serves its own store: starts it, on the address peers will dial. */
static chorus_result serve_store(const chorus_config *cfg, chorus_job *job,
                                 chorus_store_server **server, chorus_errbuf *e)
{
    int port = 0;
    if (job->rdzv_file[0]) {
        CHORUS_CHECK(chorus__store_server_start("127.0.0.1", 0, server, &port, e));
        CHORUS_CHECK(write_rdzv_file(job->rdzv_file, port, e));
        snprintf(job->store_addr, sizeof(job->store_addr), "127.0.0.1:%d", port);
        return CHORUS_OK;
    }
    const char *colon = strrchr(job->store_addr, ':');
    char bind_ip[64] = ""; /* not every address unless asked (CHORUS_BIND_ANY) */
    CHORUS_CHECK(chorus__store_bind_ip(cfg, job->store_addr, bind_ip, sizeof(bind_ip), e));
    return chorus__store_server_start(bind_ip, colon ? atoi(colon + 1) : 0, server, &port, e);
}

chorus_result chorus__rdzv_open(chorus_rdzv *rz, const chorus_job *job, chorus_errbuf *e)
{
    rz->job = *job;
    double start_s = rz->cfg->start_timeout_s;
    rz->deadline = start_s > 0 ? chorus__now() + start_s : chorus__deadline();
    rz->local_rank = job->local_rank;
    rz->local_size = job->local_size;
    if (job->serve_store && job->rank == 0)
        CHORUS_CHECK(serve_store(rz->cfg, &rz->job, &rz->server, e));
    else if (job->rdzv_file[0])
        CHORUS_CHECK(read_rdzv_file(job->rdzv_file, rz->job.store_addr, sizeof(rz->job.store_addr),
                                    rz->deadline, e));
    CHORUS_CHECK(chorus__store_connect(rz->job.store_addr, job->job, rz->deadline, &rz->store, e));
    return pick_ip(rz->store, rz->cfg->iface, rz->ip, sizeof(rz->ip), e);
}

chorus_result chorus__rdzv_exchange(chorus_rdzv *rz, const char *addr, chorus_errbuf *e)
{
    const chorus_job *job = &rz->job;
    chorus_store *store = rz->store;
    rz->addrs = calloc((size_t)job->size, sizeof(char *));
    rz->hostnames = calloc((size_t)job->size, sizeof(char *));
    if (!rz->addrs || !rz->hostnames) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    char hid[300], rec[600], key[64], name[64] = "?";
    chorus__host_id(hid, sizeof(hid));
    gethostname(name, sizeof(name) - 1);
    snprintf(rec, sizeof(rec), "%s\n%s\n%s", addr, name, hid);
    snprintf(key, sizeof(key), "rank/%d", job->rank);
    CHORUS_CHECK(chorus__store_set(store, key, rec, strlen(rec), e));
    char **hids = calloc((size_t)job->size, sizeof(char *));
    if (!hids) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    chorus_result r = CHORUS_OK;
    for (int p = 0; p < job->size && r == CHORUS_OK; p++) {
        char *v = NULL;
        snprintf(key, sizeof(key), "rank/%d", p);
        r = chorus__store_get(store, key, &v, NULL, rz->deadline, e);
        if (r != CHORUS_OK) {
            chorus__fail(e, r, "rank %d never registered with the rendezvous store (%s%s)", p,
                         e->msg,
                         rz->cfg->start_timeout_s > 0 ? "; waited CHORUS_START_TIMEOUT_S" : "");
            break;
        }
        char *nl1 = strchr(v, '\n'), *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
        if (!nl2) {
            free(v);
            r = chorus__fail(e, CHORUS_ERR_PROTOCOL, "malformed rendezvous record for rank %d", p);
            break;
        }
        *nl1 = *nl2 = 0;
        rz->addrs[p] = strdup(v);
        rz->hostnames[p] = strdup(nl1 + 1);
        hids[p] = strdup(nl2 + 1);
        free(v);
        if (!rz->addrs[p] || !rz->hostnames[p] || !hids[p])
            r = chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    }
    if (r == CHORUS_OK) {
        group_hosts(hids, job->size, job->rank, rz);
        CHORUS_INFO(CHORUS_LOG_INIT, "rank %d: local rank %d of %d, %d host%s, listening on %s",
                    job->rank, rz->local_rank, rz->local_size, rz->nhosts,
                    rz->nhosts == 1 ? "" : "s", addr);
    }
    for (int p = 0; p < job->size; p++) free(hids[p]);
    free(hids);
    return r;
}

void chorus__rdzv_close(chorus_rdzv *rz)
{
    chorus__store_close(rz->store);
    rz->store = NULL;
    if (rz->server) chorus__store_server_stop(rz->server);
    rz->server = NULL;
    if (rz->job.rdzv_file[0] && rz->job.rank == 0) unlink(rz->job.rdzv_file);
    for (int p = 0; rz->addrs && p < rz->job.size; p++) free(rz->addrs[p]);
    for (int p = 0; rz->hostnames && p < rz->job.size; p++) free(rz->hostnames[p]);
    free(rz->addrs);
    free(rz->hostnames);
    rz->addrs = rz->hostnames = NULL;
}
