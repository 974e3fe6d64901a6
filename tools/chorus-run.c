/*
 * chorus-run - starts the ranks of a Chorus job on this host or across hosts.
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
 * run_remote.c) started over the remote shell, whose streams carry the rank's output, status
 * and end, so supervision, failure reports and elastic membership treat it as any other.
 *
 * With --nnodes N (torchrun's static rendezvous; a Kubernetes pod per node) each node runs its
 * own chorus-run for its ranks of a fixed world; node 0's serves the store. A node's workers
 * are numbered from 0 inside, global rank = base + worker; status-pipe blames of another
 * node's rank are kept apart (blamed_far) and named in the summary.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/base.h"
#include "bootstrap/store.h"
#include "coll/comm.h"
#include "elastic/keys.h"
#include "run_remote.h"
#include "wire/sock.h"

#define SUSPECT_GRACE_S 3.0 /* a worker reported lost must check in within this, or is killed */

#define TAIL_LINES 8    /* last output lines kept per rank, for the failure summary */
#define TAIL_WIDTH 4096 /* of each, at most this many bytes (longer ones are marked cut) */

/* The last lines a rank wrote (stdout and stderr together), oldest first from next. */
typedef struct tail {
    char line[TAIL_LINES][TAIL_WIDTH];
    int next, count;
} tail;

struct worker;

typedef struct stream {
    int fd;
    struct worker *demux; /* the agent's stdout of a remote rank: framed lines (run_remote.h) */
    FILE *out;            /* the console (NULL: only to the log file) */
    FILE *log;            /* --log-dir: this rank's file for the stream (NULL: none) */
    char buf[65536];
    size_t len;
    char last[200]; /* the last line that was not blank: how a failure is recognised */
} stream;

/* What a rank said on its status pipe (CHORUS_STATUS_FD, base/status.h) about its failure. */
typedef struct status_pipe {
    int fd;
    char buf[512];
    size_t len;
    int reported;   /* a "failed" line arrived */
    int blamed;     /* the rank it held responsible, -1: its own failure */
    int blamed_far; /* --nnodes: the rank of another node it held responsible (-1: none) */
    char what[48];  /* the result name it gave (PEER_FAILED: it was told that `blamed` failed) */
    int expendable; /* it said the job goes on without it (an asynchronous parameter-server
                       worker): its end does not stop the job */
} status_pipe;

typedef struct worker {
    int wid; /* worker id: the rank in a plain job, a stable id in an elastic one */
    pid_t pid;
    int running; /* not reaped yet */
    int status;
    int stopped; /* seen stopped (SIGSTOP/SIGTSTP) and not continued */
    int was_stopped;
    double stopped_at; /* when it was last seen stopped */
    stream s[2];       /* stdout, stderr */
    tail tail;
    status_pipe st;
    double fail_time; /* when its failure was first seen: a report, an exit or a stop (0: not) */
    int failed_alone; /* it ended with an error or a signal before the job was being stopped */
    int tolerated;    /* an expendable rank that failed: the job went on without it */
    /* elastic */
    int rank;             /* rank in the generation published last, -1 when not a member */
    long checked;         /* generation it checked in for (0: none) */
    double suspect_since; /* reported lost by a peer (0: not) */
    int killed;           /* we killed it as unresponsive */
    int leaving;          /* its end is expected (scaled down, or the job finished without it) */
    int replacement;      /* started to replace a failed worker */
    /* across hosts */
    int host;         /* index in the job's host list (-1: a job on this host only) */
    int agent_in;     /* the agent's stdin, for signals (-1: a rank started here) */
    pid_t remote_pid; /* the rank's pid on its host, as its agent reported it */
    int agent_status; /* the rank's wait status, as its agent reported it */
    int has_agent_status;
} worker;

static int sig_pipe[2];
/* The global rank of a node's first rank (--nnodes): what the [rank] prefixes add. */
static int rank_base;
static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
    int saved = errno;
    got_signal = sig;
    unsigned char b = (unsigned char)sig;
    if (write(sig_pipe[1], &b, 1) < 0) { /* pipe full: a wake-up is already pending */
    }
    errno = saved;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: chorus-run -np N [options] [--] program [args...]\n"
        "\n"
        "Starts N ranks of a Chorus job on this host, or across hosts (-H, --hostfile). Each\n"
        "rank gets CHORUS_RANK/CHORUS_SIZE,\n"
        "torchrun's RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK ROLE_RANK MASTER_ADDR\n"
        "MASTER_PORT (a free port for torch.distributed's own store; yours if MASTER_PORT is\n"
        "set), horovodrun's HOROVOD_RANK HOROVOD_SIZE HOROVOD_LOCAL_RANK HOROVOD_LOCAL_SIZE\n"
        "HOROVOD_CROSS_RANK HOROVOD_CROSS_SIZE, PYTHONUNBUFFERED=1 unless set, and, with\n"
        "several ranks on this host, OMP_NUM_THREADS (unless set) = its share of the CPUs.\n"
        "Options take '--name value' or '--name=value'; torchrun's --names_with_underscores too.\n"
        "\n"
        "A program named *.py runs with Python, as torchrun runs it: python3 beside chorus-run\n"
        "(pip installs both in an environment's bin/), else python3 from PATH; --no-python\n"
        "runs it as it is. Name the interpreter to choose another: chorus-run -np 2 python3.12\n"
        "train.py.\n"
        "\n"
        "options:\n"
        "  -np N, -n N, --nproc-per-node N\n"
        "                   number of ranks (required unless a discovery script gives it)\n"
        "  --nnodes N, --node-rank I, --master-addr HOST\n"
        "                   torchrun's static rendezvous: run this node's -np ranks (I*np on)\n"
        "                   of a world of N*np; node 0's chorus-run serves the store on\n"
        "                   --master-port (default 29500) at HOST, the ranks' MASTER_PORT is\n"
        "                   the next port; CHORUS_SECRET must be set, the same on every node.\n"
        "                   Unset flags come from PET_NNODES, PET_NPROC_PER_NODE,\n"
        "                   PET_NODE_RANK (else JOB_COMPLETION_INDEX: a Kubernetes pod),\n"
        "                   PET_MASTER_ADDR, PET_MASTER_PORT (a pod per node:\n"
        "                   docs/KUBERNETES.md); N = 1: one node (or name hosts with -H)\n"
        "  -H, --host LIST  hosts and their slots, as 'a:2,b:2' (a name alone: 1 slot); the\n"
        "                   ranks fill a's slots, then b's (mpirun's --map-by slot); -np\n"
        "                   defaults to every slot\n"
        "  --hostfile FILE  the hosts, one a line: 'host slots=N' (or 'host:N', or 'host' for\n"
        "                   one slot); '#' starts a comment\n"
        "  --rsh CMD        how ranks start on a host that is not this machine: CMD HOST\n"
        "                   chorus-run --agent ... (default 'ssh -o BatchMode=yes'; the\n"
        "                   namespace hosts of the tests use 'ip netns exec')\n"
        "  -p, --ssh-port P, --ssh-identity-file FILE\n"
        "                   horovodrun's: ssh's -p and -i for the default remote shell\n"
        "  -x VAR[=value]   set VAR for every rank (VAR alone: pass it on as it is here)\n"
        "  --no-prefix      do not prefix output lines with [rank]\n"
        "  --tag-output     prefix output lines with [rank] (the default)\n"
        "  --log-dir DIR    write each rank's output to DIR/attempt_<n>/<rank>/stdout.log and\n"
        "                   stderr.log instead of here\n"
        "  --tee 0-3        with --log-dir, also show stdout (1), stderr (2) or both (3) here\n"
        "  --redirects 0-3  with --log-dir, which streams go to the files (default 3: both)\n"
        "  --max-restarts K\n"
        "                   a plain job: start all ranks again, up to K times, when one fails\n"
        "                   (TORCHELASTIC_RESTART_COUNT tells them which run this is);\n"
        "                   elastic: see below\n"
        "  --timeout S      stop the whole job after S seconds (exit status 124)\n"
        "  --bind-to core|none  pin each rank to its own block of the CPUs this launcher may use\n"
        "                   (default core when there are at least as many CPUs as ranks)\n"
        "  --servers K      parameter server: ranks 0..K-1 serve, the others work (K < N)\n"
        "                   (CHORUS_PS_SERVERS; chorus-train --mode ps-*, chorus.ps)\n"
        "  --grace S        after a rank fails, give the others S seconds to exit on their own\n"
        "                   before stopping them (default 5); a lost worker of an async or\n"
        "                   ssp parameter server stops no one: the job goes on without it\n"
        "  --verbose        say what is started; the ranks log at CHORUS_DEBUG=INFO\n"
        "  --help-env       print the CHORUS_* environment variables and their defaults\n"
        "  -h, --help       this help\n"
        "  --version        print the version and exit\n"
        "\n"
        "horovodrun's tuning flags, each a CHORUS_* variable of every rank:\n"
        "  --timeline-filename FILE           CHORUS_TIMELINE\n"
        "  --network-interface IFACE          CHORUS_IFACE (one interface or IPv4 address)\n"
        "  --start-timeout S                  CHORUS_START_TIMEOUT_S\n"
        "  --fusion-threshold-mb MB           CHORUS_FUSION_THRESHOLD\n"
        "  --cycle-time-ms MS                 CHORUS_CYCLE_TIME_MS\n"
        "  --cache-capacity N                 CHORUS_CACHE_CAPACITY\n"
        "  --stall-check-warning-time-seconds S, --stall-check-shutdown-time-seconds S\n"
        "                                     CHORUS_STALL_WARN_S, CHORUS_STALL_SHUTDOWN_S\n"
        "  --autotune                         CHORUS_AUTOTUNE=1: the engine tries algorithms,\n"
        "                                     fusion thresholds and cycle times, keeps the "
        "fastest\n"
        "  --autotune-warmup-samples N        CHORUS_AUTOTUNE_WARMUP (steps before tuning)\n"
        "  --autotune-steps-per-sample N      CHORUS_AUTOTUNE_STEPS (measured steps a candidate)\n"
        "  --timeline-mark-cycles, and torchrun's --standalone, are what Chorus always does;\n"
        "  --master-port P sets MASTER_PORT, as torchrun's does. Other launchers' flags that\n"
        "  do not apply here are refused with what to use instead.\n"
        "\n"
        "elastic jobs (the program uses chorus_elastic_run; output is prefixed [worker id]):\n"
        "  --elastic        keep the job alive when workers fail: survivors form a new\n"
        "                   generation and go on from the last commit\n"
        "  --min-np A       stop the job when fewer than A workers remain (default 1)\n"
        "  --max-np B       never run more than B workers (default N)\n"
        "  --max-restarts K start at most K replacements for failed workers (default 3); a\n"
        "                   replacement that fails as the worker before it did (same status,\n"
        "                   same last line on stderr) ends the replacing\n"
        "  --host-discovery-script PATH\n"
        "                   run PATH every --discovery-interval seconds (default 5); each line\n"
        "                   'host:slots' names a host and its slots. Workers are started or\n"
        "                   retired (at their next commit) to match the slots, capped at\n"
        "                   --max-np; other hosts than this machine through --rsh, when one\n"
        "                   is named at the start (the store then listens where they reach it)\n"
        "  --discovery-interval S\n"
        "\n"
        "Across hosts, the hosts that are this machine start their ranks here; every other\n"
        "rank starts through an agent (this program) over the remote shell, which gets the\n"
        "job, the secret among it, on its stdin, relays the rank's output, forwards signals,\n"
        "and stops the rank when the connection goes. The rendezvous store listens on this\n"
        "host's address in the list (CHORUS_IFACE's when set). See docs/LAUNCHER.md.\n");
}

static void help_env(void)
{
    printf("%-26s %-12s %-8s %s\n", "VARIABLE", "DEFAULT", "TYPE", "MEANING");
    for (const chorus_cfg_entry *e = chorus__cfg_table(); e->name; e++) {
        printf("%-26s %-12s %-8s %s\n", e->name, e->def ? e->def : "-", chorus__cfg_type_name(e),
               e->help);
    }
}

/* Is prog something execvp can run? Sets *why when not. */
static int runnable(const char *prog, char *why, size_t len)
{
    struct stat st;
    if (strchr(prog, '/')) {
        if (stat(prog, &st)) {
            snprintf(why, len, "%s", strerror(errno));
            return 0;
        }
        if (S_ISDIR(st.st_mode) || access(prog, X_OK)) {
            snprintf(why, len, "%s", S_ISDIR(st.st_mode) ? "is a directory" : "is not executable");
            return 0;
        }
        return 1;
    }
    const char *path = chorus__env("PATH");
    if (!path) path = "/usr/bin:/bin";
    char *copy = strdup(path), *save = NULL;
    int found = 0, noexec = 0;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char full[4096];
        snprintf(full, sizeof(full), "%s/%s", *d ? d : ".", prog);
        if (stat(full, &st) == 0 && !S_ISDIR(st.st_mode)) {
            if (access(full, X_OK) == 0)
                found = 1;
            else
                noexec = 1;
        }
    }
    free(copy);
    if (!found)
        snprintf(why, len, "%s", noexec ? "is not executable" : "command not found in PATH");
    return found;
}

