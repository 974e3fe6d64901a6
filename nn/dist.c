/*
 * dist.c - data-parallel synchronisation for the trainer: broadcast of the initial
 * parameters and the allreduce of the gradients. The only file of libchorus_nn that calls
 * the communicator, so an overlapping runtime can take its place.
 */
#include <stdio.h>
#include <time.h>

#include "chorus/nn.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void nn_dist_init(nn_dist *d, chorus_comm *comm, nn_sync_mode mode)
{
    d->comm = comm;
    d->rank = comm ? chorus_rank(comm) : 0;
    d->size = comm ? chorus_size(comm) : 1;
    d->mode = mode;
    d->wait_s = 0.0;
    d->err[0] = 0;
}

static int failed(nn_dist *d, const char *what, chorus_result r)
{
    snprintf(d->err, sizeof(d->err), "%s failed: %s (%s)", what, chorus_strerror(r),
             chorus_last_error(d->comm));
    return -1;
}

int nn_dist_broadcast_params(nn_dist *d, nn_model *m)
{
    if (d->size == 1) return 0;
    double t0 = now_s();
    chorus_result r = chorus_broadcast(d->comm, m->params, m->nparams, CHORUS_FLOAT32, 0);
    d->wait_s += now_s() - t0;
    return r == CHORUS_OK ? 0 : failed(d, "broadcast of the parameters", r);
}

int nn_dist_sync_grads(nn_dist *d, nn_model *m)
{
    if (d->size == 1) return 0;
    double t0 = now_s();
    chorus_result r = CHORUS_OK;
    if (d->mode == NN_SYNC_FUSED) {
        r = chorus_allreduce(d->comm, m->grads, m->grads, m->nparams, CHORUS_FLOAT32, CHORUS_SUM);
    } else {
        /* Last layer first: the order backward produces them, the order an overlapping
         * runtime would send them. */
        for (int i = m->nlayers - 1; i >= 0 && r == CHORUS_OK; i--) {
            nn_layer *L = &m->layers[i];
            if (!L->nparams) continue;
            r = chorus_allreduce(d->comm, L->dw, L->dw, L->nparams, CHORUS_FLOAT32, CHORUS_SUM);
        }
    }
    d->wait_s += now_s() - t0;
    return r == CHORUS_OK ? 0 : failed(d, "gradient allreduce", r);
}

int nn_dist_sum(nn_dist *d, double *v, int n)
{
    if (d->size == 1) return 0;
    double t0 = now_s();
    chorus_result r = chorus_allreduce(d->comm, v, v, (size_t)n, CHORUS_FLOAT64, CHORUS_SUM);
    d->wait_s += now_s() - t0;
    return r == CHORUS_OK ? 0 : failed(d, "allreduce of the counters", r);
}

int nn_dist_broadcast_bytes(nn_dist *d, void *buf, size_t n)
{
    if (d->size == 1) return 0;
    chorus_result r = chorus_broadcast(d->comm, buf, n, CHORUS_UINT8, 0);
    return r == CHORUS_OK ? 0 : failed(d, "broadcast", r);
}
