/*
 * launch.h - the launcher's private header: the job, its workers and their streams, as the
 * files of src/launch/ share them (the public side is include/chorus/run.h: chorus_run_main,
 * which the chorus-run program calls). Each file calls only files listed before it (no
 * circle):
 *   hosts.c      host lists, placement by slot, this machine, the store's address, elastic hosts
 *   remote.c     the agent protocol as both sides use it (and the signal handlers)
 *   report.c     how the job ended, told, and the exit code
 *   workers.c    counting the workers, signalling all of them
 *   streams.c    the ranks' output: prefixes, --log-dir files, the agent's frames
 *   env.c        a rank's environment and CPU block
 *   status.c     each worker's pipes watched; what ranks say on their status pipes
 *   spawn.c      the one spawner of processes (spawn_process), and a worker started (spawn)
 *   agent.c      chorus-run --agent: one rank on another host
 *   elastic.c    the membership of each generation
 *   supervise.c  the supervision loop: signals, reaping, the grace, the stop, --timeout
 *   options.c    the command line, with the flags of horovodrun, torchrun and mpirun
 *   run.c        the steps of a run (chorus_run_main)
 *
 * The agent is `chorus-run --agent LABEL`, started as `RSH HOST /path/chorus-run --agent
 * LABEL`. Everything else comes on its stdin, never on a command line: the working
 * directory, the program and its arguments, and the rank's variables (the job secret among
 * them), as NUL-terminated strings ("chorus-agent 1", cwd, argc, argv..., VAR=value...,
 * ""). The stdin then stays open: "signal N\n" lines are signals for the rank, and its end
 * (the launcher or its connection is gone) stops the rank. On stdout the agent sends framed
 * lines, a tag, a space and the payload:
 *     P pid          the rank started (its pid on that host)
 *     1 text         a line the rank wrote on stdout
 *     2 text         a line the rank wrote on stderr
 *     S text         a line of the rank's status pipe (base/status.h)
 *     T, C           the rank was stopped (SIGSTOP, SIGTSTP), or continued
 *     X status       the rank ended with this wait status (the agent then exits with it)
 * The agent's own complaints go to its stderr, which the launcher shows as the rank's.
 */
#ifndef CHORUS_LAUNCH_LAUNCH_H
#define CHORUS_LAUNCH_LAUNCH_H

#include <sched.h>
#include <stdio.h>
#include <sys/types.h>

#include "base/base.h"
#include "base/loop.h"
#include "base/status.h"
#include "bootstrap/store.h"

/* ---- hosts and the agent protocol (hosts.c, remote.c) ------------------------------------ */

typedef struct run_host {
    char name[256];
    int slots;
    int local;      /* this machine: its ranks start here, without the remote shell */
    int first_rank; /* after placement: its first rank, and how many it got */
    int nranks;
} run_host;

typedef struct run_hosts {
    run_host *h;
    int n;
} run_hosts;

/* Adds "name" (1 slot) or "name:N" to hs; a host named again gets the slots added, as
 * mpirun does. 0, or -1 with the reason in err. */
int run_hosts_add(run_hosts *hs, const char *spec, char *err, size_t len);

/* -H a:2,b:2 (also "a,b": one slot each). 0, or -1 with the reason in err. */
int run_hosts_parse_list(run_hosts *hs, const char *list, char *err, size_t len);

/* A host file: "host slots=N" lines (also Open MPI's "host:N", and "host" for one slot), '#'
 * starting a comment. 0, or -1 with the file, line and reason in err. */
int run_hosts_parse_file(run_hosts *hs, const char *path, char *err, size_t len);

/* The total of the hosts' slots. */
int run_hosts_slots(const run_hosts *hs);

/* Places np ranks by slot (host 1's slots first, then host 2's, like mpirun's --map-by slot):
 * sets first_rank and nranks of every host. 0, or -1 when there are fewer slots than ranks. */
int run_hosts_place(run_hosts *hs, int np);

/* The host index of rank r after run_hosts_place (-1: none). */
int run_hosts_of_rank(const run_hosts *hs, int r);

/* Marks the hosts that are this machine (see run_host_is_local). */
void run_hosts_mark_local(run_hosts *hs);

void run_hosts_free(run_hosts *hs);

/* Is name this machine: localhost, a 127.x address, this host's name (or its short form), or
 * a name that resolves to an address of one of this machine's interfaces (in a network
 * namespace: the namespace's)? */
int run_host_is_local(const char *name);

/* Across hosts, where the launcher's rendezvous store listens (ip; "" for every address) and
 * the address the ranks are given (adv): CHORUS_IFACE's address when set; else the address
 * that this machine's name in hs (its host name when it is not in hs) resolves to, advertised
 * by that name. A name that does not resolve, or resolves to loopback, is refused: the other
 * hosts could not reach it. 0, or -1 with the reason said on stderr. */
