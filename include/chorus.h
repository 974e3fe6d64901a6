/*
 * chorus.h - the public C API of libchorus: communicators and collectives.
 *
 * A communicator is a group of ranks (processes) that can exchange data. The world
 * communicator comes from chorus_init(), which reads the job from the environment (set by
 * chorus-run, torchrun, mpirun or srun). Collectives are blocking and must be called by every
 * rank of the communicator in the same order with matching arguments; a mismatch is detected
 * and reported as CHORUS_ERR_MISMATCH rather than producing garbage.
 *
 * What is checked: calls that differ in kind, dtype, op, broadcast root or count (a count of 0
 * on some ranks and not on others included) fail on every rank, at that call, with
 * CHORUS_ERR_MISMATCH and a detail naming the difference ("rank 1 called broadcast with root
 * 1, rank 0 with root 0"); no rank returns CHORUS_OK from it, and no buffer holds data of
 * another call. What cannot be checked: a rank that skips a call whose next call has the same
 * signature as the one skipped (two allreduces of the same count, dtype and op in a row) is
 * indistinguishable from one that made it; its calls then pair with the others' next ones, as
 * in MPI and NCCL. The ranks stay in step only if the program calls the same sequence on
 * every rank.
 *
 * Counts are in elements, as in MPI and NCCL. Every call returns a chorus_result; on failure
 * chorus_last_error() gives the detail (which call, which peer, what the OS said). The library
 * never exits the process and prints nothing unless CHORUS_DEBUG is set.
 *
 * What went wrong, the one convention of every public header: a call that can fail returns a
 * chorus_result, and the one-line detail of a failure is read from the getter of the object
 * the call was made on, <object>_last_error(obj): chorus_last_error(comm),
 * chorus_engine_last_error(engine), chorus_engine_handle_last_error(handle),
 * chorus_elastic_last_error(el), chorus_ps_last_error(ps). With obj NULL the getter gives the
 * calling thread's last failure of a call that has no such object (an init or create that
 * failed, a function that takes none; chorus_last_error(NULL) for the core's). The nn library
 * keeps no message per object: nn_last_error() is that thread form for every nn_* call. A
 * getter never returns NULL ("" when nothing failed); the text stays valid until the next
 * failing call on the same object (or, for the thread form, on the same thread).
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
/* "0.1.0": the version above as a string, for --version lines and logs. */
#define CHORUS_VERSION_STRING                                                                      \
    CHORUS__XSTR(CHORUS_VERSION_MAJOR)                                                             \
    "." CHORUS__XSTR(CHORUS_VERSION_MINOR) "." CHORUS__XSTR(CHORUS_VERSION_PATCH)
#define CHORUS__STR(x)  #x
#define CHORUS__XSTR(x) CHORUS__STR(x)

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
    CHORUS_BAND, /* bitwise and, or, exclusive or: integer dtypes only */
    CHORUS_BOR,
    CHORUS_BXOR,
    CHORUS_OP_COUNT
} chorus_op;

/* Creates the world communicator from the environment: CHORUS_RANK/CHORUS_SIZE (chorus-run),
 * RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun), OMPI_COMM_WORLD_* (mpirun), SLURM_*
 * (srun). Ranks meet through a key-value store and connect to each other; waits for slow
 * peers up to CHORUS_TIMEOUT_S. On failure *comm is set to NULL and the reason is available
 * from chorus_last_error(NULL). The CHORUS_* variables are read and checked here, once: the
 * communicator keeps that snapshot (split communicators inherit it). A malformed value
 * (CHORUS_TIMEOUT_S=abc, a negative size) fails with CHORUS_ERR_INVALID_ARG and a message
 * naming the variable and its value. */
chorus_result chorus_init(chorus_comm **comm);

/* Releases a communicator (world or split). Does not wait for peers' calls: it only lets what
 * this rank already sent reach them (at most 2 s without progress; at once when a peer is
 * gone or the communicator broke), so a slow link does not lose a fast rank's last bytes. */
chorus_result chorus_finalize(chorus_comm *comm);

/* Marks a communicator broken and closes its connections without waiting on anyone; peers
 * blocked on it see CHORUS_ERR_PEER_LOST. The communicator must still be finalized. */
