/*
 * negotiate.c - one negotiation cycle of the engine: how the ranks agree, in one order, which
 * named ops are ready everywhere.
 *
 * 1. Every rank contributes a byte vector to one allreduce with CHORUS_MIN on uint8:
 *      [0] 1 if this rank has been blocked (a thread waiting on a pending op) without
 *          progress for CHORUS_DESYNC_S
 *      [1] 0 if this rank has names the coordinator has not seen
 *      [2] 0 if this rank asks for a stall report  [3] 1 if this rank has work pending
 *      then two bytes per rank: 0 if that rank has joined / asks for shutdown,
 *      then one byte per response-cache slot: 1 if that cached name is ready here.
 *    MIN makes the slot bytes and [0] an AND (ready / blocked everywhere) and the flag bytes
 *    an OR. A rank blocked for CHORUS_DESYNC_S without progress asks for a stall report; when
 *    every rank has been blocked that long and no pending name is on every rank, nothing can
 *    ever run: the coordinator ends those names with a mismatch error on every rank. In
 *    steady
 *    state (every name cached) this allreduce is the whole negotiation.
 * 2. Only when some rank has new names, asks for a stall report, or the set of joined ranks
 *    changed: the coordinator round. Every rank sends rank 0 its new names with their
 *    metadata (and for a stall report every pending name with its age); rank 0 records them,
 *    and when a name has been reported by every rank that has not joined, compares the
 *    metadata and answers EXEC (with a cache slot for it) or ERROR (a mismatch naming both
 *    ranks and values). The answer is broadcast and applied by all ranks in the same order.
 * 3. The agreed list (cached names in slot order, then the coordinator's in its order) is
 *    executed (execute.c).
 * chorus__eng_cycle below runs these as one function per phase. The coordinator's side is in
 * coordinator.c; the messages are encoded and parsed by src/wire/engine_msg.c.
 */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "coll/comm.h"
#include "engine/engine_int.h"

#define HDR 4

/* Marks the engine stopped with r; msg is what ops still pending (or enqueued later) fail
 * with. */
static void set_stopped(chorus_engine *e, chorus_result r, const char *msg)
{
    pthread_mutex_lock(&e->mu);
    if (!e->stopped) {
        e->stopped = 1;
        e->stop_res = r;
        snprintf(e->stop_msg, sizeof(e->stop_msg), "%s", msg);
    }
    pthread_mutex_unlock(&e->mu);
}

int chorus__eng_stop(chorus_engine *e, chorus_result r, const char *msg)
{
    set_stopped(e, r, msg);
    CHORUS_INFO(CHORUS_LOG_ENGINE, "engine stopped: %s", msg);
    return 1;
}

/* Stops the engine after a failed step: the detail is the engine's own (chorus__eng_err) when
 * it set one, else the communicator's (a collective failed). */
static int step_failed(chorus_engine *e, chorus_result r, const char *what)
{
    char msg[800];
    snprintf(msg, sizeof(msg), "engine %s failed: %s", what,
             e->thr_err[0] ? e->thr_err : chorus_last_error(e->comm));
    e->thr_err[0] = 0;
    return chorus__eng_stop(e, r, msg);
}

static void evict(chorus_engine *e, int s, char ***grave, size_t *ngrave)
{
    if (s < 0 || s >= e->nslots || !e->slots[s].name) return;
    eng_req *r = chorus__map_get(&e->pend_map, e->slots[s].name);
    if (r && r->state == REQ_CACHED && r->slot == s) {
        r->state = REQ_NEW;
        r->slot = -1;
        e->n_cached_ready--;
    }
    chorus__map_del(&e->cache_map, e->slots[s].name);
    char **g = realloc(*grave, (*ngrave + 1) * sizeof(char *));
    if (g) {
        *grave = g;
        g[(*ngrave)++] = e->slots[s].name;
    } else {
        free(e->slots[s].name); /* nothing can point at it yet: evictions precede execs */
    }
    e->slots[s].name = NULL;
    e->live_slots--;
}

