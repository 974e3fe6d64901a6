/*
 * run_remote.h - chorus-run across hosts: the host list (-H, --hostfile, a discovery script's
 * lines), placement of ranks by slot, whether a host is this machine, and the agent that
 * chorus-run starts on every other host through the remote shell (one per remote rank).
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
#ifndef CHORUS_TOOLS_RUN_REMOTE_H
#define CHORUS_TOOLS_RUN_REMOTE_H

#include <stddef.h>

#include "base/base.h"

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

#endif
