/*
 * comm.c - communicator life cycle: chorus_init (environment -> store -> connection mesh),
 * chorus_comm_split, chorus_finalize, chorus_comm_abort, and the helpers the algorithms share.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/env.h"
#include "bootstrap/store.h"
#include "coll/comm.h"
#include "transport/shm/shm.h"

/* ---- helpers shared by the algorithms --------------------------------------------------- */

void chorus__coll_begin(chorus_coll *x, chorus_comm *c, int kind, chorus_dtype t, chorus_op op,
                        size_t count)
{
    x->c = c;
    memset(&x->h, 0, sizeof(x->h));
    x->h.type = CHORUS_MSG_COLL;
    x->h.comm_id = c->id;
    x->h.coll = chorus__coll_sig(kind, (int)t, (int)op);
    x->h.seq = ++c->seq;
    x->h.count = count;
}

void chorus__coll_isend(chorus_coll *x, chorus_req *r, int peer, int tag, const void *buf,
                        size_t bytes)
{
    chorus_wire_hdr h = x->h;
    h.tag = tag;
    h.len = bytes;
    chorus__net_isend(x->c->net, r, x->c->world[peer], &h, buf);
}

void chorus__coll_irecv(chorus_coll *x, chorus_req *r, int peer, int tag, void *buf, size_t bytes)
{
    chorus_wire_hdr h = x->h;
    h.tag = tag;
    h.len = bytes;
    chorus__net_irecv(x->c->net, r, x->c->world[peer], &h, buf);
}

chorus_result chorus__coll_wait(chorus_coll *x, chorus_req *const *reqs, int n)
{
    return chorus__net_wait(x->c->net, reqs, n, chorus__deadline(), &x->c->err);
}

chorus_result chorus__coll_wait1(chorus_coll *x, chorus_req *r)
{
    return chorus__coll_wait(x, &r, 1);
}

void *chorus__comm_scratch(chorus_comm *c, size_t n)
{
    if (n <= c->scratch_cap) return c->scratch;
    free(c->scratch);
    c->scratch = chorus__malloc_aligned(n);
    c->scratch_cap = c->scratch ? n : 0;
    return c->scratch;
}

size_t *chorus__chunks(size_t count, int n)
{
    size_t *off = malloc(sizeof(size_t) * 2 * (size_t)n);
    for (int i = 0; off && i < n; i++) {
        off[i] = chorus__chunk_off(count, n, i);
        off[n + i] = chorus__chunk_cnt(count, n, i);
    }
    return off;
}

void chorus__segments(size_t max_cnt, size_t esize, size_t *seg_cnt, int *nseg)
{
    size_t seg_bytes = chorus__config()->tcp_segment;
    if (seg_bytes < 4096) seg_bytes = 4096;
    size_t per = seg_bytes / esize;
    size_t n = max_cnt ? (max_cnt + per - 1) / per : 1;
    *nseg = (int)n;
    *seg_cnt = (max_cnt + n - 1) / n;
}

/* ---- init ------------------------------------------------------------------------------- */

static chorus_comm *comm_alloc(int size)
{
    chorus_comm *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->world = calloc((size_t)size, sizeof(int));
    c->host = calloc((size_t)size, sizeof(int));
    if (!c->world || !c->host) {
        free(c->world);
        free(c->host);
        free(c);
        return NULL;
    }
    c->size = size;
    return c;
}

static void comm_free(chorus_comm *c)
{
    if (!c) return;
    if (c->shm && c->net) {
        /* Leaving a broken communicator: tell the ranks that wait for us in shared memory
         * why, so that they name the lost peer rather than us. */
        chorus_errbuf e;
        chorus_result r = chorus__net_error(c->net, &e);
        if (r != CHORUS_OK) chorus__shm_abort(c->shm, r, e.msg);
    }
    chorus__shm_destroy(c->shm);
    if (c->net) chorus__net_release(c->net);
    free(c->world);
    free(c->host);
    free(c->scratch);
    free(c);
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

/* Fetches every rank's "ip:port\nhost-id" record and fills addrs/hosts/host indices. */
static chorus_result exchange(chorus_comm *c, chorus_store *store, const char *addr, char **addrs,
                              char **hostnames, double deadline, chorus_errbuf *e)
{
    char hid[300], rec[600], key[64], name[64] = "?";
    chorus__host_id(hid, sizeof(hid));
    gethostname(name, sizeof(name) - 1);
    snprintf(rec, sizeof(rec), "%s\n%s\n%s", addr, name, hid);
    snprintf(key, sizeof(key), "rank/%d", c->rank);
    CHORUS_CHECK(chorus__store_set(store, key, rec, strlen(rec), e));
    char **hids = calloc((size_t)c->size, sizeof(char *));
    if (!hids) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    chorus_result r = CHORUS_OK;
    for (int p = 0; p < c->size && r == CHORUS_OK; p++) {
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
    }
    if (r == CHORUS_OK) {
        int local_rank = 0, local_size = 0;
        c->nhosts = 0;
        for (int p = 0; p < c->size; p++) {
            int q = 0;
            while (q < p && strcmp(hids[q], hids[p])) q++;
            c->host[p] = q < p ? c->host[q] : c->nhosts++;
            if (!strcmp(hids[p], hids[c->rank])) {
                if (p < c->rank) local_rank++;
                local_size++;
            }
        }
        if (c->local_rank < 0) c->local_rank = local_rank;
        if (c->local_size < 0) c->local_size = local_size;
    }
    for (int p = 0; p < c->size; p++) free(hids[p]);
    free(hids);
    return r;
}

chorus_result chorus_init(chorus_comm **out)
{
    chorus_errbuf *e = chorus__init_errbuf();
    e->msg[0] = 0;
    if (!out) return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "chorus_init: comm is NULL");
    *out = NULL;
    chorus_job job;
    CHORUS_CHECK(chorus__job_from_env(&job, e));
    return chorus__init_job(&job, out);
}