static int cache_insert(chorus_engine *e, int s, const char *name, const eng_meta *m)
{
    if (s >= e->nslots) {
        eng_slot *p = realloc(e->slots, (size_t)(s + 1) * sizeof(*p));
        if (!p) return -1;
        memset(p + e->nslots, 0, (size_t)(s + 1 - e->nslots) * sizeof(*p));
        e->slots = p;
        e->nslots = s + 1;
    }
    if (e->slots[s].name) return -1;
    e->slots[s].name = strdup(name);
    if (!e->slots[s].name || chorus__map_put(&e->cache_map, name, (void *)(intptr_t)(s + 1)) != 0) {
        free(e->slots[s].name);
        e->slots[s].name = NULL;
        return -1;
    }
    e->slots[s].m = *m;
    e->slots[s].last_cycle = e->st.cycles;
    e->live_slots++;
    return 0;
}

/* ---- the cycle ---------------------------------------------------------------------------- */

/* What one cycle has learnt so far. */
typedef struct cycle {
    double now;
    int shutdown;              /* this rank asks for shutdown */
    int want_report, have_new; /* this rank's flags */
    int blocked;               /* ... and has for CHORUS_DESYNC_S without progress */
    uint8_t *v, *sv;           /* the byte vector and its slot part */
    int all_joined, coord;     /* every rank joined; a coordinator round is needed */
    eng_exec *x;               /* the agreed list */
    size_t nx, capx;
    char **grave; /* names that must outlive the cycle's list (evicted slots, joined ranks) */
    size_t ngrave;
    eng_buf resp; /* the coordinator's answer */
    uint64_t hits;
} cycle;

static int push_exec(chorus_engine *e, cycle *c, eng_exec x)
{
    if (c->nx == c->capx) {
        size_t nc = c->capx ? 2 * c->capx : 64;
        eng_exec *p = realloc(c->x, nc * sizeof(*p));
        if (!p) return chorus__eng_stop(e, CHORUS_ERR_NOMEM, "out of memory");
        c->x = p;
        c->capx = nc;
    }
    c->x[c->nx++] = x;
    return 0;
}

/* Is a thread of this rank blocked waiting on one of its pending ops? Then the rank cannot
 * submit anything else (unless another thread does) until one of them runs. */
static int is_blocked(const chorus_engine *e)
{
    if (e->my_join && __atomic_load_n(&e->my_join->h->waiting, __ATOMIC_RELAXED)) return 1;
    for (size_t i = 0; i < e->npend; i++)
        if (__atomic_load_n(&e->pend[i]->h->waiting, __ATOMIC_RELAXED)) return 1;
    return 0;
}

/* A rank blocked without progress for CHORUS_DESYNC_S asks for a stall report (once per
 * period), in which the coordinator checks whether every rank is blocked for good. */
static void desync_flag(chorus_engine *e, cycle *c)
{
    if (e->o.desync_s <= 0 || !is_blocked(e)) {
        e->blocked_since = 0;
        return;
    }
    if (e->blocked_since == 0) e->blocked_since = c->now;
    double since = e->blocked_since > e->last_progress ? e->blocked_since : e->last_progress;
    if (c->now - since < e->o.desync_s) return;
    c->blocked = 1;
    if (c->now >= e->next_desync_report) {
        c->want_report = 1;
        e->next_desync_report = c->now + e->o.desync_s;
    }
}

/* Phase 0: does this rank have new names, or pending names old enough for a stall report? */
static void phase_flags(chorus_engine *e, cycle *c)
{
    desync_flag(e, c);
    if (e->npend && (e->o.stall_warn_s > 0 || e->o.stall_shutdown_s > 0)) {
        double oldest = c->now;
        for (size_t i = 0; i < e->npend; i++)
            if (e->pend[i]->t_enqueue < oldest) oldest = e->pend[i]->t_enqueue;
        double age = c->now - oldest;
        if (e->o.stall_warn_s > 0 && age >= e->o.stall_warn_s && c->now >= e->next_stall_report) {
            c->want_report = 1;
            e->next_stall_report = c->now + e->o.stall_warn_s;
        }
        if (e->o.stall_shutdown_s > 0 && age >= e->o.stall_shutdown_s) c->want_report = 1;
    }
    for (size_t i = 0; i < e->npend && !c->have_new; i++)
        c->have_new = e->pend[i]->state == REQ_NEW;
}