/* Writes one line of a rank's output, and keeps it in t. */
static void emit(stream *s, tail *t, int rank, int prefix, const char *line, size_t n)
{
    if (n < TAIL_WIDTH)
        snprintf(t->line[t->next], TAIL_WIDTH, "%.*s", (int)n, line);
    else /* the first bytes, and how much is missing (the whole line went to the console) */
        snprintf(t->line[t->next], TAIL_WIDTH, "%.*s... [cut: the line has %zu bytes]",
                 TAIL_WIDTH - 64, line, n);
    t->next = (t->next + 1) % TAIL_LINES;
    if (t->count < TAIL_LINES) t->count++;
    if (s->out && prefix)
        fprintf(s->out, "[%d] %.*s\n", rank + rank_base, (int)n, line);
    else if (s->out)
        fprintf(s->out, "%.*s\n", (int)n, line);
    if (s->log) fprintf(s->log, "%.*s\n", (int)n, line);
    size_t blank = 0;
    while (blank < n && (line[blank] == ' ' || line[blank] == '\t' || line[blank] == '\r')) blank++;
    if (blank < n) snprintf(s->last, sizeof(s->last), "%.*s", (int)n, line);
}

/* A line of stream s: on the console and in the log, or, for a remote rank's agent, routed by
 * its tag (run_remote.h): the rank's stdout and stderr lines, its status-pipe lines (kept
 * for read_status), its pid, its stops and continues, and its end. */
static void deliver(stream *s, tail *t, int rank, int prefix, const char *line, size_t n)
{
    worker *w = s->demux;
    if (!w || n < 2 || line[1] != ' ') {
        emit(s, t, rank, prefix, line, n);
        return;
    }
    const char *v = line + 2;
    size_t vn = n - 2;
    status_pipe *p = &w->st;
    switch (line[0]) {
    case '1': emit(&w->s[0], t, rank, prefix, v, vn); break;
    case '2': emit(&w->s[1], t, rank, prefix, v, vn); break;
    case 'S':
        if (p->len + vn + 2 < sizeof(p->buf)) {
            memcpy(p->buf + p->len, v, vn);
            p->len += vn;
            p->buf[p->len++] = '\n';
            p->buf[p->len] = 0;
        }
        break;
    case 'P': w->remote_pid = (pid_t)atoi(v); break;
    case 'X':
        w->agent_status = atoi(v);
        w->has_agent_status = 1;
        break;
    case 'T': /* as reap() notes a rank of this host stopped or continued */
        w->stopped = w->was_stopped = 1;
        w->stopped_at = chorus__now();
        break;
    case 'C': w->stopped = 0; break;
    default: emit(s, t, rank, prefix, line, n);
    }
}

/* Flushes what was written for s, so that the console and the log file follow the rank line
 * by line. */
static void flush_stream(stream *s)
{
    if (s->out) fflush(s->out);
    if (s->log) fflush(s->log);
}

typedef struct pump_ctx {
    stream *s;
    tail *t;
    int rank, prefix;
} pump_ctx;

static void deliver_line(void *ctx, const char *line, size_t n)
{
    pump_ctx *c = ctx;
    deliver(c->s, c->t, c->rank, c->prefix, line, n);
}

/* Reads what is available; writes complete lines. Returns 0 at EOF. */
static int pump(stream *s, tail *t, int rank, int prefix)
{
    ssize_t r = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (r <= 0) {
        if (s->len) deliver(s, t, rank, prefix, s->buf, s->len);
        s->len = 0;
        flush_stream(s);
        if (s->log) fclose(s->log);
        s->log = NULL;
        close(s->fd);
        s->fd = -1;
        return 0;
    }
    pump_ctx c = {s, t, rank, prefix};
    s->len = run_lines(s->buf, s->len + (size_t)r, sizeof(s->buf), deliver_line, &c);
    flush_stream(s);
    return 1;
}

static void describe_status(int status, char *out, size_t len)
{
    if (WIFEXITED(status))
        snprintf(out, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, len, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(out, len, "ended with wait status %d", status);
}

static int exit_code(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

static int failed_status(int status)
{
    return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

extern char **environ;

/* ---- the job ---------------------------------------------------------------------------- */

typedef struct job {
    worker *w;
    int nw, capw;
    int prefix;
    char **argv;
    char store[320], id[80], base_id[64];
    int np;              /* ranks of a plain job; initial workers of an elastic one */
    int attempt;         /* a plain job's run: 0, then 1.. after each --max-restarts restart */
    int master_port;     /* MASTER_PORT for the ranks' own use (torch.distributed); 0: the user's */
    int verbose;         /* --verbose: say what is started and how */
    const char *log_dir; /* --log-dir: per-rank files of what the ranks print */
    int tee, redirects;  /* --tee, --redirects: 1 stdout, 2 stderr, 3 both */
    double started;      /* when the first run started (--timeout covers every run) */
    /* elastic */
    int elastic, min_np, max_np, max_restarts, restarts, unreplaced;
    /* the failure seen last (a failure of a replacement that matches it repeats) */
    int last_fail_wid, last_fail_status, repeating;
    char last_fail_line[200];
    const char *discovery;
    double discovery_every, discovery_last;
    int desired; /* workers wanted (np, or the discovery script's local slots) */
    chorus_store *kv;
    long formed, forming; /* generation published last; generation being formed (0: none) */
    double form_start;
    int completing; /* a member finished successfully: the job is ending */
    int scale_down; /* a generation is needed to retire workers */
    double timeout_s;
    int status_fd; /* while spawning: the child's end of its status pipe (-1: none) */
    /* across hosts (-H, --hostfile): where each rank runs, and how remote ones are started */
    run_hosts hosts;   /* n == 0: this host only */
    int remote;        /* some host is not this machine */
    const char *rsh;   /* --rsh: the remote shell command */
    char rsh_buf[512]; /* the default ssh command with -p / --ssh-identity-file */
    char self[4096];   /* this program's path, which the agents run on the other hosts */
    char cwd[4096];    /* where the ranks run on every host */
    /* CPU binding: rank slot i runs on cpus[i*per .. (i+1)*per) */
    int bind, ncpus, per;
    int cpus[CPU_SETSIZE];
    /* one node of several (--nnodes N): this launcher starts ranks base..base+np-1 of a world
     * of nnodes*np; node 0's launcher serves the store at master_addr:store_port */
    int nnodes, node_rank, base, store_port;
    char master_addr[256];
} job;

/* Loopback TCP and shared memory wake the receiver on the sender's CPU, so two ranks that
 * float can end up taking turns on one core while the other idles; pinned ranks cannot.
 * Pins the calling (child) process to the block of slot i. */
static void bind_slot(const job *j, int slot)
{
    if (!j->bind || j->per < 1) return;
    int blocks = j->ncpus / j->per;
    if (blocks < 1) return;
    int b = slot % blocks;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int k = 0; k < j->per; k++) CPU_SET(j->cpus[b * j->per + k], &set);
    sched_setaffinity(0, sizeof(set), &set); /* best effort: a failure leaves it floating */
}

static void plan_binding(job *j, int requested)
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

static void signal_all(job *j, int sig)
{
    for (int i = 0; i < j->nw; i++)
        if (j->w[i].running && j->w[i].agent_in >= 0 && sig != SIGKILL) {
            /* A remote rank: its agent forwards the signal. Signalling the remote shell here
             * would only cut the connection (ssh does not pass signals on). */
            run_agent_signal(j->w[i].agent_in, sig);
        } else if (j->w[i].running) {
            /* Each rank leads its own process group: signal the whole group, so that a
             * rank started through a shell script does not leave its children running (and
             * holding the output pipes open). */
            if (kill(-j->w[i].pid, sig)) kill(j->w[i].pid, sig);
            if (sig == SIGTERM && j->w[i].stopped) kill(-j->w[i].pid, SIGCONT);
        }
}

static void close_pair(int p[2])
{
    if (p[0] >= 0) close(p[0]);
    if (p[1] >= 0) close(p[1]);
}

static void free_env(char **envp)
{
    for (char **e = envp; *e; e++) free(*e);
    free(envp);
}

static int count_alive(const job *j);
static int pick_host(job *j);

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
static char **child_env(const job *j, int rank, int size, int wid)
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
        if (j->master_port) { /* else the user's MASTER_PORT (and MASTER_ADDR) */
            PUT("MASTER_ADDR=%s", master);
            PUT("MASTER_PORT=%d", j->master_port);
        } else if (!chorus__env("MASTER_ADDR")) {
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

/* --log-dir: opens DIR/attempt_<n>/<worker>/<name>.log for a stream of worker wid. */
static FILE *open_log(const job *j, int wid, const char *name)
{
    char dir[4096], path[4160];
    snprintf(dir, sizeof(dir), "%s/attempt_%d/%d", j->log_dir, j->attempt, wid);
    snprintf(path, sizeof(path), "%s/%s.log", dir, name);
    FILE *f = chorus__mkdir_p(dir) ? NULL : fopen(path, "we");
    if (!f) fprintf(stderr, "chorus-run: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

/* With --log-dir, where the streams of worker w go: a file each (streams named by
 * --redirects only there, those named by --tee there and on the console). A file that cannot
 * be written leaves its stream on the console, after a line saying so. */
static void route_streams(const job *j, worker *w)
{
    static const char *const names[2] = {"stdout", "stderr"};
    for (int s = 0; s < 2 && j->log_dir; s++) {
        int bit = 1 << s;
        if (!((j->redirects | j->tee) & bit)) continue;
        w->s[s].log = open_log(j, w->wid, names[s]);
        if (w->s[s].log && (j->redirects & bit) && !(j->tee & bit)) w->s[s].out = NULL;
    }
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

/* Starts the agent of a remote rank through the remote shell and sends it the job (the
 * rank's variables, the secret among them, go on its stdin). The child's end of the
 * streams is out[1] and errp[1]. Returns the pid, or -1. */
static pid_t spawn_agent(job *j, int h, int rank, int wid, char **envp, int out1, int err1,
                         int *agent_in)
{
    char label[32];
    snprintf(label, sizeof(label), "%d", j->elastic ? wid : rank);
    char **rsh = run_rsh_argv(j->rsh, j->hosts.h[h].name, j->self, label);
    char **fwd = calloc(N_LAUNCHER_VARS + 4096, sizeof(char *));
    int in[2];
    if (!rsh || !fwd || pipe2(in, O_CLOEXEC)) {
        free(rsh);
        free(fwd);
        return -1;
    }
    for (size_t i = 0, k = 0; envp[i] && k < N_LAUNCHER_VARS + 4095; i++)
        if (forwarded(envp[i])) fwd[k++] = envp[i];
    char execfail[600];
    snprintf(execfail, sizeof(execfail),
             "chorus-run: cannot run the remote shell '%s' for host %s (exec failed)\n", rsh[0],
             j->hosts.h[h].name);
    pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* The remote shell ends with the launcher; SIGTERM rather than SIGKILL, so that an
         * agent run in its place (ip netns exec execs it) can stop its rank's whole process
         * group before it goes. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != launcher) _exit(128 + SIGTERM);
        dup2(in[0], 0);
        dup2(out1, 1);
        dup2(err1, 2);
        setpgid(0, 0);
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp(rsh[0], rsh);
        if (write(2, execfail, strlen(execfail)) < 0) { /* nothing more to do */
        }
        _exit(127);
    }
    close(in[0]);
    if (pid > 0) {
        setpgid(pid, pid);
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

static worker *spawn(job *j, int rank, int size)
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
        close(out[0]);
        close(out[1]);
        close(errp[0]);
        close(errp[1]);
        close_pair(stp);
        return NULL;
    }
    char execfail[300];
    snprintf(execfail, sizeof(execfail), "chorus-run: cannot run '%s' (exec failed)\n", j->argv[0]);
    fflush(stdout);
    fflush(stderr);
    int agent_in = -1;
    pid_t launcher = getpid();
    pid_t pid = remote ? spawn_agent(j, h, rank, wid, envp, out[1], errp[1], &agent_in) : fork();
    if (pid < 0) {
        free_env(envp);
        close(out[0]);
        close(out[1]);
        close(errp[0]);
        close(errp[1]);
        close_pair(stp);
        return NULL;
    }
    if (pid == 0) {
        /* A rank must not outlive its launcher (killed with SIGKILL, it cannot stop the job):
         * the kernel kills the rank when the launcher dies. If it died before this line, the
         * rank has already been handed to another parent: stop now. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != launcher) _exit(128 + SIGKILL);
        dup2(out[1], 1);
        dup2(errp[1], 2);
        if (stp[1] >= 0) fcntl(stp[1], F_SETFD, 0); /* kept across exec: CHORUS_STATUS_FD */
        setpgid(0, 0); /* terminal signals reach the launcher, which forwards them */
        bind_slot(j, h >= 0 && !j->elastic ? rank - j->hosts.h[h].first_rank
                     : rank >= 0           ? rank
                                           : wid);
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvpe(j->argv[0], j->argv, envp);
        if (write(2, execfail, strlen(execfail)) < 0) { /* nothing more to do */
        }
        _exit(127);
    }
    free_env(envp);
    setpgid(pid, pid); /* also here: the child may not have run yet when we signal it */
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
    return w;
}

/* A worker whose process has ended is not left, even before the event loop reaps it (workers
 * that end together are reaped one at a time): waitid with WNOWAIT looks without reaping. */
static int has_ended(const worker *w)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           si.si_pid == w->pid;
}

static int count_alive(const job *j)
{
    int n = 0;
    for (int i = 0; i < j->nw; i++) n += j->w[i].running && !j->w[i].leaving;
    return n;
}

/* The workers still running at this instant (count_alive counts those not yet reaped). */
static int count_left(const job *j)
{
    int n = 0;
    for (int i = 0; i < j->nw; i++)
        n += j->w[i].running && !j->w[i].leaving && !has_ended(&j->w[i]);
    return n;
}

/* ---- host discovery --------------------------------------------------------------------- */

/* Runs the discovery script and merges the hosts it names ("host:slots" lines) into j->hosts:
 * a host keeps its index, a host no longer named keeps it with 0 slots (its workers are
 * retired). Returns the slots of the hosts the job can use (all, or with a store on loopback
 * this machine's), or -1 when the script failed. */
static int discover(job *j)
{
    FILE *p = popen(j->discovery, "r");
    if (!p) {
        fprintf(stderr, "chorus-run: cannot run the host discovery script %s: %s\n", j->discovery,
                strerror(errno));
        return -1;
    }
    run_hosts found = {0};
    char line[512], err[512];
    while (fgets(line, sizeof(line), p)) {
        char *h = line + strspn(line, " \t");
        h[strcspn(h, "\r\n \t")] = 0;
        if (*h && *h != '#' && run_hosts_add(&found, h, err, sizeof(err)))
            fprintf(stderr, "chorus-run: host discovery: %s; ignoring that line\n", err);
    }
    int st = pclose(p);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "chorus-run: host discovery script %s failed; keeping %s\n", j->discovery,
                "the current workers");
        run_hosts_free(&found);
        return -1;
    }
    for (int i = 0; i < j->hosts.n; i++) j->hosts.h[i].slots = 0;
    for (int f = 0; f < found.n; f++) {
        int i = 0;
        while (i < j->hosts.n && strcmp(j->hosts.h[i].name, found.h[f].name)) i++;
        if (i == j->hosts.n) {
            char spec[300];
            snprintf(spec, sizeof(spec), "%s:0", found.h[f].name);
            if (run_hosts_add(&j->hosts, spec, err, sizeof(err))) continue;
            j->hosts.h[i].local = run_host_is_local(found.h[f].name);
        }
        j->hosts.h[i].slots = found.h[f].slots;
    }
    run_hosts_free(&found);
    int slots = 0;
    for (int i = 0; i < j->hosts.n; i++)
        if (j->remote || j->hosts.h[i].local) slots += j->hosts.h[i].slots;
    return slots;
}

/* The workers running on host h that are not leaving. */
static int workers_on(const job *j, int h)
{
    int n = 0;
    for (int i = 0; i < j->nw; i++) n += j->w[i].running && !j->w[i].leaving && j->w[i].host == h;
    return n;
}

/* Has some host more workers than its slots (it lost slots in discovery)? */
static int over_slots(const job *j)
{
    for (int i = 0; i < j->hosts.n; i++)
        if (workers_on(j, i) > j->hosts.h[i].slots) return 1;
    return 0;
}

/* Where the next elastic worker starts: the first host with a free slot (-1: this machine,
 * without a discovery script). A job whose store listens on loopback (every host was this
 * machine when it started) cannot use other hosts, which is said once. */
static int pick_host(job *j)
{
    static int warned;
    for (int i = 0; i < j->hosts.n; i++) {
        if (!j->remote && !j->hosts.h[i].local) {
            if (!warned++)
                fprintf(stderr,
                        "chorus-run: host discovery names '%s', which is not this machine, but "
                        "the job started on this machine's hosts only (its store listens on "
                        "loopback); ignoring it\n",
                        j->hosts.h[i].name);
            continue;
        }
        if (workers_on(j, i) < j->hosts.h[i].slots) return i;
    }
    for (int i = 0; i < j->hosts.n; i++)
        if (j->hosts.h[i].local) return i;
    return -1;
}

/* ---- elastic membership ----------------------------------------------------------------- */

static void kv_set(job *j, const char *key, const char *val)
{
    chorus_errbuf e;
    if (chorus__store_set(j->kv, key, val, strlen(val), &e) != CHORUS_OK)
        fprintf(stderr, "chorus-run: elastic: store: %s\n", e.msg);
}

static worker *by_wid(job *j, int wid)
{
    return wid >= 0 && wid < j->nw ? &j->w[wid] : NULL;
}

static void kill_worker(job *j, worker *w, const char *why)
{
    fprintf(stderr, "chorus-run: elastic: worker %d (pid %d%s) %s; removing it\n", w->wid,
            (int)w->pid, w->rank >= 0 ? ", a rank of the last generation" : "", why);
    (void)j;
    w->killed = 1;
    kill(w->pid, SIGKILL);
}

/* A member of generation gen died: if the others are still forming it, they wait for its
 * rendezvous record until CHORUS_TIMEOUT_S. A record that does not parse makes them give up
 * at once and check in for the next generation instead. */
static void poison(job *j, long gen, int rank)
{
    char ns[96], key[32];
    chorus_store *s = NULL;
    chorus_errbuf e;
    chorus_el_gen_job(ns, sizeof(ns), j->id, gen);
    chorus_el_key_rank(key, sizeof(key), rank);
    if (chorus__store_connect(j->store, ns, chorus__now() + 5, &s, &e) != CHORUS_OK) return;
    char *v = NULL;
    int found = 0;
    if (chorus__store_check(s, key, &v, NULL, &found, &e) == CHORUS_OK && !found)
        chorus__store_set(s, key, CHORUS_EL_RANK_LOST, strlen(CHORUS_EL_RANK_LOST), &e);
    free(v);
    chorus__store_close(s);
}

static void start_forming(job *j, long gen)
{
    char v[32];
    j->forming = gen;
    j->form_start = chorus__now();
    snprintf(v, sizeof(v), "%ld", gen);
    kv_set(j, CHORUS_EL_NEXT, v);
}

static void publish(job *j, long gen)
{
    char *val = malloc(32 + (size_t)j->nw * 12);
    if (!val) return;
    int n = 0, o = 0;
    int *order = malloc(sizeof(int) * (size_t)(j->nw + 1));
    /* members of the last generation keep their order (rank 0 stays rank 0 when it lives),
     * newcomers follow by worker id */
    for (int r = 0; order && r < j->nw; r++)
        for (int i = 0; i < j->nw; i++) {
            worker *w = &j->w[i];
            if (w->running && !w->leaving && w->checked == gen && w->rank == r) order[n++] = i;
        }
    for (int i = 0; order && i < j->nw; i++) {
        worker *w = &j->w[i];
        if (w->running && !w->leaving && w->checked == gen && w->rank < 0) order[n++] = i;
    }
    for (int i = 0; i < j->nw; i++) j->w[i].rank = -1;
    o = sprintf(val, "%ld %d", gen, n);
    int list = o;
    for (int k = 0; order && k < n; k++) {
        j->w[order[k]].rank = k;
        o += sprintf(val + o, " %d", j->w[order[k]].wid);
    }
    char key[64];
    chorus_el_key_round(key, sizeof(key), gen);
    kv_set(j, key, val);
    fprintf(stderr, "chorus-run: elastic: generation %ld has %d rank%s (workers%s)\n", gen, n,
            n == 1 ? "" : "s", val + list);
    j->formed = gen;
    j->forming = 0;
    j->scale_down = 0;
    free(order);
    free(val);
}

/* May another replacement start? Not when --max-restarts are used up, nor when a replacement
 * failed just as the worker before it did: its successor would fail there too. */
static int may_replace(const job *j)
{
    return j->restarts < j->max_restarts && !j->repeating;
}

/* Pumps what the pipes of an ended worker still hold, so that its last line is known. */
static void drain_worker(job *j, worker *w)
{
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 64 && w->s[s].fd >= 0; i++) {
            struct pollfd p = {.fd = w->s[s].fd, .events = POLLIN};
            if (poll(&p, 1, 0) <= 0) break;
            pump(&w->s[s], &w->tail, w->wid, j->prefix);
        }
}

