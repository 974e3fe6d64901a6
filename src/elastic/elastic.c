/*
 * elastic.c - elastic training (include/chorus/elastic.h): registered state with in-memory
 * commit/restore, state sync from the most advanced rank, and the loop that re-forms the job
 * after a lost peer or a membership change.
 *
 * The rendezvous with chorus-run --elastic goes through keys of the launcher's store, all
 * defined in keys.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/env.h"
#include "bootstrap/store.h"
#include "chorus/elastic.h"
#include "coll/comm.h"
#include "elastic/keys.h"

typedef struct var {
    char name[64];
    void *buf;
    size_t bytes;
    void *saved;
} var;

struct chorus_elastic {
    chorus_comm *comm;
    int elastic; /* launched by chorus-run --elastic */
    int wid;
    char job[64];
    char store_addr[256];
    chorus_store *store;
    long gen;     /* generation of comm (0: none yet) */
    int *members; /* worker id of each rank of comm */
    int nmembers;
    int suspect; /* worker id this worker lost last, -1 */
    var *vars;
    int nvars, capvars;
    int64_t commits; /* state version; -1 before the first sync */
    int has_saved;
    chorus_errbuf err;
};

#define FAIL(el, r, ...) chorus__fail(&(el)->err, r, __VA_ARGS__)

chorus_result chorus_elastic_create(chorus_elastic **out)
{
    if (!out)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_elastic_create: out is NULL");
    *out = NULL;
    chorus_elastic *el = calloc(1, sizeof(*el));
    if (!el) return CHORUS_ERR_NOMEM;
    el->commits = -1;
    el->suspect = -1;
    el->wid = -1;
    chorus_config cfg;
    chorus_result r = chorus__config_load(&cfg, chorus__init_errbuf());
    if (r != CHORUS_OK) {
        free(el);
        return r;
    }
    el->elastic = cfg.elastic;
    if (el->elastic) {
        const char *s = cfg.store_addr, *j = cfg.job_id;
        if (cfg.worker_id < 0 || !s || !j) {
            r = chorus__fail(
                chorus__init_errbuf(), CHORUS_ERR_ENV,
                "CHORUS_ELASTIC=1 needs CHORUS_WORKER_ID, CHORUS_STORE_ADDR and CHORUS_JOB_ID "
                "(launch with chorus-run --elastic)");
            free(el);
            return r;
        }
        el->wid = (int)cfg.worker_id;
        snprintf(el->store_addr, sizeof(el->store_addr), "%s", s);
        snprintf(el->job, sizeof(el->job), "%s", j);
    }
    *out = el;
    return CHORUS_OK;
}

void chorus_elastic_destroy(chorus_elastic *el)
{
    if (!el) return;
    if (el->comm) chorus_finalize(el->comm);
    chorus__store_close(el->store);
    for (int i = 0; i < el->nvars; i++) free(el->vars[i].saved);
    free(el->vars);
    free(el->members);
    free(el);
}

chorus_result chorus_elastic_register(chorus_elastic *el, const char *name, void *buf, size_t bytes)
{
    if (!el)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_elastic_register: NULL state");
    if (!name || !*name || strlen(name) >= sizeof(el->vars[0].name) || (bytes && !buf))
        return FAIL(el, CHORUS_ERR_INVALID_ARG,
                    "chorus_elastic_register: need a name of 1 to 63 bytes and a buffer (name "
                    "'%s', %zu bytes at %p)",
                    name ? name : "(null)", bytes, buf);
    for (int i = 0; i < el->nvars; i++)
        if (!strcmp(el->vars[i].name, name))
            return FAIL(el, CHORUS_ERR_INVALID_ARG,
                        "chorus_elastic_register: '%s' is already "
                        "registered",
                        name);
    if (el->nvars == el->capvars) {
        int nc = el->capvars ? 2 * el->capvars : 8;
        var *nv = realloc(el->vars, (size_t)nc * sizeof(var));
        if (!nv) return FAIL(el, CHORUS_ERR_NOMEM, "out of memory");
        el->vars = nv;
        el->capvars = nc;
    }
    var *v = &el->vars[el->nvars];
    memset(v, 0, sizeof(*v));
    snprintf(v->name, sizeof(v->name), "%s", name);
    v->buf = buf;
    v->bytes = bytes;
    v->saved = malloc(bytes ? bytes : 1);
    if (!v->saved) return FAIL(el, CHORUS_ERR_NOMEM, "out of memory for %zu bytes", bytes);
    el->nvars++;
    el->has_saved = 0; /* a commit must cover every buffer */
    return CHORUS_OK;
}