/* Phase 1: the byte vector, reduced with MIN over every rank. */
static int phase_vector(chorus_engine *e, cycle *c)
{
    int n = e->size, me = e->rank;
    size_t L = HDR + 2 * (size_t)n + (size_t)e->nslots;
    uint8_t *v = chorus__eng_grow((void **)&e->vec, &e->vec_cap, L);
    if (!v)
        return chorus__eng_stop(e, CHORUS_ERR_NOMEM, "out of memory for the negotiation vector");
    v[0] = (uint8_t)c->blocked;
    v[1] = c->have_new ? 0 : 1;
    v[2] = c->want_report ? 0 : 1;
    v[3] = e->npend > 0 || e->my_join;
    for (int r = 0; r < n; r++) {
        v[HDR + 2 * r] = r == me && e->my_join ? 0 : 1;
        v[HDR + 2 * r + 1] = r == me && c->shutdown ? 0 : 1;
    }
    uint8_t *sv = v + HDR + 2 * n;
    for (int s = 0; s < e->nslots; s++)
        sv[s] = e->my_join && e->slots[s].name &&
                !(e->slots[s].m.kind == EK_BROADCAST && e->slots[s].m.root == me);
    for (size_t i = 0; i < e->npend; i++)
        if (e->pend[i]->state == REQ_CACHED) sv[e->pend[i]->slot] = 1;
    chorus_result res = chorus_allreduce(e->comm, v, v, L, CHORUS_UINT8, CHORUS_MIN);
    if (res != CHORUS_OK) return step_failed(e, res, "negotiation");
    chorus__tl_instant(&e->tl, "CYCLE", c->now, NULL);
    c->v = v;
    c->sv = sv;
    return 0;
}

/* Phase 2: shutdown (any rank asking stops every engine) and who has joined. */
static int phase_states(chorus_engine *e, cycle *c)
{
    int n = e->size, nshut = 0, njoined = 0;
    uint8_t *shut = malloc((size_t)n);
    if (!shut) return chorus__eng_stop(e, CHORUS_ERR_NOMEM, "out of memory");
    for (int r = 0; r < n; r++) {
        shut[r] = c->v[HDR + 2 * r + 1] == 0;
        nshut += shut[r];
        e->joined[r] = c->v[HDR + 2 * r] == 0;
        njoined += e->joined[r];
    }
    if (nshut) {
        char ranks[200], msg[400];
        chorus__fmt_ranks(shut, n, 1, ranks, sizeof(ranks));
        int culprit = -1; /* a peer stopped the engine under this rank's pending work */
        for (int r = 0; r < n && culprit < 0; r++)
            if (shut[r] && r != e->rank) culprit = r;
        free(shut);
        snprintf(msg, sizeof(msg),
                 "the engine was shut down (chorus_engine_shutdown on %s) before this op ran",
                 ranks);
        if (culprit >= 0 && e->npend)
            chorus__status_failed(e->comm->world[e->rank], e->comm->world[culprit],
                                  CHORUS_ERR_ABORTED, msg);
        /* A shutdown is how an engine ends, not a failure: only ops still pending fail. */
        set_stopped(e, CHORUS_ERR_ABORTED, msg);
        CHORUS_INFO(CHORUS_LOG_ENGINE, "engine shut down (chorus_engine_shutdown on %s)",
                    nshut == n ? "every rank" : ranks);
        return 1;
    }
    free(shut);
    c->all_joined = njoined == n;
    int joined_changed = memcmp(e->joined, e->prev_joined, (size_t)n) != 0;
    e->all_active = c->v[3];
    c->coord = !c->v[1] || !c->v[2] || joined_changed;
    return 0;
}

/* Phase 3: cached names ready on every rank, in slot order. */
static int phase_cached(chorus_engine *e, cycle *c)
{
    if (c->all_joined) return 0;
    for (int s = 0; s < e->nslots; s++) {
        if (!c->sv[s] || !e->slots[s].name) continue;
        eng_req *r = chorus__map_get(&e->pend_map, e->slots[s].name);
        if (r && !(r->state == REQ_CACHED && r->slot == s)) r = NULL;
        if (push_exec(e, c, (eng_exec){r, e->slots[s].name, e->slots[s].m, 1, 0})) return 1;
        e->slots[s].last_cycle = e->st.cycles;
        c->hits++;
    }
    return 0;
}

/* This rank's report to the coordinator: new names with metadata, then (for a stall report)
 * every pending name with its age. */
