/* env.c - reading the job from the environment of the launcher that started us. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/env.h"
#include "bootstrap/hostlist.h"

/* The variables a launcher's ranks need, for the message when one is missing. */
static const char *launcher_vars(const char *launcher)
{
    static const struct {
        const char *launcher, *vars;
    } v[] = {{"chorus-run", "CHORUS_RANK and CHORUS_SIZE"},
             {"mpirun", "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE"},
             {"kubernetes", "JOB_COMPLETION_INDEX and WORLD_SIZE"},
             {"pmi", "PMI_RANK and PMI_SIZE"},
             {"srun", "SLURM_PROCID and SLURM_NTASKS"},
             {"torchrun", "RANK and WORLD_SIZE (with MASTER_ADDR and MASTER_PORT)"}};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (!strcmp(v[i].launcher, launcher)) return v[i].vars;
    return "the launcher's variables";
}

/* Parses a non-negative int; -1 if the text is not one. */
static int parse_int(const char *s)
{
    long v;
    return s && !chorus__parse_int(s, 0, 1 << 24, &v) ? (int)v : -1;
}

/* A launcher variable that must be set (name, its value v; its launcher is j->launcher,
 * recognised by another of its variables: named in the message). */
static chorus_result get_int(const chorus_job *j, const char *name, const char *v, int *out,
                             chorus_errbuf *e)
{
    *out = parse_int(v);
    if (!v)
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "%s is not set: every process of a %s-style job needs %s; or start "
                            "the program with a launcher (chorus-run -np N)",
                            name, j->launcher, launcher_vars(j->launcher));
    if (*out < 0)
        return chorus__fail(e, CHORUS_ERR_ENV, "%s=%s is not a valid non-negative integer", name,
                            v);
    return CHORUS_OK;
}

/* Optional integer: -1 when unset, error when set to garbage. */
static chorus_result get_opt_int(const chorus_job *j, const char *name, const char *v, int *out,
                                 chorus_errbuf *e)
{
    if (!v) {
        *out = -1;
        return CHORUS_OK;
    }
    return get_int(j, name, v, out, e);
}

/* The job variable NAME of the snapshot v, by its name: GET_INT(RANK, &j->rank). */
#define GET_INT(name, out)     CHORUS_CHECK(get_int(j, #name, v->name, out, e))
#define GET_OPT_INT(name, out) CHORUS_CHECK(get_opt_int(j, #name, v->name, out, e))
/* A launcher's rank and size (both needed), local rank and local size (optional). */
#define GET_RANKS(r, s, lr, ls)                                                                    \
    do {                                                                                           \
        GET_INT(r, &j->rank);                                                                      \
        GET_INT(s, &j->size);                                                                      \
        GET_OPT_INT(lr, &j->local_rank);                                                           \
        GET_OPT_INT(ls, &j->local_size);                                                           \
    } while (0)

static chorus_result use_master(chorus_job *j, const chorus_job_vars *v, int port_offset,
                                chorus_errbuf *e)
{
    const char *addr = v->MASTER_ADDR, *port = v->MASTER_PORT;
    if (!addr || !port)
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "%s: MASTER_ADDR and MASTER_PORT must both be set (MASTER_ADDR=%s "
                            "MASTER_PORT=%s)",
                            j->launcher, addr ? addr : "(unset)", port ? port : "(unset)");
    int p = parse_int(port);
    if (p <= 0 || p + port_offset > 65535)
        return chorus__fail(e, CHORUS_ERR_ENV, "MASTER_PORT=%s is not a valid port", port);
    snprintf(j->store_addr, sizeof(j->store_addr), "%s:%d", addr, p + port_offset);
    j->serve_store = 1;
    return CHORUS_OK;
}

static void use_file(chorus_job *j, const chorus_job_vars *v)
{
    const char *dir = v->TMPDIR;
    snprintf(j->rdzv_file, sizeof(j->rdzv_file), "%s/chorus-rdzv-%s", dir ? dir : "/tmp", j->job);
    j->serve_store = 1;
}

