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

#include "bootstrap/pmix.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/store.h"
#include "wire/auth.h"

/* The job identity, in a store served by rank 0 (torchrun, mpirun, srun, or MASTER_PORT set by
 * hand). Nothing in such an environment tells two jobs given the same address apart, so the
 * rank that binds the store makes a random identity, and every rank claims its rank in it
 * once: a second claim of a rank (a rank of another job), or a rank 0 that finds the port
 * already served, marks the identity as shared, and every rank checks that mark after the
 * exchange and again once the mesh is connected. */
#define KEY_IDENTITY "job/identity"
#define KEY_SHARED   "job/shared"

/* The job's rank 0 serves the store, so another job may reach it. */
static int guarded(const chorus_job *job)
{
    return job->serve_store && !job->rdzv_file[0];
}

/* what: the first half of the message ("rank 1 joined a store that belongs to another job"). */
static chorus_result other_job(const chorus_job *job, const char *what, const char *detail,
                               chorus_errbuf *e)
{
    return chorus__fail(e, CHORUS_ERR_ENV,
                        "%s (%s). Two jobs were given the same store address %s (job id '%s'): "
                        "give each job its own MASTER_PORT (or CHORUS_SECRET, or CHORUS_JOB_ID); "
                        "this job stops here",
                        what, detail, job->store_addr, job->job);
}

/* Marks the identity of the store s as shared by two jobs (best effort: the caller fails). */
static void mark_shared(chorus_store *s, const char *why)
{
    chorus_errbuf ignored;
    chorus__store_set(s, KEY_SHARED, why, strlen(why), &ignored);
}

/* Rank 0 of a job that could not bind its store address: if that address is a store of the
 * same job id (another job's rank 0 was faster), marks it shared so that neither job forms,
 * and returns 1. */
static int spoil_other_store(const chorus_job *job)
{
    chorus_store *s = NULL;
    chorus_errbuf ignored;
    if (chorus__store_connect(job->store_addr, job->job, chorus__now() + 2, &s, &ignored) !=
        CHORUS_OK)
        return 0;
    mark_shared(s, "a second rank 0 found this store address already served");
    chorus__store_close(s);
    return 1;
}

/* Serving rank: makes the identity. Every rank: claims its rank in it (once). */
static chorus_result claim_rank(chorus_rdzv *rz, chorus_errbuf *e)
{
    const chorus_job *job = &rz->job;
    char key[64], *id = NULL, why[160];
    if (rz->server) {
        unsigned char rnd[12];
        char hex[25];
        chorus__auth_random(rnd, sizeof(rnd));
        for (size_t i = 0; i < sizeof(rnd); i++) snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
        CHORUS_CHECK(chorus__store_set(rz->store, KEY_IDENTITY, hex, strlen(hex), e));
    }
    CHORUS_CHECK(chorus__store_get(rz->store, KEY_IDENTITY, &id, NULL, rz->deadline, e));
    snprintf(rz->identity, sizeof(rz->identity), "%s", id);
    free(id);
    long n = 0;
    snprintf(key, sizeof(key), "job/claim/%d", job->rank);
    CHORUS_CHECK(chorus__store_add(rz->store, key, 1, &n, e));
    if (n == 1) return CHORUS_OK;
    snprintf(why, sizeof(why), "rank %d of job identity %s was claimed by %ld processes", job->rank,
             rz->identity, n);
    mark_shared(rz->store, why);
    char what[96];
    snprintf(what, sizeof(what), "rank %d joined a store that belongs to another job", job->rank);
    return other_job(job, what, why, e);
}

chorus_result chorus__rdzv_check_identity(chorus_rdzv *rz, chorus_errbuf *e)
{
    if (!guarded(&rz->job) || !rz->store) return CHORUS_OK;
    char *why = NULL;
    int found = 0;
    chorus_errbuf gone;
    /* A store that is gone was closed by rank 0 after its own last check passed. */
    if (chorus__store_check(rz->store, KEY_SHARED, &why, NULL, &found, &gone) != CHORUS_OK)
        return CHORUS_OK;
    if (!found) return CHORUS_OK;
    char what[96];
    snprintf(what, sizeof(what), "rank %d: another job joined this job's store", rz->job.rank);
    chorus_result r = other_job(&rz->job, what, why, e);
    free(why);
    return r;
}

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