/* Did the program fail on its own (an exit status, a crash), rather than being killed or
 * stopped from outside? Only such a failure can repeat. */
static int own_failure(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status) != 0;
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return sig && sig != SIGKILL && sig != SIGTERM && sig != SIGINT && sig != SIGHUP;
}

/* Says how elastic worker w failed and what happens next. A replacement that fails as the
 * failure before it did (the same status and the same last line on stderr) stops further
 * replacements: the next one would fail at the same point again. */
static void elastic_failed(job *j, worker *w, int status, const char *how)
{
    drain_worker(j, w);
    const char *line = w->s[1].last;
    int same = own_failure(status) && j->last_fail_wid >= 0 && status == j->last_fail_status &&
               !strcmp(line, j->last_fail_line);
    int prev = j->last_fail_wid;
    if (own_failure(status)) {
        j->last_fail_wid = w->wid;
        j->last_fail_status = status;
        snprintf(j->last_fail_line, sizeof(j->last_fail_line), "%s", line);
    }
    int repeats = same && w->replacement && !j->repeating;
    if (repeats) j->repeating = 1;
    int alive = count_left(j);
    fprintf(stderr, "chorus-run: worker %d (pid %d%s) %s", w->wid, (int)w->pid,
            w->rank >= 0 ? ", a rank of the last generation" : "", how);
    if (alive > 0)
        fprintf(stderr, "; %d worker%s left (elastic: the job goes on)", alive,
                alive == 1 ? "" : "s");
    else if (may_replace(j))
        fprintf(stderr, "; no worker is left: replacing the failed ones");
    fprintf(stderr, "\n");
    if (repeats)
        fprintf(stderr,
                "chorus-run: elastic: replacement worker %d failed as worker %d did (%s%s%s%s); "
                "the failure repeats, so no more replacements are started\n",
                w->wid, prev, how, *line ? ", last line '" : "", line, *line ? "'" : "");
}

/* Returns 0, or the exit status with which the job must stop (too few workers left). */
static int elastic_tick(job *j)
{
    double now = chorus__now();
    if (j->completing) {
        if (j->forming) { /* nobody will finish this generation: let its waiters go */
            char key[64];
            chorus_el_key_round(key, sizeof(key), j->forming);
            kv_set(j, key, CHORUS_EL_ROUND_DONE);
            j->forming = 0;
        }
        for (int i = 0; i < j->nw; i++) {
            worker *w = &j->w[i];
            if (w->running && w->rank < 0 && !w->leaving) {
                w->leaving = 1; /* joined too late: the job is over */
                kill(w->pid, SIGTERM);
            }
        }
        return 0;
    }
    /* 1. the number of workers: discovery, replacements, retirement */
    if (j->discovery && now - j->discovery_last >= j->discovery_every) {
        j->discovery_last = now;
        int slots = discover(j);
        if (slots >= 0) {
            int d = slots < j->max_np ? slots : j->max_np;
            if (d != j->desired)
                fprintf(stderr,
                        "chorus-run: elastic: host discovery: %d slot%s, %d worker%s "
                        "wanted (was %d)\n",
                        slots, slots == 1 ? "" : "s", d, d == 1 ? "" : "s", j->desired);
            j->desired = d;
        }
    }
    int alive = count_alive(j);
    while (alive < j->desired && alive < j->max_np) {
        int replacing = j->unreplaced > 0;
        if (replacing && !may_replace(j)) break;
        worker *w = spawn(j, -1, 0);
        if (!w) {
            fprintf(stderr, "chorus-run: elastic: cannot start a worker: %s\n", strerror(errno));
            break;
        }
        if (replacing) {
            j->unreplaced--;
            j->restarts++;
            w->replacement = 1;
        }
        fprintf(stderr,
                "chorus-run: elastic: started worker %d (pid %d%s%s)%s; it joins at the next "
                "commit\n",
                w->wid, (int)w->pid, w->host >= 0 ? " on host " : "",
                w->host >= 0 ? j->hosts.h[w->host].name : "",
                replacing ? " to replace a failed one" : "");
        alive++;
    }
    if ((alive > j->desired || over_slots(j)) && !j->forming) {
        /* retire at the next commit the newest workers of hosts that lost slots, then the
         * newest of any host */
        int extra = alive - j->desired;
        for (int pass = 0; pass < 2; pass++)
            for (int i = j->nw - 1; i >= 0; i--) {
                worker *w = &j->w[i];
                if (!w->running || w->leaving) continue;
                int over = w->host >= 0 && workers_on(j, w->host) > j->hosts.h[w->host].slots;
                if (pass == 0 ? !over : extra <= 0) continue;
                char key[64];
                chorus_el_key_out(key, sizeof(key), w->wid);
                kv_set(j, key, "scaled down by host discovery");
                w->leaving = 1;
                extra--;
                fprintf(stderr, "chorus-run: elastic: retiring worker %d at the next commit\n",
                        w->wid);
            }
        j->scale_down = 1;
    }
    /* 2. check-ins for the next generation */
    long gen = j->forming ? j->forming : j->formed + 1;
    int any = 0;
    for (int i = 0; i < j->nw; i++) {
        worker *w = &j->w[i];
        if (!w->running || w->checked >= gen) continue;
        char key[64], *v = NULL;
        int found = 0;
        chorus_errbuf e;
        chorus_el_key_in(key, sizeof(key), gen, w->wid);
        if (chorus__store_check(j->kv, key, &v, NULL, &found, &e) != CHORUS_OK) {
            fprintf(stderr, "chorus-run: elastic: store: %s\n", e.msg);
            continue;
        }
        if (!found) continue;
        w->checked = gen;
        any = 1;
        int suspect = atoi(v);
        free(v);
        worker *s = by_wid(j, suspect);
        if (s && s != w && s->running && s->checked < gen && !s->suspect_since) {
            s->suspect_since = now;
            fprintf(stderr, "chorus-run: elastic: worker %d reports worker %d lost\n", w->wid,
                    s->wid);
        }
    }
    if (!j->forming && (any || j->scale_down)) start_forming(j, gen);
    if (!j->forming) return 0;
    /* 3. form it: everyone alive checks in; the unresponsive are removed */
    int in = 0, pending = 0;
    for (int i = 0; i < j->nw; i++) {
        worker *w = &j->w[i];
        if (!w->running || w->killed) continue;
        if (w->checked == gen) {
            in += !w->leaving;
            continue;
        }
        if (w->stopped)
            kill_worker(j, w, "is stopped (SIGSTOP?) and cannot rejoin");
        else if (w->suspect_since && now - w->suspect_since > SUSPECT_GRACE_S)
            kill_worker(j, w, "was reported lost by its peers and did not check in");
        else if (now - j->form_start > j->timeout_s)
            kill_worker(j, w, "did not check in for the new generation (CHORUS_TIMEOUT_S)");
        else
            pending++;
    }
    if (pending) return 0;
    if (in >= j->min_np && in > 0) {
        publish(j, gen);
        return 0;
    }
    int can_start = j->unreplaced > 0 && may_replace(j) && count_alive(j) < j->max_np;
    if (can_start) return 0; /* a replacement will be started and check in */
    fprintf(stderr,
            "chorus-run: elastic: only %d worker%s left, fewer than --min-np %d; stopping the "
            "job\n",
            in, in == 1 ? "" : "s", j->min_np);
    return 1;
}