/* The pod's own name as DNS knows it: the first name of its /etc/hosts line, which Kubernetes
 * writes as "<job>-<index>.<subdomain>.<namespace>.svc.<cluster domain>" when the pod template
 * sets a subdomain. "" when the name does not resolve. */
static void pod_fqdn(const char *host, char *out, size_t len)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_flags = AI_CANONNAME}, *res = NULL;
    out[0] = 0;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return;
    if (res->ai_canonname) snprintf(out, len, "%s", res->ai_canonname);
    freeaddrinfo(res);
}

/* A pod of a Kubernetes Indexed Job (one rank per pod): the rank is the completion index, the
 * world size is WORLD_SIZE (the Job's completions, written in the manifest), and the meeting
 * point is rank 0's stable DNS name "<job>-0.<service>": MASTER_ADDR when the manifest sets it,
 * else derived from this pod's own name "<job>-<index>.<subdomain>...", on MASTER_PORT (default
 * 29500). Rank 0 serves the store there. */
static chorus_result kubernetes_job(chorus_job *j, const chorus_job_vars *v, chorus_errbuf *e)
{
    const char *id = v->CHORUS_JOB_ID;
    j->launcher = "kubernetes";
    GET_INT(JOB_COMPLETION_INDEX, &j->rank);
    if (!v->WORLD_SIZE && !v->CHORUS_SIZE)
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "kubernetes: JOB_COMPLETION_INDEX=%d makes this a pod of an Indexed "
                            "Job, but WORLD_SIZE is not set: set it in the container's env to "
                            "the Job's completions (docs/KUBERNETES.md)",
                            j->rank);
    if (v->WORLD_SIZE)
        GET_INT(WORLD_SIZE, &j->size);
    else
        GET_INT(CHORUS_SIZE, &j->size);
    if (j->rank >= j->size)
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "kubernetes: JOB_COMPLETION_INDEX=%d is not below %s=%d: the Job's "
                            "completions and the world size must be equal",
                            j->rank, v->WORLD_SIZE ? "WORLD_SIZE" : "CHORUS_SIZE", j->size);
    char host[256] = "", suffix[32];
    gethostname(host, sizeof(host) - 1);
    /* The pod's hostname is "<job>-<index>": the job's name is what precedes the index. */
    snprintf(suffix, sizeof(suffix), "-%d", j->rank);
    size_t hl = strlen(host), sl = strlen(suffix);
    int named = hl > sl && !strcmp(host + hl - sl, suffix);
    if (named) host[hl - sl] = 0;
    snprintf(j->job, sizeof(j->job), "k8s-%s", id ? id : named ? host : "job");
    const char *addr = v->MASTER_ADDR, *port = v->MASTER_PORT;
    int p = port ? parse_int(port) : 29500;
    if (p <= 0 || p > 65535)
        return chorus__fail(e, CHORUS_ERR_ENV, "MASTER_PORT=%s is not a valid port", port);
    if (v->CHORUS_STORE_ADDR || j->size == 1) return CHORUS_OK;
    if (addr) {
        snprintf(j->store_addr, sizeof(j->store_addr), "%s:%d", addr, p);
        j->serve_store = 1;
        return CHORUS_OK;
    }
    char fqdn[256] = "", me[300];
    snprintf(me, sizeof(me), "%s%s", host, named ? suffix : "");
    if (named) pod_fqdn(me, fqdn, sizeof(fqdn));
    const char *dot = strchr(fqdn, '.');
    if (!named || !dot || strncmp(fqdn, me, (size_t)(dot - fqdn))) {
        char why[600];
        if (!named)
            snprintf(why, sizeof(why), "the pod's hostname '%s' is not <job>-%d", me, j->rank);
        else
            snprintf(why, sizeof(why), "the pod's own DNS name '%s' has no subdomain",
                     fqdn[0] ? fqdn : me);
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "kubernetes: MASTER_ADDR is not set and rank 0's name cannot be "
                            "derived: %s; set spec.template.spec.subdomain to the headless "
                            "Service's name, or MASTER_ADDR=<job>-0.<service>",
                            why);
    }
    snprintf(j->store_addr, sizeof(j->store_addr), "%s-0%s:%d", host, dot, p);
    j->serve_store = 1;
    return CHORUS_OK;
}

