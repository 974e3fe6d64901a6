/*
 * options.c - the command line: chorus-run's options, the flags of horovodrun, torchrun and
 * mpirun that map onto them (or are refused with what to use instead), --help and --help-env,
 * and the checks made before anything starts.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "launch/launch.h"

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
int make_secret(void)
{
    if (chorus__config_text("CHORUS_SECRET", NULL)) return 0;
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
const char *env_flag_behind(const char *msg)
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
    chorus_job_vars job;
    chorus__job_vars_read(&job);
    const char *v = job.MASTER_PORT;
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
    const char *v = chorus__config_text("CHORUS_PS_SERVERS", NULL);
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
    const char *from, *f = chorus__config_text("CHORUS_TIMELINE", &from);
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
    fprintf(stderr, "chorus-run: %s%s%s: the directory %s %s\n",
            env_flag_used[0] ? "--timeline-filename " : from, env_flag_used[0] ? "" : "=", f, dir,
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
int parse_args(int argc, char **argv, job *j, run_opts *o)
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
    chorus_job_vars job;
    chorus__job_vars_read(&job);
    if (!j->nnodes && (v = job.PET_NNODES) && check_nnodes(v, j)) return 2;
    if (j->nnodes <= 1) return -1;
    if (j->np < 1 && (v = job.PET_NPROC_PER_NODE) &&
        parse_int_arg("PET_NPROC_PER_NODE", v, 1, 4096, &j->np))
        return 2;
    if (j->node_rank < 0 && (v = job.PET_NODE_RANK) &&
        parse_int_arg("PET_NODE_RANK", v, 0, 4095, &j->node_rank))
        return 2;
    if (j->node_rank < 0 && (v = job.JOB_COMPLETION_INDEX) &&
        parse_int_arg("JOB_COMPLETION_INDEX", v, 0, 4095, &j->node_rank))
        return 2;
    if (!j->master_addr[0] && ((v = job.PET_MASTER_ADDR) || (v = job.MASTER_ADDR)))
        snprintf(j->master_addr, sizeof(j->master_addr), "%s", v);
    v = job.MASTER_PORT ? job.MASTER_PORT : job.PET_MASTER_PORT; /* --master-port's too */
    j->store_port = 29500;
    if (v && parse_int_arg("--master-port", v, 1, 65534, &j->store_port)) return 2;
    const char *missing = j->node_rank < 0     ? "--node-rank I (this node's index, 0 to N-1)"
                          : !j->master_addr[0] ? "--master-addr HOST (where node 0 is)"
                          : !chorus__config_text("CHORUS_SECRET", NULL)
                              ? "CHORUS_SECRET (the same on every node)"
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
int check_args(int argc, char **argv, job *j, run_opts *o)
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
    const char *b =
        chorus__config_text("CHORUS_BIND", NULL); /* checked with the rest of the config later */
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
    if (j->nnodes > 1) run_rank_base = j->base = j->node_rank * j->np;
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