/* ---- main ------------------------------------------------------------------------------- */

static int parse_int_arg(const char *opt, const char *v, int lo, int hi, int *out)
{
    long x;
    if (chorus__parse_int(v, lo, hi, &x)) {
        fprintf(stderr, "chorus-run: %s needs a number from %d to %d, not '%s'\n", opt, lo, hi, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* A number of seconds, >= 0. */
static int parse_seconds(const char *opt, const char *v, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= 0) || x > 1e9) {
        fprintf(stderr, "chorus-run: %s needs a number of seconds (0 or more), not '%s'\n", opt, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* A file the launcher itself reads, checked before anything starts: a typo is one line, not
 * a job that fails later or runs without it. */
static int check_readable(const char *opt, const char *path)
{
    struct stat st;
    if (stat(path, &st)) {
        fprintf(stderr, "chorus-run: %s %s: %s\n", opt, path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode) || access(path, R_OK)) {
        fprintf(stderr, "chorus-run: %s %s: %s\n", opt, path,
                S_ISDIR(st.st_mode) ? "is a directory, not a file" : "cannot be read");
        return -1;
    }
    return 0;
}

/* A per-job secret of 32 random bytes in hex, unless the user gave one. */
static int make_secret(void)
{
    if (chorus__env("CHORUS_SECRET")) return 0;
    unsigned char rnd[32];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd)) {
        fprintf(stderr, "chorus-run: cannot read /dev/urandom for the job secret: %s\n",
                strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    char hex[65];
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    setenv("CHORUS_SECRET", hex, 1);
    return 0;
}

/* ---- main, in steps ---------------------------------------------------------------------- */

/* What the command line asked for beyond the job itself. */
typedef struct run_opts {
    double timeout; /* --timeout: whole-job limit in seconds (0: none) */
    double grace;   /* --grace: seconds the others get to report a failed rank */
    int bind_req;   /* --bind-to: 1 core, 0 none, -1 not given */
    int max_np_set;
    int no_python; /* --no-python: a program named *.py is run as it is, not with Python */
    int prog;      /* index in argv of the program to run */
} run_opts;

/* Flags of horovodrun and torchrun that are a variable of every rank: the launcher sets it
 * in its own environment, where it is checked with the rest of the configuration, and the
 * ranks inherit it. suffix is appended to the value (megabytes for the fusion threshold). */
static const struct {
    const char *flag, *var, *suffix;
} env_flags[] = {
    {"--timeline-filename", "CHORUS_TIMELINE", ""}, /* first: check_timeline */
    {"--network-interface", "CHORUS_IFACE", ""},
    {"--network-interfaces", "CHORUS_IFACE", ""},
    {"--start-timeout", "CHORUS_START_TIMEOUT_S", ""},
    {"--fusion-threshold-mb", "CHORUS_FUSION_THRESHOLD", "M"},
    {"--cycle-time-ms", "CHORUS_CYCLE_TIME_MS", ""},
    {"--cache-capacity", "CHORUS_CACHE_CAPACITY", ""},
    {"--stall-check-warning-time-seconds", "CHORUS_STALL_WARN_S", ""},
    {"--stall-check-shutdown-time-seconds", "CHORUS_STALL_SHUTDOWN_S", ""},
    {"--autotune-warmup-samples", "CHORUS_AUTOTUNE_WARMUP", ""},
    {"--autotune-steps-per-sample", "CHORUS_AUTOTUNE_STEPS", ""},
    {"--master-port", "MASTER_PORT", ""},
    {"--servers", "CHORUS_PS_SERVERS", ""}, /* last: check_servers */
};

#define ACROSS_HOSTS                                                                               \
    "launch across hosts with -H host:slots,... or --hostfile FILE (or with mpirun or srun; "      \
    "see docs/LAUNCHER.md)"
#define MULTI_HOST "chorus-run has no rendezvous service of torchrun's kind; " ACROSS_HOSTS
#define AUTOTUNE_LOG                                                                               \
    "Chorus's autotuner (--autotune) has rank 0 log every candidate with its step time, and its "  \
    "choice, on stderr; keep them with --log-dir DIR"
#define AUTOTUNE_FIXED                                                                             \
    "Chorus's autotuner (--autotune) measures a fixed list of candidates, each over "              \
    "--autotune-steps-per-sample steps, rather than sampling a Bayesian model; drop the flag"

/* Flags of other launchers that do not map onto chorus-run, and what to use instead. */
static const struct {
    const char *flag, *instead;
} refused_flags[] = {
    {"--rdzv-backend", MULTI_HOST},
    {"--rdzv-endpoint", MULTI_HOST},
    {"--rdzv-id", MULTI_HOST},
    {"--rdzv-conf", MULTI_HOST},
    {"--autotune-log-file", AUTOTUNE_LOG},
    {"--autotune-bayes-opt-max-samples", AUTOTUNE_FIXED},
    {"--autotune-gaussian-process-noise", AUTOTUNE_FIXED},
    {"--gloo", "Chorus always runs over its own TCP and shared-memory transports; drop the flag"},
    {"--mpi", "to run under Open MPI, start the program with mpirun itself (Chorus reads "
              "OMPI_COMM_WORLD_*)"},
    {"--mpi-args", "to run under Open MPI, start the program with mpirun itself (Chorus reads "
                   "OMPI_COMM_WORLD_*)"},
    {"--hierarchical-allreduce",
     "Chorus picks the algorithm by size and topology; force one with -x "
     "CHORUS_ALGO_ALLREDUCE=name (chorus-run --help-env)"},
    {"--hierarchical-allgather",
     "Chorus picks the algorithm by size and topology; force one with -x "
     "CHORUS_ALGO_ALLGATHER=name (chorus-run --help-env)"},
    {"--output-filename", "use --log-dir DIR (a directory per rank), with --tee 3 to also "
                          "see the output here"},
    {"-m", "name the interpreter: chorus-run -np N python3 -m MODULE"},
    {"--module", "name the interpreter: chorus-run -np N python3 -m MODULE"},
    {"--mca", "Chorus's settings are CHORUS_* variables (chorus-run --help-env); pass them "
              "with -x VAR=value"},
    {"--map-by", "use --bind-to core|none"},
    {"--rank-by", "use --bind-to core|none"},
};

/* Options that take a value (besides those of env_flags). */
static const char *const value_opts[] = {"-np",
                                         "-n",
                                         "--np",
                                         "--timeout",
                                         "--bind-to",
                                         "--grace",
                                         "--min-np",
                                         "--max-np",
                                         "--max-restarts",
                                         "--host-discovery-script",
                                         "--discovery-interval",
                                         "-x",
                                         "--nproc-per-node",
                                         "--nnodes",
                                         "--node-rank",
                                         "--master-addr",
                                         "--log-dir",
                                         "--tee",
                                         "--redirects",
                                         "-H",
                                         "--host",
                                         "--hosts",
                                         "--hostfile",
                                         "--machinefile",
                                         "--rsh",
                                         "-p",
                                         "--ssh-port",
                                         "--ssh-identity-file"};

static int takes_value(const char *name)
{
    for (size_t i = 0; i < sizeof(value_opts) / sizeof(value_opts[0]); i++)
        if (!strcmp(name, value_opts[i])) return 1;
    for (size_t i = 0; i < sizeof(env_flags) / sizeof(env_flags[0]); i++)
        if (!strcmp(name, env_flags[i].flag)) return 1;
    return 0;
}

/* The option's name as matched: "--name=value" loses its value (returned in *inline_v) and
 * torchrun's underscores ("--nproc_per_node") become dashes. */
static void option_name(const char *a, char *name, size_t len, const char **inline_v)
{
    *inline_v = NULL;
    snprintf(name, len, "%s", a);
    if (strncmp(a, "--", 2)) return;
    char *eq = strchr(name, '=');
    if (eq) {
        *eq = 0;
        *inline_v = a + (eq - name) + 1;
    }
    for (char *c = name + 2; *c; c++)
        if (*c == '_') *c = '-';
}

/* --tee and --redirects: 0 none, 1 stdout, 2 stderr, 3 both (torchrun's values). */
static int parse_streams(const char *opt, const char *v, int *out)
{
    if (strlen(v) != 1 || v[0] < '0' || v[0] > '3') {
        fprintf(stderr,
                "chorus-run: %s takes 0 (none), 1 (stdout), 2 (stderr) or 3 (both), not '%s'\n",
                opt, v);
        return -1;
    }
    *out = v[0] - '0';
    return 0;
}

/* -x VAR=value sets VAR for the launcher and every rank; -x VAR passes VAR on as it is here
 * (the ranks here inherit the environment anyway; remote ranks get what -x names) and warns
 * when it is not set. */
static int export_var(const char *v)
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

static int env_flag_used[sizeof(env_flags) / sizeof(env_flags[0])];

/* Sets the variable of an env_flags row from its flag's value. */
static int apply_env_flag(size_t row, const char *v)
{
    if (!strcmp(env_flags[row].var, "CHORUS_IFACE") && strchr(v, ',')) {
        fprintf(stderr,
                "chorus-run: %s %s: Chorus listens on one interface (or IPv4 address); give "
                "one\n",
                env_flags[row].flag, v);
        return -1;
    }
    char val[512];
    snprintf(val, sizeof(val), "%s%s", v, env_flags[row].suffix);
    env_flag_used[row] = 1;
    return setenv(env_flags[row].var, val, 1);
}

/* The flag that set the variable an invalid-environment message names ("" when none did),
 * so that the message points at what the user typed. */
static const char *env_flag_behind(const char *msg)
{
    for (size_t i = 0; i < sizeof(env_flags) / sizeof(env_flags[0]); i++) {
        size_t n = strlen(env_flags[i].var);
        if (env_flag_used[i] && !strncmp(msg, env_flags[i].var, n) && msg[n] == '=')
            return env_flags[i].flag;
    }
    return "";
}

/* torchrun's --nnodes: N or N:N (MIN:MAX nodes; a range is an elastic job of torchrun's
 * rendezvous, which chorus-run has not). */
static int check_nnodes(const char *v, job *j)
{
    const char *colon = strchr(v, ':');
    char first[32];
    snprintf(first, sizeof(first), "%.*s", colon ? (int)(colon - v) : (int)strlen(v), v);
    long n;
    if (chorus__parse_int(first, 1, 4096, &n) || (colon && strcmp(colon + 1, first))) {
        fprintf(stderr,
                "chorus-run: --nnodes %s: a number of nodes from 1 to 4096 (N, or N:N); nodes "
                "joining and leaving need torchrun's rendezvous, which chorus-run has not: use "
                "--elastic on one node, or %s\n",
                v, ACROSS_HOSTS);
        return -1;
    }
    j->nnodes = (int)n;
    return 0;
}

/* Applies one option (name normalised by option_name, v its value or NULL). Returns -1 to go
 * on, else the exit code (help printed, or a bad option explained on stderr). */
static int apply_option(const char *a, const char *v, job *j, run_opts *o)
{
    if (!strcmp(a, "-np") || !strcmp(a, "-n") || !strcmp(a, "--np") ||
        !strcmp(a, "--nproc-per-node")) {
        long np;
        if (chorus__parse_int(v, 1, 4096, &np)) {
            fprintf(stderr, "chorus-run: %s needs a number of ranks from 1 to 4096, not '%s'\n", a,
                    v);
            return 2;
        }
        j->np = (int)np;
    } else if (!strcmp(a, "--no-prefix")) {
        j->prefix = 0;
    } else if (!strcmp(a, "--tag-output")) {
        j->prefix = 1; /* Open MPI's: each line says which rank printed it */
    } else if (!strcmp(a, "--standalone") || !strcmp(a, "--timeline-mark-cycles")) {
        /* torchrun's: one node with its own rendezvous. Horovod's: mark each negotiation cycle
         * in the timeline. Both are what Chorus always does. */
    } else if (!strcmp(a, "--no-python")) {
        o->no_python = 1;
    } else if (!strcmp(a, "--autotune")) {
        setenv("CHORUS_AUTOTUNE", "1", 1); /* horovodrun's: HOROVOD_AUTOTUNE=1 */
    } else if (!strcmp(a, "--verbose")) {
        j->verbose = 1;
        setenv("CHORUS_DEBUG", "INFO", 0);
    } else if (!strcmp(a, "-x")) {
        if (export_var(v)) return 2;
    } else if (!strcmp(a, "--nnodes")) {
        if (check_nnodes(v, j)) return 2;
    } else if (!strcmp(a, "--node-rank")) {
        if (parse_int_arg(a, v, 0, 4095, &j->node_rank)) return 2;
    } else if (!strcmp(a, "--master-addr")) {
        snprintf(j->master_addr, sizeof(j->master_addr), "%s", v);
    } else if (!strcmp(a, "-H") || !strcmp(a, "--host") || !strcmp(a, "--hosts")) {
        char err[512];
        if (run_hosts_parse_list(&j->hosts, v, err, sizeof(err))) {
            fprintf(stderr, "chorus-run: %s %s: %s (hosts are name or name:slots, by commas)\n", a,
                    v, err);
            return 2;
        }
    } else if (!strcmp(a, "--hostfile") || !strcmp(a, "--machinefile")) {
        char err[1024];
        if (run_hosts_parse_file(&j->hosts, v, err, sizeof(err))) {
            fprintf(stderr, "chorus-run: %s: %s\n", a, err);
            return 2;
        }
    } else if (!strcmp(a, "--rsh")) {
        j->rsh = v;
    } else if (!strcmp(a, "-p") || !strcmp(a, "--ssh-port") || !strcmp(a, "--ssh-identity-file")) {
        int port;
        if (strcmp(a, "--ssh-identity-file") ? parse_int_arg(a, v, 1, 65535, &port)
                                             : check_readable(a, v))
            return 2;
        size_t n = strlen(j->rsh_buf);
        if (!n) n = (size_t)snprintf(j->rsh_buf, sizeof(j->rsh_buf), "ssh -o BatchMode=yes");
        snprintf(j->rsh_buf + n, sizeof(j->rsh_buf) - n, " %s %s",
                 strcmp(a, "--ssh-identity-file") ? "-p" : "-i", v);
    } else if (!strcmp(a, "--log-dir")) {
        j->log_dir = v;
    } else if (!strcmp(a, "--tee")) {
        if (parse_streams(a, v, &j->tee)) return 2;
    } else if (!strcmp(a, "--redirects")) {
        if (parse_streams(a, v, &j->redirects)) return 2;
    } else if (!strcmp(a, "--timeout")) {
        if (parse_seconds(a, v, &o->timeout)) return 2;
    } else if (!strcmp(a, "--bind-to")) {
        if (!strcmp(v, "core"))
            o->bind_req = 1;
        else if (!strcmp(v, "none"))
            o->bind_req = 0;
        else {
            fprintf(stderr, "chorus-run: --bind-to takes core or none, not '%s'\n", v);
            return 2;
        }
    } else if (!strcmp(a, "--grace")) {
        if (parse_seconds(a, v, &o->grace)) return 2;
    } else if (!strcmp(a, "--elastic")) {
        j->elastic = 1;
    } else if (!strcmp(a, "--min-np")) {
        if (parse_int_arg(a, v, 1, 4096, &j->min_np)) return 2;
    } else if (!strcmp(a, "--max-np")) {
        if (parse_int_arg(a, v, 1, 4096, &j->max_np)) return 2;
        o->max_np_set = 1;
    } else if (!strcmp(a, "--max-restarts")) {
        if (parse_int_arg(a, v, 0, 1 << 20, &j->max_restarts)) return 2;
    } else if (!strcmp(a, "--host-discovery-script")) {
        char why[256]; /* a command line for sh -c; a single word must be a program */
        if (!strpbrk(v, " \t;|&<>") && !runnable(v, why, sizeof(why))) {
            fprintf(stderr, "chorus-run: %s %s: %s\n", a, v, why);
            return 2;
        }
        j->discovery = v;
    } else if (!strcmp(a, "--discovery-interval")) {
        j->discovery_every = atof(v);
        if (j->discovery_every <= 0) j->discovery_every = 5;
    } else if (!strcmp(a, "--help-env")) {
        help_env();
        return 0;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
        usage(stdout);
        return 0;
    } else {
        for (size_t i = 0; i < sizeof(env_flags) / sizeof(env_flags[0]); i++)
            if (!strcmp(a, env_flags[i].flag)) return apply_env_flag(i, v) ? 2 : -1;
        fprintf(stderr, "chorus-run: unknown option '%s' (see chorus-run --help)\n", a);
        return 2;
    }
    return -1;
}

/* MASTER_PORT, whether --master-port or the environment set it: a TCP port. */
static int check_master_port(void)
{
    const char *v = chorus__env("MASTER_PORT");
    long port;
    if (!v || !chorus__parse_int(v, 1, 65535, &port)) return 0;
    char var[600];
    snprintf(var, sizeof(var), "MASTER_PORT=%s", v);
    if (*env_flag_behind(var))
        fprintf(stderr, "chorus-run: --master-port needs a TCP port from 1 to 65535, not '%s'\n",
                v);
    else
        fprintf(stderr,
                "chorus-run: invalid environment: MASTER_PORT=%s is not a TCP port (1 to "
                "65535)\n",
                v);
    return -1;
}

/* --servers K (CHORUS_PS_SERVERS): ranks 0..K-1 serve, so at least one rank must be left to
 * work. */
static int check_servers(const job *j)
{
    const char *v = chorus__env("CHORUS_PS_SERVERS");
    long k;
    if (!v || j->np < 1) return 0; /* a malformed value is the configuration check's */
    if (chorus__parse_int(v, 1, 4096, &k) || k < j->np) return 0;
    const char *how = env_flag_used[sizeof(env_flags) / sizeof(env_flags[0]) - 1]
                          ? "--servers "
                          : "CHORUS_PS_SERVERS=";
    if (j->np == 1)
        fprintf(stderr,
                "chorus-run: %s%s with -np 1: a parameter-server job needs at least 2 ranks (ranks "
                "0..K-1 serve, the others work)\n",
                how, v);
    else
        fprintf(stderr,
                "chorus-run: %s%s with -np %d leaves no worker: ranks 0..K-1 serve and the others "
                "work; at most %d server%s with -np %d\n",
                how, v, j->np, j->np - 1, j->np > 2 ? "s" : "", j->np);
    return -1;
}

/* CHORUS_TIMELINE (--timeline-filename): rank 0 writes it, on this host when rank 0 runs here;
 * its directory must exist. */
static int check_timeline(const job *j)
{
    const char *f = chorus__env("CHORUS_TIMELINE");
    if (!f || !*f || (j->hosts.n > 0 && !j->hosts.h[0].local)) return 0;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", f);
    char *slash = strrchr(dir, '/');
    if (!slash) return 0;
    if (slash == dir)
        slash[1] = 0;
    else
        *slash = 0;
    struct stat st;
    if (!stat(dir, &st) && S_ISDIR(st.st_mode) && !access(dir, W_OK)) return 0;
    fprintf(stderr, "chorus-run: %s%s: the directory %s %s\n",
            env_flag_used[0] ? "--timeline-filename " : "CHORUS_TIMELINE=", f, dir,
            stat(dir, &st)         ? "does not exist"
            : !S_ISDIR(st.st_mode) ? "is not a directory"
                                   : "is not writable");
    return -1;
}

/* A program named *.py: torchrun runs its script with Python, and so does chorus-run. */
static int is_python_script(const char *prog)
{
    size_t n = strlen(prog);
    return n > 3 && !strcmp(prog + n - 3, ".py");
}

/* The Python that runs a *.py program: python3 beside this executable, where pip installs
 * both into an environment's bin/ (the environment's own Python, as torchrun uses the one
 * that runs it: the path is kept, not resolved, so that a venv's python3 stays the venv's),
 * else python3 from PATH, as typing `python3 train.py` would run it. */
static void python_path(char *out, size_t len)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    snprintf(out, len, "python3");
    if (n <= 0) return;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (!slash) return;
    *slash = 0;
    char beside[4200];
    snprintf(beside, sizeof(beside), "%s/python3", self);
    struct stat st;
    if (!stat(beside, &st) && S_ISREG(st.st_mode) && !access(beside, X_OK))
        snprintf(out, len, "%s", beside);
}

/* The argument vector with the Python in front (kept for the job's life, in a static). */
static char **with_python(char **argv, int argc)
{
    static char python[4200];
    static char **out;
    python_path(python, sizeof(python));
    free(out);
    out = calloc((size_t)argc + 2, sizeof(char *));
    if (!out) return NULL;
    out[0] = python;
    for (int i = 0; i < argc; i++) out[i + 1] = argv[i];
    return out;
}

/* Step 1: reads the options into j and o. Returns -1 to go on, else the exit code (help
 * printed, or a bad option explained on stderr). */
static int parse_args(int argc, char **argv, job *j, run_opts *o)
{
    int ai = 1;
    for (; ai < argc; ai++) {
        const char *a = argv[ai], *v = NULL;
        if (!strcmp(a, "--")) {
            ai++;
            break;
        }
        if (a[0] != '-') break;
        char name[64];
        option_name(a, name, sizeof(name), &v);
        for (size_t i = 0; i < sizeof(refused_flags) / sizeof(refused_flags[0]); i++)
            if (!strcmp(name, refused_flags[i].flag)) {
                fprintf(stderr, "chorus-run: %s: %s\n", name, refused_flags[i].instead);
                return 2;
            }
        if (!takes_value(name)) {
            if (v) {
                fprintf(stderr, "chorus-run: %s takes no value\n", name);
                return 2;
            }
        } else if (!v) {
            if (ai + 1 >= argc) {
                fprintf(stderr, "chorus-run: %s needs a value (see chorus-run --help)\n", name);
                return 2;
            }
            v = argv[++ai];
        }
        int rc = apply_option(name, v, j, o);
        if (rc >= 0) return rc;
    }
    o->prog = ai;
    return -1;
}

/* For a job with ranks on other hosts: the remote shell, this program's path (the agents run
 * it there) and the directory the ranks run in. 0, or -1 with the reason said. */
static int setup_remote(job *j)
{
    if (!getcwd(j->cwd, sizeof(j->cwd))) snprintf(j->cwd, sizeof(j->cwd), "/");
    if (!j->rsh) j->rsh = j->rsh_buf[0] ? j->rsh_buf : "ssh -o BatchMode=yes";
    if (!j->rsh[strspn(j->rsh, " \t")]) {
        fprintf(stderr,
                "chorus-run: --rsh '%s' names no command (the remote shell: CMD HOST "
                "command...)\n",
                j->rsh);
        return -1;
    }
    ssize_t n = readlink("/proc/self/exe", j->self, sizeof(j->self) - 1);
    if (n <= 0) {
        fprintf(stderr,
                "chorus-run: cannot find its own path (/proc/self/exe: %s), which the "
                "other hosts run as the agent of their ranks\n",
                strerror(errno));
        return -1;
    }
    j->self[n] = 0;
    return 0;
}

/* With -H or --hostfile: places the ranks by slot, finds the hosts that are this machine, and
 * for the others the remote shell, this program's path (the agents run it there) and the
 * directory the ranks run in. Returns -1 to go on, else the exit code. */
static int check_hosts(job *j)
{
    int slots = run_hosts_slots(&j->hosts);
    if (j->np < 1) j->np = slots; /* mpirun's default: a rank in every slot */
    if (j->np < 1 || run_hosts_place(&j->hosts, j->np)) {
        char list[512] = "";
        size_t o = 0;
        for (int i = 0; i < j->hosts.n && o < sizeof(list); i++)
            o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s:%d", i ? "," : "",
                                  j->hosts.h[i].name, j->hosts.h[i].slots);
        fprintf(stderr,
                "chorus-run: not enough slots: -np %d needs %d, but the hosts have %d (%s); add "
                "slots (host:N, or slots=N in the host file) or hosts\n",
                j->np, j->np, slots, list);
        return 2;
    }
    run_hosts_mark_local(&j->hosts); /* after the checks: it may ask the resolver */
    for (int i = 0; i < j->hosts.n; i++)
        j->remote |= j->hosts.h[i].nranks > 0 && !j->hosts.h[i].local;
    return j->remote && setup_remote(j) ? 1 : -1;
}

/* The ranks this host runs: all of them, or across hosts those of the hosts that are this
 * machine. */
static int local_ranks(const job *j)
{
    if (j->hosts.n == 0) return j->np;
    int n = 0;
    for (int i = 0; i < j->hosts.n; i++) n += j->hosts.h[i].local ? j->hosts.h[i].nranks : 0;
    return n;
}

/* One node of several (--nnodes N, as torchrun's static rendezvous): this launcher starts
 * -np ranks, base = node rank * np onwards, of a world of N * np; node 0's launcher serves the
 * store on the port (--master-port, else 29500) and every rank meets there through
 * --master-addr. What torchrun reads from PET_* when a flag is not given is read the same way;
 * in a pod of a Kubernetes Indexed Job the node rank is the pod's JOB_COMPLETION_INDEX. The
 * secret must be the same on every node, so it comes from CHORUS_SECRET. Returns -1 to go
 * on, else the exit code. */
static int check_nodes(job *j)
{
    const char *v;
    if (!j->nnodes && (v = chorus__env("PET_NNODES")) && check_nnodes(v, j)) return 2;
    if (j->nnodes <= 1) return -1;
    if (j->np < 1 && (v = chorus__env("PET_NPROC_PER_NODE")) &&
        parse_int_arg("PET_NPROC_PER_NODE", v, 1, 4096, &j->np))
        return 2;
    if (j->node_rank < 0 && (v = chorus__env("PET_NODE_RANK")) &&
        parse_int_arg("PET_NODE_RANK", v, 0, 4095, &j->node_rank))
        return 2;
    if (j->node_rank < 0 && (v = chorus__env("JOB_COMPLETION_INDEX")) &&
        parse_int_arg("JOB_COMPLETION_INDEX", v, 0, 4095, &j->node_rank))
        return 2;
    if (!j->master_addr[0] &&
        ((v = chorus__env("PET_MASTER_ADDR")) || (v = chorus__env("MASTER_ADDR"))))
        snprintf(j->master_addr, sizeof(j->master_addr), "%s", v);
    v = chorus__env("MASTER_PORT"); /* --master-port's, or the environment's */
    if (!v) v = chorus__env("PET_MASTER_PORT");
    j->store_port = 29500;
    if (v && parse_int_arg("--master-port", v, 1, 65534, &j->store_port)) return 2;
    const char *missing = j->node_rank < 0     ? "--node-rank I (this node's index, 0 to N-1)"
                          : !j->master_addr[0] ? "--master-addr HOST (where node 0 is)"
                          : !chorus__env("CHORUS_SECRET") ? "CHORUS_SECRET (the same on every node)"
                                                          : NULL;
    if (missing) {
        fprintf(stderr, "chorus-run: --nnodes %d needs %s\n", j->nnodes, missing);
        return 2;
    }
    if (j->node_rank >= j->nnodes) {
        fprintf(stderr, "chorus-run: --node-rank %d is not below --nnodes %d\n", j->node_rank,
                j->nnodes);
        return 2;
    }
    if (j->elastic || j->hosts.n > 0 || j->max_restarts > 0) {
        fprintf(stderr,
                "chorus-run: --nnodes %d runs one node's ranks of a fixed world: not with "
                "%s\n",
                j->nnodes,
                j->elastic   ? "--elastic"
                : j->hosts.n ? "-H or --hostfile"
                             : "--max-restarts");
        return 2;
    }
    unsetenv("MASTER_PORT"); /* the ranks get the next port for torch.distributed's store */
    unsetenv("MASTER_ADDR");
    return -1;
}

/* Step 2: checks that the options fit together, asks the discovery script for the initial
 * size, plans CPU binding and checks that the program can run. Returns -1 to go on, else the
 * exit code. */
static int check_args(int argc, char **argv, job *j, run_opts *o)
{
    int nrc = check_nodes(j);
    if (nrc >= 0) return nrc;
    if ((j->min_np != 1 || o->max_np_set || j->discovery) && !j->elastic) {
        fprintf(stderr, "chorus-run: --min-np, --max-np and --host-discovery-script need "
                        "--elastic\n");
        return 2;
    }
    if (j->hosts.n > 0 && j->elastic) {
        fprintf(stderr, "chorus-run: --elastic takes its hosts from --host-discovery-script, not "
                        "-H or --hostfile\n");
        return 2;
    }
    if (j->elastic && j->discovery && j->np < 1) {
        int slots = discover(j);
        for (int i = 0; i < j->hosts.n; i++)
            j->remote |= j->hosts.h[i].slots && !j->hosts.h[i].local;
        if (j->remote) slots = discover(j);
        if (slots < 1) {
            fprintf(stderr, "chorus-run: the host discovery script gives no slots; pass -np N\n");
            return 2;
        }
        if (j->remote && setup_remote(j)) return 1;
        j->np = o->max_np_set && slots > j->max_np ? j->max_np : slots;
        j->discovery_last = chorus__now();
    }
    if (j->hosts.n > 0 && o->prog < argc) {
        int rc = check_hosts(j);
        if (rc >= 0) return rc;
    }
    if (j->np < 1 || o->prog >= argc) {
        fprintf(stderr,
                "chorus-run: %s\n"
                "usage: chorus-run -np N [options] [--] program [args...]  (chorus-run --help "
                "lists the options)\n",
                j->np < 1 ? "-np N is required: how many ranks to start"
                          : "no program given: what each rank runs");
        return 2;
    }
    if ((j->tee || j->redirects) && !j->log_dir) {
        fprintf(stderr, "chorus-run: --tee and --redirects need --log-dir DIR (the files they "
                        "write to)\n");
        return 2;
    }
    if (j->log_dir && !j->redirects) j->redirects = 3;
    if (check_master_port() || check_servers(j) || check_timeline(j)) return 2;
    struct stat ld;
    if (j->log_dir && (chorus__mkdir_p(j->log_dir) || access(j->log_dir, W_OK) ||
                       stat(j->log_dir, &ld) || (!S_ISDIR(ld.st_mode) && (errno = ENOTDIR)))) {
        fprintf(stderr, "chorus-run: --log-dir %s: %s\n", j->log_dir, strerror(errno));
        return 2;
    }
    if (j->max_restarts < 0) j->max_restarts = j->elastic ? 3 : 0;
    if (!o->max_np_set) j->max_np = j->np;
    const char *b = chorus__env("CHORUS_BIND"); /* checked with the rest of the config later */
    if (o->bind_req < 0 && b && !strcmp(b, "none")) o->bind_req = 0;
    /* an elastic job may grow to max_np: plan for that many */
    int np = j->np;
    if (j->elastic && j->max_np > np) j->np = j->max_np;
    j->np = local_ranks(j);
    plan_binding(j, o->bind_req);
    j->np = np;
    if (j->elastic && (j->min_np > j->np || j->np > j->max_np)) {
        fprintf(stderr, "chorus-run: --elastic needs --min-np (%d) <= -np (%d) <= --max-np (%d)\n",
                j->min_np, j->np, j->max_np);
        return 2;
    }
    j->desired = j->np;
    if (j->nnodes > 1) rank_base = j->base = j->node_rank * j->np;
    j->argv = argv + o->prog;
    char why[256];
    if (!o->no_python && is_python_script(j->argv[0])) {
        if (access(j->argv[0], R_OK)) {
            fprintf(stderr, "chorus-run: cannot run '%s': %s\n", j->argv[0], strerror(errno));
            return 127;
        }
        j->argv = with_python(j->argv, argc - o->prog);
        if (!j->argv) {
            fprintf(stderr, "chorus-run: out of memory\n");
            return 1;
        }
    }
    if (local_ranks(j) > 0 && !runnable(j->argv[0], why, sizeof(why))) {
        fprintf(stderr, "chorus-run: cannot run '%s': %s\n", j->argv[0], why);
        return 127;
    }
    return -1;
}

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
    j->master_port = j->nnodes > 1                ? j->store_port + 1
                     : chorus__env("MASTER_PORT") ? 0
                                                  : free_port();
    if (j->verbose)
        fprintf(stderr,
                "chorus-run: job %s: %d rank%s of %s; rendezvous store %s; MASTER_PORT %s "
                "%d%s%s\n",
                j->id, j->np, j->np == 1 ? "" : "s", j->argv[0], j->store,
                j->master_port ? "(picked)" : "(yours)",
                j->master_port ? j->master_port : atoi(chorus__env("MASTER_PORT")),
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
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK)) return 1;
    run_catch_signals(on_signal);
    return start_ranks(j);
}