chorus_result chorus_comm_abort(chorus_comm *comm);

/* Tells the launcher that this rank is about to fail because rank `peer` of c failed: this
 * rank got a verdict, not an error of its own ("cannot resume: see rank 0"). chorus-run then
 * names `peer` as the rank that failed first, and this one as failing after it, however their
 * exits race. Call it before exiting with the error; it only writes one line on the launcher's
 * status pipe (CHORUS_STATUS_FD; nothing without one). CHORUS_ERR_INVALID_ARG when peer is not
 * another rank of c. */
chorus_result chorus_report_peer_failure(chorus_comm *c, int peer);

/* This rank's number in c (0..size-1), the number of ranks in c, this rank's number among
 * the ranks of c on its host, and how many ranks of c share that host. Never fail; c must be a
 * live communicator. */
int chorus_rank(const chorus_comm *c);
int chorus_size(const chorus_comm *c);
int chorus_local_rank(const chorus_comm *c);
int chorus_local_size(const chorus_comm *c);

/* recv[i] = op over ranks of send[i]. send == recv is in place. Every rank gets the same
 * bits. CHORUS_AVG divides the sum by the size (integer division for integer types).
 * CHORUS_BAND/BOR/BXOR on a floating-point dtype fail with CHORUS_ERR_INVALID_ARG. */
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

/* ---- weight divergence (docs/TRAINING.md) --------------------------------------------------
 *
 * Replicas that should hold the same tensors (data-parallel weights) compared across the ranks
 * in one collective: each rank makes a row of (2 + n) 64-bit words, [a signature of n, the
 * names and the byte sizes; the rank's label (the number the text calls it by); the 64-bit hash
 * of each tensor's bytes], the rows are allgathered, and the first column where they differ is
 * named. The hash is of the bytes: NaNs with other payloads, and -0.0 against 0.0, differ. The
 * ranks named are those outside the reference group, the largest group of ranks whose hashes
 * are equal; on a tie (two ranks, say) the group that holds the lowest rank is the reference. */

/* Fills row (2 + n words) for the n tensors bufs[i] of bytes[i] bytes named names[i]. */
void chorus_divergence_row(size_t n, const void *const *bufs, const size_t *bytes,
                           const char *const *names, long long label, uint64_t *row);

/* rows: nranks rows made by chorus_divergence_row, in rank order. Returns 0 when they agree;
 * 1 when a tensor differs (*tensor its index, may be NULL); 2 when the tensor lists differ;
 * -1 out of memory. differ (nranks ints, may be NULL) gets 1 for the ranks outside the
 * reference group; msg (cap bytes) the text, e.g. "weights diverged at step 5: tensor
 * 'fc.weight' differs on rank 1 from ranks 0,2 (the reference is the largest group of equal
 * ranks; 1 of 4 tensors differ; hashes: ranks 0,2 ...; rank 1 ...)". */
int chorus_divergence_compare(const uint64_t *rows, int nranks, size_t n, const char *const *names,
                              long long step, long *tensor, int *differ, char *msg, size_t cap);

/* Collective over c: the rows above, one allgather, the comparison. CHORUS_ERR_MISMATCH when
 * the ranks differ, with the text in chorus_last_error(c) (the communicator stays usable);
 * label < 0 calls this rank by its rank in c. */
chorus_result chorus_check_divergence(chorus_comm *c, size_t n, const void *const *bufs,
                                      const size_t *bytes, const char *const *names,
                                      long long label, long long step);

/* ---- point to point (docs/P2P.md) ----------------------------------------------------------
 *
 * Messages between two ranks of a communicator, over TCP (also between ranks of one host, on
 * the loopback). A receive matches a message on (communicator, source, tag), as in MPI; the
 * message then must carry the receive's dtype and at most its count of elements, or the
 * receive fails with CHORUS_ERR_MISMATCH naming both sides (the message is discarded and the
 * communicator stays usable). Messages from one sender with one tag are received in the order
 * they were sent (non-overtaking). Sending to oneself is not supported. Tags are >= 0.
 *
 * Every failure other than a mismatch (a peer lost, a timeout) breaks the communicator, as
 * for collectives: every request still pending on it then fails with that error. Waits have the
 * CHORUS_TIMEOUT_S deadline without progress. Requests of a communicator must be completed
 * before it is finalized. Threading: a request, like its communicator, must not be used by two
 * threads at the same time; any waiting call drives the transfers of every request. */

