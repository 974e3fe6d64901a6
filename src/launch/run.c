/*
 * run.c - chorus-run, which starts the ranks of a Chorus job on this host or across hosts: the
 * steps of a run, behind chorus_run_main (include/chorus/run.h; tools/chorus-run.c is its main).
 *
 *   chorus-run -np N [options] [--] program [args...]
 *   chorus-run -H a:2,b:2 [--rsh CMD] [options] [--] program [args...]
 *   chorus-run --elastic -np N --min-np A --max-np B [--host-discovery-script PATH] program ...
 *   chorus-run --nnodes N --node-rank I --master-addr HOST [-np K] program ...
 *
 * Serves the rendezvous store, makes a random per-job secret (CHORUS_SECRET) that every
 * connection must prove, starts the processes with their CHORUS_* environment (and
 * torchrun's and horovodrun's variables, so their programs run unchanged), prefixes each
 * output line with the rank, forwards SIGINT/SIGTERM, and when one rank fails gives the
 * others a moment to report the failure, stops them, and exits with the failing rank's status
 * and a line saying which rank failed and how (also when a rank hangs: a stopped process is
 * noticed through waitpid); --max-restarts starts the whole job again, as torchrun does.
 * The flags of horovodrun, torchrun and mpirun that map onto Chorus are taken with their
 * meaning; the others are refused with what to use instead (docs/LAUNCHER.md).
 *
 * With --elastic the job survives failures: the program uses chorus_elastic_run
 * (include/chorus/elastic.h), and this launcher decides the membership of each generation.
 * Workers check in through the store (el/in/<gen>/<worker>) when they lose a peer or start;
 * the launcher publishes el/round/<gen> = "<gen> <n> <worker ids in rank order>" once every
 * live worker has checked in and at least --min-np remain, kills workers that other workers
 * report unresponsive (or that are stopped) and that do not check in themselves, starts
 * replacements up to --max-np (--max-restarts of them; none after a replacement failed as
 * its predecessor did), and follows a host discovery script.
 * Running workers learn of a pending generation at their next commit (el/next). Every key
 * and value format of this protocol is defined in src/elastic/keys.h.
 *
 * Across hosts (-H, --hostfile, or a discovery script naming other hosts), a rank of a host
 * that is not this machine is a worker here too: an agent (this program with --agent,
 * agent.c) started over the remote shell, whose streams carry the rank's output, status
 * and end, so supervision, failure reports and elastic membership treat it as any other.
 *
 * With --nnodes N (torchrun's static rendezvous; a Kubernetes pod per node) each node runs its
 * own chorus-run for its ranks of a fixed world; node 0's serves the store. A node's workers
 * are numbered from 0 inside, global rank = base + worker; status-pipe blames of another
 * node's rank are kept apart (blamed_far) and named in the summary.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "chorus/run.h"
#include "coll/comm.h"
#include "launch/launch.h"
#include "wire/sock.h"

/* A port on 127.0.0.1 that nothing listens on now (0 when none could be found). */
static int free_port(void)
{
    chorus_errbuf e = {{0}};
    int fd = -1, port = 0;
    if (chorus__sock_listen("127.0.0.1", 0, 1, &fd, &port, &e) != CHORUS_OK) return 0;
    close(fd);
    return port;
}

/* Names this run of the job (a restart is a new job for the store and shared memory: nothing
 * of the failed run can be mistaken for the new one's) and picks MASTER_PORT for the ranks'
 * own torch.distributed store, unless the user set one. */
static void begin_attempt(job *j)
{
    if (j->attempt == 0)
        snprintf(j->id, sizeof(j->id), "%s", j->base_id);
    else
        snprintf(j->id, sizeof(j->id), "%s-r%d", j->base_id, j->attempt);
    chorus_job_vars v;
    chorus__job_vars_read(&v); /* MASTER_PORT: the user's, or --master-port's */
    j->master_port = j->nnodes > 1 ? j->store_port + 1 : v.MASTER_PORT ? 0 : free_port();
    if (j->verbose)
        fprintf(stderr,
                "chorus-run: job %s: %d rank%s of %s; rendezvous store %s; MASTER_PORT %s "
                "%d%s%s\n",
                j->id, j->np, j->np == 1 ? "" : "s", j->argv[0], j->store,
                j->master_port ? "(picked)" : "(yours)",
                j->master_port ? j->master_port : atoi(v.MASTER_PORT),
                j->log_dir ? "; output in " : "", j->log_dir ? j->log_dir : "");
}

/* Step 3: the per-job secret (put in the environment, so the ranks and this process's own
 * store use it), the launcher's log and config, the job id, and the rendezvous store (also
 * connected to, for an elastic job). Returns -1 to go on, else the exit code. */
