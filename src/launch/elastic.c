/*
 * elastic.c - chorus-run --elastic: the membership of each generation. Workers check in through
 * the store; this file publishes a generation once every live worker has checked in and at
 * least --min-np remain, kills the unresponsive, starts replacements up to --max-np and follows
 * a host discovery script (the keys and values are defined in src/elastic/keys.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "elastic/keys.h"
#include "launch/launch.h"

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

void kill_worker(job *j, worker *w, const char *why)
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
void poison(job *j, long gen, int rank)
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
int may_replace(const job *j)
{
    return j->restarts < j->max_restarts && !j->repeating;
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
void elastic_failed(job *j, worker *w, int status, const char *how)
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

/* A member finished successfully: the generation being formed is released, and workers that
 * joined too late are sent away. */
static void elastic_complete(job *j)
{
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
}

/* The number of workers: what host discovery offers, replacements and new workers started,
 * and the newest workers retired where there are too many. */
static void elastic_size(job *j, double now)
{
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
}

/* The check-ins for the next generation (gen): a worker that reports a peer lost makes that
 * peer a suspect. Returns whether any worker checked in. */
static int elastic_checkins(job *j, long gen, double now)
{
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
    return any;
}

/* Forms generation gen: everyone alive checks in; the unresponsive are removed. Returns 0, or
 * the exit status with which the job must stop (too few workers left). */
static int elastic_form(job *j, long gen, double now)
{
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

/* Returns 0, or the exit status with which the job must stop (too few workers left). */
int elastic_tick(job *j)
{
    double now = chorus__now();
    if (j->completing) {
        elastic_complete(j);
        return 0;
    }
    elastic_size(j, now);
    long gen = j->forming ? j->forming : j->formed + 1;
    int any = elastic_checkins(j, gen, now);
    if (!j->forming && (any || j->scale_down)) start_forming(j, gen);
    if (!j->forming) return 0;
    return elastic_form(j, gen, now);
}