#define CHORUS_ANY_SOURCE (-1) /* chorus_irecv/chorus_probe: a message from any rank */
#define CHORUS_ANY_TAG    (-1) /* chorus_irecv/chorus_probe: a message with any tag */

/* A pending non-blocking send or receive. Made by chorus_isend/chorus_irecv; freed by the
 * chorus_wait/chorus_waitall/chorus_waitany that completes it, or by the chorus_test that
 * reports it done: the pointer is invalid after that. */
typedef struct chorus_request chorus_request; /* opaque */

/* How a request ended, or what a probe found. */
typedef struct chorus_status {
    int source;           /* the sender's rank in the communicator (for a send: the destination) */
    int tag;              /* the message's tag */
    size_t count;         /* elements received (<= the receive's count; 0: none), sent, probed */
    chorus_dtype dtype;   /* the message's dtype */
    chorus_result result; /* how this request ended (for chorus_waitall) */
} chorus_status;

/* Starts sending count elements of dtype t from buf to rank peer with tag (>= 0) and returns
 * at once with *req. buf must stay untouched until the request completes. The send completes
 * once the message is handed to the transport (it may not have been received yet).
 * Errors: CHORUS_ERR_INVALID_ARG (NULL req, unknown dtype, peer out of range or this rank, tag
 * < 0, NULL buf with count > 0; nothing is sent), or the error that broke the communicator.
 * On error *req is NULL. Not thread-safe with other calls on the same communicator. */
chorus_result chorus_isend(chorus_comm *c, const void *buf, size_t count, chorus_dtype t, int peer,
                           int tag, chorus_request **req);

/* Starts receiving up to count elements of dtype t into buf from rank peer (or
 * CHORUS_ANY_SOURCE) with tag (or CHORUS_ANY_TAG) and returns at once with *req. A message
 * shorter than count is accepted: the status's count says how many elements arrived (as
 * MPI). buf must stay valid until the request completes. Errors as chorus_isend (a communicator
 * of one rank has no source for CHORUS_ANY_SOURCE); on error *req is NULL. */
chorus_result chorus_irecv(chorus_comm *c, void *buf, size_t count, chorus_dtype t, int peer,
                           int tag, chorus_request **req);

/* Waits until req completes, fills *status (may be NULL) and frees req. Returns the request's
 * result: CHORUS_OK; CHORUS_ERR_MISMATCH (receive: the message had another dtype or more
 * elements; status says what was sent); CHORUS_ERR_PEER_LOST or CHORUS_ERR_TIMEOUT when the
 * communicator broke (a dead peer, or no progress for CHORUS_TIMEOUT_S: the wait then breaks
 * the communicator, naming the peer). chorus_last_error() has the detail.
 * CHORUS_ERR_INVALID_ARG for a NULL req (detail in chorus_last_error(NULL)). */
chorus_result chorus_wait(chorus_request *req, chorus_status *status);

/* Drives progress without blocking. When req is complete (successfully or not) sets *done = 1,
 * fills *status (may be NULL), frees req and returns its result as chorus_wait; otherwise sets
 * *done = 0 and returns CHORUS_OK (req stays valid). Requests may be tested in any order. */
chorus_result chorus_test(chorus_request *req, int *done, chorus_status *status);

/* Waits for every non-NULL reqs[i] (in any order), sets it to NULL and fills statuses[i] (the
 * array may be NULL). Returns CHORUS_OK or the first failed request's result; the others are
 * completed and freed all the same. */
chorus_result chorus_waitall(int n, chorus_request **reqs, chorus_status *statuses);

/* Waits until one of the non-NULL reqs completes, frees it, sets reqs[*index] to NULL and fills
 * *status; returns its result. All requests must belong to communicators of one chorus_init
 * (the world and its splits). With no non-NULL request, *index = -1 and CHORUS_OK. */
