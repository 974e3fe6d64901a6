/*
 * chorus.h - the public C API of libchorus: communicators and collectives.
 *
 * A communicator is a group of ranks (processes) that can exchange data. The world
 * communicator comes from chorus_init(), which reads the job from the environment (set by
 * chorus-run, torchrun, mpirun or srun). Collectives are blocking and must be called by every
 * rank of the communicator in the same order with matching arguments; a mismatch is detected
 * and reported as CHORUS_ERR_MISMATCH rather than producing garbage.
 *
 * Counts are in elements, as in MPI and NCCL. Every call returns a chorus_result; on failure
 * chorus_last_error() gives the detail (which call, which peer, what the OS said). The library
 * never exits the process and prints nothing unless CHORUS_DEBUG is set.
 *
 * A communicator must not be used by two threads at the same time. Communicators made by
 * chorus_comm_split() share their parent's connections and may be used concurrently with it
 * from another thread.
 */
#ifndef CHORUS_H
#define CHORUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 1
#define CHORUS_VERSION_PATCH 0

typedef struct chorus_comm chorus_comm; /* opaque */

/* X-macro: code, name, message. One table makes both the enum and chorus_strerror(). */
#define CHORUS_RESULT_MAP(X)                                                                       \
    X(CHORUS_OK, "success")                                                                        \
    X(CHORUS_ERR_INVALID_ARG, "invalid argument")                                                  \
    X(CHORUS_ERR_SYSTEM, "system error (run with CHORUS_DEBUG=INFO for details)")                  \
    X(CHORUS_ERR_TIMEOUT, "timed out waiting for a peer (see CHORUS_TIMEOUT_S)")                   \
    X(CHORUS_ERR_PEER_LOST, "a peer process died or closed its connection")                        \
    X(CHORUS_ERR_MISMATCH, "ranks called collectives with mismatched arguments")                   \
    X(CHORUS_ERR_AUTH, "authentication failed (check CHORUS_SECRET)")                              \
    X(CHORUS_ERR_NOMEM, "out of memory")                                                           \
    X(CHORUS_ERR_INTERNAL, "internal error (please report it with CHORUS_DEBUG=INFO output)")      \
    X(CHORUS_ERR_PROTOCOL, "malformed or unexpected message from a peer")                          \
    X(CHORUS_ERR_ABORTED, "the communicator was aborted")                                          \
    X(CHORUS_ERR_ENV, "the job environment is missing or inconsistent")                            \
    X(CHORUS_ERR_MEMBERSHIP,                                                                       \
      "the membership of an elastic job changed: resume from the last commit")

typedef enum {
#define CHORUS_X_ENUM(code, msg) code,
    CHORUS_RESULT_MAP(CHORUS_X_ENUM)
#undef CHORUS_X_ENUM
        CHORUS_RESULT_COUNT
} chorus_result;

typedef enum {
    CHORUS_INT8,
    CHORUS_UINT8,
    CHORUS_INT32,
    CHORUS_INT64,
    CHORUS_FLOAT16,
    CHORUS_BFLOAT16,
    CHORUS_FLOAT32,
    CHORUS_FLOAT64,
    CHORUS_DTYPE_COUNT
} chorus_dtype;

typedef enum {
    CHORUS_SUM,
    CHORUS_PROD,
    CHORUS_MIN,
    CHORUS_MAX,
    CHORUS_AVG,
    CHORUS_OP_COUNT
} chorus_op;

/* Creates the world communicator from the environment: CHORUS_RANK/CHORUS_SIZE (chorus-run),
 * RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun), OMPI_COMM_WORLD_* (mpirun), SLURM_*
 * (srun). Ranks meet through a key-value store and connect to each other; waits for slow
 * peers up to CHORUS_TIMEOUT_S. On failure *comm is set to NULL and the reason is available
 * from chorus_last_error(NULL). */
chorus_result chorus_init(chorus_comm **comm);

/* Releases a communicator (world or split). Does not wait for peers. */
chorus_result chorus_finalize(chorus_comm *comm);

/* Marks a communicator broken and closes its connections without waiting on anyone; peers
 * blocked on it see CHORUS_ERR_PEER_LOST. The communicator must still be finalized. */
chorus_result chorus_comm_abort(chorus_comm *comm);

/* This rank's number in c (0..size-1), the number of ranks in c, this rank's number among
 * the ranks of c on its host, and how many ranks of c share that host. Never fail; c must be a
 * live communicator. */
int chorus_rank(const chorus_comm *c);
int chorus_size(const chorus_comm *c);
int chorus_local_rank(const chorus_comm *c);
int chorus_local_size(const chorus_comm *c);

/* recv[i] = op over ranks of send[i]. send == recv is in place. Every rank gets the same
 * bits. CHORUS_AVG divides the sum by the size (integer division for integer types). */
chorus_result chorus_allreduce(chorus_comm *c, const void *send, void *recv, size_t count,
                               chorus_dtype t, chorus_op op);

/* Copies root's buf into every rank's buf. */
chorus_result chorus_broadcast(chorus_comm *c, void *buf, size_t count, chorus_dtype t, int root);

/* recv (size*sendcount elements) gets rank r's send at offset r*sendcount. */
chorus_result chorus_allgather(chorus_comm *c, const void *send, void *recv, size_t sendcount,
                               chorus_dtype t);

/* send holds size*recvcount elements; rank r gets slice r of the reduction. */
chorus_result chorus_reduce_scatter(chorus_comm *c, const void *send, void *recv, size_t recvcount,
                                    chorus_dtype t, chorus_op op);

/* send holds size blocks of count_per_rank elements; block j goes to rank j, and recv block j
 * comes from rank j. send == recv is allowed. */
chorus_result chorus_alltoall(chorus_comm *c, const void *send, void *recv, size_t count_per_rank,
                              chorus_dtype t);

/* Returns once every rank of c has entered the barrier. */
chorus_result chorus_barrier(chorus_comm *c);

/* Point to point. Messages between a pair with the same tag arrive in order; a receive whose
 * count differs from the matching send fails with CHORUS_ERR_MISMATCH. tag >= 0. */
chorus_result chorus_send(chorus_comm *c, const void *buf, size_t count, chorus_dtype t, int peer,
                          int tag);
chorus_result chorus_recv(chorus_comm *c, void *buf, size_t count, chorus_dtype t, int peer,
                          int tag);

/* Collective over c: ranks with the same color form a new communicator, ordered by key (then
 * by rank in c). color < 0 gives *out = NULL (the rank joins no group). */
chorus_result chorus_comm_split(chorus_comm *c, int color, int key, chorus_comm **out);

/* Size in bytes of one element of t, or 0 for an unknown dtype. */
size_t chorus_dtype_size(chorus_dtype t);

/* Name and one-line meaning of a result code (a static string; "unknown chorus_result" for a
 * value outside the table). Thread-safe. */
const char *chorus_strerror(chorus_result r);

/* Names of the enumerations, for bindings that read them from the library instead of copying
 * them: chorus_result_name(CHORUS_ERR_TIMEOUT) is "CHORUS_ERR_TIMEOUT", chorus_dtype_name
 * (CHORUS_FLOAT32) is "float32", chorus_op_name(CHORUS_SUM) is "sum". Each returns NULL for a
 * value outside its enumeration, so a caller can walk 0, 1, ... until NULL. Static strings;
 * any thread. */
const char *chorus_result_name(int r);
const char *chorus_dtype_name(int t);
const char *chorus_op_name(int op);

/* Detail of the last failure on c (or of the last failed chorus_init when c is NULL). */
const char *chorus_last_error(const chorus_comm *c);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_H */