static int write_report(chorus_engine *e, cycle *c, eng_buf *mine)
{
    uint32_t k = 0;
    for (size_t i = 0; i < e->npend; i++) k += e->pend[i]->state == REQ_NEW;
    chorus__eb_u32(mine, k);
    for (size_t i = 0; i < e->npend; i++) {
        eng_req *r = e->pend[i];
        if (r->state != REQ_NEW) continue;
        chorus__engmsg_put_new(mine, r->name, &r->m);
        r->state = REQ_SENT;
    }
    int report = !c->v[2];
    chorus__eb_u32(mine, report ? (uint32_t)e->npend : 0);
    for (size_t i = 0; report && i < e->npend; i++) {
        double age = (c->now - e->pend[i]->t_enqueue) * 1e3;
        chorus__engmsg_put_stall(mine, e->pend[i]->name, age > 4e9 ? 4000000000u : (uint32_t)age);
    }
    if (!mine->oom) return 0;
    return chorus__eng_stop(e, CHORUS_ERR_NOMEM, "out of memory");
}

/* Rank 0: every other rank's report (length, then bytes), then the answer. */
static chorus_result collect_and_answer(chorus_engine *e, cycle *c, eng_buf *mine)
{
    int n = e->size;
    eng_buf *in = calloc((size_t)n, sizeof(eng_buf));
    if (!in) return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
    chorus_result res = CHORUS_OK;
    in[0] = *mine;
    mine->p = NULL;
    for (int r = 1; r < n && res == CHORUS_OK; r++) {
        uint64_t l;
        res = chorus_recv(e->comm, &l, 1, CHORUS_INT64, r, 1);
        if (res != CHORUS_OK) break;
        if (l > ((uint64_t)1 << 32)) {
            res = chorus__eng_err(e, CHORUS_ERR_PROTOCOL,
                                  "negotiation message of %llu bytes from rank %d",
                                  (unsigned long long)l, r);
            break;
        }
        in[r].p = malloc(l ? l : 1);
        in[r].len = l;
        if (!in[r].p) {
            res = chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
            break;
        }
        res = chorus_recv(e->comm, in[r].p, l, CHORUS_UINT8, r, 2);
    }
    if (res == CHORUS_OK) res = chorus__eng_coordinate(e, in, !c->v[2], c->v[0], &c->resp);
    for (int r = 0; r < n; r++) free(in[r].p);
    free(in);
    return res;
}

/* Phase 4a: the reports go to rank 0 and its answer comes back to every rank. */
static int phase_exchange(chorus_engine *e, cycle *c)
{
    eng_buf mine = {0};
    if (write_report(e, c, &mine)) {
        free(mine.p);
        return 1;
    }
    chorus_result res;
    if (e->rank != 0) {
        uint64_t len = mine.len;
        res = chorus_send(e->comm, &len, 1, CHORUS_INT64, 0, 1);
        if (res == CHORUS_OK) res = chorus_send(e->comm, mine.p, len, CHORUS_UINT8, 0, 2);
    } else {
        res = collect_and_answer(e, c, &mine);
    }
    free(mine.p);
    uint64_t rlen = c->resp.len;
    if (res == CHORUS_OK) res = chorus_broadcast(e->comm, &rlen, 1, CHORUS_INT64, 0);
    if (res == CHORUS_OK && e->rank != 0) {
        if (rlen > ((uint64_t)1 << 32)) {
            res = chorus__eng_err(e, CHORUS_ERR_PROTOCOL, "negotiation answer of %llu bytes",
                                  (unsigned long long)rlen);
        } else {
            c->resp.p = malloc(rlen ? rlen : 1);
            c->resp.len = rlen;
            if (!c->resp.p) res = chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
        }
    }
    if (res == CHORUS_OK) res = chorus_broadcast(e->comm, c->resp.p, rlen, CHORUS_UINT8, 0);
    if (res != CHORUS_OK) return step_failed(e, res, "coordinator round");
    return 0;
}

static int keep_name(chorus_engine *e, cycle *c, const char *name, const char **out)
{
    char *copy = strdup(name);
    char **g = realloc(c->grave, (c->ngrave + 1) * sizeof(char *));
    if (g) c->grave = g;
    if (!copy || !g) {
        free(copy);
        return chorus__eng_stop(e, CHORUS_ERR_NOMEM, "out of memory");
    }
    c->grave[c->ngrave++] = copy;
    *out = copy;
    return 0;
}