static int prepare_job(job *j, chorus_store_server **server)
{
    if (make_secret()) return 1;
    /* The launcher's own log: refused store clients are worth a line even without
     * CHORUS_DEBUG; the ranks inherit the environment unchanged. */
    chorus__log_default_level(CHORUS_LOG_WARN);
    const char *bad = chorus__config_error();
    if (bad) {
        const char *flag = env_flag_behind(bad);
        fprintf(stderr, "chorus-run: invalid environment: %s%s%s%s\n", bad,
                *flag ? " (set by " : "", flag, *flag ? ")" : "");
        return 2;
    }
    chorus_errbuf algo_err;
    if (chorus__select_check_config(chorus__config(), &algo_err) != CHORUS_OK) {
        fprintf(stderr, "chorus-run: invalid environment: %s\n", algo_err.msg);
        return 2;
    }
    chorus__config_log_set();
    const chorus_config *cfg = chorus__config();
    j->timeout_s = cfg->timeout_s;
    if (j->timeout_s <= 0) j->timeout_s = 300;
    if (cfg->job_id) {
        snprintf(j->base_id, sizeof(j->base_id), "%s", cfg->job_id);
    } else if (j->nnodes > 1) { /* the same on every node */
        snprintf(j->base_id, sizeof(j->base_id), "nodes-%.40s-%d", j->master_addr, j->store_port);
    } else {
        unsigned char rnd[8] = {0};
        int ufd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (ufd >= 0) {
            if (read(ufd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd)) memset(rnd, 0, sizeof(rnd));
            close(ufd);
        }
        snprintf(j->base_id, sizeof(j->base_id), "run-%d-%02x%02x%02x%02x%02x%02x", (int)getpid(),
                 rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
    }
    chorus_errbuf err;
    int port = 0;
    char ip[64] = "127.0.0.1", adv[300] = "127.0.0.1";
    if (j->remote && run_store_address(&j->hosts, cfg, ip, sizeof(ip), adv, sizeof(adv))) return 2;
    if (j->nnodes > 1) { /* node 0 serves on every address: the others come through master */
        snprintf(ip, sizeof(ip), "0.0.0.0");
        snprintf(adv, sizeof(adv), "%s", j->master_addr);
        port = j->store_port;
    }
    if (((j->np > 1 && j->nnodes <= 1) || j->elastic || (j->nnodes > 1 && j->node_rank == 0)) &&
        chorus__store_server_start(ip, port, server, &port, &err) != CHORUS_OK) {
        fprintf(stderr, "chorus-run: cannot start the rendezvous store%s: %s\n",
                j->nnodes > 1 ? " (node 0 serves it on --master-port)" : "", err.msg);
        return 1;
    }
    snprintf(j->store, sizeof(j->store), "%s:%d", adv, port);
    begin_attempt(j);
    if (j->elastic &&
        chorus__store_connect(j->store, j->id, chorus__deadline(), &j->kv, &err) != CHORUS_OK) {
        fprintf(stderr, "chorus-run: cannot reach its own store: %s\n", err.msg);
        chorus__store_server_stop(*server);
        return 1;
    }
    return -1;
}

/* Step 4: signal handling (signals wake the supervision loop through sig_pipe) and the first
 * np ranks. Returns -1 to go on, else the exit code. */
static int start_ranks(job *j)
{
    for (int r = 0; r < j->np; r++)
        if (!spawn(j, r, j->np)) {
            perror("chorus-run: cannot start a rank");
            signal_all(j, SIGKILL);
            return 1;
        }
    return -1;
}

static int spawn_ranks(job *j)
{
    if (supervise_begin(j)) return 1;
    return start_ranks(j);
}

/* --max-restarts for a plain job, as torchrun does: after a failed run (every rank has ended),
 * says how it failed and starts all the ranks again under a new job id. Returns 1 when a new
 * run is under way, 0 when the job is over. */
static int restart_job(job *j, const outcome *out)
{
    if (j->elastic || out->failed < 0 || out->interrupted || out->timed_out ||
        j->attempt >= j->max_restarts)
        return 0;
    report(j, out);
    j->attempt++;
    fprintf(stderr, "chorus-run: restarting all %d ranks (restart %d of --max-restarts %d)\n",
            j->np, j->attempt, j->max_restarts);
    unwatch_workers(j);
    j->nw = 0;
    begin_attempt(j);
    return start_ranks(j) < 0;
}

int chorus_run_main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "--agent")) return run_agent_main(argc, argv);
    if (argc == 2 && !strcmp(argv[1], "--version"))
        return printf("chorus-run %s\n", chorus_version()) < 0;
    job j = {.np = -1,
             .node_rank = -1,
             .prefix = 1,
             .max_restarts = -1,
             .discovery_every = 5,
             .min_np = 1,
             .last_fail_wid = -1};
    run_opts o = {.grace = 5, .bind_req = -1};
    int rc = parse_args(argc, argv, &j, &o);
    if (rc < 0) rc = check_args(argc, argv, &j, &o);
    chorus_store_server *server = NULL;
    if (rc < 0) rc = prepare_job(&j, &server);
    j.started = chorus__now();
    if (rc < 0) rc = spawn_ranks(&j);
    if (rc >= 0) { /* help, a bad option, or nothing could start */
        free(j.w);
        chorus__loop_free(j.loop);
        run_hosts_free(&j.hosts);
        return rc;
    }
    outcome out;
    do {
        out = (outcome){.failed = -1, .last_failed = -1, .tolerated = -1};
        if (supervise(&j, &o, &out) >= 0) return 1;
    } while (restart_job(&j, &out));
    chorus__store_close(j.kv);
    rc = report(&j, &out); /* the store still serves: the summary may look up where ranks were */
    chorus__store_server_stop(server);
    free(j.w);
    chorus__loop_free(j.loop);
    run_hosts_free(&j.hosts);
    return rc;
}
