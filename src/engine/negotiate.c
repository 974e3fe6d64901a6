/*
 * negotiate.c - one negotiation cycle of the engine: how the ranks agree, in one order, which
 * named ops are ready everywhere.
 *
 * 1. Every rank contributes a byte vector to one allreduce with CHORUS_MIN on uint8:
 *      [0] reserved  [1] 0 if this rank has names the coordinator has not seen
 *      [2] 0 if this rank asks for a stall report  [3] 1 if this rank has work pending
 *      then two bytes per rank: 0 if that rank has joined / asks for shutdown,
 *      then one byte per response-cache slot: 1 if that cached name is ready here.
 *    MIN makes the slot bytes an AND (ready everywhere) and the flag bytes an OR. In steady
 *    state (every name cached) this allreduce is the whole negotiation.
 * 2. Only when some rank has new names, asks for a stall report, or the set of joined ranks
 *    changed: the coordinator round. Every rank sends rank 0 its new names with their
 *    metadata (and for a stall report every pending name with its age); rank 0 records them,
 *    and when a name has been reported by every rank that has not joined, compares the
 *    metadata and answers EXEC (with a cache slot for it) or ERROR (a mismatch naming both
 *    ranks and values). The answer is broadcast and applied by all ranks in the same order.
 * 3. The agreed list (cached names in slot order, then the coordinator's in its order) is
 *    executed (execute.c).
 */
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "engine/engine_int.h"

#define HDR 4
enum { R_EXEC = 1, R_ERROR = 2, R_EVICT = 3, R_STALL = 4 };

static int stop_with(chorus_engine *e, chorus_result r, const char *msg)
{
    pthread_mutex_lock(&e->mu);
    if (!e->stopped) {
        e->stopped = 1;
        e->stop_res = r;
        snprintf(e->stop_msg, sizeof(e->stop_msg), "%s", msg);
    }
    pthread_mutex_unlock(&e->mu);
    CHORUS_INFO(CHORUS_LOG_ENGINE, "engine stopped: %s", msg);
    return 1;
}

static int comm_failed(chorus_engine *e, chorus_result r, const char *what)
{
    char msg[600];
    snprintf(msg, sizeof(msg), "engine %s failed: %s", what, chorus_last_error(e->comm));
    return stop_with(e, r, msg);
}