/* The job's id: prefix-name. */
static chorus_result job_name(chorus_job *j, const char *prefix, const char *name)
{
    snprintf(j->job, sizeof(j->job), "%s-%s", prefix, name);
    return CHORUS_OK;
}

static chorus_result chorus_run_job(chorus_job *j, const chorus_job_vars *v, chorus_errbuf *e)
{
    j->launcher = "chorus-run";
    GET_RANKS(CHORUS_RANK, CHORUS_SIZE, CHORUS_LOCAL_RANK, CHORUS_LOCAL_SIZE);
    snprintf(j->job, sizeof(j->job), "%s", v->CHORUS_JOB_ID ? v->CHORUS_JOB_ID : "chorus");
    if (v->CHORUS_STORE_ADDR)
        snprintf(j->store_addr, sizeof(j->store_addr), "%s", v->CHORUS_STORE_ADDR);
    else if (j->size > 1)
        CHORUS_CHECK(use_master(j, v, 0, e));
    return CHORUS_OK;
}

static chorus_result mpirun_job(chorus_job *j, const chorus_job_vars *v, chorus_errbuf *e)
{
    j->launcher = "mpirun";
    GET_RANKS(OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
              OMPI_COMM_WORLD_LOCAL_SIZE);
    const char *jid = v->OMPI_MCA_ess_base_jobid ? v->OMPI_MCA_ess_base_jobid : v->PMIX_NAMESPACE;
    return job_name(j, "ompi", v->CHORUS_JOB_ID ? v->CHORUS_JOB_ID : jid ? jid : "0");
}

static chorus_result pmi_job(chorus_job *j, const chorus_job_vars *v, chorus_errbuf *e)
{
    j->launcher = "pmi";
    GET_RANKS(PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS);
    const char *jid = v->PMI_KVSNAME;
    return job_name(j, "pmi", v->CHORUS_JOB_ID ? v->CHORUS_JOB_ID : jid ? jid : "0");
}

static chorus_result srun_job(chorus_job *j, const chorus_job_vars *v, chorus_errbuf *e)
{
    j->launcher = "srun";
    GET_INT(SLURM_PROCID, &j->rank);
    if (v->SLURM_STEP_NUM_TASKS)
        GET_INT(SLURM_STEP_NUM_TASKS, &j->size);
    else
        GET_INT(SLURM_NTASKS, &j->size);
    GET_OPT_INT(SLURM_LOCALID, &j->local_rank);
    const char *id = v->CHORUS_JOB_ID;
    int jobid = parse_int(v->SLURM_JOB_ID), step = parse_int(v->SLURM_STEP_ID);
    snprintf(j->job, sizeof(j->job), "slurm-%s", id ? id : "");
    if (!id) snprintf(j->job, sizeof(j->job), "slurm-%d.%d", jobid, step);
    int nodes = parse_int(v->SLURM_STEP_NUM_NODES);
    if (nodes < 0) nodes = parse_int(v->SLURM_NNODES);
    if (v->MASTER_ADDR || v->CHORUS_STORE_ADDR || nodes <= 1) return CHORUS_OK;
    /* Several nodes and no meeting point given: the first node of the step serves the store
     * on a port derived from the job and step ids. */
    const char *list = v->SLURM_STEP_NODELIST;
    if (!list) list = v->SLURM_JOB_NODELIST;
    if (!list)
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "srun: SLURM_STEP_NODELIST is not set; "
                            "set MASTER_ADDR and MASTER_PORT");
    char host[200];
    if (chorus__hostlist_host(list, 0, host, sizeof(host)) < 1)
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "srun: cannot read the node list '%s'; set MASTER_ADDR and "
                            "MASTER_PORT",
                            list);
    int port = 20000 + (int)(((unsigned)jobid * 31u + (unsigned)step) % 20000u);
    snprintf(j->store_addr, sizeof(j->store_addr), "%s:%d", host, port);
    j->serve_store = 1;
    return CHORUS_OK;
}

