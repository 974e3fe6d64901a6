/*
 * env.c - what a rank is started with: its environment (CHORUS_*, and the variables of torchrun
 * and horovodrun so that their programs run unchanged), the variables a remote rank's agent is
 * sent (-x adds to them), and the CPU block a rank is bound to.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch/launch.h"

/* Loopback TCP and shared memory wake the receiver on the sender's CPU, so two ranks that
 * float can end up taking turns on one core while the other idles; pinned ranks cannot.
 * The CPUs of slot i's block in set: 1, or 0 when ranks are not bound. */
int slot_cpus(const job *j, int slot, cpu_set_t *set)
{
    if (!j->bind || j->per < 1) return 0;
    int blocks = j->ncpus / j->per;
    if (blocks < 1) return 0;
    int b = slot % blocks;
    CPU_ZERO(set);
    for (int k = 0; k < j->per; k++) CPU_SET(j->cpus[b * j->per + k], set);
    return 1;
}

void plan_binding(job *j, int requested)
{
    cpu_set_t set;
    j->bind = 0;
    if (requested == 0 || sched_getaffinity(0, sizeof(set), &set)) return;
    int n = CPU_COUNT(&set);
    if (n < j->np || n < 2 || j->np < 1) return; /* oversubscribed (or no rank here) */
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < n; c++)
        if (CPU_ISSET(c, &set)) j->cpus[k++] = c;
    j->ncpus = n;
    j->per = n / j->np;
    j->bind = 1;
}

/* Threads each of local_size ranks on this host should use for its own computation
 * (OMP_NUM_THREADS): its block of CPUs when ranks are pinned, else an even share of the CPUs
 * this launcher may use, at least 1. */
static int threads_per_rank(const job *j, int local_size)
{
    if (j->bind && j->per > 0) return j->per;
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof(set), &set) ? 1 : CPU_COUNT(&set);
    return n / local_size > 1 ? n / local_size : 1;
}

/* Variables every rank gets from this launcher (an inherited value is replaced or removed). The
 * standard ones let programs written for other launchers run unchanged: torchrun's (a plain
 * torch.distributed script with init_method="env://") and Horovod's (the rank a horovodrun
 * script reads before init). OMPI_COMM_WORLD_* are left alone: Open MPI's own MPI_Init would
 * take them for an mpirun job and fail. */
static const char *const launcher_vars[] = {"CHORUS_RANK=",
                                            "CHORUS_LOCAL_RANK=",
                                            "CHORUS_SIZE=",
                                            "CHORUS_LOCAL_SIZE=",
                                            "CHORUS_ELASTIC=",
                                            "CHORUS_WORKER_ID=",
                                            "CHORUS_STORE_ADDR=",
                                            "CHORUS_JOB_ID=",
                                            "CHORUS_STATUS_FD=",
                                            "RANK=",
                                            "LOCAL_RANK=",
                                            "WORLD_SIZE=",
                                            "LOCAL_WORLD_SIZE=",
                                            "GROUP_RANK=",
                                            "GROUP_WORLD_SIZE=",
                                            "ROLE_RANK=",
                                            "ROLE_WORLD_SIZE=",
                                            "TORCHELASTIC_RESTART_COUNT=",
                                            "TORCHELASTIC_MAX_RESTARTS=",
                                            "HOROVOD_RANK=",
                                            "HOROVOD_SIZE=",
                                            "HOROVOD_LOCAL_RANK=",
                                            "HOROVOD_LOCAL_SIZE=",
                                            "HOROVOD_CROSS_RANK=",
                                            "HOROVOD_CROSS_SIZE="};
#define N_LAUNCHER_VARS (sizeof(launcher_vars) / sizeof(launcher_vars[0]))

/* A copy of this process's environment with the rank's launcher variables set (or removed):
 * CHORUS_* for libchorus; RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ... as torchrun sets
 * them (a plain job: its ranks are all there is); HOROVOD_RANK, HOROVOD_SIZE, ... as
 * horovodrun sets them (an elastic worker's are its plan: where it starts; its generations
 * decide the rest); PYTHONUNBUFFERED=1 unless set, so that Python ranks print as they go
 * instead of when their pipe's buffer fills; OMP_NUM_THREADS unless set, when ranks share this
 * host. */
char **child_env(const job *j, int rank, int size, int wid)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **envp = calloc(n + N_LAUNCHER_VARS + 8, sizeof(char *));
    if (!envp) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int skip = 0;
        for (size_t o = 0; o < N_LAUNCHER_VARS; o++)
            if (!strncmp(environ[i], launcher_vars[o], strlen(launcher_vars[o]))) skip = 1;
        if (j->master_port && !strncmp(environ[i], "MASTER_ADDR=", 12)) skip = 1;
        if (!skip && !(envp[k++] = strdup(environ[i]))) goto fail;
    }
    /* Across hosts: the rank's place on its host, and its host's among the hosts. */
    int local = rank, local_size = size, group = 0, groups = 1;
    const char *master = "127.0.0.1";
    if (j->hosts.n > 0 && rank >= 0 && !j->elastic) {
        int h = run_hosts_of_rank(&j->hosts, rank);
        local = rank - j->hosts.h[h].first_rank;
        local_size = j->hosts.h[h].nranks;
        groups = 0;
        for (int i = 0; i < j->hosts.n; i++) {
            if (i == h) group = groups;
            groups += j->hosts.h[i].nranks > 0;
        }
        master = j->hosts.h[run_hosts_of_rank(&j->hosts, 0)].name;
    }
    if (j->nnodes > 1) { /* one node of several: this node's ranks of the whole world */
        local = rank;
        local_size = size;
        group = j->node_rank;
        groups = j->nnodes;
        rank += j->base;
        size *= j->nnodes;
        master = j->master_addr;
    }
    char v[400];