/* "0,2-4" for the ranks r with set[r] == want. */
static void fmt_ranks(const uint8_t *set, int n, int want, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    for (int r = 0; r < n && o + 24 < len; r++) {
        if ((set[r] != 0) != want) continue;
        int s = r;
        while (r + 1 < n && (set[r + 1] != 0) == want) r++;
        o += (size_t)snprintf(out + o, len - o, o ? ",%d" : "%d", s);
        if (r > s) o += (size_t)snprintf(out + o, len - o, "-%d", r);
    }
    if (o + 24 >= len) snprintf(out + o, len - o, ",...");
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

/* ---- the coordinator (rank 0) ------------------------------------------------------------- */

typedef struct stall_info {
    uint8_t *have;
    double age;
} stall_info;

static void coord_drop(chorus_engine *e, size_t i)
{
    eng_centry *c = e->coord[i];
    chorus__map_del(&e->coord_map, c->name);
    free(c->name);
    free(c->metas);
    free(c->have);
    free(c);
    memmove(e->coord + i, e->coord + i + 1, (e->ncoord - i - 1) * sizeof(*e->coord));
    e->ncoord--;
}

static eng_centry *coord_entry(chorus_engine *e, const char *name)
{
    eng_centry *c = chorus__map_get(&e->coord_map, name);
    if (c) return c;
    if (e->ncoord == e->cap_coord) {
        size_t nc = e->cap_coord ? e->cap_coord * 2 : 256;
        eng_centry **p = realloc(e->coord, nc * sizeof(*p));
        if (!p) return NULL;
        e->coord = p;
        e->cap_coord = nc;
    }
    c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->name = strdup(name);
    c->metas = calloc((size_t)e->size, sizeof(eng_meta));
    c->have = calloc((size_t)e->size, 1);
    c->cache_slot = -1;
    if (!c->name || !c->metas || !c->have || chorus__map_put(&e->coord_map, name, c) != 0) {
        free(c->name);
        free(c->metas);
        free(c->have);
        free(c);
        return NULL;
    }
    e->coord[e->ncoord++] = c;
    return c;
}

static void stall_warn(chorus_engine *e, eng_map *stall, char **names, size_t nnames, eng_buf *resp,
                       uint32_t *nresp)
{
    int n = e->size;
    double warn = e->o.stall_warn_s, shut = e->o.stall_shutdown_s, worst = 0;
    char msg[2048];
    size_t o = 0;
    int shown = 0, total = 0;
    for (size_t i = 0; i < nnames; i++) {
        stall_info *si = chorus__map_get(stall, names[i]);
        int missing = 0;
        for (int r = 0; r < n; r++) missing += !si->have[r] && !e->joined[r];
        if (!missing || si->age < (warn > 0 ? warn : shut)) continue;
        total++;
        if (si->age > worst) worst = si->age;
        if (shown < 8 && o + 300 < sizeof(msg)) {
            char have[128], miss[128];
            uint8_t *m = malloc((size_t)n);
            if (!m) continue;
            for (int r = 0; r < n; r++) m[r] = si->have[r] || e->joined[r];
            fmt_ranks(si->have, n, 1, have, sizeof(have));
            fmt_ranks(m, n, 0, miss, sizeof(miss));
            free(m);
            o += (size_t)snprintf(msg + o, sizeof(msg) - o,
                                  "%s'%s' (ready on ranks %s, missing on ranks %s, waiting %.1f s)",
                                  shown ? "; " : "", names[i], have, miss, si->age);
            shown++;
        }
    }
    if (!total) return;
    if (total > shown && o + 40 < sizeof(msg))
        snprintf(msg + o, sizeof(msg) - o, "; and %d more", total - shown);
    char line[2400];
    snprintf(line, sizeof(line),
             "stall: %d tensor%s submitted by some ranks but not by others: %s. The missing ranks "
             "are behind, stuck, or took a different code path (CHORUS_STALL_WARN_S=%g)",
             total, total == 1 ? " was" : "s were", msg, warn);
    CHORUS_WARN(CHORUS_LOG_ENGINE, "%s", line);
    const char *df = chorus__config()->debug_file;
    if (!CHORUS__LOG_ON(CHORUS_LOG_WARN) || (df && *df))
        fprintf(stderr, "CHORUS WARN rank %d: %s\n", e->rank, line);
    if (shut > 0 && worst >= shut) {
        char why[2600];
        snprintf(why, sizeof(why), "stall shutdown after %.1f s (CHORUS_STALL_SHUTDOWN_S=%g): %s",
                 worst, shut, msg);
        chorus__eb_u8(resp, R_STALL);
        chorus__eb_str(resp, why);
        (*nresp)++;
    }
}

/* Rank 0: takes every rank's message, answers. */
static chorus_result coordinate(chorus_engine *e, eng_buf *in, int report, eng_buf *resp)
{
    int n = e->size;
    eng_buf body = {0};
    uint32_t nresp = 0;
    eng_map stall = {0};
    char **snames = NULL;
    size_t nsnames = 0;
    chorus_result res = CHORUS_OK;
    char name[ENG_NAME_MAX + 1];
    for (int r = 0; r < n && res == CHORUS_OK; r++) {
        eng_rd rd = {in[r].p, in[r].len, 0, 0};
        uint32_t k = chorus__rd_u32(&rd);
        for (uint32_t i = 0; i < k && !rd.bad; i++) {
            eng_meta m;
            chorus__rd_str(&rd, name, ENG_NAME_MAX);
            chorus__rd_meta(&rd, &m);
            if (rd.bad) break;
            eng_centry *c = coord_entry(e, name);
            if (!c) {
                res = chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
                break;
            }
            if (!c->have[r]) {
                c->have[r] = 1;
                c->metas[r] = m;
                c->nhave++;
            }
            intptr_t s = (intptr_t)chorus__map_get(&e->cache_map, name);
            if (s && c->cache_slot < 0) { /* cached, yet sent as new: its metadata changed */
                c->cache_slot = (int)s - 1;
                chorus__eb_u8(&body, R_EVICT);
                chorus__eb_u32(&body, (uint32_t)(s - 1));
                nresp++;
            }
        }
        uint32_t ns = chorus__rd_u32(&rd);
        for (uint32_t i = 0; i < ns && !rd.bad; i++) {
            chorus__rd_str(&rd, name, ENG_NAME_MAX);
            double age = chorus__rd_u32(&rd) * 1e-3;
            if (rd.bad || !report) continue;
            stall_info *si = chorus__map_get(&stall, name);
            if (!si) {
                char **nn = realloc(snames, (nsnames + 1) * sizeof(char *));
                if (!nn) continue;
                snames = nn;
                si = calloc(1, sizeof(*si));
                char *copy = strdup(name);
                if (si) si->have = calloc((size_t)n, 1);
                if (!si || !si->have || !copy || chorus__map_put(&stall, name, si) != 0) {
                    if (si) free(si->have);
                    free(si);
                    free(copy);
                    continue;
                }
                snames[nsnames++] = copy;
            }
            si->have[r] = 1;
            if (age > si->age) si->age = age;
        }
        if (rd.bad && res == CHORUS_OK)
            res = chorus__fail(&e->comm->err, CHORUS_ERR_PROTOCOL,
                               "malformed negotiation message from rank %d", r);
    }
    /* Slots in use, or evicted in this answer (their names stay until it is applied), are not
     * given out; a new name gets the lowest free slot. */
    size_t ntaken = (size_t)e->nslots + e->ncoord + 1;
    uint8_t *taken = calloc(ntaken, 1);
    if (!taken && res == CHORUS_OK)
        res = chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
    for (int s = 0; taken && s < e->nslots; s++) taken[s] = e->slots[s].name != NULL;
    size_t slot_scan = 0, slot_from = 0;
    for (size_t i = 0; i < e->ncoord && res == CHORUS_OK;) {
        eng_centry *c = e->coord[i];
        int complete = c->nhave > 0;
        for (int r = 0; r < n && complete; r++) complete = c->have[r] || e->joined[r];
        if (!complete) {
            i++;
            continue;
        }
        int first = -1, bad = -1;
        for (int r = 0; r < n; r++) {
            if (!c->have[r]) continue;
            if (first < 0)
                first = r;
            else if (bad < 0 && !chorus__meta_equal(&c->metas[first], &c->metas[r]))
                bad = r;
        }
        const eng_meta *m = &c->metas[first];
        if (bad >= 0) {
            char diff[400], msg[800];
            chorus__meta_diff(&c->metas[first], first, &c->metas[bad], bad, diff, sizeof(diff));
            snprintf(msg, sizeof(msg), "tensor '%s': ranks disagree: %s", c->name, diff);
            chorus__eb_u8(&body, R_ERROR);
            chorus__eb_str(&body, c->name);
            chorus__eb_u8(&body, CHORUS_ERR_MISMATCH);
            chorus__eb_str(&body, msg);
        } else if (m->kind == EK_BROADCAST && e->joined[m->root]) {
            char msg[600];
            snprintf(msg, sizeof(msg), "broadcast '%s': its root, rank %d, has joined", c->name,
                     (int)m->root);
            chorus__eb_u8(&body, R_ERROR);
            chorus__eb_str(&body, c->name);
            chorus__eb_u8(&body, CHORUS_ERR_INVALID_ARG);
            chorus__eb_str(&body, msg);
        } else {
            int slot = -1;
            if (e->live_slots + (int)slot_scan < e->o.cache_capacity) {
                size_t s = slot_from;
                while (s < ntaken && taken[s]) s++;
                slot_from = s;
                if (s < ntaken) {
                    taken[s] = 1;
                    slot = (int)s;
                    slot_scan++;
                }
            }
            chorus__eb_u8(&body, R_EXEC);
            chorus__eb_str(&body, c->name);
            chorus__eb_meta(&body, m);
            chorus__eb_u32(&body, (uint32_t)slot);
        }
        nresp++;
        coord_drop(e, i);
    }
    if (report && res == CHORUS_OK) stall_warn(e, &stall, snames, nsnames, &body, &nresp);
    for (size_t i = 0; i < nsnames; i++) {
        stall_info *si = chorus__map_get(&stall, snames[i]);
        if (si) {
            free(si->have);
            free(si);
        }
        free(snames[i]);
    }
    free(snames);
    chorus__map_free(&stall);
    free(taken);
    chorus__eb_u32(resp, nresp);
    chorus__eb_raw(resp, body.p, body.len);
    if ((body.oom || resp->oom) && res == CHORUS_OK)
        res = chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
    free(body.p);
    return res;
}

/* ---- the cycle ---------------------------------------------------------------------------- */

int chorus__eng_cycle(chorus_engine *e, int shutdown)
{
    int n = e->size, me = e->rank;
    double now = chorus__now();
    int want_report = 0, have_new = 0;
    if (e->npend && (e->o.stall_warn_s > 0 || e->o.stall_shutdown_s > 0)) {
        double oldest = now;
        for (size_t i = 0; i < e->npend; i++)
            if (e->pend[i]->t_enqueue < oldest) oldest = e->pend[i]->t_enqueue;
        double age = now - oldest;
        if (e->o.stall_warn_s > 0 && age >= e->o.stall_warn_s && now >= e->next_stall_report) {
            want_report = 1;
            e->next_stall_report = now + e->o.stall_warn_s;
        }
        if (e->o.stall_shutdown_s > 0 && age >= e->o.stall_shutdown_s) want_report = 1;
    }
    for (size_t i = 0; i < e->npend && !have_new; i++) have_new = e->pend[i]->state == REQ_NEW;

    /* 1. the byte vector */
    size_t L = HDR + 2 * (size_t)n + (size_t)e->nslots;
    uint8_t *v = chorus__eng_grow((void **)&e->vec, &e->vec_cap, L);
    if (!v) return stop_with(e, CHORUS_ERR_NOMEM, "out of memory for the negotiation vector");
    v[0] = 1;
    v[1] = have_new ? 0 : 1;
    v[2] = want_report ? 0 : 1;
    v[3] = e->npend > 0 || e->my_join;
    for (int r = 0; r < n; r++) {
        v[HDR + 2 * r] = r == me && e->my_join ? 0 : 1;
        v[HDR + 2 * r + 1] = r == me && shutdown ? 0 : 1;
    }
    uint8_t *sv = v + HDR + 2 * n;
    for (int s = 0; s < e->nslots; s++)
        sv[s] = e->my_join && e->slots[s].name &&
                !(e->slots[s].m.kind == EK_BROADCAST && e->slots[s].m.root == me);
    for (size_t i = 0; i < e->npend; i++)
        if (e->pend[i]->state == REQ_CACHED) sv[e->pend[i]->slot] = 1;
    chorus_result res = chorus_allreduce(e->comm, v, v, L, CHORUS_UINT8, CHORUS_MIN);
    if (res != CHORUS_OK) return comm_failed(e, res, "negotiation");
    chorus__tl_instant(&e->tl, "CYCLE", now, NULL);

    /* 2. shutdown and join state */
    uint8_t *shut = malloc((size_t)n);
    if (!shut) return stop_with(e, CHORUS_ERR_NOMEM, "out of memory");
    int nshut = 0;
    for (int r = 0; r < n; r++) {
        shut[r] = v[HDR + 2 * r + 1] == 0;
        nshut += shut[r];
        e->joined[r] = v[HDR + 2 * r] == 0;
    }
    if (nshut) {
        char ranks[200], msg[400];
        fmt_ranks(shut, n, 1, ranks, sizeof(ranks));
        free(shut);
        snprintf(msg, sizeof(msg),
                 "the engine was shut down (chorus_engine_shutdown on rank %s) before this op "
                 "ran",
                 ranks);
        return stop_with(e, CHORUS_ERR_ABORTED, msg);
    }
    free(shut);
    int njoined = 0;
    for (int r = 0; r < n; r++) njoined += e->joined[r];
    int all_joined = njoined == n;
    int joined_changed = memcmp(e->joined, e->prev_joined, (size_t)n) != 0;
    e->all_active = v[3];

    /* 3. cached names ready everywhere, in slot order */
    size_t nx = 0, capx = 64;
    eng_exec *x = malloc(capx * sizeof(*x));
    char **grave = NULL;
    size_t ngrave = 0;
    eng_buf resp = {0};
    if (!x) return stop_with(e, CHORUS_ERR_NOMEM, "out of memory");
    int stop = 0;
    uint64_t hits = 0;
    if (!all_joined) {
        for (int s = 0; s < e->nslots; s++) {
            if (!sv[s] || !e->slots[s].name) continue;
            if (nx == capx) {
                eng_exec *p = realloc(x, 2 * capx * sizeof(*x));
                if (!p) {
                    free(x);
                    return stop_with(e, CHORUS_ERR_NOMEM, "out of memory");
                }
                x = p;
                capx *= 2;
            }
            eng_req *r = chorus__map_get(&e->pend_map, e->slots[s].name);
            if (r && !(r->state == REQ_CACHED && r->slot == s)) r = NULL;
            x[nx++] = (eng_exec){r, e->slots[s].name, e->slots[s].m, 1};
            e->slots[s].last_cycle = e->st.cycles;
            hits++;
        }
    }

    /* 4. the coordinator round */
    int coord = !v[1] || !v[2] || joined_changed;
    if (coord) {
        eng_buf mine = {0};
        uint32_t k = 0;
        for (size_t i = 0; i < e->npend; i++) k += e->pend[i]->state == REQ_NEW;
        chorus__eb_u32(&mine, k);
        for (size_t i = 0; i < e->npend; i++) {
            eng_req *r = e->pend[i];
            if (r->state != REQ_NEW) continue;
            chorus__eb_str(&mine, r->name);
            chorus__eb_meta(&mine, &r->m);
            r->state = REQ_SENT;
        }
        if (!v[2]) {
            chorus__eb_u32(&mine, (uint32_t)e->npend);
            for (size_t i = 0; i < e->npend; i++) {
                chorus__eb_str(&mine, e->pend[i]->name);
                double age = (now - e->pend[i]->t_enqueue) * 1e3;
                chorus__eb_u32(&mine, age > 4e9 ? 4000000000u : (uint32_t)age);
            }
        } else {
            chorus__eb_u32(&mine, 0);
        }
        if (mine.oom) {
            free(mine.p);
            free(x);
            return stop_with(e, CHORUS_ERR_NOMEM, "out of memory");
        }
        uint64_t len = mine.len;
        if (me != 0) {
            res = chorus_send(e->comm, &len, 1, CHORUS_INT64, 0, 1);
            if (res == CHORUS_OK) res = chorus_send(e->comm, mine.p, len, CHORUS_UINT8, 0, 2);
            free(mine.p);
        } else {
            eng_buf *in = calloc((size_t)n, sizeof(eng_buf));
            if (!in) res = chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
            for (int r = 0; r < n && res == CHORUS_OK; r++) {
                if (r == 0) {
                    in[0] = mine;
                    mine.p = NULL;
                    continue;
                }
                uint64_t l;
                res = chorus_recv(e->comm, &l, 1, CHORUS_INT64, r, 1);
                if (res != CHORUS_OK) break;
                if (l > ((uint64_t)1 << 32)) {
                    res = chorus__fail(&e->comm->err, CHORUS_ERR_PROTOCOL,
                                       "negotiation message of %llu bytes from rank %d",
                                       (unsigned long long)l, r);
                    break;
                }
                in[r].p = malloc(l ? l : 1);
                in[r].len = l;
                if (!in[r].p) {
                    res = chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
                    break;
                }
                res = chorus_recv(e->comm, in[r].p, l, CHORUS_UINT8, r, 2);
            }
            if (res == CHORUS_OK) res = coordinate(e, in, !v[2], &resp);
            for (int r = 0; in && r < n; r++) free(in[r].p);
            free(in);
            free(mine.p);
        }
        uint64_t rlen = resp.len;
        if (res == CHORUS_OK) res = chorus_broadcast(e->comm, &rlen, 1, CHORUS_INT64, 0);
        if (res == CHORUS_OK && me != 0) {
            if (rlen > ((uint64_t)1 << 32)) {
                res = chorus__fail(&e->comm->err, CHORUS_ERR_PROTOCOL,
                                   "negotiation answer of %llu bytes", (unsigned long long)rlen);
            } else {
                resp.p = malloc(rlen ? rlen : 1);
                resp.len = rlen;
                if (!resp.p) res = chorus__fail(&e->comm->err, CHORUS_ERR_NOMEM, "out of memory");
            }
        }
        if (res == CHORUS_OK) res = chorus_broadcast(e->comm, resp.p, rlen, CHORUS_UINT8, 0);
        if (res != CHORUS_OK) {
            free(resp.p);
            free(x);
            return comm_failed(e, res, "coordinator round");
        }
        /* apply the answer, in order */
        eng_rd rd = {resp.p, resp.len, 0, 0};
        uint32_t k2 = chorus__rd_u32(&rd);
        char name[ENG_NAME_MAX + 1];
        for (uint32_t i = 0; i < k2 && !rd.bad && !stop; i++) {
            uint8_t type = chorus__rd_u8(&rd);
            if (type == R_EVICT) {
                evict(e, (int)chorus__rd_u32(&rd), &grave, &ngrave);
            } else if (type == R_EXEC) {
                eng_meta m;
                chorus__rd_str(&rd, name, ENG_NAME_MAX);
                chorus__rd_meta(&rd, &m);
                int slot = (int)chorus__rd_u32(&rd);
                if (rd.bad) break;
                eng_req *r = chorus__map_get(&e->pend_map, name);
                if (!r && !e->joined[me]) {
                    stop =
                        stop_with(e, CHORUS_ERR_INTERNAL,
                                  "the coordinator scheduled a tensor this rank never submitted");
                    break;
                }
                if (slot >= 0 && cache_insert(e, slot, name, &m) != 0) {
                    stop = stop_with(e, CHORUS_ERR_NOMEM, "out of memory for the response cache");
                    break;
                }
                if (nx == capx) {
                    eng_exec *p = realloc(x, 2 * capx * sizeof(*x));
                    if (!p) {
                        stop = stop_with(e, CHORUS_ERR_NOMEM, "out of memory");
                        break;
                    }
                    x = p;
                    capx *= 2;
                }
                /* the name must outlive this loop: the request's, or the cache slot's */
                const char *nm = r ? r->name : slot >= 0 ? e->slots[slot].name : NULL;
                if (!nm) {
                    char *copy = strdup(name);
                    char **g = realloc(grave, (ngrave + 1) * sizeof(char *));
                    if (!copy || !g) {
                        free(copy);
                        if (g) grave = g;
                        stop = stop_with(e, CHORUS_ERR_NOMEM, "out of memory");
                        break;
                    }
                    grave = g;
                    grave[ngrave++] = copy;
                    nm = copy;
                }
                x[nx++] = (eng_exec){r, nm, m, 0};
            } else if (type == R_ERROR) {
                char msg[1024];
                chorus__rd_str(&rd, name, ENG_NAME_MAX);
                uint8_t code = chorus__rd_u8(&rd);
                chorus__rd_str(&rd, msg, sizeof(msg) - 1);
                if (rd.bad) break;
                eng_req *r = chorus__map_get(&e->pend_map, name);
                if (r) chorus__eng_complete(e, r, (chorus_result)code, msg);
            } else if (type == R_STALL) {
                char msg[2700];
                chorus__rd_str(&rd, msg, sizeof(msg) - 1);
                if (rd.bad) break;
                stop = stop_with(e, CHORUS_ERR_TIMEOUT, msg);
            } else {
                rd.bad = 1;
            }
        }
        if (rd.bad && !stop)
            stop = stop_with(e, CHORUS_ERR_PROTOCOL, "malformed answer from the coordinator");
    }

    /* statistics first: a handle that ends below must see its cycle counted */
    pthread_mutex_lock(&e->mu);
    e->st.cycles++;
    e->st.coord_rounds += (uint64_t)coord;
    e->st.cache_hits += hits;
    pthread_mutex_unlock(&e->mu);

    /* 5. run what was agreed */
    size_t executed = 0;
    if (!stop && nx) {
        double t = chorus__now();
        for (size_t i = 0; i < nx; i++)
            if (x[i].req) x[i].req->t_agreed = t;
        res = chorus__eng_execute(e, x, nx);
        if (res != CHORUS_OK) stop = comm_failed(e, res, "collective");
        executed = nx;
    }
    if (executed) e->last_progress = chorus__now();

    /* 6. join ends when every rank has joined */
    if (!stop && all_joined) {
        int last = -1;
        for (int r = 0; r < n; r++)
            if (!e->prev_joined[r]) last = r;
        if (e->my_join) {
            e->my_join->h->last_rank = last;
            chorus__eng_complete(e, e->my_join, CHORUS_OK, NULL);
        }
        memset(e->joined, 0, (size_t)n);
    }
    memcpy(e->prev_joined, e->joined, (size_t)n);
    for (size_t i = 0; i < ngrave; i++) free(grave[i]);
    free(grave);
    free(resp.p);
    free(x);
    chorus__tl_flush(&e->tl, now);
    return stop;
}