chorus_result chorus_waitany(int n, chorus_request **reqs, int *index, chorus_status *status);

/* Blocks until a message from source (or CHORUS_ANY_SOURCE) with tag (or CHORUS_ANY_TAG) can be
 * received, and describes it in *status without receiving it; a chorus_irecv/chorus_recv from
 * status->source with status->tag then gets that very message. Waits at most CHORUS_TIMEOUT_S
 * (then CHORUS_ERR_TIMEOUT, which breaks the communicator). Errors as chorus_irecv. */
chorus_result chorus_probe(chorus_comm *c, int source, int tag, chorus_status *status);

/* chorus_probe without blocking: *flag = 1 and *status when such a message is there, else
 * *flag = 0. */
chorus_result chorus_iprobe(chorus_comm *c, int source, int tag, int *flag, chorus_status *status);

/* Blocking send: chorus_isend then chorus_wait. */
chorus_result chorus_send(chorus_comm *c, const void *buf, size_t count, chorus_dtype t, int peer,
                          int tag);
/* Blocking receive: chorus_irecv then chorus_wait, but the message must have exactly count
 * elements (there is no status to tell a shorter one): otherwise CHORUS_ERR_MISMATCH. */
chorus_result chorus_recv(chorus_comm *c, void *buf, size_t count, chorus_dtype t, int peer,
                          int tag);

/* Collective over c: ranks with the same color form a new communicator, ordered by key (then
 * by rank in c). color < 0 gives *out = NULL (the rank joins no group). */
chorus_result chorus_comm_split(chorus_comm *c, int color, int key, chorus_comm **out);

/* Collective over the listed ranks of c only (MPI_Comm_create_group): every rank in
 * ranks[0..n-1] calls it with the same list and tag, and no other rank takes part. *out gets
 * a communicator of those ranks, rank i of it being ranks[i] of c; it shares c's connections
 * (a split, usable from another thread than c) and uses shared memory when its ranks share a
 * host. The tag tells apart two groups of the same ranks (a different tag is a different
 * communicator). Nothing is exchanged to agree on the group, so ranks that pass different
 * lists get communicators that cannot hear each other (their calls time out). Errors:
 * CHORUS_ERR_INVALID_ARG for a NULL argument, a rank out of range or listed twice, or a
 * calling rank not in the list (*out is NULL, nothing is sent); else as chorus_comm_split. */
chorus_result chorus_comm_create_group(chorus_comm *c, int n, const int *ranks, uint64_t tag,
                                       chorus_comm **out);

/* How chorus_comm_split_type groups ranks. Ranks are on one host when they share the host
 * name, the boot and the network namespace. */
typedef enum {
    CHORUS_SPLIT_HOST = 0,        /* the ranks of c on this rank's host */
    CHORUS_SPLIT_HOST_LEADERS = 1 /* the lowest rank of c on each host; the others get NULL */
} chorus_split_type;

/* Collective over c (every rank calls it, with the same type): splits c by topology, like
 * MPI_Comm_split_type. The new communicator's ranks are ordered by key, then by rank in c. A
 * communicator of CHORUS_SPLIT_HOST has all its ranks on one host and so uses shared memory
 * for its collectives (unless CHORUS_SHM=0 or the segment cannot be made, then TCP, with a
 * warning), also when c spans several hosts. Returns CHORUS_ERR_INVALID_ARG for a NULL
 * argument or an unknown type (nothing is sent then), else what chorus_comm_split returns
 * (peer failures, CHORUS_ERR_NOMEM). *out must be finalized by its owner; it may be used from
 * another thread than c, as any split communicator. */
chorus_result chorus_comm_split_type(chorus_comm *c, chorus_split_type type, int key,
                                     chorus_comm **out);

/* Size in bytes of one element of t, or 0 for an unknown dtype. */
size_t chorus_dtype_size(chorus_dtype t);

/* Name and one-line meaning of a result code (a static string; "unknown chorus_result" for a
 * value outside the table). Thread-safe. */
const char *chorus_strerror(chorus_result r);