/* The rest of chorus_init for a job already described (also used by src/elastic to form each
 * new generation of an elastic job). Errors go to chorus_last_error(NULL). */
chorus_result chorus__init_job(const chorus_job *jobp, chorus_comm **out)
{
    chorus_errbuf *e = chorus__init_errbuf();
    chorus_job job = *jobp;
    *out = NULL;
    chorus__log_set_rank(job.rank);
    CHORUS_INFO(CHORUS_LOG_INIT, "launcher %s: rank %d of %d, job %s, store %s%s", job.launcher,
                job.rank, job.size, job.job, job.store_addr[0] ? job.store_addr : job.rdzv_file,
                job.serve_store && job.rank == 0 ? " (served here)" : "");

    chorus_config cfg;
    CHORUS_CHECK(chorus__config_load(&cfg, e));
    chorus_comm *c = comm_alloc(job.size);
    if (!c) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    c->cfg = cfg;
    c->rank = job.rank;
    c->local_rank = job.local_rank;
    c->local_size = job.local_size;
    c->id = chorus__hash64(job.job, strlen(job.job));
    for (int p = 0; p < job.size; p++) c->world[p] = p;

    chorus_result r = CHORUS_OK;
    chorus_store_server *server = NULL;
    chorus_store *store = NULL;
    char **addrs = calloc((size_t)job.size, sizeof(char *));
    char **hosts = calloc((size_t)job.size, sizeof(char *));
    double deadline = chorus__deadline();
    char ip[64], addr[128];
    if (!addrs || !hosts) {
        r = chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (job.size == 1) {
        c->local_rank = 0;
        c->local_size = 1;
        c->nhosts = 1;
        CHORUS_CHECK_GOTO(
            chorus__net_create(&c->cfg, 0, 1, job.job, "127.0.0.1", &c->net, addr, sizeof(addr), e),
            r, out);
        goto out;
    }
    if (job.serve_store && job.rank == 0) {
        int port = 0;
        if (job.rdzv_file[0]) {
            CHORUS_CHECK_GOTO(chorus__store_server_start("127.0.0.1", 0, &server, &port, e), r,
                              out);
            CHORUS_CHECK_GOTO(write_rdzv_file(job.rdzv_file, port, e), r, out);
            snprintf(job.store_addr, sizeof(job.store_addr), "127.0.0.1:%d", port);
        } else {
            const char *colon = strrchr(job.store_addr, ':');
            char bind_ip[64] = ""; /* not every address unless asked (CHORUS_BIND_ANY) */
            CHORUS_CHECK_GOTO(
                chorus__store_bind_ip(&c->cfg, job.store_addr, bind_ip, sizeof(bind_ip), e), r,
                out);
            CHORUS_CHECK_GOTO(
                chorus__store_server_start(bind_ip, atoi(colon + 1), &server, &port, e), r, out);
        }
    } else if (job.rdzv_file[0]) {
        CHORUS_CHECK_GOTO(
            read_rdzv_file(job.rdzv_file, job.store_addr, sizeof(job.store_addr), deadline, e), r,
            out);
    }
    CHORUS_CHECK_GOTO(chorus__store_connect(job.store_addr, job.job, deadline, &store, e), r, out);
    CHORUS_CHECK_GOTO(pick_ip(store, c->cfg.iface, ip, sizeof(ip), e), r, out);
    CHORUS_CHECK_GOTO(chorus__net_create(&c->cfg, job.rank, job.size, job.job, ip, &c->net, addr,
                                         sizeof(addr), e),
                      r, out);
    CHORUS_CHECK_GOTO(exchange(c, store, addr, addrs, hosts, deadline, e), r, out);
    CHORUS_CHECK_GOTO(chorus__net_connect_all(c->net, addrs, hosts, deadline, e), r, out);
    CHORUS_INFO(CHORUS_LOG_INIT, "rank %d: local rank %d of %d, %d hosts, listening on %s", c->rank,
                c->local_rank, c->local_size, c->nhosts, addr);
    /* Same host for all: a shared-memory group, set up over the TCP mesh just built. */
    r = chorus__comm_shm_setup(c);
    if (r != CHORUS_OK) {
        snprintf(e->msg, sizeof(e->msg), "%s", c->err.msg);
        goto out;
    }
    chorus__select_describe(c);
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
    if (r != CHORUS_OK) {
        comm_free(c);
        return r;
    }
    *out = c;
    return CHORUS_OK;
}

chorus_result chorus_finalize(chorus_comm *c)
{
    if (!c) return CHORUS_ERR_INVALID_ARG;
    comm_free(c);
    return CHORUS_OK;
}

chorus_result chorus_comm_abort(chorus_comm *c)
{
    if (!c) return CHORUS_ERR_INVALID_ARG;
    char why[200];
    snprintf(why, sizeof(why), "rank %d aborted the communicator", c->world[c->rank]);
    chorus__shm_abort(c->shm, CHORUS_ERR_ABORTED, why);
    chorus__net_abort(c->net, c->world[c->rank], CHORUS_ERR_ABORTED, why);
    return CHORUS_OK;
}

int chorus_rank(const chorus_comm *c)
{
    return c ? c->rank : -1;
}
int chorus_size(const chorus_comm *c)
{
    return c ? c->size : -1;
}
int chorus_local_rank(const chorus_comm *c)
{
    return c ? c->local_rank : -1;
}
int chorus_local_size(const chorus_comm *c)
{
    return c ? c->local_size : -1;
}

const char *chorus_last_error(const chorus_comm *c)
{
    return c ? c->err.msg : chorus__init_errbuf()->msg;
}

/* ---- split ------------------------------------------------------------------------------ */

chorus_result chorus_comm_split(chorus_comm *c, int color, int key, chorus_comm **out)
{
    if (!c || !out)
        return chorus__fail(c ? &c->err : chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_comm_split: %s is NULL", c ? "out" : "comm");
    *out = NULL;
    int32_t mine[2] = {color < 0 ? -1 : color, key};
    int32_t *all = malloc(sizeof(int32_t) * 2 * (size_t)c->size);
    if (!all) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    chorus_result r = chorus_allgather(c, mine, all, 2, CHORUS_INT32);
    unsigned nsplit = c->nsplit++;
    if (r != CHORUS_OK || color < 0) {
        free(all);
        return r;
    }
    int n = 0;
    for (int p = 0; p < c->size; p++) n += all[2 * p] == color;
    chorus_comm *s = comm_alloc(n);
    if (!s) {
        free(all);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    /* members ordered by (key, rank in c): insertion sort, groups are small */
    int *mem = malloc(sizeof(int) * (size_t)n), m = 0;
    if (!mem) {
        free(all);
        comm_free(s);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    for (int p = 0; p < c->size; p++) {
        if (all[2 * p] != color) continue;
        int i = m++;
        while (i > 0 && all[2 * mem[i - 1] + 1] > all[2 * p + 1]) {
            mem[i] = mem[i - 1];
            i--;
        }
        mem[i] = p;
    }
    int hostmap_n = 0;
    int *hostmap = calloc((size_t)c->nhosts + 1, sizeof(int));
    for (int h = 0; hostmap && h <= c->nhosts; h++) hostmap[h] = -1;
    for (int i = 0; i < n; i++) {
        int p = mem[i];
        s->world[i] = c->world[p];
        if (p == c->rank) s->rank = i;
        int h = c->host[p];
        if (hostmap && hostmap[h] < 0) hostmap[h] = hostmap_n++;
        s->host[i] = hostmap ? hostmap[h] : 0;
    }
    s->nhosts = hostmap_n;
    s->local_rank = 0;
    s->local_size = 0;
    for (int i = 0; i < n; i++)
        if (s->host[i] == s->host[s->rank]) {
            if (i < s->rank) s->local_rank++;
            s->local_size++;
        }
    uint64_t h = chorus__hash64_seed(c->id, &nsplit, sizeof(nsplit));
    s->id = chorus__hash64_seed(h, &color, sizeof(color));
    s->cfg = c->cfg;
    s->net = c->net;
    chorus__net_retain(c->net);
    free(hostmap);
    free(mem);
    free(all);
    /* A communicator whose ranks share a host gets its own shared-memory group (set up over
     * its own TCP traffic); one spanning hosts uses TCP. */
    r = chorus__comm_shm_setup(s);
    if (r != CHORUS_OK) {
        snprintf(c->err.msg, sizeof(c->err.msg), "%s", s->err.msg);
        comm_free(s);
        return r;
    }
    chorus__select_describe(s);
    *out = s;
    return CHORUS_OK;
}

chorus_result chorus__comm_fail(chorus_comm *comm, chorus_result r, const char *fmt, ...)
{
    char msg[sizeof(comm->err.msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return chorus__fail(&comm->err, r, "%s", msg);
}
