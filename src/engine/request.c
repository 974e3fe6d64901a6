/*
 * request.c - the engine's requests and their handles: a handle is made when an op is
 * enqueued and shared by the caller and the engine (reference counted); the engine thread
 * keeps the requests it has absorbed from the queue in the pending set (an array for the
 * cycle's scans plus a map by name), and ends each one exactly once, with its result, through
 * chorus__eng_complete (callback first, then the waiters).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"

/* ---- handles ------------------------------------------------------------------------------ */

chorus_engine_handle *chorus__handle_new(const char *name, const chorus_engine_tensor_opts *o,
                                         int caller_ref)
{
    chorus_engine_handle *h = calloc(1, sizeof(*h));
    if (!h) return NULL;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->refs = 1 + (caller_ref ? 1 : 0);
    h->caller_ref = caller_ref != 0;
    h->last_rank = -1;
    snprintf(h->name, sizeof(h->name), "%s", name);
    if (o) {
        h->cb = o->callback;
        h->cb_arg = o->callback_arg;
    }
    return h;
}

/* ---- the names taken ----------------------------------------------------------------------- */

eng_names *chorus__names_new(void)
{
    eng_names *n = calloc(1, sizeof(*n));
    if (!n) return NULL;
    pthread_mutex_init(&n->mu, NULL);
    n->refs = 1;
    return n;
}