/* The version of the library that is loaded, "major.minor.patch" (a static string; any
 * thread). A program built against this header can compare it with CHORUS_VERSION_STRING to
 * see which library it runs with. */
const char *chorus_version(void);

/* Names of the enumerations, for bindings that read them from the library instead of copying
 * them: chorus_result_name(CHORUS_ERR_TIMEOUT) is "CHORUS_ERR_TIMEOUT", chorus_dtype_name
 * (CHORUS_FLOAT32) is "float32", chorus_op_name(CHORUS_SUM) is "sum". Each returns NULL for a
 * value outside its enumeration, so a caller can walk 0, 1, ... until NULL. Static strings;
 * any thread. */
const char *chorus_result_name(int r);
const char *chorus_dtype_name(int t);
const char *chorus_op_name(int op);

/* Detail of the last failure on c, or with c NULL of this thread's last failed call that had no
 * communicator (chorus_init, chorus_config_set, ...); "" when none (the convention above). */
const char *chorus_last_error(const chorus_comm *c);

/* 1 when the variable `name` is set to a non-empty value, by chorus_config_set or in the
 * environment, else 0 (also for a NULL name). For programs that pick their own default for a
 * CHORUS_* variable and let the user's setting win. Reads the environment at the time of the
 * call; thread-safe as long as no thread changes the environment. */
int chorus_config_is_set(const char *name);
/* The value of the variable `name` as the library sees it now (chorus_config_set's, else the
 * environment's), NULL when unset or empty (or for a NULL name). The text as given, not
 * checked; it lives as long as the process. Thread-safe as chorus_config_is_set. */
const char *chorus_config_get(const char *name);

/* Sets a variable for this process only, as if its environment said name=value, without
 * touching the environment (child processes do not see it): for bindings and programs that
 * pass options to the library in the process (Python's chorus.torch.distributed passes the
 * meeting point and the deadline to chorus_init this way). `name` is a CHORUS_* variable of
 * the table (chorus-run --help-env) or one of the launcher variables chorus_init reads (RANK,
 * WORLD_SIZE, MASTER_ADDR, ...). The value is checked as the environment's would be; it wins
 * over the environment wherever the library reads the variable next: chorus_init and the other
 * entry points read it then, the settings read once per process (logging, deadlines outside a
 * communicator) only when not read yet. value NULL (or "") removes the process's setting, and
 * the environment's value applies again. CHORUS_ERR_INVALID_ARG for an unknown name or a
 * malformed value (the variable and what it expects in chorus_last_error(NULL)), nothing then
 * set; CHORUS_ERR_NOMEM. Thread-safe. */
chorus_result chorus_config_set(const char *name, const char *value);

/* Sets, for communicator c only, a variable its collectives read at every call: a
 * CHORUS_ALGO_<COLLECTIVE> (value NULL or "": the rules choose again), CHORUS_TCP_ONESHOT_MAX or
 * CHORUS_BCAST_TREE_MAX; the communicators split from c later inherit it. For programs that
 * change a communicator's settings between calls (chorus-bench --algo forces each algorithm in
 * turn). Every rank of c must make the same setting between the same calls. The value is
 * checked as chorus_init checks the environment's (an algorithm name against the collective's
 * algorithms). CHORUS_ERR_INVALID_ARG for another name, an unknown algorithm or a malformed
 * value (the reason in chorus_last_error(c)), nothing then changed. Not thread-safe with calls
 * on c. */
chorus_result chorus_comm_config_set(chorus_comm *c, const char *name, const char *value);

/* This host's address for a service other ranks must reach, chosen as libchorus chooses the
 * one its rank 0 serves the rendezvous store on when the launcher gives no meeting point
 * (several hosts under mpirun): CHORUS_IFACE's IPv4 address when set, else the host's first
 * IPv4 address that is up and not loopback, else 127.0.0.1. Writes it, NUL-terminated, to ip
 * (at least 16 bytes). CHORUS_ERR_ENV when CHORUS_IFACE names no interface with an IPv4
 * address (chorus_last_error(NULL) says so); CHORUS_ERR_INVALID_ARG for a NULL or short ip. */
chorus_result chorus_host_address(char *ip, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_H */