int run_store_address(const run_hosts *hs, const chorus_config *cfg, char *ip, size_t iplen,
                      char *adv, size_t advlen);

/* The command that starts an agent on host: the words of rsh (split at blanks), host, self
 * (the path of chorus-run), "--agent", label. NULL-terminated; free with free(). NULL when
 * out of memory or rsh has no word. */
char **run_rsh_argv(const char *rsh, const char *host, const char *self, const char *label);

/* The first string of the agent's job description. */
#define AGENT_MAGIC "chorus-agent 1"

/* Writes all of buf on fd; on a non-blocking fd waits at most 30 s without progress (a remote
 * shell that never reads its stdin), then fails with ETIMEDOUT. 0, or -1 (errno). */
int run_write_all(int fd, const void *buf, size_t n);

/* Writes the agent's job description (see the top of this file) on fd (non-blocking: a
 * remote shell that reads nothing for 30 s is given up). 0, or -1 (errno). */
int run_agent_send(int fd, const char *cwd, char *const *argv, char *const *envp);

/* Tells the agent behind fd to send signal sig to its rank (fd non-blocking; best effort). */
void run_agent_signal(int fd, int sig);

/* Splits buf (len bytes of a buffer of cap) into lines: line(ctx, start, n) for each complete
 * one, without its newline, and for the whole buffer when it is full without one (a very long
 * line, passed on in pieces). Keeps the rest at the start of buf; returns its length. */
size_t run_lines(char *buf, size_t len, size_t cap,
                 void (*line)(void *ctx, const char *s, size_t n), void *ctx);

/* Sends SIGINT, SIGTERM, SIGHUP and SIGCHLD to handler (which wakes a poll loop), and ignores
 * SIGPIPE (a reader that went away is seen as a write error). */
void run_catch_signals(void (*handler)(int));

/* chorus-run --agent LABEL: reads the description on stdin, runs the rank and relays it as
 * described above. Returns the exit code (the rank's status, or 1-2 for the agent's own
 * failures, said on stderr). */
int run_agent_main(int argc, char **argv);

/* ---- the job ------------------------------------------------------------------------ */

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
    struct worker *demux; /* the agent's stdout of a remote rank: framed lines (run.h) */
    FILE *out;            /* the console (NULL: only to the log file) */
    FILE *log;            /* --log-dir: this rank's file for the stream (NULL: none) */
    char buf[65536];
    size_t len;
    char last[200]; /* the last line that was not blank: how a failure is recognised */
} stream;