/* One EXEC item: cache it, and add it to the agreed list. */
static int apply_exec(chorus_engine *e, cycle *c, const eng_answer *a)
{
    eng_req *r = chorus__map_get(&e->pend_map, a->name);
    if (!r && !e->joined[e->rank])
        return chorus__eng_stop(e, CHORUS_ERR_INTERNAL,
                                "the coordinator scheduled a tensor this rank never submitted");
    if (a->slot >= 0 && cache_insert(e, a->slot, a->name, &a->m) != 0)
        return chorus__eng_stop(e, CHORUS_ERR_NOMEM, "out of memory for the response cache");
    /* the name must outlive the list: the request's, or the cache slot's, or a copy */
    const char *nm = r ? r->name : a->slot >= 0 ? e->slots[a->slot].name : NULL;
    if (!nm && keep_name(e, c, a->name, &nm)) return 1;
    return push_exec(e, c, (eng_exec){r, nm, a->m, 0, 0});
}

/* Phase 4b: the answer, applied in order by every rank. */
static int phase_apply(chorus_engine *e, cycle *c)
{
    eng_answer *a = malloc(sizeof(*a));
    if (!a) return chorus__eng_stop(e, CHORUS_ERR_NOMEM, "out of memory");
    eng_rd rd = {c->resp.p, c->resp.len, 0, 0};
    uint32_t k = chorus__rd_u32(&rd);
    int stop = 0;
    for (uint32_t i = 0; i < k && !stop; i++) {
        if (chorus__engmsg_read_answer(&rd, a) != 0) break;
        if (a->type == ENG_ANS_EVICT) {
            evict(e, a->slot, &c->grave, &c->ngrave);
        } else if (a->type == ENG_ANS_EXEC) {
            stop = apply_exec(e, c, a);
        } else if (a->type == ENG_ANS_ERROR) {
            eng_req *r = chorus__map_get(&e->pend_map, a->name);
            if (r) chorus__eng_complete(e, r, (chorus_result)a->code, a->msg);
        } else {
            stop = chorus__eng_stop(e, CHORUS_ERR_TIMEOUT, a->msg);
        }
    }
    free(a);
    if (rd.bad && !stop)
        stop = chorus__eng_stop(e, CHORUS_ERR_PROTOCOL, "malformed answer from the coordinator");
    return stop;
}

/* Phase 5: the cycle is counted (a handle that ends below must see its cycle counted), then
 * the agreed list is run. */
static void count_cycle(chorus_engine *e, const cycle *c)
{
    pthread_mutex_lock(&e->mu);
    e->st.cycles++;
    e->st.coord_rounds += (uint64_t)c->coord;
    e->st.cache_hits += c->hits;
    pthread_mutex_unlock(&e->mu);
}

static int phase_execute(chorus_engine *e, cycle *c)
{
    if (!c->nx) return 0;
    double t = chorus__now();
    for (size_t i = 0; i < c->nx; i++)
        if (c->x[i].req) c->x[i].req->t_agreed = t;
    chorus_result res = chorus__eng_execute(e, c->x, c->nx);
    if (res != CHORUS_OK) return step_failed(e, res, "collective");
    e->last_progress = chorus__now();
    return 0;
}

/* Phase 6: a join ends when every rank has joined. */
static void phase_join(chorus_engine *e, cycle *c)
{
    int n = e->size;
    if (c->all_joined) {
        int last = -1;
        for (int r = 0; r < n; r++)
            if (!e->prev_joined[r]) last = r;
        if (e->my_join) {
            e->my_join->h->last_rank = last;
            chorus__eng_complete(e, e->my_join, CHORUS_OK, NULL);
        }
        memset(e->joined, 0, (size_t)n);
    }
}

int chorus__eng_cycle(chorus_engine *e, int shutdown)
{
    cycle c;
    memset(&c, 0, sizeof(c));
    c.now = chorus__now();
    c.shutdown = shutdown;
    phase_flags(e, &c);
    int stop = phase_vector(e, &c) || phase_states(e, &c) || phase_cached(e, &c) ||
               (c.coord && phase_exchange(e, &c));
    if (!stop) {
        if (c.coord) stop = phase_apply(e, &c);
        count_cycle(e, &c);
        if (!stop) stop = phase_execute(e, &c);
        if (!stop) {
            chorus_result tr = chorus__tune_cycle(e, c.x, c.nx);
            if (tr != CHORUS_OK) stop = step_failed(e, tr, "autotune decision");
        }
        if (!stop) phase_join(e, &c);
        memcpy(e->prev_joined, e->joined, (size_t)e->size);
    }
    for (size_t i = 0; i < c.ngrave; i++) free(c.grave[i]);
    free(c.grave);
    free(c.resp.p);
    free(c.x);
    chorus__tl_flush(&e->tl, c.now);
    return stop;
}
