/*
 * report.c - how a job ended, told: which rank failed first and why (the root cause among the
 * ranks that failed on its account), the hosts that lost each other, the ranks tolerated, and
 * the exit status chorus-run returns.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <string.h>
#include <unistd.h>

#include "launch/launch.h"

void describe_status(int status, char *out, size_t len)
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

int failed_status(int status)
{
    return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
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
const char *rank_name(const job *j, int r, char *buf, size_t len)
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

/* A rank that reported its failure and was then stopped by a signal may have died before it
 * printed its message: the message it reported on its status pipe, shown for it. */
static void reported_message(const job *j, int r)
{
    const worker *w = &j->w[r];
    if (w->st.reported && w->st.why[0] && WIFSIGNALED(w->status))
        fprintf(stderr, "chorus-run: rank %d had reported %s: %s\n", r + j->base, w->st.what,
                w->st.why);
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
    reported_message(j, cause);
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
        reported_message(j, r);
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
int report(const job *j, const outcome *out)
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
