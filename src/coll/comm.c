/*
 * comm.c - communicator life cycle: chorus_init (environment -> rendezvous -> communicator,
 * with its shared-memory group when its ranks share a host), chorus_comm_split,
 * chorus_comm_split_type and chorus_comm_create_group, chorus_finalize, chorus_comm_abort; and
 * the communicators behind the hierarchical collectives of a job that spans hosts.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/trace.h"
#include "bootstrap/rendezvous.h"
#include "coll/comm.h"
#include "transport/shm/cma.h"
#include "transport/shm/shm.h"
#include "transport/tcp/net.h"

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

static void hier_free(chorus_hier *h);

static void comm_free(chorus_comm *c)
{
    if (!c) return;
    hier_free(c->hier);
    if (c->shm) {
        /* Leaving a broken communicator: tell the ranks that wait for us in shared memory
         * why, so that they name the lost peer rather than us. */
        chorus_errbuf e;
        int culprit;
        chorus_result r = chorus__tp_error(&c->net, &culprit, &e);
        if (r != CHORUS_OK) chorus__shm_abort(c->shm, culprit, r, e.msg);
    }
    chorus__cma_release(c->shm);
    chorus__shm_destroy(c->shm);
    chorus__trace_release(c->trace);
    chorus__tp_release(&c->net);
    free(c->world);
    free(c->host);
    free(c->scratch);
    free(c);
}

/* The world's TCP mesh: rendezvous (bootstrap) around the transport's listen and connect. The
 * one place the collective layer names TCP: everything after reaches it as c->net, a
 * transport (transport.h). */
static chorus_result connect_job(chorus_comm *c, const chorus_job *job, chorus_errbuf *e)
{
    char addr[128];
    chorus_net *n = NULL;
    if (job->size == 1) {
        c->local_rank = 0;
        c->local_size = 1;
        c->nhosts = 1;
        chorus_result r =
            chorus__net_create(&c->cfg, 0, 1, job->job, "127.0.0.1", &n, addr, sizeof(addr), e);
        c->net = chorus__net_transport(n);
        return r;
    }
    chorus_rdzv rz = {.host = c->host, .cfg = &c->cfg};
    chorus_result r;
    CHORUS_CHECK_GOTO(chorus__rdzv_open(&rz, job, e), r, out);
    r = chorus__net_create(&c->cfg, job->rank, job->size, job->job, rz.ip, &n, addr, sizeof(addr),
                           e);
    c->net = chorus__net_transport(n);
    CHORUS_CHECK_GOTO(r, r, out);
    CHORUS_CHECK_GOTO(chorus__rdzv_exchange(&rz, addr, e), r, out);
    CHORUS_CHECK_GOTO(chorus__net_connect_all(n, rz.addrs, rz.hostnames, rz.deadline, e), r, out);
    CHORUS_CHECK_GOTO(chorus__rdzv_check_identity(&rz, e), r, out);
    c->nhosts = rz.nhosts;
    c->local_rank = rz.local_rank;
    c->local_size = rz.local_size;
out:
    /* Every rank fetched all addresses before connecting, so once the mesh is complete nobody
     * needs the store any more. */
    chorus__rdzv_close(&rz);
    return r;
}

/* A process that forms a world of the same job again (chorus_init after chorus_finalize, as
 * Horovod's shutdown() then init() does) meets in a namespace of its own: the n-th world of a
 * job in this process is job "<id>.<n>" from the second on. In the first one's namespace a
 * peer could read this rank's address of the world before, and connect to a listener that has
 * closed. Every rank forms its worlds in the same order, so n agrees, as the PMIx key's count
 * does (bootstrap/pmix.c). */
static void again_in_process(chorus_job *job)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char last[sizeof(job->job)];
    static int n;
    pthread_mutex_lock(&mu);
    if (strcmp(last, job->job)) {
        snprintf(last, sizeof(last), "%s", job->job);
        n = 0;
    } else {
        char id[sizeof(job->job)];
        snprintf(id, sizeof(id), "%.50s.%d", last, ++n);
        snprintf(job->job, sizeof(job->job), "%s", id);
    }
    pthread_mutex_unlock(&mu);
}

