/*
 * scalars.c - the runtime's TensorBoard scalars (chorus_log_scalar, chorus/tensorboard.h):
 * with CHORUS_TENSORBOARD=DIR, one event file per rank of the process, DIR/rank<k>/, opened on
 * first use (several ranks may live in one process: a writer per world rank) and closed at
 * exit. A writer that failed to open is not tried again: every later call fails alike.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "chorus/tensorboard.h"
#include "coll/comm.h"

typedef struct rank_writer {
    struct rank_writer *next;
    int rank;
    chorus_tb *tb;        /* NULL: it could not be opened (why) */
    chorus_result failed; /* CHORUS_OK while it works */
    char why[600];
} rank_writer;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static rank_writer *g_writers;

static void close_writers(void)
{
    pthread_mutex_lock(&g_mu);
    for (rank_writer *w = g_writers; w; w = w->next) {
        chorus_tb_close(w->tb);
        w->tb = NULL;
        if (w->failed == CHORUS_OK) {
            w->failed = CHORUS_ERR_ABORTED;
            snprintf(w->why, sizeof(w->why), "the TensorBoard writers are closed (exiting)");
        }
    }
    pthread_mutex_unlock(&g_mu);
}

/* Under g_mu: rank's writer, opened on first use. */
static rank_writer *writer_of(const char *dir, int rank)
{
    rank_writer *w = g_writers;
    while (w && w->rank != rank) w = w->next;
    if (w) return w;
    w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->rank = rank;
    char sub[4096];
    snprintf(sub, sizeof(sub), "%s/rank%d", dir, rank);
    w->failed = chorus_tb_open(sub, &w->tb);
    if (w->failed != CHORUS_OK)
        snprintf(w->why, sizeof(w->why), "CHORUS_TENSORBOARD: %s", chorus_last_error(NULL));
    if (!g_writers) atexit(close_writers);
    w->next = g_writers;
    g_writers = w;
    return w;
}

chorus_result chorus_log_scalar(chorus_comm *comm, const char *tag, int64_t step, double value)
{
    if (!comm)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_log_scalar: comm is NULL");
    const char *dir = comm->cfg.tensorboard;
    if (!dir || !*dir) return CHORUS_OK;
    pthread_mutex_lock(&g_mu);
    rank_writer *w = writer_of(dir, comm->world[comm->rank]);
    chorus_result r = !w ? CHORUS_ERR_NOMEM : w->failed;
    char why[700] = "out of memory";
    if (w && r != CHORUS_OK) snprintf(why, sizeof(why), "%s", w->why);
    if (r == CHORUS_OK) {
        r = chorus_tb_scalar(w->tb, tag, step, value);
        if (r != CHORUS_OK) snprintf(why, sizeof(why), "%s", chorus_last_error(NULL));
    }
    pthread_mutex_unlock(&g_mu);
    if (r != CHORUS_OK) return chorus__comm_fail(comm, r, "%s", why);
    return CHORUS_OK;
}
