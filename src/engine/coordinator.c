/*
 * coordinator.c - rank 0's side of the coordinator round. Every rank reports its new names
 * with their metadata (and, when some rank asked for a stall report, every pending name with
 * its age). The coordinator keeps each name until every rank that has not joined reported it,
 * then compares the metadata and answers EXEC (with a response-cache slot) or ERROR (a
 * mismatch naming both ranks and values); a cached name reported as new again (its metadata
 * changed on some rank) is evicted first. The stall inspector warns about names some ranks
 * are missing and, past CHORUS_STALL_SHUTDOWN_S, answers STALL, which stops every engine.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"

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
            chorus__fmt_ranks(si->have, n, 1, have, sizeof(have));
            chorus__fmt_ranks(m, n, 0, miss, sizeof(miss));
            free(m);
            o += (size_t)snprintf(msg + o, sizeof(msg) - o,
                                  "%s'%s' (ready on %s, missing on %s, waiting %.1f s)",
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
        eng_answer *a = calloc(1, sizeof(*a));
        if (!a) return;
        a->type = ENG_ANS_STALL;
        snprintf(a->msg, sizeof(a->msg), "%s", why);
        chorus__engmsg_put_answer(resp, a);
        free(a);
        (*nresp)++;
    }
}

/* The reports of this cycle (stall report entries: name -> which ranks have it, how old). */
typedef struct coord_round {
    eng_buf body; /* answer items */
    uint32_t nresp;
    eng_map stall;
    char **snames;
    size_t nsnames;
    eng_answer *a; /* scratch item */
} coord_round;

static void note_stall(chorus_engine *e, coord_round *k, const char *name, int r, double age)
{
    stall_info *si = chorus__map_get(&k->stall, name);
    if (!si) {
        char **nn = realloc(k->snames, (k->nsnames + 1) * sizeof(char *));
        if (!nn) return;
        k->snames = nn;
        si = calloc(1, sizeof(*si));
        char *copy = strdup(name);
        if (si) si->have = calloc((size_t)e->size, 1);
        if (!si || !si->have || !copy || chorus__map_put(&k->stall, name, si) != 0) {
            if (si) free(si->have);
            free(si);
            free(copy);
            return;
        }
        k->snames[k->nsnames++] = copy;
    }
    si->have[r] = 1;
    if (age > si->age) si->age = age;
}

/* Records rank r's report: its new names (with metadata) and, for a stall report, its pending
 * names with their ages. */
static chorus_result take_report(chorus_engine *e, coord_round *k, const eng_buf *in, int r,
                                 int report)
{
    eng_rd rd = {in->p, in->len, 0, 0};
    char name[ENG_NAME_MAX + 1];
    uint32_t n = chorus__rd_u32(&rd);
    for (uint32_t i = 0; i < n && !rd.bad; i++) {
        eng_meta m;
        if (chorus__engmsg_read_new(&rd, name, &m) != 0) break;
        eng_centry *c = coord_entry(e, name);
        if (!c) return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
        if (!c->have[r]) {
            c->have[r] = 1;
            c->metas[r] = m;
            c->nhave++;
        }
        intptr_t s = (intptr_t)chorus__map_get(&e->cache_map, name);
        if (s && c->cache_slot < 0) { /* cached, yet sent as new: its metadata changed */
            c->cache_slot = (int)s - 1;
            k->a->type = ENG_ANS_EVICT;
            k->a->slot = (int32_t)(s - 1);
            chorus__engmsg_put_answer(&k->body, k->a);
            k->nresp++;
        }
    }
    uint32_t ns = chorus__rd_u32(&rd);
    for (uint32_t i = 0; i < ns && !rd.bad; i++) {
        uint32_t age_ms;
        if (chorus__engmsg_read_stall(&rd, name, &age_ms) != 0) break;
        if (report) note_stall(e, k, name, r, age_ms * 1e-3);
    }
    if (rd.bad)
        return chorus__eng_err(e, CHORUS_ERR_PROTOCOL, "malformed negotiation message from rank %d",
                               r);
    return CHORUS_OK;
}

/* The answer for a name every rank that has not joined has reported, into a: EXEC (returns 1;
 * the caller gives it a cache slot) or ERROR (returns 0). */
static int judge(chorus_engine *e, eng_centry *c, eng_answer *a)
{
    int n = e->size, first = -1, bad = -1;
    for (int r = 0; r < n; r++) {
        if (!c->have[r]) continue;
        if (first < 0)
            first = r;
        else if (bad < 0 && !chorus__meta_equal(&c->metas[first], &c->metas[r]))
            bad = r;
    }
    const eng_meta *m = &c->metas[first];
    snprintf(a->name, sizeof(a->name), "%s", c->name);
    if (bad >= 0) {
        char diff[600];
        chorus__meta_diff(&c->metas[first], first, &c->metas[bad], bad, diff, sizeof(diff));
        a->type = ENG_ANS_ERROR;
        a->code = CHORUS_ERR_MISMATCH;
        snprintf(a->msg, sizeof(a->msg), "tensor '%s': ranks disagree: %s", c->name, diff);
    } else if (m->kind == EK_BROADCAST && e->joined[m->root]) {
        a->type = ENG_ANS_ERROR;
        a->code = CHORUS_ERR_INVALID_ARG;
        snprintf(a->msg, sizeof(a->msg), "broadcast '%s': its root, rank %d, has joined", c->name,
                 (int)m->root);
    } else {
        a->type = ENG_ANS_EXEC;
        a->m = *m;
        a->slot = -1;
        return 1;
    }
    return 0;
}