/* How the job went, as the supervision loop saw it. */
typedef struct outcome {
    int failed;      /* plain job: the first rank that failed (-1: none) */
    int stopping;    /* every rank was told to stop */
    int timed_out;   /* --timeout expired */
    int interrupted; /* SIGINT/SIGTERM/SIGHUP received (count) */
    int job_failed;  /* elastic: the job cannot go on */
    int last_failed; /* elastic: the worker that failed last (-1: none) */
    int tolerated;   /* plain job: the first expendable rank that failed (-1: none) */
    double fail_time, term_time;
} outcome;

/* A rank of a plain job failed at time now (an error reported, or an exit): the first
 * failure starts the grace the others get before they are stopped. */
static void note_failure(worker *w, outcome *out, int index, double now)
{
    if (!w->fail_time) w->fail_time = now;
    if (out->failed < 0 && !out->stopping) {
        out->failed = index;
        out->fail_time = now;
    }
}

/* Did expendable worker w fail because it lost a rank that is not expendable (a parameter
 * server that died, or stopped responding), with no other expendable rank left running or
 * finished? Then the job cannot go on: no worker is left to serve, and going on would wait
 * for ever for a stopped server. (While another worker runs, a worker cut off from the
 * servers is a loss the job tolerates: the servers go on with the others.) */
