/*
 * pmix.c - rank 0's store address shared through the launcher's PMIx server (pmix.h).
 * libpmix.so.2 is opened at run time and only the few calls needed are looked up. The types
 * below are the parts of PMIx's stable ABI (pmix_common.h, unchanged since PMIx 2) that these
 * calls use: a process name is a 256-byte namespace and a 32-bit rank; a value is a 16-bit type
 * and an 8-byte-aligned union (only its string member is read or written here); an info is a
 * 512-byte key, 32-bit flags and a value.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap/pmix.h"

/* The key is "chorus.store.<n>", n counting this process's rendezvous through PMIx: a second
 * world formed in the same job (chorus_init again) then does not depend on how a PMIx version
 * treats a key put twice; every rank makes the same calls in the same order, so n agrees. */
#define PMIX_KEY_STORE "chorus.store"
enum { PMIX_BOOL = 1, PMIX_STRING = 3, PMIX_INT = 6 }; /* data types */
enum { PMIX_GLOBAL = 3 };                              /* scope of a put */

typedef int pmix_status_t;
typedef struct {
    char nspace[256];
    uint32_t rank;
} pmix_proc_t;
typedef struct {
    uint16_t type;
    union {
        _Bool flag;
        int integer;
        char *string;
        unsigned char size[24]; /* the union's size in pmix_common.h */
    } data;
} pmix_value_t;
typedef struct {
    char key[512];
    uint32_t flags;
    pmix_value_t value;
} pmix_info_t;
typedef void (*pmix_op_cbfunc_t)(pmix_status_t status, void *cbdata);

/* The PMIx calls used, looked up once. */
static struct {
    pmix_status_t (*init)(pmix_proc_t *, pmix_info_t *, size_t);
    pmix_status_t (*finalize)(const pmix_info_t *, size_t);
    pmix_status_t (*put)(int, const char *, pmix_value_t *);
    pmix_status_t (*commit)(void);
    pmix_status_t (*fence_nb)(const pmix_proc_t *, size_t, const pmix_info_t *, size_t,
                              pmix_op_cbfunc_t, void *);
    pmix_status_t (*get)(const pmix_proc_t *, const char *, const pmix_info_t *, size_t,
                         pmix_value_t **);
    const char *(*error_string)(pmix_status_t);
} px;

/* Opens libpmix and looks up every call; on failure e says what to do instead. */
static chorus_result pmix_load(chorus_errbuf *e)
{
    static const char *const names[] = {"libpmix.so.2", "libpmix.so"};
    void *h = NULL;
    for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "the ranks span hosts and no meeting point was given, so Chorus asks "
                            "the launcher's PMIx server for rank 0's address, but libpmix.so.2 "
                            "cannot be loaded (%s): install libpmix2, or pass -x MASTER_ADDR=<host "
                            "of rank 0> -x MASTER_PORT=<free port>",
                            dlerror());
    *(void **)&px.init = dlsym(h, "PMIx_Init");
    *(void **)&px.finalize = dlsym(h, "PMIx_Finalize");
    *(void **)&px.put = dlsym(h, "PMIx_Put");
    *(void **)&px.commit = dlsym(h, "PMIx_Commit");
    *(void **)&px.fence_nb = dlsym(h, "PMIx_Fence_nb");
    *(void **)&px.get = dlsym(h, "PMIx_Get");
    *(void **)&px.error_string = dlsym(h, "PMIx_Error_string");
    if (!px.init || !px.finalize || !px.put || !px.commit || !px.fence_nb || !px.get ||
        !px.error_string)
        return chorus__fail(e, CHORUS_ERR_ENV,
                            "the libpmix found lacks the calls Chorus needs (PMIx 2 or later): "
                            "pass -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=<free port>");
    return CHORUS_OK;
}

/* "<call> failed: <PMIx's words> (PMIx status N)<hint>" */
static chorus_result pmix_failed(const char *call, pmix_status_t st, const char *hint,
                                 chorus_errbuf *e)
{
    return chorus__fail(e, CHORUS_ERR_ENV, "%s failed: %s (PMIx status %d)%s", call,
                        px.error_string(st), st, hint);
}

/* The process's one PMIx session: opened at its first rendezvous through PMIx and finalized at
 * exit, never in between. A process that finalized PMIx and initialized it again (chorus_init
 * after chorus_finalize) is a client the launcher saw finalize coming back under the same name
 * (namespace and rank): with Open MPI 4.1's mpirun the fence of the second rendezvous then now
 * and then never completed (about 1 in 20, a pause between the two changed nothing), every rank
 * waiting in it until the timeout. One session has no second PMIx_Init. Guarded by mu. */
