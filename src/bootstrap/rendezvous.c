/*
 * rendezvous.c - from a described job to a connected TCP mesh: serve or reach the store,
 * pick the address to listen on, publish "address, host name, host identity", read everyone
 * else's, group the ranks by host and connect to all of them.
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
static chorus_result pick_ip(chorus_store *store, char *ip, size_t len, chorus_errbuf *e)
{
    const char *iface = chorus__cfg_str("CHORUS_IFACE");
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

/* Publishes this rank's "ip:port\nhost name\nhost id" and fetches every rank's record. */
static chorus_result exchange(const chorus_job *job, chorus_store *store, const char *addr,
                              char **addrs, char **hostnames, chorus_rdzv *out, double deadline,
                              chorus_errbuf *e)
{
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
        r = chorus__store_get(store, key, &v, NULL, deadline, e);
        if (r != CHORUS_OK) {
            chorus__fail(e, r, "rank %d never registered with the rendezvous store (%s)", p,
                         e->msg);
            break;
        }
        char *nl1 = strchr(v, '\n'), *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
        if (!nl2) {
            free(v);
            r = chorus__fail(e, CHORUS_ERR_PROTOCOL, "malformed rendezvous record for rank %d", p);
            break;
        }
        *nl1 = *nl2 = 0;
        addrs[p] = strdup(v);
        hostnames[p] = strdup(nl1 + 1);
        hids[p] = strdup(nl2 + 1);
        free(v);
        if (!addrs[p] || !hostnames[p] || !hids[p])
            r = chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    }
    if (r == CHORUS_OK) group_hosts(hids, job->size, job->rank, out);
    for (int p = 0; p < job->size; p++) free(hids[p]);
    free(hids);
    return r;
}

/* Rank 0 of a job that serves its own store: starts it, on the address peers will dial. */
static chorus_result serve_store(chorus_job *job, chorus_store_server **server, chorus_errbuf *e)
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
    CHORUS_CHECK(chorus__store_bind_ip(job->store_addr, bind_ip, sizeof(bind_ip), e));
    return chorus__store_server_start(bind_ip, colon ? atoi(colon + 1) : 0, server, &port, e);
}

chorus_result chorus__rendezvous(const chorus_job *jobp, chorus_rdzv *out, chorus_errbuf *e)
{
    chorus_job job = *jobp;
    out->net = NULL;
    out->local_rank = job.local_rank;
    out->local_size = job.local_size;
    char ip[64], addr[128];
    if (job.size == 1) {
        out->host[0] = 0;
        out->nhosts = 1;
        out->local_rank = 0;
        out->local_size = 1;
        return chorus__net_create(0, 1, job.job, "127.0.0.1", &out->net, addr, sizeof(addr), e);
    }
    chorus_result r = CHORUS_OK;
    chorus_store_server *server = NULL;
    chorus_store *store = NULL;
    char **addrs = calloc((size_t)job.size, sizeof(char *));
    char **hosts = calloc((size_t)job.size, sizeof(char *));
    double deadline = chorus__deadline();
    if (!addrs || !hosts) {
        r = chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (job.serve_store && job.rank == 0)
        CHORUS_CHECK_GOTO(serve_store(&job, &server, e), r, out);
    else if (job.rdzv_file[0])
        CHORUS_CHECK_GOTO(
            read_rdzv_file(job.rdzv_file, job.store_addr, sizeof(job.store_addr), deadline, e), r,
            out);
    CHORUS_CHECK_GOTO(chorus__store_connect(job.store_addr, job.job, deadline, &store, e), r, out);
    CHORUS_CHECK_GOTO(pick_ip(store, ip, sizeof(ip), e), r, out);
    CHORUS_CHECK_GOTO(
        chorus__net_create(job.rank, job.size, job.job, ip, &out->net, addr, sizeof(addr), e), r,
        out);
    CHORUS_CHECK_GOTO(exchange(&job, store, addr, addrs, hosts, out, deadline, e), r, out);
    CHORUS_CHECK_GOTO(chorus__net_connect_all(out->net, addrs, hosts, deadline, e), r, out);
    CHORUS_INFO(CHORUS_LOG_INIT, "rank %d: local rank %d of %d, %d hosts, listening on %s",
                job.rank, out->local_rank, out->local_size, out->nhosts, addr);
out:
    chorus__store_close(store);
    /* Every rank fetched all addresses before connecting, so once the mesh is complete nobody
     * needs the store any more. */
    if (server) chorus__store_server_stop(server);
    if (job.rdzv_file[0] && job.rank == 0) unlink(job.rdzv_file);
    for (int p = 0; addrs && p < job.size; p++) free(addrs[p]);
    for (int p = 0; hosts && p < job.size; p++) free(hosts[p]);
    free(addrs);
    free(hosts);
    if (r != CHORUS_OK && out->net) {
        chorus__net_release(out->net);
        out->net = NULL;
    }
    return r;
}