static int lost_the_servers(const job *j, const worker *w)
{
    int b = w->st.blamed, needed = 0;
    if (!w->st.reported || b < 0 || b == w->wid) return 0;
    for (int r = 0; r < j->nw; r++)
        if (j->w[r].wid == b) needed = !j->w[r].st.expendable;
    if (!needed) return 0;
    for (int r = 0; r < j->nw; r++) {
        const worker *o = &j->w[r];
        if (o == w || !o->st.expendable) continue;
        if (o->running || (!o->tolerated && !failed_status(o->status))) return 0;
    }
    return 1;
}

/* Takes the complete lines of what a rank wrote on its status pipe (here, or relayed by its
 * agent): "failed <rank> <blamed> <result>" lines (base/status.h). The first one counts. */
static void parse_status(job *j, int index, outcome *out)
{
    worker *w = &j->w[index];
    status_pipe *p = &w->st;
    char *nl;
    while ((nl = strchr(p->buf, '\n'))) {
        *nl = 0;
        int rank, blamed;
        char what[48];
        if (!p->reported && sscanf(p->buf, "failed %d %d %47s", &rank, &blamed, what) == 3) {
            p->reported = 1;
            p->blamed = blamed;
            if (j->nnodes > 1) { /* global ranks: this node's as its workers, others apart */
                p->blamed = blamed >= j->base && blamed < j->base + j->np ? blamed - j->base : -1;
                if (blamed >= 0 && p->blamed < 0) p->blamed_far = blamed;
            }
            snprintf(p->what, sizeof(p->what), "%s", what);
            /* an expendable rank's failure is its own end's: the job may go on without it */
            if (!j->elastic && !p->expendable) note_failure(w, out, index, chorus__now());
        } else if (sscanf(p->buf, "expendable %d", &rank) == 1) {
            p->expendable = 1;
        }
        p->len -= (size_t)(nl + 1 - p->buf);
        memmove(p->buf, nl + 1, p->len + 1);
    }
}

/* Reads what a rank wrote on its status pipe, and takes its lines (parse_status). */
static void read_status(job *j, int index, outcome *out)
{
    worker *w = &j->w[index];
    status_pipe *p = &w->st;
    if (w->s[0].demux) { /* relayed by its agent on its stdout */
        drain_worker(j, w);
        parse_status(j, index, out);
        return;
    }
    while (p->fd >= 0) {
        ssize_t r = read(p->fd, p->buf + p->len, sizeof(p->buf) - 1 - p->len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) break;
        if (r <= 0 || p->len + (size_t)r >= sizeof(p->buf) - 1) {
            close(p->fd); /* end of file, or a rank that writes garbage: stop listening */
            p->fd = -1;
            break;
        }
        p->len += (size_t)r;
        p->buf[p->len] = 0;
        parse_status(j, index, out);
    }
}

static const char *rank_name(const job *j, int r, char *buf, size_t len);

/* An expendable rank of a plain job failed (an asynchronous parameter-server worker): the job
 * goes on without it, as the job itself does, and the summary names it at the end. */
static void tolerate(job *j, worker *w, outcome *out)
{
    char how[128], name[320];
    w->tolerated = 1;
    w->fail_time = chorus__now();
    if (out->tolerated < 0) out->tolerated = (int)(w - j->w);
    describe_status(w->status, how, sizeof(how));
    fprintf(stderr,
            "chorus-run: %s %s; the job goes on without it (it declared that the job tolerates "
            "its loss: a parameter-server worker in async or ssp mode)\n",
            rank_name(j, (int)(w - j->w), name, sizeof(name)), how);
}

/* Reaps ended workers and notices stopped (hung) or continued ones: a plain job records its
 * first failure; an elastic one poisons the failed worker's generation so the others re-form. */