#define PUT(...)                                                                                   \
    do {                                                                                           \
        snprintf(v, sizeof(v), __VA_ARGS__);                                                       \
        if (!(envp[k++] = strdup(v))) goto fail;                                                   \
    } while (0)
    if (rank >= 0) {
        PUT("CHORUS_RANK=%d", rank);
        PUT("CHORUS_LOCAL_RANK=%d", local);
        PUT("CHORUS_SIZE=%d", size);
        PUT("CHORUS_LOCAL_SIZE=%d", local_size);
    }
    if (rank >= 0 && !j->elastic) {
        PUT("RANK=%d", rank);
        PUT("LOCAL_RANK=%d", local);
        PUT("WORLD_SIZE=%d", size);
        PUT("LOCAL_WORLD_SIZE=%d", local_size);
        PUT("GROUP_RANK=%d", group); /* the node's index and the node count */
        PUT("GROUP_WORLD_SIZE=%d", groups);
        PUT("ROLE_RANK=%d", rank);
        PUT("ROLE_WORLD_SIZE=%d", size);
        PUT("TORCHELASTIC_RESTART_COUNT=%d", j->attempt);
        PUT("TORCHELASTIC_MAX_RESTARTS=%d", j->max_restarts);
        chorus_job_vars job;
        chorus__job_vars_read(&job);
        if (j->master_port) { /* else the user's MASTER_PORT (and MASTER_ADDR) */
            PUT("MASTER_ADDR=%s", master);
            PUT("MASTER_PORT=%d", j->master_port);
        } else if (!job.MASTER_ADDR) {
            PUT("MASTER_ADDR=%s", master);
        }
    }
    int plan_rank = rank, plan_size = size;
    if (rank < 0) { /* an elastic replacement: it joins after the workers running now */
        plan_rank = count_alive(j);
        plan_size = j->desired > plan_rank ? j->desired : plan_rank + 1;
        local = plan_rank;
        local_size = plan_size;
    }
    PUT("HOROVOD_RANK=%d", plan_rank);
    PUT("HOROVOD_SIZE=%d", plan_size);
    PUT("HOROVOD_LOCAL_RANK=%d", local);
    PUT("HOROVOD_LOCAL_SIZE=%d", local_size);
    PUT("HOROVOD_CROSS_RANK=%d", group);
    PUT("HOROVOD_CROSS_SIZE=%d", groups);
    if (!chorus__env("PYTHONUNBUFFERED")) PUT("PYTHONUNBUFFERED=1");
    /* As torchrun does: ranks sharing a host would each start a thread per CPU (torch's
     * intra-op pool, OpenMP, OpenBLAS), oversubscribing the cores. */
    if (!chorus__env("OMP_NUM_THREADS") && local_size > 1)
        PUT("OMP_NUM_THREADS=%d", threads_per_rank(j, local_size));
    if (j->elastic) {
        PUT("CHORUS_ELASTIC=1");
        PUT("CHORUS_WORKER_ID=%d", wid);
    }
    PUT("CHORUS_STORE_ADDR=%s", j->store);
    PUT("CHORUS_JOB_ID=%s", j->id);
    if (j->status_fd >= 0) PUT("CHORUS_STATUS_FD=%d", j->status_fd);
#undef PUT
    return envp;
fail:
    free_env(envp);
    return NULL;
}

/* Variables -x named (besides CHORUS_*), which remote ranks get too. */
static char exported[64][256];
static int n_exported;

/* Which of a rank's variables its agent is sent: what this launcher sets, the CHORUS_*
 * configuration (the job secret with it), MASTER_*, PYTHONUNBUFFERED and what -x named. The
 * rest of a remote rank's environment is its host's, as under mpirun. */
static int forwarded(const char *e)
{
    static const char *const prefixes[] = {"CHORUS_",
                                           "MASTER_ADDR=", "MASTER_PORT=", "PYTHONUNBUFFERED="};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (!strncmp(e, prefixes[i], strlen(prefixes[i]))) return 1;
    for (size_t o = 0; o < N_LAUNCHER_VARS; o++)
        if (!strncmp(e, launcher_vars[o], strlen(launcher_vars[o]))) return 1;
    for (int i = 0; i < n_exported; i++) {
        size_t n = strlen(exported[i]);
        if (!strncmp(e, exported[i], n) && e[n] == '=') return 1;
    }
    return 0;
}

char **remote_env(char *const *envp)
{
    char **fwd = calloc(N_LAUNCHER_VARS + 4096, sizeof(char *));
    for (size_t i = 0, k = 0; fwd && envp[i] && k < N_LAUNCHER_VARS + 4095; i++)
        if (forwarded(envp[i])) fwd[k++] = envp[i];
    return fwd;
}

/* -x VAR=value sets VAR for the launcher and every rank; -x VAR passes VAR on as it is here
 * (the ranks here inherit the environment anyway; remote ranks get what -x names) and warns
 * when it is not set. */
int export_var(const char *v)
{
    const char *eq = strchr(v, '=');
    if (eq == v || !*v) {
        fprintf(stderr, "chorus-run: -x takes VAR or VAR=value, not '%s'\n", v);
        return -1;
    }
    if (!eq && !chorus__env(v))
        fprintf(stderr, "chorus-run: -x %s: %s is not set here; nothing to pass on\n", v, v);
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)(eq ? eq - v : (long)strlen(v)), v);
    if (n_exported < 64) snprintf(exported[n_exported++], sizeof(exported[0]), "%s", name);
    return eq ? setenv(name, eq + 1, 1) : 0;
}

void free_env(char **envp)
{
    for (char **e = envp; *e; e++) free(*e);
    free(envp);
}
