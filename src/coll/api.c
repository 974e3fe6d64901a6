/*
 * api.c - the public collectives: check the arguments (touching nothing when they are
 * wrong), pick the algorithm (select.c), run it, and make any failure break the communicator
 * so that no later call works on a half-finished state.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "coll/direct.h"
#include "transport/shm/shm.h"

size_t chorus_dtype_size(chorus_dtype t)
{
    switch (t) {
    case CHORUS_INT8:
    case CHORUS_UINT8: return 1;
    case CHORUS_FLOAT16:
    case CHORUS_BFLOAT16: return 2;
    case CHORUS_INT32:
    case CHORUS_FLOAT32: return 4;
    case CHORUS_INT64:
    case CHORUS_FLOAT64: return 8;
    default: return 0;
    }
}

#define BAD(...) chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG, __VA_ARGS__)

/* Common checks; *bytes = count * size(t) * mult. */
static chorus_result check(chorus_comm *c, const char *fn, size_t count, size_t mult,
                           chorus_dtype t, size_t *bytes)
{
    if ((unsigned)t >= CHORUS_DTYPE_COUNT) return BAD("%s: unknown dtype %d", fn, (int)t);
    size_t n;
    if (chorus__mul_overflow(count, mult, &n) ||
        chorus__mul_overflow(n, chorus_dtype_size(t), bytes) || *bytes > (size_t)1 << 62)
        return BAD("%s: count %zu (x%zu) of %s overflows the addressable size", fn, count, mult,
                   chorus__dtype_name((int)t));
    return chorus__net_error(c->net, &c->err);
}

static chorus_result check_op(chorus_comm *c, const char *fn, chorus_op op)
{
    if ((unsigned)op >= CHORUS_OP_COUNT) return BAD("%s: unknown op %d", fn, (int)op);
    return CHORUS_OK;
}

/* After a failed algorithm: the net must be broken so that posted receives are never touched
 * again (their buffers are gone once we return). */
static chorus_result done(chorus_comm *c, chorus_result r)
{
    if (r != CHORUS_OK) {
        const char *why = c->err.msg[0] ? c->err.msg : chorus_strerror(r);
        chorus__shm_abort(c->shm, r, why); /* wakes ranks waiting in shared memory */
        chorus__net_abort(c->net, -1, r, why);
        chorus__net_error(c->net, &c->err);
    }
    return r;
}

#define NULL_COMM(fn)                                                                              \
    if (!c)                                                                                        \
    return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG, "%s: comm is NULL", fn)

chorus_result chorus_allreduce(chorus_comm *c, const void *send, void *recv, size_t count,
                               chorus_dtype t, chorus_op op)
{
    NULL_COMM("chorus_allreduce");
    size_t bytes;
    CHORUS_CHECK(check(c, "chorus_allreduce", count, 1, t, &bytes));
    CHORUS_CHECK(check_op(c, "chorus_allreduce", op));
    if (count && (!send || !recv))
        return BAD("chorus_allreduce: NULL buffer with count %zu", count);
    if (count == 0) return CHORUS_OK;
    if (c->size == 1) {
        if (send != recv) memmove(recv, send, bytes);
        chorus__reduce_finish(recv, count, t, op, 1);
        return CHORUS_OK;
    }
    chorus_result r;
    switch (chorus__select_allreduce(c, bytes)) {
    case CHORUS_AR_SHM_FLAT: r = chorus__allreduce_shm(c, send, recv, count, t, op, 0); break;
    case CHORUS_AR_SHM_RSAG: r = chorus__allreduce_shm(c, send, recv, count, t, op, 1); break;
    case CHORUS_AR_SHM_CMA: r = chorus__allreduce_cma(c, send, recv, count, t, op); break;
    case CHORUS_AR_ONESHOT: r = chorus__allreduce_oneshot(c, send, recv, count, t, op); break;
    case CHORUS_AR_RSAG: r = chorus__allreduce_rsag(c, send, recv, count, t, op); break;
    case CHORUS_AR_RD: r = chorus__allreduce_rd(c, send, recv, count, t, op); break;
    default: r = chorus__allreduce_ring(c, send, recv, count, t, op); break;
    }
    return done(c, r);
}

chorus_result chorus_broadcast(chorus_comm *c, void *buf, size_t count, chorus_dtype t, int root)
{
    NULL_COMM("chorus_broadcast");
    size_t bytes;
    CHORUS_CHECK(check(c, "chorus_broadcast", count, 1, t, &bytes));
    if (root < 0 || root >= c->size)
        return BAD("chorus_broadcast: root %d is out of range (size %d)", root, c->size);
    if (count && !buf) return BAD("chorus_broadcast: NULL buffer with count %zu", count);
    if (count == 0 || c->size == 1) return CHORUS_OK;
    chorus_bc_algo algo = chorus__select_broadcast(c, bytes);
    if (algo == CHORUS_BC_SHM) return done(c, chorus__bcast_shm(c, buf, count, t, root));
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_BROADCAST, t, (chorus_op)root, count);
    chorus_result r = algo == CHORUS_BC_TREE ? chorus__bcast_tree(c, buf, bytes, root, &x)
                                             : chorus__bcast_chain(c, buf, bytes, root, &x);
    return done(c, r);
}