static void reap(job *j, outcome *out)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
        if (pid <= 0) break;
        for (int r = 0; r < j->nw; r++) {
            worker *w = &j->w[r];
            if (w->pid != pid || !w->running) continue;
            if (WIFSTOPPED(status)) {
                w->stopped = w->was_stopped = 1;
                w->stopped_at = chorus__now();
                break;
            }
            if (WIFCONTINUED(status)) {
                w->stopped = 0;
                break;
            }
            w->running = 0;
            w->stopped = 0;
            if (w->s[0].demux) drain_worker(j, w); /* its agent's last lines: the rank's end */
            if (w->has_agent_status) status = w->agent_status;
            w->status = status;
            if (w->agent_in >= 0) close(w->agent_in);
            w->agent_in = -1;
            if (!j->elastic) {
                read_status(j, r, out); /* what it said before it ended */
                if (!out->stopping && failed_status(status) && w->st.expendable &&
                    !lost_the_servers(j, w)) {
                    tolerate(j, w, out);
                } else if (!out->stopping && failed_status(status)) {
                    w->failed_alone = 1;
                    note_failure(w, out, r, chorus__now());
                }
                break;
            }
            char how[128];
            describe_status(status, how, sizeof(how));
            if (w->leaving || out->stopping) break;
            if (!failed_status(status)) {
                j->completing = 1; /* a worker finished: the job is ending */
                break;
            }
            out->last_failed = r;
            j->unreplaced++;
            if (w->rank >= 0) poison(j, j->formed, w->rank);
            if (w->killed) break; /* kill_worker said why */
            elastic_failed(j, w, status, how);
        }
    }
}

static void stop_all(job *j, outcome *out, double now)
{
    out->stopping = 1;
    out->term_time = now;
    signal_all(j, SIGTERM);
}

/* A plain job whose only running ranks are stopped (SIGSTOP), every other rank having ended,
 * would wait for them for ever: after `grace` seconds so, each is said, and stopped: a failure
 * of the job, or, for a rank whose loss the job tolerates (an asynchronous parameter-server
 * worker that its servers already went on without), a loss it finished without. */
static void left_stopped(job *j, outcome *out, double now, double grace, double *since)
{
    int stopped = 0, ended = 0;
    for (int r = 0; r < j->nw; r++) {
        if (j->w[r].running && !j->w[r].stopped) {
            *since = 0;
            return;
        }
        stopped += j->w[r].running;
        ended += !j->w[r].running;
    }
    if (!stopped || !ended) {
        *since = 0;
        return;
    }
    if (!*since) *since = now;
    if (now - *since <= grace) return;
    for (int r = 0; r < j->nw; r++) {
        worker *w = &j->w[r];
        if (!w->running) continue;
        char name[320];
        fprintf(stderr,
                "chorus-run: %s is stopped (SIGSTOP?) and every other rank has ended; "
                "stopping it%s\n",
                rank_name(j, r, name, sizeof(name)),
                w->st.expendable ? ": the job finished without it (a parameter-server worker "
                                   "whose loss the job tolerates)"
                                 : "");
        if (w->st.expendable) {
            w->tolerated = 1;
            w->fail_time = now;
            if (out->tolerated < 0) out->tolerated = r;
        } else {
            note_failure(w, out, r, now);
        }
    }
    stop_all(j, out, now);
}

/* Step 5: until every rank has ended and its output is drained, forwards output, signals and
 * failures: a plain job's ranks are stopped `grace` seconds after one fails; an elastic job
 * re-forms (elastic_tick). Stopping ranks get SIGKILL after 3 seconds. Returns -1 when
 * every rank has ended, 1 when out of memory. */
static int supervise(job *j, const run_opts *o, outcome *out)
{
    double start = j->started, all_stopped_since = 0;
    struct pollfd *pf = NULL;
    int *who = NULL, pf_cap = 0;
    for (;;) {
        if (pf_cap < 3 * j->nw + 1) {
            pf_cap = 3 * j->nw + 16;
            pf = realloc(pf, (size_t)pf_cap * sizeof(*pf));
            who = realloc(who, (size_t)pf_cap * sizeof(int));
            if (!pf || !who) return 1;
        }
        int open_streams = 0, k = 0, running = 0;
        pf[k++] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
        for (int r = 0; r < j->nw; r++) {
            running += j->w[r].running;
            for (int s = 0; s < 2; s++)
                if (j->w[r].s[s].fd >= 0) {
                    who[k] = r * 3 + s;
                    pf[k++] = (struct pollfd){.fd = j->w[r].s[s].fd, .events = POLLIN};
                    open_streams++;
                }
            if (j->w[r].st.fd >= 0) { /* not awaited: a rank's children may hold it open */
                who[k] = r * 3 + 2;
                pf[k++] = (struct pollfd){.fd = j->w[r].st.fd, .events = POLLIN};
            }
        }
        if (running == 0 && open_streams == 0) break;
        int n = poll(pf, (nfds_t)k, 100);
        if (n < 0 && errno != EINTR) break;
        for (int i = 1; i < k; i++) {
            if (!pf[i].revents) continue;
            worker *w = &j->w[who[i] / 3];
            if (who[i] % 3 == 2)
                read_status(j, who[i] / 3, out);
            else
                pump(&w->s[who[i] % 3], &w->tail, w->wid, j->prefix);
            if (w->s[0].demux) parse_status(j, who[i] / 3, out);
        }
        if (pf[0].revents) {
            unsigned char b[64];
            while (read(sig_pipe[0], b, sizeof(b)) > 0) { /* drain wake-ups */
            }
        }
        if (got_signal == SIGINT || got_signal == SIGTERM || got_signal == SIGHUP) {
            int sig = got_signal;
            got_signal = 0;
            out->interrupted++;
            signal_all(j, out->interrupted > 1 ? SIGKILL : sig);
            if (!out->stopping) {
                out->stopping = 1;
                out->term_time = chorus__now();
            }
        }
        reap(j, out);
        double now = chorus__now();
        if (j->elastic && !out->stopping) {
            int alive = count_alive(j);
            int rc = elastic_tick(j);
            if (!rc && alive == 0 && !j->completing && !(j->unreplaced > 0 && may_replace(j))) {
                int any_running = 0;
                for (int r = 0; r < j->nw; r++) any_running |= j->w[r].running;
                if (!any_running) {
                    if (j->repeating)
                        fprintf(stderr, "chorus-run: elastic: no worker is left; stopping (a "
                                        "replacement failed as the worker before it did)\n");
                    else
                        fprintf(stderr,
                                "chorus-run: elastic: no worker is left; stopping "
                                "(--max-restarts %d reached)\n",
                                j->max_restarts);
                    rc = 1;
                }
            }
            if (rc) {
                out->job_failed = 1;
                stop_all(j, out, now);
            }
        }
        if (!j->elastic && !out->stopping && running > 0)
            left_stopped(j, out, now, o->grace, &all_stopped_since);
        if (!j->elastic && out->failed >= 0 && !out->stopping && running > 0 &&
            now - out->fail_time > o->grace)
            stop_all(j, out, now);
        if (o->timeout > 0 && !out->stopping && running > 0 && now - start > o->timeout) {
            fprintf(stderr, "chorus-run: the job exceeded --timeout %gs; stopping all ranks\n",
                    o->timeout);
            out->timed_out = 1;
            stop_all(j, out, now);
        }
        if (out->stopping && running > 0 && now - out->term_time > 3) signal_all(j, SIGKILL);
    }
    free(pf);
    free(who);
    return -1;
}

/* Did rank w fail because it lost a peer (its report blames another rank, or says it lost or
 * timed out waiting for one)? */
static int collateral(const worker *w, int rank)
{
    const status_pipe *p = &w->st;
    return p->reported &&
           ((p->blamed >= 0 && p->blamed != rank) || p->blamed_far >= 0 ||
            !strcmp(p->what, "CHORUS_ERR_PEER_LOST") || !strcmp(p->what, "CHORUS_ERR_TIMEOUT"));
}

/* How much rank r looks like the root cause of a failed plain job: 0 it was stopped (SIGSTOP)
 * or killed by a signal on its own, 1 it failed on its own (an error exit, or a failure it did
 * not blame on a peer), 2 it failed because it lost a peer or was told that a peer failed, 3 it
 * was expendable and the job went on without it, 4 it did not fail. *when: the moment its
 * failure was seen. */
static int blame_tier(const job *j, int r, double *when)
{
    const worker *w = &j->w[r];
    *when = w->fail_time;
    if (w->tolerated) return 3;
    if (w->was_stopped) {
        *when = w->stopped_at;
        return 0;
    }
    if (!w->fail_time) return 4;
    if (collateral(w, r)) return 2;
    if (w->failed_alone && WIFSIGNALED(w->status)) return 0;
    return 1;
}

/* Across hosts: how many other hosts have a rank that failed blaming a rank of c's host. */
static int host_blames(const job *j, int c)
{
    int h = j->w[c].host, n = 0;
    for (int o = 0; o < j->hosts.n; o++) {
        int any = 0;
        for (int r = 0; r < j->nw && o != h && !any; r++) {
            const worker *w = &j->w[r];
            int b = w->st.blamed;
            any = w->host == o && collateral(w, r) && b >= 0 && b < j->nw && j->w[b].host == h;
        }
        n += any;
    }
    return n;
}

/* Did w end as if nothing had happened (exit status 0, never stopped, no failure seen)? A rank
 * that lost it then lost a connection, not a failed peer. */
static int ended_well(const worker *w)
{
    return !w->running && !w->fail_time && !w->was_stopped && !failed_status(w->status);
}

/* The root cause of a failed plain job: the rank of the lowest tier, the earliest in it. When
 * every failed rank only lost a peer, the peer the earliest of them blamed. */
static int root_cause(const job *j, const outcome *out, int down)
{
    int best = out->failed, best_tier = 5;
    double best_when = 0;
    for (int r = 0; r < j->nw; r++) {
        double when;
        int t = blame_tier(j, r, &when);
        if (t < best_tier || (t == best_tier && when < best_when)) {
            best = r;
            best_tier = t;
            best_when = when;
        }
    }
    if (best_tier == 2) {
        int b = j->w[best].st.blamed;
        /* Across hosts, the host blamed by the most other hosts wins over the earliest
         * blame: when a host is cut off, the ranks of every other host blame its ranks, and
         * its own ranks blame theirs. */
        for (int c = 0; j->hosts.n > 0 && b >= 0 && b < j->nw && c < j->nw; c++)
            if (host_blames(j, c) > host_blames(j, b)) b = c;
        /* Two hosts that lost each other: the one the launcher cannot reach, at the rank of it
         * that a rank of the other host lost first. */
        double first = 0;
        for (int r = 0; down >= 0 && r < j->nw; r++) {
            const worker *w = &j->w[r];
            int lb = w->st.blamed;
            if (w->host != down && collateral(w, r) && lb >= 0 && lb < j->nw &&
                j->w[lb].host == down && (!first || w->fail_time < first)) {
                first = w->fail_time;
                b = lb;
            }
        }
        if (b >= 0 && b < j->nw && !ended_well(&j->w[b])) best = b;
    }
    return best;
}

/* How the summary names rank r: "rank 2 (pid 123)", across hosts "rank 2 (pid 123 on host
 * h2)" with the pid the rank has there. */
static const char *rank_name(const job *j, int r, char *buf, size_t len)
{
    const worker *w = &j->w[r];
    pid_t pid = w->remote_pid > 0 ? w->remote_pid : w->pid;
    if (w->host >= 0)
        snprintf(buf, len, "rank %d (pid %d on host %s)", r, (int)pid, j->hosts.h[w->host].name);
    else if (j->nnodes > 1)
        snprintf(buf, len, "rank %d (pid %d on node %d)", r + j->base, (int)pid, j->node_rank);
    else
        snprintf(buf, len, "rank %d (pid %d)", r, (int)pid);
    return buf;
}

/* Across hosts: which hosts the ranks of host h blamed for their failure (bit o: host o). */
static unsigned long long hosts_blamed_by(const job *j, int h)
{
    unsigned long long m = 0;
    for (int r = 0; r < j->nw; r++) {
        const worker *w = &j->w[r];
        int b = w->st.blamed;
        if (w->host == h && collateral(w, r) && b >= 0 && b < j->nw && j->w[b].host != h &&
            j->w[b].host < 64)
            m |= 1ull << j->w[b].host;
    }
    return m;
}

/* Across hosts: two hosts that lost each other and that no host blames more than them (the
 * only two hosts, or a partition into two): each side only knows it lost the other, so the
 * ranks' reports cannot tell which one is down. Returns 1 with *a < *b. */
static int lost_each_other(const job *j, int *a, int *b)
{
    int top = 0, n = 0, h[2] = {-1, -1};
    for (int c = 0; c < j->nw; c++) top = host_blames(j, c) > top ? host_blames(j, c) : top;
    for (int o = 0; o < j->hosts.n && o < 64; o++) {
        int blamed = 0;
        for (int r = j->hosts.h[o].first_rank;
             r < j->hosts.h[o].first_rank + j->hosts.h[o].nranks && r < j->nw; r++)
            blamed |= top > 0 && host_blames(j, r) == top;
        if (blamed && n < 2) h[n] = o;
        n += blamed;
    }
    if (n != 2 || !(hosts_blamed_by(j, h[0]) >> h[1] & 1) ||
        !(hosts_blamed_by(j, h[1]) >> h[0] & 1))
        return 0;
    *a = h[0];
    *b = h[1];
    return 1;
}

