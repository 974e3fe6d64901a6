/*
 * api.c - the public collectives: check the arguments (touching nothing when they are
 * wrong), pick the algorithm's row (select.c), have the ranks agree on the calls whose data
 * would not tell every rank of a mismatch (count 0, broadcast over TCP), run the algorithm,
 * and make any failure break the communicator so that no later call works on a
 * half-finished state. Every public call is one event of the timeline (coll_trace.c).
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

#define BAD(...) chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG, __VA_ARGS__)

/* The net broke between calls (its watchdog lost a peer while this rank was elsewhere): the
 * call fails with the net's reason, and, as after a failed algorithm, the ranks of this host
 * that are already waiting for this one in shared memory are woken with that reason, not left
 * to find this rank gone and blame it. */
static chorus_result net_ok(chorus_comm *c)
{
    chorus_result r = chorus__tp_error(&c->net, NULL, &c->err);
    if (r != CHORUS_OK) chorus__comm_break_failed(c, r);
    return r;
}

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
    return net_ok(c);
}

static chorus_result check_op(chorus_comm *c, const char *fn, chorus_op op, chorus_dtype t)
{
    if ((unsigned)op >= CHORUS_OP_COUNT) return BAD("%s: unknown op %d", fn, (int)op);
    if (chorus__op_is_bitwise(op) && chorus__dtype_is_float(t))
        return BAD("%s: op %s needs an integer dtype, not %s", fn, chorus__op_name(op),
                   chorus__dtype_name((int)t));
    return CHORUS_OK;
}

/* After a failed algorithm: the net must be broken so that posted receives are never touched
 * again (their buffers are gone once we return). Ranks waiting in shared memory are woken with
 * the reason: those of c's own group, and, across hosts, this host's ranks in a hierarchical
 * collective, which would otherwise see only that this rank went away, not the peer it lost
 * on another host. */
static chorus_result done(chorus_comm *c, chorus_result r)
{
    if (r != CHORUS_OK) {
        chorus__comm_break_failed(c, r);
        chorus__tp_error(&c->net, NULL, &c->err);
    }
    return r;
}

/* A call with nothing to move (count 0) on ranks > 1 still takes part in the signature
 * check, so that count 0 on one rank and N on the others fails on every rank instead of
 * pairing this rank's next call with their current one. */
static chorus_result empty(chorus_comm *c, const chorus_algo *algo, const char *what, int kind,
                           chorus_dtype t, chorus_op op, int root)
{
    if (c->size == 1) return CHORUS_OK;
    /* over shared memory when the row runs on c's own group; a hierarchical row's groups are
     * sub-communicators, so its ranks agree over TCP like the flat rows' */
    int over_shm = algo->tp == CHORUS_TP_SHM || algo->tp == CHORUS_TP_SHM_CMA;
    return done(c, chorus__coll_agree(c, over_shm, what, kind, t, op, root, 0));
}

#define NULL_COMM(fn)                                                                              \
    if (!c)                                                                                        \
    return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG, "%s: comm is NULL", fn)

/* What the timeline says of a call: its algorithm (NULL until picked) and bytes per rank. */
typedef struct call_info {
    const chorus_algo *algo;
    size_t bytes;
} call_info;

/* The algorithm for a call of kind on bytes. Done right after the argument checks, so that an
 * unknown CHORUS_ALGO_* value fails on every call (one rank, empty buffers included), before
 * anything is sent: the communicator stays usable. */
static chorus_result pick(chorus_comm *c, int kind, size_t bytes, const chorus_algo **algo,
                          call_info *ci)
{
    chorus_result r;
    *algo = chorus__select(c, kind, CHORUS_MEM_HOST, bytes, &r);
    ci->algo = *algo;
    ci->bytes = bytes;
    return r;
}