chorus_result chorus_allgather(chorus_comm *c, const void *send, void *recv, size_t sendcount,
                               chorus_dtype t)
{
    NULL_COMM("chorus_allgather");
    size_t bytes, all;
    CHORUS_CHECK(check(c, "chorus_allgather", sendcount, 1, t, &bytes));
    CHORUS_CHECK(check(c, "chorus_allgather", sendcount, (size_t)c->size, t, &all));
    if (sendcount && (!send || !recv))
        return BAD("chorus_allgather: NULL buffer with count %zu", sendcount);
    if (sendcount == 0) return CHORUS_OK;
    /* In place: send is recv's own slot (as MPI_IN_PLACE), or recv itself (moved into place). */
    char *slot = (char *)recv + (size_t)c->rank * bytes;
    if (send != slot) memmove(slot, send, bytes);
    if (c->size == 1) return CHORUS_OK;
    if (chorus__select_shm(c, CHORUS_COLL_ALLGATHER))
        return done(c, chorus__allgather_shm(c, recv, sendcount, t));
    int n = c->size;
    size_t *off = malloc(sizeof(size_t) * 2 * (size_t)n);
    if (!off) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        off[i] = (size_t)i * sendcount;
        off[n + i] = sendcount;
    }
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_ALLGATHER, t, 0, sendcount);
    chorus_result r = chorus__ring_allgather(&x, recv, off, off + n, chorus_dtype_size(t), 0);
    free(off);
    return done(c, r);
}

chorus_result chorus_reduce_scatter(chorus_comm *c, const void *send, void *recv, size_t recvcount,
                                    chorus_dtype t, chorus_op op)
{
    NULL_COMM("chorus_reduce_scatter");
    size_t bytes, all;
    CHORUS_CHECK(check(c, "chorus_reduce_scatter", recvcount, 1, t, &bytes));
    CHORUS_CHECK(check(c, "chorus_reduce_scatter", recvcount, (size_t)c->size, t, &all));
    CHORUS_CHECK(check_op(c, "chorus_reduce_scatter", op));
    if (recvcount && (!send || !recv))
        return BAD("chorus_reduce_scatter: NULL buffer with count %zu", recvcount);
    if (recvcount == 0) return CHORUS_OK;
    int n = c->size;
    if (n == 1) {
        if (send != recv) memmove(recv, send, bytes);
        chorus__reduce_finish(recv, recvcount, t, op, 1);
        return CHORUS_OK;
    }
    if (chorus__select_shm(c, CHORUS_COLL_REDUCE_SCATTER))
        return done(c, chorus__reduce_scatter_shm(c, send, recv, recvcount, t, op));
    /* Rank order, as the allreduce (allreduce_direct.c). In place, the input is copied aside:
     * the output (slice 0's place) would be overwritten while slice 0 is still being sent. */
    size_t *off = malloc(sizeof(size_t) * 2 * (size_t)n);
    char *copy = send == recv ? malloc(all) : NULL;
    if (!off || (send == recv && !copy)) {
        free(off);
        free(copy);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    if (copy) memcpy(copy, send, all);
    for (int i = 0; i < n; i++) {
        off[i] = (size_t)i * recvcount;
        off[n + i] = recvcount;
    }
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_REDUCE_SCATTER, t, op, recvcount);
    chorus_result r =
        chorus__direct_reduce_scatter(&x, copy ? copy : send, recv, off, off + n, t, op, 0);
    if (r == CHORUS_OK) chorus__reduce_finish(recv, recvcount, t, op, n);
    free(off);
    free(copy);
    return done(c, r);
}