static void save(chorus_elastic *el)
{
    for (int i = 0; i < el->nvars; i++)
        if (el->vars[i].bytes) memcpy(el->vars[i].saved, el->vars[i].buf, el->vars[i].bytes);
    el->has_saved = 1;
}

chorus_result chorus_elastic_restore(chorus_elastic *el)
{
    if (!el)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_elastic_restore: NULL state");
    if (!el->has_saved) return CHORUS_OK;
    for (int i = 0; i < el->nvars; i++)
        if (el->vars[i].bytes) memcpy(el->vars[i].buf, el->vars[i].saved, el->vars[i].bytes);
    return CHORUS_OK;
}

static void copy_comm_error(chorus_elastic *el, chorus_comm *c)
{
    const char *m = chorus_last_error(c);
    if (m && *m) snprintf(el->err.msg, sizeof(el->err.msg), "%s", m);
}

/* Rank 0 asks the launcher whether a generation is pending; every rank gets the answer. */
static chorus_result membership_pending(chorus_elastic *el, int64_t *pending)
{
    *pending = 0;
    if (chorus_rank(el->comm) == 0) {
        char *v = NULL;
        int found = 0;
        chorus_errbuf e;
        if (chorus__store_check(el->store, CHORUS_EL_NEXT, &v, NULL, &found, &e) != CHORUS_OK)
            CHORUS_WARN(CHORUS_LOG_ELASTIC, "cannot ask the launcher about membership: %s", e.msg);
        else if (found && strtol(v, NULL, 10) > el->gen)
            *pending = 1;
        free(v);
    }
    chorus_result r = chorus_broadcast(el->comm, pending, 1, CHORUS_INT64, 0);
    if (r != CHORUS_OK) copy_comm_error(el, el->comm);
    return r;
}

chorus_result chorus_elastic_commit(chorus_elastic *el)
{
    if (!el)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_elastic_commit: NULL state");
    if (!el->comm)
        return FAIL(el, CHORUS_ERR_INVALID_ARG,
                    "chorus_elastic_commit: no communicator (call it from the train function)");
    save(el);
    el->commits++;
    if (!el->elastic) return CHORUS_OK;
    int64_t pending;
    CHORUS_CHECK(membership_pending(el, &pending));
    if (pending)
        return FAIL(el, CHORUS_ERR_MEMBERSHIP,
                    "workers are joining or leaving: the job re-forms at commit %lld",
                    (long long)el->commits);
    return CHORUS_OK;
}

static uint64_t layout_hash(const chorus_elastic *el)
{
    uint64_t h = 0;
    for (int i = 0; i < el->nvars; i++) {
        uint64_t b = el->vars[i].bytes;
        h = chorus__hash64_seed(h, el->vars[i].name, strlen(el->vars[i].name));
        h = chorus__hash64_seed(h, &b, sizeof(b));
    }
    return h;
}