chorus_result chorus_init(chorus_comm **out)
{
    chorus_errbuf *e = chorus__init_errbuf();
    e->msg[0] = 0;
    if (!out) return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "chorus_init: comm is NULL");
    *out = NULL;
    chorus_job job;
    CHORUS_CHECK(chorus__job_from_env(&job, e));
    again_in_process(&job);
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
    CHORUS_CHECK(chorus__select_check_config(&cfg, e));
    chorus_comm *c = comm_alloc(job.size);
    if (!c) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    c->cfg = cfg;
    c->rank = job.rank;
    c->id = chorus__hash64(job.job, strlen(job.job));
    for (int p = 0; p < job.size; p++) c->world[p] = p;

    chorus_result r = connect_job(c, &job, e);
    if (r != CHORUS_OK) {
        comm_free(c);
        return r;
    }
    /* Same host for all: a shared-memory group, set up over the TCP mesh just built. */
    r = chorus__comm_shm_setup(c);
    if (r != CHORUS_OK) {
        snprintf(e->msg, sizeof(e->msg), "%s", c->err.msg);
        comm_free(c);
        return r;
    }
    /* Across hosts: the host-local and cross-host communicators of the hierarchical path. */
    r = chorus__comm_hier_setup(c);
    if (r != CHORUS_OK) {
        snprintf(e->msg, sizeof(e->msg), "%s", c->err.msg);
        comm_free(c);
        return r;
    }
    chorus__select_describe(c);
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
    chorus__comm_break(c, c->world[c->rank], CHORUS_ERR_ABORTED, why);
    return CHORUS_OK;
}