/* A job on several hosts met through the launcher's PMIx server: rank 0 serves the store on
 * its host's address and a free port and shares "ip:port" (or "!why" when it could not serve
 * it, so that nobody waits for a store that will never be); every rank learns it. */
static chorus_result meet_through_pmix(chorus_rdzv *rz, chorus_errbuf *e)
{
    chorus_job *job = &rz->job;
    char *addr = job->store_addr, ip[64];
    size_t len = sizeof(job->store_addr);
    chorus_result r = CHORUS_OK;
    if (job->rank == 0) {
        int port = 0;
        r = chorus__store_host_ip(rz->cfg, ip, sizeof(ip), e);
        if (r == CHORUS_OK)
            r = chorus__store_server_start(rz->cfg->bind_any ? "" : ip, 0, &rz->server, &port, e);
        if (r == CHORUS_OK)
            snprintf(addr, len, "%s:%d", ip, port);
        else
            snprintf(addr, len, "!%.200s", e->msg);
    }
    chorus_errbuf ignored;
    chorus_result rs =
        chorus__pmix_share(job->rank, addr, len, rz->deadline, r == CHORUS_OK ? e : &ignored);
    CHORUS_CHECK(r);
    CHORUS_CHECK(rs);
    if (addr[0] == '!')
        return chorus__fail(e, CHORUS_ERR_ENV, "rank 0 could not serve the rendezvous store: %s",
                            addr + 1);
    CHORUS_INFO(CHORUS_LOG_INIT, "rank %d: store %s, from the launcher's PMIx server", job->rank,
                addr);
    return CHORUS_OK;
}

chorus_result chorus__rdzv_open(chorus_rdzv *rz, const chorus_job *job, chorus_errbuf *e)
{
    rz->job = *job;
    double start_s = rz->cfg->start_timeout_s;
    rz->deadline = start_s > 0 ? chorus__now() + start_s : chorus__deadline();
    rz->local_rank = job->local_rank;
    rz->local_size = job->local_size;
    if (job->pmix) {
        CHORUS_CHECK(meet_through_pmix(rz, e));
    } else if (job->serve_store && job->rank == 0) {
        chorus_result r = serve_store(rz->cfg, &rz->job, &rz->server, e);
        if (r != CHORUS_OK && guarded(job) && spoil_other_store(job))
            return other_job(job, "rank 0 found its store address served by another job's rank 0",
                             "it could not listen there, and a store of the same job id answered",
                             e);
        CHORUS_CHECK(r);
    } else if (job->rdzv_file[0])
        CHORUS_CHECK(read_rdzv_file(job->rdzv_file, rz->job.store_addr, sizeof(rz->job.store_addr),
                                    rz->deadline, e));
    CHORUS_CHECK(chorus__store_connect(rz->job.store_addr, job->job, rz->deadline, &rz->store, e));
    if (guarded(job)) CHORUS_CHECK(claim_rank(rz, e));
    return pick_ip(rz->store, rz->cfg->iface, rz->ip, sizeof(rz->ip), e);
}

chorus_result chorus__rdzv_exchange(chorus_rdzv *rz, const char *addr, chorus_errbuf *e)
{
    const chorus_job *job = &rz->job;
    chorus_store *store = rz->store;
    rz->addrs = calloc((size_t)job->size, sizeof(char *));
    rz->hostnames = calloc((size_t)job->size, sizeof(char *));
    if (!rz->addrs || !rz->hostnames) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    char hid[300], rec[600], key[64], name[64] = "?", host[64] = "?";
    chorus__host_id(hid, sizeof(hid));
    gethostname(host, sizeof(host) - 1);
    /* How messages name this rank's host: its name, and the address peers reach it at (hosts
     * that share a name, such as network namespaces or cloned machines, still differ). */
    const char *colon = strrchr(addr, ':');
    int iplen = colon ? (int)(colon - addr) : (int)strlen(addr);
    if (strncmp(addr, "127.", 4))
        snprintf(name, sizeof(name), "%.40s at %.*s", host, iplen, addr);
    else
        snprintf(name, sizeof(name), "%s", host);
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
    if (r == CHORUS_OK) r = chorus__rdzv_check_identity(rz, e);
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