chorus_result chorus_elastic_sync(chorus_elastic *el)
{
    if (!el)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_elastic_sync: NULL state");
    chorus_comm *c = el->comm;
    if (!c) return FAIL(el, CHORUS_ERR_INVALID_ARG, "chorus_elastic_sync: no communicator");
    int n = chorus_size(c);
    int64_t mine[3] = {el->commits, el->nvars, (int64_t)layout_hash(el)};
    int64_t *all = malloc(sizeof(int64_t) * 3 * (size_t)n);
    if (!all) return FAIL(el, CHORUS_ERR_NOMEM, "out of memory");
    chorus_result r = chorus_allgather(c, mine, all, 3, CHORUS_INT64);
    if (r != CHORUS_OK) {
        free(all);
        copy_comm_error(el, c);
        return r;
    }
    int src = 0;
    int64_t best = -1;
    for (int p = 0; p < n; p++) {
        if (all[3 * p + 1] != mine[1] || all[3 * p + 2] != mine[2]) {
            long long theirs = (long long)all[3 * p + 1];
            free(all);
            return FAIL(el, CHORUS_ERR_MISMATCH,
                        "chorus_elastic_sync: rank %d registered different state buffers than "
                        "rank %d (%lld vs %lld buffers, or other names or sizes)",
                        p, chorus_rank(c), theirs, (long long)mine[1]);
        }
        if (all[3 * p] > best) {
            best = all[3 * p];
            src = p;
        }
    }
    free(all);
    for (int i = 0; i < el->nvars; i++) {
        r = chorus_broadcast(c, el->vars[i].buf, el->vars[i].bytes, CHORUS_UINT8, src);
        if (r != CHORUS_OK) {
            copy_comm_error(el, c);
            return r;
        }
    }
    CHORUS_INFO(CHORUS_LOG_ELASTIC, "state in sync: commit %lld from rank %d of %d",
                (long long)(best < 0 ? 0 : best), src, n);
    el->commits = best < 0 ? 0 : best;
    save(el);
    return CHORUS_OK;
}

/* ---- forming a generation --------------------------------------------------------------- */

/* Parses "<g> <n> <w0> ... <wn-1>" into el->members; returns this worker's rank or -1. */
static int parse_members(chorus_elastic *el, const char *v, long gen, int *size)
{
    char *end;
    long g = strtol(v, &end, 10);
    long n = strtol(end, &end, 10);
    if (g != gen || n < 1 || n > 1 << 20) return -2;
    int *m = malloc(sizeof(int) * (size_t)n);
    if (!m) return -2;
    int me = -1;
    for (long i = 0; i < n; i++) {
        char *e2;
        long w = strtol(end, &e2, 10);
        if (e2 == end) {
            free(m);
            return -2;
        }
        end = e2;
        m[i] = (int)w;
        if (w == el->wid) me = (int)i;
    }
    free(el->members);
    el->members = m;
    el->nmembers = (int)n;
    *size = (int)n;
    return me;
}

static chorus_result rendezvous(chorus_elastic *el)
{
    chorus_errbuf *e = &el->err;
    if (!el->store)
        CHORUS_CHECK(
            chorus__store_connect(el->store_addr, el->job, chorus__deadline(), &el->store, e));
    char *v = NULL;
    int found = 0;
    CHORUS_CHECK(chorus__store_check(el->store, CHORUS_EL_NEXT, &v, NULL, &found, e));
    long target = found ? strtol(v, NULL, 10) : 1;
    free(v);
    if (target <= el->gen) target = el->gen + 1;
    for (int attempt = 0; attempt < 10000; attempt++) {
        char key[80], val[32], *m = NULL;
        chorus_el_key_in(key, sizeof(key), target, el->wid);
        snprintf(val, sizeof(val), "%d", el->suspect);
        CHORUS_CHECK(chorus__store_set(el->store, key, val, strlen(val), e));
        chorus_el_key_round(key, sizeof(key), target);
        chorus_result r = chorus__store_get(el->store, key, &m, NULL, chorus__deadline(), e);
        if (r != CHORUS_OK)
            return FAIL(el, r,
                        "worker %d could not join generation %ld of the elastic job: %s (did the "
                        "launcher stop the job?)",
                        el->wid, target, e->msg);
        if (!strcmp(m, CHORUS_EL_ROUND_DONE)) {
            free(m);
            return FAIL(el, CHORUS_ERR_MEMBERSHIP,
                        "the elastic job finished before worker %d could join it", el->wid);
        }
        int size = 0, rank = parse_members(el, m, target, &size);
        free(m);
        if (rank == -2)
            return FAIL(el, CHORUS_ERR_PROTOCOL, "malformed membership of generation %ld", target);
        if (rank < 0) {
            chorus_el_key_out(key, sizeof(key), el->wid);
            CHORUS_CHECK(chorus__store_check(el->store, key, &v, NULL, &found, e));
            if (found) {
                chorus_result rr =
                    FAIL(el, CHORUS_ERR_MEMBERSHIP,
                         "worker %d was retired from the elastic job: %s", el->wid, v);
                free(v);
                return rr;
            }
            target++; /* formed without us (we came late): the next one */
            continue;
        }
        chorus_job job;
        memset(&job, 0, sizeof(job));
        job.launcher = "chorus-run --elastic";
        job.rank = rank;
        job.size = size;
        job.local_rank = job.local_size = -1;
        chorus_el_gen_job(job.job, sizeof(job.job), el->job, target);
        snprintf(job.store_addr, sizeof(job.store_addr), "%s", el->store_addr);
        chorus_comm *c = NULL;
        r = chorus__init_job(&job, &c);
        el->gen = target;
        el->suspect = -1;
        if (r != CHORUS_OK) {
            /* someone died while the generation formed: the next one goes without it */
            CHORUS_WARN(CHORUS_LOG_ELASTIC, "generation %ld failed to form: %s", target,
                        chorus_last_error(NULL));
            target++;
            continue;
        }
        el->comm = c;
        CHORUS_INFO(CHORUS_LOG_ELASTIC, "worker %d is rank %d of %d in generation %ld", el->wid,
                    rank, size, target);
        return CHORUS_OK;
    }
    return FAIL(el, CHORUS_ERR_TIMEOUT, "worker %d gave up joining the elastic job", el->wid);
}