chorus_result chorus_report_peer_failure(chorus_comm *c, int peer)
{
    if (!c || peer < 0 || peer >= c->size || peer == c->rank) return CHORUS_ERR_INVALID_ARG;
    chorus__status_peer_failed(c->world[c->rank], c->world[peer]);
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

/* A communicator of the given ranks of c (in that order, this rank among them) with identifier
 * id, sharing c's connections; no traffic, no shared memory (the caller sets it up if it
 * wants it). */
static chorus_result comm_group(chorus_comm *c, const int *mem, int n, uint64_t id,
                                chorus_comm **out)
{
    *out = NULL;
    chorus_comm *s = comm_alloc(n);
    int *hostmap = calloc((size_t)c->nhosts + 1, sizeof(int));
    if (!s || !hostmap) {
        comm_free(s);
        free(hostmap);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    int hostmap_n = 0;
    for (int h = 0; h <= c->nhosts; h++) hostmap[h] = -1;
    s->rank = -1;
    for (int i = 0; i < n; i++) {
        int p = mem[i];
        s->world[i] = c->world[p];
        if (p == c->rank) s->rank = i;
        int h = c->host[p];
        if (hostmap[h] < 0) hostmap[h] = hostmap_n++;
        s->host[i] = hostmap[h];
    }
    free(hostmap);
    s->nhosts = hostmap_n;
    for (int i = 0; i < n; i++)
        if (s->host[i] == s->host[s->rank]) {
            if (i < s->rank) s->local_rank++;
            s->local_size++;
        }
    s->id = id;
    s->cfg = c->cfg;
    s->net = c->net;
    chorus__tp_retain(&c->net);
    *out = s;
    return CHORUS_OK;
}

/* The transports of s, a new communicator of some of c's ranks, set up over s's own traffic
 * (only its ranks take part): a communicator whose ranks share a host gets its own
 * shared-memory group; one spanning hosts uses TCP, and the hierarchical collectives where it
 * has several ranks on some host. *out = s on success; s is freed on failure. */
static chorus_result group_setup(chorus_comm *c, chorus_comm *s, chorus_comm **out)
{
    chorus_result r = chorus__comm_shm_setup(s);
    if (r == CHORUS_OK) r = chorus__comm_hier_setup(s);
    if (r != CHORUS_OK) {
        snprintf(c->err.msg, sizeof(c->err.msg), "%s", s->err.msg);
        comm_free(s);
        return r;
    }
    chorus__select_describe(s);
    *out = s;
    return CHORUS_OK;
}

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
    /* members ordered by (key, rank in c): insertion sort, groups are small */
    int *mem = malloc(sizeof(int) * (size_t)n), m = 0;
    if (!mem) {
        free(all);
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
    free(all);
    uint64_t h = chorus__hash64_seed(c->id, &nsplit, sizeof(nsplit));
    chorus_comm *s;
    r = comm_group(c, mem, n, chorus__hash64_seed(h, &color, sizeof(color)), &s);
    free(mem);
    if (r != CHORUS_OK) return r;
    return group_setup(c, s, out);
}

chorus_result chorus_comm_split_type(chorus_comm *c, chorus_split_type type, int key,
                                     chorus_comm **out)
{
    if (!c || !out)
        return chorus__fail(c ? &c->err : chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_comm_split_type: %s is NULL", c ? "out" : "comm");
    *out = NULL;
    int me = c->rank, color;
    switch (type) {
    case CHORUS_SPLIT_HOST: color = c->host[me]; break;
    case CHORUS_SPLIT_HOST_LEADERS: {
        int p = 0;
        while (p < me && c->host[p] != c->host[me]) p++;
        color = p == me ? 0 : -1; /* the lowest rank of each host leads it */
        break;
    }
    default:
        return chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG,
                            "chorus_comm_split_type: unknown split type %d (CHORUS_SPLIT_HOST or "
                            "CHORUS_SPLIT_HOST_LEADERS)",
                            (int)type);
    }
    return chorus_comm_split(c, color, key, out);
}

chorus_result chorus_comm_create_group(chorus_comm *c, int n, const int *ranks, uint64_t tag,
                                       chorus_comm **out)
{
    if (!c || !out || !ranks)
        return chorus__fail(c ? &c->err : chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_comm_create_group: %s is NULL",
                            !c     ? "comm"
                            : !out ? "out"
                                   : "ranks");
    *out = NULL;
    int me = -1;
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= c->size)
            return chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG,
                                "chorus_comm_create_group: rank %d is out of range for a "
                                "communicator of %d",
                                ranks[i], c->size);
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG,
                                    "chorus_comm_create_group: rank %d is listed twice", ranks[i]);
        if (ranks[i] == c->rank) me = i;
    }
    if (me < 0)
        return chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG,
                            "chorus_comm_create_group: this rank (%d) is not among the %d ranks "
                            "listed",
                            c->rank, n);
    /* The identity depends only on what every member passes, so all of them agree on it
     * without a word; the tag keeps apart groups of the same ranks. */
    uint64_t id = chorus__hash64_seed(chorus__hash64_seed(c->id, "group", 5), &tag, sizeof(tag));
    id = chorus__hash64_seed(id, ranks, sizeof(int) * (size_t)n);
    chorus_comm *s;
    chorus_result r = comm_group(c, ranks, n, id, &s);
    if (r != CHORUS_OK) return r;
    return group_setup(c, s, out);
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

/* ---- hierarchical ----------------------------------------------------------------------
 * The communicators behind the hierarchical collectives of a job whose ranks span hosts
 * (allreduce_hier.c, bcast_hier.c, allgather_hier.c):
 *
 *   local     the ranks of this host, over shared memory (a split of the world: traffic);
 *   leaders   the lowest rank of every host;
 *   slice[j]  for slice j of an allreduce (nslice = the most ranks on one host), its owner on
 *             every host: local rank j mod (ranks on that host), in host order.
 *
 * Hosts are numbered by their lowest rank, and each host's ranks must be consecutive (as every
 * launcher places them): allgather then moves each host's blocks as one piece. The cross-host
 * groups are built by every member from the host layout alone, with identifiers derived from
 * the world's, so they need no traffic. At the end an allreduce(MIN) over TCP has all ranks
 * agree that every host's shared memory works; if one does not, no rank uses the hierarchical
 * path (the rules then choose the flat TCP algorithms on every rank alike).
 */