void chorus__names_unref(eng_names *n)
{
    if (!n) return;
    pthread_mutex_lock(&n->mu);
    int last = --n->refs == 0;
    pthread_mutex_unlock(&n->mu);
    if (!last) return;
    chorus__map_free(&n->map);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

int chorus__names_take(eng_names *n, chorus_engine_handle *h)
{
    pthread_mutex_lock(&n->mu);
    int r = chorus__map_get(&n->map, h->name) ? 1 : chorus__map_put(&n->map, h->name, h);
    if (r == 0) n->refs++;
    pthread_mutex_unlock(&n->mu);
    if (r == 0) __atomic_store_n(&h->names, n, __ATOMIC_RELEASE);
    return r;
}

/* Gives h's name back (once; any thread). */
static void give_name_back(chorus_engine_handle *h)
{
    eng_names *n = __atomic_exchange_n(&h->names, NULL, __ATOMIC_ACQ_REL);
    if (!n) return;
    pthread_mutex_lock(&n->mu);
    if (chorus__map_get(&n->map, h->name) == h) chorus__map_del(&n->map, h->name);
    pthread_mutex_unlock(&n->mu);
    chorus__names_unref(n);
}

void chorus__handle_unref(chorus_engine_handle *h)
{
    if (__atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    give_name_back(h);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->msg);
    free(h->out);
    free(h->rank_rows);
    free(h);
}

void chorus_engine_release(chorus_engine_handle *h)
{
    if (!h) return;
    /* before its end the name stays taken: the op is still pending on this rank */
    pthread_mutex_lock(&h->mu);
    int ended = h->done;
    if (!ended) h->caller_gone = 1;
    pthread_mutex_unlock(&h->mu);
    if (ended) give_name_back(h);
    chorus__handle_unref(h);
}

/* Polls h for CHORUS_ENGINE_WAIT_SPIN_US, yielding the core between polls (to the engine
 * thread, when it shares the core), before the caller sleeps on the condition variable. */
static void spin_wait(chorus_engine_handle *h)
{
    int us = chorus__config()->engine_wait_spin_us;
    if (us <= 0 || __atomic_load_n(&h->done, __ATOMIC_ACQUIRE)) return;
    __atomic_add_fetch(&h->waiting, 1, __ATOMIC_RELAXED); /* blocked, as far as desync goes */
    double until = chorus__now() + us * 1e-6;
    while (!__atomic_load_n(&h->done, __ATOMIC_ACQUIRE) && chorus__now() < until) sched_yield();
    __atomic_sub_fetch(&h->waiting, 1, __ATOMIC_RELAXED);
}

chorus_result chorus_engine_wait(chorus_engine_handle *h)
{
    if (!h) return CHORUS_ERR_INVALID_ARG;
    spin_wait(h);
    pthread_mutex_lock(&h->mu);
    if (!h->done) {
        /* the engine thread reads this to tell a rank that is blocked from one that is busy */
        __atomic_add_fetch(&h->waiting, 1, __ATOMIC_RELAXED);
        while (!h->done) pthread_cond_wait(&h->cv, &h->mu);
        __atomic_sub_fetch(&h->waiting, 1, __ATOMIC_RELAXED);
    }
    chorus_result r = h->res;
    pthread_mutex_unlock(&h->mu);
    give_name_back(h);
    return r;
}

int chorus_engine_poll(const chorus_engine_handle *h)
{
    if (!h) return 1;
    chorus_engine_handle *m = (chorus_engine_handle *)h;
    pthread_mutex_lock(&m->mu);
    int d = m->done;
    pthread_mutex_unlock(&m->mu);
    if (d) give_name_back(m);
    return d;
}

const char *chorus_engine_handle_last_error(const chorus_engine_handle *h)
{
    return h ? chorus_engine_handle_error(h) : chorus__init_errbuf()->msg;
}

const char *chorus_engine_handle_error(const chorus_engine_handle *h)
{
    if (!h) return "";
    chorus_engine_handle *m = (chorus_engine_handle *)h;
    pthread_mutex_lock(&m->mu);
    const char *s = m->done && m->msg ? m->msg : "";
    pthread_mutex_unlock(&m->mu);
    return s;
}

const char *chorus_engine_handle_name(const chorus_engine_handle *h)
{
    return h ? h->name : "";
}

void *chorus_engine_take_output(chorus_engine_handle *h, size_t *rows)
{
    if (rows) *rows = 0;
    if (!h) return NULL;
    pthread_mutex_lock(&h->mu);
    void *p = NULL;
    if (h->done && h->res == CHORUS_OK) {
        p = h->out;
        h->out = NULL;
        if (rows && p) *rows = h->out_rows;
    }
    pthread_mutex_unlock(&h->mu);
    return p;
}

size_t chorus_engine_output_rows(const chorus_engine_handle *h, int rank)
{
    if (!h) return 0;
    chorus_engine_handle *m = (chorus_engine_handle *)h;
    pthread_mutex_lock(&m->mu);
    size_t n = m->done && m->rank_rows && rank >= 0 && rank < m->nranks ? m->rank_rows[rank] : 0;
    pthread_mutex_unlock(&m->mu);
    return n;
}

/* ---- completion (engine thread) ----------------------------------------------------------- */

void chorus__req_free(eng_req *r)
{
    free(r->input);
    free(r->name);
    free(r);
}

void chorus__eng_complete(chorus_engine *e, eng_req *r, chorus_result res, const char *msg)
{
    if (r->pidx < e->npend && e->pend[r->pidx] == r) chorus__eng_pend_remove(e, r);
    if (r == e->my_join) e->my_join = NULL;
    pthread_mutex_lock(&e->mu);
    if (r->m.kind == EK_JOIN) e->join_pending = 0;
    if (res == CHORUS_OK) e->st.tensors++;
    pthread_mutex_unlock(&e->mu);
    chorus_engine_handle *h = r->h;
    /* The name is given back once the caller has seen the end (wait, poll, release), so that
     * a second op under it is refused or not by the caller's own order of calls, never by how
     * fast the engine ran the first; where nobody holds the handle, before the callback (which
     * may enqueue under the name again), and again after the end for a release meanwhile. */
    pthread_mutex_lock(&h->mu);
    h->res = res;
    if (res != CHORUS_OK) h->msg = strdup(msg && *msg ? msg : chorus_strerror(res));
    int nobody_waits = !h->caller_ref || h->caller_gone;
    pthread_mutex_unlock(&h->mu);
    if (nobody_waits) give_name_back(h);
    /* The callback runs before the handle is done, so a wait or poll that sees it done also
     * sees everything the callback did. */
    if (h->cb) h->cb(h, res, h->cb_arg);
    pthread_mutex_lock(&h->mu);
    __atomic_store_n(&h->done, 1, __ATOMIC_RELEASE); /* also read without mu: spin_wait */
    nobody_waits = h->caller_gone;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (nobody_waits) give_name_back(h);
    chorus__handle_unref(h);
    chorus__req_free(r);
}

void chorus__eng_fail_all(chorus_engine *e, chorus_result res, const char *msg)
{
    char m[800];
    while (e->npend) {
        eng_req *r = e->pend[e->npend - 1];
        snprintf(m, sizeof(m), "'%s': %s", r->name, msg);
        chorus__eng_complete(e, r, res, m);
    }
    if (e->my_join) chorus__eng_complete(e, e->my_join, res, msg);
}

/* ---- the pending set (engine thread) ----------------------------------------------------- */

void chorus__eng_pend_add(chorus_engine *e, eng_req *r)
{
    if (e->npend == e->cap_pend) {
        size_t nc = e->cap_pend ? e->cap_pend * 2 : 256;
        eng_req **p = realloc(e->pend, nc * sizeof(*p));
        if (!p) {
            chorus__eng_complete(e, r, CHORUS_ERR_NOMEM, "out of memory");
            return;
        }
        e->pend = p;
        e->cap_pend = nc;
    }
    if (chorus__map_put(&e->pend_map, r->name, r) != 0) {
        chorus__eng_complete(e, r, CHORUS_ERR_NOMEM, "out of memory");
        return;
    }
    r->pidx = e->npend;
    e->pend[e->npend++] = r;
    intptr_t s = (intptr_t)chorus__map_get(&e->cache_map, r->name);
    if (s && chorus__meta_equal(&e->slots[s - 1].m, &r->m)) {
        r->state = REQ_CACHED;
        r->slot = (int)s - 1;
        e->n_cached_ready++;
    } else {
        r->state = REQ_NEW;
    }
}

void chorus__eng_pend_remove(chorus_engine *e, eng_req *r)
{
    size_t i = r->pidx;
    e->pend[i] = e->pend[--e->npend];
    e->pend[i]->pidx = i;
    r->pidx = (size_t)-1;
    chorus__map_del(&e->pend_map, r->name);
    if (r->state == REQ_CACHED) e->n_cached_ready--;
}