/* Can the launcher reach host h over the network? Its own host: yes. Another: a TCP connection
 * to the address its first rank listened on (from the rendezvous store), answered or refused
 * within the time the ranks give a silent peer (CHORUS_HEARTBEAT_TIMEOUT_S, at most 3 s): 1
 * yes, 0 no (no route, or no answer), -1 not known (no address). addr: the address tried. */
static int reaches(const job *j, int h, char *addr, size_t len)
{
    snprintf(addr, len, "?");
    if (j->hosts.h[h].local) return 1;
    chorus_store *kv = NULL;
    chorus_errbuf e;
    char key[64], *rec = NULL;
    int found = 0;
    snprintf(key, sizeof(key), "rank/%d", j->hosts.h[h].first_rank);
    if (chorus__store_connect(j->store, j->id, chorus__now() + 2, &kv, &e) != CHORUS_OK) return -1;
    if (chorus__store_check(kv, key, &rec, NULL, &found, &e) != CHORUS_OK || !found) {
        free(rec);
        chorus__store_close(kv);
        return -1;
    }
    chorus__store_close(kv);
    char ip[64] = "";
    int port = 0;
    int ok = sscanf(rec, "%63[0-9.]:%d", ip, &port) == 2;
    free(rec);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!ok || inet_pton(AF_INET, ip, &sa.sin_addr) != 1) return -1;
    snprintf(addr, len, "%s", ip);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ? errno : 0;
    if (rc == EINPROGRESS) {
        double wait_s = chorus__config()->heartbeat_timeout_s;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int n = poll(&pf, 1, (int)(1000 * (wait_s > 0 && wait_s < 3 ? wait_s : 3)));
        socklen_t sl = sizeof(rc);
        if (n == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &rc, &sl)) rc = errno;
        if (n != 1) rc = ETIMEDOUT;
    }
    close(fd);
    return rc == 0 || rc == ECONNREFUSED; /* an answer, even a refusal, is the host's */
}

/* The line that says that hosts a and b lost each other and what the launcher reaches of them,
 * into line. Returns the host the launcher cannot reach while it reaches the other (-1: none,
 * or both, or not known). */
static int lost_each_other_line(const job *j, int a, int b, char *line, size_t len)
{
    int reach[2];
    char addr[2][64], what[2][340];
    int hs[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        const char *name = j->hosts.h[hs[i]].name;
        reach[i] = reaches(j, hs[i], addr[i], sizeof(addr[i]));
        if (j->hosts.h[hs[i]].local)
            snprintf(what[i], sizeof(what[i]), "%s (it runs there)", name);
        else
            snprintf(what[i], sizeof(what[i]), "%s at %s", name, addr[i]);
    }
    char tail[1024];
    if (reach[0] == 1 && reach[1] == 0)
        snprintf(tail, sizeof(tail), "the launcher reaches %s but not %s: %s or its link is down",
                 what[0], what[1], j->hosts.h[b].name);
    else if (reach[0] == 0 && reach[1] == 1)
        snprintf(tail, sizeof(tail), "the launcher reaches %s but not %s: %s or its link is down",
                 what[1], what[0], j->hosts.h[a].name);
    else if (reach[0] == 1 && reach[1] == 1)
        snprintf(tail, sizeof(tail),
                 "the launcher still reaches both, %s and %s: the network between them failed",
                 what[0], what[1]);
    else if (reach[0] == 0 && reach[1] == 0)
        snprintf(tail, sizeof(tail), "the launcher reaches neither %s nor %s", what[0], what[1]);
    else
        snprintf(tail, sizeof(tail), "which of them is down is not known");
    snprintf(line, len,
             "chorus-run: hosts %s and %s lost each other (the ranks of each lost the ranks of "
             "the other); %s\n",
             j->hosts.h[a].name, j->hosts.h[b].name, tail);
    return reach[0] == 1 && reach[1] == 0 ? b : reach[0] == 0 && reach[1] == 1 ? a : -1;
}

/* Across hosts: when every rank of the root cause's host failed or was lost, ranks of other
 * hosts lost them, and none of them blamed a rank of its own host (which would show the host
 * working), says so in one line, naming the host and its ranks (a host that died, or whose
 * link was cut). */
static void report_host(const job *j, int cause)
{
    int h = j->w[cause].host;
    if (h < 0 || j->hosts.h[h].nranks < 1) return;
    const run_host *ht = &j->hosts.h[h];
    char ranks[256] = "";
    size_t o = 0;
    for (int r = ht->first_rank; r < ht->first_rank + ht->nranks && r < j->nw; r++) {
        const worker *w = &j->w[r];
        int b = w->st.blamed;
        if (collateral(w, r) && b >= 0 && b < j->nw && j->w[b].host == h) return;
        int lost = failed_status(w->status) || w->was_stopped;
        for (int q = 0; q < j->nw && !lost; q++)
            lost = j->w[q].st.reported && j->w[q].st.blamed == r;
        if (!lost) return;
        o += (size_t)snprintf(ranks + o, o < sizeof(ranks) ? sizeof(ranks) - o : 0, "%s%d",
                              o ? ", " : "", r);
    }
    int others = 0;
    for (int r = 0; r < j->nw; r++) {
        const worker *w = &j->w[r];
        others += w->host != h && w->st.reported && w->st.blamed >= ht->first_rank &&
                  w->st.blamed < ht->first_rank + ht->nranks;
    }
    if (others) /* not a rank that failed alone */
        fprintf(stderr,
                "chorus-run: host %s failed: all its ranks (%s) failed or were lost by the ranks "
                "of the other hosts (the host or its link is down?)\n",
                ht->name, ranks);
}

/* The failure summary of a plain job, root cause first with its last output lines, then
 * the ranks that were stopped. Returns the exit code: the root cause's own status. */
static int report_failure(const job *j, const outcome *out)
{
    int ha, hb, down = -1;
    char pair[2048] = "";
    if (j->hosts.n > 1 && lost_each_other(j, &ha, &hb))
        down = lost_each_other_line(j, ha, hb, pair, sizeof(pair));
    int cause = root_cause(j, out, down);
    const worker *cw = &j->w[cause];
    char how[128], name[320];
    describe_status(cw->status, how, sizeof(how));
    rank_name(j, cause, name, sizeof(name));
    if (cw->was_stopped)
        fprintf(stderr,
                "chorus-run: %s stopped responding (it was stopped, SIGSTOP?) and %s; it failed "
                "first\n",
                name, how);
    else if (!cw->fail_time)
        fprintf(stderr,
                "chorus-run: %s stopped responding (its peers lost it) and %s; it failed first\n",
                name, how);
    else
        fprintf(stderr, "chorus-run: %s %s; it failed first%s\n", name, how,
                collateral(cw, cause) && cw->st.blamed_far >= 0 ? " on this node" : "");
    if (collateral(cw, cause) && cw->st.blamed_far >= 0)
        fprintf(stderr,
                "chorus-run: it lost rank %d of node %d (%s): that node, or the link to it, "
                "failed first\n",
                cw->st.blamed_far, cw->st.blamed_far / j->np, cw->st.what);
    int lostb = cw->st.blamed;
    if (collateral(cw, cause) && lostb >= 0 && lostb < j->nw && lostb != cause &&
        ended_well(&j->w[lostb]))
        fprintf(stderr,
                "chorus-run: it lost %s, which went on and exited with status 0: the connection "
                "between them failed, not that rank\n",
                rank_name(j, lostb, name, sizeof(name)));
    if (cw->s[0].demux && !cw->remote_pid)
        fprintf(stderr,
                "chorus-run: the remote shell never started rank %d on host %s (check that '%s "
                "%s true' works from here)\n",
                cause, j->hosts.h[cw->host].name, j->rsh, j->hosts.h[cw->host].name);
    if (cw->tail.count) {
        fprintf(stderr, "chorus-run: last lines of rank %d:\n", cause + j->base);
        for (int i = 0; i < cw->tail.count; i++) {
            int k = (cw->tail.next - cw->tail.count + i + TAIL_LINES) % TAIL_LINES;
            fprintf(stderr, "chorus-run: | %s\n", cw->tail.line[k]);
        }
    }
    for (int r = 0; r < j->nw; r++) {
        const worker *w = &j->w[r];
        if (r == cause) continue;
        describe_status(w->status, how, sizeof(how));
        char why[128] = " by chorus-run";
        if (w->tolerated)
            snprintf(why, sizeof(why), " (the job went on without it: a loss it tolerates)");
        else if (collateral(w, r) && !strcmp(w->st.what, "PEER_FAILED"))
            snprintf(why, sizeof(why), " after it was told that rank %d failed",
                     w->st.blamed_far >= 0 ? w->st.blamed_far
                     : w->st.blamed >= 0   ? w->st.blamed + j->base
                                           : w->st.blamed);
        else if (collateral(w, r) && w->st.blamed_far >= 0)
            snprintf(why, sizeof(why), " after it lost rank %d of node %d (%s)", w->st.blamed_far,
                     w->st.blamed_far / j->np, w->st.what);
        else if (collateral(w, r) && w->st.blamed >= 0 && w->st.blamed != r)
            snprintf(why, sizeof(why), " after it lost rank %d (%s)", w->st.blamed + j->base,
                     w->st.what);
        else if (collateral(w, r))
            snprintf(why, sizeof(why), " after it lost a peer (%s)", w->st.what);
        else if (w->st.reported)
            snprintf(why, sizeof(why), " after its own failure (%s)", w->st.what);
        else if (w->failed_alone || !failed_status(w->status))
            why[0] = 0;
        fprintf(stderr, "chorus-run: stopped: %s %s%s\n", rank_name(j, r, name, sizeof(name)), how,
                why);
    }
    if (!pair[0] || down >= 0) report_host(j, cause);
    fputs(pair, stderr);
    int code = exit_code(cw->status);
    if (code == 0 && out->failed >= 0) code = exit_code(j->w[out->failed].status);
    return code ? code : 1;
}

/* A plain job whose only failures were expendable ranks (asynchronous parameter-server
 * workers): when another expendable rank finished, the job did what it was built to do, and
 * the summary names the ranks it lost (exit status 0); when none did, it failed. */
static int report_tolerated(const job *j, const outcome *out)
{
    int finished = 0;
    for (int r = 0; r < j->nw; r++)
        finished |= j->w[r].st.expendable && !j->w[r].tolerated && !failed_status(j->w[r].status);
    if (!finished) {
        fprintf(stderr, "chorus-run: every worker whose loss the job tolerates was lost; none "
                        "finished\n");
        outcome o = *out;
        o.failed = out->tolerated;
        return report_failure(j, &o);
    }
    for (int r = 0; r < j->nw; r++) {
        const worker *w = &j->w[r];
        if (!w->tolerated) continue;
        char how[128], name[320];
        describe_status(w->status, how, sizeof(how));
        fprintf(stderr,
                "chorus-run: the job finished without %s, which %s %.1f s after the start (a "
                "parameter-server worker whose loss the job tolerates)\n",
                rank_name(j, r, name, sizeof(name)), how, w->fail_time - j->started);
    }
    /* a host that lost every rank: what the launcher reaches of it says why */
    for (int h = 0; h < j->hosts.n; h++) {
        const run_host *ht = &j->hosts.h[h];
        int all = ht->nranks > 0 && !ht->local;
        for (int r = ht->first_rank; r < ht->first_rank + ht->nranks && r < j->nw; r++)
            all &= j->w[r].tolerated;
        char addr[64];
        int reach = all ? reaches(j, h, addr, sizeof(addr)) : -1;
        if (reach >= 0)
            fprintf(stderr,
                    "chorus-run: every rank of host %s was lost; the launcher %s %s at %s%s\n",
                    ht->name, reach ? "still reaches" : "cannot reach", ht->name, addr,
                    reach ? "" : " (the host or its link is down?)");
    }
    return 0;
}

/* Step 6: the lines that say how the job ended, and the exit code: the failure summary (see
 * report_failure), 124 for --timeout, 130 when interrupted. */
static int report(const job *j, const outcome *out)
{
    int code = 0, any_failed = 0;
    for (int r = 0; r < j->nw; r++)
        any_failed |= failed_status(j->w[r].status) && !j->w[r].tolerated;
    if (out->timed_out) { /* --timeout's own status, whatever the ranks it stopped did */
        code = 124;
    } else if (!j->elastic && out->failed >= 0 && any_failed) { /* not when all ended well */
        code = report_failure(j, out);
    } else if (!j->elastic && out->tolerated >= 0 && !out->interrupted) {
        code = report_tolerated(j, out);
    } else if (out->interrupted) {
        fprintf(stderr, "chorus-run: interrupted; stopped all ranks\n");
        code = 130;
    } else if (j->elastic && out->job_failed) {
        code = out->last_failed >= 0 ? exit_code(j->w[out->last_failed].status) : 1;
        if (code == 0) code = 1;
    } else if (j->elastic && !j->completing) {
        code = 1; /* ended without any member finishing */
        fprintf(stderr, "chorus-run: elastic: the job ended without a successful worker\n");
    }
    return code;
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
    j->nw = 0;
    begin_attempt(j);
    return start_ranks(j) < 0;
}

int main(int argc, char **argv)
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
    run_hosts_free(&j.hosts);
    return rc;
}