/* What a rank said on its status pipe (CHORUS_STATUS_FD, base/status.h) about its failure. */
typedef struct status_pipe {
    int fd;
    char buf[2 * CHORUS_STATUS_LINE_MAX];
    size_t len;
    int reported;   /* a "failed" line arrived */
    int blamed;     /* the rank it held responsible, -1: its own failure */
    int blamed_far; /* --nnodes: the rank of another node it held responsible (-1: none) */
    char what[48];  /* the result name it gave (PEER_FAILED: it was told that `blamed` failed) */
    char why[CHORUS_STATUS_LINE_MAX]; /* the message its call failed with ("": none given) */
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
    /* supervision (supervise.c, status.c): the loop that watches the signal pipe and every
     * worker's streams and status pipe, and the outcome the run in progress fills */
    chorus_loop *loop;
    struct outcome *out;
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

/* What the command line asked for beyond the job itself. */
typedef struct run_opts {
    double timeout; /* --timeout: whole-job limit in seconds (0: none) */
    double grace;   /* --grace: seconds the others get to report a failed rank */
    int bind_req;   /* --bind-to: 1 core, 0 none, -1 not given */
    int max_np_set;
    int no_python; /* --no-python: a program named *.py is run as it is, not with Python */
    int prog;      /* index in argv of the program to run */
} run_opts;

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

/* ---- between the files -------------------------------------------------------------- */

/* elastic.c: the generation's membership, once per round of the supervision loop; 0, or the
 * exit status with which the job must stop (too few workers left). */
int elastic_tick(job *j);
/* Kills a worker that cannot take part in the generation being formed, saying why. */
void kill_worker(job *j, worker *w, const char *why);
/* A member of generation gen died: its rendezvous record is spoiled, so that peers still
 * forming gen give up at once and check in for the next one. */
void poison(job *j, long gen, int rank);
/* May another replacement start (--max-restarts left, and the last one did not fail as its
 * predecessor did)? */
int may_replace(const job *j);
/* Says how elastic worker w failed (status, `how` in words) and what happens next. */
void elastic_failed(job *j, worker *w, int status, const char *how);

/* env.c: the CPUs of rank slot `slot` in set when ranks are bound (1), else 0. */
int slot_cpus(const job *j, int slot, cpu_set_t *set);
/* --bind-to: plans a block of CPUs per rank when asked for (requested 1) or by default. */
void plan_binding(job *j, int requested);
/* The environment of a rank (rank -1: an elastic worker, wid its id), or NULL when out of
 * memory; free with free_env. */
char **child_env(const job *j, int rank, int size, int wid);
/* Frees an environment of child_env. */
void free_env(char **envp);
/* The variables of envp that a remote rank's agent is sent (pointers into envp, NULL-terminated;
 * free the array only), or NULL when out of memory. */
char **remote_env(char *const *envp);
/* -x VAR or -x VAR=value: sets it here and sends it to remote ranks. 0, or -1 said. */
int export_var(const char *v);

/* hosts.c: runs the discovery script and merges its hosts into j->hosts; the slots the job can
 * use, or -1 when the script failed. */
int discover(job *j);
/* The workers running on host h, and whether any host runs more than its slots. */
int workers_on(const job *j, int h);
int over_slots(const job *j);
/* The host of a new elastic worker: the first with a free slot (-1: this host only). */
int pick_host(job *j);

/* options.c: the steps of main before anything starts; -1 to go on, else the exit code. */
int parse_args(int argc, char **argv, job *j, run_opts *o);
/* The global rank of this node's first rank (--nnodes): what the [rank] prefixes add. */
extern int run_rank_base;
int check_args(int argc, char **argv, job *j, run_opts *o);
/* CHORUS_SECRET, made here unless the user gave one. 0, or -1 said. */
int make_secret(void);
/* The flag that set the variable an invalid-environment message names ("" when none did). */
const char *env_flag_behind(const char *msg);

/* report.c: a wait status in words ("exited with status 1", "was killed by SIGKILL"). */
void describe_status(int status, char *out, size_t len);
/* Did the status end in failure (not exit 0)? */
int failed_status(int status);
/* "rank 3 (pid 123 on host b)" for worker r, in buf. */
const char *rank_name(const job *j, int r, char *buf, size_t len);
/* The summary of how the job ended, on stderr; returns chorus-run's exit code. */
int report(const job *j, const outcome *out);

/* spawn.c: one process to start (spawn_process): everything the child does between fork and
 * exec, where only async-signal-safe calls are allowed (the store thread may hold the
 * allocator's lock at fork time), is prepared here. */
typedef struct run_child {
    char *const *argv;     /* the program (looked up on PATH) and its arguments */
    char *const *envp;     /* its environment (NULL: this process's) */
    int in, out, err;      /* its stdin, stdout, stderr (-1: this process's; RUN_DEVNULL) */
    int keep;              /* a descriptor it inherits across exec (-1: none) */
    int death_sig;         /* what it is sent when this process dies */
    const cpu_set_t *cpus; /* the CPUs it runs on (NULL: where it likes) */
    const char *execfail;  /* said on its stderr when the program cannot run */
} run_child;
#define RUN_DEVNULL (-2)

/* Starts c in a process group of its own, with SIGPIPE at its default and no signal blocked
 * (the same for a rank here, a remote shell and a rank an agent starts). Returns its pid, or
 * -1 (errno). */
pid_t spawn_process(const run_child *c);
/* Starts rank `rank` of `size` (rank -1: an elastic worker) here or through its host's agent,
 * its streams watched by the supervision loop. The worker, or NULL (errno). */
worker *spawn(job *j, int rank, int size);

/* streams.c: reads what stream `stream_index` (0 stdout, 1 stderr) of w has and passes its
 * lines on; at its end closes it (no longer watched) and returns 0, else 1. */
int pump(job *j, worker *w, int stream_index);
/* --log-dir, --tee, --redirects: where the streams of a new worker go. */
void route_streams(const job *j, worker *w);
/* Pumps what the pipes of an ended worker still hold, so that its last line is known. */
void drain_worker(job *j, worker *w);

/* workers.c: sends sig to every running rank (a remote rank's through its agent). */
void signal_all(job *j, int sig);
/* Workers running and not leaving; of those, the ones whose process has not ended yet. */
int count_alive(const job *j);
int count_left(const job *j);

/* status.c: watches the streams and status pipe of a worker just started (spawn). */
void watch_worker(job *j, worker *w);
/* Stops watching what the workers of a run left open (a rank's children may hold its status
 * pipe): the next run's workers take their place. */
void unwatch_workers(job *j);
/* Reads what worker `index` wrote on its status pipe and takes its lines into out. */
void read_status(job *j, int index, outcome *out);
/* Worker `index` failed at `now`: the first failure of the run is remembered in out. */
void note_failure(worker *w, outcome *out, int index, double now);
/* An expendable rank failed: the job goes on without it. */
void tolerate(job *j, worker *w, outcome *out);
/* Did w fail because it lost the parameter servers (which the job cannot do without)? */
int lost_the_servers(const job *j, const worker *w);

/* supervise.c: makes j's loop, which the signals wake through a pipe. 0, or -1 (errno). */
int supervise_begin(job *j);
/* Step 5 of main: the supervision loop (see supervise.c). */
int supervise(job *j, const run_opts *o, outcome *out);

#endif