static void hier_free(chorus_hier *h)
{
    if (!h) return;
    comm_free(h->local);
    comm_free(h->leaders);
    for (int j = 0; h->slice && j < h->nslice; j++) comm_free(h->slice[j]);
    free(h->slice);
    free(h->lo);
    free(h->n);
    free(h);
}

/* Hosts in order of their lowest rank: lo[], n[], and whether each is a consecutive run. */
static int host_layout(const chorus_comm *c, chorus_hier *h)
{
    for (int p = 0; p < c->size; p++) {
        if (p > 0 && c->host[p] == c->host[p - 1]) {
            h->n[h->nhosts - 1]++;
        } else {
            for (int q = 0; q < p; q++)
                if (c->host[q] == c->host[p]) return 0; /* host seen before: not consecutive */
            h->lo[h->nhosts] = p;
            h->n[h->nhosts++] = 1;
        }
        if (p == c->rank) h->me = h->nhosts - 1;
    }
    return 1;
}

/* The cross-host groups (no traffic): leaders and the owners of each slice. */
static chorus_result cross_groups(chorus_comm *c, chorus_hier *h)
{
    int *mem = malloc(sizeof(int) * (size_t)h->nhosts);
    if (!mem) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    chorus_result r = CHORUS_OK;
    uint64_t base = chorus__hash64_seed(c->id, "hier", 4);
    for (int k = 0; k < h->nhosts; k++) mem[k] = h->lo[k];
    if (c->rank == h->lo[h->me]) {
        int tag = -1;
        r = comm_group(c, mem, h->nhosts, chorus__hash64_seed(base, &tag, sizeof(tag)),
                       &h->leaders);
    }
    int li = c->rank - h->lo[h->me], nme = h->n[h->me];
    for (int j = 0; j < h->nslice && r == CHORUS_OK; j++) {
        if (j % nme != li) continue; /* this rank owns no part of slice j */
        for (int k = 0; k < h->nhosts; k++) mem[k] = h->lo[k] + j % h->n[k];
        r = comm_group(c, mem, h->nhosts, chorus__hash64_seed(base, &j, sizeof(j)), &h->slice[j]);
    }
    free(mem);
    return r;
}

chorus_result chorus__comm_hier_setup(chorus_comm *c)
{
    if (c->nhosts < 2) return CHORUS_OK;
    if (!c->cfg.shm) {
        CHORUS_INFO(CHORUS_LOG_COLL, "no hierarchical collectives: CHORUS_SHM=0");
        return CHORUS_OK;
    }
    chorus_hier *h = calloc(1, sizeof(*h));
    if (h) {
        h->lo = calloc((size_t)c->nhosts, sizeof(int));
        h->n = calloc((size_t)c->nhosts, sizeof(int));
    }
    if (!h || !h->lo || !h->n) {
        hier_free(h);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    if (!host_layout(c, h)) {
        CHORUS_INFO(CHORUS_LOG_COLL,
                    "no hierarchical collectives: the ranks of a host are not consecutive");
        hier_free(h);
        return CHORUS_OK;
    }
    for (int k = 0; k < h->nhosts; k++) h->nslice = h->n[k] > h->nslice ? h->n[k] : h->nslice;
    h->slice = calloc((size_t)h->nslice, sizeof(chorus_comm *));
    chorus_result r =
        h->slice ? CHORUS_OK : chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    if (r == CHORUS_OK) r = chorus_comm_split_type(c, CHORUS_SPLIT_HOST, 0, &h->local);
    if (r == CHORUS_OK) r = cross_groups(c, h);
    /* Agree: every host with several ranks has its shared memory (else nobody uses hier). */
    int32_t ok = r == CHORUS_OK && (h->local->size == 1 || h->local->shm), all = 0;
    if (r == CHORUS_OK) r = chorus_allreduce(c, &ok, &all, 1, CHORUS_INT32, CHORUS_MIN);
    if (r != CHORUS_OK || !all) {
        if (r == CHORUS_OK)
            CHORUS_INFO(CHORUS_LOG_COLL,
                        "no hierarchical collectives: shared memory failed on some host");
        hier_free(h);
        return r;
    }
    c->hier = h;
    return CHORUS_OK;
}