/* The public call: the checked call (fn_call) between the two ends of its timeline event. */
#define TRACED(fn, t, ...)                                                                         \
    do {                                                                                           \
        NULL_COMM("chorus_" #fn);                                                                  \
        call_info ci = {0};                                                                        \
        double t0 = chorus__coll_trace_begin(c);                                                   \
        chorus_result r = fn##_call(c, __VA_ARGS__, &ci);                                          \
        chorus__coll_trace_end(c, t0, #fn, ci.algo ? ci.algo->name : "none", ci.bytes, t, r);      \
        return r;                                                                                  \
    } while (0)

static chorus_result allreduce_call(chorus_comm *c, const void *send, void *recv, size_t count,
                                    chorus_dtype t, chorus_op op, call_info *ci)
{
    size_t bytes;
    CHORUS_CHECK(check(c, "chorus_allreduce", count, 1, t, &bytes));
    CHORUS_CHECK(check_op(c, "chorus_allreduce", op, t));
    const chorus_algo *algo;
    CHORUS_CHECK(pick(c, CHORUS_COLL_ALLREDUCE, bytes, &algo, ci));
    if (count && (!send || !recv))
        return BAD("chorus_allreduce: NULL buffer with count %zu", count);
    if (count == 0) return empty(c, algo, "allreduce", CHORUS_COLL_ALLREDUCE, t, op, 0);
    if (c->size == 1) {
        if (send != recv) memmove(recv, send, bytes);
        chorus__reduce_finish(recv, count, t, op, 1);
        return CHORUS_OK;
    }
    chorus_coll_args a = {
        .send = send, .recv = recv, .count = count, .bytes = bytes, .t = t, .op = op};
    return done(c, algo->run(c, &a));
}

static chorus_result broadcast_call(chorus_comm *c, void *buf, size_t count, chorus_dtype t,
                                    int root, call_info *ci)
{
    size_t bytes;
    CHORUS_CHECK(check(c, "chorus_broadcast", count, 1, t, &bytes));
    if (root < 0 || root >= c->size)
        return BAD("chorus_broadcast: root %d is out of range (size %d)", root, c->size);
    if (count && !buf) return BAD("chorus_broadcast: NULL buffer with count %zu", count);
    const chorus_algo *algo;
    CHORUS_CHECK(pick(c, CHORUS_COLL_BROADCAST, bytes, &algo, ci));
    if (c->size == 1) return CHORUS_OK;
    if (count == 0) return empty(c, algo, "broadcast", CHORUS_COLL_BROADCAST, t, 0, root);
    /* The root sends and hears nothing (a leaf hears only its parent): over TCP the ranks first
     * agree on the call, so that another root or count fails every rank at this call. Shared
     * memory checks the first chunk on every rank (bcast_shm.c). */
    if (algo->tp == CHORUS_TP_NET || algo->tp == CHORUS_TP_HIER) /* hier: ranks of other hosts */
        CHORUS_CHECK(done(
            c, chorus__coll_agree(c, 0, "broadcast", CHORUS_COLL_BROADCAST, t, 0, root, count)));
    chorus_coll_args a = {
        .send = buf, .recv = buf, .count = count, .bytes = bytes, .t = t, .root = root};
    return done(c, algo->run(c, &a));
}

static chorus_result allgather_call(chorus_comm *c, const void *send, void *recv, size_t sendcount,
                                    chorus_dtype t, call_info *ci)
{
    size_t bytes, all;
    CHORUS_CHECK(check(c, "chorus_allgather", sendcount, 1, t, &bytes));
    CHORUS_CHECK(check(c, "chorus_allgather", sendcount, (size_t)c->size, t, &all));
    if (sendcount && (!send || !recv))
        return BAD("chorus_allgather: NULL buffer with count %zu", sendcount);
    const chorus_algo *algo;
    CHORUS_CHECK(pick(c, CHORUS_COLL_ALLGATHER, bytes, &algo, ci));
    if (sendcount == 0) return empty(c, algo, "allgather", CHORUS_COLL_ALLGATHER, t, 0, 0);
    /* In place: send is recv's own slot (as MPI_IN_PLACE), or recv itself (moved into place). */
    char *slot = (char *)recv + (size_t)c->rank * bytes;
    if (send != slot) memmove(slot, send, bytes);
    if (c->size == 1) return CHORUS_OK;
    chorus_coll_args a = {.send = slot, .recv = recv, .count = sendcount, .bytes = bytes, .t = t};
    return done(c, algo->run(c, &a));
}

static chorus_result reduce_scatter_call(chorus_comm *c, const void *send, void *recv,
                                         size_t recvcount, chorus_dtype t, chorus_op op,
                                         call_info *ci)
{
    size_t bytes, all;
    CHORUS_CHECK(check(c, "chorus_reduce_scatter", recvcount, 1, t, &bytes));
    CHORUS_CHECK(check(c, "chorus_reduce_scatter", recvcount, (size_t)c->size, t, &all));
    CHORUS_CHECK(check_op(c, "chorus_reduce_scatter", op, t));
    if (recvcount && (!send || !recv))
        return BAD("chorus_reduce_scatter: NULL buffer with count %zu", recvcount);
    const chorus_algo *algo;
    CHORUS_CHECK(pick(c, CHORUS_COLL_REDUCE_SCATTER, bytes, &algo, ci));
    if (recvcount == 0)
        return empty(c, algo, "reduce_scatter", CHORUS_COLL_REDUCE_SCATTER, t, op, 0);
    if (c->size == 1) {
        if (send != recv) memmove(recv, send, bytes);
        chorus__reduce_finish(recv, recvcount, t, op, 1);
        return CHORUS_OK;
    }
    chorus_coll_args a = {
        .send = send, .recv = recv, .count = recvcount, .bytes = bytes, .t = t, .op = op};
    return done(c, algo->run(c, &a));
}

static chorus_result alltoall_call(chorus_comm *c, const void *send, void *recv,
                                   size_t count_per_rank, chorus_dtype t, call_info *ci)
{
    size_t bytes, all;
    CHORUS_CHECK(check(c, "chorus_alltoall", count_per_rank, 1, t, &bytes));
    CHORUS_CHECK(check(c, "chorus_alltoall", count_per_rank, (size_t)c->size, t, &all));
    if (count_per_rank && (!send || !recv))
        return BAD("chorus_alltoall: NULL buffer with count %zu", count_per_rank);
    const chorus_algo *algo;
    CHORUS_CHECK(pick(c, CHORUS_COLL_ALLTOALL, bytes, &algo, ci));
    if (count_per_rank == 0) return empty(c, algo, "alltoall", CHORUS_COLL_ALLTOALL, t, 0, 0);
    if (c->size == 1) {
        if (send != recv) memmove(recv, send, bytes);
        return CHORUS_OK;
    }
    chorus_coll_args a = {
        .send = send, .recv = recv, .count = count_per_rank, .bytes = bytes, .t = t};
    return done(c, algo->run(c, &a));
}

static chorus_result barrier_call(chorus_comm *c, call_info *ci)
{
    CHORUS_CHECK(net_ok(c));
    const chorus_algo *algo;
    CHORUS_CHECK(pick(c, CHORUS_COLL_BARRIER, 0, &algo, ci));
    if (c->size == 1) return CHORUS_OK;
    chorus_coll_args a = {.t = CHORUS_UINT8};
    return done(c, algo->run(c, &a));
}

chorus_result chorus_allreduce(chorus_comm *c, const void *send, void *recv, size_t count,
                               chorus_dtype t, chorus_op op)
{
    TRACED(allreduce, t, send, recv, count, t, op);
}

chorus_result chorus_broadcast(chorus_comm *c, void *buf, size_t count, chorus_dtype t, int root)
{
    TRACED(broadcast, t, buf, count, t, root);
}

chorus_result chorus_allgather(chorus_comm *c, const void *send, void *recv, size_t sendcount,
                               chorus_dtype t)
{
    TRACED(allgather, t, send, recv, sendcount, t);
}

chorus_result chorus_reduce_scatter(chorus_comm *c, const void *send, void *recv, size_t recvcount,
                                    chorus_dtype t, chorus_op op)
{
    TRACED(reduce_scatter, t, send, recv, recvcount, t, op);
}

chorus_result chorus_alltoall(chorus_comm *c, const void *send, void *recv, size_t count_per_rank,
                              chorus_dtype t)
{
    TRACED(alltoall, t, send, recv, count_per_rank, t);
}

chorus_result chorus_barrier(chorus_comm *c)
{
    NULL_COMM("chorus_barrier");
    call_info ci = {0};
    double t0 = chorus__coll_trace_begin(c);
    chorus_result r = barrier_call(c, &ci);
    chorus__coll_trace_end(c, t0, "barrier", ci.algo ? ci.algo->name : "none", 0, CHORUS_UINT8, r);
    return r;
}