chorus_result chorus_alltoall(chorus_comm *c, const void *send, void *recv, size_t count_per_rank,
                              chorus_dtype t)
{
    NULL_COMM("chorus_alltoall");
    size_t bytes, all;
    CHORUS_CHECK(check(c, "chorus_alltoall", count_per_rank, 1, t, &bytes));
    CHORUS_CHECK(check(c, "chorus_alltoall", count_per_rank, (size_t)c->size, t, &all));
    if (count_per_rank && (!send || !recv))
        return BAD("chorus_alltoall: NULL buffer with count %zu", count_per_rank);
    if (count_per_rank == 0) return CHORUS_OK;
    int n = c->size, me = c->rank;
    if (n > 1 && chorus__select_shm(c, CHORUS_COLL_ALLTOALL))
        return done(c, chorus__alltoall_shm(c, send, recv, count_per_rank, t));
    const char *src = send;
    if (send == recv && n > 1) {
        char *copy = chorus__comm_scratch(c, all);
        if (!copy) return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
        memcpy(copy, send, all);
        src = copy;
    }
    memmove((char *)recv + (size_t)me * bytes, src + (size_t)me * bytes, bytes);
    if (n == 1) return CHORUS_OK;
    chorus_req *rq = malloc(sizeof(chorus_req) * 2 * (size_t)n);
    chorus_req **ps = malloc(sizeof(chorus_req *) * 2 * (size_t)n);
    if (!rq || !ps) {
        free(rq);
        free(ps);
        return chorus__fail(&c->err, CHORUS_ERR_NOMEM, "out of memory");
    }
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_ALLTOALL, t, 0, count_per_rank);
    int k = 0;
    /* Pairwise order: at step s talk to me+s and me-s, so no rank is flooded by everyone. */
    for (int s = 1; s < n; s++) {
        int from = chorus__mod(me - s, n);
        chorus__coll_irecv(&x, &rq[k], from, 0, (char *)recv + (size_t)from * bytes, bytes);
        ps[k] = &rq[k];
        k++;
    }
    for (int s = 1; s < n; s++) {
        int to = (me + s) % n;
        chorus__coll_isend(&x, &rq[k], to, 0, src + (size_t)to * bytes, bytes);
        ps[k] = &rq[k];
        k++;
    }
    chorus_result r = chorus__coll_wait(&x, ps, k);
    free(rq);
    free(ps);
    return done(c, r);
}

chorus_result chorus_barrier(chorus_comm *c)
{
    NULL_COMM("chorus_barrier");
    CHORUS_CHECK(chorus__net_error(c->net, &c->err));
    int n = c->size;
    if (n > 1 && chorus__select_shm(c, CHORUS_COLL_BARRIER)) return done(c, chorus__barrier_shm(c));
    chorus_coll x;
    chorus__coll_begin(&x, c, CHORUS_COLL_BARRIER, CHORUS_UINT8, 0, 0);
    /* Dissemination: after round k every rank has heard, directly or not, from 2^k others. */
    chorus_result r = CHORUS_OK;
    for (int k = 1, round = 0; k < n && r == CHORUS_OK; k <<= 1, round++) {
        chorus_req rq[2];
        chorus_req *ps[2] = {&rq[0], &rq[1]};
        chorus__coll_irecv(&x, &rq[0], chorus__mod(c->rank - k, n), round, NULL, 0);
        chorus__coll_isend(&x, &rq[1], (c->rank + k) % n, round, NULL, 0);
        r = chorus__coll_wait(&x, ps, 2);
    }
    return done(c, r);
}

static chorus_result check_p2p(chorus_comm *c, const char *fn, const void *buf, size_t count,
                               chorus_dtype t, int peer, int tag, size_t *bytes)
{
    CHORUS_CHECK(check(c, fn, count, 1, t, bytes));
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return BAD("%s: peer %d is not another rank of this communicator (size %d, rank %d)", fn,
                   peer, c->size, c->rank);
    if (tag < 0) return BAD("%s: tag %d is negative", fn, tag);
    if (count && !buf) return BAD("%s: NULL buffer with count %zu", fn, count);
    return CHORUS_OK;
}

/* One blocking point-to-point transfer (is_send: buf is sent, else received into). */
static chorus_result p2p(chorus_comm *c, const char *fn, void *buf, size_t count, chorus_dtype t,
                         int peer, int tag, int is_send)
{
    size_t bytes;
    CHORUS_CHECK(check_p2p(c, fn, buf, count, t, peer, tag, &bytes));
    chorus_wire_hdr h = {.type = CHORUS_MSG_P2P,
                         .comm_id = c->id,
                         .tag = tag,
                         .len = bytes,
                         .count = count,
                         .coll = (uint32_t)t << 8};
    chorus_req rq;
    if (is_send)
        chorus__net_isend(c->net, &rq, c->world[peer], &h, buf);
    else
        chorus__net_irecv(c->net, &rq, c->world[peer], &h, buf);
    chorus_req *p = &rq;
    return done(c, chorus__net_wait(c->net, &p, 1, chorus__deadline(), &c->err));
}

chorus_result chorus_send(chorus_comm *c, const void *buf, size_t count, chorus_dtype t, int peer,
                          int tag)
{
    NULL_COMM("chorus_send");
    return p2p(c, "chorus_send", (void *)buf, count, t, peer, tag, 1);
}

chorus_result chorus_recv(chorus_comm *c, void *buf, size_t count, chorus_dtype t, int peer,
                          int tag)
{
    NULL_COMM("chorus_recv");
    return p2p(c, "chorus_recv", buf, count, t, peer, tag, 0);
}