static struct {
    pthread_mutex_t mu;
    int open;       /* PMIx_Init succeeded */
    int exit_hook;  /* session_close registered with atexit */
    int fence_left; /* a fence timed out and may still be pending at the server */
    pmix_proc_t me; /* this process's name, from PMIx_Init */
} session = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* At exit: PMIx_Finalize, which the launcher expects from every client that initialized (Open
 * MPI's mpirun reports a process that exits without it as an abnormal termination) - unless a
 * fence was left behind, which the server may still be waiting to complete. */
static void session_close(void)
{
    pthread_mutex_lock(&session.mu);
    if (session.open && !session.fence_left) px.finalize(NULL, 0);
    session.open = 0;
    pthread_mutex_unlock(&session.mu);
}

/* The session, opened if it is not yet; me receives this process's name. */
static chorus_result session_open(pmix_proc_t *me, chorus_errbuf *e)
{
    pmix_status_t st = 0;
    pthread_mutex_lock(&session.mu);
    if (!session.open) {
        memset(&session.me, 0, sizeof(session.me));
        st = px.init(&session.me, NULL, 0);
        session.open = st == 0;
        if (session.open && !session.exit_hook) session.exit_hook = atexit(session_close) == 0;
        if (session.open)
            CHORUS_INFO(CHORUS_LOG_INIT,
                        "PMIx session opened (namespace %.64s, rank %u); it stays open for "
                        "every world this process forms and is finalized at exit",
                        session.me.nspace, (unsigned)session.me.rank);
    }
    memcpy(me, &session.me, sizeof(*me));
    pthread_mutex_unlock(&session.mu);
    if (st != 0)
        return pmix_failed("PMIx_Init", st,
                           ": PMIX_NAMESPACE is set but no PMIx server answered (start the job "
                           "with mpirun, or pass MASTER_ADDR and MASTER_PORT)",
                           e);
    return CHORUS_OK;
}

/* A fence in flight, with its info array, which PMIx may read until the callback. Heap-allocated:
 * when the wait times out the callback may still come, and finds it there (it is then never
 * freed). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    pmix_status_t status;
    pmix_info_t info[2];
} fence_wait;

static void fence_free(fence_wait *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

static void fence_done(pmix_status_t status, void *arg)
{
    fence_wait *w = arg;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Fence of the whole namespace, collecting the data put before it, until deadline. */
static chorus_result fence(double deadline, chorus_errbuf *e)
{
    fence_wait *w = calloc(1, sizeof(*w));
    if (!w) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    pmix_info_t *info = w->info;
    snprintf(info[0].key, sizeof(info[0].key), "pmix.collect");
    info[0].value.type = PMIX_BOOL;
    info[0].value.data.flag = 1;
    double left = deadline - chorus__now();
    snprintf(info[1].key, sizeof(info[1].key), "pmix.timeout"); /* the server's own bound */
    info[1].value.type = PMIX_INT;
    info[1].value.data.integer = left > 1 ? (int)left : 1;
    pmix_status_t st = px.fence_nb(NULL, 0, info, 2, fence_done, w);
    if (st != 0) {
        fence_free(w);
        return pmix_failed("PMIx_Fence_nb", st, "", e);
    }
    struct timespec ts;
    double whole = (double)(time_t)deadline;
    ts.tv_sec = (time_t)deadline;
    ts.tv_nsec = (long)((deadline - whole) * 1e9);
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    while (!w->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    int done = w->done;
    st = w->status;
    pthread_mutex_unlock(&w->mu);
    if (!done)
        return chorus__fail(e, CHORUS_ERR_TIMEOUT,
                            "not every rank of the job reached the PMIx fence before the timeout "
                            "(a rank did not start or did not call chorus_init; CHORUS_TIMEOUT_S)");
    fence_free(w);
    if (st != 0) return pmix_failed("PMIx_Fence", st, "", e);
    return CHORUS_OK;
}

/* Rank 0's string, into addr. */
static chorus_result get_store(const pmix_proc_t *me, const char *key, char *addr, size_t len,
                               chorus_errbuf *e)
{
    pmix_proc_t zero;
    memcpy(&zero, me, sizeof(zero));
    zero.rank = 0;
    pmix_value_t *v = NULL;
    pmix_status_t st = px.get(&zero, key, NULL, 0, &v);
    if (st != 0) return pmix_failed("PMIx_Get of rank 0's store address", st, "", e);
    chorus_result r = CHORUS_OK;
    if (v->type != PMIX_STRING || !v->data.string)
        r = chorus__fail(e, CHORUS_ERR_PROTOCOL, "rank 0's %s is not a string", key);
    else
        snprintf(addr, len, "%s", v->data.string);
    if (v->type == PMIX_STRING) free(v->data.string);
    free(v); /* what PMIX_VALUE_RELEASE does for a string */
    return r;
}

chorus_result chorus__pmix_share(int rank, char *addr, size_t len, double deadline,
                                 chorus_errbuf *e)
{
    static int rounds;
    char key[64];
    snprintf(key, sizeof(key), "%s.%d", PMIX_KEY_STORE,
             __atomic_fetch_add(&rounds, 1, __ATOMIC_RELAXED));
    CHORUS_CHECK(pmix_load(e));
    pmix_proc_t me;
    CHORUS_CHECK(session_open(&me, e));
    chorus_result r = CHORUS_OK;
    pmix_status_t st;
    if (rank == 0) {
        pmix_value_t v;
        memset(&v, 0, sizeof(v));
        v.type = PMIX_STRING;
        v.data.string = addr;
        st = px.put(PMIX_GLOBAL, key, &v);
        if (st == 0) st = px.commit();
        if (st != 0) r = pmix_failed("PMIx_Put/Commit of the store address", st, "", e);
    }
    /* Rank 0 goes to the fence even after a failed put: the others then fail at the get
     * instead of waiting for it. */
    chorus_errbuf ignored;
    chorus_result rf = fence(deadline, r == CHORUS_OK ? e : &ignored);
    if (rf == CHORUS_ERR_TIMEOUT) {
        pthread_mutex_lock(&session.mu);
        session.fence_left = 1; /* in flight: no finalize at exit */
        pthread_mutex_unlock(&session.mu);
        return r != CHORUS_OK ? r : rf;
    }
    if (r == CHORUS_OK) r = rf;
    if (r == CHORUS_OK && rank != 0) r = get_store(&me, key, addr, len, e);
    return r;
}