static chorus_result torchrun_job(chorus_job *j, const chorus_job_vars *v, chorus_errbuf *e)
{
    j->launcher = "torchrun";
    GET_RANKS(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE);
    const char *id = v->CHORUS_JOB_ID, *run = v->TORCHELASTIC_RUN_ID, *port = v->MASTER_PORT;
    snprintf(j->job, sizeof(j->job), "torch-%s-%s", id ? id : run ? run : "job", port ? port : "0");
    /* Under torchrun its agent's own store already listens on MASTER_PORT; Chorus's store then
     * uses the next port. */
    if (j->size > 1 && !v->CHORUS_STORE_ADDR)
        CHORUS_CHECK(use_master(j, v, v->TORCHELASTIC_USE_AGENT_STORE ? 1 : 0, e));
    return CHORUS_OK;
}

/* The launcher whose variables are set, and the job they describe. */
static chorus_result launcher_job(chorus_job *j, const chorus_job_vars *v, chorus_errbuf *e)
{
    if (v->JOB_COMPLETION_INDEX && !v->CHORUS_RANK && !v->RANK) return kubernetes_job(j, v, e);
    if (v->CHORUS_RANK || v->CHORUS_SIZE) return chorus_run_job(j, v, e);
    if (v->OMPI_COMM_WORLD_RANK) return mpirun_job(j, v, e);
    if (v->PMI_RANK) return pmi_job(j, v, e);
    if (v->SLURM_PROCID && v->SLURM_STEP_ID) return srun_job(j, v, e);
    if (v->RANK || v->WORLD_SIZE) return torchrun_job(j, v, e);
    j->launcher = "none";
    j->rank = 0;
    j->size = 1;
    snprintf(j->job, sizeof(j->job), "single-%d", (int)getpid());
    return CHORUS_OK;
}

/* Where the ranks meet when the launcher's branch did not say. */
static chorus_result meeting_point(chorus_job *j, const chorus_job_vars *v, chorus_errbuf *e)
{
    const char *store = v->CHORUS_STORE_ADDR;
    if (store && strcmp(j->launcher, "chorus-run")) {
        snprintf(j->store_addr, sizeof(j->store_addr), "%s", store);
        j->serve_store = 1;
    } else if (!j->store_addr[0] && j->size > 1) {
        if (v->MASTER_ADDR && v->MASTER_PORT) {
            CHORUS_CHECK(use_master(j, v, 0, e));
        } else if (j->local_size == j->size || !strcmp(j->launcher, "srun")) {
            use_file(j, v); /* everyone on this host: meet through a file */
        } else if (v->PMIX_NAMESPACE) {
            j->pmix = 1; /* the launcher's PMIx server carries rank 0's address */
            j->serve_store = 1;
        } else {
            return chorus__fail(e, CHORUS_ERR_ENV,
                                "%s: ranks on several hosts need a meeting point: pass "
                                "MASTER_ADDR=<host of rank 0> MASTER_PORT=<free port> (with "
                                "mpirun: -x MASTER_ADDR=... -x MASTER_PORT=...)",
                                j->launcher);
        }
    }
    return CHORUS_OK;
}

chorus_result chorus__job_from_env(chorus_job *j, chorus_errbuf *e)
{
    chorus_job_vars v;
    chorus__job_vars_read(&v);
    memset(j, 0, sizeof(*j));
    j->local_rank = j->local_size = -1;
    CHORUS_CHECK(launcher_job(j, &v, e));
    if (j->size < 1)
        return chorus__fail(e, CHORUS_ERR_ENV, "%s: the world size must be at least 1",
                            j->launcher);
    if (j->rank >= j->size)
        return chorus__fail(e, CHORUS_ERR_ENV, "%s: rank %d is out of range for a world of %d",
                            j->launcher, j->rank, j->size);
    if (j->local_rank >= 0 && j->local_size > 0 && j->local_rank >= j->local_size)
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "%s: local rank %d is out of range for %d local ranks", j->launcher,
                            j->local_rank, j->local_size);
    return meeting_point(j, &v, e);
}