/* Answers every complete name, in arrival order. Slots in use, or evicted in this answer
 * (their names stay until it is applied), are not given out; a new name gets the lowest free
 * slot. */
static chorus_result answer_complete(chorus_engine *e, coord_round *k)
{
    size_t ntaken = (size_t)e->nslots + e->ncoord + 1;
    uint8_t *taken = calloc(ntaken, 1);
    if (!taken) return chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
    for (int s = 0; s < e->nslots; s++) taken[s] = e->slots[s].name != NULL;
    size_t slot_scan = 0, slot_from = 0;
    for (size_t i = 0; i < e->ncoord;) {
        eng_centry *c = e->coord[i];
        int complete = c->nhave > 0;
        for (int r = 0; r < e->size && complete; r++) complete = c->have[r] || e->joined[r];
        if (!complete) {
            i++;
            continue;
        }
        if (judge(e, c, k->a) && e->live_slots + (int)slot_scan < e->o.cache_capacity) {
            size_t s = slot_from;
            while (s < ntaken && taken[s]) s++;
            slot_from = s;
            if (s < ntaken) {
                taken[s] = 1;
                k->a->slot = (int32_t)s;
                slot_scan++;
            }
        }
        chorus__engmsg_put_answer(&k->body, k->a);
        k->nresp++;
        coord_drop(e, i);
    }
    free(taken);
    return CHORUS_OK;
}

static void coord_round_free(coord_round *k)
{
    for (size_t i = 0; i < k->nsnames; i++) {
        stall_info *si = chorus__map_get(&k->stall, k->snames[i]);
        if (si) {
            free(si->have);
            free(si);
        }
        free(k->snames[i]);
    }
    free(k->snames);
    chorus__map_free(&k->stall);
    free(k->body.p);
    free(k->a);
}

/* Every rank is blocked waiting and no pending name is on every rank that has not joined:
 * nothing can ever run. Each of those names ends on every rank with a mismatch error that
 * names it, where it is pending and where it is missing; the engine goes on. Returns 1 when
 * it answered. */
static int desync_answer(chorus_engine *e, coord_round *k)
{
    int n = e->size;
    if (!k->nsnames) return 0;
    uint8_t *m = malloc((size_t)n);
    if (!m) return 0;
    char list[ENG_MSG_MAX - 400];
    size_t o = 0;
    int shown = 0;
    for (size_t i = 0; i < k->nsnames; i++) {
        stall_info *si = chorus__map_get(&k->stall, k->snames[i]);
        int missing = 0;
        for (int r = 0; r < n; r++) {
            m[r] = si->have[r] || e->joined[r];
            missing += !m[r];
        }
        if (!missing) {
            free(m);
            return 0; /* this one can run */
        }
        if (shown < 6 && o + 400 < sizeof(list)) {
            char have[128], miss[128];
            chorus__fmt_ranks(si->have, n, 1, have, sizeof(have));
            chorus__fmt_ranks(m, n, 0, miss, sizeof(miss));
            o += (size_t)snprintf(list + o, sizeof(list) - o,
                                  "%s'%.100s' (waited for on %s, never submitted on %s)",
                                  shown ? "; " : "", k->snames[i], have, miss);
            shown++;
        }
    }
    free(m);
    if ((size_t)shown < k->nsnames && o + 40 < sizeof(list))
        snprintf(list + o, sizeof(list) - o, "; and %zu more", k->nsnames - (size_t)shown);
    eng_answer *a = k->a;
    for (size_t i = 0; i < k->nsnames; i++) {
        memset(a, 0, sizeof(*a));
        a->type = ENG_ANS_ERROR;
        a->code = CHORUS_ERR_MISMATCH;
        snprintf(a->name, sizeof(a->name), "%s", k->snames[i]);
        snprintf(a->msg, sizeof(a->msg),
                 "ranks desynchronised: every rank is blocked waiting for an operation that "
                 "another rank never submitted: %s. The ranks issued different collectives (in "
                 "another order, with other names, or one rank skipped a call or failed); "
                 "CHORUS_DESYNC_S=%g",
                 list, e->o.desync_s);
        chorus__engmsg_put_answer(&k->body, a);
        k->nresp++;
        eng_centry *c = chorus__map_get(&e->coord_map, k->snames[i]);
        for (size_t j = 0; c && j < e->ncoord; j++)
            if (e->coord[j] == c) {
                coord_drop(e, j);
                break;
            }
    }
    CHORUS_WARN(CHORUS_LOG_ENGINE, "ranks desynchronised: %s", list);
    return 1;
}

chorus_result chorus__eng_coordinate(chorus_engine *e, eng_buf *in, int report, int all_blocked,
                                     eng_buf *resp)
{
    coord_round k;
    memset(&k, 0, sizeof(k));
    k.a = calloc(1, sizeof(*k.a));
    chorus_result res = k.a ? CHORUS_OK : chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
    for (int r = 0; r < e->size && res == CHORUS_OK; r++)
        res = take_report(e, &k, &in[r], r, report);
    if (res == CHORUS_OK) res = answer_complete(e, &k);
    int desync =
        report && all_blocked && e->o.desync_s > 0 && res == CHORUS_OK && desync_answer(e, &k);
    if (report && res == CHORUS_OK && !desync)
        stall_warn(e, &k.stall, k.snames, k.nsnames, &k.body, &k.nresp);
    chorus__eb_u32(resp, k.nresp);
    chorus__eb_raw(resp, k.body.p, k.body.len);
    if ((k.body.oom || resp->oom) && res == CHORUS_OK)
        res = chorus__eng_err(e, CHORUS_ERR_NOMEM, "out of memory");
    coord_round_free(&k);
    return res;
}