static int recoverable(chorus_result r)
{
    return r == CHORUS_ERR_PEER_LOST || r == CHORUS_ERR_TIMEOUT || r == CHORUS_ERR_ABORTED ||
           r == CHORUS_ERR_MEMBERSHIP;
}

chorus_result chorus_elastic_run(chorus_elastic *el, chorus_elastic_train_fn train,
                                 chorus_elastic_reset_fn reset, void *arg)
{
    if (!el || !train)
        return chorus__fail(el ? &el->err : chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_elastic_run: %s is NULL", el ? "train" : "state");
    for (;;) {
        if (!el->comm) {
            chorus_result r;
            if (el->elastic) {
                r = rendezvous(el);
            } else {
                r = chorus_init(&el->comm);
                if (r != CHORUS_OK)
                    snprintf(el->err.msg, sizeof(el->err.msg), "%s", chorus_last_error(NULL));
                if (r == CHORUS_OK) el->wid = chorus_rank(el->comm);
                el->gen = 1;
            }
            if (r != CHORUS_OK) return r;
        }
        chorus_result r = chorus_elastic_sync(el);
        if (r == CHORUS_OK && reset) r = reset(el, el->comm, arg);
        if (r == CHORUS_OK) r = train(el, el->comm, arg);
        if (r == CHORUS_OK) return CHORUS_OK;
        if (el->err.msg[0] == 0 || r != CHORUS_ERR_MEMBERSHIP) copy_comm_error(el, el->comm);
        if (!el->elastic || !recoverable(r)) return r;
        int lost = chorus__comm_culprit(el->comm);
        if (lost >= 0 && lost < el->nmembers && r != CHORUS_ERR_MEMBERSHIP)
            el->suspect = el->members[lost];
        CHORUS_WARN(CHORUS_LOG_ELASTIC,
                    "worker %d: generation %ld ended (%s: %s); back to commit %lld and re-forming",
                    el->wid, el->gen, chorus_strerror(r), el->err.msg, (long long)el->commits);
        chorus_elastic_restore(el);
        chorus_finalize(el->comm);
        el->comm = NULL;
    }
}

chorus_comm *chorus_elastic_comm(const chorus_elastic *el)
{
    return el ? el->comm : NULL;
}

int64_t chorus_elastic_commits(const chorus_elastic *el)
{
    return el ? el->commits : -1;
}

long chorus_elastic_generation(const chorus_elastic *el)
{
    return el ? el->gen : 0;
}

int chorus_elastic_worker_id(const chorus_elastic *el)
{
    return el ? el->wid : -1;
}

const char *chorus_elastic_last_error(const chorus_elastic *el)
{
    return el ? el->err.msg : chorus_last_error(NULL);
}
