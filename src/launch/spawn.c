/*
 * spawn.c - starting processes: the one spawner that starts a rank here, a remote rank's agent
 * through the remote shell, and (in the agent) the rank on its host.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "launch/launch.h"

static void close_pair(int p[2])
{
    if (p[0] >= 0) close(p[0]);
    if (p[1] >= 0) close(p[1]);
}

pid_t spawn_process(const run_child *c)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* The child must not outlive its parent (killed with SIGKILL, the parent cannot stop
         * it): the kernel sends death_sig when the parent dies. If it died before this line,
         * the child has already been handed to another parent: stop now. */
        prctl(PR_SET_PDEATHSIG, c->death_sig);
        if (getppid() != parent) _exit(128 + c->death_sig);
        if (c->in == RUN_DEVNULL) {
            int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (devnull >= 0) dup2(devnull, 0);
        } else if (c->in >= 0) {
            dup2(c->in, 0);
        }
        if (c->out >= 0) dup2(c->out, 1);
        if (c->err >= 0) dup2(c->err, 2);
        if (c->keep >= 0) fcntl(c->keep, F_SETFD, 0); /* kept across exec */
        setpgid(0, 0); /* terminal signals reach the parent, which forwards them */
        if (c->cpus) sched_setaffinity(0, sizeof(*c->cpus), c->cpus); /* best effort */
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (c->envp)
            execvpe(c->argv[0], c->argv, c->envp);
        else
            execvp(c->argv[0], c->argv);
        if (write(2, c->execfail, strlen(c->execfail)) < 0) { /* nothing more to do */
        }
        _exit(127);
    }
    if (pid > 0) setpgid(pid, pid); /* also here: the child may not have run yet when signalled */
    return pid;
}

/* Starts the agent of a remote rank through the remote shell and sends it the job (the
 * rank's variables, the secret among them, go on its stdin). The child's end of the
 * streams is out[1] and errp[1]. Returns the pid, or -1. */
static pid_t spawn_agent(job *j, int h, int rank, int wid, char **envp, int out1, int err1,
                         int *agent_in)
{
    char label[32];
    snprintf(label, sizeof(label), "%d", j->elastic ? wid : rank);
    char **rsh = run_rsh_argv(j->rsh, j->hosts.h[h].name, j->self, label);
    char **fwd = remote_env(envp);
    int in[2];
    if (!rsh || !fwd || pipe2(in, O_CLOEXEC)) {
        free(rsh);
        free(fwd);
        return -1;
    }
    char execfail[600];
    snprintf(execfail, sizeof(execfail),
             "chorus-run: cannot run the remote shell '%s' for host %s (exec failed)\n", rsh[0],
             j->hosts.h[h].name);
    /* The remote shell ends with the launcher; SIGTERM rather than SIGKILL, so that an agent
     * run in its place (ip netns exec execs it) can stop its rank's whole process group before
     * it goes. */
    run_child c = {.argv = rsh,
                   .in = in[0],
                   .out = out1,
                   .err = err1,
                   .keep = -1,
                   .death_sig = SIGTERM,
                   .execfail = execfail};
    pid_t pid = spawn_process(&c);
    close(in[0]);
    if (pid > 0) {
        /* An agent that died before reading shows on its stderr why (ssh's message). */
        fcntl(in[1], F_SETFL, O_NONBLOCK);
        if (run_agent_send(in[1], j->cwd, j->argv, fwd) && errno != EPIPE)
            fprintf(stderr, "chorus-run: cannot send the job to the agent of rank %s on %s: %s\n",
                    label, j->hosts.h[h].name, strerror(errno));
        *agent_in = in[1];
    } else {
        close(in[1]);
    }
    free(rsh);
    free(fwd);
    return pid;
}

worker *spawn(job *j, int rank, int size)
{
    if (j->nw == j->capw) {
        int nc = j->capw ? 2 * j->capw : 16;
        worker *nw = realloc(j->w, (size_t)nc * sizeof(worker));
        if (!nw) return NULL;
        j->w = nw;
        j->capw = nc;
        for (int i = 0; i < j->nw; i++)
            if (j->w[i].s[0].demux) j->w[i].s[0].demux = &j->w[i];
    }
    int wid = j->nw;
    int h = j->elastic                    ? pick_host(j)
            : j->hosts.n > 0 && rank >= 0 ? run_hosts_of_rank(&j->hosts, rank)
                                          : -1;
    int remote = h >= 0 && !j->hosts.h[h].local;
    int out[2], errp[2];
    if (pipe2(out, O_CLOEXEC)) return NULL;
    if (pipe2(errp, O_CLOEXEC)) {
        close(out[0]);
        close(out[1]);
        return NULL;
    }
    /* A plain job's ranks report their failures on a pipe (base/status.h); an elastic job
     * learns of them through the store. */
    int stp[2] = {-1, -1};
    if (!j->elastic && !remote && pipe2(stp, O_CLOEXEC | O_NONBLOCK)) stp[0] = stp[1] = -1;
    j->status_fd = stp[1];
    /* The child's environment is built here: between fork and exec only async-signal-safe
     * calls are allowed (the store thread may hold the allocator's lock at fork time, and the
     * child would wait for it forever). */
    char **envp = child_env(j, rank, size, wid);
    if (!envp) {
        close_pair(out);
        close_pair(errp);
        close_pair(stp);
        return NULL;
    }
    char execfail[300];
    snprintf(execfail, sizeof(execfail), "chorus-run: cannot run '%s' (exec failed)\n", j->argv[0]);
    fflush(stdout);
    fflush(stderr);
    int agent_in = -1;
    /* A rank dies with its launcher, which it could not stop otherwise. */
    cpu_set_t cpus;
    int bind = slot_cpus(j,
                         h >= 0 && !j->elastic ? rank - j->hosts.h[h].first_rank
                         : rank >= 0           ? rank
                                               : wid,
                         &cpus);
    run_child c = {.argv = j->argv,
                   .envp = envp,
                   .in = -1,
                   .out = out[1],
                   .err = errp[1],
                   .keep = stp[1],
                   .death_sig = SIGKILL,
                   .cpus = bind ? &cpus : NULL,
                   .execfail = execfail};
    pid_t pid =
        remote ? spawn_agent(j, h, rank, wid, envp, out[1], errp[1], &agent_in) : spawn_process(&c);
    if (pid < 0) {
        free_env(envp);
        close_pair(out);
        close_pair(errp);
        close_pair(stp);
        return NULL;
    }
    free_env(envp);
    close(out[1]);
    close(errp[1]);
    if (stp[1] >= 0) close(stp[1]);
    worker *w = &j->w[j->nw++];
    memset(w, 0, sizeof(*w));
    w->wid = wid;
    w->pid = pid;
    w->running = 1;
    w->rank = -1;
    w->s[0] = (stream){.fd = out[0], .out = stdout};
    w->s[1] = (stream){.fd = errp[0], .out = stderr};
    w->st.fd = stp[0];
    w->st.blamed = -1;
    w->st.blamed_far = -1;
    w->host = h;
    w->agent_in = agent_in;
    if (remote) w->s[0].demux = w;
    route_streams(j, w);
    watch_worker(j, w);
    return w;
}
